"""drasat.controller.v1inputs: what the v1 allocation loop decides from, exact answers on small
snapshots (which claims are drasat's, which pods are pending and where they may go, the nodes'
states and the ledger a claim's status stands for)."""

from __future__ import annotations

import json
from typing import Any

import ctl_slices
from checker import make_node

from drasat.api.devicemodel import classes
from drasat.api.groups import DRIVER_NAME, FINALIZER
from drasat.controller import nasnodes, v1inputs
from drasat.solver import NodeState
from drasat.v1 import nasinventory, results

Obj = dict[str, Any]

OURS = v1inputs.our_classes(classes.device_classes())
OTHER_CLASS = {
    "metadata": {"name": "other-gpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}


def claim(name: str, *requests: Obj, uid: str | None = None, **status: Any) -> Obj:
    written: Obj = {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": {"devices": {"requests": list(requests)}},
    }
    if status:
        written["status"] = status
    return written


def exactly(device_class: str = classes.GPU_CLASS, **fields: Any) -> Obj:
    return {"name": "gpu", "exactly": {"deviceClassName": device_class, **fields}}


def on_node(node: str, *results_: Obj) -> Obj:
    """A `status.allocation` on `node`, as drasat and kube-scheduler write it."""
    return {"devices": {"results": list(results_)}, "nodeSelector": results.node_selector(node)}


def result(device: str, pool: str, request: str = "gpu", driver: str = DRIVER_NAME) -> Obj:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def pod(name: str, *claims: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"pod-{name}",
                     "creationTimestamp": created},
        "spec": {"resourceClaims": [{"name": f"r{i}", "resourceClaimName": c}
                                    for i, c in enumerate(claims)], **spec},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def containers(cpu: str, memory: str) -> list[Obj]:
    return [{"name": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]


def kube_node(name: str, **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def parsed_nas(node: NodeState, version: str = "1") -> nasnodes.ParsedNas:
    """The node as its NAS parses: its ledger record beside the solver's ledger."""
    entries = nasinventory.entries_of(node.ledger.allocated)
    return nasnodes.ParsedNas(node, version, entries=entries)


def snapshot(
    pods: list[Obj], claims: list[Obj], names: tuple[str, ...] = ("a", "b"), **fields: Any
) -> v1inputs.Snapshot:
    nas = {n: parsed_nas(make_node(n, "T4", 2)) for n in names}
    return v1inputs.Snapshot(
        pods=pods,
        claims={v1inputs.claim_ref(c): c for c in claims},
        classes=OURS,
        nodes=fields.pop("nodes", {n: kube_node(n) for n in names}),
        nas=nas,
        published=ctl_slices.published({n: p.node.devices for n, p in nas.items()}),
        **fields,
    )


# -- which claims are drasat's --------------------------------------------------------------------


def test_our_classes_are_the_ones_whose_selectors_name_drasats_driver() -> None:
    found = v1inputs.our_classes([*classes.device_classes(), OTHER_CLASS])
    assert set(found) == {c["metadata"]["name"] for c in classes.device_classes()}
    assert "other-gpu" not in found and classes.GPU_CLASS in found


def test_a_claim_is_ours_only_when_a_request_names_one_of_our_classes() -> None:
    assert v1inputs.is_ours(claim("c", exactly()), OURS)
    assert not v1inputs.is_ours(claim("c", exactly("other-gpu")), OURS)
    assert not v1inputs.is_ours(claim("c"), OURS)
    # one request of ours among others is enough
    assert v1inputs.is_ours(claim("c", exactly("other-gpu"), exactly()), OURS)


def test_a_claim_is_ours_by_a_first_available_entry_or_a_v1beta1_request() -> None:
    entries = [
        {"name": "x", "deviceClassName": "other-gpu"},
        {"name": "y", "deviceClassName": classes.MIG_CLASS},
    ]
    first = {"name": "gpu", "firstAvailable": entries}
    assert v1inputs.is_ours(claim("c", first), OURS)
    v1beta1 = {"name": "gpu", "deviceClassName": classes.GPU_CLASS}
    assert v1inputs.is_ours(claim("c", v1beta1), OURS)
    assert not v1inputs.is_ours(claim("c", {"name": "gpu", "deviceClassName": "other-gpu"}), OURS)


def test_allocated_claims_and_the_node_their_selector_names() -> None:
    allocated = claim("c", exactly(), allocation=on_node("a", result("gpu-0", "a")))
    assert v1inputs.is_allocated(allocated)
    assert v1inputs.allocated_node(allocated) == "a"
    assert not v1inputs.is_allocated(claim("c", exactly()))
    assert v1inputs.allocated_node(claim("c", exactly())) is None
    assert not v1inputs.is_allocated(claim("c", exactly(), allocation={}))


def test_the_allocated_node_is_read_from_a_hostname_expression_and_only_when_it_is_one() -> None:
    def selected(requirement: Obj, kind: str = "matchExpressions") -> str | None:
        selector = {"nodeSelectorTerms": [{kind: [requirement]}]}
        return v1inputs.allocated_node(claim("c", allocation={"nodeSelector": selector}))

    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b"]}
    assert selected(hostname) == "b"
    assert selected({**hostname, "values": ["a", "b"]}) is None
    assert selected({**hostname, "key": "zone"}) is None
    assert (
        selected({"key": "metadata.name", "operator": "In", "values": ["a"]}, "matchFields") == "a"
    )


def test_claim_ref_reserved_pods_and_pod_key() -> None:
    reserved = claim("c", reservedFor=[{"uid": "p1"}, {"uid": "p2"}])
    assert v1inputs.claim_ref(reserved) == "default/c"
    assert v1inputs.reserved_pods(reserved) == {"p1", "p2"}
    assert v1inputs.reserved_pods(claim("c")) == set()
    assert v1inputs.pod_key(pod("p")) == "default/p"


def test_every_claim_of_our_classes_is_drasats_tolerating_the_allocator_taint_or_not() -> None:
    """A toleration of the allocator taint (`operator: Exists` without a key, as "tolerate all"
    workloads write, or by key) does not hand the claim to kube-scheduler: both allocators
    would pick the same device, and the claim would escape drasat's policy."""
    exists = exactly(tolerations=[{"operator": "Exists"}])
    assert v1inputs.tolerates_allocator_taint(claim("c", exists))
    assert v1inputs.allocates(claim("c", exists), OURS)
    assert v1inputs.allocates(claim("c", exactly()), OURS)
    other_key = exactly(tolerations=[{"key": "example.com/x", "operator": "Exists"}])
    assert not v1inputs.tolerates_allocator_taint(claim("c", other_key))
    assert v1inputs.allocates(claim("c", other_key), OURS)
    by_key = {"key": f"{DRIVER_NAME}/allocator", "operator": "Exists", "effect": "NoSchedule"}
    first = {"name": "gpu", "firstAvailable": [{"name": "x", "deviceClassName": classes.GPU_CLASS,
                                              "tolerations": [by_key]}]}  # fmt: skip
    assert v1inputs.tolerates_allocator_taint(claim("c", first))
    assert v1inputs.allocates(claim("c", first), OURS)
    assert not v1inputs.allocates(claim("c", exactly("other-gpu", tolerations=[by_key])), OURS)


def test_only_a_claim_asking_for_admin_access_alone_and_tolerating_is_kube_schedulers() -> None:
    """Admin access holds no device, and drasat's allocator does not give it: tolerating the
    taint, it is kube-scheduler's; not tolerating, drasat takes it (and refuses it with its
    reason); beside an ordinary request of drasat's class, drasat takes the claim."""
    admin = exactly(adminAccess=True, tolerations=[{"operator": "Exists"}])
    assert v1inputs.admin_access_only(claim("c", admin), OURS)
    assert not v1inputs.allocates(claim("c", admin), OURS)
    assert v1inputs.allocates(claim("c", exactly(adminAccess=True)), OURS)
    both = claim("c", admin)
    both["spec"]["devices"]["requests"].append({**exactly(), "name": "b"})
    assert v1inputs.allocates(both, OURS)
    # a request of another driver's class beside it is not drasat's to judge
    other = claim("c", admin)
    other["spec"]["devices"]["requests"].append({**exactly("other-gpu"), "name": "b"})
    assert not v1inputs.allocates(other, OURS)


def test_a_claim_settles_with_drasat_by_finalizer_status_or_class() -> None:
    theirs = claim("c", exactly("other-gpu"))
    assert not v1inputs.settles(theirs, OURS)
    assert v1inputs.settles(claim("c", exactly()), OURS)
    finalized = {**theirs, "metadata": {**theirs["metadata"], "finalizers": [FINALIZER]}}
    assert v1inputs.settles(finalized, OURS)
    # the class deleted: the status still names our driver
    written = claim("c", exactly("gone"), allocation=on_node("a", result("gpu-0", "a")))
    assert v1inputs.names_our_driver(written) and v1inputs.settles(written, {})
    other = claim("c", exactly("gone"), allocation=on_node("a", result("x", "a", driver="o.io")))
    assert not v1inputs.names_our_driver(other) and not v1inputs.settles(other, {})


def test_a_pod_with_a_claim_of_kube_schedulers_or_scheduling_gates_waits() -> None:
    tolerant = claim("t", exactly(adminAccess=True, tolerations=[{"operator": "Exists"}]))
    gated = pod("gated", "c1", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    found, waiting = v1inputs.pending_pods(
        snapshot([pod("p", "t"), gated], [tolerant, claim("c1", exactly())])
    )
    assert found == []
    assert "kube-scheduler" in waiting["default/p"]
    assert "kueue.x-k8s.io/admission" in waiting["default/gated"]


# -- pods ------------------------------------------------------------------------------------------


def test_a_pod_is_pending_until_bound_deleted_or_finished() -> None:
    assert v1inputs.is_pending(pod("p"))
    assert v1inputs.is_pending({"metadata": {}, "spec": {}})  # no status yet: Pending
    assert not v1inputs.is_pending(pod("p", nodeName="a"))
    deleting = pod("p")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    assert not v1inputs.is_pending(deleting)
    assert not v1inputs.is_pending({**pod("p"), "status": {"phase": "Running"}})


def test_pod_claim_names_in_spec_order_with_templates_by_their_status() -> None:
    p = pod("p", "direct")
    p["spec"]["resourceClaims"] += [
        {"name": "t1", "resourceClaimTemplateName": "tmpl"},
        {"name": "t2", "resourceClaimTemplateName": "tmpl"},
    ]
    p["status"]["resourceClaimStatuses"] = [{"name": "t1", "resourceClaimName": "p-t1-abc"}]
    assert v1inputs.pod_claim_names(p) == ["direct", "p-t1-abc", None]
    assert v1inputs.pod_claim_names({"spec": {}}) == []


def test_pending_pods_oldest_first_up_to_the_limit_with_their_inputs() -> None:
    pods = [
        pod("late", "c3", created="2026-01-01T00:00:03Z"),
        pod("early", "c1", created="2026-01-01T00:00:01Z", priority=7),
        pod("middle", "c2", created="2026-01-01T00:00:02Z"),
    ]
    pods[1]["spec"]["containers"] = containers("500m", "1Gi")
    claims = [claim(c, exactly()) for c in ("c1", "c2", "c3")]
    found, waiting = v1inputs.pending_pods(snapshot(pods, claims))
    assert [p.input.key for p in found] == ["default/early", "default/middle", "default/late"]
    assert waiting == {}
    first = found[0].input
    assert (first.namespace, first.priority, first.cpu_milli, first.memory_mib) == (
        "default", 7, 500, 1024)  # fmt: skip
    assert first.candidate_nodes == ("a", "b")
    assert [c["metadata"]["name"] for c in first.claims] == ["c1"]
    assert found[0].claims == first.claims and found[0].excluded == {}
    limited, _ = v1inputs.pending_pods(snapshot(pods, claims), limit=2)
    assert [p.input.key for p in limited] == ["default/early", "default/middle"]


def test_pods_wait_for_their_claims_and_pods_with_nothing_of_ours_are_left_alone() -> None:
    template = pod("templ")
    template["spec"]["resourceClaims"] = [{"name": "t", "resourceClaimTemplateName": "x"}]
    pods = [
        template,
        pod("missing", "nowhere"),
        pod("no-claims"),
        pod("theirs", "other"),
        pod("done", "allocated"),
        pod("bound", "c1", nodeName="a"),
    ]
    claims = [
        claim("other", exactly("other-gpu")),
        claim("allocated", exactly(), allocation=on_node("a", result("gpu-0", "a"))),
        claim("c1", exactly()),
    ]
    found, waiting = v1inputs.pending_pods(snapshot(pods, claims))
    assert found == []
    assert set(waiting) == {"default/templ", "default/missing"}
    assert "template" in waiting["default/templ"]
    assert "does not exist" in waiting["default/missing"]


def test_an_allocated_claim_of_the_pod_pins_it_to_that_node() -> None:
    claims = [
        claim("held", exactly(), allocation=on_node("a", result("gpu-0", "a"))),
        claim("new", exactly()),
    ]
    (found,), _ = v1inputs.pending_pods(snapshot([pod("p", "held", "new")], claims))
    assert found.input.candidate_nodes == ("a",)
    assert [c["metadata"]["name"] for c in found.claims] == ["new"]
    assert set(found.excluded) == {"b"} and "allocated on a" in found.excluded["b"]


def test_nodes_the_pod_may_not_use_are_excluded_with_the_reason() -> None:
    tainted = kube_node("b", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    full = kube_node("c")
    full["status"]["allocatable"]["pods"] = "1"
    nodes = {"a": kube_node("a"), "b": tainted, "c": full}  # d has a NAS but no Node object
    bound = pod("running", nodeName="c")
    bound["status"]["phase"] = "Running"
    unsuitable = {"default/p": {"a": "GPUs gone"}}
    snap = snapshot([pod("p", "c1"), bound], [claim("c1", exactly())], ("a", "b", "c", "d"),
                    nodes=nodes, unsuitable=unsuitable)  # fmt: skip
    (found,), _ = v1inputs.pending_pods(snap)
    assert found.input.candidate_nodes == ()
    assert set(found.excluded) == {"a", "b", "c", "d"}
    assert "GPUs gone" in found.excluded["a"]
    assert "untolerated taint k=v:NoSchedule" in found.excluded["b"]
    assert "its 1 pods" in found.excluded["c"]
    assert found.excluded["d"] == "no Node object"


# -- nodes and the ledger --------------------------------------------------------------------------


def test_node_inputs_take_capacity_from_the_node_and_its_bound_pods() -> None:
    bound = pod("running", nodeName="b")
    bound["spec"]["containers"] = containers("1", "2Gi")
    snap = snapshot([bound], [], ("a", "b", "gone"), nodes={n: kube_node(n) for n in ("a", "b")})
    found = v1inputs.node_inputs(snap)
    assert [n.state.name for n in found] == ["a", "b"]
    a, b = found
    assert (a.state.cpu_milli, a.state.memory_mib, a.state.used_cpu_milli) == (8000, 32768, 0)
    assert (b.state.used_cpu_milli, b.state.used_memory_mib) == (1000, 2048)
    assert [d.name for d in a.devices if d.kind == "gpu"] == ["gpu-0", "gpu-1"]


def test_a_node_repeating_another_nodes_gpu_is_left_out_and_an_unready_one_publishes_nothing() -> (
    None
):
    twin = make_node("a", "T4", 2)  # the same UUIDs as node a's
    unready = make_node("c", "T4", 1, ready=False)
    snap = snapshot([], [], ("a", "c"))
    snap.nas = {**snap.nas, "b": nasnodes.ParsedNas(twin, "1"),
                "c": nasnodes.ParsedNas(unready, "1")}  # fmt: skip
    snap.published = ctl_slices.published({n: p.node.devices for n, p in snap.nas.items()})
    snap.nodes = {n: kube_node(n) for n in ("a", "b", "c")}
    found = {n.state.name: n for n in v1inputs.node_inputs(snap)}
    assert set(found) == {"a", "c"}
    assert found["c"].devices == () and found["a"].devices != ()


def test_ledger_of_a_claim_is_what_its_status_names_on_its_node() -> None:
    snap = snapshot([], [])
    gpu1 = next(g for g in snap.nas["a"].node.devices.gpus if g.minor == 1)
    held = claim("c", exactly(), allocation=on_node("a", result("gpu-1", "a")))
    node, entries = v1inputs.ledger_of(held, snap)
    assert node == "a"
    assert list(entries) == ["uid-c/gpu"]
    entry = entries["uid-c/gpu"]
    assert entry.gpu is not None and [g.uuid for g in entry.gpu.devices] == [gpu1.uuid]
    assert entry.claimInfo.name == "c" and entry.claimInfo.uid == "uid-c"
    assert v1inputs.ledger_of(claim("c", exactly()), snap) == (None, {})
    elsewhere = claim("c", exactly(), allocation=on_node("z", result("gpu-1", "z")))
    assert v1inputs.ledger_of(elsewhere, snap) == ("z", {})


def test_a_node_without_a_ledger_or_usable_slices_is_no_candidate_and_says_why() -> None:
    snap = snapshot([pod("p", "c1")], [claim("c1", exactly())], ("a", "b", "c"))
    snap.nas = {n: p for n, p in snap.nas.items() if n != "b"}  # b: slices, no NAS
    snap.published = {n: d for n, d in snap.published.items() if n != "c"}  # c: NAS, no slices
    (found,), _ = v1inputs.pending_pods(snap)
    assert found.input.candidate_nodes == ("a",)
    assert "no NodeAllocationState" in found.excluded["b"]
    assert "no ResourceSlice of gpu.drasat.io" in found.excluded["c"]
    assert v1inputs.inventory_problem(snap, "a") is None
    assert [n.state.name for n in v1inputs.node_inputs(snap)] == ["a"]


def test_every_allocated_claim_naming_our_driver_holds_its_devices_as_its_status_says() -> None:
    """A claim kube-scheduler allocated (no ledger entry yet) holds gpu-1 from the first
    cycle; a claim the ledger already holds the same devices of adds nothing; another driver's
    claim holds nothing of ours."""
    theirs = claim("sched", exactly(), allocation=on_node("a", result("gpu-1", "a")))
    other = claim("x", exactly("other-gpu"), allocation=on_node("a", result("d", "a", driver="o")))
    snap = snapshot([], [theirs, other])
    entries = v1inputs.status_entries(snap)
    assert set(entries) == {"a"} and set(entries["a"]) == {"uid-sched"}
    holding = v1inputs.with_status_holds(snap).nas["a"]
    held = holding.entries
    gpu1 = next(g.uuid for g in snap.nas["a"].node.devices.gpus if g.minor == 1)
    ((key, entry),) = held.items()
    assert key == nasnodes.HELD_PREFIX + "uid-sched/gpu"
    assert entry.gpu is not None and [d.uuid for d in entry.gpu.devices] == [gpu1]
    assert holding.node.ledger.allocated[key].gpus == (gpu1,)  # the solver's ledger too
    assert v1inputs.with_status_holds(snap).nas["b"] is snap.nas["b"]
    # the ledger already names those devices: nothing more is held
    _, ledger = v1inputs.ledger_of(theirs, snap)
    snap.nas = {**snap.nas, "a": nasnodes.with_entries(snap.nas["a"], dict(ledger))}
    assert set(v1inputs.with_status_holds(snap).nas["a"].node.ledger.allocated) == set(ledger)


def test_a_pod_read_from_the_api_servers_json_is_pending_by_its_phase() -> None:
    read = json.loads(json.dumps(pod("p")))  # strings as the API client decodes them
    assert v1inputs.is_pending(read)
    read["status"]["phase"] = "Succeeded"
    assert not v1inputs.is_pending(read)


def test_a_node_selector_naming_no_node_gives_no_allocated_node() -> None:
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "values": []}]}]}
    assert v1inputs.allocated_node(claim("c", allocation={"nodeSelector": selector})) is None


def test_the_status_ledgers_memo_gives_the_ledger_of_the_claim_and_nas_versions() -> None:
    snap = snapshot([], [])
    held = claim("c", exactly(), allocation=on_node("a", result("gpu-1", "a")))
    held["metadata"]["resourceVersion"] = "7"
    memo = v1inputs.StatusLedgers()
    plain = v1inputs.ledger_of(held, snap)
    assert v1inputs.ledger_of(held, snap, memo) == plain
    assert v1inputs.ledger_of(held, snap, memo) == plain  # from the memo
    memo.rotate()
    assert v1inputs.ledger_of(held, snap, memo) == plain  # kept for one more cycle
    moved = json.loads(json.dumps(held))
    moved["metadata"]["resourceVersion"] = "8"
    moved["status"]["allocation"] = on_node("a", result("gpu-0", "a"))
    assert v1inputs.ledger_of(moved, snap, memo) == v1inputs.ledger_of(moved, snap)
    assert v1inputs.ledger_of(moved, snap, memo) != plain


def test_a_claim_on_a_node_without_a_ledger_holds_nothing_and_other_claims_do_not_count() -> None:
    away = claim("away", exactly(), allocation=on_node("z", result("gpu-0", "z")))
    theirs = claim("sched", exactly(), allocation=on_node("a", result("gpu-1", "a")))
    snap = snapshot([], [away, theirs])
    assert set(v1inputs.status_entries(snap)) == {"a"}
    # the ledger holds the claim's devices under its uid, beside an earlier claim's entry
    _, ledger = v1inputs.ledger_of(theirs, snap)
    _, other = v1inputs.ledger_of(
        claim("a0", exactly(), allocation=on_node("a", result("gpu-0", "a"))), snap
    )
    snap.nas = {**snap.nas, "a": nasnodes.with_entries(snap.nas["a"], {**other, **ledger})}
    assert set(v1inputs.with_status_holds(snap).nas["a"].node.ledger.allocated) == {
        *other,
        *ledger,
    }


def test_a_cycle_sums_each_nodes_bound_pods_once_not_once_per_pending_pod(monkeypatch) -> None:
    # Each pending pod is checked against every node's room; the room is found once a cycle
    # (at 1,000 nodes and 64 pods, summing the bound pods per pod was a third of the cycle).
    from drasat.api import nodefit

    bound = [pod(f"running-{i}", nodeName="a") for i in range(3)]
    for running in bound:
        running["status"]["phase"] = "Running"
    pending = [pod(f"p{i}", f"c{i}") for i in range(5)]
    snap = snapshot(pending + bound, [claim(f"c{i}", exactly()) for i in range(5)], ("a", "b"),
                    nodes={n: kube_node(n) for n in ("a", "b")})  # fmt: skip
    summed: list[str] = []
    real = nodefit.capacity

    def counted(node: Obj, pods: Any) -> nodefit.Capacity:
        summed.append(node["metadata"]["name"])
        return real(node, pods)

    monkeypatch.setattr(nodefit, "capacity", counted)
    found, _ = v1inputs.pending_pods(snap)
    assert len(found) == 5 and all(p.input.candidate_nodes == ("a", "b") for p in found)
    assert sorted(summed) == ["a", "b"]


def test_a_nas_is_parsed_again_only_when_its_version_changes(monkeypatch) -> None:
    parsed: list[str] = []
    real = nasnodes.parse

    def counted(obj: Obj) -> nasnodes.ParsedNas:
        parsed.append(obj["metadata"].get("resourceVersion", ""))
        return real(obj)

    monkeypatch.setattr(nasnodes, "parse", counted)
    memo = nasnodes.ParsedNases()
    obj = {"metadata": {"name": "a", "namespace": "drasat", "resourceVersion": "5"},
           "spec": {}, "status": "Ready"}  # fmt: skip
    first = memo.parse(obj)
    assert memo.parse(obj) is first and parsed == ["5"]
    memo.rotate()
    assert memo.parse(obj) is first and parsed == ["5"]  # kept while a cycle asks for it
    memo.rotate()
    memo.rotate()  # a cycle that did not read node a: forgotten
    assert memo.parse(obj) is not first and parsed == ["5", "5"]
    newer = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "6"}, "status": "NotReady"}
    assert not memo.parse(newer).node.ready and parsed == ["5", "5", "6"]
    unversioned = {**obj, "metadata": {"name": "a", "namespace": "drasat"}}
    memo.parse(unversioned)
    memo.parse(unversioned)
    assert parsed == ["5", "5", "6", "", ""]


def test_pods_that_ask_the_same_of_a_node_are_fitted_once_a_cycle(monkeypatch) -> None:
    # A fill of 5,000 pending pods over 500 nodes checked every pod against every node each
    # cycle (2.5 M checks) before the cap of 64 pods a cycle was applied.
    from drasat.api import nodefit

    alike = [pod(f"p{i}", f"c{i}") for i in range(4)]
    picky = pod("picky", "c4", nodeSelector={"zone": "b"})
    lately = pod("lately", "c5")
    claims = [claim(f"c{i}", exactly()) for i in range(6)]
    nodes = {n: kube_node(n) for n in ("a", "b")}
    nodes["b"]["metadata"].setdefault("labels", {})["zone"] = "b"
    snap = snapshot([*alike, picky, lately], claims, ("a", "b"), nodes=nodes,
                    unsuitable={"default/lately": {"a": "GPUs gone"}})  # fmt: skip
    checked: list[tuple[str, str]] = []
    real = nodefit.unfit

    def counted(pod_: Obj, node: Obj) -> str | None:
        checked.append((pod_["metadata"]["name"], node["metadata"]["name"]))
        return real(pod_, node)

    monkeypatch.setattr(nodefit, "unfit", counted)
    found, _ = v1inputs.pending_pods(snap)
    by_name = {p.pod["metadata"]["name"]: p for p in found}
    assert [by_name[f"p{i}"].input.candidate_nodes for i in range(4)] == [("a", "b")] * 4
    assert by_name["picky"].input.candidate_nodes == ("b",)
    assert "nodeSelector zone=b" in by_name["picky"].excluded["a"]
    assert by_name["lately"].input.candidate_nodes == ("b",)
    assert sorted(checked) == [("lately", "a"), ("lately", "b"), ("p0", "a"), ("p0", "b"),
                               ("picky", "a"), ("picky", "b")]  # fmt: skip


def test_a_node_unchanged_since_the_last_cycle_gets_the_same_inputs_and_a_changed_one_new() -> None:
    memo = v1inputs.NodeInputs()
    snap = snapshot([], [], ("a", "b", "c", "d"))
    first = {n.state.name: n for n in v1inputs.node_inputs(snap, memo)}
    again = {n.state.name: n for n in v1inputs.node_inputs(snap, memo)}
    # The same objects: the solver keeps each node's view by its state's identity.
    assert all(again[n] is first[n] for n in first)
    # Node a's ledger changes (its NAS parsed again), b's slices are read again, c gets a bound
    # pod, d a new label: each gets new inputs that say so.
    bound = pod("running", nodeName="c")
    bound["spec"]["containers"] = containers("1", "2Gi")
    changed = snapshot([bound], [], ("a", "b", "c", "d"))
    changed.nas = {**snap.nas, "a": nasnodes.ParsedNas(make_node("a", "T4", 2, ready=False), "2")}
    changed.published = {**snap.published, "b": changed.published["b"]}
    labelled = kube_node("d")
    labelled["metadata"]["labels"]["zone"] = "z1"
    changed.nodes = {**changed.nodes, "d": labelled}
    later = {n.state.name: n for n in v1inputs.node_inputs(changed, memo)}
    assert not later["a"].state.ready and later["a"] is not first["a"]
    assert (
        later["b"] is not first["b"]
        and later["b"].state.devices is changed.published["b"].read.state.devices
    )  # type: ignore[union-attr]
    assert later["c"].state.used_cpu_milli == 1000 and first["c"].state.used_cpu_milli == 0
    assert ("zone", "z1") in later["d"].state.labels and later["d"] is not first["d"]
    # A node gone is forgotten; without a memo every call builds afresh.
    del changed.nas["d"]
    v1inputs.node_inputs(changed, memo)
    assert set(memo._kept) == {"a", "b", "c"}
    assert v1inputs.node_inputs(snap)[0] is not v1inputs.node_inputs(snap)[0]
