"""The API server as the what-if's oracle: generated manifests (tests/whatif/manifestgen.py:
valid, and with the mistakes users make in CEL, references, versions, limits, field types and
counts) go both to `drasat whatif -f` and, object by object, to the real kube-apiserver v1.37 as
`kubectl apply --dry-run=server` sends them (a create with `dryRun=All`, strict field
validation). The what-if refuses (exit 2, one line naming the file, the document and object, and
the field) exactly what the server refuses, and never refuses what it accepts.

The classes the what-if has built in (drasat's and NVIDIA's) exist in the cluster, as the charts
install them. The long run: `DRASAT_APISERVER_EXAMPLES=N` (docs/RELIABILITY.md)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import decodingcases
import kubernetes
import manifestgen
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from kubernetes.client import ApiException

from drasat.api import quantity
from drasat.whatif import v1cluster

if TYPE_CHECKING:
    from conftest import RunCli

Obj = dict[str, Any]

EXAMPLES = int(os.environ.get("DRASAT_APISERVER_EXAMPLES", "100"))
#: apimachinery's words for a quantity it cannot parse.
QUANTITY_WORDS = (quantity.FORMAT_WRONG, quantity.SUFFIX_WRONG, quantity.NUMERIC_WRONG)


@dataclass(frozen=True)
class Refusal:
    """The server's answer to one object it refused."""

    document: int  # 1-based, as the what-if numbers documents
    status: int
    message: str
    fields: tuple[str, ...]


@pytest.fixture(scope="module")
def installed_classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    """The DeviceClasses the what-if assumes, created for real (as the charts install them)."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    for body in v1cluster.device_classes().values():
        try:
            custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", body)
        except ApiException as error:
            if error.status != 409:
                raise
    yield


def _plural(kind: str) -> str:
    lower = kind.lower()
    return lower + ("es" if lower.endswith("s") else "s")


def _path(obj: Obj, namespace: str) -> str:
    version = str(obj["apiVersion"])
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    if obj["kind"] == "DeviceClass":
        return f"{base}/{_plural(obj['kind'])}"
    return f"{base}/namespaces/{namespace}/{_plural(str(obj['kind']))}"


def server_refusals(
    api: kubernetes.client.ApiClient, objects: list[Obj], namespace: str
) -> list[Refusal]:
    """Each object created with dryRun=All and strict field validation; the refused ones."""
    out = []
    for number, obj in enumerate(objects, start=1):
        request = api.param_serialize(
            method="POST",
            resource_path=_path(obj, namespace),
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=obj,
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(*request)
            code, text = response.status, response.read().decode()
        except ApiException as error:
            code, text = int(error.status), str(error.body or "")
        if code < 400:
            continue
        status = _status(text)
        causes = (status.get("details") or {}).get("causes") or []
        fields = tuple(str(c.get("field", "")) for c in causes if c.get("field"))
        out.append(Refusal(number, code, str(status.get("message", "")), fields))
    return out


def _status(text: str) -> Obj:
    try:
        found = json.loads(text or "{}")
    except ValueError:
        return {"message": text}
    return found if isinstance(found, dict) else {"message": text}


_LINE = re.compile(
    r"^error: (?P<file>.+?): document (?P<document>\d+): (?P<object>[^:]+): (?P<rest>.*)$"
)


def _field(rest: str) -> str:
    """The field path the what-if named: the text before its first `: ` (`spec.x[0].y`)."""
    return rest.split(": ", 1)[0]


def _normal(path: str) -> str:
    """A field path without index and key parts, for comparing the two spellings."""
    return re.sub(r"\[[^]]*\]", "", path)


def _names_the_field(mine: str, refusal: Refusal, decoding: bool = False) -> bool:
    """Whether the what-if's field is one the server named for the object (a cause's field, or
    the field a decode error names; for a version or kind the server does not serve, those)."""
    if refusal.status == 404:
        return mine in ("apiVersion", "kind")
    if any(
        _normal(f) == _normal(mine) or _normal(f).startswith(_normal(mine) + ".")
        for f in refusal.fields
    ):
        return True
    # Decode errors (a string for an int, an unknown field) name the field in the message; the
    # server stops at the first in the document's order, the what-if may name another of them.
    last = _normal(mine).rsplit(".", 1)[-1]
    return last in refusal.message or (refusal.status == 400 and decoding)


#: What the server says it could not decode: `json: cannot unmarshal ... into Go struct field
#: Struct.path of type T`, `strict decoding error: unknown field "path", ...`, or a quantity's
#: own decoder's words, which name no field.
_DECODING = re.compile(
    r"cannot be handled as an? \w+: (?:json: )?(?P<words>cannot unmarshal \S+(?: \S+)? into Go "
    r"struct field \w+\.(?P<path>\S+) of type \S+|strict decoding error: unknown field "
    r'"(?P<unknown>[^"]+)".*|(?P<quantity>' + "|".join(re.escape(w) for w in QUANTITY_WORDS) + "))$"
)


def decoding_words(refusal: Refusal) -> tuple[str, str] | None:
    """(the field, the server's words) of a refusal for what did not decode; None for others.
    The field is "" for a quantity: its words name none."""
    found = _DECODING.search(refusal.message) if refusal.status == 400 else None
    if found is None:
        return None
    return found["path"] or found["unknown"] or "", found["words"]


def _same_words(rest: str, refusal: Refusal) -> bool:
    """Where the server could not decode the field the what-if names, the what-if says it in the
    server's words (of several unknown fields, the server lists all and the what-if the first)."""
    server = decoding_words(refusal)
    field, _, said = rest.partition(": ")
    if server is not None and not server[0]:
        return said == server[1]  # a quantity: the server stops there, whatever came before
    if server is None or _normal(field) != _normal(server[0]):
        return True  # another problem, or another field of several: the field check decides
    said = said.split("; ")[0]
    # A long message is cut to its head in one line (drasat.api.inputerrors): the head counts.
    cut = _CUT.fullmatch(said)
    return server[1].startswith(cut["head"] if cut else said)


_CUT = re.compile(r"(?P<head>.*)… \(\d+ more characters\)", re.DOTALL)


def compare(
    run_cli: RunCli, api: kubernetes.client.ApiClient, namespace: str, case: manifestgen.Case
) -> None:
    refused = server_refusals(api, case.objects, namespace)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "app.yaml"
        path.write_text(yaml.safe_dump_all(case.objects, sort_keys=False))
        result = run_cli("-f", str(path))
    said = (
        f"mistakes {case.mistakes}; server: {refused}; what-if: {result.err or result.out[-300:]}"
    )
    if not refused:
        assert result.code in (0, 1), f"the what-if refuses what the server accepts: {said}"
        return
    assert result.code == 2, f"the what-if accepts what the server refuses: {said}"
    lines = result.err.splitlines()
    assert len(lines) == 1, said
    found = _LINE.match(lines[0])
    assert found is not None and found["file"] == str(path), said
    by_document = {r.document: r for r in refused}
    refusal = by_document.get(int(found["document"]))
    assert refusal is not None, f"the what-if names a document the server accepts: {said}"
    decoding = any(
        m in found["rest"].split("; ")[0]
        for m in ("unknown field", "Input should be a valid", "cannot unmarshal", *QUANTITY_WORDS)
    )
    assert _names_the_field(_field(found["rest"]), refusal, decoding), f"another field: {said}"
    assert _same_words(found["rest"], refusal), f"not the server's words: {said}"


@pytest.mark.parametrize("case", sorted(decodingcases.CASES))
def test_what_does_not_decode_is_refused_in_the_servers_words(
    case: str,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    """The common type mistakes, each refused by the server with the words recorded in
    decodingcases (still its words) and by the what-if with the same words."""
    obj, words = decodingcases.CASES[case]
    (refusal,) = server_refusals(kube_api, [obj], whatif_oracle_namespace)
    server = decoding_words(refusal)
    assert server is not None and server[1] == words, refusal
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = run_cli("-f", str(path))
    found = _LINE.match(result.err.strip())
    assert result.code == 2 and found is not None, result.err
    assert _same_words(found["rest"], refusal) and words in found["rest"], (refusal, result.err)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(case=manifestgen.cases(namespace="whatif-oracle"))
def test_the_whatif_refuses_exactly_what_the_api_server_refuses(
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,
    installed_classes: None,
    case: manifestgen.Case,
) -> None:
    compare(run_cli, kube_api, whatif_oracle_namespace, case)


@pytest.fixture(scope="module")
def whatif_oracle_namespace(kube_api: kubernetes.client.ApiClient) -> Iterator[str]:
    """The namespace the generated objects name (one for the module: dry runs store nothing)."""
    core = kubernetes.client.CoreV1Api(kube_api)
    try:
        core.create_namespace({"metadata": {"name": "whatif-oracle"}})
    except ApiException as error:
        if error.status != 409:
            raise
    yield "whatif-oracle"
