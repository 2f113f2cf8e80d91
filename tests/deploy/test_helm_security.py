"""The chart's admission policies of docs/SECURITY.md, rendered (their effect on the real API
server: tests/e2e/test_e2e_helm.py and tests/e2e/test_e2e_security.py)."""

from __future__ import annotations

from chart_rendering import Render

VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
MAP = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
V1 = "1.37.2"


def test_v1_guards_the_plugins_writes_and_the_controllers_pod_updates_failing_closed(
    render: Render,
) -> None:
    rendered = render(kube_version=V1, api_versions=[VAP, MAP])
    policies = {
        m["metadata"]["name"]: m
        for m in rendered.manifests
        if m["kind"] == "ValidatingAdmissionPolicy"
    }
    assert set(policies) == {
        "drasat-node-plugin-own-nas",
        "drasat-node-plugin-own-slices",
        "drasat-controller-lifts-gates-only",
        "drasat-claims-keep-drasats-taint",
    }
    bindings = [m for m in rendered.manifests if m["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == set(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    # a policy that cannot evaluate (a missing field, a CEL error) refuses the write
    assert {p["spec"]["failurePolicy"] for p in policies.values()} == {"Fail"}
    controller = policies["drasat-controller-lifts-gates-only"]["spec"]
    (condition,) = controller["matchConditions"]
    assert condition["expression"].endswith('"system:serviceaccount:drasat:drasat-controller"')
    (rule,) = controller["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["UPDATE"])  # no subresource
    guarded = " ".join(v["expression"] for v in controller["validations"])
    for field in ("spec.containers", "spec.initContainers", "metadata.labels", "spec.tolerations"):
        assert f"object.{field} == oldObject.{field}" in guarded, field
    # of the annotations, only the preemptor's nomination may change
    assert "k == 'gpu.drasat.io/nomination'" in guarded
    # the scheduling gate is a scheduling aid: its policy admits a pod when it cannot evaluate
    gate = rendered.one("MutatingAdmissionPolicy", "-scheduling-gate")
    assert gate["spec"]["failurePolicy"] == "Ignore"


def test_no_controller_policy_without_drasats_v1_controller(render: Render) -> None:
    for rendered in (
        render("allocator=kube-scheduler", kube_version=V1, api_versions=[VAP]),
        render("nodeAdmissionPolicy.enabled=false", kube_version=V1, api_versions=[VAP]),
        # a real install's discovery, without ValidatingAdmissionPolicy
        render(kube_version=V1, api_versions=["resource.k8s.io/v1/DeviceClass"]),
    ):
        assert rendered.returncode == 0, rendered.stderr
        names = [m["metadata"]["name"] for m in rendered.manifests]
        assert "drasat-controller-lifts-gates-only" not in names
