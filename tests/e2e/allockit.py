"""drasat's v1 controller on the real control plane: it allocates the claims of drasat's classes,
kube-scheduler binds the pods, the simulated kubelets prepare them through the node plugins.

`allocator` (module scope) installs drasat's CRDs, its namespace and DeviceClasses, and runs the
real `drasat controller --dra-api v1` process with the admin's kubeconfig; on exit it stops it and
deletes the DeviceTaintRule it made, so the other modules' kube-scheduler tests see the devices
untainted again. `consistent` is the check every test ends with: no device held by two claims,
the NAS ledger and the claims' status agree, and every allocation of our devices was written by
drasat's controller, never by kube-scheduler — except for claims that tolerate the allocator
taint, which are kube-scheduler's."""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
from kubecluster import install_crds, wait_for
from kubernetes.client import ApiException
from slicekit import device_classes

from drasat.api import crds
from drasat.api.devicemodel import shares
from drasat.api.groups import DRIVER_NAME, NAS_GROUP, VERSION
from drasat.controller import v1inputs
from drasat.testbed.controlplane import realcluster

NAMESPACE = "drasat"
RESOURCE = ("resource.k8s.io", "v1")
_ALLOCATED = re.compile(r"allocated (\S+) on (\S+) for")

Obj = dict[str, Any]


@dataclass
class Allocator:
    process: Any
    log: Path
    kubeconfig: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def allocated(self) -> dict[str, str]:
        """claim namespace/name -> node, for every allocation this controller wrote."""
        return {m.group(1): m.group(2) for m in _ALLOCATED.finditer(self.text())}

    def restart(self, *extra: str) -> None:
        drasatprocess.stop(self.process)
        self.process = start(self.kubeconfig, self.log, *extra)


def start(kubeconfig: Path, log: Path, *extra: str) -> Any:
    args = [
        "controller", "--dra-api", "v1", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
        "--metrics-address", "", "--batch-window", "0.1", *extra,
    ]  # fmt: skip
    return drasatprocess.run(args, log, append=True)


def prepare(api: kubernetes.client.ApiClient) -> None:
    install_crds(api, crds.all_crds())
    core = kubernetes.client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:  # the cluster lives for the session
        if exc.status != 409:
            raise


@contextlib.contextmanager
def allocator(api: kubernetes.client.ApiClient, kube: realcluster.Cluster) -> Iterator[Allocator]:
    prepare(api)
    # The log goes with the fixture: a failing wait prints its tail first.
    with device_classes(api), tempfile.TemporaryDirectory(prefix="alloc-") as tmp:
        log = Path(tmp) / "controller.log"
        process = start(kube.kubeconfig, log)
        found = Allocator(process, log, kube.kubeconfig)
        custom = kubernetes.client.CustomObjectsApi(api)
        try:
            wait_for(
                lambda: _taint_rule(custom) is not None,
                timeout=60,
                what=f"the controller's DeviceTaintRule\n{found.text()[-3000:]}",
            )
            yield found
        finally:
            drasatprocess.stop(found.process)
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    *RESOURCE, "devicetaintrules", "drasat-allocator"
                )


def _taint_rule(custom: Any) -> Obj | None:
    try:
        found: Obj = custom.get_cluster_custom_object(
            *RESOURCE, "devicetaintrules", "drasat-allocator"
        )
        return found
    except ApiException:
        return None


def claims(api: kubernetes.client.ApiClient) -> list[Obj]:
    custom = kubernetes.client.CustomObjectsApi(api)
    listed: list[Obj] = custom.list_cluster_custom_object(*RESOURCE, "resourceclaims")["items"]
    return listed


def ledgers(api: kubernetes.client.ApiClient) -> dict[str, Obj]:
    custom = kubernetes.client.CustomObjectsApi(api)
    listed = custom.list_namespaced_custom_object(
        NAS_GROUP, VERSION, NAMESPACE, "nodeallocationstates"
    )["items"]
    return {
        n["metadata"]["name"]: (n.get("spec") or {}).get("allocatedClaims") or {} for n in listed
    }


def _ours(claim: Obj) -> list[Obj]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if r.get("driver") == DRIVER_NAME]


def _memory(api: kubernetes.client.ApiClient) -> dict[tuple[str, str], int]:
    """(pool, device) -> the memory each of drasat's devices publishes."""
    custom = kubernetes.client.CustomObjectsApi(api)
    listed = custom.list_cluster_custom_object(*RESOURCE, "resourceslices")["items"]
    return {
        (s["spec"]["pool"]["name"], d["name"]): int(d["capacity"]["memory"]["value"])
        for s in listed
        if s["spec"].get("driver") == DRIVER_NAME
        for d in s["spec"].get("devices") or []
        if "memory" in (d.get("capacity") or {})
    }


def _share(result: Obj, memory: dict[tuple[str, str], int]) -> bool:
    """Whether a result is a share (less than the whole device): several may hold the device."""
    consumed = result.get("consumedCapacity")
    whole = memory.get((result["pool"], result["device"]))
    if not consumed or whole is None:
        return False
    used, compute = int(consumed.get("memory", whole)), int(consumed.get("compute", 0))
    return not shares.takes_whole(used, compute, whole)


def problems(api: kubernetes.client.ApiClient, found: Allocator) -> list[str]:
    """What is inconsistent now (empty: all is well)."""
    out = []
    written = found.allocated()
    held: dict[tuple[str, str], list[str]] = {}
    memory = _memory(api)
    ledger = ledgers(api)
    listed = claims(api)
    for claim in listed:
        results = _ours(claim)
        if not results:
            continue
        ref = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        # A claim that tolerates the allocator taint may be kube-scheduler's where its pod
        # reached the scheduler ungated (drasat repairs what overlaps); every other allocation
        # of drasat's devices must be drasat's own.
        if ref not in written and not v1inputs.tolerates_allocator_taint(claim):
            out.append(f"{ref} was allocated by someone else than drasat's controller")
        uid = claim["metadata"]["uid"]
        node = results[0]["pool"]
        if not any(e.get("claimInfo", {}).get("uid") == uid for e in ledger.get(node, {}).values()):
            out.append(f"{ref} is allocated on {node} but not in its ledger")
        for result in results:
            if result["device"] == "cpu-fallback" or _share(result, memory):
                continue  # shares and the fallback may be held by several claims
            held.setdefault((result["pool"], result["device"]), []).append(ref)
    for (node, device), refs in held.items():
        if len(set(refs)) > 1:
            out.append(f"{node}/{device} is held by {sorted(set(refs))}")
    allocated = {c["metadata"]["uid"] for c in listed if _ours(c)}
    for node, entries in ledger.items():
        for key, entry in entries.items():
            if entry.get("claimInfo", {}).get("uid") not in allocated:
                out.append(f"ledger of {node} holds {key} of no allocated claim")
    return out


def consistent(api: kubernetes.client.ApiClient, found: Allocator, timeout: float = 30) -> None:
    """Wait until `problems` is empty (the controller settles the ledger each cycle)."""
    last: list[str] = []

    def ok() -> bool:
        last[:] = problems(api, found)
        return not last

    try:
        wait_for(ok, timeout=timeout, what="a consistent ledger")
    except Exception:
        raise AssertionError("\n".join(last) + "\n" + found.text()[-3000:]) from None
