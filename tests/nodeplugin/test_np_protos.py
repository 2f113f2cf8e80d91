"""The checked-in gRPC stubs match the .proto files and import as drasat.nodeplugin.gen."""

from __future__ import annotations

import re
from pathlib import Path

from drasat.nodeplugin import protogen

# protoc stamps its own and the runtime's versions; a newer grpcio-tools may change only those.
_VERSION_LINES = re.compile(
    r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|\s+\d+,|\s+'',)$", re.MULTILINE
)


def _normalized(path: Path) -> str:
    return _VERSION_LINES.sub("", path.read_text())


def test_checked_in_stubs_are_fresh(tmp_path: Path) -> None:
    fresh = {p.name: p for p in protogen.generate(tmp_path)}
    checked_in = {p.name: p for p in protogen.GEN.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(checked_in), "run: python -m drasat.nodeplugin.protogen"
    stale = [n for n in fresh if _normalized(fresh[n]) != _normalized(checked_in[n])]
    assert not stale, f"stale stubs {stale}; run: python -m drasat.nodeplugin.protogen"


def test_stubs_have_the_kubelet_names() -> None:
    from drasat.nodeplugin.gen import dra_v1_pb2, dra_v1alpha3_pb2, pluginregistration_v1_pb2

    assert dra_v1alpha3_pb2.DESCRIPTOR.services_by_name["Node"].full_name == "v1alpha3.Node"
    v1 = dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
    assert v1 == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    claim = dra_v1alpha3_pb2.Claim.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in claim.items()} == {
        "namespace": 1,
        "uid": 2,
        "name": 3,
        "resource_handle": 4,
    }
    info = pluginregistration_v1_pb2.PluginInfo.DESCRIPTOR
    assert info.full_name == "pluginregistration.PluginInfo"
    assert info.fields_by_name["supported_versions"].number == 4


def test_grpc_stubs_import_package_relative() -> None:
    text = (protogen.GEN / "dra_v1alpha3_pb2_grpc.py").read_text()
    assert "from . import dra_v1alpha3_pb2" in text
    assert not re.search(r"^import \w+_pb2", text, re.MULTILINE)
