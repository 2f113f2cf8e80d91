"""CustomResourceDefinitions of drasat's kinds, generated from the API models.

This is a purely computational module: it turns pydantic JSON schemas into
`apiextensions.k8s.io/v1` CustomResourceDefinition dicts and does no I/O (`drasat crds` writes
them as YAML; `deploy/crds/` holds the checked-in copy and a test fails when it is stale).

Kubernetes accepts only *structural* schemas, so the conversion
- inlines every `$ref` (CRD schemas have no `$defs`);
- turns `Optional[X]` (`anyOf: [X, {type: null}]`) into X: the API server prunes nulls anyway;
- marks int-or-string unions (Quantity) with `x-kubernetes-int-or-string: true`;
- keeps enums, bounds, `required` and descriptions, turns `const` into a one-value enum;
- drops `title`, `additionalProperties: false` (the API server prunes or, with strict field
  validation, rejects unknown fields itself) and `default` (objects are stored as the user wrote
  them; pydantic applies the defaults when drasat reads them, and the description says them);
- states what the models' validators check across fields where a schema can: "exactly one field"
  as `minProperties`/`maxProperties`, the claim-parameter rules as CEL `x-kubernetes-validations`.

A CRD schema cannot be recursive, but a GpuSelector nests to any depth. The schema therefore
unrolls a recursive model `MAX_RECURSION_DEPTH` levels deep; below that it accepts any object
(`x-kubernetes-preserve-unknown-fields: true`) and the controller validates the rest with pydantic
when it reads the claim, reporting a bad deep selector with its field path.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from drasat.api import groups
from drasat.api.base import Object
from drasat.api.claims import DeviceClassParameters, GpuClaimParameters, MigDeviceClaimParameters
from drasat.api.nas import NodeAllocationState

Schema = dict[str, Any]
Scope = Literal["Namespaced", "Cluster"]

#: Levels of a recursive model (GpuSelector) the CRD schema spells out; deeper levels are
#: preserved as written and validated by the controller.
MAX_RECURSION_DEPTH = 4

INT_OR_STRING = "x-kubernetes-int-or-string"
PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"

#: JSON-schema keywords copied unchanged; any other keyword is an error, so a model change that
#: the CRD cannot express fails the generator instead of producing a schema the server rejects.
_SCALAR_KEYWORDS = frozenset(
    {
        "type",
        "description",
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
        "required",
    }
)
VALIDATIONS = "x-kubernetes-validations"
#: `propertyNames` (the length of a map's keys, from the models' string limit) has no structural
#: equivalent; the models check it when drasat reads the object.
_DROPPED_KEYWORDS = frozenset({"title", "default", "examples", "propertyNames"})

#: Rules the models check in validators that a structural schema can state exactly, keyed by
#: model (JSON-schema definition) name: these objects hold exactly one field.
_EXACTLY_ONE_FIELD = frozenset({"GpuSelector", "AllocatableDevice"})

#: The other validator rules of the claim-parameter models, as CEL (`x-kubernetes-validations`)
#: with the models' own messages, so `kubectl apply` rejects such objects at once instead of
#: the controller reporting them in an Event later (it still checks them with pydantic). These
#: models sit at fixed places in their objects, so each rule runs once per object and its CEL
#: cost stays trivial; NodeAllocationState, written only by drasat, gets none.
VALIDATION_RULES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "GpuClaimParametersSpec": (
        (
            "!has(self.share) || !has(self.count) || self.count == 1",
            "a share claim takes part of one GPU: count must be 1",
        ),
    ),
    "GpuShare": (
        ("has(self.compute) || has(self.memory)", "a share needs compute, memory or both"),
    ),
    "MigDeviceClaimParametersSpec": (
        (
            "has(self.profile) || has(self.memory) || has(self.computeSlices)",
            "set profile, or state needs with memory and/or computeSlices",
        ),
        (
            "!has(self.profile) || !(has(self.memory) || has(self.computeSlices))",
            "set either profile or needs (memory/computeSlices), not both",
        ),
    ),
    "GpuSharing": (
        (
            "!has(self.mpsConfig) || (has(self.strategy) && self.strategy == 'MPS')",
            "mpsConfig is set but strategy is TimeSlicing",
        ),
        (
            "!has(self.timeSlicingConfig) || !has(self.strategy) || self.strategy == 'TimeSlicing'",
            "timeSlicingConfig is set but strategy is MPS",
        ),
    ),
    "TimeSlicingConfig": (
        (
            "!has(self.timeSlice) || !has(self.interval) || self.timeSlice == self.interval",
            "timeSlice and interval disagree; set only one",
        ),
    ),
}


class SchemaConversionError(ValueError):
    """The model uses a JSON-schema construct that a structural CRD schema cannot express."""


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry (what `kubectl get` shows)."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""

    def dump(self) -> Schema:
        column: Schema = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        return column


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class CrdSpec:
    """What a CRD needs beyond its model: names, scope and how `kubectl get` prints it."""

    model: type[Object]
    group: str
    plural: str
    scope: Scope
    description: str
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    categories: tuple[str, ...] = field(default=("drasat",))
    #: Add the CEL rules of VALIDATION_RULES (objects users write, not drasat's own records).
    validation_rules: bool = True


def structural_schema(
    model: type[BaseModel],
    *,
    max_depth: int = MAX_RECURSION_DEPTH,
    rules: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
) -> Schema:
    """The model's JSON schema as a structural, non-recursive OpenAPI v3 schema.

    `rules`: CEL rules (rule, message) to attach to the schema of each named model.
    """
    source = model.model_json_schema(by_alias=True)
    definitions: Mapping[str, Schema] = source.pop("$defs", {})
    converter = _Converter(definitions, max_depth, rules or {})
    return converter.convert(source, path=model.__name__, stack=(model.__name__,))


@dataclass
class _Converter:
    definitions: Mapping[str, Schema]
    max_depth: int
    rules: Mapping[str, tuple[tuple[str, str], ...]]

    def convert(self, node: Schema, *, path: str, stack: tuple[str, ...]) -> Schema:
        if "$ref" in node:
            return self._inline(node, path=path, stack=stack)
        if "anyOf" in node:
            return self._union(node, path=path, stack=stack)
        for keyword in ("oneOf", "allOf", "not", "discriminator"):
            if keyword in node:
                raise SchemaConversionError(f"{path}: `{keyword}` has no structural equivalent")
        return self._plain(node, path=path, stack=stack)

    def _inline(self, node: Schema, *, path: str, stack: tuple[str, ...]) -> Schema:
        name = str(node["$ref"]).rpartition("/")[2]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if stack.count(name) >= self.max_depth:
            return _preserved(name, siblings.get("description"), self.max_depth)
        # The referring field's description and default say more than the model's docstring.
        merged = {**copy.deepcopy(self.definitions[name]), **siblings}
        schema = self.convert(merged, path=path, stack=(*stack, name))
        if name in _EXACTLY_ONE_FIELD:
            schema.update(minProperties=1, maxProperties=1)
        if name in self.rules:
            schema[VALIDATIONS] = [{"rule": r, "message": m} for r, m in self.rules[name]]
        return schema

    def _union(self, node: Schema, *, path: str, stack: tuple[str, ...]) -> Schema:
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) == 1:
            # Optional[X]: X, with the field's own description and default winning.
            return self.convert({**options[0], **rest}, path=path, stack=stack)
        # The string's length limit (MAX_STRING) is the models' to check: an int-or-string
        # schema holds nothing else.
        if sorted(str(o.get("type")) for o in options) == ["integer", "string"] and all(
            set(o) <= {"type", "maxLength"} for o in options
        ):
            schema: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
            schema[INT_OR_STRING] = True
            description = _describe(rest)
            if description:
                schema["description"] = description
            return _ordered(schema)
        raise SchemaConversionError(
            f"{path}: a union of {json.dumps(options)} has no structural equivalent"
        )

    def _plain(self, node: Schema, *, path: str, stack: tuple[str, ...]) -> Schema:
        schema: Schema = {}
        for key, value in node.items():
            if key in _DROPPED_KEYWORDS or key.startswith("x-kubernetes-"):
                continue
            if key == "const":
                schema["enum"] = [value]
            elif key == "properties":
                schema["properties"] = {
                    name: self.convert(sub, path=f"{path}.{name}", stack=stack)
                    for name, sub in value.items()
                }
            elif key == "items":
                schema["items"] = self.convert(value, path=f"{path}[]", stack=stack)
            elif key == "additionalProperties":
                if isinstance(value, dict) and value:
                    schema[key] = self.convert(value, path=f"{path}.*", stack=stack)
                elif value is True or value == {}:
                    schema[PRESERVE_UNKNOWN] = True
            elif key in _SCALAR_KEYWORDS:
                schema[key] = copy.deepcopy(value)
            else:
                raise SchemaConversionError(f"{path}: JSON-schema keyword `{key}` is not supported")
        description = _describe(node)
        if description:
            schema["description"] = description
        if "type" not in schema and PRESERVE_UNKNOWN not in schema:
            # `Any`: a structural schema needs a type or an explicit "anything goes".
            schema[PRESERVE_UNKNOWN] = True
        return _ordered(schema)


def _ordered(schema: Schema) -> Schema:
    """Description and type first, so the generated YAML reads like documentation."""
    head: Schema = {k: schema[k] for k in ("description", "type") if k in schema}
    return {**head, **{k: v for k, v in schema.items() if k not in head}}


def _describe(node: Schema) -> str:
    """The node's description, with its default appended when the text does not say it."""
    description = str(node.get("description", "")).strip()
    default = node.get("default")
    if default is None or default == [] or default == {} or "default" in description.lower():
        return description
    spelled = json.dumps(default) if not isinstance(default, str) else default
    return f"{description} Default: {spelled}.".strip()


def _preserved(name: str, description: object, depth: int) -> Schema:
    note = (
        f"A {name} nested deeper than {depth} levels: kept as written here and validated by "
        "the controller when it reads the object."
    )
    text = f"{description} {note}" if description else note
    return {"type": "object", PRESERVE_UNKNOWN: True, "description": text}


def crd_for(spec: CrdSpec) -> Schema:
    """The CustomResourceDefinition of one kind. Pure."""
    kind = spec.model.model_fields["kind"].default
    schema = structural_schema(
        spec.model, rules=VALIDATION_RULES if spec.validation_rules else None
    )
    properties = schema["properties"]
    properties["apiVersion"] = {
        "type": "string",
        "description": "Versioned schema of this representation of an object.",
    }
    properties["kind"] = {"type": "string", "description": "REST resource this object represents."}
    properties["metadata"] = {"type": "object"}
    required = [r for r in schema.get("required", []) if r not in ("apiVersion", "kind")]
    root: Schema = {"type": "object", "description": spec.description, "properties": properties}
    if required:
        root["required"] = required
    names: Schema = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": spec.plural,
        "singular": kind.lower(),
    }
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    version: Schema = {
        "name": groups.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [c.dump() for c in spec.printer_columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{spec.plural}.{spec.group}"},
        "spec": {"group": spec.group, "names": names, "scope": spec.scope, "versions": [version]},
    }


#: Every kind drasat defines as a custom resource. NodeAllocationState has no status
#: subresource: as in NVIDIA's driver its `status` is a top-level string that the node plugin
#: writes together with the object.
CRD_SPECS: tuple[CrdSpec, ...] = (
    CrdSpec(
        GpuClaimParameters,
        groups.PARAMS_GROUP,
        "gpuclaimparameters",
        "Namespaced",
        "Parameters of a ResourceClaim for whole or partial GPUs.",
        printer_columns=(
            PrinterColumn("Count", ".spec.count", "integer", "Number of GPUs."),
            PrinterColumn("Sharing", ".spec.sharing.strategy", description="Sharing strategy."),
            PrinterColumn("Optional", ".spec.optional", "boolean", "Soft request."),
            AGE,
        ),
    ),
    CrdSpec(
        MigDeviceClaimParameters,
        groups.PARAMS_GROUP,
        "migdeviceclaimparameters",
        "Namespaced",
        "Parameters of a ResourceClaim for a MIG device, by profile or by needs.",
        printer_columns=(
            PrinterColumn("Profile", ".spec.profile", description="MIG profile, if named."),
            PrinterColumn("Memory", ".spec.memory", description="Memory needed, if by needs."),
            AGE,
        ),
    ),
    CrdSpec(
        DeviceClassParameters,
        groups.PARAMS_GROUP,
        "deviceclassparameters",
        "Cluster",
        "Parameters of a ResourceClass of the gpu.drasat.io driver.",
        printer_columns=(
            PrinterColumn("Sharable", ".spec.sharable", "boolean", "Claims may be shared."),
            AGE,
        ),
    ),
    CrdSpec(
        NodeAllocationState,
        groups.NAS_GROUP,
        "nodeallocationstates",
        "Namespaced",
        "One node's GPUs, the claims allocated on them and the claims prepared there.",
        short_names=("nas",),
        validation_rules=False,
        printer_columns=(
            PrinterColumn("Status", ".status", description="Ready once the node plugin published."),
            AGE,
        ),
    ),
)


def all_crds(specs: Sequence[CrdSpec] = CRD_SPECS) -> list[Schema]:
    """Every CRD drasat installs, in a stable order. Pure."""
    return [crd_for(spec) for spec in specs]


def file_name(crd: Mapping[str, Any]) -> str:
    """`<group>_<plural>.yaml`, the name controller-gen would give the file."""
    spec = crd["spec"]
    return f"{spec['group']}_{spec['names']['plural']}.yaml"
