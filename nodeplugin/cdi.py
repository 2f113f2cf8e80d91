"""CDI specs: one file per claim in the CDI root (kind `k8s.gpu.drasat.io/claim`).

A claim's spec has a device named by the claim's UID (runtimes cache specs by name), whose
edits are the whole claim's (all its GPUs' or MIG devices' nodes, environment, MPS mounts): what a
classic-DRA kubelet gets (one list of CDI devices per claim). A v1 claim's spec also has one
device per allocated device, `<claim uid>-<device name>` (the device model's name, `gpu-0`,
`gpu-0-mig-1g5gb-19-0`, `cpu-fallback`: letters, digits and `-`, valid CDI device names), with
that device's own nodes, the environment of the devices of its request and the claim-wide edits
(MPS mounts and limits, share limits): the kubelet gives a container the CDI devices of exactly
the requests it names, and keys device health by each device's first CDI id. And, at the spec
level, the driver's edits every GPU container needs (`driver_edits`): control device
nodes, the driver's libraries, binaries and firmware bound read-only, and the
`nvidia-cdi-hook` hooks that refresh the container's linker cache and create the links
applications expect — what NVIDIA's container toolkit puts in its generated specs. They are found
once per plugin start (`DriverEdits`, `driverfiles.discover`) and the same in every spec.

With `CdiMode.toolkit` the node's own toolkit spec (`nvidia.com/gpu=...`, from `nvidia-ctk cdi
generate`) provides the GPUs and the driver: the claim's spec keeps only what is the claim's
(environment, MIG capability nodes, MPS mounts) and the kubelet gets the toolkit's device names
beside the claim's (`ToolkitDevices`).

`claim_spec` computes a spec (pure: no side effects); `minimum_version` is the lowest
`cdiVersion` its content needs, by the CDI specification's version rules (0.3.0 is the earliest
runtimes accept, and already has hooks; 0.4.0 added mount `type`; 0.5.0 allowed device names that
start with a digit and device-node `hostPath`; 0.6.0 added annotations and dots in the class;
0.7.0 added `additionalGids` and `intelRdt`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from drasat import loading
from drasat.api.inputerrors import InputError
from drasat.nodeplugin import driverfiles
from drasat.nodeplugin.checkpoint import write_atomic
from drasat.nodeplugin.driverfiles import DriverFilesError, Roots

log = logging.getLogger(__name__)

VENDOR = "k8s.gpu.drasat.io"
CLASS = "claim"
KIND = f"{VENDOR}/{CLASS}"
#: Device nodes every container with an NVIDIA GPU needs besides its GPUs' own, listed as they
#: are when the driver is not discovered (the simulated fleet without a driver root).
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def undiscovered_driver_note(proc_root: str) -> str:
    """What a simulated fleet without a driver root warns (the node plugin, `drasat cdi-spec`)."""
    return (
        "SIMULATED GPUs without --driver-root: CDI specs carry device nodes and environment "
        "only (no driver libraries, binaries, firmware or hooks; MIG capability nodes only "
        f"where {proc_root}/driver/nvidia-caps/mig-minors exists)"
    )


#: Where the container toolkit installs its hook binary on the host (the toolkit's default).
HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
#: The toolkit's options for driver files: read-only, recursive, private (`internal/discover`).
DRIVER_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
TOOLKIT_KIND = "nvidia.com/gpu"


class CdiMode(StrEnum):
    """Who puts the driver into containers: drasat's own specs, or the node's toolkit spec."""

    drasat = "drasat"
    toolkit = "toolkit"


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ("rw", "nosuid", "nodev", "bind")
    type: str = ""


@dataclass(frozen=True)
class Hook:
    """An OCI hook the runtime runs (`createContainer`: in the container's mount namespace)."""

    path: str
    args: tuple[str, ...]
    hook_name: str = "createContainer"
    env: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimEdits:
    """What a container using the claim gets: environment, device nodes, mounts, hooks."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()


def driver_edits(
    files: driverfiles.DriverFiles, *, driver_root: str, hook_path: str = HOOK_PATH
) -> ClaimEdits:
    """The spec-level edits of the driver `files` found under `driver_root` (the host's path).

    Hooks are those of `nvidia-ctk cdi generate` (`internal/discover/hooks.go`): the hook binary
    gets its own name as argv[0], `create-symlinks --link target::link ...`, `update-ldcache
    --folder <dir> ...` for the folders of the mounted libraries and
    `disable-device-node-modification`; no hook without a `hook_path`.
    This is a purely computational function with no side effects."""
    mounts = tuple(
        Mount(driverfiles.join(driver_root, files.sources.get(p, p)), p, DRIVER_MOUNT_OPTIONS)
        for p in files.paths()
    )
    hooks: list[Hook] = []
    name = hook_path.rpartition("/")[2]
    env = ("NVIDIA_CTK_DEBUG=false",)
    if hook_path and files.links:
        args = [a for link in files.links for a in ("--link", link)]
        hooks.append(Hook(hook_path, (name, "create-symlinks", *args), env=env))
    folders = list(dict.fromkeys(p.rpartition("/")[0] or "/" for p in files.libraries))
    if hook_path and folders:
        args = [a for folder in folders for a in ("--folder", folder)]
        hooks.append(Hook(hook_path, (name, "update-ldcache", *args), env=env))
    if hook_path:
        # The container's /proc/driver/nvidia/params says ModifyDeviceFiles: 0, so that
        # libnvidia-ml and nvidia-smi in it never create the device nodes of GPUs the spec does
        # not give it (the toolkit's specs carry this hook since its 1.17.8).
        hooks.append(Hook(hook_path, (name, "disable-device-node-modification"), env=env))
    return ClaimEdits(device_nodes=files.control_nodes, mounts=mounts, hooks=tuple(hooks))


class DriverEdits:
    """The driver's part of every claim spec, found once and cached (thread-safe).

    `roots` None: not discovered (the simulated fleet without a driver root): the control nodes
    are listed unchecked and no driver file is mounted. A failed discovery is an error for the
    prepare that needed it and is tried again by the next one (a driver container may mount the
    root later)."""

    def __init__(
        self,
        roots: Roots | None,
        version: Callable[[], str],
        *,
        hook_path: str = HOOK_PATH,
        mode: CdiMode = CdiMode.drasat,
        proc_root: str = "/proc",
    ) -> None:
        self.roots = roots
        self.proc_root = roots.proc_root if roots is not None else proc_root
        self.mode = mode
        self._version = version
        self._hook_path = hook_path
        self._lock = threading.Lock()
        self._edits: ClaimEdits | None = None
        self.files: driverfiles.DriverFiles | None = None

    @property
    def discovered(self) -> bool:
        return self.roots is not None

    def get(self) -> ClaimEdits:
        """The spec-level edits; DriverFilesError naming what is missing."""
        if self.mode is CdiMode.toolkit:
            return ClaimEdits()  # the toolkit's spec has them
        if self.roots is None:
            return ClaimEdits(device_nodes=CONTROL_DEVICES)
        with self._lock:
            if self._edits is None:
                files = driverfiles.discover(self.roots, self._version())
                for note in files.notes:
                    log.warning("driver files: %s", note)
                log.warning(
                    "driver %s under %s: %d libraries (from the %s), %d binaries, %d firmware "
                    "files, control nodes %s",
                    files.version,
                    self.roots.driver_root,
                    len(files.libraries),
                    files.found_in,
                    len(files.binaries),
                    len(files.firmware),
                    ", ".join(files.control_nodes),
                )
                self.files = files
                self._edits = driver_edits(
                    files, driver_root=self.roots.driver_root, hook_path=self._hook_path
                )
            return self._edits

    def gpu_nodes(self, minor: int) -> list[str]:
        """A whole GPU's device node (checked present when discovered; the toolkit's device
        carries it in toolkit mode)."""
        if self.mode is CdiMode.toolkit:
            return []
        if self.roots is None:
            return [f"/dev/nvidia{minor}"]
        return [driverfiles.gpu_node(self.roots, minor)]

    def mig_nodes(self, *, minor: int, gi_id: int, ci_id: int) -> list[str]:
        """A MIG device's capability nodes, located from `<proc>/driver/nvidia-caps/mig-minors`
        and checked present under the dev root. Without discovery (the simulated fleet, which
        has no such file unless a test writes one) they are located where the file exists and
        not checked."""
        if self.roots is not None:
            return driverfiles.mig_capability_nodes(
                self.roots, minor=minor, gi_id=gi_id, ci_id=ci_id
            )
        roots = Roots(proc_root=self.proc_root)
        if not Path(driverfiles.join(self.proc_root, driverfiles.MIG_MINORS)).exists():
            return []
        return driverfiles.mig_capability_nodes(
            roots, minor=minor, gi_id=gi_id, ci_id=ci_id, check_nodes=False
        )


def device_name(claim_uid: str, device: str = "") -> str:
    """The CDI device name of the whole claim (`device` ""), or of one of its devices."""
    return f"{claim_uid}-{device}" if device else claim_uid


def device_id(claim_uid: str, device: str = "") -> str:
    """The fully qualified CDI device name the kubelet passes to the runtime: the whole claim's
    (`device` ""), or one allocated device's (`device`: its name in the device model)."""
    return f"{KIND}={device_name(claim_uid, device)}"


def spec_file_name(claim_uid: str) -> str:
    return f"{VENDOR}-{CLASS}_{claim_uid}.json"


def claim_spec(
    claim_uid: str,
    edits: ClaimEdits,
    *,
    driver_root: str = "/",
    common: ClaimEdits | None = None,
    devices: Mapping[str, ClaimEdits] | None = None,
) -> dict[str, Any]:
    """The CDI spec of one claim: `edits` on the claim's device, each of `devices` (device name
    -> its edits) on a device of its own, `common` (the driver's) at the spec level; device
    nodes get `hostPath` under `driver_root` (the dev root) unless it is `/`.
    This is a purely computational function with no side effects."""
    entries = [(device_name(claim_uid), edits)]
    entries += [(device_name(claim_uid, d), e) for d, e in (devices or {}).items()]
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": KIND,
        "devices": [
            {"name": name, "containerEdits": _container_edits(e, driver_root, with_env=True)}
            for name, e in entries
        ],
    }
    shared = _container_edits(common, driver_root) if common is not None else {}
    if shared:
        spec["containerEdits"] = shared
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def _with_nodes_first(edits: ClaimEdits, nodes: tuple[str, ...]) -> ClaimEdits:
    return ClaimEdits(
        env=edits.env,
        device_nodes=(*nodes, *edits.device_nodes),
        mounts=edits.mounts,
        hooks=edits.hooks,
    )


def _container_edits(edits: ClaimEdits, dev_root: str, *, with_env: bool = False) -> dict[str, Any]:
    root = dev_root.rstrip("/")
    nodes = []
    for path in edits.device_nodes:
        node: dict[str, Any] = {"path": path}
        if root:
            node["hostPath"] = f"{root}{path}"
        nodes.append(node)
    out: dict[str, Any] = {}
    if with_env or edits.env:
        out["env"] = [f"{k}={v}" for k, v in sorted(edits.env.items())]
    if nodes:
        out["deviceNodes"] = nodes
    if edits.mounts:
        out["mounts"] = [_mount(m) for m in edits.mounts]
    if edits.hooks:
        out["hooks"] = [_hook(h) for h in edits.hooks]
    return out


def _hook(hook: Hook) -> dict[str, Any]:
    out: dict[str, Any] = {"hookName": hook.hook_name, "path": hook.path, "args": list(hook.args)}
    if hook.env:
        out["env"] = list(hook.env)
    return out


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
    """Writes and removes claim spec files in the CDI root (default /var/run/cdi).

    `driver_root`: the host's dev root, the prefix of device nodes' `hostPath`; `driver`: the
    driver's part of every spec (none: the control nodes only, as without discovery)."""

    def __init__(
        self,
        root: Path,
        *,
        driver_root: str = "/",
        driver: DriverEdits | None = None,
        toolkit: ToolkitDevices | None = None,
    ) -> None:
        self.root = root
        self.driver_root = driver_root
        self.driver = driver or DriverEdits(None, lambda: "")
        self.toolkit = toolkit

    def path(self, claim_uid: str) -> Path:
        return self.root / spec_file_name(claim_uid)

    def spec(
        self,
        claim_uid: str,
        edits: ClaimEdits,
        devices: Mapping[str, ClaimEdits] | None = None,
    ) -> dict[str, Any]:
        """The claim's spec (`devices`: each allocated device's own edits, by device name);
        DriverFilesError when the driver's files cannot be found."""
        # A claim without device nodes has no GPU (an optional claim that got none): it runs
        # CPU-only and gets nothing of the driver.
        common = self.driver.get() if edits.device_nodes else None
        devices = dict(devices or {})
        if common is not None and self.driver.mode is CdiMode.drasat and not self.driver.discovered:
            # Undiscovered: the control nodes were the claim's own, as before discovery existed.
            edits = _with_nodes_first(edits, common.device_nodes)
            devices = {
                name: _with_nodes_first(own, common.device_nodes) if own.device_nodes else own
                for name, own in devices.items()
            }
            common = None
        dev_root = self.driver.roots.host_dev_root if self.driver.roots else self.driver_root
        return claim_spec(claim_uid, edits, driver_root=dev_root, common=common, devices=devices)

    def write(
        self,
        claim_uid: str,
        edits: ClaimEdits,
        devices: Mapping[str, ClaimEdits] | None = None,
    ) -> Path:
        spec = self.spec(claim_uid, edits, devices)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(claim_uid)
        write_atomic(path, json.dumps(spec, indent=2) + "\n", mode=0o644)
        return path

    def device_ids(self, claim_uid: str, gpu_minors: Iterable[int]) -> list[str]:
        """The CDI ids the kubelet passes on: the claim's device, and in toolkit mode the
        toolkit's device of each GPU (a MIG device's parent) the claim uses."""
        return self.ids_of(claim_uid, "", gpu_minors)

    def ids_of(self, claim_uid: str, device: str, gpu_minors: Iterable[int]) -> list[str]:
        """The CDI ids of the claim (`device` "") or of one of its devices (`gpu_minors`: the
        GPUs it uses, whose toolkit devices come with it in toolkit mode)."""
        ids = [device_id(claim_uid, device)]
        if self.toolkit is not None and self.driver.mode is CdiMode.toolkit:
            ids += [self.toolkit.device_id(m) for m in dict.fromkeys(gpu_minors)]
        return ids

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)

    def claim_uids(self) -> list[str]:
        prefix, suffix = f"{VENDOR}-{CLASS}_", ".json"
        return sorted(
            p.name.removeprefix(prefix).removesuffix(suffix)
            for p in self.root.glob(f"{prefix}*{suffix}")
        )


class ToolkitDevices:
    """The GPUs of the node's NVIDIA container toolkit spec (kind `nvidia.com/gpu`), by minor.

    The toolkit names devices by index, UUID or both (`--device-name-strategy`); each whole-GPU
    device carries its `/dev/nvidia<minor>` node and no `/dev/nvidia-caps` node, which is how a
    minor is matched to a name whatever the strategy (a UUID name preferred). The spec files are
    read when a device is first asked for and again when a minor is not found (the toolkit may
    regenerate them)."""

    def __init__(self, spec_dirs: Iterable[Path]) -> None:
        self.spec_dirs = tuple(spec_dirs)
        self._by_minor: dict[int, str] = {}

    def read(self) -> dict[int, str]:
        by_minor: dict[int, list[str]] = {}
        for folder in self.spec_dirs:
            for path in sorted([*folder.glob("*.json"), *folder.glob("*.yaml")]):
                for name, minor in _toolkit_gpus(path):
                    by_minor.setdefault(minor, []).append(name)
        self._by_minor = {
            minor: sorted(names, key=lambda n: (not n.startswith("GPU-"), n))[0]
            for minor, names in by_minor.items()
        }
        return dict(self._by_minor)

    def device_id(self, minor: int) -> str:
        if minor not in self._by_minor:
            self.read()
        if minor not in self._by_minor:
            folders = ", ".join(str(f) for f in self.spec_dirs)
            raise DriverFilesError(
                f"no {TOOLKIT_KIND} device with /dev/nvidia{minor} in the CDI specs in {folders} "
                "(cdi mode toolkit: generate them with `nvidia-ctk cdi generate`)"
            )
        return f"{TOOLKIT_KIND}={self._by_minor[minor]}"


def _toolkit_gpus(path: Path) -> list[tuple[str, int]]:
    try:  # JSON is YAML: the hardened loader reads the toolkit's .json and .yaml specs
        documents = loading.parse_documents(path.read_text(), str(path))
    except (OSError, InputError) as error:
        log.warning("skipping CDI spec %s: %s", path, error)
        return []
    spec = documents[0].data if len(documents) == 1 else None
    if not isinstance(spec, dict) or spec.get("kind") != TOOLKIT_KIND:
        return []
    found = []
    for device in spec.get("devices") or []:
        nodes = [
            str(n.get("path", ""))
            for n in (device.get("containerEdits") or {}).get("deviceNodes") or []
            if isinstance(n, dict)
        ]
        if any(n.startswith("/dev/nvidia-caps") for n in nodes):
            continue  # a MIG device
        minors = [int(n[len("/dev/nvidia") :]) for n in nodes if n[len("/dev/nvidia") :].isdigit()]
        if len(minors) == 1 and str(device.get("name", "")) != "all":
            found.append((str(device["name"]), minors[0]))
    return found
