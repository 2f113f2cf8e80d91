"""Real kubelets for the control plane in `realcluster.py`: each with its own root folder, ports and
container runtime (`fakecri`, the in-memory CRI fake `scripts/kube-build` builds beside the
kubelet), registering its own Node with a node identity (`system:node:<name>` in `system:nodes`,
a client certificate signed by the cluster's client CA, so the API server's Node authorizer and
NodeRestriction treat it as they treat a node).

The kubelet runs as root on whatever cgroup version the host has: cgroup v1 is allowed
(`failCgroupV1: false`), no QoS cgroups nor node-allocatable enforcement (several kubelets share one
host, and no container is real), swap allowed. Everything it writes is under its root folder: pod
logs, plugins and their registry (`plugins_registry`, watched for DRA plugins), checkpoints,
device-plugin and pod-resources sockets.

No node-lifecycle controller runs (the control plane's fake nodes send no heartbeat), so nothing
lifts the `node.kubernetes.io/not-ready` taint the API server puts on every new Node: `start` does
it once the kubelet reports Ready, as that controller would.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drasat.testbed.controlplane import binaries
from drasat.testbed.controlplane.realcluster import Cluster, ClusterError, Process, free_port

#: What `scripts/kube-build` builds for a node, beside the control plane.
NODE_BINARIES = ("kubelet", "fakecri")
#: The plugin watcher's folder under the kubelet's root dir (DefaultPluginsRegistryDir).
PLUGINS_REGISTRY = "plugins_registry"
#: Where a plugin's own sockets go under the kubelet's root (DefaultKubeletPluginsDirName).
PLUGINS = "plugins"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
#: The kernel settings a kubelet sets on its host at start (pkg/kubelet/cm setupKernelTunables:
#: overcommit, panic on oops, ...). Each test kubelet runs in its own mount namespace with a
#: private copy of these files bound over them, so it writes its copy and the host keeps its own.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: `sh -c` script, in the kubelet's own mount namespace: bind each private copy ($1: their
#: folder) over /proc/sys, and the node's own folder ($2) over /var/lib/kubelet, where the device
#: manager puts its socket whatever the root dir (`/var/lib/kubelet/device-plugins/kubelet.sock`,
#: a constant): kubelets on one host would take it from each other, and the host keeps an empty
#: /var/lib/kubelet. Then exec the rest.
_PRIVATE_SYSCTLS = (
    """set -e
copies=$1; var_lib_kubelet=$2; shift 2
for tunable in TUNABLES; do
  copy="$copies/$(echo "$tunable" | tr / .)"
  cat "/proc/sys/$tunable" > "$copy"
  mount --bind "$copy" "/proc/sys/$tunable"
done
mkdir -p /var/lib/kubelet "$var_lib_kubelet"
mount --bind "$var_lib_kubelet" /var/lib/kubelet
exec "$@"
"""
).replace("TUNABLES", " ".join(KERNEL_TUNABLES))


def locate_node_binaries(bin_dir: Path) -> Path:
    """`bin_dir` if it holds the kubelet and fakecri, else MissingBinaries saying how to build."""
    missing = [name for name in NODE_BINARIES if not (bin_dir / name).exists()]
    if missing:
        raise binaries.MissingBinaries(
            f"{bin_dir}: no {', '.join(missing)}: build them with scripts/kube-build "
            "(the current flavour builds the kubelet and the fake container runtime)"
        )
    return bin_dir


@dataclass
class Kubelet:
    """One real kubelet on its fake runtime. `start` makes one; `stop` ends both processes."""

    cluster: Cluster
    name: str
    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    runtime: Process | None = None
    kubelet: Process | None = None
    gates: list[str] = field(default_factory=list)

    # --- paths ---------------------------------------------------------------------------------

    @property
    def runtime_socket(self) -> Path:
        return self.root / "cri.sock"

    @property
    def record(self) -> Path:
        """fakecri's record: one JSON line per CreateContainer request the kubelet made."""
        return self.root / "containers.jsonl"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir (its `plugins_registry`, `plugins`, pods and checkpoints)."""
        return self.root / "root"

    @property
    def registry_dir(self) -> Path:
        """Where the kubelet's plugin watcher looks for registration sockets."""
        return self.kubelet_root / PLUGINS_REGISTRY

    @property
    def plugins_dir(self) -> Path:
        """The folder of the plugins' own sockets (each in a folder named after its driver)."""
        return self.kubelet_root / PLUGINS

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def log(self) -> Path:
        return self.cluster.log_path(f"kubelet-{self.name}")

    # --- start ---------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        cluster: Cluster,
        name: str,
        *,
        root: Path | None = None,
        extra_gates: tuple[str, ...] = (),
        timeout: float = 120.0,
    ) -> Kubelet:
        """Start the runtime and the kubelet for Node `name`; return once the Node is Ready and
        schedulable. Stops what it started if that does not happen within `timeout`."""
        node = cls(cluster=cluster, name=name, root=root or cluster.directory / "nodes" / name)
        node.boot(extra_gates=extra_gates, timeout=timeout)
        return node

    def boot(self, *, extra_gates: tuple[str, ...] = (), timeout: float = 120.0) -> None:
        """Start this node's runtime and kubelet (what `start` does once it has made the
        object; a kind of node with another runtime overrides `_start_runtime`)."""
        locate_node_binaries(self.cluster.bin_dir)
        if os.geteuid() != 0:
            raise ClusterError(
                f"kubelet {self.name}: the real kubelet runs as root (its cgroups, sysctls and "
                "mount namespace); run the tests as root or leave out the real-kubelet tests"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        kubelet_port = free_port()
        # Two random draws may meet (about once in 22,000): the healthz port is drawn again.
        healthz_port = next(p for p in iter(free_port, None) if p != kubelet_port)
        self.ports = {"kubelet": kubelet_port, "healthz": healthz_port}
        listed = binaries.listed_gates(self.cluster.bin_dir / "kubelet")
        self.gates = sorted((set(self.cluster.feature_gates) | set(extra_gates)) & listed)
        deadline = time.monotonic() + timeout
        try:
            self._write_identity()
            self._write_config()
            self._start_runtime(deadline)
            self._start_kubelet()
            self.wait_ready(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise

    def _write_identity(self) -> None:
        """A client certificate for `system:node:<name>` (group `system:nodes`) and its
        kubeconfig: the identity the Node authorizer grants a node's access by."""
        key, cert = self.root / "kubelet-client.key", self.root / "kubelet-client.crt"
        self.cluster.sign_client_certificate(
            key, cert, user=f"system:node:{self.name}", group="system:nodes"
        )
        ca = base64.b64encode(self.cluster.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "drasat",
                    "cluster": {"server": self.cluster.url, "certificate-authority-data": ca},
                }
            ],
            "users": [
                {
                    "name": "kubelet",
                    "user": {"client-certificate": str(cert), "client-key": str(key)},
                }
            ],
            "contexts": [{"name": "drasat", "context": {"cluster": "drasat", "user": "kubelet"}}],
            "current-context": "drasat",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    def _config(self) -> dict[str, Any]:
        socket = f"unix://{self.runtime_socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This host: cgroup v1, swap, several kubelets; no container is real.
            "failCgroupV1": False,
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "cgroupDriver": "cgroupfs",
            "localStorageCapacityIsolation": False,
            "makeIPTablesUtilChains": False,
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%"},
            "mergeDefaultEvictionSettings": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "address": "127.0.0.1",
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["healthz"],
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": socket,
            "imageServiceEndpoint": socket,
            "podLogsDir": str(self.root / "pod-logs"),
            "volumePluginDir": str(self.root / "volume-plugins"),
            "resolvConf": "",
            "registerNode": True,
            "featureGates": {gate: True for gate in self.gates},
            # Quick to notice a plugin, a pod or a status change in tests.
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "serializeImagePulls": False,
            "shutdownGracePeriod": "0s",
        }

    def _write_config(self) -> None:
        (self.root / "kubelet.yaml").write_text(json.dumps(self._config(), indent=2) + "\n")

    def _start_runtime(self, deadline: float) -> None:
        self.runtime = self.cluster.spawn(
            f"fakecri-{self.name}",
            "fakecri",
            ["--socket", str(self.runtime_socket), "--record", str(self.record)],
            cwd=self.root,
        )
        self._wait(deadline, self.runtime_socket.exists, self.runtime, "the fake runtime's socket")

    def _kubelet_args(self) -> list[str]:
        return [
            f"--config={self.root / 'kubelet.yaml'}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.root / 'pki'}",
            f"--hostname-override={self.name}",
            "--v=2",
            # Each call to a DRA plugin, with its request: what the tests count.
            "--vmodule=dra_plugin=4",
        ]

    def _start_kubelet(self) -> None:
        copies = self.root / "sysctl"
        copies.mkdir(exist_ok=True)
        if shutil.which("unshare") is None:
            raise ClusterError(
                "unshare (util-linux) is needed to keep the kubelet's sysctls private"
            )
        wrapper = (
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", _PRIVATE_SYSCTLS, "kubelet-private", str(copies),
            str(self.root / "var-lib-kubelet"),
        )  # fmt: skip
        # In its own folder: a relative path the kubelet resolves (a runtime's empty log path)
        # can only reach its own files.
        self.kubelet = self.cluster.spawn(
            f"kubelet-{self.name}", "kubelet", self._kubelet_args(), wrapper=wrapper, cwd=self.root
        )

    def wait_ready(self, timeout: float) -> None:
        """Wait until the Node is Ready, then lift the not-ready taint (see the module's doc)."""
        deadline = time.monotonic() + timeout
        assert self.kubelet is not None
        self._wait(deadline, self._node_ready, self.kubelet, f"Node {self.name} to be Ready")
        self.cluster.untaint_node(self.name, NOT_READY_TAINT)

    def _node_ready(self) -> bool:
        node = self.cluster.get_object(f"/api/v1/nodes/{self.name}")
        if node is None:
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _wait(
        self, deadline: float, ready: Callable[[], bool], process: Process, what: str
    ) -> None:
        while not ready():
            if not process.alive():
                raise ClusterError(f"{process.name} exited while waiting for {what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.2)

    def start_drasat_plugin(self, fleet: str, *, python: str, namespace: str = "drasat") -> Process:
        """drasat's node plugin (`python -m drasat nodeplugin`) on the simulated `fleet`, as the
        cluster administrator, keeping the node's NodeAllocationState in `namespace` (where a
        `drasat controller` reads it) and publishing the node's slices; its sockets, state and
        CDI specs in this node's folder. Returns at once: the plugin publishes, then registers
        with this kubelet, once `namespace` and drasat's CRDs exist (it waits for them: a chart
        installed later makes both)."""
        args = [
            "-m", "drasat", "--log-level", "INFO", "nodeplugin", "--node-name", self.name,
            "--simulate-gpus", f"{fleet},state={self.root / 'fleet.json'}",
            "--namespace", namespace, "--start-timeout", "0",
            "--kubeconfig", str(self.cluster.kubeconfig), "--kubelet-api", "structured",
            "--resourceslices", "--kubelet-plugin-dir", str(self.plugins_dir),
            "--kubelet-registry-dir", str(self.registry_dir),
            "--state-dir", str(self.root / "plugin-state"), "--cdi-root", str(self.root / "cdi"),
        ]  # fmt: skip
        return self.cluster.spawn(f"drasat-plugin-{self.name}", python, args, cwd=self.root)

    # --- restart and stop ----------------------------------------------------------------------

    def stop_kubelet(self, *, kill: bool = False) -> None:
        """Stop the kubelet only (the runtime keeps its containers, as on a node)."""
        if self.kubelet is not None:
            self.cluster.stop_process(self.kubelet, signal.SIGKILL if kill else signal.SIGTERM)

    def restart_kubelet(self, timeout: float = 120.0, *, kill: bool = False) -> None:
        """Stop the kubelet and start it again with the same root, ports and runtime."""
        self.stop_kubelet(kill=kill)
        self._start_kubelet()
        self.wait_ready(timeout)

    def stop(self) -> None:
        """Stop the kubelet, then its runtime; the Node object stays (delete it with the API)."""
        for process in (self.kubelet, self.runtime):
            if process is not None:
                self.cluster.stop_process(process, signal.SIGTERM)

    def remove(self) -> None:
        """After `stop`: delete the root folder. A mount the kubelet left under it (a pod's
        volume) is detached first, so that nothing outside the folder is ever deleted."""
        for mount in reversed(_mounts_under(self.root)):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        if _mounts_under(self.root):
            raise ClusterError(f"{self.root}: mounts remain under it; not deleting it")
        shutil.rmtree(self.root, ignore_errors=True)

    # --- reading it ----------------------------------------------------------------------------

    def created_containers(self) -> list[dict[str, Any]]:
        """Every CreateContainer request the kubelet made, oldest first (fakecri's record)."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def plugin_calls(self, method: str, claim_uid: str) -> int:
        """How often this kubelet (over its restarts) called `method` (NodePrepareResources,
        NodeUnprepareResources) of a DRA plugin for the claim `claim_uid`."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        calling = f"Calling {method.removesuffix('s')}"  # the kubelet logs "NodeUnprepareResource"
        return sum(1 for line in text.splitlines() if calling in line and claim_uid in line)

    def logs(self, lines: int = 60) -> str:
        parts = []
        for process in (self.runtime, self.kubelet):
            if process is None:
                continue
            text = Path(process.log).read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {process.name} ({process.log}) ---\n" + "\n".join(text))
        return "\n".join(parts)


def _mounts_under(folder: Path) -> list[str]:
    """Mount points at or below `folder`, outermost first (/proc/self/mountinfo field 5)."""
    prefix = str(folder.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len)
