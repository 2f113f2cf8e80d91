"""drasat's mutating admission webhook: pods that use drasat's claims are created with its
scheduling gate (`SCHEDULING_GATE`), so kube-scheduler tries them once, after drasat's controller
has allocated their claims and lifted the gate (docs/INSTALL.md, "Admission").

The chart installs it where the API server serves no MutatingAdmissionPolicy
(`controller.admission.mode: webhook`, Kubernetes 1.34 and 1.35 by default). Unlike the policy,
whose CEL sees only the pod, the webhook reads the pod's ResourceClaimTemplates, ResourceClaims
and their DeviceClasses, so it gates only the pods drasat allocates:

- only the CREATE of a pod that names claims (`spec.resourceClaims`), is not bound at creation
  (`spec.nodeName`: mirror pods and pods placed by hand; the API server refuses a gate there) and
  does not carry drasat's gate yet: `CLAIMS_CONDITION` and `GATE_CONDITIONS`, the CEL the chart's
  policy and webhook registration use, and `may_gate`, the same rule here;
- it is gated when one of its claims (a template's, or one it names) is drasat's to allocate
  (`v1inputs.allocates`: a request names a DeviceClass of drasat's driver, tolerating the
  allocator taint or not; a claim asking for admin access alone is not), and is not allocated
  yet; or when a template or claim it names does not
  exist yet or cannot be read: the controller lets such a pod go at its first cycle once its
  claims show it has nothing for drasat, while an ungated pod of drasat's would go the slow
  path.

Templates, claims and classes come from the webhook's own informers (every replica answers,
leader or not); a template or claim the cache does not hold yet (one created just before its
pod) is read from the API server. The registration's failurePolicy is Ignore: a webhook that
does not answer never blocks a pod, which then goes the slow path (the controller says so in its
log).

The server is the standard library's HTTP server over TLS (`serve`), reloading its certificate
and key when their files change (a Secret volume updated in place).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE
from drasat.controller import v1inputs
from drasat.kube import errors, informer
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.v1 import extended

log = logging.getLogger(__name__)

#: The path the webhook answers AdmissionReviews on (the chart's clientConfig names it).
PATH = "/gate-pods"
#: The largest body read: a pod CREATE's AdmissionReview carries one pod, which the API server
#: limits to its 3 MiB request size; a larger (or negative) Content-Length is refused unread.
MAX_BODY_BYTES = 8 * 1024 * 1024

#: The pods admission considers, as CEL on the pod (`object`): the chart's MutatingAdmissionPolicy
#: matches with these, its webhook registration with `CLAIMS_CONDITION` first; `may_gate` is the
#: same rule in Python (tests/deploy checks the chart's text, tests/e2e the real API server).
GATE_CONDITIONS: tuple[tuple[str, str], ...] = (
    # The API server refuses a scheduling gate on a pod created with its node (mirror pods, pods
    # placed by hand): kube-scheduler never sees them anyway.
    ("not-bound-at-creation", "!has(object.spec.nodeName) || object.spec.nodeName == ''"),
    # Reinvoked after another mutation (reinvocationPolicy IfNeeded): add the gate once.
    ("not-gated-by-drasat-yet",
     "!has(object.spec.schedulingGates) || "
     f"!object.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}')"),
)  # fmt: skip
#: Only pods that name claims are gated. The policy tests it in its mutation, not as a match
#: condition: a policy whose conditions did not match at first is never reinvoked, and the
#: nvidia.com/gpu conversion (another policy, in no fixed order) adds the claims.
CLAIMS_CONDITION = (
    "names-resource-claims",
    "has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0",
)


def _asks_cel(field: str) -> str:
    asks = " || ".join(
        f'(has(c.resources.{part}) && "{extended.RESOURCE}" in c.resources.{part})'
        for part in ("limits", "requests")
    )
    return (
        f"(has(object.spec.{field}) && object.spec.{field}.exists(c, has(c.resources) && ({asks})))"
    )


#: With the nvidia.com/gpu conversion (`--webhook-extended-resources`, where the API server serves
#: no MutatingAdmissionPolicy to convert): the webhook's registration matches the pods that name
#: claims or ask for the resource (`extended.asks`; the count is checked here).
CLAIMS_OR_EXTENDED_CONDITION = (
    "names-resource-claims-or-asks-nvidia-gpu",
    f"({CLAIMS_CONDITION[1]}) || {_asks_cel('initContainers')} || {_asks_cel('containers')}",
)


def may_gate(pod: Mapping[str, Any]) -> bool:
    """`CLAIMS_CONDITION` and `GATE_CONDITIONS` in Python: the pod names claims, is not bound at
    creation and does not carry drasat's gate yet. A purely computational function."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list) or not claims:
        return False
    if spec.get("nodeName"):
        return False
    return not v1inputs.has_our_gate(dict(pod))


def gate_patch(pod: Mapping[str, Any]) -> list[Obj]:
    """The JSONPatch adding drasat's gate after the pod's other gates (their order kept)."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    if isinstance(gates, list):
        return [
            {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}}
        ]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}]


# ---------------------------------------------------------------- which pods are drasat's


class Lookup:
    """Reads a pod's templates, claims and the DeviceClasses they name: from informers, or from
    the API server when the cache does not hold the object (yet)."""

    def __init__(self, api: Api, drivers: tuple[str, ...] = (DRIVER_NAME,)) -> None:
        self.api = api
        #: The drivers whose classes drasat allocates (`drasat controller --driver`).
        self.drivers = drivers
        self.classes = self._informer(r.DEVICE_CLASSES_V1)
        self.templates = self._informer(r.RESOURCE_CLAIM_TEMPLATES_V1)
        self.claims = self._informer(r.RESOURCE_CLAIMS_V1)
        self._informers = (self.classes, self.templates, self.claims)

    def _informer(self, resource: r.Resource) -> informer.Informer:
        return informer.Informer(self.api, resource, handler=lambda _kind, _obj: None)

    def start(self) -> None:
        for each in self._informers:
            each.start()

    def stop(self) -> None:
        for each in self._informers:
            each.stop_soon()
        for each in self._informers:
            each.stop()

    @property
    def synced(self) -> bool:
        return all(each.synced for each in self._informers)

    def our_classes(self) -> Mapping[str, Obj]:
        """The DeviceClasses of the drivers drasat allocates, by name (listed from the API
        server until the cache has synced: the chart creates them before any pod of drasat's)."""
        if self.classes.synced:
            return v1inputs.our_classes(self.classes.items(), self.drivers)
        return v1inputs.our_classes(self.api.list(r.DEVICE_CLASSES_V1).items, self.drivers)

    def template(self, namespace: str, name: str) -> Obj | None:
        return self._read(self.templates, r.RESOURCE_CLAIM_TEMPLATES_V1, name, namespace)

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self._read(self.claims, r.RESOURCE_CLAIMS_V1, name, namespace)

    def _read(
        self, cache: informer.Informer, resource: r.Resource, name: str, namespace: str
    ) -> Obj | None:
        """The object, or None when it does not exist. Other API errors propagate."""
        found = cache.get(f"{namespace}/{name}")
        if found is not None:
            return found
        try:
            return self.api.get(resource, name, namespace=namespace)
        except errors.NotFound:
            return None


class Reader(Protocol):
    """What `decide` reads; `Lookup` is the real one (tests pass dicts)."""

    def our_classes(self) -> Mapping[str, Obj]: ...

    def template(self, namespace: str, name: str) -> Obj | None: ...

    def claim(self, namespace: str, name: str) -> Obj | None: ...


def decide(pod: Mapping[str, Any], namespace: str, lookup: Reader) -> str | None:
    """Why the pod gets drasat's gate, or None when it does not: a claim of drasat's to
    allocate, or something that cannot be read (then the controller decides once it can)."""
    spec = pod.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        try:
            why = _entry_reason(entry, namespace, lookup)
        except errors.KubeError as error:
            return f"cannot read its claims ({error})"
        if why:
            return why
    return None


def _entry_reason(entry: Mapping[str, Any], namespace: str, lookup: Reader) -> str | None:
    if entry.get("resourceClaimTemplateName"):
        name = str(entry["resourceClaimTemplateName"])
        template = lookup.template(namespace, name)
        if template is None:
            return f"template {namespace}/{name} does not exist yet"
        spec = template.get("spec")
        claim: Obj = {"spec": spec.get("spec") if isinstance(spec, Mapping) else None}
        what = f"template {namespace}/{name}"
    elif entry.get("resourceClaimName"):
        name = str(entry["resourceClaimName"])
        found = lookup.claim(namespace, name)
        if found is None:
            return f"claim {namespace}/{name} does not exist yet"
        if v1inputs.is_allocated(found):
            return None  # allocated already (shared claim): nothing for drasat to do for it
        claim, what = found, f"claim {namespace}/{name}"
    else:
        return None  # invalid entry: the API server's validation refuses the pod
    if v1inputs.allocates(claim, lookup.our_classes()):
        return f"{what} asks for drasat's devices"
    return None


# ---------------------------------------------------------------- AdmissionReview


@dataclass(frozen=True)
class Answer:
    """One review's answer: the AdmissionReview to send, and what was decided (for the log and
    the metrics): gated, not-gated, or skipped (not a pod CREATE `may_gate` accepts)."""

    review: Obj
    outcome: str
    why: str = ""


def conversion_patch(pod: Mapping[str, Any]) -> tuple[list[Obj], Obj]:
    """The JSONPatch that turns the pod's `nvidia.com/gpu` into claims of drasat's class
    (`extended.convert`, the rule the chart's other policy applies where it is served), and the
    pod as converted. No patch when it asks for none, or for a count that is not a positive whole
    number (the pod is left as written)."""
    converted = extended.admitted(pod)
    if converted is None:
        return [], dict(pod)
    spec = pod["spec"]
    patch = [
        {"op": "replace" if field in spec else "add", "path": f"/spec/{field}",
         "value": converted["spec"][field]}
        for field in ("initContainers", "containers", "resourceClaims")
        if field in converted["spec"]
    ]  # fmt: skip
    return patch, converted


def refusal(body: Any, message: str) -> Answer:
    """A denial of a request the webhook cannot read: an AdmissionReview with `allowed: false`,
    the request's uid when it has one, and `message` for the user (outcome `refused`).

    A request it cannot parse is refused, not admitted: failurePolicy Ignore covers a webhook
    that does not answer (a pod then goes the slow path), but a malformed or unexpected request
    is answered, so it never passes through a reader that failed half way (docs/SECURITY.md)."""
    request = body.get("request") if isinstance(body, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    api_version = body.get("apiVersion") if isinstance(body, Mapping) else None
    response: Obj = {
        "uid": uid if isinstance(uid, str) else "",
        "allowed": False,
        "status": {"code": 400, "reason": "BadRequest", "message": message},
    }
    answer: Obj = {
        "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }
    return Answer(answer, "refused", message)


def review(body: Any, lookup: Reader, *, convert_extended: bool = False) -> Answer:
    """Answer an `admission.k8s.io/v1` AdmissionReview. Allowed when the pod can be read: the
    webhook only adds the gate (and, `convert_extended`, turns `nvidia.com/gpu` into claims
    first); a pod whose fields have types no Pod has is refused (`refusal`). ValueError when the
    body is not an AdmissionReview with a request uid."""
    if not isinstance(body, Mapping) or not isinstance(body.get("request"), Mapping):
        raise ValueError("not an AdmissionReview: no request")
    request = body["request"]
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ValueError("AdmissionReview request without a uid")
    response: Obj = {"uid": uid, "allowed": True}
    answer: Obj = {
        "apiVersion": str(body.get("apiVersion") or "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }
    pod = request.get("object")
    kind = request.get("kind") if isinstance(request.get("kind"), Mapping) else {}
    if (
        request.get("operation") != "CREATE"
        or (kind.get("group"), kind.get("kind")) != ("", "Pod")
        or not isinstance(pod, Mapping)
    ):
        return Answer(answer, "skipped")
    try:
        patch, pod = conversion_patch(pod) if convert_extended else ([], pod)
        outcome, why = "skipped", ""
        if may_gate(pod):
            metadata = pod.get("metadata")
            namespace = str(
                request.get("namespace")
                or (metadata.get("namespace") if isinstance(metadata, Mapping) else "")
            )
            found = decide(pod, namespace, lookup)
            outcome, why = ("not-gated", "") if found is None else ("gated", found)
            if found is not None:
                patch += gate_patch(pod)
    except (TypeError, AttributeError, KeyError, ValueError) as error:
        # Only a pod no API server would send gets here (a field of the wrong type).
        log.warning("admission: refusing pod %r: cannot read it (%s)", pod.get("metadata"), error)
        return refusal(body, f"drasat's admission webhook cannot read the pod: {error}")
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return Answer(answer, outcome, why)


# ---------------------------------------------------------------- the HTTPS server


class _Certificate:
    """The server's TLS context, made again when the certificate or key file changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._context: ssl.SSLContext | None = None
        self.context()  # a missing or bad file fails at start, not at the first pod

    def _files_stamp(self) -> tuple[int, int]:
        return os.stat(self.cert_file).st_mtime_ns, os.stat(self.key_file).st_mtime_ns

    def context(self) -> ssl.SSLContext:
        with self._lock:
            stamp = self._files_stamp()
            if self._context is None or stamp != self._stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                context.load_cert_chain(self.cert_file, self.key_file)
                if self._context is not None:
                    log.info("admission webhook: certificate %s reloaded", self.cert_file)
                self._context, self._stamp = context, stamp
            return self._context


class WebhookServer(ThreadingHTTPServer):
    """HTTPS server answering AdmissionReviews on `PATH`; each connection's TLS handshake runs in
    its own thread, so a slow client holds up no other."""

    daemon_threads = True
    #: Seconds a connection may idle (the API server keeps its connections open between reviews).
    idle_timeout_s = 60.0

    def __init__(
        self,
        address: tuple[str, int],
        certificate: _Certificate,
        lookup: Reader,
        on_answer: Callable[[Answer], None] = lambda _answer: None,
        convert_extended: bool = False,
    ) -> None:
        self.certificate = certificate
        self.lookup = lookup
        self.on_answer = on_answer
        self.convert_extended = convert_extended
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed TLS handshake (a client that went away, a port scan): not worth a traceback.
        log.debug("admission webhook: connection from %s failed", client_address, exc_info=True)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        # Headers and body go out as two writes: without this, Nagle's algorithm holds the body
        # until the client's delayed ACK (40 ms a review, measured on the real API server).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wrapped = self.certificate.context().wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, address


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    server: WebhookServer

    def setup(self) -> None:
        self.request.settimeout(self.server.idle_timeout_s)
        self.request.do_handshake()
        super().setup()

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, OSError) as error:  # a client that went away or spoke no TLS
            log.debug("admission webhook: connection from %s: %s", self.client_address, error)

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != PATH:
            self._send(404, {"message": f"not found; AdmissionReviews go to {PATH}"})
            return
        # Every request gets an AdmissionReview answer; one it cannot read is refused (never a
        # dropped connection, which the API server's failurePolicy Ignore would admit).
        body: Any = None
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True  # the body is left unread
                raise ValueError(f"Content-Length {length} is not 0 to {MAX_BODY_BYTES} bytes")
            body = json.loads(self.rfile.read(length))  # ValueError: not JSON (or not UTF-8)
            answer = review(body, self.server.lookup,
                            convert_extended=self.server.convert_extended)  # fmt: skip
        except ValueError as error:
            answer = refusal(body, f"not an AdmissionReview drasat can read: {error}")
        except Exception:
            log.exception("admission webhook: failed on a request; refused")
            answer = refusal(body, "drasat's admission webhook failed on this request (its log)")
        self.server.on_answer(answer)
        self._send(200, answer.review)

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


def serve(
    address: str,
    *,
    cert_file: str,
    key_file: str,
    lookup: Reader,
    on_answer: Callable[[Answer], None] = lambda _answer: None,
    convert_extended: bool = False,
) -> WebhookServer:
    """Serve the webhook on `host:port` (`:9443` = every interface; port 0 = any free port) in a
    thread. OSError or ssl.SSLError when the certificate or key cannot be loaded."""
    host, _, port = address.rpartition(":")
    server = WebhookServer(
        (host or "0.0.0.0", int(port)), _Certificate(cert_file, key_file), lookup, on_answer,
        convert_extended,
    )  # fmt: skip
    threading.Thread(target=server.serve_forever, name="admission", daemon=True).start()
    return server
