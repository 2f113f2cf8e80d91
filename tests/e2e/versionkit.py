"""drasat installed by its chart, as docs/INSTALL.md says, on a real control plane of a Kubernetes
version users run, with that release's default feature gates (`scripts/kube-cluster up --version
V`'s cluster): one real kubelet on the fake runtime, then `helm install` against the cluster (so
helm sees the server's discovery, as on a user's cluster), then drasat's two programs with the
chart's arguments and ServiceAccounts, since no container image runs here:

- the controller as the chart's Deployment runs it (its arguments, its ServiceAccount's token);
  where the chart chose the webhook, its registration points at the process on loopback (no
  Service routes here), with a certificate the chart was given (`tls.secretName`, `caBundle`);
- the node plugin as the chart's DaemonSet runs it, with a token bound to a pod on the node (the
  node admission policies check the node it names), on a simulated fleet, registered through the
  real kubelet's plugin watcher.

Everything started is stopped on exit, also when a test fails (the cluster dies with the test
process in any case)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
import yaml
from chartkit import CHART, account_kubeconfig
from helm_binary import helm_path, kubectl_path
from kubecluster import service_account_token, wait_for

from drasat.api.groups import DRIVER_NAME, NAS_GROUP, VERSION
from drasat.controller import admission
from drasat.testbed.controlplane import binaries, realcluster
from drasat.testbed.controlplane.realkubelet import Kubelet

Obj = dict[str, Any]
NAMESPACE = "drasat"
NODE = "gpu-node-1"
#: Eight whole GPUs and one in MIG mode: every workload of the test at once (the reference
#: cases 3, shares 1 or, where the server drops them, 2, nvidia.com/gpu pods 3, MIG 1).
FLEET = "9xA100-40GB,mig=8"
GATE = "gpu.drasat.io/allocation"
WEBHOOK_SECRET = "drasat-e2e-webhook-tls"
#: A node label no node has: the chart's controller Deployment's pod is never scheduled.
UNSCHEDULABLE = "drasat-e2e/no-such-node"
#: The label of what a drain leaves (`kubectl drain --pod-selector=!drasat-e2e-keep`).
KEEP = "drasat-e2e-keep"


@dataclass
class Installed:
    """One version's cluster with drasat installed by its chart."""

    version: str
    cluster: realcluster.Cluster
    api: kubernetes.client.ApiClient
    tmp: Path
    notes: str = ""
    manifests: list[Obj] = field(default_factory=list)
    processes: list[Any] = field(default_factory=list)
    kubelet: Kubelet | None = None

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def controller_log(self) -> Path:
        return self.tmp / "controller.log"

    @property
    def plugin_log(self) -> Path:
        return self.tmp / "plugin" / "plugin.log"

    def env(self) -> dict[str, str]:
        home = self.tmp / "helm"
        return {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "KUBECACHEDIR": str(self.tmp / "kube-cache"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def kubectl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl_path()), *args], env=self.env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def logs(self) -> str:
        parts = []
        for path in (self.controller_log, self.plugin_log):
            text = path.read_text(errors="replace")[-4000:] if path.exists() else ""
            parts.append(f"--- {path.name} ---\n{text}")
        if self.kubelet is not None:
            parts.append(self.kubelet.logs(30))
        return "\n".join(parts)

    def pod_spec(self, kind: str) -> Obj:
        """The pod spec of the chart's controller Deployment or node plugin DaemonSet."""
        name = {"Deployment": "-controller", "DaemonSet": "-node-plugin"}[kind]
        (workload,) = [
            m for m in self.manifests
            if m["kind"] == kind and m["metadata"]["name"].endswith(name)
        ]  # fmt: skip
        spec: Obj = workload["spec"]["template"]["spec"]
        return spec

    def container(self, kind: str) -> Obj:
        (found,) = [c for c in self.pod_spec(kind)["containers"] if c["name"] != "mps-host"]
        return dict(found)

    def admission(self) -> str:
        """How the chart gates pods here: "policy" or "webhook"."""
        kinds = {m["kind"] for m in self.manifests}
        return "policy" if "MutatingAdmissionPolicy" in kinds else "webhook"

    # --- workloads ---------------------------------------------------------------------------

    def apply(self, path: Path) -> None:
        done = self.kubectl("apply", "-f", str(path))
        assert done.returncode == 0, done.stderr

    def pod(self, namespace: str, name: str) -> Any:
        return kubernetes.client.CoreV1Api(self.api).read_namespaced_pod(name, namespace)

    def wait_running(self, namespace: str, *pods: str, timeout: float = 120) -> None:
        def running() -> bool:
            return all(self.pod(namespace, p).status.phase == "Running" for p in pods)

        wait_for(running, timeout=timeout, what=f"{', '.join(pods)} Running\n{self.logs()}")

    def claims_of(self, namespace: str, pod: str) -> list[Obj]:
        """The ResourceClaims of a pod, as the server has them."""
        custom = kubernetes.client.CustomObjectsApi(self.api)
        held = self.pod(namespace, pod)
        # a claim named in the spec, or the one made from a template (named in the status)
        names = [c.resource_claim_name for c in held.spec.resource_claims or []
                 if c.resource_claim_name]  # fmt: skip
        names += [s.resource_claim_name for s in held.status.resource_claim_statuses or []
                  if s.resource_claim_name]  # fmt: skip
        return [
            custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", n
            )
            for n in names
        ]

    def allocated_by_drasat(self, namespace: str, pod: str) -> list[Obj]:
        """The pod's claims, each checked to be drasat's allocation: the pod was created with
        drasat's gate and drasat's controller lifted it (so kube-scheduler never saw it before
        drasat allocated), and drasat's ledger on the node holds the claim."""
        lifted = f"{namespace}/{pod}: scheduling gate {GATE} lifted"
        wait_for(
            lambda: lifted in self.controller_log.read_text(errors="replace"),
            timeout=60,
            what=f"drasat to lift {namespace}/{pod}'s gate\n{self.logs()}",
        )
        claims = self.claims_of(namespace, pod)
        assert claims, f"{namespace}/{pod} has no claims"
        ledger = self.nas()["spec"].get("allocatedClaims") or {}
        held = {entry["claimInfo"]["uid"] for entry in ledger.values()}  # one per request
        for claim in claims:
            assert claim["status"]["allocation"]["devices"]["results"], claim
            assert claim["metadata"]["uid"] in held, (claim["metadata"]["name"], ledger)
        return claims

    def nas(self) -> Obj:
        custom = kubernetes.client.CustomObjectsApi(self.api)
        nas: Obj = custom.get_namespaced_custom_object(
            NAS_GROUP, VERSION, NAMESPACE, "nodeallocationstates", NODE
        )
        return nas

    def delete_namespace(self, namespace: str, *, wait: bool = True) -> None:
        """Delete a workload's namespace; with `wait`, until drasat's ledger is empty again (its
        claims deallocated, their devices unprepared)."""
        core = kubernetes.client.CoreV1Api(self.api)
        with contextlib.suppress(kubernetes.client.ApiException):
            core.delete_namespace(namespace)
        if not wait:
            return
        wait_for(
            lambda: not self.nas()["spec"].get("allocatedClaims"),
            timeout=120,
            what=f"drasat to release {namespace}'s claims\n{self.logs()}",
        )


def results(claim: Obj) -> list[Obj]:
    found: list[Obj] = claim["status"]["allocation"]["devices"]["results"]
    return found


@contextlib.contextmanager
def installed(version: str) -> Iterator[Installed]:
    """Kubernetes `version` (a minor of binaries.VERSIONS) with its default gates, a real
    kubelet, and drasat installed by its chart; everything stopped and removed on exit."""
    bin_dir = binaries.locate(version=version)
    tmp = Path(tempfile.mkdtemp(prefix=f"kv{version}-", dir="/tmp"))  # short socket paths
    cluster = realcluster.Cluster.start(
        directory=tmp / "c", bin_dir=bin_dir, die_with_parent=True, root_ca_publisher=True,
        default_gates=True, timeout=240,
    )  # fmt: skip
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    setup = Installed(version, cluster, api, tmp)
    try:
        setup.kubelet = Kubelet.start(cluster, NODE, root=tmp / "k", timeout=180)
        _helm_install(setup)
        _start_controller(setup)
        _start_plugin(setup)
        yield setup
    finally:
        for process in reversed(setup.processes):
            drasatprocess.stop(process)
        if setup.kubelet is not None:
            setup.kubelet.stop()
        api.close()
        cluster.stop()
        if setup.kubelet is not None:
            setup.kubelet.remove()
        shutil.rmtree(tmp, ignore_errors=True)


def _helm_install(setup: Installed) -> None:
    """The namespace and our own webhook certificate (the chart's way for a certificate of
    yours), then `helm install` as docs/INSTALL.md has it."""
    core = kubernetes.client.CoreV1Api(setup.api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    cert, key, ca = _webhook_certificate(setup.tmp / "tls")
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": WEBHOOK_SECRET},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(cert.read_bytes()).decode(),
                "tls.key": base64.b64encode(key.read_bytes()).decode(),
            },
        },
    )
    command = [
        str(helm_path()), "install", "drasat", str(CHART), "--namespace", NAMESPACE,
        "--create-namespace", "--set", "image.repository=registry.example.com/drasat",
        "--set", "image.tag=0.1.0",
        "--set", f"controller.admission.webhook.tls.secretName={WEBHOOK_SECRET}",
        "--set-file", f"controller.admission.webhook.tls.caBundle={ca}",
        # The chart's controller pod stays unscheduled: no image runs here, and the fake
        # runtime's pods have a made-up address (192.168.192.168) that the kubelet's HTTP probes
        # would be sent to. (The DaemonSet selects GPU-labelled nodes: none here.)
        "--set-string", f"controller.nodeSelector.{UNSCHEDULABLE}=true",
    ]  # fmt: skip
    done = subprocess.run(
        command, env=setup.env(), capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    setup.notes = done.stdout
    manifest = subprocess.run(
        [str(helm_path()), "get", "manifest", "drasat", "--namespace", NAMESPACE],
        env=setup.env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    setup.manifests = [d for d in yaml.safe_load_all(manifest) if d]


def _webhook_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for loopback and the chart's webhook Service."""
    folder.mkdir(parents=True)
    ca_key, ca = folder / "ca.key", folder / "ca.crt"
    key, request, cert = folder / "tls.key", folder / "tls.csr", folder / "tls.crt"
    extensions = folder / "san.cnf"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:drasat-controller-webhook.drasat.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    for args in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(ca_key),
         "-out", str(ca), "-subj", "/CN=drasat-e2e-ca"],
        ["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
         str(request), "-subj", "/CN=drasat-controller-webhook.drasat.svc"],
        ["x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(extensions)],
    ):  # fmt: skip
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    return cert, key, ca


def _chart_args(container: Obj) -> list[str]:
    return [str(a).replace("$(POD_NAMESPACE)", NAMESPACE) for a in container["args"]]


def _start_controller(setup: Installed) -> None:
    """`drasat controller` with the Deployment's arguments (this machine's webhook files and
    port, no metrics port) and its ServiceAccount's token."""
    container = setup.container("Deployment")
    args = []
    for arg in _chart_args(container):
        if arg.startswith(("--metrics-address", "--webhook-address", "--webhook-cert-file",
                           "--webhook-key-file")):  # fmt: skip
            continue
        args.append(arg)
    webhook = setup.admission() == "webhook"
    if webhook:
        args += [
            "--webhook-address", "127.0.0.1:0",
            "--webhook-cert-file", str(setup.tmp / "tls" / "tls.crt"),
            "--webhook-key-file", str(setup.tmp / "tls" / "tls.key"),
        ]  # fmt: skip
    account = str(setup.pod_spec("Deployment")["serviceAccountName"])
    token = service_account_token(setup.api, NAMESPACE, account, seconds=3600)
    kubeconfig = account_kubeconfig(setup.cluster, token, setup.tmp / "controller.kubeconfig")
    process = drasatprocess.run(
        [*args, "--metrics-address", "", "--kubeconfig", str(kubeconfig)], setup.controller_log
    )
    setup.processes.append(process)
    drasatprocess.wait_started(
        process, lambda: bool(start_line(setup.controller_log, "controller")),
        setup.controller_log, "the controller",
    )  # fmt: skip
    if webhook:
        drasatprocess.wait_started(
            process, lambda: _bound(setup.controller_log) != 0, setup.controller_log,
            "the controller's webhook",
        )  # fmt: skip
        url = f"https://127.0.0.1:{_bound(setup.controller_log)}{admission.PATH}"
        ca = (setup.tmp / "tls" / "ca.crt").read_bytes()
        _point_webhook_at(setup, url, ca)


def _bound(log: Path) -> int:
    found = re.search(r"admission webhook on 127\.0\.0\.1:(\d+)/", log.read_text(errors="replace"))
    return int(found[1]) if found else 0


def _point_webhook_at(setup: Installed, url: str, ca: bytes) -> None:
    """The chart's MutatingWebhookConfiguration, its clientConfig a URL on loopback instead of
    the Service (nothing routes Services here), then until the server uses it."""
    registrations = kubernetes.client.AdmissionregistrationV1Api(setup.api)
    (config,) = [
        c for c in registrations.list_mutating_webhook_configuration().items
        if c.metadata.name.endswith("-scheduling-gate")
    ]  # fmt: skip
    body = setup.api.sanitize_for_serialization(config)
    for hook in body["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca).decode()}
    registrations.replace_mutating_webhook_configuration(config.metadata.name, body)


def _start_plugin(setup: Installed) -> None:
    """`drasat nodeplugin` with the DaemonSet's API and kubelet flags, its ServiceAccount's token
    bound to a pod on the node, on the simulated fleet, through the real kubelet."""
    assert setup.kubelet is not None
    core = kubernetes.client.CoreV1Api(setup.api)
    account = str(setup.pod_spec("DaemonSet")["serviceAccountName"])
    pod = core.create_namespaced_pod(
        NAMESPACE,
        {
            # kept by the drain test: its deletion would end the plugin's bound token
            "metadata": {"name": "node-plugin-token-holder", "labels": {KEEP: "true"}},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "registry.invalid/none:0"}],
            },
        },
    )
    token = service_account_token(
        setup.api, NAMESPACE, account, bound_pod=(pod.metadata.name, pod.metadata.uid),
        seconds=3600,
    )  # fmt: skip
    kubeconfig = account_kubeconfig(setup.cluster, token, setup.tmp / "plugin.kubeconfig")
    wanted = ("--namespace", "--kubelet-api", "--resourceslices", "--shares", "--no-shares")
    chart = [a for a in _chart_args(setup.container("DaemonSet")) if a.startswith(wanted)]
    folder = setup.tmp / "plugin"
    folder.mkdir()
    fleet = f"{FLEET},state={folder / 'fleet.json'}"
    args = [
        "nodeplugin", "--node-name", NODE, *chart, "--simulate-gpus", fleet,
        "--kubeconfig", str(kubeconfig),
        "--kubelet-plugin-dir", str(setup.kubelet.plugins_dir),
        "--kubelet-registry-dir", str(setup.kubelet.registry_dir),
        "--state-dir", str(folder / "state"), "--cdi-root", str(folder / "cdi"),
        "--gc-interval", "0",
    ]  # fmt: skip
    process = drasatprocess.run(args, setup.plugin_log)
    setup.processes.append(process)
    drasatprocess.wait_started(
        process,
        lambda: "registered with the kubelet" in setup.plugin_log.read_text(errors="replace"),
        setup.plugin_log,
        "the node plugin's registration with the kubelet",
    )
    custom = kubernetes.client.CustomObjectsApi(setup.api)

    def published() -> bool:
        listed = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
        return any(s["spec"]["driver"] == DRIVER_NAME for s in listed["items"])

    wait_for(published, timeout=60, what=f"the plugin's ResourceSlices\n{setup.logs()}")


def cdi_specs(setup: Installed) -> list[Path]:
    return sorted((setup.tmp / "plugin" / "cdi").glob("*.json"))


def start_line(log: Path, who: str) -> str:
    """The one start-up line saying what `who` turned off (drasat.kube.served.line)."""
    for line in log.read_text(errors="replace").splitlines():
        if f"{who}: turned off:" in line or f"{who}: nothing turned off" in line:
            return line
    return ""
