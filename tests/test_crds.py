"""Generated CRDs: fresh on disk, structural, valid for Kubernetes, validating what they should."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Iterator
from typing import Any

import celpy
import crd_cases
import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from drasat.api import crds
from drasat.api.claims import GpuClaimParameters
from drasat.cli import crds as crds_cli
from drasat.cli import main

REPO = pathlib.Path(__file__).resolve().parent.parent
CHECKED_IN = REPO / "deploy" / "crds"

Schema = dict[str, Any]

#: Keywords of apiextensions.k8s.io/v1 JSONSchemaProps that a generated schema may use.
_ALLOWED = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "anyOf",
    crds.INT_OR_STRING,
    crds.PRESERVE_UNKNOWN,
    crds.VALIDATIONS,
}


def _crd(kind: str) -> Schema:
    return next(c for c in crds.all_crds() if c["spec"]["names"]["kind"] == kind)


def _schema(kind: str) -> Schema:
    schema: Schema = _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}.*")


@functools.cache
def _validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(_schema(kind))


def _errors(kind: str, obj: Schema) -> list[str]:
    validator = _validator(kind)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
    ]


# --- the checked-in files -------------------------------------------------------------------


def test_checked_in_crds_are_fresh() -> None:
    expected = crds_cli.rendered_files()
    present = {p.name for p in CHECKED_IN.glob("*.yaml")}
    assert present == set(expected), "deploy/crds is stale: run `make generate`"
    for name, text in expected.items():
        assert (CHECKED_IN / name).read_text() == text, f"{name} is stale: run `make generate`"


def test_every_kind_has_its_crd() -> None:
    names = {c["metadata"]["name"]: c["spec"]["scope"] for c in crds.all_crds()}
    assert names == {
        "gpuclaimparameters.gpu.drasat.io": "Namespaced",
        "migdeviceclaimparameters.gpu.drasat.io": "Namespaced",
        "deviceclassparameters.gpu.drasat.io": "Cluster",
        "nodeallocationstates.nas.gpu.drasat.io": "Namespaced",
    }
    nas = _crd("NodeAllocationState")["spec"]
    assert nas["names"]["shortNames"] == ["nas"]
    columns = [c["name"] for c in nas["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Status", "Age"]


# --- structural ------------------------------------------------------------------------------


@pytest.mark.parametrize("crd", crds.all_crds(), ids=crds.file_name)
def test_schema_is_structural(crd: Schema) -> None:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["properties"]["metadata"] == {"type": "object"}
    for path, node in _nodes(root):
        assert set(node) <= _ALLOWED, f"{path}: {set(node) - _ALLOWED}"
        escape = node.get(crds.INT_OR_STRING) or node.get(crds.PRESERVE_UNKNOWN)
        assert "type" in node or escape, f"{path}: no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if "anyOf" in node:
            # The one junctor use: int-or-string, whose branches carry only a type.
            assert node.get(crds.INT_OR_STRING) is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict), path


@pytest.mark.parametrize("crd", crds.all_crds(), ids=crds.file_name)
def test_crd_is_a_valid_kubernetes_object(crd: Schema) -> None:
    # The real CustomResourceDefinition schema: misspelled or misplaced CRD fields fail here.
    kubernetes_validate.validate(crd, "1.30", strict=True)


def test_recursive_selector_is_unrolled_then_preserved() -> None:
    node = _schema("GpuClaimParameters")["properties"]["spec"]["properties"]["selector"]
    for _ in range(crds.MAX_RECURSION_DEPTH - 1):
        assert node["type"] == "object" and "productName" in node["properties"]
        assert node["maxProperties"] == 1
        node = node["properties"]["andExpression"]["items"]
    assert "productName" in node["properties"]
    deepest = node["properties"]["orExpression"]["items"]
    assert deepest[crds.PRESERVE_UNKNOWN] is True
    assert "validated by the controller" in deepest["description"]


def test_optional_quantity_becomes_int_or_string() -> None:
    share = _schema("GpuClaimParameters")["properties"]["spec"]["properties"]["share"]
    memory = share["properties"]["memory"]
    assert memory[crds.INT_OR_STRING] is True
    assert memory["description"] == "GPU memory this share needs, e.g. 8Gi."
    assert share["properties"]["compute"] == {
        "description": "Percent of the GPU's compute.",
        "type": "integer",
        "maximum": 100,
        "minimum": 1,
    }


def test_defaults_are_described_not_applied() -> None:
    count = _schema("GpuClaimParameters")["properties"]["spec"]["properties"]["count"]
    assert "default" not in count
    assert count["description"] == "Number of GPUs. Default: 1."


def test_an_inexpressible_union_fails_the_generator() -> None:
    class A(BaseModel):
        a: int

    class B(BaseModel):
        b: str

    class Either(BaseModel):
        value: A | B

    with pytest.raises(crds.SchemaConversionError, match=r"Either.value: a union"):
        crds.structural_schema(Either)


def test_any_becomes_preserve_unknown_fields() -> None:
    class Loose(BaseModel):
        extra: dict[str, Any]
        anything: Any

    schema = crds.structural_schema(Loose)
    assert schema["properties"]["extra"] == {"type": "object", crds.PRESERVE_UNKNOWN: True}
    assert schema["properties"]["anything"] == {crds.PRESERVE_UNKNOWN: True}


# --- what the schemas accept and reject ---------------------------------------------------------

_GPU_CLAIM = crd_cases.GPU_CLAIM
_SAMPLES = crd_cases.SAMPLES


@pytest.mark.parametrize("obj", _SAMPLES, ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_sample_objects_validate(obj: Schema) -> None:
    assert _errors(obj["kind"], obj) == []


def test_shared_examples_validate(shared_dir: pathlib.Path) -> None:
    examples = shared_dir / "examples"
    if not examples.is_dir():
        pytest.skip("shared examples not present")
    checked = 0
    for path in sorted(examples.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            kind = (obj or {}).get("kind")
            if kind in {"NodeAllocationState", *(c.model.__name__ for c in crds.CRD_SPECS)}:
                assert _errors(kind, obj) == [], path.name
                checked += 1
    assert checked >= 2  # the NAS and the shared time-sliced claim


def test_a_selector_deeper_than_the_schema_is_preserved() -> None:
    selector: Schema = {"productName": "*h100*"}
    for _ in range(crds.MAX_RECURSION_DEPTH + 2):
        selector = {"andExpression": [selector]}
    obj = {**_GPU_CLAIM, "spec": {"selector": selector}}
    assert _errors("GpuClaimParameters", obj) == []


@pytest.mark.parametrize("case", crd_cases.BAD_OBJECTS, ids=lambda c: c.id)
def test_wrong_typed_fields_are_rejected(case: crd_cases.BadObject) -> None:
    # The same table goes to the simulated and the real API server (tests/e2e/test_e2e_crds.py).
    errors = _errors(case.kind, case.object())
    assert any(e.startswith(f"{case.dotted_field}: {case.schema_error}") for e in errors), errors


@pytest.mark.parametrize("obj", crd_cases.NAS_SAMPLES, ids=["status", "gpu"])
def test_nas_samples_validate(obj: Schema) -> None:
    assert _errors("NodeAllocationState", obj) == []


# --- the command ----------------------------------------------------------------------------------


def test_crds_command_prints_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["crds"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in documents] == [
        c["metadata"]["name"] for c in crds.all_crds()
    ]


def test_crds_command_writes_files(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main.main(["crds", "--out", str(tmp_path / "crds")]) == 0
    written = sorted(p.name for p in (tmp_path / "crds").iterdir())
    assert written == sorted(crds_cli.rendered_files())
    assert capsys.readouterr().out.count("\n") == len(written)


def test_crds_command_reports_an_unwritable_directory(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main.main(["crds", "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {blocker}: cannot write") and err.count("\n") == 1


# --- everything pydantic accepts, the CRD accepts ------------------------------------------------
# The API server sees objects before drasat does: a schema stricter than the models would make
# valid claims unappliable.

_OPERATORS = st.sampled_from(["Equals", "LessThan", "GreaterThan", "GreaterThanOrEqualTo"])
_GLOB = st.sampled_from(["*", "*a100*", "Tesla T4", "NVIDIA H100*"])
_VERSION = st.sampled_from(["8.0", "9.0", "550.54.15", "12"])
_QUANTITY = st.one_of(st.integers(0, 2**40), st.sampled_from(["40Gi", "512Mi", "5G", "1.5Gi"]))
_LEAF = st.one_of(
    st.fixed_dictionaries({"index": st.integers(0, 15)}),
    st.fixed_dictionaries({"uuid": st.text(min_size=1, max_size=8)}),
    st.fixed_dictionaries({"migEnabled": st.booleans()}),
    st.fixed_dictionaries({"memory": st.fixed_dictionaries({"value": _QUANTITY})}),
    st.fixed_dictionaries(
        {"memory": st.fixed_dictionaries({"value": _QUANTITY, "operator": _OPERATORS})}
    ),
    st.fixed_dictionaries({"productName": _GLOB}),
    st.fixed_dictionaries({"architecture": st.sampled_from(["Ampere", "Hopper*"])}),
    *(
        st.fixed_dictionaries(
            {name: st.fixed_dictionaries({"value": _VERSION, "operator": _OPERATORS})}
        )
        for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion")
    ),
)
_SELECTOR = st.recursive(
    _LEAF,
    lambda children: st.tuples(
        st.sampled_from(["andExpression", "orExpression"]),
        st.lists(children, min_size=1, max_size=3),
    ).map(lambda branch: {branch[0]: branch[1]}),
    max_leaves=12,
)
_SHARING = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {"strategy": st.just("TimeSlicing")},
        optional={
            "timeSlicingConfig": st.fixed_dictionaries(
                {"timeSlice": st.sampled_from(["Default", "Short", "Medium", "Long"])}
            )
        },
    ),
    st.fixed_dictionaries(
        {"strategy": st.just("MPS")},
        optional={
            "mpsConfig": st.fixed_dictionaries(
                {},
                optional={
                    "defaultActiveThreadPercentage": st.integers(1, 100),
                    "defaultPinnedDeviceMemoryLimit": _QUANTITY,
                    "defaultPerDevicePinnedMemoryLimit": st.dictionaries(
                        st.sampled_from(["0", "1", "GPU-x"]), _QUANTITY, max_size=2
                    ),
                },
            )
        },
    ),
)
_GPU_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "count": st.integers(1, 8),
        "selector": _SELECTOR,
        "sharing": _SHARING,
        "optional": st.booleans(),
        "topology": st.fixed_dictionaries(
            {"sameNUMANode": st.sampled_from(["Preferred", "Required"])}
        ),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_GPU_SPEC)
def test_every_valid_gpu_claim_is_accepted_by_its_crd(spec: Schema) -> None:
    obj = {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuClaimParameters", "spec": spec}
    parsed = GpuClaimParameters.model_validate(obj)  # the generator only makes valid objects
    assert _errors("GpuClaimParameters", obj) == []
    # What drasat itself writes back (defaults filled in) is accepted too.
    assert _errors("GpuClaimParameters", parsed.dump()) == []


def _our_documents(*folders: pathlib.Path) -> Iterator[tuple[str, Schema]]:
    kinds = {spec.model.__name__: spec.model for spec in crds.CRD_SPECS}
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            for number, obj in enumerate(yaml.safe_load_all(path.read_text()), start=1):
                if isinstance(obj, dict) and obj.get("kind") in kinds:
                    yield f"{path.name}#{number}", obj


def test_every_example_in_the_repository_is_accepted(shared_dir: pathlib.Path) -> None:
    folders = (REPO / "deploy" / "examples", REPO / "drasat" / "whatif", shared_dir / "examples")
    checked = 0
    for where, obj in _our_documents(*folders):
        if obj["apiVersion"].split("/")[0] not in ("gpu.drasat.io", "nas.gpu.drasat.io"):
            continue  # NVIDIA's groups: their CRDs, not ours
        model = next(s.model for s in crds.CRD_SPECS if s.model.__name__ == obj["kind"])
        try:
            model.model_validate(obj)
        except ValidationError:
            continue  # a deliberately bad example (bad-input tests); the models reject it
        assert _errors(obj["kind"], obj) == [], where
        checked += 1
    assert checked > 0


# --- CEL rules (x-kubernetes-validations) ---------------------------------------------------------

_RULE_MODELS = crd_cases.RULE_MODELS
_RULE_SAMPLES = crd_cases.RULE_SAMPLES


def _rules_of(schema: Schema) -> Iterator[tuple[str, str]]:
    for path, node in _nodes(schema):
        for rule in node.get(crds.VALIDATIONS, []):
            yield path, rule["rule"]


def test_validation_rules_sit_on_their_models() -> None:
    claim = {p for p, _ in _rules_of(_schema("GpuClaimParameters"))}
    assert claim == {".spec", ".spec.sharing", ".spec.sharing.timeSlicingConfig", ".spec.share"}
    mig = {p for p, _ in _rules_of(_schema("MigDeviceClaimParameters"))}
    assert mig == {".spec", ".spec.sharing", ".spec.sharing.timeSlicingConfig"}
    assert list(_rules_of(_schema("NodeAllocationState"))) == []
    assert set(crds.VALIDATION_RULES) == set(_RULE_MODELS)


@pytest.mark.parametrize("name", sorted(crds.VALIDATION_RULES))
def test_validation_rules_agree_with_the_models(name: str) -> None:
    environment = celpy.Environment()
    programs = [
        (environment.program(environment.compile(rule)), message)
        for rule, message in crds.VALIDATION_RULES[name]
    ]
    for sample in _RULE_SAMPLES[name]:
        failed = [m for p, m in programs if not p.evaluate({"self": celpy.json_to_cel(sample)})]
        try:
            _RULE_MODELS[name].model_validate(sample)
        except ValidationError as error:
            assert len(failed) == 1, (sample, failed)
            assert failed[0] in str(error), sample  # the model's own message
        else:
            assert failed == [], sample
