"""`bench.kube_alloc`'s MIG churn on NVIDIA-format ResourceSlices: kube-scheduler's allocator
against drasat's controller as the allocator for NVIDIA's driver (`--driver gpu.nvidia.com`).

    python -m bench.nvidia_alloc [--kubeconfig K] [--churn-claims 600] [--seed 1] [--out DIR]

The same run, workload and measurements as `bench.kube_alloc --phases churn` (MIG claims arrive
and depart on 8 MIG nodes, half A100-40GB, half H100-80GB, every GPU in dynamic MIG mode; a claim
not bound within `--patience` seconds is refused), with three differences that make it NVIDIA's
driver's cluster:

- each node's slices are those NVIDIA's driver publishes for its simulated GPUs (the NVML fleet
  of `bench.kube_alloc`, every GPU in dynamic MIG mode), written by the one module that says
  what that driver publishes (`drasat.whatif.nvidiaformat`): driver `gpu.nvidia.com`, NVIDIA's
  device names (`gpu-<minor>-mig-<profile>-<profileID>-<start>`, `1g5gb` for `1g.5gb`) and
  attributes (`type`, `uuid`, `productName`, `brand`, `architecture`, versions, `parentUUID`,
  `profile`, the PCI bus id and root), not drasat's own (`index`, `minor`, `placementStart`,
  `placementSize`, ...); each GPU's counter set `gpu-<minor>-counter-set`; no CPU-fallback
  device;
- the claims name NVIDIA's class `mig.nvidia.com` with CEL on NVIDIA's attributes; a claim by
  needs asks `memory` capacity and a profile of at least that many compute slices (CEL on the
  profile name: NVIDIA publishes no compute-slice capacity);
- allocator `drasat` is `drasat controller --driver gpu.nvidia.com` (no NodeAllocationState: the
  ledger is the claims' statuses) with its DeviceTaintRule `drasat-allocator-gpu.nvidia.com`;
  its pods are created with drasat's scheduling gate, as the chart's admission creates them.

Results go to `--out` (results.json, summary.md), as `bench.kube_alloc` writes them.
"""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from bench import drasat_allocator, kube_alloc
from drasat.whatif import nvidiaformat

Obj = dict[str, Any]
NVIDIA = "gpu.nvidia.com"
RESOURCE = ("resource.k8s.io", "v1")
RULE = f"drasat-allocator-{NVIDIA}"
MIG_CLASS = "mig.nvidia.com"
#: drasat's own slices for a fleet node (`kube_alloc.node_slices`, kept before it is replaced).
drasat_slices = kube_alloc.node_slices


def nvidia_slices(node: kube_alloc.FleetNode, uid: str) -> list[Obj]:
    """The slices NVIDIA's driver publishes for the node's simulated GPUs, owned by its Node
    (`uid`; empty: no owner)."""
    out = nvidiaformat.gpu_slices(node.name, kube_alloc.node_inventory(node).gpus)
    if uid:
        owner = {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": uid}
        for body in out:
            body["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    return out


def _attribute(name: str) -> str:
    return f'device.attributes["{NVIDIA}"].{name}'


def mig_request(product: str, profile: str) -> Obj:
    """MIG by profile on one product, in NVIDIA's terms."""
    product_name = kube_alloc._product(product).product_name
    return {
        "deviceClassName": MIG_CLASS,
        "selectors": [
            {"cel": {"expression": f'{_attribute("profile")} == "{profile}"'}},
            {"cel": {"expression": f'{_attribute("productName")} == "{product_name}"'}},
        ],
    }


def needs_request(memory_gib: int | None, compute: int | None) -> Obj:
    """MIG by needs: at least this memory (capacity) and a profile of at least these compute
    slices (`<n>g.` in its name; NVIDIA publishes no compute-slice capacity)."""
    cel = []
    if memory_gib:
        cel.append(f'device.capacity["{NVIDIA}"].memory.compareTo(quantity("{memory_gib}Gi")) >= 0')
    if compute:
        names = " || ".join(
            f'{_attribute("profile")}.startsWith("{n}g.")' for n in range(compute, 8)
        )
        cel.append(names)
    return {"deviceClassName": MIG_CLASS, "selectors": [{"cel": {"expression": c}} for c in cel]}


def nvidia_classes() -> list[Obj]:
    out = []
    for name, kind in (("gpu.nvidia.com", "gpu"), (MIG_CLASS, "mig")):
        expression = (
            f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == '{kind}'"
        )
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
    return out


@dataclass
class Controller:
    process: subprocess.Popen[bytes]
    api: Any
    log: pathlib.Path
    metrics_url: str
    metrics: str = ""

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                import urllib.request

                with urllib.request.urlopen(self.metrics_url, timeout=5) as answer:
                    self.metrics = answer.read().decode()
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        with contextlib.suppress(ApiException):
            kubernetes.client.CustomObjectsApi(self.api).delete_cluster_custom_object(
                *RESOURCE, "devicetaintrules", RULE
            )
        self.api.close()


def start_drasat(kubeconfig: pathlib.Path, namespace: str) -> Controller:
    """`drasat controller --driver gpu.nvidia.com`, once its DeviceTaintRule exists and its
    /readyz answers."""
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    drasat_allocator.install(api, namespace)
    log = pathlib.Path(tempfile.mkdtemp(prefix="bench-drasat-nv-")) / "controller.log"
    port = drasat_allocator.free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "drasat", "--log-level", "INFO", "controller", "--dra-api", "v1",
             "--kubeconfig", str(kubeconfig), "--namespace", namespace, "--driver", NVIDIA,
             "--metrics-address", f"127.0.0.1:{port}", "--kube-api-qps", "0",
             *drasat_allocator.EXTRA_ARGS],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    handle = Controller(process, api, log, f"{url}/metrics")
    custom = kubernetes.client.CustomObjectsApi(api)
    deadline = time.monotonic() + 120
    while True:
        try:
            custom.get_cluster_custom_object(*RESOURCE, "devicetaintrules", RULE)
            if drasat_allocator._ready(f"{url}/readyz"):
                return handle
            raise ConnectionError("not ready")
        except (ApiException, ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                handle.stop()
                raise RuntimeError(
                    f"drasat's controller did not start:\n{log.read_text()[-3000:]}"
                ) from None
            time.sleep(0.2)


def use_nvidia_format() -> None:
    """Point `bench.kube_alloc` at NVIDIA's format: its slices, classes, requests, and
    drasat's controller for NVIDIA's driver."""
    kube_alloc.node_slices = nvidia_slices
    kube_alloc.mig_request = mig_request
    kube_alloc.needs_request = needs_request
    kube_alloc.class_bodies = nvidia_classes
    kube_alloc.ALLOCATORS["drasat"] = start_drasat


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    defaults = ["--phases", "churn", "--nodes", "8", "--mig-share", "1", "--churn-nodes", "8",
                "--allocators", "kube,drasat", "--out", "bench/results/nvidia-alloc"]  # fmt: skip
    kube_alloc.parse_args(defaults + given)  # a bad flag stops here, before anything changes
    use_nvidia_format()
    return kube_alloc.main(defaults + given)


if __name__ == "__main__":
    sys.exit(main())
