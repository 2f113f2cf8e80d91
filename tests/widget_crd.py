"""The widget CRD: a small hand-written custom resource for API-server tests (the simulator's own
tests and the contract tests that hold it to the real API server)."""

from __future__ import annotations

from typing import Any

#: Defaults, an enum, bounds, preserved unknown fields, a CEL rule on list items, a status
#: subresource.
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.drasat.io"},
    "spec": {
        "group": "test.drasat.io",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "listKind": "WidgetList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {
                                        "type": "string",
                                        "enum": ["red", "blue"],
                                        "default": "red",
                                    },
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                    "parts": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {"weight": {"type": "integer"}},
                                            "x-kubernetes-validations": [
                                                {
                                                    "rule": "self.weight > 0",
                                                    "message": "parts weigh something",
                                                }
                                            ],
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"ready": {"type": "boolean"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}
