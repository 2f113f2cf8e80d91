"""`drasat whatif -f` as a CI gate: what `kubectl apply` of the files would do, checked once.

- A ResourceClaim of the files keeps no status: the API server drops the status of what it
  creates, so an allocation written there holds no devices (a `note:` line says so).
- Every kind that carries a pod template and that users apply is checked alike: a DaemonSet
  (placed as one pod on each node its controller would run one on) and a CronJob (checked, not
  placed: its Jobs start on its schedule).
- Quantities are decoded as apimachinery parses them, and a container's resources validated as
  the server validates them.
- A workload's unknown fields are looked for once per document.

The words are kube-apiserver v1.37.2's; test_whatif_apiserver_oracle.py holds them against it."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from drasat import loading
from drasat.api import quantity
from drasat.whatif import knownfields, manifestindex, v1manifests

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    from conftest import RunCli, WriteYaml

Obj = dict[str, Any]

HELD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: held}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.drasat.io}}]
status:
  allocation:
    devices:
      results: [{request: gpu, driver: gpu.drasat.io, pool: nowhere, device: gpu-0}]
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: app}
spec:
  containers: [{name: c, image: x, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimName: held}]
"""

TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: one}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.drasat.io}}]
"""

DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {namespace: ml, name: agent}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: a}}
    spec:
      containers: [{name: c, image: x, resources: {claims: [{name: g}]}}]
      resourceClaims: [{name: g, resourceClaimTemplateName: one}]
"""

CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {namespace: ml, name: nightly}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: x, resources: {claims: [{name: g}]}}]
          resourceClaims: [{name: g, resourceClaimTemplateName: one}]
"""


def _documents(text: str, source: str = "app.yaml") -> list[loading.Document]:
    return loading.parse_documents(textwrap.dedent(text), source)


def _node(name: str, labels: Obj | None = None, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


# -- a claim's status -------------------------------------------------------------------------


def test_a_claim_applied_with_an_allocation_holds_nothing_and_a_note_says_so() -> None:
    workload = v1manifests.compile_v1(_documents(HELD))
    (claim,) = workload.claims.values()
    assert not v1manifests.allocated(claim.obj) and "status" not in claim.obj
    (pod,) = workload.pods
    assert pod.pending() == (claim,)
    (note,) = workload.notes
    assert (note.where, note.what) == ("app.yaml: document 1", "ResourceClaim ml/held")
    assert note.reason == v1manifests.STATUS_DROPPED


def test_a_claim_read_from_the_cluster_keeps_its_allocation() -> None:
    workload = v1manifests.compile_v1(_documents(HELD, v1manifests.LIVE_SOURCE))
    (claim,) = workload.claims.values()
    assert v1manifests.allocated(claim.obj) and workload.notes == ()


def test_an_unknown_status_field_is_still_refused(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    # The server decodes the status before it drops it.
    app = write_yaml("app.yaml", HELD.replace("  allocation:", "  alocation: {}\n  allocation:"))
    result = run_cli("-f", app)
    assert result.code == 2
    assert result.err == (
        f"error: {app}: document 1: ResourceClaim ml/held: status.alocation: strict decoding "
        'error: unknown field "status.alocation"\n'
    )


# -- DaemonSets and CronJobs -------------------------------------------------------------------


def test_a_daemonset_is_one_pod_on_each_node_its_controller_runs_one_on() -> None:
    template = DAEMONSET.replace(
        "      containers:", "      nodeSelector: {gpu: 'yes'}\n      containers:"
    )
    nodes = [
        _node("a", {"gpu": "yes"}),
        _node("cordoned", {"gpu": "yes"}, unschedulable=True),  # tolerated by its controller
        _node("tainted", {"gpu": "yes"}, taints=[{"key": "k", "effect": "NoSchedule"}]),
        _node("cpu", {"gpu": "no"}),
    ]
    workload = v1manifests.compile_v1(_documents(TEMPLATE + "---\n" + template), nodes=nodes)
    on = {}
    for pod in workload.pods:
        affinity = pod.obj["spec"]["affinity"]["nodeAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        (field,) = term["matchFields"]
        on[pod.instance.name] = field["values"]
        assert pod.instance.owner == "DaemonSet agent" and len(pod.claims) == 1
    assert sorted(v for (v,) in on.values()) == ["a", "cordoned"]
    assert all(name.startswith("agent-") and len(name) == len("agent-") + 5 for name in on)
    again = v1manifests.compile_v1(_documents(TEMPLATE + "---\n" + template), nodes=nodes)
    assert [p.instance.name for p in again.pods] == list(on)


def test_a_daemonset_no_node_runs_is_listed() -> None:
    template = DAEMONSET.replace(
        "      containers:", "      nodeSelector: {gpu: 'h100'}\n      containers:"
    )
    workload = v1manifests.compile_v1(_documents(TEMPLATE + "---\n" + template), nodes=[_node("a")])
    assert workload.pods == ()
    assert [(i.what, i.reason) for i in workload.ignored] == [
        ("DaemonSet ml/agent", v1manifests.NO_DAEMON_NODE)
    ]


def test_a_daemonset_is_placed_one_pod_per_node(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    result = run_cli("-f", write_yaml("app.yaml", TEMPLATE + "---\n" + DAEMONSET), "-o", "wide")
    assert result.code in (0, 1), result.err
    rows = [r.split() for r in result.out.splitlines() if r.startswith("ml/agent-") and " g " in r]
    # The embedded example cluster's three nodes: one pod each, none elsewhere.
    assert len(rows) == 3
    placed = [row[3] for row in rows if row[3] != "-"]
    assert len(set(placed)) == len(placed) >= 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            DAEMONSET.replace("resourceClaimTemplateName: one", "resourceClaimTemplateName: two"),
            "DaemonSet ml/agent: spec.template.spec.resourceClaims[0].resourceClaimTemplateName:"
            " ResourceClaimTemplate ml/two is not in the manifests",
        ),
        (
            DAEMONSET.replace("claims: [{name: g}]", "claims: [{name: h}]"),
            "DaemonSet ml/agent: spec.template.spec.containers[0].resources.claims[0]: "
            'Not found: "h"',
        ),
        (
            DAEMONSET.replace("image: x,", "image: x, imagePullPolic: x,"),
            "DaemonSet ml/agent: spec.template.spec.containers[0].imagePullPolic: strict decoding "
            'error: unknown field "spec.template.spec.containers[0].imagePullPolic"',
        ),
        (
            CRONJOB.replace("claims: [{name: g}]", "claims: [{name: h}]"),
            "CronJob ml/nightly: spec.jobTemplate.spec.template.spec.containers[0].resources."
            'claims[0]: Not found: "h"',
        ),
        (
            CRONJOB.replace("image: x,", "image: x, foo: 1,"),
            "CronJob ml/nightly: spec.jobTemplate.spec.template.spec.containers[0].foo: strict "
            'decoding error: unknown field "spec.jobTemplate.spec.template.spec.containers[0].foo"',
        ),
        (
            CRONJOB.replace("limits", "x")
            .replace("image: x,", "image: x, resources: {limits: {nvidia.com/gpu: '1.5'}},")
            .replace(", resources: {claims: [{name: g}]}", ""),
            "CronJob ml/nightly: spec.jobTemplate.spec.template.spec.containers[0].resources."
            'limits[nvidia.com/gpu]: Invalid value: "1.5": must be an integer',
        ),
        (
            CRONJOB.replace("name: nightly", "name: " + "n" * 53),
            f'metadata.name: Invalid value: "{"n" * 53}": must be no more than 52 characters',
        ),
    ],
)
def test_daemonsets_and_cronjobs_are_checked_like_other_workloads(
    run_cli: RunCli, write_yaml: WriteYaml, text: str, message: str
) -> None:
    app = write_yaml("app.yaml", TEMPLATE + "---\n" + text)
    result = run_cli("-f", app)
    assert result.code == 2, result.out
    (line,) = result.err.splitlines()
    assert line.startswith(f"error: {app}: document 2: ") and message in line, line


@pytest.mark.parametrize(
    ("kind", "policy", "message"),
    [
        ("Job", "", 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", '
         '"Never"'),
        ("CronJob", "restartPolicy: Always", "spec.jobTemplate.spec.template.spec.restartPolicy: "
         'Required value: valid values: "OnFailure", "Never"'),
        ("DaemonSet", "restartPolicy: Never", 'spec.template.spec.restartPolicy: Unsupported '
         'value: "Never": supported values: "Always"'),
    ],
)  # fmt: skip
def test_a_restart_policy_the_workloads_controller_cannot_run_is_refused(
    run_cli: RunCli, write_yaml: WriteYaml, kind: str, policy: str, message: str
) -> None:
    text = {"Job": CRONJOB.replace("kind: CronJob", "kind: Job")
            .replace('  schedule: "0 0 * * *"\n  jobTemplate:\n    spec:\n', "")
            .replace("\n    ", "\n"),
            "CronJob": CRONJOB, "DaemonSet": DAEMONSET}[kind]  # fmt: skip
    text = text.replace("restartPolicy: Never", policy).replace(
        "      containers:", f"      {policy}\n      containers:" if kind == "DaemonSet" else
        "      containers:"
    )  # fmt: skip
    app = write_yaml("app.yaml", TEMPLATE + "---\n" + text)
    result = run_cli("-f", app)
    assert result.code == 2, result.out
    assert result.err.endswith(f": {message}\n"), result.err


def test_a_claims_capacity_request_the_server_parses_is_not_refused(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    # `1u`, `-1` and the number 1.5 parse: the server keeps them (the allocator counts 1.5 as
    # 2 bytes and leaves the others' pods out, saying why).
    for amount in ("1u", "'-1'", "1.5"):
        claim = TEMPLATE.replace(
            "exactly: {deviceClassName: gpu.drasat.io}",
            "exactly: {deviceClassName: gpu.drasat.io, capacity: {requests: {memory: "
            + amount
            + "}}}",
        )
        result = run_cli("-f", write_yaml("app.yaml", claim))
        assert result.code == 0, result.err


def test_a_cronjob_is_checked_not_placed(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    app = write_yaml("app.yaml", TEMPLATE + "---\n" + CRONJOB)
    result = run_cli("-f", app)
    assert result.code == 0, result.err
    assert f"ignored: CronJob ml/nightly ({app}): {manifestindex.CRONJOB}" in result.out


# -- quantities --------------------------------------------------------------------------------

#: apimachinery's `ParseQuantity` on each (None: it parses), as v1.37.2 answers.
PARSED = {
    "1.5.3": quantity.FORMAT_WRONG, "1ki": quantity.SUFFIX_WRONG, "1 Gi": quantity.FORMAT_WRONG,
    "1e3Gi": quantity.FORMAT_WRONG, "": quantity.FORMAT_WRONG, "1e": quantity.SUFFIX_WRONG,
    "1m3": quantity.SUFFIX_WRONG, "true": quantity.FORMAT_WRONG, "1u": None, "1n": None,
    "1.": None, "-": None, ".5": None, "1e+3": None, "1E": None, "10Ei": None, "007": None,
    "-1": None, "+1.5Gi": None,
}  # fmt: skip


@pytest.mark.parametrize("text", sorted(PARSED))
def test_quantities_parse_as_apimachinery_parses_them(text: str) -> None:
    assert quantity.go_parse_error(text) == PARSED[text]


def test_quantity_values() -> None:
    assert quantity.go_value("1u") == quantity.go_value("0.000001")
    assert quantity.go_value("1.") == 1 and quantity.go_value("-") == 0
    assert quantity.go_value("1e+3") == 1000 and quantity.go_value("1.5Gi") == 1.5 * 2**30
    assert quantity.go_value(1.5) == quantity.go_value("1500m")


def _pod(resources: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: ml, name: app}}
        spec:
          containers: [{{name: c, image: x, resources: {resources}}}]
        """)


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{limits: {memory: 1.5.3}}", f"resources.limits[memory]: {quantity.FORMAT_WRONG}"),
        ("{requests: {cpu: true}}", f"resources.requests[cpu]: {quantity.FORMAT_WRONG}"),
        ("{requests: {memory: 1ki}}", f"resources.requests[memory]: {quantity.SUFFIX_WRONG}"),
        (
            "{limits: {memory: 1Gi}, requests: {memory: 2Gi}}",
            'resources.requests[memory]: Invalid value: "2Gi": must be less than or equal to '
            "memory limit of 1Gi",
        ),
        (
            "{requests: {cpu: '-1'}}",
            'resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0',
        ),
        (
            "{limits: {memroy: 1Gi}}",
            'resources.limits[memroy]: Invalid value: "memroy": must be a standard resource type '
            "or fully qualified",
        ),
        (
            "{limits: {pods: 1}}",
            'resources.limits[pods]: Invalid value: "pods": must be a standard resource for '
            "containers",
        ),
    ],
)
def test_a_containers_resources_are_refused_as_the_server_refuses_them(
    run_cli: RunCli, write_yaml: WriteYaml, resources: str, message: str
) -> None:
    app = write_yaml("app.yaml", _pod(resources))
    result = run_cli("-f", app)
    assert result.code == 2, result.out
    assert result.err == f"error: {app}: document 1: Pod ml/app: spec.containers[0].{message}\n"


@pytest.mark.parametrize(
    "resources",
    [
        "{limits: {memory: 1u, cpu: 1k}}",
        "{requests: {memory: '1.', cpu: 1.5}, limits: {memory: 1Gi}}",
        "{requests: {cpu: 1000m}, limits: {cpu: '1'}}",
        "{limits: {hugepages-2Mi: 2Mi, memory: 1Gi}}",
    ],
)
def test_quantities_the_server_keeps_are_accepted(
    run_cli: RunCli, write_yaml: WriteYaml, resources: str
) -> None:
    result = run_cli("-f", write_yaml("app.yaml", _pod(resources)))
    assert result.code == 0, result.err


def test_a_quantity_ends_decoding_before_an_earlier_type_error() -> None:
    # Go's decoder notes a value of the wrong type and goes on; a Quantity's own decoder's
    # error stops it at once, and is what the server answers.
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"activeDeadlineSeconds": "5",
                 "containers": [{"name": "c", "resources": {"limits": {"cpu": "1 000"}}}]},
    }  # fmt: skip
    found = knownfields.decode(pod)
    assert found == knownfields.Undecodable(
        "spec.containers[0].resources.limits[cpu]", quantity.FORMAT_WRONG
    )


def test_a_claims_capacity_request_is_decoded(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    claim = TEMPLATE.replace(
        "exactly: {deviceClassName: gpu.drasat.io}",
        "exactly: {deviceClassName: gpu.drasat.io, capacity: {requests: {memory: 8 Gi}}}",
    )
    app = write_yaml("app.yaml", claim)
    result = run_cli("-f", app)
    assert result.code == 2
    assert result.err == (
        f"error: {app}: document 1: ResourceClaimTemplate ml/one: spec.spec.devices.requests[0]"
        f".exactly.capacity.requests[memory]: {quantity.FORMAT_WRONG}\n"
    )


# -- one strict decoding per document ------------------------------------------------------------


def test_a_workloads_unknown_fields_are_looked_for_once(
    run_cli: RunCli, write_yaml: WriteYaml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk over every field of a pod template is the what-if's costliest check of a large
    input: once per `-f` document, where the API server's strict decoding would run."""
    calls: list[str] = []
    walk = knownfields.unknown_fields

    def counted(obj: Any) -> list[str]:
        calls.append(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}")
        return walk(obj)

    monkeypatch.setattr(knownfields, "unknown_fields", counted)
    deployment = DAEMONSET.replace("DaemonSet", "Deployment").replace("name: agent", "name: web")
    app = write_yaml("app.yaml", TEMPLATE + "---\n" + deployment + "---\n" + DAEMONSET)
    result = run_cli("-f", app)
    assert result.code in (0, 1), result.err
    assert calls.count("Deployment web") == 1 and calls.count("DaemonSet agent") == 1, calls
