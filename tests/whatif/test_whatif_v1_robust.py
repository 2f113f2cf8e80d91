"""v1 input never ends in a traceback: any value at any field of a valid slice, Node, claim,
template or pod is either read or refused with one InputError line."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat import loading
from drasat.api.inputerrors import InputError
from drasat.whatif import clusternodes, v1manifests

REPO = pathlib.Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"
SLICES = [d.data for d in loading.read_documents(QUICKSTART / "cluster/nvidia-slices.yaml")]
MANIFESTS = [
    d.data
    for name in ("gpu-test4.yaml", "gpu-test5.yaml", "gpu-test3.yaml")
    for d in loading.read_documents(QUICKSTART / name)
]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += paths(value, (*prefix, index))
    return out


def mutated(objects: list[dict[str, Any]], draw: Any) -> list[loading.Document]:
    changed = copy.deepcopy(objects)
    index = draw(st.integers(0, len(changed) - 1))
    where = draw(st.sampled_from(paths(changed[index])))
    target = changed[index]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = draw(values)
    return [loading.Document("in.yaml", n, o) for n, o in enumerate(changed, start=1)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_field_of_slices_and_nodes_is_read_or_refused(data: st.DataObject) -> None:
    documents = mutated(SLICES, data.draw)
    try:
        clusternodes.load(documents)
    except InputError as error:
        assert "\n" not in str(error)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_field_of_claims_templates_and_pods_is_read_or_refused(data: st.DataObject) -> None:
    documents = mutated(MANIFESTS, data.draw)
    try:
        v1manifests.compile_v1(documents)
    except InputError as error:
        assert "\n" not in str(error)
