"""drasat's generated CRDs on the real kube-apiserver v1.37.2.

The CRDs install and become Established as generated (the server keeps their schemas unchanged);
every object the models accept, the server stores unchanged (no field pruned); and the bad objects
of the shared case table (`tests/crd_cases.py`, also checked by `tests/test_crds.py` against the
schemas alone) are refused with a 422 whose cause names the field, by the real server and by the
simulated one alike, with the same field.
"""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import crd_cases
import kubernetes
import pytest
import yaml
from kubecluster import install_crds
from kubernetes.client import ApiException
from pydantic import ValidationError

from drasat.api import crds
from drasat.testbed.sim.apiserver import ApiServer

REPO = pathlib.Path(__file__).resolve().parents[2]
Schema = dict[str, Any]

MODELS = {spec.model.__name__: spec.model for spec in crds.CRD_SPECS}
OUR_GROUPS = {"gpu.drasat.io", "nas.gpu.drasat.io"}


class Backend:
    """An API server serving drasat's CRDs, with a namespace of its own for the objects."""

    def __init__(self, name: str, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.name = name
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, obj: Schema, *, dry_run: bool = True) -> Schema:
        group, version, plural, namespaced = crd_cases.RESOURCES[obj["kind"]]
        options = {"dry_run": "All"} if dry_run else {}
        body = {**obj, "metadata": {**obj["metadata"]}}
        if namespaced:
            body["metadata"]["namespace"] = self.namespace
            created: Schema = self.custom.create_namespaced_custom_object(
                group, version, self.namespace, plural, body, **options
            )
        else:
            created = self.custom.create_cluster_custom_object(
                group, version, plural, body, **options
            )
        return created

    def delete(self, obj: Schema) -> None:
        group, version, plural, namespaced = crd_cases.RESOURCES[obj["kind"]]
        name = obj["metadata"]["name"]
        if namespaced:
            self.custom.delete_namespaced_custom_object(
                group, version, self.namespace, plural, name
            )
        else:
            self.custom.delete_cluster_custom_object(group, version, plural, name)

    def rejection(self, obj: Schema) -> Schema:
        """The Status body of the server's refusal to create `obj`; fails if it is accepted."""
        with pytest.raises(ApiException) as caught:
            self.create(obj)
        status: Schema = json.loads(caught.value.body)
        assert caught.value.status == 422, status
        assert status["reason"] == "Invalid", status
        return status


def _namespace(api: kubernetes.client.ApiClient) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(api)
    name = f"crds-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def real_crds(kube_api: kubernetes.client.ApiClient) -> list[Any]:
    return install_crds(kube_api, crds.all_crds())


@pytest.fixture(scope="module")
def real_backend(kube_api: kubernetes.client.ApiClient, real_crds: list[Any]) -> Iterator[Backend]:
    for namespace in _namespace(kube_api):
        yield Backend("real", kube_api, namespace)


@pytest.fixture(scope="module")
def sim_backend() -> Iterator[Backend]:
    with ApiServer.running(crds=crds.all_crds()) as server:
        configuration = kubernetes.client.Configuration(host=server.url)
        with kubernetes.client.ApiClient(configuration) as api:
            for namespace in _namespace(api):
                yield Backend("sim", api, namespace)


@pytest.fixture(params=["sim", "real"])
def backend(request: pytest.FixtureRequest) -> Backend:
    found: Backend = request.getfixturevalue(f"{request.param}_backend")
    return found


def _unique(obj: Schema) -> Schema:
    """`obj` with a fresh name (cluster-scoped kinds are shared by every test of the session)."""
    name = f"{obj.get('metadata', {}).get('name', 'obj')}-{uuid.uuid4().hex[:6]}"
    return {**obj, "metadata": {"name": name}}


def _content(obj: Schema) -> Schema:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}


# --- installation ---------------------------------------------------------------------------------


def test_crds_are_established_with_the_schemas_as_generated(
    kube_api: kubernetes.client.ApiClient, real_crds: list[Any]
) -> None:
    held = {c.metadata.name: kube_api.sanitize_for_serialization(c) for c in real_crds}
    assert set(held) == {c["metadata"]["name"] for c in crds.all_crds()}
    for crd in crds.all_crds():
        server = held[crd["metadata"]["name"]]
        assert server["status"]["acceptedNames"]["kind"] == crd["spec"]["names"]["kind"]
        assert server["spec"]["scope"] == crd["spec"]["scope"]
        for ours, theirs in zip(crd["spec"]["versions"], server["spec"]["versions"], strict=True):
            # The server dropped nothing it did not understand: same schema, same CEL rules.
            assert theirs["schema"] == ours["schema"], crd["metadata"]["name"]
            assert theirs.get("additionalPrinterColumns") == ours.get("additionalPrinterColumns")
            assert theirs.get("subresources") == ours.get("subresources")
        assert server["status"]["storedVersions"] == [v["name"] for v in crd["spec"]["versions"]]


def test_installing_again_is_harmless(kube_api: kubernetes.client.ApiClient) -> None:
    again = install_crds(kube_api, crds.all_crds())
    assert len(again) == len(crds.all_crds())


# --- accepted -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    crd_cases.SAMPLES + crd_cases.NAS_SAMPLES,
    ids=lambda o: f"{o['kind']}-{o.get('metadata', {}).get('name', next(iter(_content(o))))}",
)
def test_samples_are_stored_unchanged(backend: Backend, obj: Schema) -> None:
    obj = _unique(obj)
    created = backend.create(obj, dry_run=False)
    try:
        assert _content(created) == _content(obj)
        assert created["metadata"]["uid"]
    finally:
        backend.delete(obj)


def _our_documents(shared_dir: pathlib.Path) -> list[tuple[str, Schema]]:
    folders = (REPO / "deploy" / "examples", REPO / "drasat" / "whatif", shared_dir / "examples")
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            for number, obj in enumerate(yaml.safe_load_all(path.read_text()), start=1):
                if not isinstance(obj, dict) or obj.get("kind") not in MODELS:
                    continue
                if str(obj.get("apiVersion", "")).split("/")[0] not in OUR_GROUPS:
                    continue  # NVIDIA's groups: their CRDs, not ours
                try:
                    MODELS[obj["kind"]].model_validate(obj)
                except ValidationError:
                    continue  # a deliberately bad example; the models reject it
                found.append((f"{path.relative_to(folder.parent)}#{number}", obj))
    return found


def test_every_example_the_models_accept_the_real_server_keeps(
    real_backend: Backend, shared_dir: pathlib.Path
) -> None:
    documents = _our_documents(shared_dir)
    assert len(documents) >= 10
    for where, obj in documents:
        for variant in (obj, MODELS[obj["kind"]].model_validate(obj).dump()):
            # dump(): what drasat writes back, defaults filled in
            sent = _unique({**variant, "metadata": variant.get("metadata") or {}})
            try:
                created = real_backend.create(sent)
            except ApiException as exc:
                pytest.fail(f"{where}: the real API server refused it: {exc.body}")
            assert _content(created) == _content(sent), f"{where}: the server pruned a field"


def test_a_selector_deeper_than_the_schema_is_kept_as_written(backend: Backend) -> None:
    # Below MAX_RECURSION_DEPTH the schema preserves unknown fields: nothing may be pruned there.
    selector: Schema = {"productName": "*h100*"}
    for level in range(crds.MAX_RECURSION_DEPTH + 2):
        selector = {("andExpression", "orExpression")[level % 2]: [selector, {"index": level}]}
    obj = {**crd_cases.GPU_CLAIM, "metadata": {"name": "deep"}, "spec": {"selector": selector}}
    assert backend.create(obj)["spec"] == {"selector": selector}


# --- rejected -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", crd_cases.BAD_OBJECTS, ids=lambda c: c.id)
def test_bad_objects_are_rejected_naming_the_field(
    backend: Backend, case: crd_cases.BadObject
) -> None:
    status = backend.rejection(case.object())
    fields = [cause.get("field") for cause in status["details"]["causes"]]
    assert case.field in fields, status
    assert f"{case.field}:" in status["message"], status


@pytest.mark.parametrize("case", crd_cases.rule_cases(), ids=lambda c: c.id)
def test_validation_rules_agree_with_the_models(backend: Backend, case: crd_cases.RuleCase) -> None:
    obj = case.object()
    if case.message is None:
        backend.create(obj)  # the model accepts it: so must the CRD
        return
    status = backend.rejection(obj)
    causes = [(c.get("field"), c.get("message", "")) for c in status["details"]["causes"]]
    assert any(f == case.field and case.message in m for f, m in causes), causes


_INT64_MAX = 2**63 - 1


def test_integers_beyond_int64_are_refused(backend: Backend) -> None:
    # The real server decodes such a number as a float, whatever the schema says: a field the
    # models leave unbounded (NAS memoryBytes) still holds at most an int64.
    gpu = {"index": 0, "uuid": "GPU-0", "memoryBytes": _INT64_MAX, "productName": "T4"}
    nas = {**crd_cases.NAS_SAMPLES[1], "metadata": {"name": "big"}}
    nas["spec"] = {"allocatableDevices": [{"gpu": gpu}]}
    assert backend.create(nas)["spec"] == nas["spec"]
    nas["spec"] = {"allocatableDevices": [{"gpu": {**gpu, "memoryBytes": _INT64_MAX + 1}}]}
    status = backend.rejection(nas)
    fields = [cause.get("field") for cause in status["details"]["causes"]]
    assert "spec.allocatableDevices[0].gpu.memoryBytes" in fields, status
