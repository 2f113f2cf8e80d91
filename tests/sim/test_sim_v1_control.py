"""The simulated v1 scheduler and controller manager: their pure decisions (exact answers on small
cases, properties with hypothesis) and one deterministic pass at a time against the simulator.
The behaviours both share with the real components are in tests/contract/test_v1_scheduling.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drasat.testbed.sim import apiserver, controllers, kubeclient, scheduling, v1scheduler

Obj = dict[str, Any]
V1 = ("resource.k8s.io", "v1")


def _node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def _selector(node: str) -> Obj:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def _allocated(node: str, reserved: list[Obj] | None = None) -> Obj:
    return {
        "metadata": {"name": f"on-{node}"},
        "status": {"allocation": {"nodeSelector": _selector(node)}, "reservedFor": reserved or []},
    }


# --- pure: node filters -------------------------------------------------------------------------


def test_pod_filters_taints_unschedulable_selector_affinity() -> None:
    pod: Obj = {"metadata": {"name": "p"}, "spec": {}}
    tainted = _node("t", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])
    assert not scheduling.pod_fits_node(pod, tainted)
    assert scheduling.pod_fits_node(
        pod, _node("t", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    )
    pod["spec"]["tolerations"] = [{"key": "gpu", "operator": "Equal", "value": "x"}]
    assert scheduling.pod_fits_node(pod, tainted)
    pod["spec"]["tolerations"] = [{"key": "gpu", "operator": "Equal", "value": "y"}]
    assert not scheduling.pod_fits_node(pod, tainted)
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert scheduling.pod_fits_node(pod, tainted)
    assert not scheduling.pod_fits_node(
        {"metadata": {}, "spec": {}}, _node("u", unschedulable=True)
    )
    selected = {"metadata": {}, "spec": {"nodeSelector": {"zone": "a"}}}
    assert scheduling.pod_fits_node(selected, _node("n", {"zone": "a"}))
    assert not scheduling.pod_fits_node(selected, _node("n", {"zone": "b"}))
    affinity = {
        "metadata": {},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                        ]
                    }
                }
            }
        },
    }
    assert scheduling.pod_fits_node(affinity, _node("n", {"gpu": "yes"}))
    assert not scheduling.pod_fits_node(affinity, _node("n"))


def test_a_claim_is_unavailable_only_where_the_pod_could_run() -> None:
    pod = {"metadata": {"uid": "u"}, "spec": {"nodeSelector": {"pool": "x"}}}
    nodes = [_node("a", {"pool": "x"}), _node("b"), _node("c", {"pool": "x"})]
    found = scheduling.filter_nodes(pod, nodes, [_allocated("c")])
    assert found == scheduling.Filtered(nodes=["c"], unavailable=[0])
    # The allocation's node is one the pod may not use: nothing fits, the claim is unavailable.
    found = scheduling.filter_nodes(pod, nodes, [_allocated("b")])
    assert found == scheduling.Filtered(nodes=[], unavailable=[0])
    # No node passes the pod's own filters: the DRA filter never ran, nothing to deallocate.
    found = scheduling.filter_nodes(
        {**pod, "spec": {"nodeSelector": {"pool": "z"}}}, nodes, [_allocated("b")]
    )
    assert found == scheduling.Filtered(nodes=[], unavailable=[])


def test_post_filter_only_deallocates_claims_nobody_else_uses() -> None:
    pod = {"metadata": {"uid": "me"}}
    assert scheduling.can_deallocate(_allocated("a"), pod)
    assert scheduling.can_deallocate(_allocated("a", [{"uid": "me"}]), pod)
    assert not scheduling.can_deallocate(_allocated("a", [{"uid": "other"}]), pod)
    assert not scheduling.can_deallocate(_allocated("a", [{"uid": "me"}, {"uid": "o"}]), pod)


# --- pure: controllers --------------------------------------------------------------------------


def test_claim_generate_name_is_cut_in_proportion() -> None:
    assert controllers.claim_generate_name("pod", "gpu") == "pod-gpu-"
    pod, claim = "p" * 50, "c" * 30  # base 82 characters
    # Go: pod[0 : 50*57/82] + "-" + claim[0 : 30*57/82] = 34 + 1 + 20 characters, no trailing "-".
    assert controllers.claim_generate_name(pod, claim) == "p" * 34 + "-" + "c" * 20


@given(st.text("abc-", min_size=1, max_size=80), st.text("xyz-", min_size=1, max_size=80))
def test_claim_generate_name_fits(pod: str, claim: str) -> None:
    name = controllers.claim_generate_name(pod, claim)
    assert len(name) <= 57
    if len(pod) + len(claim) + 2 <= 57:
        assert name == f"{pod}-{claim}-"


def test_template_hash_uses_the_safe_alphabet_and_tracks_the_template() -> None:
    one = controllers.template_hash({"spec": {"containers": [{"name": "a"}]}})
    assert set(one) <= set("bcdfghjklmnpqrstvwxz2456789") and 1 <= len(one) <= 10
    assert one == controllers.template_hash({"spec": {"containers": [{"name": "a"}]}})
    assert one != controllers.template_hash({"spec": {"containers": [{"name": "b"}]}})


@pytest.mark.parametrize(
    ("spec", "succeeded", "active"),
    [
        ({"completions": 3, "parallelism": 2}, 0, 2),
        ({"completions": 3, "parallelism": 2}, 2, 1),
        ({"completions": 3, "parallelism": 2}, 3, 0),
        ({"parallelism": 2}, 0, 2),  # no completions: done once one succeeded
        ({"parallelism": 2}, 1, 0),
        ({"completions": 1}, 0, 1),  # parallelism defaults to 1
        ({"completions": 4, "parallelism": 4, "suspend": True}, 0, 0),
    ],
)
def test_job_wanted_active(spec: Obj, succeeded: int, active: int) -> None:
    assert controllers.job_wanted_active({"spec": spec}, succeeded) == active


def test_job_finished() -> None:
    job = {"spec": {"completions": 2, "backoffLimit": 1}}
    assert controllers.job_finished(job, 1, 0) is None
    assert controllers.job_finished(job, 2, 0) == "Complete"
    assert controllers.job_finished(job, 0, 1) is None
    assert controllers.job_finished(job, 0, 2) == "Failed"
    assert controllers.job_finished({"spec": {}}, 1, 0) == "Complete"


def test_valid_reservations_drop_gone_replaced_and_done_pods() -> None:
    def pod(uid: str, **extra: Any) -> Obj:
        return {"metadata": {"uid": uid, **extra.pop("meta", {})}, **extra}

    pods = {
        "running": pod("1", spec={"nodeName": "n"}),
        "replaced": pod("new"),
        "finished": pod("3", status={"phase": "Succeeded"}),
        "unscheduled-deleted": pod("4", meta={"deletionTimestamp": "t"}, spec={}),
        "terminating-on-node": pod("5", meta={"deletionTimestamp": "t"}, spec={"nodeName": "n"}),
    }
    refs = [
        {"resource": "pods", "name": "running", "uid": "1"},
        {"resource": "pods", "name": "replaced", "uid": "old"},
        {"resource": "pods", "name": "finished", "uid": "3"},
        {"resource": "pods", "name": "unscheduled-deleted", "uid": "4"},
        {"resource": "pods", "name": "terminating-on-node", "uid": "5"},
        {"resource": "pods", "name": "gone", "uid": "6"},
    ]
    kept = controllers.valid_reservations({"status": {"reservedFor": refs}}, pods)
    assert [r["name"] for r in kept] == ["running", "terminating-on-node"]


def test_merged_claim_statuses_keep_other_entries() -> None:
    pod = {"status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x"}]}}
    assert controllers.merged_claim_statuses(pod, {"a": "p-a-y"}) == [
        {"name": "a", "resourceClaimName": "p-a-y"},
        {"name": "b", "resourceClaimName": "p-b-x"},
    ]


# --- passes against the simulator ---------------------------------------------------------------


@pytest.fixture
def client(sim_apiserver: apiserver.ApiServer) -> kubeclient.KubeClient:
    return kubeclient.KubeClient(sim_apiserver.url)


def _pods(client: kubeclient.KubeClient, ns: str = "default") -> list[Obj]:
    items: list[Obj] = client.list(kubeclient.path("", "v1", "pods", namespace=ns))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _template(**spec: Any) -> Obj:
    return {
        "metadata": {"labels": {"app": "w"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def test_a_deployment_runs_its_replicas_through_a_replicaset(client: kubeclient.KubeClient) -> None:
    url = kubeclient.path("apps", "v1", "deployments", namespace="default")
    deployment = client.create(
        url,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "w"}},
                "template": _template(),
            },
        },
    )
    manager = controllers.ControllerManager(client)
    manager.run_once()  # the ReplicaSet
    manager.run_once()  # its pods
    sets = client.list(kubeclient.path("apps", "v1", "replicasets", namespace="default"))["items"]
    assert len(sets) == 1
    rs = sets[0]
    digest = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{digest}"
    assert controllers.owned_by(rs, deployment) and rs["spec"]["replicas"] == 3
    pods = _pods(client)
    assert len(pods) == 3
    assert all(controllers.owned_by(p, rs) for p in pods)
    assert all(p["metadata"]["name"].startswith(f"web-{digest}-") for p in pods)
    assert all(p["metadata"]["labels"] == {"app": "w", "pod-template-hash": digest} for p in pods)
    # Scale down: unscheduled pods go first.
    kept = pods[2]["metadata"]["name"]
    client.create(
        kubeclient.path("", "v1", "pods", namespace="default", name=kept, subresource="binding"),
        {"metadata": {"name": kept}, "target": {"kind": "Node", "name": "n1"}},
    )
    client.merge_patch(
        kubeclient.path("apps", "v1", "deployments", namespace="default", name="web"),
        {"spec": {"replicas": 1}},
    )
    manager.run_once()
    manager.run_once()
    assert [p["metadata"]["name"] for p in _pods(client)] == [kept]
    # A new template: a new ReplicaSet, the old one scaled to 0.
    client.merge_patch(
        kubeclient.path("apps", "v1", "deployments", namespace="default", name="web"),
        {"spec": {"template": _template(restartPolicy="Always", hostname="x")}},
    )
    for _ in range(3):
        manager.run_once()
    sets = client.list(kubeclient.path("apps", "v1", "replicasets", namespace="default"))["items"]
    replicas = {s["metadata"]["name"]: s["spec"]["replicas"] for s in sets}
    assert replicas[rs["metadata"]["name"]] == 0 and sorted(replicas.values()) == [0, 1]
    pods = _pods(client)
    assert len(pods) == 1 and pods[0]["spec"].get("hostname") == "x"
    status = client.get(
        kubeclient.path("apps", "v1", "deployments", namespace="default", name="web")
    )["status"]
    assert status["replicas"] == 1


def test_a_job_runs_completions_pods_with_parallelism(client: kubeclient.KubeClient) -> None:
    url = kubeclient.path("batch", "v1", "jobs", namespace="default")
    job = client.create(
        url,
        {
            "metadata": {"name": "train"},
            "spec": {
                "completions": 3,
                "parallelism": 2,
                "template": _template(restartPolicy="Never"),
            },
        },
    )
    manager = controllers.ControllerManager(client)
    manager.run_once()
    pods = _pods(client)
    assert len(pods) == 2 and all(controllers.owned_by(p, job) for p in pods)
    labels = pods[0]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == "train"
    assert labels["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]

    def finish(pod: Obj) -> None:
        client.merge_patch(
            kubeclient.path(
                "",
                "v1",
                "pods",
                namespace="default",
                name=pod["metadata"]["name"],
                subresource="status",
            ),
            {"status": {"phase": "Succeeded"}},
        )

    finish(pods[0])
    manager.run_once()
    assert sum(1 for p in _pods(client) if controllers.pod_active(p)) == 2  # min(2, 3 - 1)
    for pod in _pods(client):
        if controllers.pod_active(pod):
            finish(pod)
    manager.run_once()
    status = client.get(kubeclient.path("batch", "v1", "jobs", namespace="default", name="train"))[
        "status"
    ]
    assert status["succeeded"] == 3 and not status.get("active")
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    manager.run_once()
    assert len(_pods(client)) == 3  # no more pods once complete


def _claim(client: kubeclient.KubeClient, name: str, node: str | None = None, **meta: Any) -> Obj:
    claim = client.create(
        kubeclient.path(*V1, "resourceclaims", namespace="default"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, **meta},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x"}}]}},
        },
    )
    if node is None:
        return claim
    allocation = {
        "allocationTimestamp": "2026-01-01T00:00:00Z",
        "devices": {"results": [{"request": "g", "driver": "d.io", "pool": node, "device": "g0"}]},
        "nodeSelector": _selector(node),
    }
    return client.merge_patch(
        kubeclient.path(
            *V1, "resourceclaims", namespace="default", name=name, subresource="status"
        ),
        {"status": {"allocation": allocation}},
    )


def _pod(client: kubeclient.KubeClient, name: str, claims: list[Obj], **spec: Any) -> Obj:
    return client.create(
        kubeclient.path("", "v1", "pods", namespace="default"),
        {
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": claims,
                "containers": [{"name": "c", "image": "busybox"}],
                **spec,
            },
        },
    )


def test_the_scheduler_waits_for_an_allocation_it_never_makes(
    client: kubeclient.KubeClient,
) -> None:
    client.create(kubeclient.path("", "v1", "nodes"), {"metadata": {"name": "n1"}})
    _claim(client, "c")
    _pod(client, "p", [{"name": "g", "resourceClaimName": "c"}])
    sched = v1scheduler.V1Scheduler(client)
    sched.run_once()
    assert "waiting for resourceclaims ['c'] to be allocated" in sched.reasons[("default", "p")]
    assert not _pods(client)[0]["spec"].get("nodeName")


def test_post_filter_leaves_a_claim_another_pod_uses(client: kubeclient.KubeClient) -> None:
    client.create(
        kubeclient.path("", "v1", "nodes"), {"metadata": {"name": "n1", "labels": {"ok": "1"}}}
    )
    client.create(kubeclient.path("", "v1", "nodes"), {"metadata": {"name": "n2"}})
    claim = _claim(client, "c", "n2")
    other = {"resource": "pods", "name": "other", "uid": "0000-other"}
    client.merge_patch(
        kubeclient.path(*V1, "resourceclaims", namespace="default", name="c", subresource="status"),
        {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"reservedFor": [other]},
        },
    )
    _pod(client, "p", [{"name": "g", "resourceClaimName": "c"}], nodeSelector={"ok": "1"})
    sched = v1scheduler.V1Scheduler(client)
    sched.run_once()
    assert sched.reasons[("default", "p")] == "no node fits the pod and its claims' allocations"
    assert sched.deallocated == []
    kept = client.get(kubeclient.path(*V1, "resourceclaims", namespace="default", name="c"))[
        "status"
    ]
    assert kept["allocation"] and kept["reservedFor"] == [other]


def test_template_claims_are_reused_and_deleted_with_their_finished_pod(
    client: kubeclient.KubeClient,
) -> None:
    client.create(
        kubeclient.path(*V1, "resourceclaimtemplates", namespace="default"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x"}}]}
                }
            },
        },
    )
    pod = _pod(client, "p", [{"name": "g", "resourceClaimTemplateName": "t"}], schedulerName="none")
    # A claim made earlier (the controller stopped before recording it) is found, not doubled.
    earlier = _claim(
        client,
        "p-g-early",
        annotations={scheduling.POD_CLAIM_ANNOTATION: "g"},
        ownerReferences=[controllers.owner_reference(pod, "v1", "Pod", block=False)],
    )
    manager = controllers.ControllerManager(client)
    manager.run_once()
    claims = client.list(kubeclient.path(*V1, "resourceclaims", namespace="default"))["items"]
    assert [c["metadata"]["name"] for c in claims] == ["p-g-early"]
    recorded = _pods(client)[0]["status"]["resourceClaimStatuses"]
    assert recorded == [{"name": "g", "resourceClaimName": earlier["metadata"]["name"]}]
    client.merge_patch(
        kubeclient.path("", "v1", "pods", namespace="default", name="p", subresource="status"),
        {"status": {"phase": "Failed"}},
    )
    manager.run_once()
    assert client.list(kubeclient.path(*V1, "resourceclaims", namespace="default"))["items"] == []


def test_a_missing_template_is_a_reason(client: kubeclient.KubeClient) -> None:
    _pod(client, "p", [{"name": "g", "resourceClaimTemplateName": "nope"}])
    manager = controllers.ControllerManager(client)
    manager.run_once()
    assert manager.reasons[("default", "p")] == (
        "PodResourceClaim g: resource claim template 'nope' not found"
    )
    sched = v1scheduler.V1Scheduler(client)
    sched.run_once()
    assert "to be created from template 'nope'" in sched.reasons[("default", "p")]


# --- device taint eviction ------------------------------------------------------------------------


def _slice(driver: str, pool: str, *devices: Obj) -> Obj:
    return {"spec": {"driver": driver, "pool": {"name": pool}, "devices": list(devices)}}


def test_device_taints_merge_slices_and_rules() -> None:
    slices = [
        _slice("d.io", "n1", {"name": "g0", "taints": [{"key": "own", "effect": "NoSchedule"}]}),
        _slice("d.io", "n2", {"name": "g0"}),
        _slice("other.io", "n1", {"name": "g0"}),
    ]
    everything = {"spec": {"deviceSelector": {}, "taint": {"key": "all", "effect": "None"}}}
    one_pool = {
        "spec": {
            "deviceSelector": {"driver": "d.io", "pool": "n2"},
            "taint": {"key": "pool", "effect": "NoExecute"},
        }
    }
    no_selector = {"spec": {"taint": {"key": "never", "effect": "NoExecute"}}}
    taints = controllers.device_taints(slices, [everything, one_pool, no_selector])
    keys = {device: [t["key"] for t in found] for device, found in taints.items()}
    assert keys == {
        ("d.io", "n1", "g0"): ["own", "all"],
        ("d.io", "n2", "g0"): ["all", "pool"],
        ("other.io", "n1", "g0"): ["all"],
    }


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"operator": "Exists"}, True),
        ({"key": "k", "operator": "Exists"}, True),
        ({"key": "k", "operator": "Equal", "value": "v"}, True),
        ({"key": "k", "value": "v"}, True),  # operator defaults to Equal
        ({"key": "k", "operator": "Equal", "value": "w"}, False),
        ({"key": "x", "operator": "Exists"}, False),
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"operator": "Exists", "effect": "NoExecute"}, True),
    ],
)
def test_tolerates(toleration: Obj, tolerated: bool) -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert controllers.tolerates(toleration, taint) is tolerated


def test_eviction_time_is_the_earliest_untolerated_no_execute_taint() -> None:
    device = ("d.io", "n1", "g0")

    def claim(*tolerations: Obj) -> Obj:
        result = {"driver": "d.io", "pool": "n1", "device": "g0", "tolerations": list(tolerations)}
        return {"status": {"allocation": {"devices": {"results": [result]}}}}

    taints = {
        device: [
            {"key": "a", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:10Z"},
            {"key": "b", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:20Z"},
            {"key": "c", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"},
        ]
    }
    base = controllers.seconds_of("2026-01-01T00:00:00Z")
    assert controllers.eviction_time(claim(), taints) == base + 10
    # `a` tolerated forever: `b` decides.
    assert controllers.eviction_time(claim({"key": "a", "operator": "Exists"}), taints) == base + 20
    # `a` tolerated for 30 s: still earlier than nothing, later than `b`.
    limited = {"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    assert controllers.eviction_time(claim(limited), taints) == base + 20
    everything = {"operator": "Exists"}
    assert controllers.eviction_time(claim(everything), taints) is None
    assert controllers.eviction_time(claim(), {}) is None


def test_a_pod_is_evicted_only_when_its_time_has_come(client: kubeclient.KubeClient) -> None:
    client.create(kubeclient.path("", "v1", "nodes"), {"metadata": {"name": "n1"}})
    client.create(
        kubeclient.path(*V1, "resourceslices"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-d"},
            "spec": {
                "driver": "d.io",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "g0"}],
            },
        },
    )
    _claim(client, "c", "n1")
    _pod(client, "p", [{"name": "g", "resourceClaimName": "c"}])
    v1scheduler.V1Scheduler(client).run_once()
    client.create(
        kubeclient.path(*V1, "devicetaintrules"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "later"},
            "spec": {
                "deviceSelector": {"driver": "d.io"},
                "taint": {"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-01T00:01:00Z"},
            },
        },
    )
    minute = controllers.seconds_of("2026-01-01T00:01:00Z")
    controllers.ControllerManager(client, clock=lambda: minute - 1).run_once()
    assert [p["metadata"]["name"] for p in _pods(client)] == ["p"]
    controllers.ControllerManager(client, clock=lambda: minute).run_once()
    assert _pods(client) == []


def test_a_finished_pod_gets_no_claim(client: kubeclient.KubeClient) -> None:
    client.create(
        kubeclient.path(*V1, "resourceclaimtemplates", namespace="default"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x"}}]}
                }
            },
        },
    )
    _pod(client, "done", [{"name": "g", "resourceClaimTemplateName": "t"}], schedulerName="none")
    client.merge_patch(
        kubeclient.path("", "v1", "pods", namespace="default", name="done", subresource="status"),
        {"status": {"phase": "Succeeded"}},
    )
    controllers.ControllerManager(client).run_once()
    assert client.list(kubeclient.path(*V1, "resourceclaims", namespace="default"))["items"] == []
