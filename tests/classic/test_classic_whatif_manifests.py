"""Compiling -f manifests: every kind and claim form, naming, workloads, both API groups."""

from __future__ import annotations

import pytest

from drasat import loading
from drasat.classic.whatif import manifests
from drasat.classic.whatif.manifests import Workload

CLASS = """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: gpu.drasat.io}
driverName: gpu.drasat.io
"""


def _compile(text: str, **kwargs: object) -> Workload:
    documents = loading.parse_documents(text, "m.yaml")
    return manifests.compile_manifests(documents, **kwargs)  # type: ignore[arg-type]


def _pod(name: str, claims: str, namespace: str = "ns", extra: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  {extra}
  containers: [{{name: c, image: busybox}}]
  resourceClaims: {claims}
"""


def _claim(name: str, params: str = "", cls: str = "gpu.drasat.io") -> str:
    ref = f"\n  parametersRef: {params}" if params else ""
    return f"""
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {{name: {name}, namespace: ns}}
spec:
  resourceClassName: {cls}{ref}
"""


def _template(name: str, params: str = "") -> str:
    ref = f"\n    parametersRef: {params}" if params else ""
    return f"""
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: ns}}
spec:
  spec:
    resourceClassName: gpu.drasat.io{ref}
"""


def _docs(*parts: str) -> str:
    return "\n---\n".join(parts)


@pytest.mark.parametrize(
    "claims",
    [
        # pre-1.31 form
        "[{name: g, source: {resourceClaimName: shared}}]",
        # flat 1.31+ form
        "[{name: g, resourceClaimName: shared}]",
    ],
)
def test_both_named_claim_forms(claims: str) -> None:
    workload = _compile(_docs(CLASS, _claim("shared"), _pod("p", claims)))
    (pod,) = workload.pods
    assert [(c.name, c.claim.key) for c in pod.claims] == [("g", "ns/shared")]
    assert pod.claims[0].claim.template is None


@pytest.mark.parametrize(
    "claims",
    [
        "[{name: g, source: {resourceClaimTemplateName: t}}]",
        "[{name: g, resourceClaimTemplateName: t}]",
    ],
)
def test_both_template_forms_make_one_claim_per_pod(claims: str) -> None:
    workload = _compile(_docs(CLASS, _template("t"), _pod("a", claims), _pod("b", claims)))
    names = [c.claim.request.name for p in workload.pods for c in p.claims]
    assert names == ["a-g", "b-g"]  # <pod>-<podClaimName>
    assert [c.template for c in workload.claims] == ["t", "t"]
    assert workload.claims[0].owner_pod == "ns/a"
    assert len({c.request.uid for c in workload.claims}) == 2


def test_shared_claim_is_one_request_in_two_pods() -> None:
    claims = "[{name: g, resourceClaimName: shared}]"
    workload = _compile(_docs(CLASS, _claim("shared"), _pod("a", claims), _pod("b", claims)))
    requests = workload.requests()
    assert requests[0].claims[0].uid == requests[1].claims[0].uid
    assert len(workload.claims) == 1
    assert [p.key for p in workload.users_of(workload.claims[0])] == ["ns/a", "ns/b"]


def test_claim_without_parameters_is_one_gpu_and_uids_are_deterministic() -> None:
    text = _docs(CLASS, _claim("c"), _pod("p", "[{name: g, resourceClaimName: c}]"))
    first, again = _compile(text), _compile(text)
    request = first.claims[0].request
    assert request.gpu is not None and request.gpu.count == 1 and request.mig is None
    assert request.uid == again.claims[0].request.uid
    assert first.pods[0].pod.uid == again.pods[0].pod.uid


def test_metadata_uid_is_kept_and_existing_allocations_lend_theirs() -> None:
    claim = _claim("c").replace("name: c, namespace: ns", "name: c, namespace: ns, uid: given")
    pods = _pod("p", "[{name: g, resourceClaimName: c}, {name: h, resourceClaimName: d}]")
    workload = _compile(
        _docs(CLASS, claim, _claim("d"), pods), existing_uids={("ns", "d"): "from-nas"}
    )
    assert [c.request.uid for c in workload.claims] == ["given", "from-nas"]


@pytest.mark.parametrize("group", ["gpu.drasat.io", "gpu.resource.nvidia.com"])
def test_parameters_in_both_groups(group: str) -> None:
    text = _docs(
        CLASS,
        f"""
apiVersion: {group}/v1alpha1
kind: GpuClaimParameters
metadata: {{name: two, namespace: ns}}
spec: {{count: 2, selector: {{productName: "*t4*"}}}}
""",
        f"""
apiVersion: {group}/v1alpha1
kind: MigDeviceClaimParameters
metadata: {{name: small, namespace: ns}}
spec: {{profile: 1g.5gb}}
""",
        _claim("c", f"{{apiGroup: {group}, kind: GpuClaimParameters, name: two}}"),
        _claim("m", f"{{apiGroup: {group}, kind: MigDeviceClaimParameters, name: small}}"),
        _pod("p", "[{name: g, resourceClaimName: c}, {name: h, resourceClaimName: m}]"),
    )
    gpu, mig = (c.request for c in _compile(text).claims)
    assert gpu.gpu is not None and gpu.gpu.count == 2 and gpu.gpu.selector is not None
    assert mig.mig is not None and mig.mig.profile == "1g.5gb"


def test_nvidia_driver_class_is_ours_and_class_parameters_set_shareable() -> None:
    text = _docs(
        """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: nv}
driverName: gpu.resource.nvidia.com
parametersRef: {apiGroup: gpu.resource.nvidia.com, kind: DeviceClassParameters, name: solo}
""",
        """
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: DeviceClassParameters
metadata: {name: solo}
spec: {sharable: false}
""",
        _claim("c", cls="nv"),
        _pod("a", "[{name: g, resourceClaimName: c}]"),
        _pod("b", "[{name: g, resourceClaimName: c}]"),
    )
    workload = _compile(text)
    assert workload.claims[0].request.shareable is False
    # a claim that is not shareable is reserved for its first pod; the second cannot have it
    assert workload.pods[0].blocked is None
    assert workload.pods[1].blocked == (
        "claim ns/c is not shareable (class nv) and is reserved for pod ns/a"
    )
    assert [r.key for r in workload.requests()] == ["ns/a"]


def test_installed_class_needs_no_resource_class() -> None:
    workload = _compile(_docs(_claim("c"), _pod("p", "[{name: g, resourceClaimName: c}]")))
    assert workload.claims[0].class_name == "gpu.drasat.io"


def test_other_drivers_claims_and_unrelated_kinds_are_listed_as_ignored() -> None:
    text = _docs(
        CLASS,
        """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: fpga}
driverName: fpga.example.com
""",
        _claim("c"),
        _claim("f", cls="fpga"),
        _pod("mixed", "[{name: g, resourceClaimName: c}, {name: x, resourceClaimName: f}]"),
        _pod("fpga-only", "[{name: x, resourceClaimName: f}]"),
        _pod("cpu-only", "[]"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n",  # repeated across files
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: new}\n"
        "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]}}",
        _claim("unused"),
        _claim("now").replace(
            "resourceClassName:", "allocationMode: Immediate\n  resourceClassName:"
        ),
    )
    workload = _compile(text)
    assert [p.key for p in workload.pods] == ["ns/mixed"]
    assert [c.name for c in workload.pods[0].claims] == ["g"]
    ignored = {i.what: i.reason for i in workload.ignored}
    assert ignored["ConfigMap default/cm"] == "not a kind the what-if places"
    assert ignored["Namespace ns"] == "not a kind the what-if places"
    assert ignored["ResourceClaim default/new"].startswith(
        "resource.k8s.io/v1 is not classic DRA (resource.k8s.io/v1alpha2)"
    )
    assert "driver fpga.example.com" in ignored["Pod ns/mixed claim x"]
    assert ignored["Pod ns/fpga-only"] == "uses no drasat GPU claim"
    assert ignored["Pod ns/cpu-only"] == "uses no drasat GPU claim"
    assert ignored["ResourceClaim ns/unused"] == "used by no pod in the manifests"
    assert "allocationMode Immediate" in ignored["ResourceClaim ns/now"]


def test_namespace_defaults_to_default() -> None:
    text = _docs(
        CLASS,
        "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\nmetadata: {name: c}\n"
        "spec: {resourceClassName: gpu.drasat.io}",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        "spec: {containers: [], resourceClaims: [{name: g, resourceClaimName: c}]}",
    )
    assert _compile(text).pods[0].key == "default/p"


WORKLOAD_TEMPLATE = """
    metadata: {labels: {app: x}}
    spec:
      containers: [{name: c, image: busybox}]
      resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: t}}]
"""


@pytest.mark.parametrize(
    ("kind", "spec", "pattern"),
    [
        ("apps/v1 StatefulSet", "replicas: 3", r"web-[0-2]"),
        ("apps/v1 Deployment", "replicas: 2", r"web-[b-z2-9]{10}-[b-z2-9]{5}"),
        ("apps/v1 ReplicaSet", "replicas: 2", r"web-[b-z2-9]{5}"),
        ("batch/v1 Job", "parallelism: 4\n  completions: 2", r"web-[b-z2-9]{5}"),
    ],
)
def test_workloads_expand_to_named_pods(kind: str, spec: str, pattern: str) -> None:
    import re

    api_version, kind_name = kind.split()
    workload_doc = (
        f"apiVersion: {api_version}\nkind: {kind_name}\nmetadata: {{name: web, namespace: ns}}\n"
        f"spec:\n  {spec}\n  template:{WORKLOAD_TEMPLATE}"
    )
    workload = _compile(_docs(CLASS, _template("t"), workload_doc))
    names = [p.pod.name for p in workload.pods]
    expected = 3 if kind_name == "StatefulSet" else 2
    assert len(names) == len(set(names)) == expected
    assert all(re.fullmatch(pattern, n) for n in names), names
    if kind_name == "StatefulSet":
        assert names == ["web-0", "web-1", "web-2"]
    # each pod gets its own claim from the template, named after the pod
    assert [c.request.name for c in workload.claims] == [f"{n}-gpu" for n in names]
    assert _compile(_docs(CLASS, _template("t"), workload_doc)).pods[0].pod.name == names[0]


def test_priority_from_spec_and_priority_class_and_requests() -> None:
    text = _docs(
        CLASS,
        _claim("c"),
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\n"
        "value: 1000",
        _pod("a", "[{name: g, resourceClaimName: c}]", extra="priority: 7"),
        _pod("b", "[{name: g, resourceClaimName: c}]", extra="priorityClassName: high"),
        """
apiVersion: v1
kind: Pod
metadata: {name: r, namespace: ns}
spec:
  containers:
  - {name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  - {name: b, resources: {limits: {cpu: "2", memory: 512Mi}}}
  resourceClaims: [{name: g, resourceClaimName: c}]
""",
        """
apiVersion: v1
kind: Pod
metadata: {name: init, namespace: ns}
spec:
  initContainers: [{name: warm, resources: {requests: {cpu: "4", memory: 256Mi}}}]
  containers: [{name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}]
  resourceClaims: [{name: g, resourceClaimName: c}]
""",
    )
    a, b, r, init = _compile(text).requests()
    assert (a.priority, b.priority) == (7, 1000)
    assert (r.cpu_milli, r.memory_mib) == (2500, 1536)
    # the scheduler counts the larger of the containers' sum and any init container
    assert (init.cpu_milli, init.memory_mib) == (4000, 1024)


def test_finished_pods_are_ignored() -> None:
    pod = _pod("done", "[{name: g, resourceClaimName: c}]") + "status: {phase: Succeeded}\n"
    workload = _compile(_docs(CLASS, _claim("c"), pod))
    assert workload.pods == ()
    assert [(i.what, i.reason) for i in workload.ignored] == [
        ("Pod ns/done", "finished (Succeeded)"),
        ("ResourceClaim ns/c", "used by no pod in the manifests"),
    ]


def test_mig_claim_is_paired_with_the_pods_gpu_claim_by_resource_claim_name() -> None:
    text = _docs(
        CLASS,
        _template("whole", "{apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: mig-gpu}"),
        _template("slice", "{apiGroup: gpu.drasat.io, kind: MigDeviceClaimParameters, name: m}"),
        """
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: mig-gpu, namespace: ns}
spec: {selector: {migEnabled: true}}
""",
        """
apiVersion: gpu.drasat.io/v1alpha1
kind: MigDeviceClaimParameters
metadata: {name: m, namespace: ns}
spec: {profile: 1g.5gb, gpuClaimName: gpu}
""",
        _pod(
            "p",
            "[{name: gpu, resourceClaimTemplateName: whole}, "
            "{name: mig, resourceClaimTemplateName: slice}]",
        ),
    )
    gpu, mig = _compile(text).requests()[0].claims
    assert mig.mig is not None and mig.mig.gpu_claim_name == "p-gpu" == gpu.name


def test_a_live_dump_counts_each_pod_once() -> None:
    # `kubectl get deploy,rs,pods -o yaml` lists the Deployment, its ReplicaSet and its Pods:
    # the Pods are what exists, the owners must not add pods of their own.
    deployment = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: ns}\n"
        f"spec:\n  replicas: 2\n  template:{WORKLOAD_TEMPLATE}"
    )
    replica_set = (
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web-abc, namespace: ns,\n"
        "  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u,"
        " controller: true}]}\n"
        f"spec:\n  replicas: 2\n  template:{WORKLOAD_TEMPLATE}"
    )
    pods = [
        _pod(name, "[{name: gpu, resourceClaimTemplateName: t}]").replace(
            "namespace: ns}",
            "namespace: ns, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet,"
            " name: web-abc, uid: v, controller: true}]}",
        )
        for name in ("web-abc-x1", "web-abc-x2")
    ]
    workload = _compile(_docs(CLASS, _template("t"), deployment, replica_set, *pods))
    assert [p.pod.name for p in workload.pods] == ["web-abc-x1", "web-abc-x2"]
    ignored = {i.what: i.reason for i in workload.ignored}
    assert ignored["Deployment ns/web"] == (
        "its ReplicaSet web-abc is in the input and stands for its pods"
    )
    assert ignored["ReplicaSet ns/web-abc"] == (
        "its Pod web-abc-x1 is in the input and stands for its pods"
    )
