"""A GPU node with a real kubelet for end-to-end tests on the real control plane: the kubelet
v1.37.2 (`drasat.testbed.controlplane.realkubelet`) on `fakecri`, the in-memory container runtime
that records every CreateContainer request, and drasat's real `drasat nodeplugin` process on a
simulated fleet, registered through that kubelet's plugin watcher and driven only by it.

The test reads what the container was given from the runtime's record (`containers`): the CDI
device names the kubelet put in the request, resolved against the plugin's CDI specs
(`cdi_env`) as a CDI-aware runtime would. Everything started is stopped and everything created is
deleted on exit, also when the test fails: the node's pods (force-deleted so their namespace can
go), the plugin, the kubelet and its runtime, the Node, its ResourceSlices and the folder.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
from kubecluster import wait_for
from kubernetes.client import ApiException

from drasat.api.devicemodel import names
from drasat.api.groups import DRIVER_NAME, NAS_GROUP, VERSION
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.controlplane import realcluster
from drasat.testbed.controlplane.realkubelet import Kubelet
from drasat.testbed.simnvml import SimulatedNvml

RESOURCE = ("resource.k8s.io", "v1")
Obj = dict[str, Any]


def pod(name: str, *claims: tuple[str, str], containers: tuple[str, ...] = ("ctr",)) -> Obj:
    """A pod whose containers each use every claim in `claims` ((name in the pod, template)); a
    template name starting with `claim:` is an existing ResourceClaim's name instead. Nothing is
    mounted (no service-account token), so the kubelet mounts nothing on this host."""
    references = []
    for claim, source in claims:
        if source.startswith("claim:"):
            references.append({"name": claim, "resourceClaimName": source.removeprefix("claim:")})
        else:
            references.append({"name": claim, "resourceClaimTemplateName": source})
    return {
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": container,
                    "image": "registry.invalid/none:0",  # fakecri pulls nothing
                    "resources": {"claims": [{"name": c} for c, _ in claims]},
                }
                for container in containers
            ],
            "resourceClaims": references,
        },
    }


@dataclass
class RealNode:
    """A Node with its real kubelet, fake runtime and drasat's node plugin."""

    name: str
    tmp: Path
    fleet: str  # the simulated fleet's spec, with its state file
    kubelet: Kubelet
    plugin: subprocess.Popen[bytes]
    plugin_args: list[str]
    uuids: dict[str, str]  # whole-GPU device name -> GPU UUID
    #: What runs drasat (`callrecord.program`: the plugin's calls recorded).
    program: Sequence[str] = ("-m", "drasat")

    @property
    def cdi_root(self) -> Path:
        return self.tmp / "cdi"

    @property
    def cdi_specs(self) -> list[Path]:
        return sorted(self.cdi_root.glob("*.json"))

    @property
    def checkpoint_files(self) -> list[Path]:
        return sorted((self.tmp / "state" / "checkpoint" / "claims").glob("*"))

    def gpu_instances(self, index: int = 0) -> list[tuple[int, int]]:
        """(start, size) of the GPU instances on GPU `index`, as the plugin left the hardware."""
        gpu = SimulatedNvml(self.fleet).gpus[index]
        return sorted((gi.start, gi.profile.memory_slices) for gi in gpu.gpu_instances.values())

    def claim_uids(self, api: kubernetes.client.ApiClient, namespace: str, pod_name: str) -> Obj:
        """The pod's claims as the API server holds them, by their name in the pod."""
        core = kubernetes.client.CoreV1Api(api)
        custom = kubernetes.client.CustomObjectsApi(api)
        held = core.read_namespaced_pod(pod_name, namespace)
        found = {}
        for status in held.status.resource_claim_statuses or []:
            found[status.name] = custom.get_namespaced_custom_object(
                *RESOURCE, namespace, "resourceclaims", status.resource_claim_name
            )
        for reference in held.spec.resource_claims or []:
            if reference.resource_claim_name:
                found[reference.name] = custom.get_namespaced_custom_object(
                    *RESOURCE, namespace, "resourceclaims", reference.resource_claim_name
                )
        return found

    def container_got_its_claims(
        self, api: kubernetes.client.ApiClient, namespace: str, pod_name: str, container: str = ""
    ) -> tuple[Obj, dict[str, str]]:
        """Assert that the pod's container (its only one, or `container`) was created once, with
        exactly the CDI devices of the claims it uses (drasat's one per allocated device: of the
        requests it names, or all of the claim's); return the runtime's record and the
        environment those devices give it."""
        records = [
            r
            for r in self.containers(namespace, pod_name)
            if not container or r["container"] == container
        ]
        assert len(records) == 1, (records, self.diagnostics())
        (created,) = records
        core = kubernetes.client.CoreV1Api(api)
        spec = core.read_namespaced_pod(pod_name, namespace).spec
        (used,) = [c for c in spec.containers if c.name == created["container"]]
        claims = self.claim_uids(api, namespace, pod_name)
        expected = sorted(
            {
                f"k8s.gpu.drasat.io/claim={claims[c.name]['metadata']['uid']}-{r['device']}"
                for c in used.resources.claims
                for r in claims[c.name]["status"]["allocation"]["devices"]["results"]
                if not c.request or r["request"].partition("/")[0] == c.request
            }
        )
        assert sorted(set(created["cdiDevices"])) == expected, (created, self.diagnostics())
        return created, self.cdi_env(created["cdiDevices"])

    def inject_xid(self, device: str, xid: int) -> None:
        """An XID on the GPU of whole-GPU device `device`, delivered to the plugin process
        through its simulated fleet's `xids=` file."""
        index = [g.uuid for g in SimulatedNvml(self.fleet).gpus].index(self.uuids[device])
        with (self.tmp / "xids").open("a") as f:
            f.write(f"{index} {xid}\n")

    def plugin_log(self) -> str:
        return self.plugin_log_all()[-4000:]

    def plugin_log_all(self) -> str:
        return (self.tmp / "plugin.log").read_text(errors="replace")

    def registrations(self) -> int:
        """How often a kubelet has registered the plugin (its log line each time)."""
        return self.plugin_log_all().count("registered with the kubelet")

    def diagnostics(self) -> str:
        return f"plugin log:\n{self.plugin_log()}\n{self.kubelet.logs(80)}"

    def containers(self, namespace: str, pod_name: str) -> list[Obj]:
        """The runtime's record of the CreateContainer requests for one pod, oldest first."""
        return [
            entry
            for entry in self.kubelet.created_containers()
            if (entry["namespace"], entry["pod"]) == (namespace, pod_name)
        ]

    def cdi_env(self, cdi_ids: list[str]) -> dict[str, str]:
        """The environment the CDI devices `cdi_ids` (`vendor/class=name`) give a container, read
        from the plugin's spec files as a CDI-aware runtime reads them."""
        wanted = set(cdi_ids)
        env: dict[str, str] = {}
        found = set()
        for path in self.cdi_specs:
            spec = json.loads(path.read_text())
            for device in spec.get("devices", []):
                qualified = f"{spec['kind']}={device['name']}"
                if qualified in wanted:
                    found.add(qualified)
                    for pair in device.get("containerEdits", {}).get("env", []):
                        key, _, value = pair.partition("=")
                        env[key] = value
        missing = wanted - found
        assert not missing, f"no CDI spec in {self.cdi_root} defines {sorted(missing)}"
        return env

    def wait_running(
        self, api: kubernetes.client.ApiClient, namespace: str, pod_name: str, timeout: float = 90
    ) -> Any:
        """The pod once Running (every container started by the kubelet)."""
        core = kubernetes.client.CoreV1Api(api)

        def running() -> Any:
            held = core.read_namespaced_pod(pod_name, namespace)
            return held if held.status.phase == "Running" else None

        try:
            return wait_for(running, timeout=timeout, what=f"pod {namespace}/{pod_name} Running")
        except AssertionError as error:
            held = core.read_namespaced_pod(pod_name, namespace)
            events = core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={pod_name}"
            )
            said = "\n".join(f"{e.reason}: {e.message}" for e in events.items)
            raise AssertionError(
                f"{error}: {held.status.phase}\nevents:\n{said}\n{self.diagnostics()}"
            ) from None

    def delete_pods(self, api: kubernetes.client.ApiClient, namespace: str, *pods: str) -> None:
        """Delete the pods gracefully and wait until the kubelet has confirmed each deletion
        (which it does after unpreparing the pod's claims)."""
        core = kubernetes.client.CoreV1Api(api)
        for name in pods:
            core.delete_namespaced_pod(name, namespace)
        wait_for(
            lambda: (
                not {p.metadata.name for p in core.list_namespaced_pod(namespace).items} & set(pods)
            ),
            timeout=90,
            what=f"the kubelet to confirm the deletion of {', '.join(pods)}",
        )

    def start_plugin(self, *, append: bool = False) -> None:
        """(Re)start the node plugin with the same arguments and state."""
        self.plugin = drasatprocess.run(
            self.plugin_args, self.tmp / "plugin.log", append=append, program=self.program
        )
        socket = self.kubelet.registry_dir / f"{DRIVER_NAME}-reg.sock"
        drasatprocess.wait_started(
            self.plugin, socket.exists, self.tmp / "plugin.log", f"the node plugin of {self.name}"
        )

    def wait_registered(self, timeout: float = 60) -> None:
        """Until the plugin logs that the kubelet registered it."""
        wait_for(
            lambda: self.registrations() > 0,
            timeout=timeout,
            what=f"the kubelet of {self.name} to register drasat's plugin\n{self.diagnostics()}",
        )


def _node_slices(custom: Any, node: str) -> list[Obj]:
    listed = custom.list_cluster_custom_object(
        *RESOURCE, "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    items: list[Obj] = listed["items"]
    return items


def _publish_root_ca(core: Any, kube_cluster: realcluster.Cluster) -> threading.Event:
    """Every namespace's `kube-root-ca.crt` while a real kubelet runs (it mounts it into each
    pod's token volume), as the root-CA publisher would: the session cluster runs without that
    controller, whose ConfigMaps would show in the API contract tests' listings. Set the
    returned event to stop."""
    stop = threading.Event()
    body = {
        "metadata": {"name": "kube-root-ca.crt"},
        "data": {"ca.crt": kube_cluster.ca_file.read_text()},
    }

    def loop() -> None:
        while not stop.wait(0.2):
            with contextlib.suppress(Exception):
                for namespace in core.list_namespace().items:
                    with contextlib.suppress(ApiException):
                        core.create_namespaced_config_map(namespace.metadata.name, body)

    threading.Thread(target=loop, name="root-ca", daemon=True).start()
    return stop


@contextlib.contextmanager
def real_node(
    api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    name: str,
    fleet: str | None,
    *,
    shares: bool = True,
    nas_namespace: str | None = None,
    extra_gates: tuple[str, ...] = (),
    program: Sequence[str] = ("-m", "drasat"),
) -> Iterator[RealNode]:
    """Node `name` with its real kubelet; with a `fleet`, drasat's plugin on it, registered by the
    kubelet and publishing its slices (shareable GPUs unless not `shares`); its NAS in memory or
    (`nas_namespace`) published there for drasat's controller. `program` runs the plugin
    (`callrecord.program`: its calls recorded)."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    tmp = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))  # unix socket paths stay short
    kubelet: Kubelet | None = None
    node: RealNode | None = None
    publishing = _publish_root_ca(core, kube_cluster)
    try:
        kubelet = Kubelet.start(kube_cluster, name, root=tmp / "k", extra_gates=extra_gates)
        stateful = f"{fleet},state={tmp / 'fleet.json'},xids={tmp / 'xids'}" if fleet else ""
        plugin_args = [
            "nodeplugin", "--node-name", name, "--simulate-gpus", stateful,
            *(["--namespace", nas_namespace] if nas_namespace else ["--in-memory-nas"]),
            "--kubeconfig", str(kube_cluster.kubeconfig), "--kubelet-api", "structured",
            "--resourceslices", "--shares" if shares else "--no-shares",
            "--kubelet-plugin-dir", str(kubelet.plugins_dir),
            "--kubelet-registry-dir", str(kubelet.registry_dir),
            "--state-dir", str(tmp / "state"), "--cdi-root", str(tmp / "cdi"), "--gc-interval", "0",
        ]  # fmt: skip
        uuids = {}
        if fleet:
            gpus = NvmlDeviceLib(SimulatedNvml(fleet)).gpus()  # same seed: the same UUIDs
            uuids = {names.gpu_name(g.minor): g.uuid for g in gpus}
        node = RealNode(name, tmp, stateful, kubelet, None, plugin_args, uuids, program)  # type: ignore[arg-type]
        if fleet:
            node.start_plugin()
            node.wait_registered()
            wait_for(
                lambda: _node_slices(custom, name),
                timeout=60,
                what=f"the plugin to publish {name}'s slices",
            )
        yield node
    finally:
        publishing.set()
        # The node's pods first, while the kubelet runs: it unprepares their claims.
        with contextlib.suppress(ApiException):
            for held in core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}"
            ).items:
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(
                        held.metadata.name, held.metadata.namespace, grace_period_seconds=0
                    )
        if node is not None and node.plugin is not None:
            drasatprocess.stop(node.plugin)
        if kubelet is not None:
            kubelet.stop()
        with contextlib.suppress(ApiException):
            core.delete_node(name)
        if nas_namespace:
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(
                    NAS_GROUP, VERSION, nas_namespace, "nodeallocationstates", name
                )
        for body in _node_slices(custom, name):
            with contextlib.suppress(ApiException):  # the garbage collector may have been first
                custom.delete_cluster_custom_object(
                    *RESOURCE, "resourceslices", body["metadata"]["name"]
                )
        if kubelet is not None:
            kubelet.remove()
        shutil.rmtree(tmp, ignore_errors=True)
