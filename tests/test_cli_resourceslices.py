"""`drasat resourceslices`: prints exactly what the node plugin publishes (same code path)."""

from __future__ import annotations

import json

import pytest
import yaml

from drasat.cli import main
from drasat.nodeplugin import slicepublisher
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.simnvml import SimulatedNvml

SPEC = "2xA100-40GB,1xT4,mig=0+1"


def test_yaml_is_what_the_plugin_publishes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["resourceslices", "--node-name", "n1", "--simulate-gpus", SPEC]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    fleet = SimulatedNvml(SPEC)
    lib = NvmlDeviceLib(fleet, run=fleet.run)
    expected = slicepublisher.desired(
        "n1", slicepublisher.inventory(lib, shares=True)
    )  # shares by default
    assert printed == expected
    counters, devices = printed
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == [
        "gpu-0-counter-set",
        "gpu-1-counter-set",
    ]
    names = [d["name"] for d in devices["spec"]["devices"]]
    # 2 A100s x (whole GPU + 25 placements of 7 profiles) + the T4 + cpu-fallback.
    assert len(names) == 2 * 26 + 2
    assert names[-2:] == ["gpu-2", "cpu-fallback"]
    assert "gpu-1-mig-1g5gbme-20-6" in names


def test_json_with_classes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["resourceslices", "--node-name", "n", "--simulate-gpus", "1xT4", "-o", "json"]
    assert main.main([*argv, "--with-classes", "--no-fallback"]) == 0
    listed = json.loads(capsys.readouterr().out)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in listed["items"]]
    assert kinds == [
        ("DeviceClass", "gpu.drasat.io"),
        ("DeviceClass", "mig.drasat.io"),
        ("DeviceClass", "cpu-fallback.drasat.io"),
        ("ResourceSlice", "n-gpu.drasat.io-0"),
    ]


def test_without_a_node_name_it_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("DRASAT_NODE_NAME", raising=False)
    assert main.main(["resourceslices", "--simulate-gpus", "1xT4"]) == 2
    assert "--node-name" in capsys.readouterr().err


def test_shares_make_non_mig_gpus_shareable(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["resourceslices", "--node-name", "n", "--simulate-gpus", "1xA100-40GB,1xT4,mig=0"]
    assert main.main([*argv, "--shares"]) == 0
    _, devices = yaml.safe_load_all(capsys.readouterr().out)
    shareable = [d["name"] for d in devices["spec"]["devices"] if d.get("allowMultipleAllocations")]
    # The T4 and the fallback device; never a GPU in MIG mode or a MIG placement.
    assert shareable == ["gpu-1", "cpu-fallback"]
    assert main.main([*argv, "--no-shares"]) == 0
    _, devices = yaml.safe_load_all(capsys.readouterr().out)
    shareable = [d["name"] for d in devices["spec"]["devices"] if d.get("allowMultipleAllocations")]
    assert shareable == ["cpu-fallback"]


def test_without_nvml_it_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from drasat.nodeplugin import nvml
    from drasat.nodeplugin.devicelib import DeviceError

    def no_nvml(*_: object, **__: object) -> None:
        raise DeviceError("nvmlInit: NVML_ERROR_LIBRARY_NOT_FOUND")

    monkeypatch.setattr(nvml.NvmlDeviceLib, "__init__", no_nvml)
    assert main.main(["resourceslices", "--node-name", "n"]) == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "NVML_ERROR_LIBRARY_NOT_FOUND" in err and "--simulate-gpus" in err
    )
