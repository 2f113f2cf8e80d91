"""What the containers of drasat-probe pods see of their GPUs, read back and checked: the
workloads of `drasat demo --runtime containerd` and of the containerd e2e tests
(`probe-workloads.yaml`), run on the test bed's containerd nodes with drasat installed by its
chart.

Each probe container prints its own view as one JSON line (deploy/probe/drasat_probe.py).
`collect` reads those logs through the API server (`kubectl logs`' path), with each container's
claims, their allocations, the allocated devices' ResourceSlice entries, the CDI spec the node
plugin wrote for each claim (on the node) and the OCI spec containerd gave runc (`ctr containers
info`). `problems` checks them against each other:

- the GPU device nodes a container sees are exactly those of the GPUs its claims were allocated
  (whole GPUs, and a MIG device's parent with its two capability nodes) and the driver's control
  nodes: nothing of a GPU, or a MIG device, another claim holds;
- its NVIDIA_* and CUDA_* variables are exactly those of its claims' CDI devices;
- an MPS share sees its daemon's pipe directory and shared memory, another container of the same
  daemon sees the same ones, and a container without MPS sees none;
- containerd applied drasat's CDI specs: every device node, variable and mount of the claims'
  CDI devices (and of the spec's common edits) is in the container's OCI spec, and the devices
  the container sees are the spec's.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from drasat.testbed.controlplane import realcluster

WORKLOADS = Path(__file__).with_name("probe-workloads.yaml")
DRIVER = "gpu.drasat.io"
CDI_KIND = "k8s.gpu.drasat.io/claim"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
#: Where each kind lives in the API (the kinds the workloads use).
PATHS = {
    "Namespace": "/api/v1/namespaces",
    "Pod": "/api/v1/namespaces/{namespace}/pods",
    "ResourceClaim": "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims",
    "ResourceClaimTemplate": (
        "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates"
    ),
}
Obj = dict[str, Any]


class Node(Protocol):
    """What `collect` reads of a node: its CDI specs' folder and containerd's OCI specs."""

    name: str

    @property
    def cdi_dir(self) -> Path: ...

    def container_spec(self, container_id: str) -> Obj: ...


class ApiError(RuntimeError):
    """A request to the API server failed; the message names the method, path and answer."""


def request(cluster: realcluster.Cluster, method: str, path: str, body: Obj | None = None) -> bytes:
    """One request to the API server as the cluster administrator; the answer's body."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {cluster.tokens[realcluster.ADMIN_USER]}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    call = urllib.request.Request(cluster.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(call, timeout=30, context=context) as answer:
            return bytes(answer.read())
    except urllib.error.HTTPError as error:
        raise ApiError(f"{method} {path}: {error.code} {error.read().decode()[:500]}") from None


def get(cluster: realcluster.Cluster, path: str) -> Obj:
    found: Obj = json.loads(request(cluster, "GET", path))
    return found


def workloads() -> list[Obj]:
    return [d for d in yaml.safe_load_all(WORKLOADS.read_text()) if d]


def namespaces(manifests: Iterable[Obj]) -> list[str]:
    return [m["metadata"]["name"] for m in manifests if m["kind"] == "Namespace"]


def apply(cluster: realcluster.Cluster, manifests: Sequence[Obj], *, timeout: float = 60.0) -> None:
    """Create the namespaces, wait for each one's `default` ServiceAccount (the admission
    refuses pods before the controller manager made it), then create the rest in order."""
    first = [m for m in manifests if m["kind"] == "Namespace"]
    for manifest in first:
        request(cluster, "POST", PATHS["Namespace"], manifest)
    deadline = time.monotonic() + timeout
    for name in namespaces(first):
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        while cluster.get_object(path) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name}: no default ServiceAccount was made")
            time.sleep(0.2)
    for manifest in manifests:
        if manifest["kind"] != "Namespace":
            path = PATHS[manifest["kind"]].format(namespace=manifest["metadata"]["namespace"])
            request(cluster, "POST", path, manifest)


def delete_namespaces(cluster: realcluster.Cluster, names: Iterable[str]) -> None:
    for name in names:
        try:
            request(cluster, "DELETE", f"/api/v1/namespaces/{name}")
        except ApiError as error:
            if ": 404 " not in str(error):
                raise


def pods(cluster: realcluster.Cluster, namespace: str) -> list[Obj]:
    listed: list[Obj] = get(cluster, f"/api/v1/namespaces/{namespace}/pods")["items"]
    return listed


def wait_running(
    cluster: realcluster.Cluster, names: Sequence[str], *, timeout: float = 300.0
) -> list[Obj]:
    """Until every pod of the namespaces runs and has logged its view; the pods."""
    deadline = time.monotonic() + timeout
    while True:
        found = [p for n in names for p in pods(cluster, n)]
        waiting = [p for p in found if not _logged(cluster, p)]
        if found and not waiting:
            return found
        if time.monotonic() > deadline:
            states = "\n".join(f"  {_where(p)}: {_state(p)}" for p in waiting)
            raise TimeoutError(
                f"pods not running with a view logged after {timeout:.0f} s:\n{states}"
            )
        time.sleep(1.0)


def _logged(cluster: realcluster.Cluster, pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running":
        return False
    return all(log_view(cluster, pod, c["name"]) is not None for c in pod["spec"]["containers"])


def _where(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _state(pod: Obj) -> str:
    status = pod.get("status", {})
    waiting = [
        s.get("state", {}).get("waiting", {}).get("reason", "")
        for s in status.get("containerStatuses") or []
    ]
    conditions = [
        f"{c['type']}={c['status']}{' (' + c['message'] + ')' if c.get('message') else ''}"
        for c in status.get("conditions") or []
        if c.get("status") != "True"
    ]
    return f"{status.get('phase')} {' '.join(w for w in waiting if w)} {' '.join(conditions)}"


def log_view(cluster: realcluster.Cluster, pod: Obj, container: str) -> Obj | None:
    """The view a probe container logged (its first JSON line), or None before it did."""
    path = (
        f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/log"
        f"?container={urllib.parse.quote(container)}"
    )
    try:
        text = request(cluster, "GET", path).decode(errors="replace")
    except ApiError:
        return None
    for line in text.splitlines():
        if line.startswith("{"):
            view: Obj = json.loads(line)
            return view
    return None


@dataclass
class Claim:
    name: str
    uid: str
    namespace: str
    #: The allocation's results this container uses (of the requests it names, or all).
    results: list[Obj]
    #: The CDI spec the node plugin wrote for the claim, as read on the node.
    cdi_spec: Obj


@dataclass
class ContainerView:
    namespace: str
    pod: str
    container: str
    node: str
    container_id: str
    view: Obj
    claims: list[Claim]
    #: The allocated devices' ResourceSlice entries, by device name.
    devices: dict[str, Obj] = field(default_factory=dict)
    #: containerd's OCI spec of the container.
    oci: Obj = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"

    def device_nodes(self) -> list[str]:
        return sorted(d["path"] for d in self.view.get("devices", []))

    def cdi_device_names(self) -> list[str]:
        """The CDI devices the kubelet asked for: one per allocated device of its claims."""
        return sorted(f"{c.uid}-{r['device']}" for c in self.claims for r in c.results)


def collect(
    cluster: realcluster.Cluster, names: Sequence[str], nodes: Mapping[str, Node]
) -> list[ContainerView]:
    """Every container of the namespaces' pods, with its view, claims and specs."""
    slices = get(cluster, "/apis/resource.k8s.io/v1/resourceslices")["items"]
    by_device = {
        (s["spec"]["pool"]["name"], d["name"]): d
        for s in slices
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"].get("devices", [])
    }
    views = []
    for pod in (p for n in names for p in pods(cluster, n)):
        node = nodes[pod["spec"]["nodeName"]]
        statuses = {s["name"]: s for s in pod["status"].get("containerStatuses") or []}
        # A claim the pod names directly, or the one made for it from a template.
        claim_names = {
            s["name"]: s.get("resourceClaimName", "")
            for s in pod["status"].get("resourceClaimStatuses") or []
        }
        for ref in pod["spec"].get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                claim_names[ref["name"]] = ref["resourceClaimName"]
        for container in pod["spec"]["containers"]:
            claims = []
            for ref in container.get("resources", {}).get("claims") or []:
                claim = get(
                    cluster,
                    f"/apis/resource.k8s.io/v1/namespaces/{pod['metadata']['namespace']}"
                    f"/resourceclaims/{claim_names[ref['name']]}",
                )
                results = [
                    r
                    for r in claim["status"]["allocation"]["devices"]["results"]
                    if r["driver"] == DRIVER
                    and (not ref.get("request") or r["request"].partition("/")[0] == ref["request"])
                ]
                uid = claim["metadata"]["uid"]
                spec_file = node.cdi_dir / f"k8s.gpu.drasat.io-claim_{uid}.json"
                spec = json.loads(spec_file.read_text()) if spec_file.exists() else {}
                claims.append(
                    Claim(
                        claim["metadata"]["name"],
                        uid,
                        claim["metadata"]["namespace"],
                        results,
                        spec,
                    )
                )
            container_id = statuses[container["name"]]["containerID"]
            view = log_view(cluster, pod, container["name"]) or {}
            devices = {
                r["device"]: by_device.get((r["pool"], r["device"]), {})
                for c in claims
                for r in c.results
            }
            views.append(
                ContainerView(
                    namespace=pod["metadata"]["namespace"],
                    pod=pod["metadata"]["name"],
                    container=container["name"],
                    node=pod["spec"]["nodeName"],
                    container_id=container_id,
                    view=view,
                    claims=claims,
                    devices=devices,
                    oci=node.container_spec(container_id),
                )
            )
    return views


# --- checks -----------------------------------------------------------------------------------


def _attribute(device: Obj, name: str) -> Any:
    value = device.get("attributes", {}).get(name, {})
    return next(iter(value.values()), None) if value else None


def gpu_minors(view: ContainerView) -> set[int]:
    """The minors of the GPUs the container's claims were allocated (a MIG device's parent)."""
    minors = set()
    for device in view.devices.values():
        minor = _attribute(device, "minor")
        if minor is None:
            minor = _attribute(device, "parentMinor")
        if minor is not None:
            minors.add(int(minor))
    return minors


def _cdi_edits(view: ContainerView) -> list[Obj]:
    """The containerEdits of the container's CDI devices and of their specs' common part."""
    edits = []
    wanted = set(view.cdi_device_names())
    for claim in view.claims:
        spec = claim.cdi_spec
        if spec.get("containerEdits"):
            edits.append(spec["containerEdits"])
        for device in spec.get("devices", []):
            if device["name"] in wanted:
                edits.append(device.get("containerEdits", {}))
    return edits


def cdi_env(view: ContainerView) -> dict[str, str]:
    env = {}
    for edits in _cdi_edits(view):
        for pair in edits.get("env") or []:
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def problems(views: Sequence[ContainerView]) -> list[str]:
    """Everything that does not hold (see the module's doc); empty when all is well."""
    found: list[str] = []
    for view in views:
        found += _view_problems(view)
        found += _applied_problems(view)
    found += _isolation_problems(views)
    return found


def _view_problems(view: ContainerView) -> list[str]:
    found = []
    if view.view.get("probe") != "drasat-probe":
        return [f"{view.where}: logged no drasat-probe view"]
    for claim in view.claims:
        if not claim.cdi_spec:
            found.append(f"{view.where}: no CDI spec on {view.node} for claim {claim.name}")
        wanted = {f"{claim.uid}-{r['device']}" for r in claim.results}
        named = {d["name"] for d in claim.cdi_spec.get("devices", [])}
        if claim.cdi_spec and not wanted <= named:
            found.append(
                f"{view.where}: claim {claim.name}'s CDI spec lacks {sorted(wanted - named)}"
            )
    gpus = {f"/dev/nvidia{m}" for m in gpu_minors(view)}
    seen = set(view.device_nodes())
    seen_gpus = {p for p in seen if p.removeprefix("/dev/nvidia").isdigit()}
    if seen_gpus != gpus:
        found.append(
            f"{view.where}: sees GPU nodes {sorted(seen_gpus)}, was allocated {sorted(gpus)}"
        )
    if gpus and not set(CONTROL_NODES) <= seen:
        found.append(f"{view.where}: lacks control nodes {sorted(set(CONTROL_NODES) - seen)}")
    migs = sum(1 for d in view.devices.values() if _attribute(d, "parentMinor") is not None)
    caps = {p for p in seen if p.startswith("/dev/nvidia-caps/")}
    if len(caps) != 2 * migs:
        found.append(
            f"{view.where}: sees {len(caps)} MIG capability nodes for {migs} MIG device(s) "
            "(two each: its GPU and compute instance's)"
        )
    env = view.view.get("env", {})
    expected = {k: v for k, v in cdi_env(view).items() if k.startswith(("NVIDIA_", "CUDA_"))}
    if env != expected:
        found.append(f"{view.where}: sees variables {env}, its CDI devices give {expected}")
    pipe = view.view.get("mpsPipeDirectory", {})
    if "CUDA_MPS_PIPE_DIRECTORY" in expected:
        if not pipe.get("present") or not pipe.get("mount"):
            found.append(f"{view.where}: an MPS client without its daemon's pipe directory")
        shm = view.view.get("shm", {}).get("mount") or {}
        if shm.get("fstype") == "tmpfs" and shm.get("root") == "/":
            found.append(
                f"{view.where}: an MPS client with a /dev/shm of its own, not its daemon's"
            )
    elif pipe.get("present"):
        found.append(f"{view.where}: sees an MPS pipe directory without an MPS claim")
    return found


def _applied_problems(view: ContainerView) -> list[str]:
    """containerd applied the claims' CDI devices: their edits are in the OCI spec."""
    found = []
    oci = view.oci
    oci_env = dict(p.partition("=")[::2] for p in oci.get("process", {}).get("env") or [])
    oci_devices = {d["path"]: d for d in oci.get("linux", {}).get("devices") or []}
    oci_mounts = {(m.get("destination"), m.get("source")) for m in oci.get("mounts") or []}
    for edits in _cdi_edits(view):
        for pair in edits.get("env") or []:
            key, _, value = pair.partition("=")
            if oci_env.get(key) != value:
                found.append(f"{view.where}: the OCI spec lacks the CDI variable {pair}")
        for node in edits.get("deviceNodes") or []:
            if node["path"] not in oci_devices:
                found.append(f"{view.where}: the OCI spec lacks the CDI device node {node['path']}")
        for mount in edits.get("mounts") or []:
            if (mount["containerPath"], mount["hostPath"]) not in oci_mounts:
                found.append(
                    f"{view.where}: the OCI spec lacks the CDI mount {mount['hostPath']} -> "
                    f"{mount['containerPath']}"
                )
    spec_nodes = {p for p in oci_devices if p.startswith("/dev/nvidia")}
    seen = set(view.device_nodes())
    if spec_nodes != seen:
        found.append(
            f"{view.where}: sees device nodes {sorted(seen)}, its OCI spec has {sorted(spec_nodes)}"
        )
    for entry in view.view.get("devices", []):
        spec = oci_devices.get(entry["path"])
        if spec and (spec.get("major"), spec.get("minor")) != (
            entry.get("major"),
            entry.get("minor"),
        ):
            found.append(f"{view.where}: {entry['path']} is not the device its OCI spec names")
    return found


def _isolation_problems(views: Sequence[ContainerView]) -> list[str]:
    """Nothing of a claim reaches a container that does not use it: another claim's MIG
    capability nodes, another daemon's pipe directory, a GPU another claim holds whole."""
    found = []
    for view in views:
        uids = {c.uid for c in view.claims}
        caps = {p for p in view.device_nodes() if p.startswith("/dev/nvidia-caps/")}
        pipe = (view.view.get("mpsPipeDirectory", {}).get("mount") or {}).get("root")
        for other in views:
            if other.node != view.node or uids & {c.uid for c in other.claims}:
                continue
            other_caps = {p for p in other.device_nodes() if p.startswith("/dev/nvidia-caps/")}
            if caps & other_caps:
                shown = sorted(caps & other_caps)
                found.append(f"{view.where} sees {other.where}'s MIG capability nodes {shown}")
            other_pipe = (other.view.get("mpsPipeDirectory", {}).get("mount") or {}).get("root")
            shares = view.namespace == other.namespace and gpu_minors(view) == gpu_minors(other)
            if pipe and other_pipe and pipe == other_pipe and not shares:
                found.append(f"{view.where} shares {other.where}'s MPS daemon ({pipe})")
            if pipe and other_pipe and shares and pipe != other_pipe:
                found.append(f"{view.where} and {other.where} share a GPU but not its MPS daemon")
    return found


# --- the demo's report -------------------------------------------------------------------------


def describe(views: Sequence[ContainerView]) -> str:
    """Per pod, what its container sees: a few lines a person can read."""
    lines = []
    for view in sorted(views, key=lambda v: (v.namespace, v.pod, v.container)):
        seen = view.view
        gpus = [
            d["path"]
            for d in seen.get("devices", [])
            if not d["path"].startswith("/dev/nvidia-caps")
        ]
        caps = [
            d["path"] for d in seen.get("devices", []) if d["path"].startswith("/dev/nvidia-caps")
        ]
        allocated = ", ".join(
            f"{r['device']}" + (f" ({r['request']})" if "/" in r["request"] else "")
            for c in view.claims
            for r in c.results
        )
        lines.append(f"{view.namespace}/{view.pod} on {view.node}: allocated {allocated}")
        lines.append(f"  device nodes: {', '.join(gpus) or 'none'}")
        if caps:
            lines.append(f"  MIG capability nodes: {', '.join(caps)}")
        env = seen.get("env", {})
        for key in sorted(env):
            lines.append(f"  {key}={env[key]}")
        pipe = seen.get("mpsPipeDirectory", {})
        if pipe.get("present"):
            root = (pipe.get("mount") or {}).get("root", "?")
            entries = ", ".join(pipe.get("entries") or []) or "empty"
            lines.append(f"  MPS pipe directory {pipe['path']}: {entries} (from {root})")
        shm = seen.get("shm", {}).get("mount") or {}
        lines.append(f"  /dev/shm: {shm.get('fstype', '?')} from {shm.get('root', '?')}")
        driver = seen.get("driverMounts", {})
        if driver:
            lines.append(f"  driver files mounted: {len(driver)} (e.g. {next(iter(driver))})")
    return "\n".join(lines)
