"""Hostile review of the caches kept across controller cycles: selectors answered once per
device layout (`variants.Devices`), compiled selectors' memos keyed by a device's kind
(`cel.Selector`). Each cached path is compared with the uncached one: evaluating every device."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from v1kit import CLASSES, GPU, MIG, claim, exactly, node, pod

from drasat import v1
from drasat.solver.ledger import Ledger
from drasat.v1 import cel, requests
from drasat.v1.variants import Devices

Obj = dict[str, Any]


def _uuid_of(found: v1.Node, index: int) -> str:
    return sorted(found.state.devices.gpus, key=lambda g: g.index)[index].uuid


def _by_uuid_dynamic(uuid: str) -> str:
    """A selector that picks one GPU by its uuid without the word `uuid` in its text: the key is
    put together at evaluation time (a tenant may write it so; kube-scheduler evaluates it on
    every device)."""
    return f'device.attributes["gpu.drasat.io"]["uu" + "id"] == "{uuid}"'


def _by_uuid_escaped(uuid: str) -> str:
    """The same, the key written with a CEL escape."""
    return f'device.attributes["gpu.drasat.io"]["\\x75uid"] == "{uuid}"'


def _by_any_value(uuid: str) -> str:
    """Any attribute of the device holding the value: reads the uuid without naming it."""
    return (
        'device.attributes["gpu.drasat.io"].exists(k, '
        f'string(device.attributes["gpu.drasat.io"][k]) == "{uuid}")'
    )


@pytest.mark.parametrize("spelled", [_by_uuid_dynamic, _by_uuid_escaped, _by_any_value])
def test_a_selector_reading_the_uuid_without_naming_it_matches_as_device_by_device(
    spelled: Any,
) -> None:
    cluster = [node("n1", "H100", 2), node("n2", "H100", 2)]
    wanted = _uuid_of(cluster[1], 1)
    selector = cel.compile_selector(spelled(wanted))
    alternative = requests.Alternative("r", GPU, (selector,), requests.EXACT_COUNT, 1)
    by_node = {n.state.name: n.devices for n in cluster}
    # Uncached: the expression evaluated on each device.
    expected = [
        d for n in cluster for d in n.devices if selector._evaluate(d.driver, d.device) is True
    ]
    assert [(d.pool, d.gpu_uuid) for d in expected] == [("n2", wanted)]
    each, _ = Devices(by_node)._match_each(alternative)
    assert [(d.pool, d.gpu_uuid) for d in each] == [("n2", wanted)]
    found = Devices(by_node).matching(alternative)
    assert [(d.pool, d.gpu_uuid) for d in found] == [("n2", wanted)]


def test_a_claim_for_one_gpu_by_a_uuid_spelled_at_run_time_gets_that_gpu() -> None:
    cluster = [node("n1", "H100", 2), node("n2", "H100", 2)]
    wanted = _uuid_of(cluster[1], 1)
    spec = exactly(GPU, _by_uuid_dynamic(wanted))
    outcome = v1.allocate(cluster, [pod("p", claim("c", {"gpu": spec}))], CLASSES)
    assert outcome.placed == {"default/p": "n2"}, outcome.refused
    results = outcome.allocations["uid-c"].allocation["devices"]["results"]
    devices = {d.name: d for d in cluster[1].devices}
    assert [devices[r["device"]].gpu_uuid for r in results] == [wanted]


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "gpu.drasat.io"',
        'device.attributes["gpu.drasat.io"].productName in ["NVIDIA H100 80GB HBM3", "T4"]',
        'device.capacity["gpu.drasat.io"].memory.compareTo(quantity("40Gi")) >= 0',
        '["a", "b"].exists(p, device.attributes["gpu.drasat.io"].productName.contains(p))',
        'device.attributes["gpu.drasat.io"]["productName"].startsWith("NVIDIA")',
    ],
)
def test_selectors_that_read_no_identity_are_still_answered_once_per_kind(expression: str) -> None:
    assert not cel.compile_selector(expression).by_identity


def _devices_taken(outcome: v1.Outcome) -> dict[str, list[str]]:
    return {
        uid: [f"{r['pool']}/{r['device']}" for r in found.allocation["devices"]["results"]]
        for uid, found in outcome.allocations.items()
    }


def _gpu_pods(prefix: str, selector: str, count: int) -> list[v1.PodInput]:
    return [
        pod(f"{prefix}-{i}", claim(f"{prefix}-{i}", {"gpu": exactly(GPU, selector)}))
        for i in range(count)
    ]


def test_a_solve_after_one_whose_pods_chose_other_gpus_places_as_a_fresh_cache_does() -> None:
    """The target workload estimated from a solve's pods is numbered by what its classes ask;
    v1 claims of one namespace asking one whole GPU differ only in the GPUs their selectors
    admit (their eligible sets): the second solve's workload (any GPU) must not read the
    first's rows (T4 only) from the cache kept across cycles."""
    from drasat.solver import Mode, SolveParams
    from drasat.solver.cache import SolverCache

    cluster = [node("h", "H100", 4), node("t", "T4", 1), node("m", "T4", 3)]
    t4 = 'device.attributes["gpu.drasat.io"].productName.contains("T4")'
    kept = SolverCache()
    v1.allocate(
        cluster, _gpu_pods("a", t4, 3), CLASSES, params=SolveParams(mode=Mode.online, cache=kept)
    )
    later = _gpu_pods("b", "true", 3)
    cached = v1.allocate(cluster, later, CLASSES, params=SolveParams(mode=Mode.online, cache=kept))
    fresh = v1.allocate(
        cluster, later, CLASSES, params=SolveParams(mode=Mode.online, cache=SolverCache())
    )
    assert len(fresh.placed) == 3
    assert _devices_taken(cached) == _devices_taken(fresh)


_SELECTORS = [
    "true",
    'device.attributes["gpu.drasat.io"].productName.contains("T4")',
    'device.attributes["gpu.drasat.io"].productName.contains("H100")',
    'device.attributes["gpu.drasat.io"].productName.contains("A100")',
    'device.attributes["gpu.drasat.io"].index == 0',
    'device.attributes["gpu.drasat.io"].index != 0',
]


def _request(rng: random.Random) -> Obj:
    draw = rng.random()
    if draw < 0.5:
        return exactly(GPU, rng.choice(_SELECTORS), count=rng.choice([1, 1, 2]))
    if draw < 0.75:
        asked = {"memory": rng.choice(["4Gi", "8Gi"]), "compute": rng.choice(["25", "50"])}
        return exactly(GPU, rng.choice(_SELECTORS[:3]), capacity={"requests": asked})
    profile = rng.choice(["1g.10gb", "3g.40gb", "2g.20gb", "1g.5gb"])
    return exactly(MIG, f'device.attributes["gpu.drasat.io"].profile == "{profile}"')


def _changed(found: v1.Node, rng: random.Random) -> v1.Node:
    """What a controller's next cycle may hand the solver for a node: the same state rebuilt
    around the same devices and ledger, a claim released, a new label, or the node as it was."""
    state = found.state
    draw = rng.random()
    if draw < 0.3:
        state = dataclasses.replace(state)
    elif draw < 0.5 and state.ledger.allocated:
        gone = rng.choice(sorted(state.ledger.allocated))
        held = {k: v for k, v in state.ledger.allocated.items() if k != gone}
        state = dataclasses.replace(
            state, ledger=Ledger(held, state.ledger.prepared, state.ledger.orphans)
        )
    elif draw < 0.6:
        state = dataclasses.replace(state, labels=(("zone", str(rng.randint(0, 2))),))
    return dataclasses.replace(found, state=state)


@pytest.mark.parametrize("seed", [17, 20, 50, 3, 8])
def test_a_solver_cache_kept_across_cycles_answers_as_a_fresh_one(seed: int) -> None:
    """Five cycles of pods (whole GPUs by product or index, shares, MIG profiles) over nodes
    that change between cycles as the controller's do; each cycle's answer with the cache kept
    since the first equals the answer of a fresh cache."""
    from drasat.solver import Mode, SolveParams
    from drasat.solver.cache import SolverCache
    from drasat.v1 import preemption

    rng = random.Random(seed)
    cluster = [
        node("h", "H100", rng.randint(1, 3)),
        node("t", "T4", rng.randint(1, 3)),
        node("a", "A100", 2, mig=rng.random() < 0.5),
        node("h2", "H100", 2, mig=rng.random() < 0.5),
    ]
    mode = rng.choice([Mode.online, Mode.batch])
    kept = SolverCache()
    for cycle in range(5):
        pods = [
            pod(f"p{cycle}-{i}", claim(f"c{cycle}-{i}", {"gpu": _request(rng)}))
            for i in range(rng.randint(1, 4))
        ]
        cached = v1.allocate(cluster, pods, CLASSES, params=SolveParams(mode=mode, cache=kept))
        fresh = v1.allocate(
            cluster, pods, CLASSES, params=SolveParams(mode=mode, cache=SolverCache())
        )
        assert (cached.placed, _devices_taken(cached)) == (fresh.placed, _devices_taken(fresh)), (
            f"cycle {cycle}"
        )
        cluster = [_changed(n, rng) for n in preemption.placed_on(cluster, cached, pods)]


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.drasat.io"].exists(k, v, string(v) == "GPU-1")',
        'device.attributes["gpu.drasat.io"].transformMap(k, v, v).size() > 0',
        'device.attributes["gpu.drasat.io"].exists_one(k, k.startsWith("m"))',
        'device.attributes["gpu.drasat.io"].existsOne(k, v, k.startsWith("m"))',
    ],
)
def test_every_macro_walking_an_attributes_map_is_evaluated_per_device(expression: str) -> None:
    assert cel.compile_selector(expression).by_identity


def _in_namespace(namespace: str, name: str, selector: str) -> v1.PodInput:
    found = claim(name, {"gpu": exactly(GPU, selector)})
    found["metadata"]["namespace"] = namespace
    return v1.PodInput(f"{namespace}/{name}", namespace, (found,))


def test_a_solve_after_the_policy_changed_places_as_a_fresh_solver_cache_does() -> None:
    """An operator edits the AllocationPolicy between two cycles (which products each
    namespace may use): the next cycle's pods, of the same shapes, are placed as a fresh cache
    places them. The fragmentation term's measure of a node before a placement reads the
    policy (which classes may use which GPUs), so it is not the one the old policy gave."""
    from drasat.api.policy import AllocationPolicySpec
    from drasat.solver import Mode, SolveParams
    from drasat.solver.cache import SolverCache

    def only(namespace: str, product: str) -> AllocationPolicySpec:
        allowed = [{"namespace": namespace, "products": [product]}]
        return AllocationPolicySpec.model_validate({"rules": {"allowedProducts": allowed}})

    cluster = [node("h", "H100", 1), node("t", "T4", 2), node("m", "T4", 2), node("h2", "H100", 3)]
    t4 = 'device.attributes["gpu.drasat.io"].productName.contains("T4")'

    def pods(tag: str) -> list[v1.PodInput]:
        return [
            _in_namespace("team-x", f"{tag}0", t4),
            _in_namespace("team-x", f"{tag}1", t4),
            _in_namespace("default", f"{tag}2", t4),
        ]

    kept = SolverCache()
    before, after = only("default", "*H100*"), only("team-x", "*T4*")
    v1.allocate(cluster, pods("b"), CLASSES, policy=before,
                params=SolveParams(mode=Mode.online, cache=kept))  # fmt: skip
    cached = v1.allocate(cluster, pods("b"), CLASSES, policy=after,
                         params=SolveParams(mode=Mode.online, cache=kept))  # fmt: skip
    fresh = v1.allocate(cluster, pods("b"), CLASSES, policy=after,
                        params=SolveParams(mode=Mode.online, cache=SolverCache()))  # fmt: skip
    assert len(fresh.placed) == 3
    assert _devices_taken(cached) == _devices_taken(fresh)


def test_whether_a_request_asks_for_mig_mode_is_read_per_device_for_an_identity_selector() -> None:
    """Two MIG-enabled A100s of one kind; the selector admits GPU 0 in any mode and GPU 1 only
    in MIG mode: it asks for MIG mode (GPU 1 admitted, its twin out of MIG mode not), whichever
    GPU comes first."""
    cluster = [node("m", "A100-40GB", 2, mig=True)]
    second = _uuid_of(cluster[0], 1)
    expression = (
        f'device.attributes["gpu.drasat.io"].uuid == "{second}" ? '
        'device.attributes["gpu.drasat.io"].migEnabled : true'
    )
    selector = cel.compile_selector(expression)
    alternative = requests.Alternative("r", GPU, (selector,), requests.EXACT_COUNT, 1)
    gpus = [d for d in cluster[0].devices if d.kind == "gpu"]
    assert len(gpus) == 2
    assert Devices({"m": cluster[0].devices}).asks_mig_mode(alternative, list(reversed(gpus)))
    assert Devices({"m": cluster[0].devices}).asks_mig_mode(alternative, gpus)
