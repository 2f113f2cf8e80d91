"""drasat.v1.cel: `cel.bind` and the comprehension macros of Kubernetes' DRA selector environment
(cel-go's bindings extension since 1.31, its two-variable comprehensions since 1.32, both in
every release drasat supports), evaluated as cel-go expands them; each answer here is cel-go's
(asked of drasat-oracle, tests/oracle). And the bound on a selector's memo."""

from __future__ import annotations

from typing import Any

import pytest

from drasat.v1 import cel

DRIVER = "gpu.drasat.io"
A = f'device.attributes["{DRIVER}"]'

DEVICE: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {
        "productName": {"string": "NVIDIA A100"},
        "index": {"int": 0},
        "driverVersion": {"version": "550.54.15"},
    },
    "capacity": {"memory": {"value": "40Gi"}},
}


def _evaluate(expression: str) -> bool | str:
    selector = cel.compile_selector(expression)
    selector._memo.clear()
    result = selector.evaluate(DRIVER, DEVICE)
    return result.message if isinstance(result, cel.Failure) else result


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # cel.bind: the domain named once, as upstream's own documentation of the environment shows.
        (f'cel.bind(d, {A}, d.productName.startsWith("NVIDIA") && d.index == 0)', True),
        ("cel.bind(a, 1, cel.bind(b, a + 1, b == 2))", True),
        ("[1, 2].exists(x, cel.bind(y, x * 2, y == 4))", True),
        # The bound value is evaluated where the body reads it: an error never read is none.
        ("cel.bind(x, 1 / 0, true)", True),
        ("cel.bind(x, 1 / 0, x == 1)", "division by zero"),
        # Two-variable comprehensions: (index, element) over a list, (key, value) over a map.
        ("[1, 2, 3].all(i, v, v > i)", True),
        ("[1, 2, 3].exists(i, v, v == 2 && i == 1)", True),
        ("[1, 2, 3].existsOne(i, v, v > 1)", False),
        ("[1, 2, 3].exists_one(i, v, v > 2)", True),
        ("[1, 2, 3].transformList(i, v, v * i) == [0, 2, 6]", True),
        ("[1, 2, 3].transformList(i, v, i > 0, v * i) == [2, 6]", True),
        ('{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}', True),
        ('{"a": 1, "b": 2}.transformMapEntry(k, v, {v: k}) == {1: "a", 2: "b"}', True),
        ('{"a": 1, "b": 1}.transformMapEntry(k, v, {v: k}).size() == 1',
         "insert failed: key 1 already exists"),
        (f'{A}.exists(k, v, k == "index" && v == 0)', True),
        (f"{A}.existsOne(k, v, v == 0)", "no such overload"),  # a semver == 0 is an error
        (f"{A}.productName.all(k, v, true)", "unsupported comprehension range type: types.String"),
        # One-variable macros as cel-go expands them (cel-python counted an error as true).
        ("[1, 2, 3].map(x, x > 1, x * 2) == [4, 6]", True),
        ("[1, 2, 3].filter(x, x / 0 > 1) == []", "division by zero"),
        ("[1, 2, 3].exists_one(x, x > 1 / 0)", "division by zero"),
        ("[1, 2, 3].all(x, x / 0 > 1 || x > 0)", True),
        (f"{A}.productName.all(x, true)", "got 'types.String', expected iterable type"),
    ],
)  # fmt: skip
def test_macros_evaluate_as_cel_go_expands_them(expression: str, expected: bool | str) -> None:
    assert _evaluate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cel.bind(a.b, 1, true)", "cel.bind() variable names must be simple identifiers"),
        ("[1].all(x, x, true)", "duplicate variable name: x"),
        # existsOne takes two variables only; exists_one one or two (cel-go's macros).
        ("[1].existsOne(x, x > 0)", "undeclared reference to 'existsOne'"),
        ('cel.bind(a, "x", a + 1 == 2)', "found no matching overload for '_+_'"),
    ],
)
def test_macros_the_api_server_refuses_do_not_compile(expression: str, message: str) -> None:
    with pytest.raises(cel.SelectorError) as error:
        cel.compile_selector(expression)
    assert message in str(error.value)


def test_a_macro_walking_the_attributes_reads_identity() -> None:
    # Its value at a uuid differs device by device: evaluated per device, not per kind.
    assert cel.compile_selector(f'{A}.exists(k, v, v == "GPU-1")').by_identity
    assert cel.compile_selector(f'cel.bind(d, {A}, d["uu" + "id"] == "GPU-1")').by_identity


def test_a_selectors_memo_stays_bounded_as_devices_come_and_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An identity-reading selector remembers one answer per device it has seen; a controller
    # that runs for months sees devices come and go.
    monkeypatch.setattr(cel, "MEMO_MAX", 50)
    selector = cel.compile_selector(f'{A}.uuid.startsWith("GPU-1")')
    selector._memo.clear()
    for n in range(500):
        device = {"name": f"gpu-{n}", "attributes": {"uuid": {"string": f"GPU-{n}"}}}
        assert selector.evaluate(DRIVER, device) is str(n).startswith("1")
        assert len(selector._memo) <= 50
