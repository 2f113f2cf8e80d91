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


def test_each_container_gets_its_own_claim_of_its_count() -> None:
    spec = {
        "initContainers": [{"name": "setup", "resources": _gpus("1")}],
        "containers": [
            {"name": "a", "resources": {**_gpus(2, cpu="1"), "requests": {"nvidia.com/gpu": 2}}},
            {"name": "b"},
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
        ],
    }
    converted = extended.convert(spec)
    assert converted.counts == (1, 2, 1)
    out = converted.spec
    assert out["initContainers"][0]["resources"] == {
        "limits": {},
        "claims": [{"name": "drasat-gpu-init-0"}],
    }
    assert out["containers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "requests": {},
        "claims": [{"name": "drasat-gpu-0"}],
    }
    assert out["containers"][1] == {"name": "b"}
    assert out["resourceClaims"] == [
        {"name": "drasat-gpu-init-0", "resourceClaimTemplateName": "drasat-nvidia-com-gpu-1"},
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
def test_every_gpu_asked_becomes_one_claim_and_a_second_pass_changes_nothing(
    init: list[Obj], main: list[Obj]
) -> None:
    spec = {"initContainers": init, "containers": main}
    asked = [int(c["resources"]["limits"]["nvidia.com/gpu"]) for c in init + main
             if "nvidia.com/gpu" in (c["resources"].get("limits") or {})]  # fmt: skip
    converted = extended.convert(spec)
    assert list(converted.counts) == asked
    claims = converted.spec.get("resourceClaims") or []
    assert len(claims) == len({c["name"] for c in claims}) == len(asked)
    assert [extended.template_count(c["resourceClaimTemplateName"]) for c in claims] == asked
    assert not extended.asks(converted.spec)
    again = extended.convert(converted.spec)
    assert not again.changed and again.spec == converted.spec
