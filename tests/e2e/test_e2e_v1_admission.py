"""drasat's scheduling gate at admission, on the real kube-apiserver v1.37.2 (issue 24).

- The chart's MutatingAdmissionPolicy (`controller.admission.mode: policy`, what 1.36+ gets):
  applied to the real server, it gates a pod that names claims, and not a pod without, a pod
  created with its node or a pod of a namespace it leaves out; another owner's gate stays first;
  a pod asking `nvidia.com/gpu` is converted by the chart's other policy and then gated (the
  gate's policy is reinvoked).
- The webhook (`mode: webhook`, what 1.34/1.35 get), served by a real `drasat controller`
  process with the chart's RBAC and registered with the real server (clientConfig.url on
  127.0.0.1): it gates only the pods that use drasat's classes (templates read from its caches),
  and converts a pod asking `nvidia.com/gpu` (no policy does that there), then gates it.
- A webhook that is down, or does not answer, never blocks a pod (failurePolicy Ignore): the pod
  is admitted ungated, after at most the webhook's timeout.
- A pod of another driver gated by the policy is let go by drasat's controller at once: the
  test prints what that costs (creation -> gate lifted; docs/PERFORMANCE.md).
- The chart on a server without DeviceTaintRule (1.34-1.36's default; here the real server's
  discovery without that kind): the gate alone, `--no-device-taint`, every object accepted by the
  server. drasat allocating gated pods there is tests/e2e/test_e2e_v1_gate.py's.

Each test's policy and webhook are scoped to its own namespace (a namespaceSelector on the
namespace's name), so nothing else of the session's cluster is gated, even if cleanup fails.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import allockit
import drasatprocess
import kubernetes
import pytest
from chartkit import account_kubeconfig, discovered_api_versions, kubectl_apply, render
from helm_binary import kubectl_path
from kubecluster import service_account_token, wait_for
from kubernetes.client import ApiException
from slicekit import device_classes

from drasat.api.groups import SCHEDULING_GATE
from drasat.controller import admission
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(300)

MAP_V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
RESOURCE = ("resource.k8s.io", "v1")
KUEUE = "kueue.x-k8s.io/admission"
OTHER_DRIVER = "other.example.com"
GATE = {"name": SCHEDULING_GATE}
Obj = dict[str, Any]


# ---------------------------------------------------------------- objects


def _only(namespace: str) -> Obj:
    """Admission values that gate the pods of `namespace` only."""
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
        ]
    }
    return {"controller": {"admission": {"namespaceSelector": selector}}}  # fmt: skip


def _pod(name: str, *claims: Obj, **spec: Any) -> Obj:
    container: Obj = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    body: Obj = {"containers": [container], **spec}
    if claims:
        body["resourceClaims"] = list(claims)
        container["resources"] = {"claims": [{"name": c["name"]} for c in claims]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def _template(name: str, device_class: str) -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _gates(pod: Any) -> list[str]:
    return [g.name for g in pod.spec.scheduling_gates or []]


def _dry_run(core: Any, namespace: str, pod: Obj) -> Any:
    """Create the pod with dryRun=All: admission runs in full, nothing is stored."""
    return core.create_namespaced_pod(namespace, pod, dry_run="All")


@pytest.fixture
def namespace(kube_api: kubernetes.client.ApiClient) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(kube_api)
    name = f"adm-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _has_account(core, name), what=f"namespace {name}'s default ServiceAccount")
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    for template in (_template("drasat-gpu", "gpu.drasat.io"), _template("nic", OTHER_DRIVER)):
        custom.create_namespaced_custom_object(*RESOURCE, name, "resourceclaimtemplates", template)
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


def _has_account(core: Any, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True


@contextlib.contextmanager
def _installed(
    kube_cluster: realcluster.Cluster, manifests: list[Obj], tmp: pathlib.Path
) -> Iterator[None]:
    done = kubectl_apply(kube_cluster, "drasat", manifests, tmp / "cache")
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        subprocess.run(
            [str(kubectl_path()), "--kubeconfig", str(kube_cluster.kubeconfig), "--cache-dir",
             str(tmp / "cache"), "-n", "drasat", "delete", "--ignore-not-found", "-f", "-"],
            input="\n---\n".join(json.dumps(m) for m in manifests),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip


def _admission_objects(manifests: list[Obj]) -> list[Obj]:
    """The chart's admission objects: the gate's (and the nvidia.com/gpu conversion's)."""
    kinds = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
             "MutatingWebhookConfiguration"}  # fmt: skip
    return [m for m in manifests if m["kind"] in kinds]


def _wait_gated(core: Any, namespace: str, pod: Obj, what: str) -> Any:
    """A newly applied policy or webhook takes effect within a second or so: dry-run until it
    has; the gated pod."""

    def gated() -> Any:
        admitted = _dry_run(core, namespace, pod)
        return admitted if SCHEDULING_GATE in _gates(admitted) else None

    return wait_for(gated, timeout=30, what=what)


def _admission_time(core: Any, namespace: str, pod: Obj, n: int = 20) -> str:
    """p50 and max of `n` dry-run creations of `pod` (printed, not asserted: the numbers are in
    docs/INSTALL.md, "Admission")."""
    took = []
    for _ in range(n):
        started = time.monotonic()
        _dry_run(core, namespace, pod)
        took.append(time.monotonic() - started)
    took.sort()
    return f"p50 {took[n // 2] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms (n={n})"


# ---------------------------------------------------------------- the policy


def test_the_policy_gates_pods_that_name_claims(
    kube_api: Any, kube_cluster: realcluster.Cluster, namespace: str, tmp_path: pathlib.Path
) -> None:
    manifests = render("drasat", "1.37.2", _only(namespace), tmp_path, (MAP_V1,))
    objects = _admission_objects(manifests)
    names = {m["metadata"]["name"] for m in objects}
    assert {"drasat-scheduling-gate", "drasat-extended-resources"} <= names
    core = kubernetes.client.CoreV1Api(kube_api)
    claim = {"name": "gpu", "resourceClaimTemplateName": "drasat-gpu"}
    before = _admission_time(core, namespace, _pod("t", claim))
    with _installed(kube_cluster, objects, tmp_path):
        gated = _wait_gated(core, namespace, _pod("p", claim), "the policy to gate a pod")
        assert _gates(gated) == [SCHEDULING_GATE]
        # CEL cannot read a template's class: another driver's pod is gated too (the controller
        # lets it go at its next cycle: test_a_pod_of_another_driver_is_let_go_at_once)
        other = {"name": "nic", "resourceClaimTemplateName": "nic"}
        assert _gates(_dry_run(core, namespace, _pod("o", other))) == [SCHEDULING_GATE]
        # no claims: nothing for any allocator
        assert _gates(_dry_run(core, namespace, _pod("plain"))) == []
        # another owner's gate stays first
        kueue = _pod("k", claim, schedulingGates=[{"name": KUEUE}])
        assert _gates(_dry_run(core, namespace, kueue)) == [KUEUE, SCHEDULING_GATE]
        # created with its node: admitted, ungated (the server refuses a gate there)
        bound = _dry_run(core, namespace, _pod("b", claim, nodeName="some-node"))
        assert _gates(bound) == []
        # nvidia.com/gpu: converted into a claim of drasat's class, then gated (reinvocation)
        legacy = _pod("legacy")
        legacy["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        converted = _dry_run(core, namespace, legacy)
        assert [c.resource_claim_template_name for c in converted.spec.resource_claims] == [
            "drasat-nvidia-com-gpu-1"
        ]
        assert _gates(converted) == [SCHEDULING_GATE]
        took = _admission_time(core, namespace, _pod("t", claim))
        print(f"pod creation (dry run) with the policy: {took}; without: {before}")


def test_the_policy_leaves_other_namespaces_alone(
    kube_api: Any, kube_cluster: realcluster.Cluster, namespace: str, tmp_path: pathlib.Path
) -> None:
    # the default selector: every namespace but kube-system
    manifests = render("drasat", "1.37.2", {}, tmp_path, (MAP_V1,))
    objects = [m for m in _admission_objects(manifests)
               if m["metadata"]["name"] == "drasat-scheduling-gate"]  # fmt: skip
    policy = next(m for m in objects if m["kind"] == "MutatingAdmissionPolicy")
    # ...narrowed to this test's namespace and kube-system, so nothing else is touched
    policy["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In",
         "values": [namespace, "kube-system"]}
    )  # fmt: skip
    core = kubernetes.client.CoreV1Api(kube_api)
    claim = {"name": "gpu", "resourceClaimTemplateName": "drasat-gpu"}
    with _installed(kube_cluster, objects, tmp_path):
        _wait_gated(core, namespace, _pod("p", claim), "the policy to gate a pod")
        assert _gates(_dry_run(core, "kube-system", _pod("p", claim))) == []


# ---------------------------------------------------------------- the webhook


def _certificate(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = folder / "webhook.crt", folder / "webhook.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _registration(manifests: list[Obj], url: str, ca: bytes, timeout_s: int | None = None) -> Obj:
    """The chart's MutatingWebhookConfiguration, pointed at `url` (a process on loopback)
    instead of the in-cluster Service."""
    (config,) = [m for m in manifests if m["kind"] == "MutatingWebhookConfiguration"]
    webhook = config["webhooks"][0]
    webhook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca).decode()}
    if timeout_s is not None:
        webhook["timeoutSeconds"] = timeout_s
    return config


def _bound(log: pathlib.Path) -> int:
    """The webhook's port, as the controller's log says once it serves; 0 before."""
    found = re.search(r"admission webhook on 127\.0\.0\.1:(\d+)/", log.read_text(errors="replace"))
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _controller_account(
    kube_api: Any, kube_cluster: realcluster.Cluster, manifests: list[Obj], tmp: pathlib.Path
) -> pathlib.Path:
    """A kubeconfig with the chart's controller ServiceAccount and its RBAC, applied."""
    rbac = [
        m
        for m in manifests
        if m["kind"]
        in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
        and "controller" in m["metadata"]["name"]
    ]
    done = kubectl_apply(kube_cluster, "drasat", rbac, tmp / "cache")  # fmt: skip
    assert done.returncode == 0, done.stderr
    account = next(m for m in rbac if m["kind"] == "ServiceAccount")["metadata"]["name"]
    token = service_account_token(kube_api, "drasat", account)
    return account_kubeconfig(kube_cluster, token, tmp / "controller.kubeconfig")


def test_the_controllers_webhook_gates_only_pods_of_drasats_classes(
    kube_api: Any, kube_cluster: realcluster.Cluster, namespace: str, tmp_path: pathlib.Path
) -> None:
    """`drasat controller` with the chart's webhook flags (address and files of this machine)
    and the chart's RBAC for the controller's ServiceAccount."""
    values = _only(namespace)
    values["controller"]["admission"]["mode"] = "webhook"
    manifests = render("drasat", "1.37.2", values, tmp_path)
    allockit.prepare(kube_api)  # CRDs and the release namespace
    cert, key = _certificate(tmp_path)
    kubeconfig = _controller_account(kube_api, kube_cluster, manifests, tmp_path)
    log = tmp_path / "webhook.log"
    core = kubernetes.client.CoreV1Api(kube_api)
    with device_classes(kube_api):
        process = drasatprocess.run(
            ["controller", "--dra-api", "v1", "--kubeconfig", str(kubeconfig), "--namespace",
             "drasat", "--metrics-address", "", "--no-device-taint",
             "--webhook-address", "127.0.0.1:0", "--webhook-cert-file", str(cert),
             "--webhook-key-file", str(key), "--webhook-extended-resources"],
            log,
        )  # fmt: skip
        try:
            # The controller binds a port of the kernel's choosing and logs it: a port drawn
            # here could be taken before it binds.
            drasatprocess.wait_started(process, lambda: _bound(log) != 0, log, "the webhook")
            url = f"https://127.0.0.1:{_bound(log)}{admission.PATH}"
            registration = _registration(manifests, url, cert.read_bytes())
            ours = _pod("t", {"name": "gpu", "resourceClaimTemplateName": "drasat-gpu"})
            before = _admission_time(core, namespace, ours)
            with _installed(kube_cluster, [registration], tmp_path):
                _check_the_webhook(kube_api, core, namespace)
                print(f"pod creation (dry run) with the webhook: "
                      f"{_admission_time(core, namespace, ours)}; without: {before}")  # fmt: skip
            text = log.read_text(errors="replace")
            assert "Forbidden" not in text, text[-3000:]  # the chart's RBAC was enough
        finally:
            drasatprocess.stop(process)


def _check_the_webhook(kube_api: Any, core: Any, namespace: str) -> None:
    ours = {"name": "gpu", "resourceClaimTemplateName": "drasat-gpu"}
    _wait_gated(core, namespace, _pod("p", ours), "the webhook to gate a pod")
    # the webhook reads the template's class: another driver's pod is not gated
    other = {"name": "nic", "resourceClaimTemplateName": "nic"}
    assert _gates(_dry_run(core, namespace, _pod("o", other))) == []
    both = _pod("both", other, ours, schedulingGates=[{"name": KUEUE}])
    assert _gates(_dry_run(core, namespace, both)) == [KUEUE, SCHEDULING_GATE]
    # a template not created yet: gated (the controller decides once the claim exists)
    later = {"name": "gpu", "resourceClaimTemplateName": "not-yet"}
    assert _gates(_dry_run(core, namespace, _pod("l", later))) == [SCHEDULING_GATE]
    # a template created just before its pod: read from the API if not cached yet
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(*RESOURCE, namespace, "resourceclaimtemplates",
                                           _template("fresh", OTHER_DRIVER))  # fmt: skip
    fresh = {"name": "gpu", "resourceClaimTemplateName": "fresh"}
    assert _gates(_dry_run(core, namespace, _pod("f", fresh))) == []
    assert _gates(_dry_run(core, namespace, _pod("plain"))) == []
    # no policy converts nvidia.com/gpu here (what 1.34/1.35 serve): the webhook does, then gates
    legacy = _pod("legacy")
    legacy["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    converted = _dry_run(core, namespace, legacy)
    assert [c.resource_claim_template_name for c in converted.spec.resource_claims] == [
        "drasat-nvidia-com-gpu-1"
    ]
    assert [c.name for c in converted.spec.containers[0].resources.claims] == ["drasat-gpu-0"]
    assert "nvidia.com/gpu" not in (converted.spec.containers[0].resources.limits or {})
    assert _gates(converted) == [SCHEDULING_GATE]


@pytest.mark.parametrize("down", ["closed", "silent"])
def test_a_webhook_that_does_not_answer_never_blocks_a_pod(
    kube_api: Any, kube_cluster: realcluster.Cluster, namespace: str, tmp_path: pathlib.Path,
    down: str,
) -> None:  # fmt: skip
    values = _only(namespace)
    values["controller"]["admission"]["mode"] = "webhook"
    manifests = render("drasat", "1.37.2", values, tmp_path)
    cert, _ = _certificate(tmp_path)
    core = kubernetes.client.CoreV1Api(kube_api)
    ours = {"name": "gpu", "resourceClaimTemplateName": "drasat-gpu"}
    with contextlib.ExitStack() as stack:
        if down == "silent":  # accepts connections, never speaks TLS: the timeout decides
            listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            port = listener.getsockname()[1]
        else:
            port = realcluster.free_port()  # nothing listens
        url = f"https://127.0.0.1:{port}{admission.PATH}"
        registration = _registration(manifests, url, cert.read_bytes(), timeout_s=1)
        stack.enter_context(_installed(kube_cluster, [registration], tmp_path))
        time.sleep(2)  # the registration takes effect
        started = time.monotonic()
        created = core.create_namespaced_pod(namespace, _pod("p", ours))
        took = time.monotonic() - started
        assert _gates(created) == []  # admitted, ungated: the slow path, never blocked
        print(f"pod admitted with the webhook {down}: {took:.2f}s")
        assert took < 10


# ---------------------------------------------------------------- the controller lets go


def test_a_pod_of_another_driver_is_let_go_at_once(
    kube_api: Any, kube_cluster: realcluster.Cluster, namespace: str, tmp_path: pathlib.Path,
    allocator: allockit.Allocator,
) -> None:  # fmt: skip
    """What the policy costs a pod with no claim of drasat's: gated at creation, let go at the
    controller's next cycle (its claim from the template first made)."""
    manifests = render("drasat", "1.37.2", _only(namespace), tmp_path, (MAP_V1,))
    objects = [m for m in _admission_objects(manifests)
               if m["metadata"]["name"] == "drasat-scheduling-gate"]  # fmt: skip
    core = kubernetes.client.CoreV1Api(kube_api)
    other = {"name": "nic", "resourceClaimTemplateName": "nic"}
    took = []
    with _installed(kube_cluster, objects, tmp_path):
        _wait_gated(core, namespace, _pod("probe", other), "the policy to gate a pod")
        for i in range(5):
            started = time.monotonic()
            created = core.create_namespaced_pod(namespace, _pod(f"o{i}", other))
            assert _gates(created) == [SCHEDULING_GATE]
            _wait_let_go(core, namespace, f"o{i}")
            took.append(time.monotonic() - started)
    print("creation -> gate lifted, another driver's pod: " + ", ".join(f"{t:.2f}s" for t in took))


def _wait_let_go(core: Any, namespace: str, name: str) -> None:
    def ungated() -> bool:
        return not _gates(core.read_namespaced_pod(name, namespace))

    wait_for(ungated, timeout=30, interval=0.02, what=f"drasat's controller to let {name} go")


# ---------------------------------------------------------------- 1.34-1.36 without taint rules


def test_the_chart_without_device_taint_rules_installs_the_gate_alone(
    kube_api: Any, kube_cluster: realcluster.Cluster, tmp_path: pathlib.Path
) -> None:
    """What helm sees on a 1.34/1.35 server with default settings: the real server's discovery
    without DeviceTaintRule and MutatingAdmissionPolicy. The chart installs the webhook and runs
    the controller without the taint rule; the server accepts every object."""
    served = discovered_api_versions(kube_cluster, tmp_path / "cache")
    assert any(v.endswith("/DeviceTaintRule") for v in served)
    default_134 = [v for v in served if not v.endswith(("/DeviceTaintRule",
                                                        "/MutatingAdmissionPolicy"))]  # fmt: skip
    manifests = render("drasat", "1.35.0", None, tmp_path, default_134)
    kinds = {m["kind"] for m in manifests}
    assert "MutatingWebhookConfiguration" in kinds and "MutatingAdmissionPolicy" not in kinds
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-device-taint" in args
    allockit.prepare(kube_api)  # the release namespace
    done = kubectl_apply(kube_cluster, "drasat", manifests, tmp_path / "cache", "--dry-run=server")
    assert done.returncode == 0, done.stderr
    # 1.36 without DeviceTaintRule: the policy, still no taint
    default_136 = [v for v in served if not v.endswith("/DeviceTaintRule")]
    manifests = render("drasat", "1.36.0", None, tmp_path, default_136)
    assert "MutatingAdmissionPolicy" in {m["kind"] for m in manifests}
    done = kubectl_apply(kube_cluster, "drasat", manifests, tmp_path / "cache", "--dry-run=server")
    assert done.returncode == 0, done.stderr
