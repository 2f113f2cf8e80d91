"""The chart's admission for drasat's scheduling gate (issue 24), checked with the real helm:
`controller.admission.mode` auto picks the MutatingAdmissionPolicy where the server serves it
(v1 from 1.36, v1beta1 where turned on), else the controller's webhook; both match with
controller/admission.py's conditions, never block a pod (failurePolicy Ignore) and gate
only at CREATE; the webhook's certificate is valid for its Service and signed by the caBundle
its registration carries; NOTES say which path was installed.

tests/e2e/test_e2e_v1_admission.py runs both on the real API server."""

from __future__ import annotations

import base64
import pathlib
import subprocess

import pytest
from chart_rendering import Manifest, Render, Rendered
from test_helm_chart import VAP, _container, _grants, _notes, _parsed, validate_all

from drasat.controller import admission

MAP_V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
MAP_V1BETA1 = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
DEVICE_CLASS = "resource.k8s.io/v1/DeviceClass"  # helm knows kinds: a real install's discovery
TAINT_RULE = "resource.k8s.io/v1/DeviceTaintRule"
POLICY_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
WEBHOOK_KINDS = {"MutatingWebhookConfiguration", "Secret", "Service"}


def _render(render: Render, *sets: str, kube_version: str = "1.37.2", **kwargs: object) -> Rendered:
    rendered = render(*sets, kube_version=kube_version, **kwargs)
    assert rendered.returncode == 0, rendered.stderr
    return rendered


def _gate_objects(rendered: Rendered) -> dict[str, Manifest]:
    """The admission objects of the scheduling gate, by kind."""
    found = {
        m["kind"]: m
        for m in rendered.manifests
        if m["metadata"]["name"].endswith(("-scheduling-gate", "-webhook-tls", "-webhook"))
    }
    return found


def _conditions(items: list[Manifest]) -> list[tuple[str, str]]:
    return [(c["name"], c["expression"]) for c in items]


# ---------------------------------------------------------------- which path


@pytest.mark.parametrize(
    ("kube_version", "api_versions", "path"),
    [
        ("1.37.2", [MAP_V1], "policy"),  # GA from 1.36, on by default
        ("1.36.0", [MAP_V1], "policy"),
        ("1.35.0", [MAP_V1BETA1], "policy"),  # its feature gate and runtime-config turned on
        ("1.35.0", [], "webhook"),  # the default of 1.34 and 1.35
        ("1.34.0", [], "webhook"),
    ],
)
def test_auto_uses_the_policy_where_served_else_the_webhook(
    render: Render, kube_version: str, api_versions: list[str], path: str
) -> None:
    rendered = _render(render, kube_version=kube_version, api_versions=[VAP, *api_versions])
    kinds = set(_gate_objects(rendered))
    assert kinds == (POLICY_KINDS if path == "policy" else WEBHOOK_KINDS)
    # every object valid for that version's API (v1beta1 policies on 1.35, v1 from 1.36)
    validate_all(rendered.manifests, kube=kube_version.rsplit(".", 1)[0])
    if path == "policy":
        served = api_versions[0].removesuffix("/MutatingAdmissionPolicy")
        assert {m["apiVersion"] for m in _gate_objects(rendered).values()} == {served}
    args = _container(rendered.one("Deployment"))["args"]
    assert any(a.startswith("--webhook-address") for a in args) is (path == "webhook")


@pytest.mark.parametrize(
    ("sets", "kube_version"),
    [(["controller.admission.mode=off"], "1.37.2"), (["allocator=kube-scheduler"], "1.37.2"),
     ([], "1.30.0")],  # classic DRA: kube-scheduler never allocates drasat's claims there
)  # fmt: skip
def test_no_gate_without_drasats_v1_controller_or_when_off(
    render: Render, sets: list[str], kube_version: str
) -> None:
    rendered = _render(render, *sets, kube_version=kube_version, api_versions=[VAP, MAP_V1])
    assert not _gate_objects(rendered)
    if "Deployment" in rendered.kinds():
        args = _container(rendered.one("Deployment"))["args"]
        assert not any(a.startswith("--webhook") for a in args)


def test_policy_where_none_is_served_is_refused(render: Render) -> None:
    refused = render("controller.admission.mode=policy", kube_version="1.35.0",
                     api_versions=[VAP, DEVICE_CLASS, TAINT_RULE])  # fmt: skip
    assert refused.returncode != 0
    assert "controller.admission.mode=policy but this cluster (Kubernetes v1.35.0) serves no " \
        "MutatingAdmissionPolicy" in refused.stderr  # fmt: skip
    # helm template cannot tell: not v1 where that is not served by default (before 1.36)
    for version in ("1.34.0", "1.35.0"):
        guessed = render("controller.admission.mode=policy", kube_version=version)
        assert guessed.returncode != 0
        assert (
            f"rendered without the cluster's APIs (helm template) for Kubernetes v{version}: "
            "MutatingAdmissionPolicy v1 is served by default from 1.36 only" in guessed.stderr
        )
    # ... where it is: v1, as asked; where told what is served, that
    forced = _render(render, "controller.admission.mode=policy", kube_version="1.36.0")
    assert _gate_objects(forced)["MutatingAdmissionPolicy"]["apiVersion"] == (
        "admissionregistration.k8s.io/v1"
    )
    told = _render(render, "controller.admission.mode=policy", kube_version="1.35.0",
                   api_versions=[MAP_V1BETA1])  # fmt: skip
    assert _gate_objects(told)["MutatingAdmissionPolicy"]["apiVersion"] == (
        "admissionregistration.k8s.io/v1beta1"
    )


# ---------------------------------------------------------------- what both match


def test_the_policy_gates_pods_that_name_claims_at_creation(render: Render) -> None:
    policy = _gate_objects(_render(render, api_versions=[MAP_V1]))
    spec = policy["MutatingAdmissionPolicy"]["spec"]
    assert spec["failurePolicy"] == "Ignore"  # a pod is never blocked by drasat
    assert spec["reinvocationPolicy"] == "IfNeeded"  # after the nvidia.com/gpu conversion
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert _conditions(spec["matchConditions"]) == list(admission.GATE_CONDITIONS)
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "JSONPatch"
    # pods that name claims: tested in the mutation (a policy not matched at first is never
    # reinvoked after the nvidia.com/gpu conversion adds claims)
    expression = mutation["jsonPatch"]["expression"]
    assert expression.startswith(f"!({admission.CLAIMS_CONDITION[1]}) ? []")
    assert admission.SCHEDULING_GATE in expression
    binding = policy["MutatingAdmissionPolicyBinding"]["spec"]
    assert binding == {"policyName": policy["MutatingAdmissionPolicy"]["metadata"]["name"]}


def test_the_webhook_matches_what_the_policy_matches(render: Render) -> None:
    gate = _gate_objects(
        _render(render, "controller.admission.mode=webhook", api_versions=[MAP_V1])
    )
    policy = _gate_objects(_render(render, api_versions=[MAP_V1]))["MutatingAdmissionPolicy"]
    (webhook,) = gate["MutatingWebhookConfiguration"]["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert 1 <= webhook["timeoutSeconds"] <= 5
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"], "scope": "Namespaced"}]  # fmt: skip
    assert _conditions(webhook["matchConditions"]) == [
        admission.CLAIMS_CONDITION,
        *_conditions(policy["spec"]["matchConditions"]),
    ]
    assert webhook["namespaceSelector"] == policy["spec"]["matchConstraints"]["namespaceSelector"]
    service = webhook["clientConfig"]["service"]
    assert service == {"namespace": "drasat", "name": gate["Service"]["metadata"]["name"],
                       "path": admission.PATH, "port": 443}  # fmt: skip


def test_the_webhook_converts_nvidia_gpu_where_no_policy_does(render: Render) -> None:
    # 1.34/1.35: no MutatingAdmissionPolicy to convert nvidia.com/gpu; the webhook does, and
    # matches the pods that ask for it too
    webhook = _render(render, kube_version="1.35.0")
    assert "--webhook-extended-resources" in _container(webhook.one("Deployment"))["args"]
    registration = _gate_objects(webhook)["MutatingWebhookConfiguration"]["webhooks"][0]
    assert _conditions(registration["matchConditions"]) == [
        admission.CLAIMS_OR_EXTENDED_CONDITION,
        *admission.GATE_CONDITIONS,
    ]
    assert _parsed(_container(webhook.one("Deployment"))).webhook_extended_resources
    # turned off, or the policy converts (the webhook asked for on 1.37): not the webhook
    for sets, api_versions in ((["extendedResources.enabled=false"], []),
                               (["controller.admission.mode=webhook"], [MAP_V1])):  # fmt: skip
        rendered = _render(render, *sets, api_versions=api_versions)
        assert "--webhook-extended-resources" not in _container(rendered.one("Deployment"))["args"]
        registration = _gate_objects(rendered)["MutatingWebhookConfiguration"]["webhooks"][0]
        assert registration["matchConditions"][0]["name"] == admission.CLAIMS_CONDITION[0]


def test_a_namespace_selector_narrows_both(render: Render, tmp_path: pathlib.Path) -> None:
    values = {"controller": {"admission": {"namespaceSelector": {"matchLabels": {"gpu": "yes"}}}}}
    for mode, api_versions in (("policy", [MAP_V1]), ("webhook", [])):
        values["controller"]["admission"]["mode"] = mode
        gate = _gate_objects(
            _render(render, values=values, tmp=tmp_path, api_versions=api_versions)
        )
        if mode == "policy":
            selector = gate["MutatingAdmissionPolicy"]["spec"]["matchConstraints"]
        else:
            selector = gate["MutatingWebhookConfiguration"]["webhooks"][0]
        # Helm merges maps: kube-system stays out
        assert selector["namespaceSelector"]["matchLabels"] == {"gpu": "yes"}
        assert selector["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


# ---------------------------------------------------------------- the webhook's serving side


def test_the_webhook_certificate_is_valid_for_its_service(
    render: Render, tmp_path: pathlib.Path
) -> None:
    gate = _gate_objects(_render(render, "controller.admission.mode=webhook", namespace="gpu-sys"))
    secret = gate["Secret"]
    assert secret["type"] == "kubernetes.io/tls"
    cert = tmp_path / "tls.crt"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(gate["MutatingWebhookConfiguration"]["webhooks"][0]
                                    ["clientConfig"]["caBundle"]))  # fmt: skip
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca.read_bytes()
    host = f"{gate['Service']['metadata']['name']}.gpu-sys.svc"
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), "-verify_hostname", host, str(cert)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    key = base64.b64decode(secret["data"]["tls.key"]).decode()
    assert "PRIVATE KEY" in key


def test_the_controller_serves_the_webhook_with_the_secrets_files(render: Render) -> None:
    rendered = _render(render, "controller.admission.mode=webhook")
    gate = _gate_objects(rendered)
    deployment = rendered.one("Deployment")
    container = _container(deployment)
    parsed = _parsed(container)
    assert parsed.webhook_address == ":9443"
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True
    assert parsed.webhook_cert_file == f"{mount['mountPath']}/tls.crt"
    assert parsed.webhook_key_file == f"{mount['mountPath']}/tls.key"
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == gate["Secret"]["metadata"]["name"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    service = gate["Service"]["spec"]
    assert service["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert service["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # every replica answers, leader (Ready) or not
    assert service["publishNotReadyAddresses"] is True


def test_a_secret_of_your_own_with_its_ca(render: Render) -> None:
    mine = "controller.admission.webhook.tls.secretName=mine"
    refused = render("controller.admission.mode=webhook", mine, kube_version="1.37.2")
    assert refused.returncode != 0
    assert "tls.caBundle is empty" in refused.stderr
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    rendered = _render(render, "controller.admission.mode=webhook",
                       "controller.admission.webhook.tls.secretName=mine",
                       f"controller.admission.webhook.tls.caBundle={pem}")  # fmt: skip
    gate = _gate_objects(rendered)
    assert "Secret" not in gate
    webhook = gate["MutatingWebhookConfiguration"]["webhooks"][0]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]).decode() == pem
    (volume,) = rendered.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "mine"


def test_rbac_reads_templates_only_for_the_webhook(render: Render) -> None:
    resource = "resource.k8s.io"
    webhook, policy = (
        _grants(_render(render, f"controller.admission.mode={mode}").one("ClusterRole",
                                                                          "-controller"))
        for mode in ("webhook", "policy")
    )  # fmt: skip
    # (get: the controller reads its own templates of converted pods either way)
    assert webhook - policy == {(resource, "resourceclaimtemplates", v)
                                for v in ("list", "watch")}  # fmt: skip
    # both lift the gate (the controller's part)
    assert {("", "pods", "patch"), ("", "pods", "get")} <= policy


@pytest.mark.parametrize(
    ("setting", "message"),
    [("controller.admission.mode=always", "/controller/admission/mode"),
     ("controller.admission.webhook.timeoutSeconds=60", "/controller/admission/webhook"),
     ("controller.deviceTaint=yes", "/controller/deviceTaint")],
)  # fmt: skip
def test_schema_rejects_bad_admission_values(render: Render, setting: str, message: str) -> None:
    rejected = render(setting, kube_version="1.37.2")
    assert rejected.returncode != 0
    assert message in rejected.stderr


# ---------------------------------------------------------------- NOTES say which


def test_notes_say_which_admission_path_was_installed(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    policy = _notes(helm, tmp_path / "a", "--kube-version", "1.37.2", "--api-versions", MAP_V1)
    assert "Admission: the MutatingAdmissionPolicy r-drasat-scheduling-gate " \
        "(admissionregistration.k8s.io/v1)" in policy  # fmt: skip
    webhook = _notes(helm, tmp_path / "b", "--kube-version", "1.35.0")
    assert "Admission: the controller's mutating webhook (r-drasat-scheduling-gate" in webhook
    assert "The DeviceTaintRule drasat-allocator keeps" in webhook
    gated_only = _notes(helm, tmp_path / "c", "--kube-version", "1.35.0",
                        "--api-versions", DEVICE_CLASS)  # fmt: skip
    assert "No DeviceTaintRule (this cluster does not serve it): drasat's scheduling gate alone" \
        in gated_only  # fmt: skip
    off = _notes(helm, tmp_path / "d", "--kube-version", "1.37.2",
                 "--set", "controller.admission.mode=off")  # fmt: skip
    assert "Admission: off (controller.admission.mode=off)" in off
