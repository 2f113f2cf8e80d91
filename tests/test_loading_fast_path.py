"""Reading YAML with libyaml's own composer (`loading._read_plain`) gives exactly what the
bounded composer gives: the same data for what it accepts, and for anything the bounds could
refuse it declines, so the bounded composer reads the input again and gives its one refusal."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat import loading
from drasat.api.inputerrors import InputError

MANIFEST = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t4, namespace: team-a}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.drasat.io
          count: 2
          selectors:
          - cel:
              expression: device.attributes['gpu.drasat.io'].productName != 'A100' &&
                device.capacity['gpu.drasat.io'].memory.compareTo(quantity('16Gi')) >= 0
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: team-a, labels: {app: yes, at: 2001-12-14}}
spec:
  replicas: 9223372036854775807
  template:
    spec:
      containers: [{name: c, image: "x:1", args: [!!str 12, !!float 1, 0x1f, 1.5e3, ~, null]}]
"""


def _outcome(text: str, limits: loading.Limits, *, fast: bool) -> Any:
    """The documents' data, or the refusal's text; `fast`: as `parse_documents` reads."""
    original = loading._read_plain
    try:
        if not fast:
            loading._read_plain = lambda text, limits: None  # type: ignore[assignment]
        return [d.data for d in loading.parse_documents(text, "x.yaml", limits=limits)]
    except InputError as error:
        return str(error)
    finally:
        loading._read_plain = original  # type: ignore[assignment]


def test_libyamls_composer_reads_plain_manifests_as_the_bounded_composer_does() -> None:
    limits = loading.Limits()
    read = loading._read_plain(MANIFEST, limits)
    assert read is not None, "a plain manifest (with && and != in CEL) takes the fast reading"
    assert read == loading._read_bounded(MANIFEST, "x.yaml", limits)
    assert read[1]["metadata"]["labels"] == {"app": True, "at": "2001-12-14"}


@pytest.mark.parametrize(
    "text",
    [
        "a: !!binary aGk=",
        "a: !!set {b}",
        "a: !foo 1",
        "a: !!str {b: 1}",
        "a: !!map [1]",
        "a: !!seq {b: 1}",
        "a: !!int 1.5",
        "a: !!bool 1",
        "a: 9223372036854775808",
        "a: -9223372036854775809",
        "a: 0x_",
        "a: [[[[[[1]]]]]]",  # deeper than the limit of 5 below
        "a: &a [1, 2, 3]\nb: [*a, *a]\n",  # aliases past the limit of 5 below
        "a: &a [*a]",
        "a: &x 1\nb: &x 2\n",
        "<<: {a: 1}",  # a merge key: its tag is implicit or explicit, the node cannot tell
        "a: [1,",
    ],
)
def test_libyamls_composer_declines_what_the_bounds_could_refuse(text: str) -> None:
    limits = loading.Limits(max_depth=5, max_alias_nodes=5)
    assert loading._read_plain(text, limits) is None
    assert _outcome(text, limits, fast=True) == _outcome(text, limits, fast=False)


@pytest.mark.parametrize("most", [8, 9, 11, 12])
def test_aliases_are_read_by_libyamls_composer_as_far_as_the_bounded_one_counts(most: int) -> None:
    """An alias adds its node's expanded size, as `_BoundedComposer` counts it (here 3 x 3 of
    9 nodes); the data shares the aliased object, as SafeConstructor's does."""
    text = "a: &x [1, 2]\nb: [*x, *x, *x]\n---\nc: &y {d: 1}\ne: *y\n"
    limits = loading.Limits(max_alias_nodes=most)
    read = loading._read_plain(text, limits)
    assert _outcome(text, limits, fast=True) == _outcome(text, limits, fast=False)
    # 9 from the first document's aliases, then 3 ({d: 1}: the mapping, its key and value).
    assert (read is None) == (most < 12)
    assert loading._read_plain(text, loading.Limits(max_alias_nodes=12)) == [
        {"a": [1, 2], "b": [[1, 2], [1, 2], [1, 2]]},
        {"c": {"d": 1}, "e": {"d": 1}},
    ]
    shared = loading._read_plain(text, loading.Limits(max_alias_nodes=12))
    assert shared is not None and shared[0]["b"][0] is shared[0]["a"]


def test_nesting_up_to_the_limit_is_read_by_libyamls_composer() -> None:
    limits = loading.Limits(max_depth=5)
    assert loading._read_plain("a: [[[[1]]]]", limits) == [{"a": [[[[1]]]]}]
    assert loading._read_plain("a: [[[[[1]]]]]", limits) is None


_SCALARS = st.sampled_from(
    [
        "1", "-1", "0x1F", "0o17", "017", "1_000", "1:20", "9223372036854775807",
        "9223372036854775808", "0b_", "1.5", ".inf", "yes", "No", "~", "null", "''", "x",
        "'12'", "2001-12-14", "=", "!!int 12", "!!int '12'", "!!int x", "!!float 1",
        "!!bool yes", "!!bool 1", "!!str 1", "!!null", "!!null x", "!foo x", "! 12",
        "!!timestamp 2001-12-14", "*a", "*b", "&a 1", "&b x",
    ]
)  # fmt: skip


def _node(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    prefix = st.sampled_from(["", "&a ", "&b ", "!!seq ", "!!map ", "!x ", "! "])
    seq = st.builds(lambda p, items: f"{p}[{', '.join(items)}]", prefix, st.lists(children))
    mapping = st.builds(
        lambda p, items: p + "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}",
        prefix,
        st.lists(st.tuples(st.sampled_from(["k", "j", "<<", "1", "*a"]), children)),
    )
    return seq | mapping


@settings(max_examples=300, deadline=None)
@given(
    documents=st.lists(
        st.builds(lambda v: "{d: " + v + "}", st.recursive(_SCALARS, _node, max_leaves=12)),
        min_size=1,
        max_size=3,
    ),
    max_depth=st.integers(1, 6),
    max_alias_nodes=st.integers(1, 20),
)
def test_the_fast_reading_changes_no_answer(
    documents: list[str], max_depth: int, max_alias_nodes: int
) -> None:
    text = "\n---\n".join(documents)
    limits = loading.Limits(max_depth=max_depth, max_alias_nodes=max_alias_nodes)
    assert _outcome(text, limits, fast=True) == _outcome(text, limits, fast=False)
