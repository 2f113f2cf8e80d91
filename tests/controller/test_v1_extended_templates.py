"""controller/extended.TemplateKeeper: the ResourceClaimTemplates of pods converted from
`nvidia.com/gpu` are created once, in each pod's namespace, and only for pending pods; one that
exists already (or that someone else created first) is left as it is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from drasat.controller import extended as keeper
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver
from drasat.v1 import extended

Obj = dict[str, Any]


@pytest.fixture
def api() -> Iterator[KubeClient]:
    with apiserver.ApiServer.running() as server:
        client = KubeClient(configuration_for(server.url), request_timeout=10)
        yield client
        client.close()


def _pod(namespace: str, count: int, node: str = "") -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"limits": {extended.RESOURCE: count}}}]}
    if node:
        spec["nodeName"] = node
    converted = extended.convert(spec).spec
    return {"metadata": {"namespace": namespace, "name": f"p{count}"}, "spec": converted}


def _templates(api: KubeClient, namespace: str) -> list[str]:
    listed = api.list(r.RESOURCE_CLAIM_TEMPLATES_V1, namespace=namespace).items
    return sorted(t["metadata"]["name"] for t in listed)


def test_templates_are_made_once_per_namespace_and_count(api: KubeClient) -> None:
    made = keeper.TemplateKeeper(api)
    pods = [_pod("a", 1), _pod("a", 2), _pod("b", 1), _pod("c", 4, node="n1")]
    assert made.ensure(pods) == [
        "a/drasat-nvidia-com-gpu-1",
        "a/drasat-nvidia-com-gpu-2",
        "b/drasat-nvidia-com-gpu-1",
    ]
    assert _templates(api, "a") == ["drasat-nvidia-com-gpu-1", "drasat-nvidia-com-gpu-2"]
    assert _templates(api, "c") == []  # a bound pod's claims exist already
    assert made.ensure(pods) == []  # known: not asked again
    body = api.get(r.RESOURCE_CLAIM_TEMPLATES_V1, "drasat-nvidia-com-gpu-2", namespace="a")
    (request,) = body["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.drasat.io"
    assert request["exactly"]["count"] == 2


def test_a_template_someone_made_first_is_left_alone(api: KubeClient) -> None:
    theirs = extended.template("a", 1)
    theirs["metadata"]["labels"] = {"owner": "someone"}
    api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, theirs, namespace="a")
    assert keeper.TemplateKeeper(api).ensure([_pod("a", 1)]) == []
    body = api.get(r.RESOURCE_CLAIM_TEMPLATES_V1, "drasat-nvidia-com-gpu-1", namespace="a")
    assert body["metadata"]["labels"] == {"owner": "someone"}


def test_a_template_deleted_while_pods_name_it_is_made_again_after_the_recheck(
    api: KubeClient,
) -> None:
    now = [0.0]
    made = keeper.TemplateKeeper(api, recheck_s=60, clock=lambda: now[0])
    pods = [_pod("a", 1)]
    assert made.ensure(pods) == ["a/drasat-nvidia-com-gpu-1"]
    api.delete(r.RESOURCE_CLAIM_TEMPLATES_V1, "drasat-nvidia-com-gpu-1", namespace="a")
    now[0] = 30.0
    assert made.ensure(pods) == []  # not asked again within the period
    now[0] = 61.0
    assert made.ensure(pods) == ["a/drasat-nvidia-com-gpu-1"]


def _class(name: str, resource: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": "true"}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return {"metadata": {"name": name}, "spec": spec}


def _template_class(api: KubeClient, namespace: str, name: str) -> str:
    body = api.get(r.RESOURCE_CLAIM_TEMPLATES_V1, name, namespace=namespace)
    return str(extended.template_class(body))


def test_the_templates_are_of_the_class_whose_extended_resource_name_it_is(
    api: KubeClient,
) -> None:
    # drasat allocating for NVIDIA's driver: NVIDIA's chart gives gpu.nvidia.com the resource.
    classes = [_class("gpu.nvidia.com", "nvidia.com/gpu"), _class("mig.nvidia.com")]
    made = keeper.TemplateKeeper(api)
    assert made.ensure([_pod("a", 1)], classes, ["gpu.nvidia.com"]) == ["a/drasat-nvidia-com-gpu-1"]
    assert _template_class(api, "a", "drasat-nvidia-com-gpu-1") == "gpu.nvidia.com"


def test_no_class_serving_the_resource_for_nvidias_driver_makes_no_template(
    api: KubeClient,
) -> None:
    made = keeper.TemplateKeeper(api)
    assert made.ensure([_pod("a", 1)], [_class("gpu.nvidia.com")], ["gpu.nvidia.com"]) == []
    assert _templates(api, "a") == []


def test_a_template_of_drasats_made_for_another_class_is_made_again(api: KubeClient) -> None:
    # Made when drasat's class served nvidia.com/gpu; NVIDIA's class names it now.
    now = [0.0]
    made = keeper.TemplateKeeper(api, recheck_s=60, clock=lambda: now[0])
    assert made.ensure([_pod("a", 1)], []) == ["a/drasat-nvidia-com-gpu-1"]
    assert _template_class(api, "a", "drasat-nvidia-com-gpu-1") == "gpu.drasat.io"
    classes = [_class("gpu.nvidia.com", "nvidia.com/gpu")]
    assert made.ensure([_pod("a", 1)], classes) == ["a/drasat-nvidia-com-gpu-1"]
    assert _template_class(api, "a", "drasat-nvidia-com-gpu-1") == "gpu.nvidia.com"
    # Someone else's template of that name is never replaced.
    theirs = extended.template("b", 1)
    theirs["metadata"]["labels"] = {"owner": "someone"}
    api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, theirs, namespace="b")
    assert made.ensure([_pod("b", 1)], classes) == []
    assert _template_class(api, "b", "drasat-nvidia-com-gpu-1") == "gpu.drasat.io"
