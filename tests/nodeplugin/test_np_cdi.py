"""CDI specs: valid against a schema written from the CDI spec's field list, named per claim,
with the lowest cdiVersion their content needs."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from npfixtures import gpu_allocation, mig_allocation, ref

from drasat.nodeplugin import cdi
from drasat.testbed import fakedriver

_NAME = "^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_STRINGS = {"type": "array", "items": {"type": "string"}}
_EDITS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
        "deviceNodes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["path"],
                "properties": {
                    "path": {"type": "string", "pattern": "^/"},
                    "hostPath": {"type": "string", "pattern": "^/"},
                    "type": {"enum": ["b", "c", "u", "p"]},
                    "major": {"type": "integer"},
                    "minor": {"type": "integer"},
                    "fileMode": {"type": "integer"},
                    "permissions": {"type": "string", "pattern": "^[rwm]*$"},
                    "uid": {"type": "integer"},
                    "gid": {"type": "integer"},
                },
            },
        },
        "mounts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["hostPath", "containerPath"],
                "properties": {
                    "hostPath": {"type": "string"},
                    "containerPath": {"type": "string", "pattern": "^/"},
                    "options": _STRINGS,
                    "type": {"type": "string"},
                },
            },
        },
        "hooks": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["hookName", "path"],
                "properties": {
                    "hookName": {
                        "enum": [
                            "prestart",
                            "createRuntime",
                            "createContainer",
                            "startContainer",
                            "poststart",
                            "poststop",
                        ]
                    },
                    "path": {"type": "string", "pattern": "^/"},
                    "args": _STRINGS,
                    "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
                    "timeout": {"type": "integer"},
                },
            },
        },
        "additionalGids": {"type": "array", "items": {"type": "integer"}},
        "intelRdt": {"type": "object"},
    },
}
#: The CDI spec's JSON format (SPEC.md "CDI JSON Specification"), as a JSON schema.
CDI_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cdiVersion", "kind", "devices"],
    "properties": {
        "cdiVersion": {"enum": ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0"]},
        "kind": {
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$",
        },
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "containerEdits"],
                "properties": {
                    "name": {"type": "string", "pattern": _NAME},
                    "annotations": {"type": "object"},
                    "containerEdits": _EDITS,
                },
            },
        },
        "containerEdits": _EDITS,
    },
}

UID = "5b0a6c1e-1111-4a6f-9f0e-000000000001"


def test_schema_rejects_a_broken_spec() -> None:
    """Guards the guard: the schema check would catch a wrong field."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"cdiVersion": "0.5.0", "kind": "x/y", "devices": [{"name": "a"}]}, CDI_SCHEMA
        )


@pytest.mark.parametrize("kind", ["exclusive", "mig", "mps"])
def test_prepared_specs_are_valid(node_factory: Any, short_tmp: Any, kind: str) -> None:
    root = fakedriver.make(short_tmp / "driver")
    node = node_factory("2xA100-40GB,mig=1", driver_root=str(root), proc_root=root / "proc")
    if kind == "mig":
        node.allocate(UID, mig_allocation(UID, node.gpu(1), "2g.10gb", 2, 2))
    else:
        sharing = {"strategy": "MPS"} if kind == "mps" else None
        node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    (device_id,) = node.state.prepare(ref(UID))
    assert device_id == f"k8s.gpu.drasat.io/claim={UID}"
    files = list(node.config.cdi_root.iterdir())
    assert [f.name for f in files] == [f"k8s.gpu.drasat.io-claim_{UID}.json"]
    spec = json.loads(files[0].read_text())
    jsonschema.validate(spec, CDI_SCHEMA)
    assert spec["kind"] == "k8s.gpu.drasat.io/claim"
    assert [d["name"] for d in spec["devices"]] == [UID]
    # a uid starting with a digit and hostPath both need 0.5.0
    assert spec["cdiVersion"] == "0.5.0"
    host_paths = [n["hostPath"] for n in spec["containerEdits"]["deviceNodes"]]
    assert f"{root}/dev/nvidiactl" in host_paths
    assert {h["args"][1] for h in spec["containerEdits"]["hooks"]} == {
        "create-symlinks",
        "update-ldcache",
        "disable-device-node-modification",
    }


def test_one_file_per_claim(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    for i, uid in enumerate(("a-claim", "b-claim")):
        node.allocate(uid, gpu_allocation(uid, node.gpu(i)))
        node.state.prepare(ref(uid))
    assert node.state.cdi.claim_uids() == ["a-claim", "b-claim"]
    node.state.unprepare(ref("a-claim"))
    assert node.state.cdi.claim_uids() == ["b-claim"]


def _spec(**extra: Any) -> dict[str, Any]:
    device = {
        "name": extra.pop("name", "gpu"),
        "containerEdits": extra.pop("edits", {"env": ["A=1"]}),
    }
    return {"cdiVersion": "", "kind": extra.pop("kind", cdi.KIND), "devices": [device], **extra}


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (_spec(), "0.3.0"),  # nothing newer used: the earliest version runtimes accept
        (
            _spec(edits={"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]}),
            "0.4.0",
        ),
        (_spec(name="0abc"), "0.5.0"),  # a device name starting with a digit
        (_spec(edits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/h/dev/x"}]}), "0.5.0"),
        (_spec(annotations={"a": "b"}), "0.6.0"),
        (_spec(kind="example.com/a.b"), "0.6.0"),  # a dot in the class
        (_spec(edits={"additionalGids": [5]}), "0.7.0"),
    ],
)
def test_minimum_version(spec: dict[str, Any], version: str) -> None:
    assert cdi.minimum_version(spec) == version


def test_letter_uid_without_host_paths_is_0_3_0() -> None:
    spec = cdi.claim_spec("claim-a", cdi.ClaimEdits(env={"X": "1"}, device_nodes=("/dev/nvidia0",)))
    assert spec["cdiVersion"] == "0.3.0"
    jsonschema.validate(spec, CDI_SCHEMA)


def test_mig_capability_nodes_from_proc(node_factory: Any, short_tmp: Any) -> None:
    """Without a driver root (the simulated fleet) the capability nodes are still located where
    the proc file exists, as NVIDIA's tooling reads it (not checked under a dev root)."""
    proc = short_tmp / "proc"
    minors = proc / "driver" / "nvidia-caps" / "mig-minors"
    minors.parent.mkdir(parents=True)
    minors.write_text("config 1\nmonitor 2\ngpu1/gi1/access 21\ngpu1/gi1/ci0/access 22\n")
    node = node_factory("2xA100-40GB,mig=1", proc_root=proc)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "7g.40gb", 0, 8))
    node.state.prepare(ref(UID))
    spec = json.loads(node.state.cdi.path(UID).read_text())
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths[-3:] == [
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    jsonschema.validate(spec, CDI_SCHEMA)
