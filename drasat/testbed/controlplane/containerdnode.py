"""Real kubelets on real containerd: test nodes whose pods are containers, built by runc from the
images and the CDI specs on the node.

Each node is a set of namespaces on this machine, like a small machine of its own:

- a PID namespace whose first process is the pause program: everything the node runs (containerd,
  the kubelet, the runtime's shims, every container) lives in it, so stopping that one process (or
  the death of the test process that started it) ends them all, as a powered-off machine would;
- a mount namespace (a slave of this machine's, so nothing it mounts leaks out) where the node's
  own folders are bound over `/run` and `/var/lib`: containerd's state and the kubelet's root
  (`/var/lib/kubelet`), the CDI specs (`/var/run/cdi`), drasat's state (`/var/lib/drasat`), the
  fake driver root (`/run/nvidia/driver`) are the node's own at their usual paths, so the chart's
  defaults hold, and this machine sees them under `<node>/fs/`; `/` is made shared, as on a
  systemd host, for the mounts with propagation that pods ask for;
- a network namespace with a bridge (CNI `bridge` and `host-local`, pods on 10.244.<n>.0/24),
  where the `kubernetes` Service's address (10.96.0.1:443) and the API server's own loopback
  address reach the API server through `netforward` (this machine's network is not touched), and
  the API server reaches the kubelet's port the same way (`kubectl logs`, `exec`).

containerd runs with CDI on (`/etc/cdi`, `/var/run/cdi`), runc with seccomp, the pause image
built here (scripts/runtime-build) imported before the kubelet starts, and any image archive given
(scripts/image-build's). The kubelet runs as `realkubelet.Kubelet` runs it, with the container
runtime's socket, the node's root at `/var/lib/kubelet`, its pods' cgroups under
`/drasat/<cluster>/<node>` (removed when the node stops) and the API server's client certificate
trusted for its port.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drasat.testbed.controlplane import binaries
from drasat.testbed.controlplane.realcluster import Cluster, ClusterError, Process, start_time
from drasat.testbed.controlplane.realkubelet import KERNEL_TUNABLES, Kubelet

CONTAINERD_VERSION = "v2.4.2"
#: What scripts/runtime-build puts in its folder.
RUNTIME_FILES = (
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
    "pause",
    "pause.oci.tar",
    "pause.image",
)
#: The `kubernetes` Service's ClusterIP: the first address of the API server's service range
#: (realcluster: --service-cluster-ip-range=10.96.0.0/16), which kubelets give pods as
#: KUBERNETES_SERVICE_HOST and the API server's certificate names.
SERVICE_ADDRESS = "10.96.0.1"
SERVICE_PORT = 443
#: In the node's mount namespace: containerd's socket, and the folders that are the node's own.
SOCKET = "/run/containerd/containerd.sock"
OWN_FOLDERS = {"/run": "run", "/var/lib": "var-lib"}
#: containerd's namespace for the CRI's containers and images.
CRI_NAMESPACE = "k8s.io"
#: Written by the node's first process once its namespaces are set up (in its /run).
READY_MARKER = "drasat-node-ready"
CLONE_NEWPID = 0x20000000

#: The bridge of the node's pods, made before the kubelet starts: its address is the Node's.
BRIDGE = "cni0"
#: `sh -c` script, the first process of the node's namespaces ($1: the node's folder, $2: the
#: pause program, $3: the node's address/prefix): bind the node's folders and private copies of
#: the kubelet's kernel settings, make / shared, bring up the loopback with the Service address
#: and the pods' bridge with the node's address, then become the pause program.
_NODE_INIT_TEMPLATE = """set -e
node=$1; pause=$2; address=$3
mount --bind "$node/fs/run" /run
mount --bind "$node/fs/var-lib" /var/lib
for tunable in TUNABLES; do
  copy="$node/sysctl/$(echo "$tunable" | tr / .)"
  cat "/proc/sys/$tunable" > "$copy"
  mount --bind "$copy" "/proc/sys/$tunable"
done
mount --make-rshared /
ip link set lo up
ip addr add SERVICE/32 dev lo
ip link add BRIDGE type bridge
ip addr add "$address" dev BRIDGE
ip link set BRIDGE up
: > /run/READY
exec "$pause"
"""
_NODE_INIT = (
    _NODE_INIT_TEMPLATE.replace("TUNABLES", " ".join(KERNEL_TUNABLES))
    .replace("SERVICE", SERVICE_ADDRESS)
    .replace("READY", READY_MARKER)
    .replace("BRIDGE", BRIDGE)
)


def default_runtime_dir() -> Path:
    """`$DRASAT_RUNTIME_BIN`, else `~/.cache/drasat/runtime-containerd-<version>`."""
    explicit = os.environ.get("DRASAT_RUNTIME_BIN")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "drasat" / f"runtime-containerd-{CONTAINERD_VERSION}"


def locate_runtime(folder: Path | None = None) -> Path:
    """The folder holding scripts/runtime-build's files, or MissingBinaries saying how to build."""
    folder = folder or default_runtime_dir()
    missing = [name for name in RUNTIME_FILES if not (folder / name).exists()]
    if missing:
        raise binaries.MissingBinaries(
            f"{folder}: no {', '.join(missing)}: build them with scripts/runtime-build (a cold "
            "build takes several minutes) or set DRASAT_RUNTIME_BIN"
        )
    return folder


def _setns(fd: int, kind: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, kind) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


@contextlib.contextmanager
def children_in_pid_namespace(pid: int) -> Iterator[None]:
    """The processes this thread starts meanwhile are born in `pid`'s PID namespace (setns
    changes where a thread's children go, never the thread itself), so they live and die with
    the node; their pids, as this process sees them, stay what Popen returns."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    node = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(node, CLONE_NEWPID)
        try:
            yield
        finally:
            _setns(own, CLONE_NEWPID)
    finally:
        os.close(node)
        os.close(own)


def _children_of(parent: int) -> list[int]:
    """The pids whose parent is `parent` (field 4 of /proc/PID/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def ctr(
    node_pid: int, runtime_dir: Path, *args: str, timeout: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """containerd's `ctr` in the mount namespace of the node whose first process is
    `node_pid`, in the CRI's namespace (k8s.io)."""
    command = [
        "nsenter", f"--mount=/proc/{node_pid}/ns/mnt", "--", str(runtime_dir / "ctr"),
        "--address", SOCKET, "--namespace", CRI_NAMESPACE, *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def import_images(
    name: str, node_pid: int, runtime_dir: Path, archives: list[Path] | tuple[Path, ...]
) -> None:
    """Import image archives (OCI or docker: their names kept) into a node's containerd."""
    for archive in archives:
        done = ctr(node_pid, runtime_dir, "images", "import", str(archive.resolve()))
        if done.returncode != 0:
            raise ClusterError(f"node {name}: importing {archive} failed: {done.stderr.strip()}")


def import_into_running(cluster: Cluster, archives: list[Path]) -> list[str]:
    """Import image archives into every running containerd node of a recorded cluster
    (`scripts/kube-cluster import-images`); the names of the nodes."""
    runtime = locate_runtime()
    nodes = [p for p in cluster.processes if p.name.startswith("node-") and p.alive()]
    for process in nodes:
        import_images(process.name.removeprefix("node-"), process.pid, runtime, archives)
    return [p.name.removeprefix("node-") for p in nodes]


def start_nodes(
    cluster: Cluster,
    count: int,
    *,
    images: tuple[Path, ...] = (),
    runtime_dir: Path | None = None,
    timeout: float = 180.0,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[ContainerdKubelet]:
    """Start `node-1` .. `node-<count>` one after another, then import the image archives into
    all of them at once (the import, not the start, takes most of the time); stops the nodes
    started if one fails."""
    nodes: list[ContainerdKubelet] = []
    try:
        for index in range(1, count + 1):
            progress(f"node-{index}: containerd and the kubelet")
            nodes.append(
                ContainerdKubelet.start_on_containerd(
                    cluster, f"node-{index}", index=index, runtime_dir=runtime_dir, timeout=timeout
                )
            )
        if images:
            progress(f"importing {', '.join(a.name for a in images)} into every node")
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
                for done in [pool.submit(n.import_images, images) for n in nodes]:
                    done.result()
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def ensure_egress_proxy(cluster: Cluster, timeout: float = 30.0) -> Process:
    """The cluster's egress proxy (`netforward --proxy`), started if it does not run: the API
    server's way to the nodes' kubelets and pods."""
    running = [p for p in cluster.processes if p.name == "egress-proxy" and p.alive()]
    if running:
        return running[0]
    (cluster.directory / "nodes").mkdir(parents=True, exist_ok=True)
    args = [
        "-m", "drasat.testbed.controlplane.netforward",
        "--proxy", str(cluster.egress_proxy_socket), "--nodes", str(cluster.directory / "nodes"),
    ]  # fmt: skip
    proxy = cluster.spawn("egress-proxy", sys.executable, args)
    deadline = time.monotonic() + timeout
    log = Path(proxy.log)
    while "listening" not in log.read_text(errors="replace"):
        if not proxy.alive() or time.monotonic() > deadline:
            raise ClusterError(f"the egress proxy did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proxy


def remove_node_cgroups(cluster: Cluster) -> list[str]:
    """After the cluster stopped: remove its containerd nodes' cgroups; those left in use."""
    folder = cluster.directory / "nodes"
    nodes = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    return [left for node in nodes for left in remove_cgroups(cgroup_root(cluster, node))]


def cgroup_root(cluster: Cluster, node: str) -> str:
    """The cgroup (in every hierarchy) the node's pods go under: one per cluster folder and
    node, so that clusters of several users or test runs never share one."""
    digest = hashlib.sha256(str(cluster.directory.resolve()).encode()).hexdigest()[:12]
    return f"/drasat/{digest}/{node}"


def remove_cgroups(path: str, timeout: float = 10.0) -> list[str]:
    """Remove the cgroup `path` and every one below it from each cgroup v1 hierarchy (and the
    unified one), deepest first, once the processes in them have exited; then its parents that
    are left empty up to /drasat. Returns the folders that could not be removed."""
    roots = [p for p in Path("/sys/fs/cgroup").iterdir() if (p / "cgroup.procs").exists()]
    if Path("/sys/fs/cgroup/cgroup.procs").exists():
        roots = [Path("/sys/fs/cgroup")]  # cgroup v2 only
    left: list[str] = []
    deadline = time.monotonic() + timeout
    for root in roots:
        top = root / path.lstrip("/")
        if not top.is_dir():
            continue
        folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for folder in [*folders, top]:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(str(folder))
                        break
                    time.sleep(0.1)
        parent = top.parent
        while parent.name and parent != root and parent.relative_to(root).parts[0] == "drasat":
            with contextlib.suppress(OSError):
                parent.rmdir()
            parent = parent.parent
    return left


@dataclass
class ContainerdKubelet(Kubelet):
    """A real kubelet on real containerd, in namespaces of its own (see the module's doc).
    `start_on_containerd` makes one; `stop` ends everything it runs."""

    runtime_dir: Path = field(default_factory=default_runtime_dir)
    #: The node's number: its pods' subnet is 10.244.<index>.0/24.
    index: int = 1
    #: Image archives imported into its containerd before the kubelet starts.
    images: tuple[Path, ...] = ()
    node: Process | None = None
    forwarder: Process | None = None
    _holder: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @classmethod
    def start_on_containerd(
        cls,
        cluster: Cluster,
        name: str,
        *,
        index: int,
        runtime_dir: Path | None = None,
        images: tuple[Path, ...] = (),
        root: Path | None = None,
        extra_gates: tuple[str, ...] = (),
        timeout: float = 180.0,
    ) -> ContainerdKubelet:
        """Start the node's namespaces, containerd (with the images) and the kubelet for Node
        `name`; return once the Node is Ready. Stops what it started if that fails."""
        runtime = locate_runtime(runtime_dir)
        root = (root or cluster.directory / "nodes" / name).resolve()
        under = [f for f in OWN_FOLDERS if root.is_relative_to(f)]
        if under:
            raise ClusterError(
                f"{root}: a containerd node's folder cannot be under {under[0]}, which the node "
                "has its own of; choose a cluster folder elsewhere (--dir)"
            )
        if shutil.which("nsenter") is None or shutil.which("unshare") is None:
            raise ClusterError("nsenter and unshare (util-linux) are needed for containerd nodes")
        if not cluster.egress_proxy:
            raise ClusterError(
                "containerd nodes have networks of their own: start the cluster with "
                "egress_proxy=True, so that the API server reaches their kubelets"
            )
        ensure_egress_proxy(cluster)
        node = cls(
            cluster=cluster,
            name=name,
            root=root,
            runtime_dir=runtime,
            index=index,
            images=tuple(images),
        )
        node.boot(extra_gates=extra_gates, timeout=timeout)
        return node

    # --- paths ---------------------------------------------------------------------------------

    @property
    def fs(self) -> Path:
        """The node's own folders as this machine sees them (`fs/run` is its /run, ...)."""
        return self.root / "fs"

    @property
    def kubelet_root(self) -> Path:
        return self.fs / OWN_FOLDERS["/var/lib"] / "kubelet"

    @property
    def runtime_socket(self) -> Path:
        return self.fs / OWN_FOLDERS["/run"] / SOCKET.removeprefix("/run/")

    @property
    def cdi_dir(self) -> Path:
        """The node's /var/run/cdi, where its node plugin writes the claims' CDI specs."""
        return self.fs / OWN_FOLDERS["/run"] / "cdi"

    def host_path(self, path: str) -> Path:
        """Where this machine sees the node's `path` (under /run or /var/lib: the node's own;
        elsewhere: this machine's own, shared)."""
        for inside, folder in OWN_FOLDERS.items():
            if path == inside or path.startswith(inside + "/"):
                return self.fs / folder / path[len(inside) :].lstrip("/")
        return Path(path)

    @property
    def subnet(self) -> str:
        """The node's pods' subnet; its first address is the node's own (the bridge's)."""
        return f"10.244.{self.index}.0/24"

    @property
    def address(self) -> str:
        return f"10.244.{self.index}.1"

    @property
    def cgroup(self) -> str:
        return cgroup_root(self.cluster, self.name)

    def _enter(self, *, net: bool = True) -> tuple[str, ...]:
        """nsenter into the node's mount (and network) namespace; it execs, keeping the pid."""
        assert self.node is not None
        ns = f"/proc/{self.node.pid}/ns"
        return ("nsenter", f"--mount={ns}/mnt", *((f"--net={ns}/net",) if net else ()), "--")

    # --- configuration -------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        config = super()._config()
        socket = f"unix://{SOCKET}"
        config.update(
            containerRuntimeEndpoint=socket,
            imageServiceEndpoint=socket,
            # Each pod's cgroup under the node's own (kubelet's cgroupRoot is every pod's parent
            # when cgroupsPerQOS is off).
            cgroupRoot=self.cgroup,
            # The API server reaches the port through the egress proxy, at the Node's address.
            address=self.address,
            # The API server's calls (logs, exec) carry its client certificate.
            authentication={
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cluster.client_ca_file)},
            },
        )
        return config

    def _kubelet_args(self) -> list[str]:
        args = [a for a in super()._kubelet_args() if not a.startswith("--root-dir=")]
        return [*args, "--root-dir=/var/lib/kubelet", f"--node-ip={self.address}"]

    def _containerd_config(self) -> str:
        sandbox = (self.runtime_dir / "pause.image").read_text().strip()
        return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "{SOCKET}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox}"

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # No container's oom_score_adj below containerd's own: lowering it needs CAP_SYS_RESOURCE,
  # which some hosts (this project's among them) leave out of root's capabilities.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{self.runtime_dir / "runc"}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{self.runtime_dir / "cni"}"]
    conf_dir = "{self.root / "cni"}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "drasat-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.subnet, "gateway": self.address}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }

    def _write_config(self) -> None:
        super()._write_config()
        (self.root / "containerd.toml").write_text(self._containerd_config())
        cni = self.root / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-drasat-pods.conflist").write_text(json.dumps(self._cni_config(), indent=2))

    # --- start ---------------------------------------------------------------------------------

    def _start_runtime(self, deadline: float) -> None:
        self._start_namespaces(deadline)
        self._start_forwarder(deadline)
        assert self.node is not None
        path = f"PATH={self.runtime_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        with children_in_pid_namespace(self.node.pid):
            self.runtime = self.cluster.spawn(
                f"containerd-{self.name}",
                str(self.runtime_dir / "containerd"),
                ["--config", str(self.root / "containerd.toml")],
                wrapper=(*self._enter(), "env", path),
                cwd=self.root,
            )
        self._wait(deadline, self.runtime_socket.exists, self.runtime, "containerd's socket")
        self.import_images([self.runtime_dir / "pause.oci.tar", *self.images])

    def _start_namespaces(self, deadline: float) -> None:
        for folder in (*OWN_FOLDERS.values(),):
            (self.fs / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "sysctl").mkdir(exist_ok=True)
        (self.fs / OWN_FOLDERS["/run"] / READY_MARKER).unlink(missing_ok=True)
        command = [
            "unshare", "--pid", "--fork", "--kill-child", "--mount", "--net",
            "--propagation", "slave", "--mount-proc", "--",
            "sh", "-c", _NODE_INIT, "drasat-node", str(self.root),
            str(self.runtime_dir / "pause"), f"{self.address}/24",
        ]  # fmt: skip
        if self.cluster.die_with_parent:
            # unshare blocks SIGTERM while it waits for its child: SIGKILL it, and its
            # --kill-child ends the node.
            command = ["setpriv", "--pdeathsig", "KILL", "--", *command]
        log = self.cluster.log_path(f"node-{self.name}")
        with log.open("ab") as out:
            self._holder = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
            )
        ready = self.fs / OWN_FOLDERS["/run"] / READY_MARKER
        while True:
            children = _children_of(self._holder.pid)
            if children and ready.exists():
                break
            if self._holder.poll() is not None:
                raise ClusterError(
                    f"node {self.name}: its namespaces did not start\n{log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise ClusterError(f"node {self.name}: timed out setting up its namespaces")
            time.sleep(0.05)
        first = children[0]
        # The node's first process is what `stop` (and `scripts/kube-cluster down`) signals:
        # SIGTERM ends it, and with it every process of the node's PID namespace.
        self.node = Process(f"node-{self.name}", first, start_time(first) or "", str(log))
        self.cluster.record(self.node)
        # What the egress proxy reads to reach the node's addresses (its kubelet, its pods).
        network = {"subnet": self.subnet, "netns": f"/proc/{first}/ns/net"}
        (self.root / "network.json").write_text(json.dumps(network) + "\n")

    def _start_forwarder(self, deadline: float) -> None:
        assert self.node is not None
        api = self.cluster.ports["apiserver"]
        args = [
            "-m", "drasat.testbed.controlplane.netforward",
            "--netns", f"/proc/{self.node.pid}/ns/net",
            "--into", f"{SERVICE_ADDRESS}:{SERVICE_PORT}=127.0.0.1:{api}",
            "--into", f"127.0.0.1:{api}=127.0.0.1:{api}",
        ]  # fmt: skip
        self.forwarder = self.cluster.spawn(
            f"netforward-{self.name}", sys.executable, args, cwd=self.root
        )
        log = Path(self.forwarder.log)
        self._wait(
            deadline,
            lambda: "listening" in log.read_text(errors="replace"),
            self.forwarder,
            "the network forwarder",
        )

    def _start_kubelet(self) -> None:
        assert self.node is not None
        with children_in_pid_namespace(self.node.pid):
            self.kubelet = self.cluster.spawn(
                f"kubelet-{self.name}",
                "kubelet",
                self._kubelet_args(),
                wrapper=self._enter(),
                cwd=self.root,
            )

    # --- images --------------------------------------------------------------------------------

    def ctr(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """containerd's `ctr` on this node, in the CRI's namespace (k8s.io)."""
        assert self.node is not None
        return ctr(self.node.pid, self.runtime_dir, *args, timeout=timeout)

    def import_images(self, archives: list[Path] | tuple[Path, ...]) -> None:
        """Import image archives (OCI or docker) into the node's containerd, unpacked."""
        assert self.node is not None
        import_images(self.name, self.node.pid, self.runtime_dir, archives)

    def image_names(self) -> list[str]:
        done = self.ctr("images", "list", "--quiet")
        return [line for line in done.stdout.splitlines() if line and ":" in line]

    def container_spec(self, container_id: str) -> dict[str, Any]:
        """The OCI runtime spec containerd gave runc for a container (`ctr containers info`):
        the CDI edits it applied are in its devices, environment and mounts."""
        done = self.ctr("containers", "info", container_id.removeprefix("containerd://"))
        if done.returncode != 0:
            raise ClusterError(f"node {self.name}: no container {container_id}: {done.stderr}")
        info: dict[str, Any] = json.loads(done.stdout)
        spec: dict[str, Any] = info.get("Spec") or {}
        return spec

    # --- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the kubelet and containerd, then the node's first process, which ends every
        process left in its PID namespace (shims, containers); then the forwarder, and remove
        the node's cgroups."""
        super().stop()
        if self.node is not None and self.node.alive():
            os.kill(self.node.pid, signal.SIGTERM)
            # The kernel ends every process of the namespace and waits until each is reaped:
            # bounded, so a process no one reaps shows as an error, not a hang.
            deadline = time.monotonic() + 60
            while self.node.alive():
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"node {self.name}: its first process (pid {self.node.pid}) did not end "
                        "within 60 s of SIGTERM (a process of its namespace left unreaped?)"
                    )
                time.sleep(0.05)
        if self.forwarder is not None:
            self.cluster.stop_process(self.forwarder, signal.SIGTERM)
        if self._holder is not None:
            try:
                self._holder.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._holder.kill()
                self._holder.wait()
        remove_cgroups(self.cgroup)

    def logs(self, lines: int = 60) -> str:
        parts = [super().logs(lines)]
        for process in (self.node, self.forwarder):
            if process is not None:
                text = Path(process.log).read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {process.name} ({process.log}) ---\n" + "\n".join(text))
        return "\n".join(parts)
