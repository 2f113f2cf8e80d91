"""Hostile review of the CEL regex functions: Kubernetes' `find`/`findAll` (and the compile-time
check of a literal pattern for `matches`/`find`/`findAll`) use Go's RE2. Python's `re` is a
backtracking engine with other syntax and other classes, so a tenant's selector could hang the
controller (the API server's cost estimate accepts it: RE2 is linear) or match other devices than
kube-scheduler would. Expected answers are cel-go's (drasat-oracle v0.37.2, asked by hand)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from drasat.v1 import cel

Obj = dict[str, Any]

_DRIVER = "gpu.nvidia.com"
_DEVICE: Obj = {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}, "capacity": {}}


def _evaluate(expression: str) -> object:
    return cel.compile_selector(expression).evaluate(_DRIVER, _DEVICE)


def test_find_with_nested_quantifier_does_not_hang_the_controller() -> None:
    # RE2 answers '' at once; a backtracking engine tries 2**40 ways. Run apart so that the hang
    # (in C, where no signal interrupts it) costs 20 s, not the suite.
    expression = "'" + "a" * 40 + "!'.find('^(a+)+$') == ''"
    code = (
        "from drasat.v1 import cel\n"
        f"print(cel.compile_selector({expression!r}).evaluate({_DRIVER!r}, {_DEVICE!r}))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        pytest.fail("find() with a nested quantifier still running after 20 s")
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.parametrize(
    "expression",
    [
        "'a\\n'.find('a$') == ''",  # RE2's $ is the end of text, not before a last newline
        "'\u0661'.find('\\\\d') == ''",  # RE2's \d is ASCII
        "'\u00e9'.find('\\\\w') == ''",  # RE2's \w is ASCII
        "'aB'.find('[[:upper:]]') == 'B'",  # POSIX classes
        "'a{,2}'.find('a{,2}') == 'a{,2}'",  # RE2 reads {,n} as literal text
        "'aaa'.findAll('(?U)a+') == ['a', 'a', 'a']",  # RE2's ungreedy flag
        "'x'.find('\\\\pL') == 'x'",  # Unicode classes
        "'abc'.find('\\\\Aabc\\\\z') == 'abc'",  # \z is RE2's end of text
        "'a'.find('(?<n>a)') == 'a'",  # named group, Go's newer spelling
        "'x'.matches('\\\\pL')",
    ],
)
def test_find_answers_as_re2(expression: str) -> None:
    assert _evaluate(expression) is True


@pytest.mark.parametrize(
    "expression",
    [
        "'x'.find('\\\\Z') == ''",  # RE2 has no \Z
        "'ab'.find('(?x) a b') == 'ab'",  # nor verbose mode
        "'x'.matches('\\\\Z')",
    ],
)
def test_pattern_re2_refuses_does_not_compile(expression: str) -> None:
    with pytest.raises(cel.SelectorError, match=r"invalid (find|matches) argument"):
        cel.compile_selector(expression)
