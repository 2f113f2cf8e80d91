"""The purely computational parts of the simulators: selectors, patches, routes, node choice."""

from __future__ import annotations

from typing import Any

import pytest

from drasat.testbed.sim import (
    errors,
    labelselectors,
    patching,
    resources,
    routing,
    scheduling,
    validation,
)


@pytest.mark.parametrize("text", ["a in (x", "a notin", "=x", "a b c"])
def test_bad_label_selectors_are_400(text: str) -> None:
    with pytest.raises(errors.ApiError) as caught:
        labelselectors.parse_labels(text)
    assert caught.value.code == 400


def test_label_requirements_match_like_kubernetes() -> None:
    reqs = labelselectors.parse_labels("env in (prod, staging),tier!=db,!legacy")
    assert labelselectors.matches({"metadata": {"labels": {"env": "prod"}}}, labels=reqs, fields=[])
    assert not labelselectors.matches(
        {"metadata": {"labels": {"env": "prod", "legacy": "1"}}}, labels=reqs, fields=[]
    )
    assert not labelselectors.matches({"metadata": {}}, labels=reqs, fields=[])


def test_field_values_of_missing_and_boolean_fields() -> None:
    assert labelselectors.field_value({"spec": {}}, "spec.nodeName") == ""
    assert labelselectors.field_value({"spec": {"x": True}}, "spec.x") == "true"


def test_merge_patch_rfc7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert patching.merge(target, {"a": {"b": None, "d": 3}, "l": [3]}) == {
        "a": {"c": 2, "d": 3},
        "l": [3],
    }
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2]}  # input unchanged


def test_json_patch_operations() -> None:
    doc: dict[str, Any] = {"a": [1, 2, 3], "b": {"c": "x"}, "d~/e": 1}
    ops = [
        {"op": "add", "path": "/a/1", "value": 9},
        {"op": "add", "path": "/a/-", "value": 7},
        {"op": "remove", "path": "/a/0"},
        {"op": "move", "from": "/b/c", "path": "/moved"},
        {"op": "copy", "from": "/moved", "path": "/copied"},
        {"op": "replace", "path": "/d~0~1e", "value": 2},
    ]
    assert patching.json_patch(doc, ops) == {
        "a": [9, 2, 3, 7],
        "b": {},
        "moved": "x",
        "copied": "x",
        "d~/e": 2,
    }


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/a/5", "value": 1}],
    ],
)
def test_failing_json_patches(ops: list[dict[str, Any]]) -> None:
    with pytest.raises(errors.ApiError) as caught:
        patching.json_patch({"a": [1]}, ops)
    assert caught.value.code == 422


def plural(group: str, version: str, word: str) -> bool:
    return word in ("pods", "resourceclaims")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/api/v1/namespaces/ns/pods/p/status",
            routing.Route("", "v1", "pods", "ns", "p", "status"),
        ),
        ("/api/v1/namespaces/ns", routing.Route("", "v1", "namespaces", None, "ns")),
        (
            "/api/v1/namespaces/ns/status",
            routing.Route("", "v1", "namespaces", None, "ns", "status"),
        ),
        ("/api/v1/pods", routing.Route("", "v1", "pods")),
        (
            "/apis/resource.k8s.io/v1alpha2/namespaces/d/resourceclaims",
            routing.Route("resource.k8s.io", "v1alpha2", "resourceclaims", "d"),
        ),
        (
            "/apis/resource.k8s.io/v1alpha2/resourceclasses/gpu",
            routing.Route("resource.k8s.io", "v1alpha2", "resourceclasses", None, "gpu"),
        ),
        ("/apis/resource.k8s.io", routing.Discovery("group", group="resource.k8s.io")),
        ("/version", routing.Discovery("version")),
        ("/healthz", None),
    ],
)
def test_routes(path: str, expected: object) -> None:
    assert routing.parse(path, is_plural=plural) == expected


def test_field_paths() -> None:
    assert validation.field_path(["spec", "containers", 0, "name"]) == "spec.containers[0].name"


NODE = {"metadata": {"name": "n1", "labels": {"gpu": "a100", "count": "4"}}}


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "count", "operator": "Gt", "values": ["3"]}]}, True),
        ({"matchExpressions": [{"key": "count", "operator": "Lt", "values": ["3"]}]}, False),
        ({}, False),  # an empty term matches nothing
    ],
)
def test_node_selector_terms(term: dict[str, Any], matches: bool) -> None:
    assert scheduling.node_selector_matches({"nodeSelectorTerms": [term]}, NODE) is matches


def test_candidate_nodes_follow_node_selector_and_allocations() -> None:
    nodes = [
        {"metadata": {"name": n, "labels": {"zone": z}}}
        for n, z in (("b", "x"), ("a", "x"), ("c", "y"))
    ]
    pod = {"spec": {"nodeSelector": {"zone": "x"}}}
    assert scheduling.candidate_nodes(pod, nodes, []) == ["a", "b"]
    allocated = [
        {
            "status": {
                "allocation": {
                    "availableOnNodes": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["b"]}
                                ]
                            }
                        ]
                    }
                }
            }
        }
    ]
    assert scheduling.candidate_nodes(pod, nodes, allocated) == ["b"]


def test_pod_claims_in_both_shapes() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "a", "source": {"resourceClaimTemplateName": "t"}},
                {"name": "b", "resourceClaimName": "shared"},
            ]
        }
    }
    claims = scheduling.pod_claims(pod)
    assert [c.resolved_name("p") for c in claims] == ["p-a", "shared"]
    assert scheduling.suitable_nodes(["n1", "n2"], {"a": ["n1"], "b": ["n2"]}, ["a"]) == ["n2"]


POD_KEYS = patching.strategic_keys("v1", "Pod")


def test_strategic_merge_merges_lists_by_key() -> None:
    pod = {
        "metadata": {"finalizers": ["a"]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "hostIPs": [{"ip": "1"}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b", "a"]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ],
            "hostIPs": [{"ip": "2"}],
        },
    }
    merged = patching.strategic_merge(pod, patch, POD_KEYS)
    assert merged["metadata"]["finalizers"] == ["a", "b"]  # a set union
    assert merged["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]
    assert merged["status"]["hostIPs"] == [{"ip": "2"}]  # no merge key: replaced


def test_strategic_merge_directives() -> None:
    pod = {
        "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
        "status": {"conditions": [{"type": "Ready"}, {"type": "PodScheduled"}]},
    }
    patch = {
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": ["a"],
            "$setElementOrder/finalizers": ["b"],
            "labels": {"$patch": "replace", "z": "3"},
        },
        "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
    }
    merged = patching.strategic_merge(pod, patch, POD_KEYS)
    assert merged == {
        "metadata": {"finalizers": ["b"], "labels": {"z": "3"}},
        "status": {"conditions": [{"type": "PodScheduled"}]},
    }
    with pytest.raises(errors.ApiError):
        patching.strategic_merge(pod, {"status": {"conditions": [{"status": "x"}]}}, POD_KEYS)


def test_cel_rules_beyond_cel_python_are_not_enforced() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-validations": [
                    {"rule": "self.a ==", "message": "unparsable"},
                    {
                        "rule": "quantity(self.m).isGreaterThan(quantity('1'))",
                        "message": "no quantity()",
                    },
                    {"rule": "self.nokey == 1"},
                ],
            }
        },
    }
    rt = resources.ResourceType(
        "t.io", "v1", "things", "Thing", namespaced=True, has_status=False, custom=True
    )
    validator = validation.Validator()
    validator.register_crd_version(rt, schema)
    found = validator.causes(rt, {"metadata": {"name": "x"}, "spec": {"m": "2"}})
    # Only the rule cel-python can evaluate is applied, with a short message.
    assert found == [
        ("spec", "no such member in mapping: 'nokey' evaluating rule: self.nokey == 1")
    ]
