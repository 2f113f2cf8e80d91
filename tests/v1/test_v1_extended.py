"""drasat.v1.extended: a pod's `nvidia.com/gpu` becomes claims of drasat's class from templates of
N GPUs, and the templates pending pods name are the ones the controller creates. The admission
policy (the same rule in CEL) is held to `convert` on the real API server in
tests/e2e/test_e2e_v1_extended.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drasat.v1 import extended

Obj = dict[str, Any]


def _gpus(n: Any, **more: Any) -> Obj:
    return {"limits": {"nvidia.com/gpu": n, **more}}


def test_each_long_lived_container_gets_its_own_claim_of_its_count() -> None:
    spec = {
        "initContainers": [{"name": "setup", "resources": _gpus("1")}],
        "containers": [
            {"name": "a", "resources": {**_gpus(2, cpu="1"), "requests": {"nvidia.com/gpu": 2}}},
            {"name": "b"},
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
        ],
    }
    converted = extended.convert(spec)
    assert converted.counts == (2, 1)
    out = converted.spec
    # The init container runs before them: it uses a's GPUs (below).
    assert out["initContainers"][0]["resources"] == {
        "limits": {},
        "claims": [{"name": "drasat-gpu-0"}],
    }
    assert out["containers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "requests": {},
        "claims": [{"name": "drasat-gpu-0"}],
    }
    assert out["containers"][1] == {"name": "b"}
    assert out["resourceClaims"] == [
        {"name": "drasat-gpu-0", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-2"},
        {"name": "drasat-gpu-2", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-1"},
    ]
    assert "resourceClaims" not in spec  # the input is not changed


def test_claims_the_pod_already_has_stay_first() -> None:
    spec = {
        "containers": [{"name": "c", "resources": {**_gpus("1"), "claims": [{"name": "mine"}]}}],
        "resourceClaims": [{"name": "mine", "resourceClaimName": "x"}],
    }
    out = extended.convert(spec).spec
    assert out["containers"][0]["resources"]["claims"] == [
        {"name": "mine"},
        {"name": "drasat-gpu-0"},
    ]
    assert [c["name"] for c in out["resourceClaims"]] == ["mine", "drasat-gpu-0"]


@pytest.mark.parametrize("limits", [{"cpu": "2"}, {"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": 0}])
def test_a_pod_that_asks_for_no_gpu_is_unchanged(limits: Obj) -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    converted = extended.convert(spec)
    assert not converted.changed and converted.spec == spec
    assert not extended.asks(spec)


@pytest.mark.parametrize("bad", ["1.5", "-1", "500m"])
def test_a_count_that_is_not_a_positive_whole_number_is_named(bad: str) -> None:
    spec = {"containers": [{"name": "c", "resources": _gpus(bad)}]}
    with pytest.raises(extended.ConversionError, match=r"spec\.containers\[0\]\.resources"):
        extended.convert(spec)


@pytest.mark.parametrize(
    "limits", [{"cpu": "2"}, {"nvidia.com/gpu": "0"}, _gpus("1500m")["limits"]]
)
def test_admission_leaves_alone_a_pod_asking_none_or_a_count_the_server_refuses(
    limits: Obj,
) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    assert extended.admitted(pod) is None


def test_admission_gives_the_pod_with_its_spec_converted_and_changes_no_input() -> None:
    """What the simulated API server's admission and the webhook apply (the demo's simulated
    cluster gives pods asking `nvidia.com/gpu` the claims the real API server's policy gives)."""
    spec = {"containers": [{"name": "c", "resources": _gpus("2")}]}
    pod = {"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": spec}
    admitted = extended.admitted(pod)
    assert admitted == {"metadata": pod["metadata"], "spec": extended.convert(spec).spec}
    assert admitted["metadata"] is not pod["metadata"]
    assert "resourceClaims" not in spec


def test_the_template_of_n_gpus() -> None:
    body = extended.template("team-a", 4)
    assert body["metadata"] == {
        "name": "drasat-nvidia-com-gpu-4",
        "namespace": "team-a",
        "labels": {"app.kubernetes.io/managed-by": "drasat"},
    }
    (request,) = body["spec"]["spec"]["devices"]["requests"]
    assert request == {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io", "count": 4}}
    assert extended.template_count("drasat-nvidia-com-gpu-4") == 4
    for other in ("drasat-nvidia-com-gpu-0", "one-gpu", "drasat-example-com-gpu-1"):
        assert extended.template_count(other) is None


def _pod(namespace: str, *templates: str, node: str = "") -> Obj:
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    spec: Obj = {"resourceClaims": claims}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"namespace": namespace, "name": "p"}, "spec": spec}


def test_missing_templates_are_those_pending_pods_name_each_once() -> None:
    pods = [
        _pod("a", "drasat-nvidia-com-gpu-1", "users-own"),
        _pod("a", "drasat-nvidia-com-gpu-1", "drasat-nvidia-com-gpu-2"),
        _pod("b", "drasat-nvidia-com-gpu-1"),
        _pod("c", "drasat-nvidia-com-gpu-8", node="bound"),  # running: its claims exist
    ]
    found = extended.missing_templates(pods, [("b", "drasat-nvidia-com-gpu-1")])
    assert [(t["metadata"]["namespace"], t["metadata"]["name"]) for t in found] == [
        ("a", "drasat-nvidia-com-gpu-1"),
        ("a", "drasat-nvidia-com-gpu-2"),
    ]


def test_the_admission_policy_matches_pod_creation_and_fails_closed() -> None:
    policy, binding = extended.admission_policy()
    assert policy["kind"] == "MutatingAdmissionPolicy"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["CREATE"])
    # A pod converted by a later policy's reinvocation is converted once: the condition no
    # longer matches once the resource is gone.
    assert spec["failurePolicy"] == "Fail" and spec["reinvocationPolicy"] == "IfNeeded"
    assert '"nvidia.com~1gpu"' in spec["mutations"][0]["jsonPatch"]["expression"]


def _containers() -> st.SearchStrategy[list[Obj]]:
    resources = st.fixed_dictionaries(
        {},
        optional={
            "limits": st.dictionaries(
                st.sampled_from(["nvidia.com/gpu", "cpu"]), st.sampled_from(["1", "2", "8"])
            ),
            "requests": st.dictionaries(st.just("memory"), st.just("1Gi")),
        },
    )
    return st.lists(
        st.builds(lambda i, r: {"name": f"c{i}", "resources": r}, st.integers(0, 99), resources),
        max_size=4,
    )


@given(init=_containers(), main=_containers())
def test_every_container_asking_uses_a_claim_and_a_second_pass_changes_nothing(
    init: list[Obj], main: list[Obj]
) -> None:
    spec = {"initContainers": init, "containers": main}
    asking = ["nvidia.com/gpu" in (c["resources"].get("limits") or {}) for c in init + main]
    converted = extended.convert(spec)
    claims = converted.spec.get("resourceClaims") or []
    assert len(claims) == len({c["name"] for c in claims}) == len(converted.counts)
    assert [extended.template_count(c["resourceClaimTemplateName"]) for c in claims] == list(
        converted.counts
    )
    named = {c["name"] for c in claims}
    containers = converted.spec["initContainers"] + converted.spec["containers"]
    for container, asked in zip(containers, asking, strict=True):
        used = {c["name"] for c in container["resources"].get("claims") or []}
        assert bool(used) == asked and used <= named
    assert not extended.asks(converted.spec)
    again = extended.convert(converted.spec)
    assert not again.changed and again.spec == converted.spec


# Init containers are counted as Kubernetes counts: a pod needs max(its largest init container
# (with the sidecars started before it), the sum of its long-lived containers), per resource.
# kube-scheduler's own claim does the same (1.37 `createRequestsAndMappings`): a non-sidecar init
# container first reuses the devices of the long-lived containers after it, and the init
# containers' extra needs share one request of the largest.


def _init(name: str, n: int, *, sidecar: bool = False) -> Obj:
    container: Obj = {"name": name, "resources": _gpus(str(n))}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def _devices(spec: Obj) -> int:
    claims = extended.convert(spec).spec.get("resourceClaims") or []
    return sum(extended.template_count(c["resourceClaimTemplateName"]) or 0 for c in claims)


def _claims_of(container: Obj) -> list[str]:
    return [c["name"] for c in container["resources"].get("claims") or []]


def test_an_init_container_reuses_the_gpus_of_the_app_containers_after_it() -> None:
    spec = {"initContainers": [_init("setup", 1)], "containers": [_init("main", 1)]}
    out = extended.convert(spec).spec
    assert out["resourceClaims"] == [
        {"name": "drasat-gpu-0", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-1"}
    ]
    assert _claims_of(out["initContainers"][0]) == ["drasat-gpu-0"]
    assert _claims_of(out["containers"][0]) == ["drasat-gpu-0"]


def test_init_containers_share_one_claim_of_the_largest_extra() -> None:
    spec = {
        "initContainers": [_init("a", 3), _init("b", 2)],
        "containers": [_init("main", 1), {"name": "idle"}],
    }
    out = extended.convert(spec).spec
    assert out["resourceClaims"] == [
        {"name": "drasat-gpu-0", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-1"},
        {"name": "drasat-gpu-init", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-2"},
    ]
    assert [_claims_of(c) for c in out["initContainers"]] == [
        ["drasat-gpu-0", "drasat-gpu-init"],
        ["drasat-gpu-0", "drasat-gpu-init"],
    ]
    assert _devices(spec) == 3  # max(3, 1)


def test_a_sidecar_is_long_lived_its_gpus_its_own_and_counted_with_the_app() -> None:
    spec = {
        "initContainers": [_init("setup", 2), _init("proxy", 1, sidecar=True), _init("late", 1)],
        "containers": [_init("main", 1)],
    }
    out = extended.convert(spec).spec
    names = {c["name"]: c["resourceClaimTemplateName"] for c in out["resourceClaims"]}
    assert names == {
        "drasat-gpu-init-1": "drasat-nvidia-com-gpu-1",
        "drasat-gpu-0": "drasat-nvidia-com-gpu-1",
    }
    # setup reuses the sidecar's and main's GPUs (started after it): 2 of 2; late reuses main's.
    assert [_claims_of(c) for c in out["initContainers"]] == [
        ["drasat-gpu-init-1", "drasat-gpu-0"],
        ["drasat-gpu-init-1"],
        ["drasat-gpu-0"],
    ]
    assert _devices(spec) == 2


_counts = st.lists(st.integers(0, 4), max_size=4)


@given(init=_counts, sidecars=st.lists(st.booleans(), max_size=4), main=_counts)
def test_a_pod_gets_as_many_gpus_as_kubernetes_counts_for_it(
    init: list[int], sidecars: list[bool], main: list[int]
) -> None:
    inits = [
        _init(f"i{k}", n, sidecar=k < len(sidecars) and sidecars[k]) for k, n in enumerate(init)
    ]
    spec = {"initContainers": inits, "containers": [_init(f"m{k}", n) for k, n in enumerate(main)]}
    long_lived = sum(main) + sum(
        n for c, n in zip(inits, init, strict=True) if c.get("restartPolicy")
    )
    before = 0
    largest_init = 0
    for container, n in zip(inits, init, strict=True):
        if container.get("restartPolicy"):
            before += n
        else:
            largest_init = max(largest_init, n + before)
    assert _devices(spec) == max(long_lived, largest_init)


# The class is the one whose `extendedResourceName` names the resource, as kube-scheduler picks
# it (k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache).


def _class(name: str, resource: str | None = None, created: str = "2026-01-01T00:00:00Z") -> Obj:
    spec: Obj = {} if resource is None else {"extendedResourceName": resource}
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_the_class_naming_the_resource_serves_it_the_newest_first() -> None:
    nvidia = _class("gpu.nvidia.com", "nvidia.com/gpu")
    assert extended.device_class_for("nvidia.com/gpu", [nvidia, _class("x")]) == "gpu.nvidia.com"
    newer = _class("b-new", "nvidia.com/gpu", created="2026-02-01T00:00:00Z")
    found = extended.device_class_for("nvidia.com/gpu", [nvidia, newer, _class("a-old")])
    assert found == "b-new"
    # Created in the same second: the lower name.
    same = _class("a-same", "nvidia.com/gpu")
    assert extended.device_class_for("nvidia.com/gpu", [nvidia, same]) == "a-same"
    # None names it: the default (drasat's class); the implicit name of any class.
    assert extended.device_class_for("nvidia.com/gpu", [_class("x")]) == "gpu.drasat.io"
    assert extended.device_class_for("nvidia.com/gpu", [], default=None) is None
    implicit = "deviceclass.resource.kubernetes.io/x"
    assert extended.device_class_for(implicit, [_class("x")], default=None) == "x"


def test_the_template_is_of_the_class_given() -> None:
    body = extended.template("team-a", 2, "gpu.nvidia.com")
    (request,) = body["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "count": 2}
    (found,) = extended.missing_templates([_pod("a", "drasat-nvidia-com-gpu-2")], [], "x")
    assert found["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "x"
