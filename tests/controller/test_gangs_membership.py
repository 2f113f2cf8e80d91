"""Which pods form a gang and how many go together (`controller.gangs.plan`, over
`drasat.v1.gangs.member_of`): a PodGroup with a gang policy that pods name (the Workload API,
where the API server serves it: its `minCount` is the minimum), labels otherwise; a gang's first
`minimum` pods are allocated together, the rest one by one once the minimum is allocated."""

from __future__ import annotations

from typing import Any

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import gangs
from drasat.v1.gangs import Member, member_of

Obj = dict[str, Any]
POLICY = AllocationPolicySpec()


def _pod(name: str, *, group: str | None = None, label: tuple[str, str] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x"}]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    labels = {GANG_LABEL: label[0], GANG_SIZE_LABEL: label[1]} if label else {}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec}


def _group(name: str, policy: Obj) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"schedulingPolicy": policy}}


def _gang(count: Any) -> Obj:
    return {"gang": {"minCount": count}}


GROUPS = {
    "ns/train": _group("train", _gang(2)),
    "ns/serve": _group("serve", {"basic": {}}),
    "ns/bad": _group("bad", _gang(0)),
}


def test_a_pod_naming_a_podgroup_with_a_gang_policy_is_in_that_gang() -> None:
    # its PodGroup wins over its labels; a label gang of the same name is another gang
    found = member_of(_pod("a", group="train", label=("train", "3")), GROUPS)
    assert found == Member("ns/podgroup/train", 2, "PodGroup ns/train (gang, minCount 2)")
    assert member_of(_pod("b", label=("train", "3")), GROUPS) == Member(
        "ns/train", 3, f"label {GANG_LABEL}=train"
    )


def test_a_basic_podgroup_makes_no_gang_and_a_missing_one_a_gang_that_waits() -> None:
    assert member_of(_pod("a", group="serve"), GROUPS) is None
    assert member_of(_pod("a", group="later"), GROUPS) == Member(
        "ns/podgroup/later", 0, "PodGroup ns/later"
    )
    bad = member_of(_pod("a", group="bad"), GROUPS)
    assert isinstance(bad, str) and "spec.schedulingPolicy.gang.minCount: 0" in bad


def test_where_podgroups_are_not_served_only_labels_count() -> None:
    assert member_of(_pod("a", group="train"), None) is None
    assert member_of(_pod("a", group="train", label=("g", "2")), None) == Member(
        "ns/g", 2, f"label {GANG_LABEL}=g"
    )


def _plan(pods: list[Obj], pending: list[str], **kw: Any) -> gangs.Plan:
    return gangs.plan(pods, [f"ns/{p}" for p in pending], kw.get("waiting", {}),
                      kw.get("to_ungate", {}), POLICY, GROUPS)  # fmt: skip


def test_a_podgroup_gang_goes_whole_once_its_min_count_exists() -> None:
    one = _plan([_pod("a", group="train")], ["a"])
    assert not one.gangs and "has 1 of its 2 pods" in one.held["ns/a"]
    both = _plan([_pod("a", group="train"), _pod("b", group="train")], ["a", "b"])
    assert both.gangs["ns/podgroup/train"].pods == ("ns/a", "ns/b")
    missing = _plan([_pod("a", group="later"), _pod("b", group="later")], ["a", "b"])
    assert not missing.gangs
    assert "PodGroup ns/later does not exist yet" in missing.held["ns/a"]


def test_past_its_minimum_the_first_pods_go_together_and_the_rest_after() -> None:
    pods = [_pod(n, label=("g", "2")) for n in ("a", "b", "c")]
    first = _plan(pods, ["a", "b", "c"])
    assert first.gangs["ns/g"].pods == ("ns/a", "ns/b")
    assert "its first 2 pods are allocated together first" in first.held["ns/c"]
    # a and b allocated (gated, not pending): the gang is admitted, c goes alone, no gate held
    ungate = {"ns/a": (pods[0], "allocated"), "ns/b": (pods[1], "allocated")}
    later = _plan(pods, ["c"], to_ungate=ungate)
    assert not later.gangs and not later.held and not later.gates_held
    # only a allocated: b (the one it still needs) goes with it; a's gate is held until then
    partly = _plan(pods, ["b", "c"], to_ungate={"ns/a": (pods[0], "allocated")})
    assert partly.gangs["ns/g"].pods == ("ns/b",)
    assert partly.gates_held["ns/g"] == [pods[0]]
    assert "ns/c" in partly.held


def test_a_waiting_pod_holds_the_gang_back_only_below_its_minimum() -> None:
    pods = [_pod(n, label=("g", "2")) for n in ("a", "b", "c")]
    waits = {"ns/c": "a claim from a template is not created yet"}
    found = _plan(pods, ["a", "b"], waiting=waits)
    assert found.gangs["ns/g"].pods == ("ns/a", "ns/b")
    stuck = _plan(pods, ["a"], waiting={**waits, "ns/b": waits["ns/c"]})
    assert not stuck.gangs and "waits" in stuck.held["ns/a"]


def test_an_admitted_podgroup_lets_its_other_pods_go_to_kube_scheduler() -> None:
    """kube-scheduler schedules a PodGroup only once every pod of it is ungated: past the
    minimum, its pods still to allocate lose drasat's gate; a label gang's keep it."""
    gate = {"schedulingGates": [{"name": "gpu.drasat.io/allocation"}]}
    grouped = [_pod(n, group="train") for n in ("a", "b", "c")]
    labelled = [_pod(n, label=("g", "2")) for n in ("d", "e", "f")]
    for pod in grouped + labelled:
        pod["spec"].update(gate)
    allocated = {
        f"ns/{n}": (p, "allocated") for n, p in zip("abde", grouped[:2] + labelled[:2], strict=True)
    }
    found = _plan(grouped + labelled, ["c", "f"], to_ungate=allocated)
    assert list(found.ungate_early) == ["ns/c"]
    assert "kube-scheduler schedules a PodGroup only once" in found.ungate_early["ns/c"][1]
    assert not found.gangs and not found.gates_held
