"""The chart's policy that keeps every claim of drasat's classes drasat's: a request of such a
class may not tolerate drasat's allocator taint (templates/allocator-taint-policy.yaml), except
in namespaces an administrator labels. Rendered here, and its CEL evaluated (cel-python) against
the controller's own rule (`v1inputs.tolerates_allocator_taint`, `v1inputs.our_classes`) over
generated claims; on the real API server: tests/e2e/test_e2e_security.py."""

from __future__ import annotations

from typing import Any

import celpy
from chart_rendering import Manifest, Render, Rendered
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api.devicemodel import classes
from drasat.controller import v1inputs

VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
V1 = "1.37.2"
NAME = "drasat-claims-keep-drasats-taint"
EXEMPT = "gpu.drasat.io/tolerate-allocator-taint"
NVIDIA_CLASS: Manifest = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}
OTHER_CLASS: Manifest = {
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
}
CLASSES = [*classes.device_classes(), NVIDIA_CLASS, OTHER_CLASS]


def _policy(rendered: Rendered) -> tuple[Manifest, Manifest]:
    assert rendered.returncode == 0, rendered.stderr
    found = {m["kind"]: m for m in rendered.manifests if m["metadata"]["name"] == NAME}
    return found["ValidatingAdmissionPolicy"], found["ValidatingAdmissionPolicyBinding"]


def test_the_policy_fails_closed_at_creation_with_every_device_class_as_its_parameter(
    render: Render,
) -> None:
    policy, binding = _policy(render(kube_version=V1, api_versions=[VAP]))
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["paramKind"] == {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass"}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    # creation only: an update (drasat's finalizer on an older claim) must go through
    assert rule["operations"] == ["CREATE"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert binding["spec"]["policyName"] == NAME
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": EXEMPT, "operator": "NotIn", "values": ["true"]}]
    }


def test_the_policy_guards_the_classes_of_the_drivers_drasat_allocates(render: Render) -> None:
    nvidia = render("controller.drivers={gpu.nvidia.com}", kube_version=V1, api_versions=[VAP])
    admit = _admission(_policy(nvidia)[0])
    tolerating = _claim([("gpu", "exactly", "gpu.nvidia.com", [{"operator": "Exists"}], False)])
    assert admit(tolerating, "ResourceClaim") is not None
    ours = _claim([("gpu", "exactly", "gpu.drasat.io", [{"operator": "Exists"}], False)])
    assert admit(ours, "ResourceClaim") is None  # drasat does not allocate its own driver here


def test_no_policy_without_drasats_v1_controller_or_validating_policies(render: Render) -> None:
    served = "resource.k8s.io/v1/DeviceClass"  # discovery known: the kinds listed are all served
    for rendered in (
        render("allocator=kube-scheduler", kube_version=V1, api_versions=[VAP]),
        render("nodeAdmissionPolicy.enabled=false", kube_version=V1, api_versions=[VAP]),
        render(kube_version=V1, api_versions=[served]),  # no ValidatingAdmissionPolicy served
        render(api_versions=[VAP]),  # classic DRA
    ):
        assert rendered.returncode == 0, rendered.stderr
        assert NAME not in [m["metadata"]["name"] for m in rendered.manifests]
    # `helm template` without the cluster's kinds assumes what 1.37 serves: the policy is there
    assumed = render(kube_version=V1)
    assert assumed.returncode == 0, assumed.stderr
    assert NAME in [m["metadata"]["name"] for m in assumed.manifests]


# -- the policy's CEL against the controller's rule ------------------------------------------------

Request = tuple[str, str, str, list[Manifest], bool]  # name, exactly|firstAvailable, class, ...


def _claim(requests: list[Request]) -> Manifest:
    out = []
    for name, kind, device_class, tolerations, admin in requests:
        alternative: Manifest = {"deviceClassName": device_class}
        if tolerations:
            alternative["tolerations"] = tolerations
        if kind == "exactly":
            if admin:
                alternative["adminAccess"] = True
            out.append({"name": name, "exactly": alternative})
        else:
            out.append({"name": name, "firstAvailable": [{"name": "a", **alternative}]})
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": out}}}


def _admission(policy: Manifest) -> Any:
    """A function (object, kind) -> None (admitted) or the denial message, evaluating the policy
    once per DeviceClass of `CLASSES` as its parameter (denied when one denies), as the API
    server does with the binding's `paramRef.selector: {}`."""
    spec = policy["spec"]
    env = celpy.Environment()

    def compile_(text: str) -> Any:
        return env.program(env.compile(text))

    variables = [(v["name"], compile_(v["expression"])) for v in spec["variables"]]
    checks = [(compile_(v["expression"]), v) for v in spec["validations"]]

    def admit(obj: Manifest, kind: str) -> str | None:
        for param in CLASSES:
            activation: dict[str, Any] = {
                "request": celpy.json_to_cel({"kind": {"kind": kind}, "operation": "CREATE"}),
                "object": celpy.json_to_cel(obj),
                "params": celpy.json_to_cel(param),
            }
            found = {}
            for name, program in variables:
                activation["variables"] = celpy.json_to_cel(found)
                found[name] = program.evaluate(activation)
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in found.items()}
            )
            for program, validation in checks:
                result = program.evaluate(activation)
                assert isinstance(result, celpy.celtypes.BoolType), result
                if not result:
                    return str(compile_(validation["messageExpression"]).evaluate(activation))
        return None

    return admit


TOLERATIONS = st.one_of(
    # Exists: any key (none: every taint), no value
    st.builds(
        lambda key, effect: {"operator": "Exists", **key, **effect},
        st.sampled_from(
            [{}, {"key": ""}, {"key": "gpu.drasat.io/allocator"}, {"key": "gpu.nvidia.com/xid"}]
        ),
        st.sampled_from([{}, {"effect": ""}, {"effect": "NoSchedule"}, {"effect": "NoExecute"}]),
    ),
    # Equal (the default operator): a key, a value
    st.builds(
        lambda operator, key, value, effect: {**operator, "key": key, **value, **effect},
        st.sampled_from([{}, {"operator": "Equal"}]),
        st.sampled_from(["gpu.drasat.io/allocator", "gpu.nvidia.com/xid"]),
        st.sampled_from([{}, {"value": "drasat"}, {"value": "other"}]),
        st.sampled_from([{}, {"effect": "NoSchedule"}, {"effect": "NoExecute"}]),
    ),
)
REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(["exactly", "firstAvailable"]),
        st.sampled_from([c["metadata"]["name"] for c in CLASSES]),
        st.lists(TOLERATIONS, max_size=3),
        st.booleans(),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(requests=REQUESTS, template=st.booleans())
def test_the_policy_refuses_exactly_what_the_controller_reads_as_tolerating(
    render: Render, requests: list[tuple[str, str, list[Manifest], bool]], template: bool
) -> None:
    """Refused when a request alternative names a class of drasat's (its selectors name
    drasat's driver) and tolerates the taint as the controller reads it, unless it is an
    admin-access request; a template's requests the same."""
    admit = _admission(_policy(_rendered(render))[0])
    named = [
        (f"r{i}", kind, cls, tols, admin) for i, (kind, cls, tols, admin) in enumerate(requests)
    ]
    claim = _claim(named)
    ours = v1inputs.our_classes(CLASSES)
    expected = any(
        cls in ours
        and not (kind == "exactly" and admin)
        and v1inputs.tolerates_allocator_taint(_claim([(n, kind, cls, tols, False)]))
        for n, kind, cls, tols, admin in named
    )
    obj = {"metadata": claim["metadata"], "spec": {"spec": claim["spec"]}} if template else claim
    denied = admit(obj, "ResourceClaimTemplate" if template else "ResourceClaim")
    assert (denied is not None) is expected, (claim, denied)
    if denied is not None:
        assert EXEMPT in denied


_RENDERED: list[Rendered] = []


def _rendered(render: Render) -> Rendered:
    """One rendering for every generated example."""
    if not _RENDERED:
        _RENDERED.append(render(kube_version=V1, api_versions=[VAP]))
    return _RENDERED[0]
