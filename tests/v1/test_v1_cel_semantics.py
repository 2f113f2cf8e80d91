"""drasat.v1.cel with Kubernetes' semantics, each with the answer k8s.io/apiserver's CEL library
and cel-go give: quantities as resource.ParseQuantity reads them, strict semvers with their
precedence, CEL's equality and numeric comparison, errors absorbed by `||` and `&&` and
otherwise failing the selector (a Failure, never a silent "no match")."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from drasat.v1 import cel

DRIVER = "gpu.drasat.io"
DEVICE: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {"index": {"int": 0}, "driverVersion": {"version": "550.54.15"}},
    "capacity": {"memory": {"value": "15Gi"}},
}
A = f'device.attributes["{DRIVER}"]'


def evaluate(expression: str, device: dict[str, Any] | None = None) -> bool | cel.Failure:
    selector = cel.compile_selector(expression)
    selector._memo.clear()
    return selector.evaluate(DRIVER, DEVICE if device is None else device)


def failure(expression: str) -> str:
    result = evaluate(expression)
    assert isinstance(result, cel.Failure), (expression, result)
    return result.message


# -- resource.ParseQuantity ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "integer"),
    [
        ("0", Fraction(0), 0),
        ("2", Fraction(2), 2),
        ("+7", Fraction(7), 7),
        ("-3", Fraction(-3), -3),
        ("1k", Fraction(1000), 1000),
        ("1M", Fraction(10**6), 10**6),
        ("1e3", Fraction(1000), 1000),
        ("1E2", Fraction(100), 100),
        ("5Ki", Fraction(5120), 5120),
        ("1Gi", Fraction(2**30), 2**30),
        ("1500m", Fraction(3, 2), None),
        ("2000m", Fraction(2), None),  # AsInt64 fails on a negative scale
        ("1.5", Fraction(3, 2), None),
        ("0.5", Fraction(1, 2), None),
        ("1u", Fraction(1, 10**6), None),
        ("3n", Fraction(3, 10**9), None),
        ("1.5Gi", Fraction(3 * 2**29), None),
        ("007", Fraction(7), 7),
        ("0000000000000000001", Fraction(1), 1),  # leading zeros do not count as digits
        ("1P", Fraction(10**15), 10**15),
        ("1E", Fraction(10**18), 10**18),
        ("+0.5k", Fraction(500), 500),
        ("1E+3", Fraction(1000), 1000),
        ("1e-3", Fraction(1, 1000), None),
        ("-1.5", Fraction(-3, 2), None),
        ("9E18", Fraction(9 * 10**18), 9 * 10**18),  # within int64
        ("-9E18", Fraction(-9 * 10**18), -9 * 10**18),
        ("10E18", Fraction(10**19), None),  # beyond int64: no integer
        ("1.0000000001", Fraction(1_000_000_001, 10**9), None),  # rounded up to a nano
        # AsInt64 answers only for the fast int64 form: 18 decimal digits, fewer for binary
        # suffixes (resource's precision rule), never past it
        ("123456789012345678", Fraction(123456789012345678), 123456789012345678),
        ("1000000000000000000", Fraction(10**18), None),
        ("12345Gi", Fraction(12345 * 2**30), 12345 * 2**30),
        ("123456Gi", Fraction(123456 * 2**30), None),
        ("12Ti", Fraction(12 * 2**40), 12 * 2**40),
        ("123Ti", Fraction(123 * 2**40), None),
        ("1Pi", Fraction(2**50), None),
        ("-1.5Gi", Fraction(-3 * 2**29), None),
        ("100000000000000000000", Fraction(10**20), None),  # decimal: exact beyond int64
        ("8Ei", Fraction(2**63 - 1), None),  # binary: capped at int64's largest
    ],
)
def test_quantities_parse_to_their_exact_value(
    text: str, value: Fraction, integer: int | None
) -> None:
    parsed = cel.parse_quantity(text)
    assert (parsed.value, parsed.integer) == (value, integer)


def test_a_quantity_with_text_after_its_suffix_is_malformed_not_a_bad_suffix() -> None:
    with pytest.raises(ValueError, match="quantities must match the regular expression"):
        cel.parse_quantity("1k!")
    with pytest.raises(ValueError, match="unable to parse quantity's suffix"):
        cel.parse_quantity("1kk")


@pytest.mark.parametrize("text", ["", "abc", "1Q", "1.5.5", "1Kii", "1 Gi", "1e"])
def test_text_that_is_no_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        cel.parse_quantity(text)


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("1500m") == quantity("1.5")',
        'quantity("1Gi") == quantity("1024Mi")',
        '!quantity("1.5").isInteger()',
        'quantity("1k").isInteger()',
        'quantity("1k").asInteger() == 1000',
        'quantity("1u").isGreaterThan(quantity("0"))',
        'quantity("1500m").isLessThan(quantity("2"))',
        'quantity("1500m").compareTo(quantity("1.5")) == 0',
        'sign(quantity("-3")) == -1',  # a global function: `q.sign()` does not compile
        'sign(quantity("0")) == 0',
        'sign(quantity("2m")) == 1',
        'sign(quantity("-500m")) == -1',
        'quantity("1.5").asApproximateFloat() == 1.5',
        'isQuantity("1.5") && isQuantity("5Ki") && !isQuantity("abc")',
        'quantity("1") != dyn(1)',  # an Equal that errs makes != true
        'device.capacity["gpu.drasat.io"].memory == quantity("15Gi")',
    ],
)
def test_quantity_expressions_hold(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
        ('quantity("x") == quantity("1")', "quantities must match"),
        ('quantity("1") == dyn(1)', "no such overload"),
        ('quantity("1").compareTo(dyn(semver("1.0.0"))) == 0', "no such overload"),
        ("isQuantity(dyn(1))", "no such overload"),
        ('size(dyn(quantity("1"))) == 1', "no such overload"),
    ],
)
def test_quantity_errors_fail_the_selector(expression: str, says: str) -> None:
    assert says in failure(expression)


# -- semver (blang/semver) -------------------------------------------------------------------------


def test_a_semver_parses_its_parts_prerelease_and_build() -> None:
    version = cel.parse_semver("1.22.3-rc.1.x-y+build.5")
    assert (version.major, version.minor, version.patch) == (1, 22, 3)
    assert version.pre == ("rc", 1, "x-y")
    assert str(version) == "1.22.3-rc.1.x-y+build.5"


@pytest.mark.parametrize(
    "text", ["", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "a.2.3", "1.2.3-", "1.2.3-01",
             "1.2.3-a..b", "1.2.3-a$", "1.2.3+", "1.2.3+a..b", "1.2.3+a$", "1.2.3+$a", "v1.2.3"],
)  # fmt: skip
def test_text_that_is_no_strict_semver_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        cel.parse_semver(text)


@pytest.mark.parametrize(
    "expression",
    [
        # precedence: 1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-alpha.beta < 1.0.0-beta
        #             < 1.0.0-beta.2 < 1.0.0-beta.11 < 1.0.0-rc.1 < 1.0.0
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
        'semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))',
        'semver("1.0.0-alpha.beta").isLessThan(semver("1.0.0-beta"))',
        'semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))',
        'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
        'semver("1.0.0").isGreaterThan(semver("1.0.0-rc.1"))',
        'semver("1.0.0-2").isLessThan(semver("1.0.0-a"))',
        'semver("1.0.0-a").isGreaterThan(semver("1.0.0-2"))',
        'semver("1.0.0-alpha.1").isGreaterThan(semver("1.0.0-alpha"))',
        'semver("1.0.0-beta.11").compareTo(semver("1.0.0-beta.2")) == 1',
        'semver("1.2.3-x").compareTo(semver("1.2.3-x")) == 0',
        'semver("2.0.0-rc.1").isGreaterThan(semver("1.9.9"))',
        'semver("1.0.0+a") == semver("1.0.0+b")',  # build metadata is ignored
        'semver("1.0.0-a") != dyn(semver("1.0.0"))',
        'isSemver("1.2.3") && !isSemver("1.2") && !isSemver("1.2.3.4")',
        f'{A}.driverVersion == semver("550.54.15")',
        f"{A}.driverVersion.minor() == 54",
        'semver("1.0.0") != dyn("1.0.0")',
    ],
)
def test_semver_expressions_hold(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ('semver("1.2.3.4").major() == 1', "Invalid character(s) found in patch number"),
        ('semver("1.2").major() == 1', "No Major.Minor.Patch"),
        ('semver("1.2.3") == dyn("1.2.3")', "no such overload"),
        ('dyn(quantity("1")).major() == 1', "no such overload"),
        ("isSemver(dyn(1))", "no such overload"),
    ],
)
def test_semver_errors_fail_the_selector(expression: str, says: str) -> None:
    assert says in failure(expression)


def test_a_version_attribute_that_is_no_semver_fails_every_selector_on_the_device() -> None:
    broken = {**DEVICE, "attributes": {**DEVICE["attributes"], "driverVersion": {"version": "x"}}}
    result = evaluate(f"{A}.index == 0", broken)
    assert isinstance(result, cel.Failure) and "driverVersion" in result.message


# -- equality, comparison, logic -------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "dyn(1) == 1.0",
        "1 < 1.5",
        "2.5 >= 2",
        "dyn(1u) == 1",
        '!("a" == dyn(1))',
        '"a" != dyn(1)',
        '"a" + "b" == "ab"',
        '"b" > "a" && "a" <= "a"',
        "[dyn(1), dyn(2)] == [dyn(1), dyn(2.0)]",
        "[1, 2] != [1, 2, 3]",
        '{"a": 1} == {"a": 1}',
        '{"a": 1} != {"a": 2}',
        "!(dyn([]) == {})",  # a list never equals a map
        "false < true",
        '"a" in ["b", "a"]',
        "dyn(1) in [1.0]",
        '"x" in {"x": 1}',
        '!("y" in {"x": 1})',
        '!(dyn("a") in [1, 2])',
        'size("abc") == 3',
        "size([1, 2]) == 2",
        f"{A}.missing == 1 || true",  # || absorbs an error
        f"true || {A}.missing == 1",
        f"!(false && {A}.missing == 1)",
        f"!({A}.missing == 1 && false)",
        '"index" in device.attributes["gpu.drasat.io"]',
        '!("index" in device.attributes["other.example.com"])',  # an unknown domain is empty
        "(1 < 2) ? true : false",
    ],
)
def test_cel_expressions_hold(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ('"a" < dyn(1)', "no such overload"),
        (f"{A}.missing == 1", "no such key: missing"),
        (f"{A}.missing == 1 || false", "no such key: missing"),
        (f"false || {A}.missing == 1", "no such key: missing"),
        (f"true && {A}.missing == 1", "no such key: missing"),
        (f"!({A}.missing == 1)", "no such key: missing"),
        ("!dyn(1)", "no such overload"),
        ("dyn(1) || true == false", "no such overload"),
        ("dyn(1) ? true : false", "no such overload"),
        (f"({A}.missing == 1) ? true : false", "no such key: missing"),
        ('1 in dyn("abc")', "no such overload"),
        (f"{A}.index", "CEL result of type int could not be converted to bool"),
        ('dyn("yes")', "CEL result of type string could not be converted to bool"),
        (
            'dyn(quantity("1"))',
            "CEL result of type kubernetes.Quantity could not be converted to bool",
        ),
        (
            'dyn(semver("1.0.0"))',
            "CEL result of type kubernetes.Semver could not be converted to bool",
        ),
        ("dyn(1.5)", "CEL result of type double could not be converted to bool"),
    ],
)
def test_cel_errors_fail_the_selector_in_kubernetes_words(expression: str, says: str) -> None:
    assert says in failure(expression)


def test_a_failure_is_no_match_and_is_remembered_with_the_expression() -> None:
    expression = f"{A}.absent == 1"
    selector = cel.compile_selector(expression)
    selector._memo.clear()
    selector.error = None
    assert selector.matches(DRIVER, DEVICE) is False
    assert selector.error is not None and selector.error.startswith(repr(expression))
    assert "no such key: absent" in selector.error


def test_selectors_are_checked_in_order_and_the_first_false_or_failure_ends_it() -> None:
    true, false = cel.compile_selector("1 == 1"), cel.compile_selector("1 == 2")
    broken = cel.compile_selector(f"{A}.nothing == 1")
    assert cel.evaluate_all([true, true], DRIVER, DEVICE) is True
    assert cel.evaluate_all([], DRIVER, DEVICE) is True
    assert cel.evaluate_all([true, false, broken], DRIVER, DEVICE) is False
    ended = cel.evaluate_all([true, broken, false], DRIVER, DEVICE)
    assert isinstance(ended, cel.Failure) and "nothing" in ended.message


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ('quantity("1") == 1', "found no matching overload for '_==_' applied to "
         "'(kubernetes.Quantity, int)'"),
        ('semver("1.2.3") in ["1.2.3"]', "found no matching overload for '@in' applied to "
         "'(kubernetes.Semver, list(string))'"),
        ("1 == 1.0", "found no matching overload for '_==_' applied to '(int, double)'"),
        ('"yes"', "must evaluate to bool or the unknown type, not string"),
        ('"a".contain("a")', "undeclared reference to 'contain'"),
    ],
)  # fmt: skip
def test_types_known_before_evaluation_are_checked_when_compiled(
    expression: str, says: str
) -> None:
    """cel-go's checker refuses these when the API server compiles the selector (so no claim
    holds them); the runtime semantics above hold where a value is dyn, as attributes are."""
    with pytest.raises(cel.SelectorError, match="does not compile") as refused:
        cel.compile_selector(expression)
    assert says in str(refused.value)


M = 'device.capacity["gpu.drasat.io"].memory'


@pytest.mark.parametrize("expression", [f"{M} != {M}", f"type({A}.index) == int"])
def test_a_selector_past_the_api_servers_cost_limit_is_refused(expression: str) -> None:
    """The API server estimates a selector's cost when it creates the object and refuses one
    past its limit: cel-go's estimate has no bound for `!=` of two quantities or for type()."""
    with pytest.raises(cel.SelectorError, match=cel.TOO_COMPLEX):
        cel.compile_selector(expression)


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        (f"({M} != {M}) && {M}.greaterThan({M})", "undeclared reference to 'greaterThan'"),
        (f'type({A}.index) == int && "a".contain("a")', "undeclared reference to 'contain'"),
        (f"{M} != {M} || 1", "expected type 'bool' but found 'int'"),
        (f"{M} != {M} ? 1 : 2", "must evaluate to bool or the unknown type, not int"),
    ],
)  # fmt: skip
def test_a_type_error_is_named_before_the_cost_limit(expression: str, says: str) -> None:
    """cel-go checks the whole expression before the API server estimates its cost: where a
    selector has both, the server names the type error, and so does drasat."""
    with pytest.raises(cel.SelectorError, match="does not compile") as refused:
        cel.compile_selector(expression)
    assert says in str(refused.value)
