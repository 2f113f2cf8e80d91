"""Never a traceback: any mutation of valid manifests or cluster compiles or is an InputError."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat import loading
from drasat.api.errors import InputError
from drasat.whatif import manifests, nodes, run

MANIFESTS = run.embedded(run.DEFAULT_MANIFESTS)
CLUSTER = run.embedded(run.DEFAULT_CLUSTER)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


def _targets(documents: list[loading.Document]) -> list[tuple[int, tuple[Any, ...]]]:
    return [(i, path) for i, d in enumerate(documents) for path in _paths(d.data)]


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=10),
    st.sampled_from(["", "x", "1g.5gb", "9g.99gb", "gpu.drasat.io", "Immediate", "-1", "2Gi"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["name", "count", "bogus"]), st.integers(), max_size=2),
    st.just("<delete>"),
)


def _mutate(
    documents: list[loading.Document], target: tuple[int, tuple[Any, ...]], value: Any
) -> list[loading.Document]:
    mutated = [loading.Document(d.source, d.number, copy.deepcopy(d.data)) for d in documents]
    index, path = target
    parent: Any = mutated[index].data
    for part in path[:-1]:
        parent = parent[part]
    if value == "<delete>":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return mutated


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(_targets(MANIFESTS)), value=VALUES)
def test_mutated_manifests_compile_or_fail_cleanly(
    target: tuple[int, tuple[Any, ...]], value: Any
) -> None:
    cluster = nodes.load(CLUSTER)
    try:
        workload = manifests.compile_manifests(
            _mutate(MANIFESTS, target, value), offered_profiles=cluster.offered_profiles()
        )
    except InputError as error:
        assert "\n" not in str(error)
        assert str(error).startswith("<embedded>/default-manifests.yaml")
    else:
        workload.requests()


@settings(max_examples=60, deadline=None)
@given(target=st.sampled_from(_targets(CLUSTER)), value=VALUES)
def test_mutated_cluster_loads_or_fails_cleanly(
    target: tuple[int, tuple[Any, ...]], value: Any
) -> None:
    try:
        nodes.load(_mutate(CLUSTER, target, value))
    except InputError as error:
        assert "\n" not in str(error)
