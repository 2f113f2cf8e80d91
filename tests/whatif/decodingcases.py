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


def _job(spec: Obj) -> Obj:
    template = {"spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": template, **spec},
    }


def _pod(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


_EXACTLY = "Go struct field ExactDeviceRequest.spec.devices.requests.exactly"
#: apimachinery's words for a quantity it cannot parse (they name no field).
_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)

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
    "a command as a string": (
        _pod({"containers": [{"name": "c", "image": "x", "command": "sleep 3600"}]}),
        "cannot unmarshal string into Go struct field Container.spec.containers.command of type "
        "[]string",
    ),
    "an argument as a list": (
        _pod({"containers": [{"name": "c", "image": "x", "args": [["x"]]}]}),
        "cannot unmarshal array into Go struct field Container.spec.containers.args of type string",
    ),
    "env as a map": (
        _pod({"containers": [{"name": "c", "image": "x", "env": {"A": "b"}}]}),
        "cannot unmarshal object into Go struct field Container.spec.containers.env of type "
        "[]v1.EnvVar",
    ),
    "a container port as a string": (
        _pod({"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": "80"}]}]}),
        "cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports."
        "containerPort of type int32",
    ),
    "a label's value as a number": (
        {
            **_pod({"containers": [{"name": "c", "image": "x"}]}),
            "metadata": {"name": "p", "labels": {"a": 5}},
        },
        "cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
    ),
    "a probe's port as a fraction": (
        _pod(
            {
                "containers": [
                    {"name": "c", "image": "x", "readinessProbe": {"tcpSocket": {"port": 1.5}}}
                ]
            }
        ),
        "cannot unmarshal number 1.5 into Go struct field TCPSocketAction.spec.containers."
        "readinessProbe.ProbeHandler.tcpSocket.port of type int32",
    ),
    "a claim's status results not a list": (
        {**_claim(), "status": {"allocation": {"devices": {"results": "x"}}}},
        "cannot unmarshal string into Go struct field DeviceAllocationResult.status.allocation."
        "devices.results of type []v1.DeviceRequestAllocationResult",
    ),
    "a PodGroup's minCount as a string": (
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": "2"}}},
        },
        "cannot unmarshal string into Go struct field GangSchedulingPolicy.spec.schedulingPolicy."
        "gang.minCount of type int32",
    ),
    "an unknown field in a pod's spec": (
        _pod({"containers": [{"name": "c", "image": "x"}], "foo": 1}),
        'strict decoding error: unknown field "spec.foo"',
    ),
    "an unknown field beside a claim reference the server's validation refuses": (
        _pod(
            {
                "foo": 1,
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}
                ],
                "containers": [
                    {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}
                ],
            }
        ),
        'strict decoding error: unknown field "spec.foo"',
    ),
    "an unknown field in a container": (
        _pod({"containers": [{"name": "c", "image": "x", "imagePullPolic": "Always"}]}),
        'strict decoding error: unknown field "spec.containers[0].imagePullPolic"',
    ),
    "a field name in the wrong case": (
        _pod({"containers": [{"name": "c", "image": "x"}], "nodeselector": {"a": "b"}}),
        'strict decoding error: unknown field "spec.nodeselector"',
    ),
    "an unknown field deep in a probe": (
        _pod(
            {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "livenessProbe": {"exec": {"command": ["true"], "timeout": 1}},
                    }
                ]
            }
        ),
        'strict decoding error: unknown field "spec.containers[0].livenessProbe.exec.timeout"',
    ),
    "two unknown fields": (
        _pod({"bar": 2, "containers": [{"name": "c", "image": "x", "foo": 1}]}),
        'strict decoding error: unknown field "spec.bar", unknown field "spec.containers[0].foo"',
    ),
    "an unknown field in a Deployment's template": (
        {
            **_deployment(1),
            "spec": {
                **_deployment(1)["spec"],
                "template": {
                    "metadata": {"labels": {"a": "b"}, "lables": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
        'strict decoding error: unknown field "spec.template.metadata.lables"',
    ),
    "an unknown field in a Job's spec": (
        _job({"paralellism": 2}),
        'strict decoding error: unknown field "spec.paralellism"',
    ),
    "an unknown field in a DaemonSet's template": (
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x", "imagePullPolic": "x"}]},
                },
            },
        },
        'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolic"',
    ),
    "an unknown field in a CronJob's job template": (
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "cj"},
            "spec": {
                "schedule": "0 0 * * *",
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [{"name": "c", "image": "x", "foo": 1}],
                                "restartPolicy": "Never",
                            }
                        }
                    }
                },
            },
        },
        'strict decoding error: unknown field "spec.jobTemplate.spec.template.spec.containers[0].'
        'foo"',
    ),
    "a quantity with two dots": (
        _pod(
            {
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"memory": "1.5.3"}}}
                ]
            }
        ),
        _FORMAT_WRONG,
    ),
    "a quantity with a suffix in the wrong case": (
        _pod(
            {
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {"memory": "1ki"}}}
                ]
            }
        ),
        "unable to parse quantity's suffix",
    ),
    "a bool for a quantity": (
        _pod(
            {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": True}}}]}
        ),
        _FORMAT_WRONG,
    ),
    "a quantity after a value of the wrong type": (
        _pod(
            {
                "activeDeadlineSeconds": "5",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1 000"}}}
                ],
            }
        ),
        _FORMAT_WRONG,
    ),
    "a claim's capacity request that does not parse": (
        _claim(capacity={"requests": {"memory": "8 Gi"}}),
        _FORMAT_WRONG,
    ),
}
