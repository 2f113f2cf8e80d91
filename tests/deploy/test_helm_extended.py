"""The chart's admission policy for pods that ask for `nvidia.com/gpu` (issue 26 item 2): the
spec is `drasat.v1.extended.admission_policy()` verbatim (the e2e test runs that one on the real
API server), installed in v1 mode where MutatingAdmissionPolicy v1 is served, or as told."""

from __future__ import annotations

from chart_rendering import Render, Rendered

from drasat.v1 import extended

MAP = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}


def _kinds(rendered: Rendered) -> set[str]:
    """The kinds of this policy's objects (the scheduling gate's policy is another one)."""
    return {
        m["kind"] for m in rendered.manifests
        if m["metadata"]["name"].endswith("-extended-resources")
    }  # fmt: skip


def _render(render: Render, *sets: str, **kwargs: object) -> Rendered:
    rendered = render(*sets, **{"kube_version": "1.37.2", **kwargs})
    assert rendered.returncode == 0, rendered.stderr
    return rendered


def test_the_policy_is_the_python_rule_and_its_binding_names_it(render: Render) -> None:
    rendered = _render(render, api_versions=[MAP])
    policy = rendered.one("MutatingAdmissionPolicy", "-extended-resources")
    binding = rendered.one("MutatingAdmissionPolicyBinding", "-extended-resources")
    wanted, _ = extended.admission_policy()
    assert policy["spec"] == wanted["spec"], (
        "regenerate deploy/helm/drasat/templates/extended-resources.yaml's spec from "
        "drasat.v1.extended.admission_policy()"
    )
    assert binding["spec"] == {"policyName": policy["metadata"]["name"]}


def test_auto_installs_it_only_where_the_api_server_serves_it(render: Render) -> None:
    assert not KINDS & _kinds(_render(render))  # 1.34/1.35: beta and off by default
    assert not KINDS & _kinds(_render(render, "extendedResources.enabled=false",
                                      api_versions=[MAP]))  # fmt: skip
    assert _kinds(_render(render, "extendedResources.enabled=true")) == KINDS
    # asked for where MutatingAdmissionPolicy v1 is not served (1.34/1.35), or cannot be assumed
    for api_versions in (["resource.k8s.io/v1/DeviceClass"], []):
        refused = render("extendedResources.enabled=true", kube_version="1.35.0",
                         api_versions=api_versions)  # fmt: skip
        assert refused.returncode != 0
        assert "extendedResources.enabled=true needs MutatingAdmissionPolicy v1" in refused.stderr


def test_not_in_classic_mode_nor_without_the_controller(render: Render) -> None:
    classic = render("extendedResources.enabled=true", kube_version="1.30.0")
    assert classic.returncode == 0, classic.stderr
    assert not KINDS & _kinds(classic)
    no_controller = _render(render, "allocator=kube-scheduler", api_versions=[MAP])
    assert not KINDS & _kinds(no_controller)


def test_installed_where_drasat_allocates_for_nvidias_driver(render: Render) -> None:
    # NVIDIA's chart gives its class `extendedResourceName: nvidia.com/gpu`: the converted pods'
    # templates are of that class (controller/extended.py), which drasat allocates.
    rendered = _render(render, "controller.drivers={gpu.nvidia.com}", api_versions=[MAP])
    assert _kinds(rendered) == KINDS
