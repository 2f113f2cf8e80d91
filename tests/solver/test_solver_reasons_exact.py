"""Reasons are built from data (claim, rule, node) and rendered for each pod and node at the end:
a reason computed for one pod or node and reused for another names the other's own objects."""

from __future__ import annotations

import re

import pytest
from checker import gpu_claim, make_node, mig_claim, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.api.nas import AllocatedDevices, GpuInfo, Health
from drasat.solver import ClaimRequest, Mode, NodeState, PodRequest, Problem, SolveParams, solve

NEEDS_TWO = "needs 2 GPUs on one node; at most 1 free on any matching node"


@pytest.mark.parametrize("mode", [Mode.online, Mode.batch])
def test_claims_c1_and_c10_are_each_named_as_themselves(mode: Mode) -> None:
    # Same shape: the second pod's reasons come from the first pod's memo entries.
    problem = Problem(
        nodes=(make_node("n1", "T4"), make_node("n10", "T4")),
        pods=(pod("p1", gpu_claim("c1", count=2)), pod("p10", gpu_claim("c10", count=2))),
    )
    solution = solve(problem, SolveParams(mode=mode, node_feasibility=True))
    reasons = {r.pod: r.reasons for r in solution.unplaced}
    assert reasons == {
        "default/p1": (f"claim default/c1 (any GPU): {NEEDS_TWO}",),
        "default/p10": (f"claim default/c10 (any GPU): {NEEDS_TWO}",),
    }
    for name, claim in (("default/p1", "c1"), ("default/p10", "c10")):
        assert solution.node_feasibility[name] == {
            node: f"claim default/{claim}: needs 2 GPUs (any GPU); 1 of 1 matching GPUs free "
            f"on node {node}"
            for node in ("n1", "n10")
        }


def test_c10_then_c1_and_nodes_named_by_prefix() -> None:
    # The other order, and node names where one is a prefix of the other.
    problem = Problem(
        nodes=(make_node("n10", "T4"), make_node("n1", "T4")),
        pods=(pod("p10", gpu_claim("c10", count=2)), pod("p1", gpu_claim("c1", count=2))),
    )
    solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    assert solution.node_feasibility["default/p1"]["n1"] == (
        "claim default/c1: needs 2 GPUs (any GPU); 1 of 1 matching GPUs free on node n1"
    )
    assert {r.pod: r.reasons for r in solution.unplaced}["default/p1"] == (
        f"claim default/c1 (any GPU): {NEEDS_TWO}",
    )


def test_unhealthy_note_is_the_nodes_own() -> None:
    # Two nodes in the same free state; only the first lists an unhealthy GPU.
    sick = GpuInfo(
        index=5,
        uuid="GPU-sick",
        minor=5,
        migEnabled=False,
        memoryBytes=16 * 2**30,
        productName="Tesla T4",
        health=Health.Unhealthy,
    )
    problem = Problem(
        nodes=(make_node("a", "T4", extra_gpus=[sick]), make_node("b", "T4")),
        pods=(pod("p", gpu_claim("c", count=2)),),
    )
    solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    texts = solution.node_feasibility["default/p"]
    assert texts["a"] is not None and texts["a"].endswith("(1 unhealthy GPUs not counted)")
    assert (
        texts["b"] == "claim default/c: needs 2 GPUs (any GPU); 1 of 1 matching GPUs free on node b"
    )


# -- every reason names only objects of the problem --------------------------------------------

#: Names where one is a prefix of another: a text replacement confuses them.
CLAIM_NAMES = ["c1", "c10", "c11", "c100"]
NODE_NAMES = ["n1", "n10", "n11"]


def _claim(kind: int, name: str) -> ClaimRequest:
    if kind == 0:
        return gpu_claim(name, count=3)  # more GPUs than a node has
    if kind == 1:
        return gpu_claim(name, selector={"productName": "*h100*"})  # no such GPU
    if kind == 2:
        return gpu_claim(name, share={"compute": 90})
    if kind == 3:
        return gpu_claim(name, count=2, topology={"sameNUMANode": "Required"})
    if kind == 4:
        return mig_claim(name, "7g.40gb")
    return gpu_claim(name)


def _node(name: str, used: bool, ready: bool) -> NodeState:
    allocated = {}
    if used:
        uid = f"old-{name}"
        allocated[uid] = AllocatedDevices.model_validate(
            {
                "claimInfo": {"namespace": "other", "name": uid, "uid": uid},
                "gpu": {"devices": [{"uuid": f"GPU-{name}-0"}]},
                "share": {"compute": 50},
            }
        )
    return make_node(name, "T4", count=2, numa=[0, 1], allocated=allocated, ready=ready)


_REF = re.compile(r"\bdefault/([a-z0-9.-]+)")
_NODE = re.compile(r"\bn\d+\b")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=st.lists(
        st.lists(st.integers(0, 5), min_size=1, max_size=2), min_size=1, max_size=len(CLAIM_NAMES)
    ),
    nodes=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=3),
    order=st.permutations(CLAIM_NAMES),
    mode=st.sampled_from([Mode.online, Mode.batch]),
)
def test_every_reason_names_only_objects_of_the_problem(
    pods: list[list[int]], nodes: list[tuple[bool, bool]], order: list[str], mode: Mode
) -> None:
    names = iter(order)
    requests: list[PodRequest] = []
    for number, kinds in enumerate(pods):
        claims = []
        for kind in kinds:
            name = next(names, None)
            if name is not None:
                claims.append(_claim(kind, name))
        requests.append(pod(f"pod-{number}", *claims))
    node_states = tuple(
        _node(name, used, ready) for name, (used, ready) in zip(NODE_NAMES, nodes, strict=False)
    )
    problem = Problem(nodes=node_states, pods=tuple(requests))
    solution = solve(problem, SolveParams(mode=mode, node_feasibility=True))
    node_names = {n.name for n in node_states}
    for request in requests:
        own = {c.name for c in request.claims}
        texts = [r for u in solution.unplaced if u.pod == request.key for r in u.reasons]
        texts += [t for t in solution.node_feasibility.get(request.key, {}).values() if t]
        for text in texts:
            assert set(_REF.findall(text)) <= own, (request.key, text)
            assert set(_NODE.findall(text)) <= node_names, (request.key, text)
        for node, text in solution.node_feasibility.get(request.key, {}).items():
            if text is not None:
                others = set(_NODE.findall(text)) - {node}
                assert not others, (request.key, node, text)
