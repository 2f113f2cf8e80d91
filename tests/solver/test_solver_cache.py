"""The solver's memo tables belong to a cache object the caller passes in (SolveParams.cache):
no module-level state, the same answers with a fresh, a shared or a warm cache, serially or from
concurrent threads, and memo keys built from structure (what a decision reads), not from text."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Iterator

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.api.selectors import GpuSelector
from drasat.solver import Mode, Problem, Solution, SolveParams, SolverCache, nodes, solve
from drasat.solver.model import PodEntry
from drasat.solver.rules import Rules


def _held(node: str, index: int) -> dict[str, AllocatedDevices]:
    uid = f"old-{node}"
    return {
        uid: AllocatedDevices.model_validate(
            {
                "claimInfo": {"namespace": "other", "name": uid, "uid": uid},
                "gpu": {"devices": [{"uuid": f"GPU-{node}-{index}"}]},
            }
        )
    }


#: GPU index 0 of every node is kept for team-x; a and b each have one T4 free, a its index 0
#: (reserved), b its index 1: the same free state but for which GPU is free.
KEEP_INDEX_0 = AllocationPolicySpec.model_validate(
    {
        "rules": {
            "reservations": [
                {"name": "keep-index-0", "namespaces": ["team-x"], "selector": {"index": 0}}
            ]
        }
    }
)
NODE_A = make_node("a", "T4", count=2, allocated=_held("a", 1))
NODE_B = make_node("b", "T4", count=2, allocated=_held("b", 0))


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_a_reservation_by_gpu_index_is_part_of_the_memo_key(order: str) -> None:
    # The old key left GPU identities out unless the claim's JSON text held '"index"' or
    # '"uuid"': a and b then shared one entry, and the answer depended on which came first.
    cache = SolverCache()
    for nodes_in_order in ((NODE_A, NODE_B), (NODE_B, NODE_A))[:: 1 if order == "ab" else -1]:
        problem = Problem(
            nodes=nodes_in_order, pods=(pod("p", gpu_claim("c")),), policy=KEEP_INDEX_0
        )
        solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True, cache=cache))
        assert_valid(problem, solution)
        (placement,) = solution.placements
        assert placement.node == "b"
        (allocated,) = placement.allocations.values()
        assert allocated.gpus == ("GPU-b-1",)
        feasibility = solution.node_feasibility["default/p"]
        assert feasibility["b"] is None
        assert feasibility["a"] == "claim default/c: policy rule keep-index-0 (node a)"


def _shape(selector: dict[str, object]) -> nodes.PodShape:
    request = pod("p", gpu_claim("c", selector=selector))
    from drasat.solver import demand

    claims = tuple(demand.normalize(c, request) for c in request.claims)
    rules = Rules(AllocationPolicySpec(), (), SolverCache())
    return nodes.shape(PodEntry(request, 0, claims, ()), rules)


def test_whether_a_pod_names_gpus_is_read_from_the_selectors_structure() -> None:
    # A product glob spelled "index" does not name a GPU (the old substring test said it did).
    assert not _shape({"productName": "index"}).names_gpus
    assert not _shape({"productName": "uuid"}).names_gpus
    assert _shape({"andExpression": [{"productName": "*t4*"}, {"index": 1}]}).names_gpus
    assert _shape({"orExpression": [{"migEnabled": False}, {"uuid": "GPU-x"}]}).names_gpus
    GpuSelector.model_validate({"productName": "index"})  # a valid selector


def _problems() -> list[Problem]:
    """Problems whose pods share shapes (memo hits across pods and problems), with every kind
    of evaluation: enumeration, a CP-SAT model per node (two claims, topology) and reasons."""
    t4s = tuple(make_node(f"n{i}", "T4", count=2, numa=[0, 1]) for i in (1, 10, 11))
    a100 = (make_node("m1", "A100-40GB", mig=True), make_node("m10", "A100-40GB", mig=True))
    return [
        Problem(
            nodes=t4s,
            pods=(pod("p1", gpu_claim("c1", count=3)), pod("p10", gpu_claim("c10", count=3))),
        ),
        Problem(
            nodes=t4s,
            pods=(
                pod("p10", gpu_claim("c10", count=3)),
                pod("p1", gpu_claim("c1", count=2, topology={"sameNUMANode": "Required"})),
                pod("p11", gpu_claim("c11"), gpu_claim("c110", share={"compute": 40})),
            ),
        ),
        Problem(
            nodes=a100 + t4s,
            pods=(
                pod("q1", mig_claim("m1", "3g.20gb")),
                pod("q10", mig_claim("m10", "3g.20gb")),
                pod("q11", mig_claim("m11", "3g.20gb")),
                pod("q2", mig_claim("m2", memory="4Gi"), gpu_claim("g2", count=2)),
            ),
        ),
        Problem(
            nodes=(NODE_A, NODE_B),
            pods=(pod("p", gpu_claim("c")), pod("r", gpu_claim("d"))),
            policy=KEEP_INDEX_0,
        ),
    ]


def _answer(solution: Solution) -> object:
    """What a solve decided and said (not how long it took)."""
    return (
        solution.status,
        solution.placements,
        solution.unplaced,
        solution.objective,
        solution.node_feasibility,
    )


PARAMS = [
    SolveParams(mode=Mode.online, node_feasibility=True),
    SolveParams(mode=Mode.batch, time_limit_s=5.0),
]


def _reference() -> dict[tuple[int, int], object]:
    """Each problem solved alone with a fresh cache."""
    found = {
        (i, j): _answer(solve(p, dataclasses.replace(params, cache=SolverCache())))
        for i, p in enumerate(_problems())
        for j, params in enumerate(PARAMS)
    }
    # The first problem's pods are of one shape: each is told about its own claim.
    for j in range(len(PARAMS)):
        unplaced = found[(0, j)][2]  # type: ignore[index]
        assert [r.reasons[0].split(" (")[0] for r in unplaced] == [
            "claim default/c1",
            "claim default/c10",
        ]
    return found


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads often, so that concurrent solves interleave inside the memo code."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_a_warm_cache_gives_the_answers_of_a_fresh_one() -> None:
    reference = _reference()
    cache = SolverCache()
    for _ in range(2):
        for (i, j), expected in reversed(reference.items()):
            params = dataclasses.replace(PARAMS[j], cache=cache)
            assert _answer(solve(_problems()[i], params)) == expected, (i, j)


@pytest.mark.parametrize("shared", [True, False], ids=["one-cache", "a-cache-each"])
def test_concurrent_solves_give_the_serial_answers(shared: bool, busy_switching: None) -> None:
    reference = _reference()
    problems = _problems()
    one = SolverCache()
    keys = list(reference)
    results: list[tuple[tuple[int, int], object]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def work(offset: int) -> None:
        cache = one if shared else SolverCache()
        try:
            start.wait()
            for step in range(2 * len(keys)):
                i, j = keys[(offset + step) % len(keys)]
                params = dataclasses.replace(PARAMS[j], cache=cache)
                answer = _answer(solve(problems[i], params))
                with lock:
                    results.append(((i, j), answer))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k * 3,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == 4 * 2 * len(keys)
    for key, answer in results:
        assert answer == reference[key], key


def test_solving_changes_no_module_level_state() -> None:
    # The memo tables live in SolverCache: a solve leaves every dict, set and list held at
    # module level in the solver as it found it (constant tables are fine, memos are not).
    import importlib
    import pkgutil

    import drasat.solver

    held: dict[str, object] = {}
    for info in pkgutil.iter_modules(drasat.solver.__path__):
        module = importlib.import_module(f"drasat.solver.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, (dict, set, list)) and not name.startswith("__"):
                held[f"{info.name}.{name}"] = value
    before = {name: repr(value) for name, value in held.items()}
    for problem in _problems():
        for params in PARAMS:
            solve(problem, params)
    after = {name: repr(value) for name, value in held.items()}
    assert [name for name in held if before[name] != after[name]] == []


class _CountedSet(frozenset[str]):
    """An eligible set that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedSet.compared += 1
        return frozenset.__eq__(self, other)

    __hash__ = frozenset.__hash__


def test_a_pod_shape_finds_its_claims_eligible_set_by_identity() -> None:
    # The pods of a v1 template share one eligible set object (thousands of uuids); another
    # template's equal set is another object. A shape's key interned the set: each pod's
    # lookup compared it entry by entry with the equal one first interned. By identity, the
    # set is compared once (when first met), not once per pod.
    from drasat.solver import demand
    from drasat.solver.problem import ClaimRequest

    uuids = [f"GPU-n{i}-0" for i in range(50)]
    rules = Rules(AllocationPolicySpec(), (), SolverCache())
    first, second = _CountedSet(uuids), _CountedSet(uuids)
    shapes = []
    for i in range(40):
        claim = gpu_claim(f"c{i}")
        eligible = first if i == 0 else second
        request = pod(f"p{i}", ClaimRequest(**{**claim.__dict__, "eligible": eligible}))
        claims = tuple(demand.normalize(c, request) for c in request.claims)
        _CountedSet.compared = 0 if i == 1 else _CountedSet.compared
        shapes.append(nodes.shape(PodEntry(request, 0, claims, ()), rules))
    assert len({s.key_id for s in shapes}) == 1  # equal sets: one shape
    assert _CountedSet.compared <= 2
