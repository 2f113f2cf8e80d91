"""Hostile review of a selector's memo (`cel.Selector.evaluate`): devices of one kind share an
answer unless the expression may read an identity attribute. Two devices below differ only in
their uuid (or in having one); kube-scheduler evaluates each (answers from drasat-oracle v0.37.2,
asked by hand), drasat must not give the second the first's answer."""

from __future__ import annotations

from typing import Any

import pytest

from drasat.v1 import cel

Obj = dict[str, Any]

_DRIVER = "gpu.nvidia.com"
_GPU = "device.attributes['gpu.nvidia.com']"


def _device(uuid: str | None) -> Obj:
    attributes: Obj = {"productName": {"string": "T4"}}
    if uuid is not None:
        attributes["uuid"] = {"string": uuid}
    return {"name": "gpu", "attributes": attributes, "capacity": {}}


def _answers(expression: str, *devices: Obj) -> list[object]:
    selector = cel.compile_selector(expression)
    return [selector.evaluate(_DRIVER, d) for d in devices]


@pytest.mark.parametrize(
    "expression",
    [
        f"{_GPU} == {{'productName': dyn('T4'), 'u' + 'uid': dyn('GPU-1')}}",
        f"{_GPU} in [{{'productName': dyn('T4'), 'u' + 'uid': dyn('GPU-1')}}]",
        f"cel.bind(k, 'u' + 'uid', {_GPU} == {{'productName': dyn('T4'), k: dyn('GPU-1')}})",
    ],
)
def test_whole_attributes_map_compared_reads_the_uuid(expression: str) -> None:
    assert _answers(expression, _device("GPU-0"), _device("GPU-1")) == [False, True]


@pytest.mark.parametrize(
    "expression",
    [
        f"size({_GPU}) == 2",
        f"('u' + 'uid') in {_GPU}",
    ],
)
def test_a_device_without_a_uuid_is_not_the_kind_of_one_with(expression: str) -> None:
    assert _answers(expression, _device(None), _device("GPU-1")) == [False, True]
