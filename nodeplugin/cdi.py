"""CDI specs: one file per claim in the CDI root (kind `k8s.gpu.drasat.io/claim`).

`claim_spec` computes a spec from what a claim was given (pure: no side effects); `minimum_version`
is the lowest `cdiVersion` its content needs, by the CDI specification's version rules (0.3.0 is
the earliest runtimes accept; 0.4.0 added mount `type`; 0.5.0 allowed device names that start with
a digit and device-node `hostPath`; 0.6.0 added annotations and dots in the class; 0.7.0 added
`additionalGids` and `intelRdt`). Runtimes cache specs by name, so a claim's device name is its UID.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drasat.nodeplugin.checkpoint import write_atomic

VENDOR = "k8s.gpu.drasat.io"
CLASS = "claim"
KIND = f"{VENDOR}/{CLASS}"
#: Device nodes every container with an NVIDIA GPU needs besides its GPUs' own.
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ("rw", "nosuid", "nodev", "bind")
    type: str = ""


@dataclass(frozen=True)
class ClaimEdits:
    """What a container using the claim gets: environment, device nodes, mounts."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()


def mig_capability_nodes(proc_root: Path, *, minor: int, gi_id: int, ci_id: int) -> list[str]:
    """The /dev/nvidia-caps nodes a container needs to use one MIG device.

    The driver publishes them as `DeviceFileMinor: N` in
    `<proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/access` (and `.../ci<ci>/access`);
    none are returned where the files do not exist (no driver, or the simulated fleet)."""
    base = proc_root / "driver" / "nvidia" / "capabilities" / f"gpu{minor}" / "mig" / f"gi{gi_id}"
    nodes = []
    for access in (base / "access", base / f"ci{ci_id}" / "access"):
        try:
            text = access.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "DeviceFileMinor" and value.strip().isdigit():
                nodes.append(f"/dev/nvidia-caps/nvidia-cap{int(value)}")
    return nodes


def device_id(claim_uid: str) -> str:
    """The fully qualified CDI device name the kubelet passes to the runtime."""
    return f"{KIND}={claim_uid}"


def spec_file_name(claim_uid: str) -> str:
    return f"{VENDOR}-{CLASS}_{claim_uid}.json"


def claim_spec(claim_uid: str, edits: ClaimEdits, *, driver_root: str = "/") -> dict[str, Any]:
    """The CDI spec of one claim. This is a purely computational function with no side effects."""
    root = driver_root.rstrip("/")
    nodes = []
    for path in edits.device_nodes:
        node: dict[str, Any] = {"path": path}
        if root:
            node["hostPath"] = f"{root}{path}"
        nodes.append(node)
    container_edits: dict[str, Any] = {
        "env": [f"{k}={v}" for k, v in sorted(edits.env.items())],
    }
    if nodes:
        container_edits["deviceNodes"] = nodes
    if edits.mounts:
        container_edits["mounts"] = [_mount(m) for m in edits.mounts]
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": KIND,
        "devices": [{"name": claim_uid, "containerEdits": container_edits}],
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def _mount(mount: Mount) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hostPath": mount.host_path,
        "containerPath": mount.container_path,
        "options": list(mount.options),
    }
    if mount.type:
        out["type"] = mount.type
    return out


def minimum_version(spec: dict[str, Any]) -> str:
    """Lowest cdiVersion that allows everything in `spec` (the CDI spec's own rules)."""
    devices = spec.get("devices", [])
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in devices]
    _, _, klass = str(spec.get("kind", "")).partition("/")
    if any(e.get("additionalGids") or e.get("intelRdt") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in klass:
        return "0.6.0"
    digit_name = any(d.get("name", "")[:1] and not d["name"][0].isalpha() for d in devices)
    host_path = any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", []))
    if digit_name or host_path:
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


class CdiWriter:
    """Writes and removes claim spec files in the CDI root (default /var/run/cdi)."""

    def __init__(self, root: Path, *, driver_root: str = "/") -> None:
        self.root = root
        self.driver_root = driver_root

    def path(self, claim_uid: str) -> Path:
        return self.root / spec_file_name(claim_uid)

    def write(self, claim_uid: str, edits: ClaimEdits) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        spec = claim_spec(claim_uid, edits, driver_root=self.driver_root)
        path = self.path(claim_uid)
        write_atomic(path, json.dumps(spec, indent=2) + "\n", mode=0o644)
        return path

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)

    def claim_uids(self) -> list[str]:
        prefix, suffix = f"{VENDOR}-{CLASS}_", ".json"
        return sorted(
            p.name.removeprefix(prefix).removesuffix(suffix)
            for p in self.root.glob(f"{prefix}*{suffix}")
        )
