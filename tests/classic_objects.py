"""Classic DRA (`resource.k8s.io/v1alpha2`) objects and cases shared by the simulator's own tests
(tests/sim) and the contract tests that hold it to kube-apiserver v1.30.14 (tests/contract)."""

from __future__ import annotations

from typing import Any


def claim(name: str, **spec: Any) -> dict[str, Any]:
    """A classic ResourceClaim of the class gpu.drasat.io; `spec` adds or replaces spec fields."""
    return {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"resourceClassName": "gpu.drasat.io", **spec},
    }


#: (plural, body, field): a create the classic kinds' semantic rules refuse (422), and the field
#: path of one of its causes.
SEMANTIC_RULE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("resourceclaims", claim("c", allocationMode="Sometimes"), "spec.allocationMode"),
    ("resourceclaims", claim("c", resourceClassName="Not A Name"), "spec.resourceClassName"),
    (
        "resourceclaims",
        claim("c", parametersRef={"kind": "GpuClaimParameters"}),
        "spec.parametersRef.name",
    ),
    (
        "resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {"spec": {"resourceClassName": "x", "allocationMode": "Later"}},
        },
        "spec.spec.allocationMode",
    ),
    (
        "podschedulingcontexts",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "PodSchedulingContext",
            "metadata": {"name": "p"},
            "spec": {"potentialNodes": [f"n{i}" for i in range(129)]},
        },
        "spec.potentialNodes",
    ),
]
