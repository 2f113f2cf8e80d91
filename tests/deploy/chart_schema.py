"""Keep the chart's values.schema.json in step with the AllocationPolicy JSON schema.

`policy.spec` in values.yaml is an AllocationPolicy spec, so values.schema.json embeds the
definitions of policies/allocationpolicy.schema.json (generated from the api models by
`make generate`): `helm install` then rejects a bad policy before anything is applied. After the
policy models change, refresh the copy:

    .venv/bin/python tests/deploy/chart_schema.py
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
VALUES_SCHEMA = REPO / "deploy" / "helm" / "drasat" / "values.schema.json"
POLICY_SCHEMA = REPO / "policies" / "allocationpolicy.schema.json"
SPEC_REF = "#/$defs/AllocationPolicySpec"


def policy_definitions() -> dict[str, Any]:
    schema = json.loads(POLICY_SCHEMA.read_text())
    assert schema["properties"]["spec"] == {"$ref": SPEC_REF}, "policy schema layout changed"
    definitions: dict[str, Any] = schema["$defs"]
    return definitions


def synced(values_schema: dict[str, Any]) -> dict[str, Any]:
    """values.schema.json with the policy definitions embedded and policy.spec pointing at them."""
    out = dict(values_schema)
    out["$schema"] = json.loads(POLICY_SCHEMA.read_text())["$schema"]
    out["$defs"] = policy_definitions()
    spec = out["properties"]["policy"]["properties"]["spec"]
    spec.clear()
    spec.update({"$ref": SPEC_REF, "description": "AllocationPolicy spec (policy.drasat.io)."})
    return out


def main() -> None:
    current = json.loads(VALUES_SCHEMA.read_text())
    VALUES_SCHEMA.write_text(json.dumps(synced(current), indent=2) + "\n")
    print(f"wrote {VALUES_SCHEMA.relative_to(REPO)}")


if __name__ == "__main__":
    main()
