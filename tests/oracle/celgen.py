"""Random CEL device selectors over every attribute and capacity drasat's devices publish, the
Kubernetes CEL library parts selectors use (quantity, semver, strings, regex, and the rest of the
environment's extensions: lists, sets, optional values, IP, CIDR, URL; `cel.bind` and two-variable
comprehensions), literals of every
type (int against double included), missing attributes and domains, and boolean combinations.

Constructs drasat refuses on purpose are not generated (docs/CONTROLLER.md, "CEL"): they are
tested to be refused with a clear error instead."""

from __future__ import annotations

from hypothesis import strategies as st

DOMAIN = "gpu.drasat.io"
K8S = "resource.kubernetes.io"

STRINGS = ("type", "uuid", "productName", "brand", "architecture", "profile", "parentUUID")
INTS = (
    "index",
    "minor",
    "numaNode",
    "parentMinor",
    "parentIndex",
    "placementStart",
    "placementSize",
)
BOOLS = ("migEnabled",)
VERSIONS = ("cudaComputeCapability", "driverVersion", "cudaDriverVersion")
CAPACITIES = ("memory", "compute", "computeSlices", "nope")
MISSING = ("nope", "gpuType")

QUANTITIES = (
    "0", "1", "2", "100", "1.5", "1500m", "2000m", "0.5", "1u", "1n", "5Ki", "40Gi", "80Gi",
    "10G", "1e3", "1E3", "1.25e2", "+3", "-1", "1k", "16106127360", "abc", "1.5Gi", "", "5 Gi",
)  # fmt: skip
SEMVERS = (
    "8.0.0", "7.5.0", "9.0.0", "12.4.0", "550.54.15", "1.2.3", "1.2.3.4", "1.2", "v1.0.0",
    "1.0.0-rc.1", "1.0.0+build", "01.2.3", "x", "",
)  # fmt: skip
STRING_LITERALS = (
    '"gpu"', '"mig"', '"cpu-fallback"', '"Nvidia"', '"Ampere"', '"Hopper"', '"Tesla T4"',
    '"NVIDIA A100-SXM4-40GB"', '"1g.10gb"', '"3g.40gb"', '"GPU-n1-0"', '""',
)  # fmt: skip
NUMBER_LITERALS = ("0", "1", "2", "3", "7", "-1", "0.0", "1.0", "1.5", "2.5", "0u", "1u")
OPS = ("==", "!=", "<", "<=", ">", ">=")


def _attribute(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [
            f'device.attributes["{DOMAIN}"].{name}',
            f'device.attributes["{DOMAIN}"]["{name}"]',
        ]
    )


def _any_attribute() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(STRINGS + INTS + BOOLS + VERSIONS + MISSING).flatmap(_attribute),
        st.just(f'device.attributes["{K8S}"].pciBusID'),
        st.just('device.attributes["other.example.com"].x'),
    )


def _literal() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(STRING_LITERALS + NUMBER_LITERALS + ("true", "false")),
        st.sampled_from(SEMVERS).map(lambda v: f'semver("{v}")'),
        st.sampled_from(QUANTITIES).map(lambda q: f'quantity("{q}")'),
    )


def _capacity() -> st.SearchStrategy[str]:
    return st.sampled_from(CAPACITIES).map(lambda c: f'device.capacity["{DOMAIN}"].{c}')


def _quantity_value() -> st.SearchStrategy[str]:
    return st.one_of(_capacity(), st.sampled_from(QUANTITIES).map(lambda q: f'quantity("{q}")'))


def _version_value() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(VERSIONS).flatmap(_attribute),
        st.sampled_from(SEMVERS).map(lambda v: f'semver("{v}")'),
    )


def _quantity_atom() -> st.SearchStrategy[str]:
    q = _quantity_value()
    return st.one_of(
        st.tuples(q, q, st.sampled_from(OPS), st.sampled_from(["0", "1", "-1"])).map(
            lambda t: f"{t[0]}.compareTo({t[1]}) {t[2]} {t[3]}"
        ),
        st.tuples(q, st.sampled_from(["isGreaterThan", "isLessThan"]), q).map(
            lambda t: f"{t[0]}.{t[1]}({t[2]})"
        ),
        q.map(lambda v: f"{v}.isInteger()"),
        st.tuples(q, st.sampled_from(OPS), st.sampled_from(["0", "1", "2", "100", "1.5"])).map(
            lambda t: f"{t[0]}.asInteger() {t[1]} {t[2]}"
        ),
        st.tuples(q, st.sampled_from(["==", "!="]), q).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    )


def _version_atom() -> st.SearchStrategy[str]:
    v = _version_value()
    return st.one_of(
        st.tuples(v, v, st.sampled_from(OPS), st.sampled_from(["0", "1", "-1"])).map(
            lambda t: f"{t[0]}.compareTo({t[1]}) {t[2]} {t[3]}"
        ),
        st.tuples(v, st.sampled_from(["isGreaterThan", "isLessThan"]), v).map(
            lambda t: f"{t[0]}.{t[1]}({t[2]})"
        ),
        st.tuples(
            v,
            st.sampled_from(["major", "minor", "patch"]),
            st.sampled_from(OPS),
            st.integers(0, 12),
        ).map(lambda t: f"{t[0]}.{t[1]}() {t[2]} {t[3]}"),
        st.tuples(v, st.sampled_from(["==", "!="]), v).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    )


def _string_atom() -> st.SearchStrategy[str]:
    s = st.one_of(
        st.sampled_from(STRINGS).flatmap(_attribute),
        st.just(f'device.attributes["{K8S}"].pciBusID'),
    )
    text = st.sampled_from(["N", "A100", "gb", "GPU-", "gpu", "0000:", "T4", ""])
    return st.one_of(
        st.tuples(s, st.sampled_from(["startsWith", "endsWith", "contains"]), text).map(
            lambda t: f'{t[0]}.{t[1]}("{t[2]}")'
        ),
        st.tuples(
            s, st.sampled_from(["^NVIDIA", "gb$", "[0-9]+g", "^GPU-.*-0$", "(", "mig|gpu"])
        ).map(lambda t: f'{t[0]}.matches("{t[1]}")'),
        st.tuples(
            s,
            st.sampled_from(["lowerAscii", "upperAscii", "trim"]),
            st.sampled_from(STRING_LITERALS),
        ).map(lambda t: f"{t[0]}.{t[1]}() == {t[2]}"),
        st.tuples(s, st.sampled_from(OPS), st.integers(0, 24)).map(
            lambda t: f"{t[0]}.size() {t[1]} {t[2]}"
        ),
        st.tuples(
            s, st.sampled_from(["A", "g", "-"]), st.sampled_from(OPS), st.integers(-1, 8)
        ).map(lambda t: f'{t[0]}.indexOf("{t[1]}") {t[2]} {t[3]}'),
    )


def _comparison() -> st.SearchStrategy[str]:
    literal = _literal()
    value = st.one_of(_any_attribute(), literal)
    return st.one_of(
        st.tuples(_any_attribute(), st.sampled_from(OPS), literal).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"
        ),
        st.tuples(value, st.sampled_from(OPS), value).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(_any_attribute(), st.lists(literal, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} in [{', '.join(t[1])}]"
        ),
    )


def _more_atom() -> st.SearchStrategy[str]:
    """Arithmetic, concatenation, conversions, map sizes and membership, list macros (over an
    attribute guarded with has(): on a failing body cel-python says "no such overload" where
    cel-go passes the body's own error on, the one wording difference left)."""
    d = f'device.attributes["{DOMAIN}"]'
    ints = st.sampled_from(INTS)
    strings = st.sampled_from(STRINGS).map(lambda n: f"{d}.{n}")
    number = st.sampled_from(["0", "1", "2", "-1", "9223372036854775807"])
    return st.one_of(
        st.tuples(ints, st.sampled_from("+-*/%"), number, st.sampled_from(OPS), number).map(
            lambda t: f"{d}.{t[0]} {t[1]} {t[2]} {t[3]} {t[4]}"
        ),
        strings.map(lambda a: f'{a} + "x" == "gpux"'),
        st.sampled_from(
            [
                f"size({d}) > 5",
                f"size({d}) == 12",
                f'"{DOMAIN}" in device.attributes',
                f'"numaNode" in {d}',
                '"other.example.com" in device.attributes',
                "size(device.capacity) == 1",
                'isSemver("1.2.3")',
                'isSemver("1.2")',
                'isQuantity("1u")',
                'isQuantity("x")',
                'quantity("1.5").asApproximateFloat() == 1.5',
                'quantity("1Ki") == quantity("1024")',
            ]
        ),
        ints.map(lambda n: f"has({d}.{n}) && [0, 1, 2].exists(x, x == {d}.{n})"),
        ints.map(lambda n: f"has({d}.{n}) && [0, 1, 2].all(x, x != {d}.{n})"),
        ints.map(lambda n: f'string({d}.{n}) == "0"'),
        ints.map(lambda n: f"double({d}.{n}) == 0.0"),
        ints.map(lambda n: f"type({d}.{n}) == int"),
        strings.map(lambda a: f"type({a}) == string"),
        strings.map(lambda a: f'{a}.split("-").size() > 1'),
        strings.map(lambda a: f'{a}.replace("-", "") != {a}'),
        strings.map(lambda a: f'{a}.lastIndexOf("-") > 2'),
        st.sampled_from(VERSIONS).map(lambda v: f"{d}.{v}.major() + 1 > 8"),
        _bind_or_two_variables(),
        _extension(),
    )


def _extension() -> st.SearchStrategy[str]:
    """cel-go's strings, lists and sets extensions, optional values, and Kubernetes' regex, IP,
    CIDR, URL and quantity functions, on attributes (a missing one's error passes through)."""
    d = f'device.attributes["{DOMAIN}"]'
    c = f'device.capacity["{DOMAIN}"]'
    strings = st.sampled_from((*STRINGS, "nope")).map(lambda n: f"{d}.{n}")
    ints = st.sampled_from((*INTS, "nope")).map(lambda n: f"{d}.{n}")
    capacities = st.sampled_from(CAPACITIES).map(lambda n: f"{c}.{n}")
    offset = st.sampled_from(["0", "1", "3", "40", "-1"])
    on_strings = (
        "{s}.charAt({i}) == \"N\"", "{s}.substring({i}).size() > 2", "{s}.indexOf(\"-\", {i}) > 0",
        "{s}.lastIndexOf(\"0\", {i}) >= 0", "{s}.split(\"-\", {i}).size() == 2",
        "{s}.replace(\"-\", \"\", {i}) != {s}", "{s}.find(\"[0-9]+\") != \"\"",
        "{s}.findAll(\"[A-Z]\", {i}).size() > 1", "[{s}, \"x\"].join(\"/\").size() > {i}",
        "strings.quote({s}).size() > {i}", "{s}.upperAscii().lowerAscii() == {s}.lowerAscii()",
        "{s}.substring(1, {i}) == \"PU\"", "isIP({s}) || isCIDR({s}) || isURL({s})",
        "optional.ofNonZeroValue({s}).hasValue()",
        "{s}.split(\" \").last().orValue(\"\").size() > {i}",
        "{s}.split(\"-\").first().optMap(x, x.size()).orValue(0) == {i}",
        "format.dns1123Label().validate({s}).hasValue()",
        "format.named(\"labelValue\").value().validate({s}).orValue([]).size() == {i}",
    )  # fmt: skip
    on_ints = (
        # An attribute is dyn: a literal beside it in a list is made dyn (cel-go wants one type).
        "[{n}, dyn({i})].min() == 0", "[{n}, dyn({i}), dyn(1)].max() > 1",
        "[{n}, dyn({i})].sum() > 2", "[{n}, dyn({i})].isSorted()",
        "[{n}, dyn({i}), dyn(1)].distinct().size() == 2", "[{n}, dyn({i})].sort()[0] == {n}",
        "lists.range({i}).exists(x, x == {n})", "sets.contains([0, 1, 2], [{n}])",
        "sets.intersects([{i}], [{n}])", "sets.equivalent([{n}, dyn({i})], [dyn({i}), {n}])",
        "[dyn({i}), {n}].slice(1, 2) == [{n}]", "[{n}, dyn({i})].reverse()[0] == {i}",
        "[dyn({i}), {n}].sortBy(x, -x)[0] == {n}", "[dyn({i}), {n}].indexOf({n}) == 1",
        "[[{n}], [dyn({i})]].flatten().lastIndexOf({n}) >= 0", "[{n}, {i}].size() == 2",
    )  # fmt: skip
    on_capacities = (
        "{q}.add(quantity(\"1Gi\")).isGreaterThan(quantity(\"40Gi\"))", "{q}.sub({i}).isInteger()",
        "sign({q}.sub(quantity(\"1500m\"))) == 1", "{q}.add({i}).compareTo({q}) >= 0",
    )  # fmt: skip
    optional = st.sampled_from(STRINGS + INTS + VERSIONS + MISSING).map(
        lambda n: st.sampled_from(
            [
                f"{d}.?{n}.hasValue()",
                f'{d}[?"{n}"].orValue(dyn(0)) == 0',
                f'{d}.?{n}.orValue("") == ""',
                f"{d}.?{n} == optional.none()",
                f"device.attributes.?other.{n}.hasValue()"
                f' || {d}.?{n}.optMap(v, v != "").orValue(false)',
            ]
        )
    )
    constant = st.sampled_from(
        [
            'ip("10.0.0.1").family() == 4',
            'cidr("10.0.0.0/8").containsIP(ip("10.1.2.3"))',
            'cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16")',
            'url("https://example.com:8443/x?a=1").getPort() == "8443"',
            'ip.isCanonical("2001:db8::1")',
            'semver("v550.54", true).isLessThan(semver("550.54.15"))',
            'isSemver("1.2", true) && !isSemver("1.2")',
        ]
    )
    return st.one_of(
        st.tuples(st.sampled_from(on_strings), strings, offset).map(
            lambda t: t[0].format(s=t[1], i=t[2])
        ),
        st.tuples(st.sampled_from(on_ints), ints, offset).map(
            lambda t: t[0].format(n=t[1], i=t[2])
        ),
        st.tuples(st.sampled_from(on_capacities), capacities, offset).map(
            lambda t: t[0].format(q=t[1], i=t[2])
        ),
        optional.flatmap(lambda strategy: strategy),
        constant,
    )


def _bind_or_two_variables() -> st.SearchStrategy[str]:
    """`cel.bind` and the two-variable comprehensions (cel-go's bindings and comprehensions
    extensions), over the attributes map, whose values differ in type (a semver beside an int)."""
    d = f'device.attributes["{DOMAIN}"]'
    ints = st.sampled_from(INTS)
    strings = st.sampled_from(STRINGS)
    return st.one_of(
        ints.map(lambda n: f"cel.bind(a, {d}, has(a.{n}) && a.{n} >= 1)"),
        ints.map(lambda n: f"cel.bind(a, {d}, a.{n} >= 1)"),
        strings.map(lambda n: f'cel.bind(s, {d}.{n}, s.startsWith("N") || s.size() > 3)'),
        st.sampled_from(VERSIONS).map(
            lambda v: f'cel.bind(v, {d}.{v}, v.isGreaterThan(semver("8.0.0")) && v.major() < 600)'
        ),
        ints.map(lambda n: f'{d}.exists(k, v, k == "{n}" && v == 0)'),
        ints.map(lambda n: f'{d}.existsOne(k, v, k == "{n}" && v > 0)'),
        ints.map(lambda n: f"{d}.exists_one(k, v, v == 0)"),
        strings.map(lambda n: f'{d}.all(k, v, k != "{n}" || v != "")'),
        st.sampled_from(
            [
                f"{d}.all(k, v, v != 0)",
                f"{d}.transformList(k, v, k).size() > 8",
                f'{d}.transformList(k, v, k.startsWith("p"), v).size() == 3',
                f'{d}.transformMap(k, v, k.startsWith("p"), k).size() == 3',
                f'{d}.transformMapEntry(k, v, {{k: k}})["type"] == "type"',
                f"{d}.type.transformList(i, v, v).size() == 1",
                "[0, 1, 2].all(i, x, x == i)",
                "[3, 2, 1].transformList(i, x, x * i) == [0, 2, 2]",
                f"[0, 1].exists(i, x, x == {d}.index)",
                f"cel.bind(x, 1 / 0, {d}.index == 0)",
                f"cel.bind(x, 1 / 0, x == {d}.index)",
            ]
        ),
    )


def _atom() -> st.SearchStrategy[str]:
    return st.one_of(
        _comparison(),
        _more_atom(),
        _quantity_atom(),
        _version_atom(),
        _string_atom(),
        st.sampled_from(STRINGS + INTS + BOOLS + VERSIONS + MISSING).map(
            lambda n: f'has(device.attributes["{DOMAIN}"].{n})'
        ),
        st.sampled_from(CAPACITIES).map(lambda c: f'has(device.capacity["{DOMAIN}"].{c})'),
        st.sampled_from(BOOLS).flatmap(_attribute),
        st.sampled_from(
            [
                f'device.driver == "{DOMAIN}"',
                "device.allowMultipleAllocations",
                "!device.allowMultipleAllocations",
                "true",
                "false",
            ]
        ),
    )


def expressions() -> st.SearchStrategy[str]:
    """A selector: atoms combined with !, &&, || and ?: (one strategy, built once)."""
    return _EXPRESSIONS


def _expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        _atom(),
        lambda inner: st.one_of(
            inner.map(lambda e: f"!({e})"),
            st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(
                lambda t: f"({t[0]}) {t[1]} ({t[2]})"
            ),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]}) ? ({t[1]}) : ({t[2]})"),
        ),
        max_leaves=4,
    )


_EXPRESSIONS = _expressions()


#: Mistakes a user makes in a selector, each a rewrite of a generated one: a function name one
#: letter short, a misspelt variable, a quantity compared with a number, a string compared with
#: a number, an attribute used as the whole expression, a method of another type, an unquoted
#: domain, a heterogeneous list.
_MISTAKES = (
    (".contains(", ".contain("),
    (".startsWith(", ".startWith("),
    (".matches(", ".match("),
    ("quantity(", "quantty("),
    ("semver(", "semVer("),
    (".compareTo(", ".compare("),
    (".isGreaterThan(", ".greaterThan("),
    ("device.", "devices."),
    ("device.attributes", "device.attribute"),
    (".asInteger()", ""),
    ('.compareTo(quantity("1")) ', " "),
    ("lowerAscii()", "lowerAscii"),
    ('device.driver == "gpu.drasat.io"', "device.driver == 1"),
    ('device.driver == "gpu.drasat.io"', "device.driver"),
    ('device.driver == "gpu.drasat.io"', "device.driver == gpu.drasat.io"),
    (".size()", ".len()"),
    ("in [", 'in ["x", 1, '),
    ("true", "1"),
    ("has(", "exists("),
    ("cel.bind(a, ", "cel.bind(a.b, "),
    ("exists(k, v, ", "exists(k, k, "),
    ("existsOne(k, v, ", "existsOne(k, "),
)


def with_mistakes() -> st.SearchStrategy[str]:
    """A generated selector, maybe with one of `_MISTAKES` made in it (one the API server may or
    may not refuse: the checker's verdict is compared, not assumed)."""
    return st.tuples(expressions(), st.lists(st.sampled_from(_MISTAKES), max_size=2)).map(
        lambda t: _rewrite(t[0], t[1])
    )


def _rewrite(expression: str, mistakes: list[tuple[str, str]]) -> str:
    for old, new in mistakes:
        expression = expression.replace(old, new, 1)
    return expression
