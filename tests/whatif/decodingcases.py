"""Objects kube-apiserver cannot decode, each with its words for the first problem (v1.37.2's
answer to a create with strict field validation, after `<Kind> in version "v1" cannot be handled
as a <Kind>: ` and `json: `): the common type mistakes of users' manifests. The what-if words
them alike (tests/whatif/test_whatif_decoding_words.py); the differential test asks the real
server again (tests/whatif/test_whatif_apiserver_oracle.py)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _claim(**exactly: Any) -> Obj:
    request = {"name": "r", "exactly": {"deviceClassName": "gpu.drasat.io", **exactly}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [request]}},
    }


def _deployment(replicas: Any) -> Obj:
    template = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"a": "b"}},
            "template": template,
        },
    }


def _pod(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


_EXACTLY = "Go struct field ExactDeviceRequest.spec.devices.requests.exactly"

#: (object, the server's words), by what is wrong.
CASES: dict[str, tuple[Obj, str]] = {
    "count as a string": (
        _claim(count="2"),
        f"cannot unmarshal string into {_EXACTLY}.count of type int64",
    ),
    "count as a fraction": (
        _claim(count=2.5),
        f"cannot unmarshal number 2.5 into {_EXACTLY}.count of type int64",
    ),
    "count as a bool": (
        _claim(count=True),
        f"cannot unmarshal bool into {_EXACTLY}.count of type int64",
    ),
    "adminAccess as a string": (
        _claim(adminAccess="yes"),
        f"cannot unmarshal string into {_EXACTLY}.adminAccess of type bool",
    ),
    "adminAccess as a number": (
        _claim(adminAccess=1),
        f"cannot unmarshal number into {_EXACTLY}.adminAccess of type bool",
    ),
    "selectors not a list": (
        _claim(selectors={"cel": {"expression": "true"}}),
        f"cannot unmarshal object into {_EXACTLY}.selectors of type []v1.DeviceSelector",
    ),
    "an unknown field": (
        _claim(cout=1),
        'strict decoding error: unknown field "spec.devices.requests[0].exactly.cout"',
    ),
    "replicas as a string": (
        _deployment("2"),
        "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
    ),
    "replicas as a fraction": (
        _deployment(1.5),
        "cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of type "
        "int32",
    ),
    "a container's claims not a list": (
        _pod({"containers": [{"name": "c", "image": "x", "resources": {"claims": {"name": "x"}}}]}),
        "cannot unmarshal object into Go struct field "
        "ResourceRequirements.spec.containers.resources.claims of type []v1.ResourceClaim",
    ),
    "containers not a list": (
        _pod({"containers": {"name": "c"}}),
        "cannot unmarshal object into Go struct field PodSpec.spec.containers of type "
        "[]v1.Container",
    ),
    "a container's name as a number": (
        _pod({"containers": [{"name": 5, "image": "x"}]}),
        "cannot unmarshal number into Go struct field Container.spec.containers.name of type "
        "string",
    ),
    "a template's count as a string": (
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {"spec": _claim(count="3")["spec"]},
        },
        "cannot unmarshal string into Go struct field "
        "ExactDeviceRequest.spec.spec.devices.requests.exactly.count of type int64",
    ),
    "a CEL expression as a number": (
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "dc"},
            "spec": {"selectors": [{"cel": {"expression": 5}}]},
        },
        "cannot unmarshal number into Go struct field "
        "CELDeviceSelector.spec.selectors.cel.expression of type string",
    ),
}
