"""`unknown_fields` answers a clean object by a walk that spells no paths: it must agree with
the walk that names them, for clean objects and for unknown fields at every depth."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from drasat.whatif import knownfields

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "b"}},
    "spec": {
        "containers": [
            {"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}},
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        "nodeSelector": {"k": "v"},
    },
}


def _with(path: tuple[Any, ...], field: str) -> dict[str, Any]:
    found = copy.deepcopy(POD)
    here: Any = found
    for step in path:
        here = here[step]
    here[field] = 1
    return found


def test_a_clean_pod_has_no_unknown_field() -> None:
    assert knownfields.unknown_fields(copy.deepcopy(POD)) == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ((), "bogus"),
        (("metadata",), "metadata.bogus"),
        (("spec",), "spec.bogus"),
        (("spec", "containers", 0), "spec.containers[0].bogus"),
        (
            ("spec", "containers", 0, "resources", "claims", 0),
            ("spec.containers[0].resources.claims[0].bogus"),
        ),
        (("spec", "resourceClaims", 0), "spec.resourceClaims[0].bogus"),
    ],
)
def test_an_unknown_field_at_any_depth_is_named(path: tuple[Any, ...], expected: str) -> None:
    assert knownfields.unknown_fields(_with(path, "bogus")) == [expected]
