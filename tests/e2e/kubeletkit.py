"""A GPU node for current-DRA end-to-end tests on the real control plane: a Node object, the real
`drasat nodeplugin` process on a simulated fleet (registered with `v1.DRAPlugin`), and the
simulated 1.34+ kubelet (`drasat.testbed.sim.kubelet`, flavour v1) calling it over its real sockets.

The node's ResourceSlices are either published by the plugin itself (`--resourceslices`, with
shareable GPUs by default as the plugin's) or given by the test (hand-made slices, e.g. one that
advertises a GPU the node lacks). The fleet keeps its hardware state in a file (`state=`), so a
test can look at the MIG instances the plugin created. Everything started or created is
stopped or deleted on exit.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
from kubecluster import create_fake_node, wait_for
from kubernetes.client import ApiException

from drasat.api.devicemodel import names
from drasat.api.groups import NAS_GROUP, VERSION
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.controlplane import realcluster
from drasat.testbed.sim import kubeclient, kubelet
from drasat.testbed.simnvml import SimulatedNvml

RESOURCE = ("resource.k8s.io", "v1")

Obj = dict[str, Any]


@dataclass
class GpuNode:
    """The fake node with its plugin process, its slices and its simulated kubelet."""

    name: str
    tmp: Path
    fleet: str  # the simulated fleet's spec, with its state file
    kubelet: kubelet.Kubelet
    plugin: subprocess.Popen[bytes]
    uuids: dict[str, str]  # whole-GPU device name -> GPU UUID

    @property
    def cdi_specs(self) -> list[Path]:
        return sorted((self.tmp / "cdi").glob("*.json"))

    @property
    def checkpoint_files(self) -> list[Path]:
        return sorted((self.tmp / "state" / "checkpoint" / "claims").glob("*"))

    def plugin_log(self) -> str:
        return (self.tmp / "plugin.log").read_text(errors="replace")[-4000:]

    def gpu_instances(self, index: int = 0) -> list[tuple[int, int]]:
        """(start, size) of the GPU instances on GPU `index`, as the plugin left the hardware."""
        gpu = SimulatedNvml(self.fleet).gpus[index]
        return sorted((gi.start, gi.profile.memory_slices) for gi in gpu.gpu_instances.values())

    def wait_running(self, namespace: str, name: str, timeout: float = 90) -> kubelet.PodRun:
        try:
            return self.kubelet.wait_running(namespace, name, timeout=timeout)
        except TimeoutError as error:
            reason = self.kubelet.reasons.get((namespace, name))
            raise AssertionError(f"{error} ({reason})\nplugin log:\n{self.plugin_log()}") from None

    def delete_pods(self, api: kubernetes.client.ApiClient, namespace: str, *pods: str) -> None:
        """Delete the pods gracefully: the kubelet unprepares their claims, then confirms."""
        core = kubernetes.client.CoreV1Api(api)
        for pod in pods:
            core.delete_namespaced_pod(pod, namespace)
        for pod in pods:
            self.kubelet.wait_stopped(namespace, pod, timeout=60)
        wait_for(
            lambda: (
                not {p.metadata.name for p in core.list_namespaced_pod(namespace).items} & set(pods)
            ),
            timeout=60,
            what="the pods to be deleted",
        )


def _node_slices(custom: Any, node: str) -> list[Obj]:
    listed = custom.list_cluster_custom_object(
        *RESOURCE, "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    items: list[Obj] = listed["items"]
    return items


@contextlib.contextmanager
def gpu_node(
    api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    name: str,
    fleet: str,
    *,
    slices: Callable[[str], list[Obj]] | None = None,
    shares: bool = True,
    nas_namespace: str | None = None,
    program: Sequence[str] = ("-m", "drasat"),
) -> Iterator[GpuNode]:
    """The node `name` with the plugin on `fleet`. Its slices: `slices(node uid)` created by the
    test, or (None) the plugin's own (`--resourceslices`; shareable GPUs unless not `shares`).
    Its NodeAllocationState: in memory, or (`nas_namespace`) published there for drasat's
    controller. `program` runs the plugin (`callrecord.program`: its calls recorded)."""
    custom = kubernetes.client.CustomObjectsApi(api)
    tmp = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))  # unix socket paths stay short
    stateful = f"{fleet},state={tmp / 'fleet.json'}"
    node = create_fake_node(api, name)
    plugin: subprocess.Popen[bytes] | None = None
    sim_kubelet: kubelet.Kubelet | None = None
    made: list[Obj] = []
    try:
        extra = [] if slices is not None else ["--resourceslices"]
        extra.append("--shares" if shares else "--no-shares")
        nas = ["--namespace", nas_namespace] if nas_namespace else ["--in-memory-nas"]
        plugin = drasatprocess.start_plugin(
            tmp, name, "--simulate-gpus", stateful, *nas,
            "--kubeconfig", str(kube_cluster.kubeconfig), "--kubelet-api", "structured", *extra,
            program=program,
        )  # fmt: skip
        if slices is not None:
            for body in slices(node.metadata.uid):
                try:
                    custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
                    made.append(body)
                except ApiException as exc:  # 409: the same slice is there already
                    if exc.status != 409:
                        raise
        else:
            wait_for(
                lambda: _node_slices(custom, name),
                timeout=60,
                what=f"the plugin to publish {name}'s slices",
            )
        client = kubeclient.KubeClient.from_kubeconfig(kube_cluster.kubeconfig)
        sim_kubelet = kubelet.Kubelet(
            client,
            node=name,
            registry_dir=tmp / "r",
            cdi_root=tmp / "cdi",
            api=kubelet.DraApi.v1,
            resync=0.5,
        ).start()
        assert sim_kubelet.wait_for(lambda: "gpu.drasat.io" in sim_kubelet.plugins, 30), (
            sim_kubelet.refused
        )
        gpus = NvmlDeviceLib(SimulatedNvml(fleet)).gpus()  # same seed: the same UUIDs
        uuids = {names.gpu_name(g.minor): g.uuid for g in gpus}
        yield GpuNode(name, tmp, stateful, sim_kubelet, plugin, uuids)
    finally:
        if sim_kubelet is not None:
            sim_kubelet.stop()
        if plugin is not None:
            drasatprocess.stop(plugin)
        with contextlib.suppress(ApiException):
            kubernetes.client.CoreV1Api(api).delete_node(name)
        if nas_namespace:
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(
                    NAS_GROUP, VERSION, nas_namespace, "nodeallocationstates", name
                )
        for body in made or _node_slices(custom, name):
            with contextlib.suppress(ApiException):  # the garbage collector may have been first
                custom.delete_cluster_custom_object(
                    *RESOURCE, "resourceslices", body["metadata"]["name"]
                )
        shutil.rmtree(tmp, ignore_errors=True)
