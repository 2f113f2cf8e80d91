"""Who gives an unused claim's devices back, measured on the real control plane:

    python -m bench.deallocation [--kubeconfig K] [--rounds 10] [--restarts 3] [--down 5]
                                 [--out DIR]

A fake node (a Node object, no kubelet) publishes one simulated T4 in drasat's ResourceSlice
(`bench.kube_alloc`'s fleet) and drasat's controller allocates it (`bench.drasat_allocator`):

- **ends**: a standalone claim `u` is allocated for pod `pu`, which kube-scheduler binds to the
  node (its PreBind reserves the claim); a second claim `w` with pod `pw` waits, the GPU being
  held. Then `pu` ends — it finishes (its status written `Succeeded`, as the kubelet would) or it
  is deleted — and two times are measured from that moment (the client's clock): until `u`'s
  allocation is cleared (`freed`), and until `w` is allocated on the GPU `u` gave back (`reused`:
  the devices allocatable again, end to end). `--rounds` of each ending.
- **restart**: the same, but drasat's controller is stopped before `pu` finishes and started
  again `--down` seconds later: whether `u` was given back at all, `freed` from the pod's end,
  and `reused` from the controller's start.

drasat's controller deallocates a claim no pod uses (`controller.cycle.releasing.unused`). At
commit 51b779e the controller could instead carry upstream's `resource.kubernetes.io/
delete-protection` finalizer, leaving the deallocation to kube-controller-manager's resourceclaim
controller: this bench measured both side by side there (docs/PERFORMANCE.md §5.8). Results go to
`--out` (results.json); the command prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from bench import drasat_allocator, kube_alloc
from drasat.api.groups import SCHEDULING_GATE

Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
NAMESPACE = "drasat"
ENDINGS = ("finished", "deleted")


def claim_body(name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]}},
    }  # fmt: skip


def pod_body(name: str, claim: str) -> Obj:
    """A gated pod of the standalone claim, as the chart's admission creates it."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "terminationGracePeriodSeconds": 0,
        },
    }  # fmt: skip


class Cluster:
    """The bench's client calls."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.namespace = namespace

    def claim(self, name: str) -> Obj | None:
        try:
            found: Obj = self.custom.get_namespaced_custom_object(
                *RESOURCE, self.namespace, "resourceclaims", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def allocated(self, name: str) -> bool:
        return bool(((self.claim(name) or {}).get("status") or {}).get("allocation"))

    def reserved(self, name: str) -> bool:
        return bool(((self.claim(name) or {}).get("status") or {}).get("reservedFor"))

    def create(self, claim: str, pod: str) -> None:
        self.custom.create_namespaced_custom_object(
            *RESOURCE, self.namespace, "resourceclaims", claim_body(claim)
        )
        self.core.create_namespaced_pod(self.namespace, pod_body(pod, claim))

    def end(self, pod: str, ending: str) -> None:
        if ending == "deleted":
            self.core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
            return
        self.core.patch_namespaced_pod_status(
            pod, self.namespace, {"status": {"phase": "Succeeded"}}
        )

    def clean(self) -> None:
        """Every pod (forced: no kubelet) and claim of the namespace, waited away."""
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            self.custom.delete_collection_namespaced_custom_object(
                *RESOURCE, self.namespace, "resourceclaims"
            )
        wait(lambda: not self.core.list_namespaced_pod(self.namespace).items, 60, "pods gone")
        wait(
            lambda: (
                not self.custom.list_namespaced_custom_object(
                    *RESOURCE, self.namespace, "resourceclaims"
                )["items"]
            ),
            120,
            "claims gone (drasat's finalizer dropped)",
        )


def wait(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> float:
    """Poll until `check()`; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def _placed(cluster: Cluster, n: int) -> tuple[str, str, str, str]:
    """Claim u for pod pu bound and reserved, claim w for pod pw waiting; their names."""
    u, pu, w, pw = f"u{n}", f"pu{n}", f"w{n}", f"pw{n}"
    cluster.create(u, pu)
    wait(lambda: cluster.reserved(u), 60, f"{u} reserved for {pu}")
    cluster.create(w, pw)
    time.sleep(1.0)  # drasat tries w and finds the GPU held
    assert not cluster.allocated(w), f"{w} allocated while {u} holds the only GPU"
    return u, pu, w, pw


def ends(cluster: Cluster, rounds: int, n: int = 0) -> list[Obj]:
    out = []
    for ending in ENDINGS:
        for i in range(rounds):
            u, pu, w, _ = _placed(cluster, n := n + 1)
            started = time.monotonic()
            cluster.end(pu, ending)
            freed = wait(lambda u=u: not cluster.allocated(u), 120, f"{u} freed") - started
            reused = wait(lambda w=w: cluster.allocated(w), 120, f"{w} allocated") - started
            kube_alloc.say(f"  {ending} {i + 1}/{rounds}: freed {freed:.3f}s reused {reused:.3f}s")
            out.append({"ending": ending, "freed_s": freed, "reused_s": reused})
            cluster.clean()
    return out


def restart(
    cluster: Cluster, handle: drasat_allocator.DrasatController, down: float, rounds: int
) -> tuple[list[Obj], drasat_allocator.DrasatController]:
    out = []
    for i in range(rounds):
        u, pu, w, _ = _placed(cluster, 100 + i)
        handle.process.terminate()
        handle.process.wait(timeout=30)
        started = time.monotonic()
        cluster.end(pu, "finished")
        freed_at = None
        while time.monotonic() < started + down:
            if freed_at is None and not cluster.allocated(u):
                freed_at = time.monotonic()
            time.sleep(0.02)
        freed_down = freed_at is not None
        handle = drasat_allocator.restart(handle)
        up = time.monotonic()
        if freed_at is None:
            freed_at = wait(lambda u=u: not cluster.allocated(u), 120, f"{u} freed")
        freed = freed_at - started
        reused = wait(lambda w=w: cluster.allocated(w), 120, f"{w} allocated") - up
        kube_alloc.say(
            f"  restart {i + 1}/{rounds}: freed while down {freed_down}, freed "
            f"{freed:.3f}s after the pod's end, reused {reused:.3f}s after the start"
        )
        out.append(
            {"freed_while_down": freed_down, "freed_s": freed, "reused_after_start_s": reused}
        )
        cluster.clean()
    return out, handle


def run_way(kubeconfig: pathlib.Path, way: str, args: argparse.Namespace) -> Obj:
    kube_alloc.say(f"way {way}")
    handle = drasat_allocator.start(kubeconfig, NAMESPACE)
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    ns = f"dl-{uuid.uuid4().hex[:5]}"
    try:
        with kube_alloc.namespace(api, ns):
            cluster = Cluster(api, ns)
            found = {"way": way, "ends": ends(cluster, args.rounds)}
            found["restart"], handle = restart(cluster, handle, args.down, args.restarts)
            return found
    finally:
        handle.stop()
        api.close()


def summary(results: Obj) -> str:
    rows = ["| way | ending | rounds | freed p50 | freed max | reused p50 | reused max |",
            "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for found in results["ways"]:
        for ending in ENDINGS:
            mine = [r for r in found["ends"] if r["ending"] == ending]
            freed = [r["freed_s"] for r in mine]
            reused = [r["reused_s"] for r in mine]
            rows.append(
                f"| {found['way']} | {ending} | {len(mine)} | "
                f"{kube_alloc._percentile(freed, 50):.3f} s | {max(freed):.3f} s | "
                f"{kube_alloc._percentile(reused, 50):.3f} s | {max(reused):.3f} s |"
            )
    rows += [
        "",
        "| way | restarts | freed while down | freed p50 (from the pod's end) | "
        "reused p50 (from the start) | reused max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for found in results["ways"]:
        mine = found["restart"]
        down = sum(r["freed_while_down"] for r in mine)
        freed = [r["freed_s"] for r in mine]
        reused = [r["reused_after_start_s"] for r in mine]
        rows.append(
            f"| {found['way']} | {len(mine)} | {down} | "
            f"{kube_alloc._percentile(freed, 50):.3f} s | "
            f"{kube_alloc._percentile(reused, 50):.3f} s | {max(reused):.3f} s |"
        )
    return "\n".join(rows)


def bench(args: argparse.Namespace) -> Obj:
    name = f"dl-{uuid.uuid4().hex[:5]}"
    node = kube_alloc.FleetNode(name, f"1xT4,seed={name}", {kube_alloc.LABEL: "plain"})
    with kube_alloc.control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        try:
            with kube_alloc._device_classes(api):
                kube_alloc.create_fleet(api, [node], workers=1)
                try:
                    ways = [run_way(kubeconfig, "drasat", args)]
                finally:
                    kube_alloc.delete_fleet(api, [node])
        finally:
            api.close()
    return {
        "command": " ".join(["python -m bench.deallocation", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "commit": _commit(),
        "ways": ways,
    }


def _commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    return "?"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.deallocation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", type=pathlib.Path, help="a running cluster (default: "
                        "start one from drasat.testbed.controlplane)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=10, help="rounds per ending (10)")
    parser.add_argument("--restarts", type=int, default=3, help="restart rounds per way (3)")
    parser.add_argument("--down", type=float, default=5.0, help="seconds the controller is down")
    parser.add_argument("--out", type=pathlib.Path, help="where results.json goes")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = bench(args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
