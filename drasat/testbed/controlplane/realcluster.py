"""Start and stop a real control plane on loopback: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager as background processes, with their data, logs and kubeconfigs in one
cluster folder.

The API server runs with token authentication and RBAC, every `resource.k8s.io` version it serves
and every `DRA*` feature gate its `-h` lists (plus the gates those depend on), so device taints,
partitionable devices, consumable capacity and binding conditions are all there; or, with
`default_gates` (`scripts/kube-cluster up --version 1.34`), as that release comes: its default
feature gates and API versions, what a user's cluster of that version has. The controller
manager runs the controllers DRA and the usual workloads need (claims from templates, Deployments,
ReplicaSets, Jobs, StatefulSets) but no node lifecycle: fake nodes send no heartbeat. `cluster.json`
in the folder records the pids (with their start times, so a recycled pid is never signalled) for
`stop` from another process.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from drasat.testbed.controlplane import binaries


#: The resource.k8s.io versions a server serves besides those on by default, turned on here, by
#: minor version: classic DRA's v1alpha2 (1.27-1.30) and v1alpha3 (1.31); from 1.32 on, the
#: versions beside v1 (1.37 serves v1 by default and v1beta1, v1beta2, v1alpha3 when asked).
def resource_versions(minor: int) -> tuple[str, ...]:
    if minor <= 30:
        return ("v1alpha2",)
    if minor == 31:
        return ("v1alpha3",)
    return ("v1beta1", "v1beta2", "v1alpha3")


#: The controllers that make the pods of Deployments, ReplicaSets, Jobs, StatefulSets and
#: DaemonSets (drasat's chart runs its node plugin as one).
WORKLOAD_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "statefulset-controller",
    "daemonset-controller",
)
#: kube-controller-manager's controllers for fake nodes: claims from templates, the pods of the
#: workloads users apply (Deployments through ReplicaSets, Jobs, StatefulSets), owner cascades,
#: namespace deletion, each namespace's `default` ServiceAccount (pods are admitted with it) and
#: eviction for NoExecute device taints.
CONTROLLERS = (
    "resourceclaim-controller",
    *WORKLOAD_CONTROLLERS,
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "device-taint-eviction-controller",  # NoExecute device taints evict pods, as in a cluster
)
#: Each namespace's kube-root-ca.crt, which a real kubelet mounts into every pod's token volume:
#: only for clusters started with real kubelets (`start(root_ca_publisher=True)`), since the
#: ConfigMap it puts in every namespace would show in the API contract tests' listings.
ROOT_CA_PUBLISHER = "root-ca-certificate-publisher-controller"

#: "X is enabled, but depends on features that are disabled: [A B]" (component-base featuregate).
_DEPENDENCY = re.compile(
    r"(\w+) is enabled, but depends on features that are disabled: \[([^\]]*)\]"
)

STATE_FILE = "cluster.json"

#: The components this process started, by pid: kept so that their exit can be reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
ADMIN_USER = "drasat-admin"
#: Starts tried when a component finds its port taken (each on freshly drawn ports).
_START_ATTEMPTS = 3


class ClusterError(RuntimeError):
    """The control plane did not start or stop; the message names the component and its log."""


def default_dir() -> Path:
    """The folder `scripts/kube-cluster` uses when no `--dir` is given (one per user)."""
    return Path(tempfile.gettempdir()) / f"drasat-kube-{os.getuid()}"


#: Where listening ports are drawn from: below the kernel's ephemeral range
#: (net.ipv4.ip_local_port_range, 32768-60999 by default), since the kernel's own pick (bind to
#: port 0) lies inside it, and on a busy machine an outgoing connection can take that port
#: between the probe and the component's bind (CI saw etcd fail so: "bind: address already in
#: use").
_LISTEN_PORTS = (10000, 32767)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nothing listens on now, outside the range outgoing connections use
    (the kernel's pick where that range leaves no room below it)."""
    low, high = _LISTEN_PORTS[0], min(_LISTEN_PORTS[1], _ephemeral_low() - 1)
    candidates = [secrets.randbelow(high - low + 1) + low for _ in range(64)] if high > low else []
    for port in [*candidates, 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise ClusterError("no free loopback port")


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat); None once it has
    exited (gone, or a zombie not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass
class Process:
    """One started component: what `stop` needs to signal exactly it."""

    name: str
    pid: int
    started: str
    log: str

    def alive(self) -> bool:
        child = _CHILDREN.get(self.pid)
        if child is not None and child.poll() is not None:
            return False
        if start_time(self.pid) == self.started:
            return True
        if child is not None:
            # It exited between the two looks: reap it now, or it stays a zombie (and a zombie
            # in a test node's PID namespace keeps the namespace's first process from exiting).
            # A multithreaded one can be reaped only once its last thread is gone: wait for it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
        return False


@dataclass
class Cluster:
    """A running control plane. `start` makes one; `load` finds one from its folder."""

    directory: Path
    bin_dir: Path
    url: str = ""
    root_ca_publisher: bool = False
    #: The API server reaches nodes through the egress proxy (`egress_proxy_socket`).
    egress_proxy: bool = False
    ports: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    feature_gates: list[str] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    die_with_parent: bool = False
    minor: int = 0
    #: The release's default feature gates and API versions, nothing turned on.
    default_gates: bool = False
    #: What `spawn` started each process name with, for `restart` (this process only).
    commands: dict[str, tuple[str, list[str], tuple[str, ...], Path | None]] = field(
        default_factory=dict, repr=False
    )

    # --- paths ---------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The cluster administrator's kubeconfig (group system:masters)."""
        return self.directory / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.directory / "apiserver" / "apiserver.crt"

    def log_path(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    # --- start ---------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        directory: Path,
        bin_dir: Path | None = None,
        timeout: float = 180.0,
        progress: Callable[[str], None] = lambda _line: None,
        die_with_parent: bool = False,
        root_ca_publisher: bool = False,
        default_gates: bool = False,
        egress_proxy: bool = False,
    ) -> Cluster:
        """Start all four components in a fresh `directory`; stop what started if one fails.

        `egress_proxy`: the API server's connections to the cluster (kubelets, webhooks, pods)
        go through an HTTP CONNECT proxy on `egress_proxy_socket`, as with Konnectivity: test
        nodes whose network is a namespace of their own start one
        (`containerdnode.ensure_egress_proxy`).

        `die_with_parent`: the kernel ends each component when the process that started it dies
        (a test run killed with SIGKILL leaves nothing behind); `scripts/kube-cluster up` leaves
        it off, since its components must outlive it.
        """
        for attempt in range(_START_ATTEMPTS):
            try:
                return cls._start_once(
                    directory=directory,
                    bin_dir=bin_dir,
                    timeout=timeout,
                    progress=progress,
                    die_with_parent=die_with_parent,
                    root_ca_publisher=root_ca_publisher,
                    default_gates=default_gates,
                    egress_proxy=egress_proxy,
                )
            except ClusterError as error:
                if "address already in use" not in str(error) or attempt + 1 == _START_ATTEMPTS:
                    raise
                progress("a port was taken meanwhile: starting again on other ports")
        raise AssertionError("unreachable")

    @classmethod
    def _start_once(
        cls,
        *,
        directory: Path,
        bin_dir: Path | None,
        timeout: float,
        progress: Callable[[str], None],
        die_with_parent: bool,
        root_ca_publisher: bool,
        default_gates: bool = False,
        egress_proxy: bool = False,
    ) -> Cluster:
        folder = binaries.locate(bin_dir)
        if (directory / STATE_FILE).exists():
            if cls.load(directory).running():
                raise ClusterError(f"{directory}: a cluster is running there (stop it first)")
            shutil.rmtree(directory)  # a stopped cluster's folder: its data is ours to reuse
        elif directory.exists() and any(directory.iterdir()):
            # Never empty a folder we did not make (a mistyped --dir).
            raise ClusterError(f"{directory}: not empty and holds no cluster; choose another --dir")
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        cluster = cls(directory=directory, bin_dir=folder, die_with_parent=die_with_parent)
        cluster.root_ca_publisher = root_ca_publisher
        cluster.default_gates = default_gates
        cluster.egress_proxy = egress_proxy
        cluster.minor = binaries.minor_version(folder / "kube-apiserver")
        cluster.ports = {
            name: free_port()
            for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager")
        }
        cluster.url = f"https://127.0.0.1:{cluster.ports['apiserver']}"
        deadline = time.monotonic() + timeout
        try:
            cluster._write_credentials()
            progress(f"etcd on 127.0.0.1:{cluster.ports['etcd']}")
            cluster._start_etcd(deadline)
            progress(f"kube-apiserver on {cluster.url}")
            cluster._start_apiserver(deadline)
            progress("kube-controller-manager and kube-scheduler")
            cluster._start_controllers(deadline)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _write_credentials(self) -> None:
        """Tokens per identity, the service-account signing key, and one kubeconfig each."""
        self.tokens = {
            ADMIN_USER: secrets.token_hex(16),
            "system:kube-scheduler": secrets.token_hex(16),
            "system:kube-controller-manager": secrets.token_hex(16),
        }
        groups = {ADMIN_USER: "system:masters"}
        lines = [
            f'{token},{user},{user},"{groups.get(user, "")}"' for user, token in self.tokens.items()
        ]
        (self.directory / "tokens.csv").write_text("\n".join(lines) + "\n")
        if shutil.which("openssl") is None:
            raise ClusterError("openssl is needed to make the service-account signing key")
        subprocess.run(
            ["openssl", "genrsa", "-out", str(self.directory / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        # The CA of client certificates: a kubelet's node identity (`sign_client_certificate`).
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            "-keyout", str(self.client_ca_key), "-out", str(self.client_ca_file),
            "-subj", "/CN=drasat-client-ca",
        )  # fmt: skip
        self._write_kubelet_client_certificate()

    def _write_kubelet_client_certificate(self) -> None:
        """The API server's identity towards kubelets (`kubectl logs`, `exec`): a certificate
        of the client CA, which a kubelet that checks its callers trusts."""
        self.sign_client_certificate(
            self.directory / "apiserver-kubelet-client.key",
            self.directory / "apiserver-kubelet-client.crt",
            user="kube-apiserver-kubelet-client",
            group="system:masters",
        )

    @property
    def egress_proxy_socket(self) -> Path:
        return self.directory / "egress.sock"

    def _egress_args(self) -> list[str]:
        """With `egress_proxy`: the EgressSelectorConfiguration sending the `cluster` egress
        through the HTTP CONNECT proxy's unix socket."""
        if not self.egress_proxy:
            return []
        config = {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {
                        "proxyProtocol": "HTTPConnect",
                        "transport": {"uds": {"udsName": str(self.egress_proxy_socket)}},
                    },
                }
            ],
        }
        path = self.directory / "egress-selector.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return [f"--egress-selector-config-file={path}"]

    def _kubelet_client_args(self) -> list[str]:
        return [
            f"--kubelet-client-certificate={self.directory / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={self.directory / 'apiserver-kubelet-client.key'}",
            # A test node's address is the loopback; its name resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP",
        ]

    @property
    def client_ca_file(self) -> Path:
        return self.directory / "client-ca.crt"

    @property
    def client_ca_key(self) -> Path:
        return self.directory / "client-ca.key"

    def sign_client_certificate(self, key: Path, cert: Path, *, user: str, group: str) -> None:
        """A key and a certificate signed by the client CA: the API server authenticates its
        holder as `user` in `group` (CN and O)."""
        request = cert.with_suffix(".csr")
        _openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
            "-out", str(request), "-subj", f"/O={group}/CN={user}",
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.client_ca_file),
            "-CAkey", str(self.client_ca_key), "-CAcreateserial", "-days", "3650",
            "-out", str(cert),
        )  # fmt: skip
        request.unlink()
        key.chmod(0o600)

    def _write_kubeconfig(self, path: Path, user: str) -> None:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "drasat",
                    "cluster": {"server": self.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "drasat", "context": {"cluster": "drasat", "user": user}}],
            "current-context": "drasat",
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)

    def _spawn(self, name: str, args: list[str]) -> Process:
        return self.spawn(name, name, args)

    def spawn(
        self,
        name: str,
        binary: str,
        args: list[str],
        *,
        wrapper: tuple[str, ...] = (),
        cwd: Path | None = None,
    ) -> Process:
        """Start `binary` (from the binaries' folder, or an absolute path) as the recorded
        process `name`, its output
        in `name`'s log (appended to: a restarted process keeps its earlier lines), in `cwd`
        (default: the cluster's folder). `wrapper`: a command that ends by exec-ing its
        arguments (the pid stays the binary's)."""
        log = self.log_path(name)
        with log.open("ab") as out:
            child = subprocess.Popen(
                [*wrapper, str(self.bin_dir / binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.directory,
                start_new_session=True,  # outlives `scripts/kube-cluster up`; no terminal signals
                preexec_fn=sigterm_on_parent_death if self.die_with_parent else None,
            )
        process = Process(name, child.pid, start_time(child.pid) or "", str(log))
        self.commands[name] = (binary, args, wrapper, cwd)
        _CHILDREN[child.pid] = child  # polled by `alive`, so an exited child is reaped
        self.record(process)
        return process

    def record(self, process: Process) -> None:
        """Count a process started otherwise (not by `spawn`) as one of the cluster's: `stop`
        (here or from another process, `scripts/kube-cluster down`) signals it."""
        self.processes.append(process)
        self._save()

    def _start_etcd(self, deadline: float) -> None:
        client, peer = self.ports["etcd"], self.ports["etcd-peer"]
        self._spawn(
            "etcd",
            [
                "--name=drasat",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=drasat=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # test data: speed over durability
                "--log-level=warn",
            ],
        )
        self._wait("etcd", deadline, lambda: _http_ok(f"http://127.0.0.1:{client}/health"))

    def _apiserver_args(self) -> list[str]:
        apis = (
            []
            if self.default_gates
            else [f"resource.k8s.io/{v}" for v in resource_versions(self.minor)]
        )
        if "GenericWorkload" in self.feature_gates:
            # DRAWorkloadResourceClaims needs it, and the scheduler waits for its PodGroup
            # informer to sync before it takes its lease.
            apis.append("scheduling.k8s.io/v1beta1")
        runtime = ",".join(f"{api}=true" for api in apis)
        chosen = [f"--runtime-config={runtime}"] if runtime else []
        if self.feature_gates:
            chosen.append(f"--feature-gates={','.join(f'{g}=true' for g in self.feature_gates)}")
        return [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={self.directory / 'apiserver'}",
            f"--token-auth-file={self.directory / 'tokens.csv'}",
            f"--client-ca-file={self.client_ca_file}",
            # Kubelets get what the Node authorizer grants their node and NodeRestriction admits;
            # everyone else, RBAC.
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.directory / 'sa.key'}",
            f"--service-account-signing-key-file={self.directory / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--endpoint-reconciler-type=none",  # loopback is not a valid endpoint address
            *chosen,
            "--allow-privileged=true",
            "--profiling=false",
            *self._kubelet_client_args(),
            *self._egress_args(),
        ]

    def _start_apiserver(self, deadline: float) -> None:
        listed = binaries.listed_gates(self.bin_dir / "kube-apiserver")
        self.feature_gates = (
            []
            if self.default_gates
            else sorted(
                g for g in listed if g.startswith("DRA") or g == "DynamicResourceAllocation"
            )
        )
        while True:
            process = self._spawn("kube-apiserver", self._apiserver_args())
            try:
                self._wait("kube-apiserver", deadline, self._apiserver_ready, process=process)
                break
            except ClusterError:
                needed = _disabled_dependencies(Path(process.log).read_text(errors="replace"))
                extra = sorted((needed & listed) - set(self.feature_gates))
                if not extra or process.alive():
                    raise
                # A DRA gate needs a non-DRA one (e.g. GenericWorkload): turn it on and retry.
                self.processes.remove(process)
                self.feature_gates = sorted({*self.feature_gates, *extra})
        for user in self.tokens:
            self._write_kubeconfig(self._kubeconfig_of(user), user)

    def _kubeconfig_of(self, user: str) -> Path:
        if user == ADMIN_USER:
            return self.kubeconfig
        return self.directory / f"{user.rsplit(':', 1)[-1]}.kubeconfig"

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        return _http_ok(f"{self.url}/readyz", token=self.tokens[ADMIN_USER], ca=self.ca_file)

    def _start_controllers(self, deadline: float) -> None:
        gates = ",".join(f"{g}=true" for g in self.feature_gates)
        common = ["--leader-elect=true", "--profiling=false"]
        if gates:
            common.append(f"--feature-gates={gates}")
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self._kubeconfig_of('system:kube-controller-manager')}",
                f"--controllers={','.join(self._controllers())}",
                "--use-service-account-credentials=true",  # each controller with its own role
                f"--secure-port={self.ports['controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={self.directory / 'controller-manager'}",
                *common,
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={self._kubeconfig_of('system:kube-scheduler')}",
                f"--secure-port={self.ports['scheduler']}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={self.directory / 'scheduler'}",
                *common,
            ],
        )
        for lease in ("kube-scheduler", "kube-controller-manager"):
            self._wait(lease, deadline, functools.partial(self._lease_held, lease))
        # Pods are admitted only once their namespace's `default` ServiceAccount exists.
        self._wait(
            "serviceaccount-controller",
            deadline,
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
        )

    def _controllers(self) -> list[str]:
        """CONTROLLERS that this controller manager has (1.30 has no device-taint eviction)."""
        text = binaries.help_text(self.bin_dir / "kube-controller-manager")
        wanted = (*CONTROLLERS, ROOT_CA_PUBLISHER) if self.root_ca_publisher else CONTROLLERS
        return [name for name in wanted if name in text]

    # --- state ---------------------------------------------------------------------------------

    def _save(self) -> None:
        state = {
            "bin_dir": str(self.bin_dir),
            "url": self.url,
            "ports": self.ports,
            "tokens": self.tokens,
            "feature_gates": self.feature_gates,
            "minor": self.minor,
            "default_gates": self.default_gates,
            "egress_proxy": self.egress_proxy,
            "processes": [asdict(p) for p in self.processes],
        }
        path = self.directory / STATE_FILE
        path.write_text(json.dumps(state, indent=2) + "\n")
        path.chmod(0o600)

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        """The cluster recorded in `directory` (running or not)."""
        try:
            state = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise ClusterError(f"{directory}: no cluster recorded there ({exc})") from None
        return cls(
            directory=directory,
            bin_dir=Path(state["bin_dir"]),
            url=state["url"],
            ports=state["ports"],
            tokens=state["tokens"],
            feature_gates=state["feature_gates"],
            minor=state.get("minor", 0),
            default_gates=state.get("default_gates", False),
            egress_proxy=state.get("egress_proxy", False),
            processes=[Process(**p) for p in state["processes"]],
        )

    def running(self) -> bool:
        return any(p.alive() for p in self.processes)

    # --- stop ----------------------------------------------------------------------------------

    def stop(self, grace: float = 15.0) -> list[str]:
        """Stop exactly the recorded processes, newest first; the names of those that were up."""
        stopped = []
        for process in reversed(self.processes):
            if process.alive():
                stopped.append(process.name)
                self.stop_process(process, signal.SIGTERM, grace)
        return stopped

    def stop_process(self, process: Process, signum: int, grace: float = 15.0) -> None:
        """Signal one recorded process (SIGTERM, or SIGKILL for a crash) and wait until it has
        exited; SIGKILL after `grace` seconds."""
        if not process.alive():
            return
        _signal(process, signum)
        until = time.monotonic() + grace
        while process.alive() and time.monotonic() < until:
            time.sleep(0.05)
        if process.alive():
            _signal(process, signal.SIGKILL)
            while process.alive():
                time.sleep(0.05)

    def restart(self, name: str, *, timeout: float = 120.0) -> Process:
        """Crash the component `name` (SIGKILL) and start it again as `spawn` first started it
        (the chaos soak, bench/soak.py); returns once etcd or kube-apiserver answers its health
        check again, or the scheduler or controller manager has stayed up 5 s (they then take
        their leases when the crashed holder's expire). A start that fails because its port was
        taken meanwhile (a busy machine's outgoing connection got it) is tried again. Only for
        a cluster this process started."""
        if name not in self.commands:
            raise ClusterError(f"{name}: not started by this process, so it cannot restart it")
        old = next(p for p in reversed(self.processes) if p.name == name)
        self.stop_process(old, signal.SIGKILL)
        self.processes.remove(old)
        binary, args, wrapper, cwd = self.commands[name]
        deadline = time.monotonic() + timeout
        while True:
            process = self.spawn(name, binary, args, wrapper=wrapper, cwd=cwd)
            try:
                self._wait(name, deadline, self._up(name, time.monotonic()), process=process)
                return process
            except ClusterError:
                tail = Path(process.log).read_text(errors="replace")[-3000:]
                if process.alive() or "address already in use" not in tail:
                    raise
                self.processes.remove(process)
                time.sleep(1.0)

    def _up(self, name: str, started: float) -> Callable[[], bool]:
        if name == "kube-apiserver":
            return self._apiserver_ready
        if name == "etcd":
            url = f"http://127.0.0.1:{self.ports['etcd']}/health"
            return lambda: _http_ok(url)
        return lambda: time.monotonic() - started > 5.0

    # --- reading it ----------------------------------------------------------------------------

    def logs(self, lines: int = 40) -> str:
        """The last `lines` lines of every component's log, headed by its name."""
        parts = []
        for process in self.processes:
            text = Path(process.log).read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {process.name} ({process.log}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    def _get(self, path: str) -> dict[str, Any] | None:
        """GET `path` as the administrator: the object, or None when it is not there."""
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.tokens[ADMIN_USER]}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=_tls(self.ca_file)) as answer:
                body: dict[str, Any] = json.loads(answer.read())
                return body
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def get_object(self, path: str) -> dict[str, Any] | None:
        """GET `path` (an API path) as the administrator: the object, or None."""
        return self._get(path)

    def untaint_node(self, node: str, key: str) -> None:
        """Remove the taint `key` from Node `node` (a JSON merge patch of its taints)."""
        held = self._get(f"/api/v1/nodes/{node}")
        if held is None:
            raise ClusterError(f"Node {node} is not there")
        taints = [t for t in held.get("spec", {}).get("taints", []) if t.get("key") != key]
        body = json.dumps({"spec": {"taints": taints or None}}).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/nodes/{node}",
            data=body,
            method="PATCH",
            headers={
                "Authorization": f"Bearer {self.tokens[ADMIN_USER]}",
                "Content-Type": "application/merge-patch+json",
            },
        )
        with urllib.request.urlopen(request, timeout=10, context=_tls(self.ca_file)):
            pass

    def _lease_held(self, name: str) -> bool:
        lease = self._get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")
        return bool(lease and lease.get("spec", {}).get("holderIdentity"))

    def _wait(
        self,
        what: str,
        deadline: float,
        ready: Callable[[], bool],
        *,
        process: Process | None = None,
    ) -> None:
        """Poll `ready` until true; ClusterError with the logs if a component exits or time ends."""
        while not ready():
            dead = [p for p in ([process] if process else self.processes) if not p.alive()]
            if dead:
                raise ClusterError(f"{dead[0].name} exited while waiting for {what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.2)


def sigterm_on_parent_death() -> None:
    """A Popen `preexec_fn`: in the child before exec, ask for SIGTERM when the parent dies,
    even by SIGKILL (Linux prctl PR_SET_PDEATHSIG)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _signal(process: Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signum)


def _disabled_dependencies(log: str) -> set[str]:
    """The gates a component said it needs but were off (see `_DEPENDENCY`)."""
    found: set[str] = set()
    for match in _DEPENDENCY.finditer(log):
        found.update(match.group(2).split())
    return found


def _tls(ca: Path | None) -> ssl.SSLContext | None:
    return ssl.create_default_context(cafile=str(ca)) if ca else None


def _http_ok(url: str, *, token: str | None = None, ca: Path | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5, context=_tls(ca)
        ) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False
