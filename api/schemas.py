"""JSON schemas of drasat's own files (not Kubernetes objects), generated from the models.

Purely computational: `drasat policy schema` prints the result and `policies/` holds the
checked-in copy (for editors and CI linters); a test fails when that copy is stale.
"""

from __future__ import annotations

from typing import Any

from drasat.api import groups
from drasat.api.policy import AllocationPolicy

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def allocation_policy() -> dict[str, Any]:
    """JSON schema of an AllocationPolicy file, as drasat accepts it."""
    schema = AllocationPolicy.model_json_schema(by_alias=True)
    # The model takes any apiVersion so that a wrong one gets a clear message from the loader;
    # an editor should flag it straight away.
    schema["properties"]["apiVersion"] = {
        "const": groups.POLICY_API_VERSION,
        "description": "Always policy.drasat.io/v1alpha1.",
        "type": "string",
    }
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}
