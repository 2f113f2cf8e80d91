"""drasat's admission webhook (controller/admission.py): which pods it gates, the AdmissionReview
it answers, and the HTTPS server, on a real TLS socket with a certificate made by openssl.

The webhook's lookups run against the in-process API server (informers, and a GET for what the
cache does not hold yet). tests/e2e/test_e2e_v1_admission.py registers the same server with the
real kube-apiserver."""

from __future__ import annotations

import base64
import http.client
import json
import os
import pathlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.api.devicemodel import classes
from drasat.api.groups import SCHEDULING_GATE
from drasat.api.inputerrors import InputError
from drasat.controller import admission, leader
from drasat.controller.app import App, Options
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver
from drasat.v1 import extended

Obj = dict[str, Any]
NS = "team-a"
OTHER_DRIVER = "other.example.com"
GATE = {"name": SCHEDULING_GATE}


def _pod(*claims: Obj, **spec: Any) -> Obj:
    body: Obj = {"containers": [{"name": "c", "image": "busybox"}], **spec}
    if claims:
        body["resourceClaims"] = list(claims)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS},
            "spec": body}  # fmt: skip


def _template(name: str, device_class: str, **request: Any) -> Obj:
    exactly = {"deviceClassName": device_class, **request}
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def _claim(name: str, device_class: str, allocated: bool = False) -> Obj:
    claim = _template(name, device_class)
    claim["spec"] = claim["spec"]["spec"]
    if allocated:
        claim["status"] = {"allocation": {"devices": {"results": []}}}
    return claim


OTHER_CLASS: Obj = {
    "metadata": {"name": OTHER_DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER_DRIVER}"'}}]},
}


class Dicts:
    """A `Reader` over dicts; `fail` makes every read raise that error."""

    def __init__(self, *objects: Obj, fail: errors.KubeError | None = None) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.fail = fail
        self.reads: list[str] = []

    def our_classes(self) -> Mapping[str, Obj]:
        return {c["metadata"]["name"]: c for c in classes.device_classes()}

    def _read(self, namespace: str, name: str) -> Obj | None:
        self.reads.append(f"{namespace}/{name}")
        if self.fail is not None:
            raise self.fail
        return self.objects.get(name)

    template = claim = _read


# ---------------------------------------------------------------- which pods


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, False),  # no claims: nothing for any allocator
        ({"resourceClaims": []}, False),
        ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}, True),
        # created with its node (mirror pods, placed by hand): the API server refuses a gate
        ({"resourceClaims": [{"name": "g", "resourceClaimName": "c"}], "nodeName": "n1"}, False),
        # gated once: reinvocation after another mutation adds nothing
        ({"resourceClaims": [{"name": "g", "resourceClaimName": "c"}],
          "schedulingGates": [GATE]}, False),
        # another owner's gate does not stop ours
        ({"resourceClaims": [{"name": "g", "resourceClaimName": "c"}],
          "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}, True),
    ],
)  # fmt: skip
def test_may_gate_is_the_policys_conditions(spec: Obj, expected: bool) -> None:
    assert admission.may_gate({"spec": spec}) is expected


def test_the_gate_goes_after_the_other_owners_gates() -> None:
    assert admission.gate_patch(_pod()) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}
    ]
    kueue = _pod(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    assert admission.gate_patch(kueue) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": GATE}
    ]


@pytest.mark.parametrize(
    ("entry", "objects", "expected"),
    [
        ({"resourceClaimTemplateName": "t"}, [_template("t", "gpu.drasat.io")],
         f"template {NS}/t asks for drasat's devices"),
        ({"resourceClaimTemplateName": "t"}, [_template("t", "mig.drasat.io")],
         f"template {NS}/t asks for drasat's devices"),
        ({"resourceClaimTemplateName": "t"}, [_template("t", OTHER_DRIVER)], None),
        # a request that tolerates drasat's allocator taint is still drasat's to allocate
        ({"resourceClaimTemplateName": "t"},
         [_template("t", "gpu.drasat.io", tolerations=[
             {"key": "gpu.drasat.io/allocator", "operator": "Exists"}])],
         f"template {NS}/t asks for drasat's devices"),
        ({"resourceClaimTemplateName": "t"},
         [_template("t", "gpu.drasat.io", tolerations=[{"operator": "Exists"}])],
         f"template {NS}/t asks for drasat's devices"),
        # admin access (holds no device) that tolerates the taint is kube-scheduler's
        ({"resourceClaimTemplateName": "t"},
         [_template("t", "gpu.drasat.io", adminAccess=True,
                    tolerations=[{"operator": "Exists"}])], None),
        # not there yet: gated, the controller lets it go once the claim shows it is not ours
        ({"resourceClaimTemplateName": "t"}, [], f"template {NS}/t does not exist yet"),
        ({"resourceClaimName": "c"}, [_claim("c", "gpu.drasat.io")],
         f"claim {NS}/c asks for drasat's devices"),
        # a shared claim allocated already: nothing for drasat to do for this pod
        ({"resourceClaimName": "c"}, [_claim("c", "gpu.drasat.io", allocated=True)], None),
        ({"resourceClaimName": "c"}, [_claim("c", OTHER_DRIVER)], None),
        ({"resourceClaimName": "c"}, [], f"claim {NS}/c does not exist yet"),
    ],
)  # fmt: skip
def test_decide_gates_pods_with_a_claim_of_drasats(
    entry: Obj, objects: list[Obj], expected: str | None
) -> None:
    pod = _pod({"name": "g", **entry})
    assert admission.decide(pod, NS, Dicts(*objects)) == expected


def test_one_claim_of_drasats_among_others_gates_the_pod() -> None:
    pod = _pod({"name": "a", "resourceClaimTemplateName": "nic"},
               {"name": "b", "resourceClaimTemplateName": "gpu"})  # fmt: skip
    reader = Dicts(_template("nic", OTHER_DRIVER), _template("gpu", "gpu.drasat.io"))
    assert admission.decide(pod, NS, reader) == f"template {NS}/gpu asks for drasat's devices"


def test_a_read_that_fails_gates_the_pod() -> None:
    # The controller sorts it out at its first cycle; an ungated pod of drasat's would go the
    # slow path instead.
    reader = Dicts(fail=errors.Unavailable("GET ...: connection refused"))
    why = admission.decide(_pod({"name": "g", "resourceClaimTemplateName": "t"}), NS, reader)
    assert why == "cannot read its claims (GET ...: connection refused)"


# ---------------------------------------------------------------- AdmissionReview


def _review(pod: Obj, operation: str = "CREATE", kind: str = "Pod") -> Obj:
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": NS,
        "operation": operation,
        "object": pod,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _patch(answer: admission.Answer) -> list[Obj] | None:
    response = answer.review["response"]
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    patch: list[Obj] = json.loads(base64.b64decode(response["patch"]))
    return patch


def test_review_gates_a_pod_of_drasats_with_a_json_patch() -> None:
    pod = _pod({"name": "g", "resourceClaimTemplateName": "t"})
    answer = admission.review(_review(pod), Dicts(_template("t", "gpu.drasat.io")))
    assert answer.review["apiVersion"] == "admission.k8s.io/v1"
    assert answer.review["kind"] == "AdmissionReview"
    assert answer.review["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert answer.review["response"]["allowed"] is True
    assert _patch(answer) == admission.gate_patch(pod)
    assert (answer.outcome, answer.why) == ("gated", f"template {NS}/t asks for drasat's devices")


def test_review_lets_other_pods_through_unchanged() -> None:
    reader = Dicts(_template("t", OTHER_DRIVER))
    other = admission.review(_review(_pod({"name": "g", "resourceClaimTemplateName": "t"})), reader)
    assert (_patch(other), other.outcome) == (None, "not-gated")
    assert other.review["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                                        "allowed": True}  # fmt: skip
    # not a pod CREATE the policy would match: nothing read, nothing changed
    ours = _pod({"name": "g", "resourceClaimTemplateName": "t"})
    for review in (_review(ours, operation="UPDATE"), _review(ours, kind="Binding"),
                   _review(_pod()), _review(_pod({"name": "g"}, nodeName="n1"))):  # fmt: skip
        reader = Dicts(_template("t", "gpu.drasat.io"))
        answer = admission.review(review, reader)
        assert (_patch(answer), answer.outcome, reader.reads) == (None, "skipped", [])


def _legacy(count: str = "2") -> Obj:
    pod = _pod(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": count}}
    return pod


def _applied(pod: Obj, patch: list[Obj]) -> Obj:
    """The pod with the webhook's patch applied (add, replace, append: what it sends)."""
    out = json.loads(json.dumps(pod))
    for op in patch:
        *parents, last = op["path"].strip("/").split("/")
        target = out
        for part in parents:
            target = target[part]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


def test_review_converts_nvidia_gpu_into_drasats_claims_then_gates() -> None:
    # Where no MutatingAdmissionPolicy converts nvidia.com/gpu (1.34/1.35), the webhook does,
    # by the same rule (extended.convert); the template is the controller's to make: gated.
    pod = _legacy()
    answer = admission.review(_review(pod), Dicts(), convert_extended=True)
    admitted = _applied(pod, _patch(answer) or [])
    assert admitted["spec"] == {
        **extended.convert(pod["spec"]).spec,
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}, GATE],
    }
    assert answer.why == f"template {NS}/drasat-nvidia-com-gpu-2 does not exist yet"
    # off (the policy converts), or a count that is not a whole number: left as written
    assert _patch(admission.review(_review(pod), Dicts())) is None
    assert _patch(admission.review(_review(_legacy("1.5")), Dicts(), convert_extended=True)) is None


@pytest.mark.parametrize(
    "body", [[], {"request": None}, {"request": {"kind": {"kind": "Pod"}}}, {"request": {"uid": 3}}]
)
def test_review_refuses_what_is_not_an_admission_review(body: Any) -> None:
    with pytest.raises(ValueError, match="AdmissionReview"):
        admission.review(body, Dicts())


# ---------------------------------------------------------------- lookups through the API


@pytest.fixture
def api() -> Iterator[KubeClient]:
    from drasat.api import crds

    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        client = KubeClient(configuration_for(running.url), request_timeout=10)
        for body in [*classes.device_classes(), OTHER_CLASS]:
            client.create(r.DEVICE_CLASSES_V1, body)
        yield client
        client.close()


def test_lookup_reads_the_cache_and_the_api_for_what_it_does_not_hold_yet(api: KubeClient) -> None:
    lookup = admission.Lookup(api)
    # before the informers sync: classes listed, templates read from the API
    api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, _template("early", "gpu.drasat.io"), namespace=NS)
    assert set(lookup.our_classes()) == {c["metadata"]["name"] for c in classes.device_classes()}
    assert lookup.template(NS, "early") is not None
    lookup.start()
    try:
        deadline = time.monotonic() + 10
        while not lookup.synced and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lookup.synced
        assert lookup.template(NS, "missing") is None
        api.create(r.RESOURCE_CLAIMS_V1, _claim("c", OTHER_DRIVER), namespace=NS)
        pod = _pod({"name": "a", "resourceClaimName": "c"},
                   {"name": "b", "resourceClaimTemplateName": "early"})  # fmt: skip
        assert admission.decide(pod, NS, lookup) == f"template {NS}/early asks for drasat's devices"
        assert admission.decide(_pod({"name": "a", "resourceClaimName": "c"}), NS, lookup) is None
    finally:
        lookup.stop()


# ---------------------------------------------------------------- the HTTPS server


def _certificate(folder: pathlib.Path, name: str = "server") -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[tuple[admission.WebhookServer, pathlib.Path]]:
    cert, key = _certificate(tmp_path)
    answers: list[admission.Answer] = []
    server = admission.serve(
        "127.0.0.1:0", cert_file=str(cert), key_file=str(key),
        lookup=Dicts(_template("t", "gpu.drasat.io")), on_answer=answers.append,
    )  # fmt: skip
    server.answers = answers  # type: ignore[attr-defined]
    yield server, cert
    server.shutdown()
    server.server_close()


def _post(
    server: admission.WebhookServer, cert: pathlib.Path, body: bytes, path: str = admission.PATH
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(cert))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.server_address[1], context=context, timeout=10
    )
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_server_answers_over_tls(
    served: tuple[admission.WebhookServer, pathlib.Path],
) -> None:
    server, cert = served
    pod = _pod({"name": "g", "resourceClaimTemplateName": "t"})
    status, answer = _post(server, cert, json.dumps(_review(pod)).encode())
    assert status == 200
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert patch == admission.gate_patch(pod)
    assert [a.outcome for a in server.answers] == ["gated"]  # type: ignore[attr-defined]
    assert _post(server, cert, b"{}", path="/other")[0] == 404
    status, refused = _post(server, cert, b"not json")  # refused, not dropped (tests below)
    assert status == 200 and refused["response"]["allowed"] is False


def test_a_client_that_never_completes_its_handshake_holds_up_no_other(
    served: tuple[admission.WebhookServer, pathlib.Path],
) -> None:
    server, cert = served
    with socket.create_connection(server.server_address[:2]):  # connects, never says hello
        pod = _pod({"name": "g", "resourceClaimTemplateName": "t"})
        assert _post(server, cert, json.dumps(_review(pod)).encode())[0] == 200


def test_a_new_certificate_is_served_without_a_restart(
    served: tuple[admission.WebhookServer, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    server, cert = served
    renewed_cert, renewed_key = _certificate(tmp_path, "renewed")
    key = cert.with_suffix(".key")
    os.replace(renewed_cert, cert)
    os.replace(renewed_key, key)
    pod = _pod({"name": "g", "resourceClaimTemplateName": "t"})
    # trusting only the renewed certificate: the server must present it
    assert _post(server, cert, json.dumps(_review(pod)).encode())[0] == 200


def test_a_missing_certificate_fails_at_start(tmp_path: pathlib.Path) -> None:
    with pytest.raises(OSError):
        admission.serve("127.0.0.1:0", cert_file=str(tmp_path / "none.crt"),
                        key_file=str(tmp_path / "none.key"), lookup=Dicts())  # fmt: skip


# ---------------------------------------------------------------- in the controller process


def test_the_controller_serves_the_webhook_on_every_replica(
    api: KubeClient, tmp_path: pathlib.Path
) -> None:
    """`drasat controller --webhook-address ...`: served at start, leader or not (this replica
    never leads: another holds the Lease), with its own caches; a bad certificate is bad input."""
    cert, key = _certificate(tmp_path)
    api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, _template("t", "gpu.drasat.io"), namespace=NS)
    held = {"metadata": {"name": "held-elsewhere", "namespace": "drasat"}, "spec": {
        "holderIdentity": "the-leader", "leaseDurationSeconds": 3600,
        "renewTime": leader.micro_time(leader._now())}}  # fmt: skip
    api.create(r.LEASES, held, namespace="drasat")
    options = Options(
        dra_api="v1", metrics_address="", leader_elect=True, lease_name="held-elsewhere",
        webhook_address="127.0.0.1:0", webhook_cert_file=str(cert), webhook_key_file=str(key),
    )  # fmt: skip
    app = App(options, api=api)
    stop = threading.Event()
    runner = threading.Thread(target=app.run, args=(stop,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while app.webhook is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.webhook is not None
        pod = _pod({"name": "g", "resourceClaimTemplateName": "t"})
        status, answer = _post(app.webhook, cert, json.dumps(_review(pod)).encode())
        assert status == 200 and "patch" in answer["response"]
        samples = app.metrics.registry.get_sample_value(
            "drasat_controller_admission_reviews_total", {"outcome": "gated"}
        )
        assert samples == 1
        assert not app.may_write()  # the other replica leads
    finally:
        stop.set()
        runner.join(10)
    assert app.webhook is None  # shut down with the app
    broken = Options(dra_api="v1", metrics_address="", webhook_address="127.0.0.1:0",
                     webhook_cert_file=str(tmp_path / "none.crt"),
                     webhook_key_file=str(key))  # fmt: skip
    with pytest.raises(InputError, match="--webhook-cert-file"):
        App(broken, api=api).run(threading.Event())


# ------------------------------------------------------------ requests it cannot read (issue 29)

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "spec",
                    "metadata",
                    "namespace",
                    "resourceClaims",
                    "resourceClaimTemplateName",
                    "resourceClaimName",
                    "containers",
                    "initContainers",
                    "resources",
                    "limits",
                    "requests",
                    "nvidia.com/gpu",
                    "schedulingGates",
                    "nodeName",
                    "name",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pod=_JSON, convert=st.booleans())
def test_a_pod_of_any_shape_gets_an_answer_and_one_it_cannot_read_is_refused(
    pod: Any, convert: bool
) -> None:
    """Whatever the request's object holds (fields of any JSON type where a Pod has others),
    review answers it: allowed with or without a patch, or refused naming why; never an
    exception, which the server would turn into a dropped connection that failurePolicy Ignore
    admits."""
    answer = admission.review(_review(pod), Dicts(_template("t", "gpu.drasat.io")),
                              convert_extended=convert)  # fmt: skip
    response = answer.review["response"]
    assert response["uid"] == _review(pod)["request"]["uid"]
    assert response["allowed"] is (answer.outcome != "refused")
    if answer.outcome == "refused":
        assert "patch" not in response
        assert response["status"]["message"].startswith("drasat's admission webhook cannot read")


def test_a_pod_whose_containers_are_not_a_list_is_refused() -> None:
    """Found by the property above: `nvidia.com/gpu` conversion over `containers: true` raised a
    TypeError (a dropped connection, the pod admitted ungated)."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": True, "initContainers": True}}
    answer = admission.review(_review(pod), Dicts(), convert_extended=True)
    assert answer.outcome == "refused"
    assert answer.review["response"]["status"]["code"] == 400


@pytest.mark.parametrize(
    ("body", "uid"),
    [
        (b"not json", ""),
        (b"\xff\xfe", ""),
        (b"[]", ""),
        (json.dumps({"request": {"uid": 3}}).encode(), ""),
        (json.dumps({"request": {"uid": "u-1", "object": "x"}, "x": 1}).encode(), "u-1"),
    ],
)
def test_the_server_refuses_what_it_cannot_read_with_an_admission_review(
    served: tuple[admission.WebhookServer, pathlib.Path], body: bytes, uid: str
) -> None:
    server, cert = served
    status, answer = _post(server, cert, body)
    assert status == 200
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    if uid:  # an AdmissionReview with a uid whose object is no pod: skipped, allowed
        assert response == {"uid": uid, "allowed": True}
        return
    assert response["uid"] == uid and response["allowed"] is False
    assert response["status"]["message"].startswith("not an AdmissionReview drasat can read")
    assert [a.outcome for a in server.answers] == ["refused"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("length", [admission.MAX_BODY_BYTES + 1, -1])
def test_a_body_too_large_or_of_negative_length_is_refused_unread(
    served: tuple[admission.WebhookServer, pathlib.Path], length: int
) -> None:
    """Anyone who reaches the Service can post: a Content-Length beyond any pod's review (or
    below zero, which would read until the peer closes) is refused without reading the body."""
    server, cert = served
    context = ssl.create_default_context(cafile=str(cert))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.server_address[1], context=context, timeout=10
    )
    try:
        connection.putrequest("POST", admission.PATH)
        connection.putheader("Content-Length", str(length))
        connection.endheaders()
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200 and answer["response"]["allowed"] is False
    assert f"Content-Length {length} is not 0 to" in answer["response"]["status"]["message"]


def test_a_failure_inside_the_webhook_refuses_the_request(
    served: tuple[admission.WebhookServer, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that raises anything else is logged and the request refused, not dropped."""
    server, cert = served

    def broken(*args: Any, **kwargs: Any) -> admission.Answer:
        raise RuntimeError("a bug")

    monkeypatch.setattr(admission, "review", broken)
    status, answer = _post(server, cert, json.dumps(_review(_pod())).encode())
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["uid"] == _review(_pod())["request"]["uid"]
    assert "failed on this request" in answer["response"]["status"]["message"]
