"""Property tests: random clusters, claims and policies; the solver never crashes and every
allocation it returns passes the independent checker (tests/checker.py)."""

from __future__ import annotations

import random
from typing import Any

from checker import assert_valid, gpu_claim, make_node, mig_claim, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.api import catalog
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import ClaimRequest, Mode, NodeState, PodRequest, Problem, SolveParams, solve

PRODUCTS = [
    ("A100-40GB", True),
    ("A100-40GB", False),
    ("A30-24GB", True),
    ("T4", False),
    ("L4", False),
]
SELECTORS: list[dict[str, Any] | None] = [
    None,
    {"productName": "*a100*"},
    {"productName": "*t4*"},
    {"memory": {"value": "20Gi", "operator": "GreaterThanOrEqualTo"}},
    {"migEnabled": True},
    {"andExpression": [{"migEnabled": True}, {"architecture": "ampere"}]},
    {"orExpression": [{"productName": "*l4*"}, {"index": 0}]},
    {"cudaComputeCapability": {"value": "8.0", "operator": "GreaterThanOrEqualTo"}},
]


def _existing(rng: random.Random, node: NodeState, product_key: str, mig: bool) -> NodeState:
    """Random valid existing allocations on the node's GPUs."""
    product = catalog.find_product(product_key)
    assert product is not None
    allocated: dict[str, AllocatedDevices] = {}
    for gpu in node.devices.gpus:
        roll = rng.random()
        if roll < 0.5:
            continue
        uid = f"old-{node.name}-{gpu.index}"
        base = {"claimInfo": {"namespace": rng.choice(["a", "b"]), "name": uid, "uid": uid}}
        if mig:
            used: set[int] = set()
            devices = []
            for profile in rng.sample(list(product.mig_profiles), 3):
                for start in profile.starts:
                    span = set(range(start, start + profile.memory_slices))
                    if not span & used and not profile.media_extensions:
                        used |= span
                        devices.append(
                            {
                                "profile": profile.name,
                                "parentUUID": gpu.uuid,
                                "placement": {"start": start, "size": profile.memory_slices},
                            }
                        )
                        break
            for i, device in enumerate(devices):
                entry = {**base, "claimInfo": {**base["claimInfo"], "uid": f"{uid}-{i}"}}
                allocated[f"{uid}-{i}"] = AllocatedDevices.model_validate(
                    {**entry, "mig": {"devices": [device]}}
                )
        elif roll < 0.75:
            allocated[uid] = AllocatedDevices.model_validate(
                {**base, "gpu": {"devices": [{"uuid": gpu.uuid}]}}
            )
        else:
            share = {"compute": rng.choice([20, 50, 80])}
            allocated[uid] = AllocatedDevices.model_validate(
                {**base, "gpu": {"devices": [{"uuid": gpu.uuid}]}, "share": share}
            )
    return make_node(
        node.name,
        product_key,
        count=len(node.devices.gpus),
        mig=mig,
        allocated=allocated,
        ready=node.ready,
        numa=[g.numaNode or 0 for g in node.devices.gpus],
    )


def _claim(rng: random.Random, name: str, namespace: str, target: tuple[str, bool]) -> ClaimRequest:
    """A random claim, usually one the `target` (product, MIG mode) of some node could serve."""
    product = catalog.find_product(target[0])
    assert product is not None
    mig = target[1] and rng.random() < 0.8
    if mig and rng.random() < 0.25:
        return mig_claim(name, memory=rng.choice(["4Gi", "10Gi", "19Gi"]), namespace=namespace)
    if mig:
        profile = rng.choice([p.name for p in product.mig_profiles] + ["3g.40gb"])
        return mig_claim(name, profile, namespace=namespace)
    if rng.random() < 0.3:
        return gpu_claim(
            name,
            share={"compute": rng.choice([10, 30, 50, 70])},
            selector=rng.choice(SELECTORS[:4]),
            namespace=namespace,
        )
    topology = rng.choice([None, None, {"sameNUMANode": "Required"}, {"sameNUMANode": "Preferred"}])
    return gpu_claim(
        name,
        count=rng.choice([1, 1, 1, 2, 3]),
        selector=rng.choice(SELECTORS),
        optional=rng.random() < 0.2,
        topology=topology,
        namespace=namespace,
    )


def _policy(rng: random.Random) -> AllocationPolicySpec:
    terms = rng.sample(["binpack", "spread", "fragmentation", "minimizeMigWaste"], 2)
    spec: dict[str, Any] = {
        "objective": [{"term": t, "weight": rng.randint(0, 5)} for t in terms],
        "rules": {},
        "namespacePriorities": {"a": rng.randint(0, 3)},
    }
    if rng.random() < 0.3:
        spec["rules"]["reservations"] = [
            {"name": "keep-for-a", "namespaces": ["a"], "count": rng.randint(1, 3)}
        ]
    if rng.random() < 0.3:
        spec["rules"]["namespaceLimits"] = [
            {"namespace": "b", "maxGpus": rng.randint(0, 4), "maxMigSlices": 4}
        ]
    if rng.random() < 0.2:
        spec["rules"]["allowedProducts"] = [{"namespace": "b", "products": ["*T4*", "*A30*"]}]
    return AllocationPolicySpec.model_validate(spec)


def random_problem(seed: int) -> Problem:
    rng = random.Random(seed)
    nodes = []
    kinds = []
    for i in range(rng.randint(1, 3)):
        product_key, mig = rng.choice(PRODUCTS)
        kinds.append((product_key, mig))
        count = rng.randint(1, 4)
        plain = make_node(
            f"n{i}",
            product_key,
            count=count,
            mig=mig,
            ready=rng.random() > 0.05,
            numa=[rng.randint(0, 1) for _ in range(count)],
        )
        nodes.append(_existing(rng, plain, product_key, mig) if rng.random() < 0.6 else plain)
    pods: list[PodRequest] = []
    shared: ClaimRequest | None = None
    for i in range(rng.randint(1, 6)):
        namespace = rng.choice(["a", "b"])
        claims = [
            _claim(rng, f"c{i}-{j}", namespace, rng.choice(kinds))
            for j in range(1 if rng.random() < 0.7 else 2)
        ]
        if shared is not None and shared.namespace == namespace and rng.random() < 0.3:
            claims.append(shared)
        shared = shared or (claims[0] if rng.random() < 0.5 else None)
        candidates = None if rng.random() < 0.8 else [n.name for n in nodes[:1]]
        pods.append(pod(f"p{i}", *claims, namespace=namespace, candidates=candidates))
    return Problem(nodes=tuple(nodes), pods=tuple(pods), policy=_policy(rng))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_online_allocations_pass_the_checker(seed: int) -> None:
    problem = random_problem(seed)
    solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    assert_valid(problem, solution)
    for pod_key, nodes in solution.node_feasibility.items():
        placement = solution.placement_of(pod_key)
        if placement is not None:
            assert nodes[placement.node] is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_batch_allocations_pass_the_checker_and_beat_online(seed: int) -> None:
    problem = random_problem(seed)
    batch = solve(problem, SolveParams(mode=Mode.batch, time_limit_s=2.0))
    assert_valid(problem, batch)
    online = solve(problem, SolveParams(mode=Mode.online))
    # Batch places at least as many pods, unless priorities (the pods' or their namespaces')
    # make fewer pods worth more.
    prioritized = any(p.priority for p in problem.pods) or any(
        problem.policy.namespacePriorities.values()
    )
    assert len(batch.placements) >= len(online.placements) or prioritized


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(0, 2**32 - 1), other=st.integers(0, 2**32 - 1))
def test_results_do_not_depend_on_what_was_solved_before(first: int, other: int) -> None:
    # The memo of per-node evaluations must never leak one problem's answer into another's.
    problem = random_problem(first)
    params = SolveParams(mode=Mode.online)
    before = solve(problem, params)
    solve(random_problem(other), params)
    after = solve(random_problem(first), params)
    assert before.placements == after.placements and before.unplaced == after.unplaced
