"""One GPU node under either kubelet, for tests that run the same scenario on both (issue 28 item
4): `simulated` (`kubeletkit.gpu_node`: `drasat.testbed.sim.kubelet` on a fake Node) or `real`
(`realkubeletkit.real_node`: the kubelet v1.37.2 on `fakecri`), each with drasat's real
`drasat nodeplugin` process on a simulated fleet.

`Node` reads both alike: a pod running, the CDI devices each container was created with (the
simulated kubelet's choice, or the runtime's record of the real kubelet's CreateContainer
request) and the environment they give it, read from the plugin's CDI specs as a CDI-aware
runtime does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kubernetes
from kubeletkit import GpuNode, gpu_node
from realkubeletkit import RealNode, real_node
from slicekit import unique

from drasat.testbed.controlplane import realcluster
from drasat.testbed.sim import kubelet as simkubelet

KINDS = ("simulated", "real")
RESOURCE = ("resource.k8s.io", "v1")
Obj = dict[str, Any]


class Node:
    """A node under one kubelet (`kind`), read the same way for both."""

    def __init__(self, kind: str, api: kubernetes.client.ApiClient, node: GpuNode | RealNode):
        self.kind = kind
        self.api = api
        self.node = node

    # --- what both kits have -------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def fleet(self) -> str:
        return self.node.fleet

    @property
    def uuids(self) -> dict[str, str]:
        return self.node.uuids

    @property
    def cdi_specs(self) -> list[Path]:
        return self.node.cdi_specs

    @property
    def cdi_root(self) -> Path:
        return self.node.tmp / "cdi"

    @property
    def checkpoint_files(self) -> list[Path]:
        return self.node.checkpoint_files

    def gpu_instances(self, index: int = 0) -> list[tuple[int, int]]:
        return self.node.gpu_instances(index)

    def cleaned_up(self) -> None:
        """No CDI spec, no checkpointed claim, the plugin still running."""
        assert self.cdi_specs == [] and self.checkpoint_files == []
        assert self.node.plugin.poll() is None, self.node.plugin_log()

    # --- pods ----------------------------------------------------------------------------------

    def wait_running(self, namespace: str, pod: str) -> None:
        if isinstance(self.node, RealNode):
            self.node.wait_running(self.api, namespace, pod)
        else:
            self.node.wait_running(namespace, pod)

    def delete_pods(self, namespace: str, *pods: str) -> None:
        """Delete the pods; return once the kubelet confirmed each (after its unprepare)."""
        self.node.delete_pods(self.api, namespace, *pods)

    def claims(self, namespace: str, pod: str) -> dict[str, Obj]:
        """The pod's ResourceClaims as the API server holds them, by their name in the pod."""
        core = kubernetes.client.CoreV1Api(self.api)
        custom = kubernetes.client.CustomObjectsApi(self.api)
        held = core.read_namespaced_pod(pod, namespace)
        made = {s.name: s.resource_claim_name for s in held.status.resource_claim_statuses or []}
        return {
            entry.name: custom.get_namespaced_custom_object(
                *RESOURCE,
                namespace,
                "resourceclaims",
                entry.resource_claim_name or made[entry.name],
            )
            for entry in held.spec.resource_claims or []
        }

    def container_cdi_devices(self, namespace: str, pod: str, container: str = "") -> list[str]:
        """The CDI devices the container (the pod's only one, or `container`) was created with."""
        if isinstance(self.node, RealNode):
            records = [
                r
                for r in self.node.containers(namespace, pod)
                if not container or r["container"] == container
            ]
            assert len(records) == 1, (records, self.node.diagnostics())
            return list(records[0]["cdiDevices"])
        run = self.node.kubelet.running(namespace, pod)
        assert run is not None, f"pod {namespace}/{pod} is not running"
        chosen = [ids for name, ids in run.containers.items() if not container or name == container]
        assert len(chosen) == 1, run.containers
        return chosen[0]

    def container_env(self, namespace: str, pod: str, container: str = "") -> dict[str, str]:
        """Assert the container was given exactly the CDI devices of the claims it uses (of the
        requests it names, else all of the claim's: one per allocated device); the environment
        those devices give it."""
        got = self.container_cdi_devices(namespace, pod, container)
        spec = kubernetes.client.CoreV1Api(self.api).read_namespaced_pod(pod, namespace).spec
        (used,) = [c for c in spec.containers if not container or c.name == container]
        claims = self.claims(namespace, pod)
        expected = {
            f"k8s.gpu.drasat.io/claim={claims[c.name]['metadata']['uid']}-{r['device']}"
            for c in used.resources.claims
            for r in claims[c.name]["status"]["allocation"]["devices"]["results"]
            if not c.request or r["request"].partition("/")[0] == c.request
        }
        assert sorted(set(got)) == sorted(expected), (got, expected)
        edits, undefined = simkubelet.cdi_edits(self.cdi_root, got)
        assert not undefined, f"no CDI spec in {self.cdi_root} defines {undefined}"
        env: dict[str, str] = {}
        for device in got:  # a later device's value of a variable wins, as in a runtime
            env.update(edits[device])
        return env


@contextlib.contextmanager
def any_node(
    kind: str,
    api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    fleet: str,
    *,
    shares: bool = True,
    program: Sequence[str] = ("-m", "drasat"),
) -> Iterator[Node]:
    """A node of a unique name on `fleet` under the `kind` kubelet (see the module's doc)."""
    make = real_node if kind == "real" else gpu_node
    name = unique(f"k{kind[0]}")
    with make(api, kube_cluster, name, fleet, shares=shares, program=program) as node:
        yield Node(kind, api, node)
