"""Validation of every write: built-in kinds against kubernetes-validate's bundled JSON schemas,
custom objects against their CRD's openAPIV3Schema, and the object metadata rules of all kinds.

Validators are compiled once per schema and cached; validating is purely computational.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import importlib.resources
import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema

from drasat.testbed.sim import errors, resources

log = logging.getLogger(__name__)

#: (field path, message) as reported in Status.details.causes.
Cause = tuple[str, str]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
#: The real server's words for these rules (apimachinery's validation messages).
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_KEY_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def field_path(path: Iterable[Any]) -> str:
    """`["spec", "containers", 0, "name"]` -> `spec.containers[0].name`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# --- built-in kinds -------------------------------------------------------------------------


def _schema_root(version: str, strict: bool) -> Any:
    try:
        package = importlib.resources.files("kubernetes_validate")
    except ModuleNotFoundError as exc:  # pragma: no cover - the dev extra installs it
        raise RuntimeError(
            "validating built-in kinds needs the kubernetes-validate package "
            "(pip install kubernetes-validate)"
        ) from exc
    suffix = "-local-strict" if strict else "-local"
    return package.joinpath("kubernetes-json-schema", f"v{version}.0{suffix}")


@functools.cache
def _definitions(version: str, strict: bool) -> referencing.Registry[Any]:
    text = _schema_root(version, strict).joinpath("_definitions.json").read_text()
    resource = referencing.Resource.from_contents(json.loads(text))
    registry: referencing.Registry[Any] = resource @ referencing.Registry()
    return registry


def _schema_file(api_version: str, kind: str) -> str:
    # The bundle names files `<kind>-<first label of the group>-<version>.json`.
    group, _, version = api_version.rpartition("/")
    prefix = f"{group.split('.')[0]}-" if group else ""
    return f"{kind.lower()}-{prefix}{version}.json"


@functools.cache
def _builtin_validator(
    version: str, strict: bool, api_version: str, kind: str
) -> jsonschema.protocols.Validator | None:
    path = _schema_root(version, strict).joinpath(_schema_file(api_version, kind))
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    registry = referencing.Resource.from_contents(schema) @ _definitions(version, strict)
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(
        schema, registry=registry
    )
    return validator


# --- custom resources -----------------------------------------------------------------------


def _structural(schema: Any, strict: bool = True) -> Any:
    """An openAPIV3Schema as a JSON Schema that rejects unknown fields (fieldValidation=Strict)."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "$defs"):
            out[key] = {name: _structural(sub, strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _structural(value, strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_structural(sub, strict) for sub in value]
        elif not key.startswith("x-kubernetes-") and key != "nullable":
            out[key] = value
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # OpenAPI v3.0's boolean flag is JSON Schema 2020-12's exclusive bound.
        if isinstance(out.get(exclusive), bool) and out.pop(exclusive) and bound in out:
            out[exclusive] = out.pop(bound)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    closed = strict and not preserve
    if schema.get("type") == "object" and "additionalProperties" not in out and closed:
        out["additionalProperties"] = False
        out.setdefault("properties", {})
    return out


#: A JSON float whose value is whole counts as an integer up to 2**53 (go-openapi's rule);
#: integers beyond int64 arrive here as floats (`api.decode`), so a schema's integer refuses them.
_MAX_JSON_INTEGER = 2**53


def _is_integer(_checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    return (
        isinstance(instance, float) and instance.is_integer() and abs(instance) <= _MAX_JSON_INTEGER
    )


_extend: Any = jsonschema.validators.extend  # untyped in jsonschema
_CrdValidator = _extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


def crd_validator(
    openapi_schema: Mapping[str, Any], *, strict: bool = True
) -> jsonschema.protocols.Validator:
    """Compile a CRD version's schema; apiVersion, kind and metadata are always allowed."""
    schema = _structural(openapi_schema, strict)
    properties = schema.setdefault("properties", {})
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    properties["metadata"] = {"type": "object"}
    validator: jsonschema.protocols.Validator = _CrdValidator(schema)
    return validator


@dataclasses.dataclass(frozen=True)
class CelRule:
    """One x-kubernetes-validations rule and where it sits (`[]`: list items, `{}`: map values)."""

    steps: tuple[str, ...]
    rule: str
    message: str
    program: Any


def _rule_sites(schema: Any, steps: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if not isinstance(schema, Mapping):
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        yield steps, rule
    for name, sub in (schema.get("properties") or {}).items():
        yield from _rule_sites(sub, (*steps, name))
    yield from _rule_sites(schema.get("items"), (*steps, "[]"))
    yield from _rule_sites(schema.get("additionalProperties"), (*steps, "{}"))


def cel_rules(openapi_schema: Mapping[str, Any]) -> list[CelRule]:
    """Compile a CRD version's CEL rules (transition rules, which need oldSelf, are skipped)."""
    sites = [
        (steps, rule)
        for steps, rule in _rule_sites(openapi_schema)
        if "oldSelf" not in rule["rule"]
    ]
    if not sites:
        return []
    try:
        import celpy
    except ModuleNotFoundError as exc:  # pragma: no cover - the dev extra installs it
        raise RuntimeError(
            "CRDs with x-kubernetes-validations need the cel-python package"
        ) from exc
    from celpy import celparser

    environment = celpy.Environment()
    compiled = []
    for steps, rule in sites:
        try:
            program = environment.program(environment.compile(rule["rule"]))
        except celparser.CELParseError as exc:
            # Kubernetes' CEL libraries (quantity(), isSorted(), ...) go beyond cel-python:
            # such a rule cannot be enforced here, which must not stop the CRD being served.
            log.warning("CEL rule %r not enforced: %s", rule["rule"], exc)
            continue
        message = rule.get("message") or f"failed rule: {rule['rule']}"
        compiled.append(CelRule(steps, rule["rule"], message, program))
    return compiled


def _instances(
    value: Any, steps: tuple[str, ...], path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if not steps:
        yield path, value
    elif steps[0] == "[]" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _instances(item, steps[1:], (*path, index))
    elif steps[0] == "{}" and isinstance(value, dict):
        for key, item in value.items():
            yield from _instances(item, steps[1:], (*path, key))
    elif isinstance(value, dict) and steps[0] in value:
        yield from _instances(value[steps[0]], steps[1:], (*path, steps[0]))


def _cel_causes(rules: Sequence[CelRule], obj: Mapping[str, Any]) -> list[Cause]:
    from celpy import adapter, evaluation

    causes: list[Cause] = []
    for rule in rules:
        for path, value in _instances(obj, rule.steps):
            try:
                passed = bool(rule.program.evaluate({"self": adapter.json_to_cel(value)}))
                message = rule.message
            except evaluation.CELEvalError as exc:
                text = str(exc.args[0]) if exc.args else str(exc)
                if text.startswith("undeclared reference"):
                    continue  # a Kubernetes CEL function cel-python lacks: not enforceable here
                passed = False
                message = f"{text.split(' (in activation')[0]} evaluating rule: {rule.rule}"
            if not passed:
                causes.append((field_path(path) or "<root>", message))
    return causes


def apply_defaults(schema: Any, value: Any) -> Any:
    """Fill `default`s of a structural schema into an object, as the API server does on write."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and isinstance(sub, Mapping) and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            known = schema.get("properties") or {}
            for name in value:
                if name not in known:
                    value[name] = apply_defaults(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


# --- error reporting ------------------------------------------------------------------------

#: The cause the real server adds when schema errors kept it from running a CRD's CEL rules.
CEL_SKIPPED: Cause = (
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)


def _causes(validator: jsonschema.protocols.Validator, obj: Any) -> list[Cause]:
    causes: list[Cause] = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path))):
        causes.extend(_explain(error))
    return causes


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _type_name(value: Any) -> str:
    """The JSON type of a value, as the API server names it in a type error."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "unknown")


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, int, float, bool)) else str(len(value))


#: jsonschema keywords as the API server words them for a CRD schema (go-openapi's messages);
#: `{v}` is the value, `{p}` the field path, `{x}` the keyword's bound.
_WORDING = {
    "minimum": "Invalid value: {v}: {p} in body should be greater than or equal to {x}",
    "exclusiveMinimum": "Invalid value: {v}: {p} in body should be greater than {x}",
    "maximum": "Invalid value: {v}: {p} in body should be less than or equal to {x}",
    "exclusiveMaximum": "Invalid value: {v}: {p} in body should be less than {x}",
    "multipleOf": "Invalid value: {v}: {p} in body should be a multiple of {x}",
    "minLength": "Invalid value: {v}: {p} in body should be at least {x} chars long",
    "pattern": "Invalid value: {v}: {p} in body should match '{x}'",
    "minItems": "Invalid value: {v}: {p} in body should have at least {x} items",
    "minProperties": "Invalid value: {v}: {p} in body should have at least {x} properties",
}


def _worded(error: jsonschema.ValidationError, where: str) -> str | None:
    """The real server's message for one schema error, or None to keep jsonschema's."""
    keyword = error.validator
    bound: Any = error.validator_value
    value: Any = error.instance
    if keyword == "type":
        expected = [bound] if isinstance(bound, str) else [t for t in bound if t != "null"]
        actual = _type_name(value)
        return (
            f'Invalid value (type): "{actual}": {where} in body must be of type '
            f'{expected[0] if expected else bound}: "{actual}"'
        )
    if keyword == "enum" and isinstance(bound, list):
        supported = ", ".join(json.dumps(v) for v in bound)
        return f"Unsupported value: {json.dumps(value)}: supported values: {supported}"
    if keyword == "maxLength":
        return f"Too long: may not be more than {bound} bytes"
    if keyword in ("maxItems", "maxProperties"):
        return f"Too many: {len(value)}: must have at most {bound} item{'' if bound == 1 else 's'}"
    wording = _WORDING.get(str(keyword))
    if wording is None or isinstance(value, bool):
        return None
    return wording.format(v=_shown(value), p=where, x=bound)


def _explain(error: jsonschema.ValidationError) -> list[Cause]:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = set(
            (error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else ()
        )
        unknown = [key for key in error.instance if key not in known]
        return [
            (field_path([*path, key]), f'unknown field "{field_path([*path, key])}"')
            for key in unknown
        ]
    if error.validator == "required" and isinstance(error.instance, Mapping):
        required = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [key for key in required if key not in error.instance]
        return [(field_path([*path, key]), "Required value") for key in missing]
    if error.validator in ("oneOf", "anyOf") and error.context:
        best = jsonschema.exceptions.best_match(error.context)
        return _explain(best) if best is not None else [(field_path(path), error.message)]
    where = field_path(path) or "<root>"
    return [(where, _worded(error, where) or error.message)]


def _unknown_fields(validator: jsonschema.protocols.Validator, obj: Any) -> list[tuple[Any, ...]]:
    """Paths of the fields a strict schema does not know."""
    paths: list[tuple[Any, ...]] = []
    for error in validator.iter_errors(obj):
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            known = set(schema.get("properties") or {})
            base = tuple(error.absolute_path)
            paths.extend((*base, key) for key in error.instance if key not in known)
    return paths


def _drop(obj: Any, path: tuple[Any, ...]) -> None:
    node = obj
    for part in path[:-1]:
        node = node[part]
    node.pop(path[-1], None)


def _metadata_causes(obj: Mapping[str, Any], namespaced: bool) -> list[Cause]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return [("metadata", "metadata must be an object")]
    causes: list[Cause] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append(("metadata.name", f"Invalid value: {json.dumps(name)}: {SUBDOMAIN_RULE}"))
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = str(key).rpartition("/")
        if (
            len(label) > 63
            or not _LABEL_NAME.match(label)
            or (prefix and not _DNS_SUBDOMAIN.match(prefix))
        ):
            causes.append(
                ("metadata.labels", f"Invalid value: {json.dumps(key)}: {_LABEL_KEY_RULE}")
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                ("metadata.labels", f"Invalid value: {json.dumps(value)}: {_LABEL_VALUE_RULE}")
            )
    owners = meta.get("ownerReferences") or []
    for owner in owners:
        # apimachinery names the field without the list index.
        for key, what in (
            ("apiVersion", "version"),
            ("kind", "kind"),
            ("name", "name"),
            ("uid", "uid"),
        ):
            value = (owner or {}).get(key) or ""
            if not value:
                causes.append(
                    (
                        f"metadata.ownerReferences.{key}",
                        f"Invalid value: {json.dumps(value)}: {what} must not be empty",
                    )
                )
    if sum(1 for owner in owners if (owner or {}).get("controller")) > 1:
        causes.append(
            (
                "metadata.ownerReferences",
                "Invalid value: only one reference can have Controller set to true",
            )
        )
    if not namespaced and meta.get("namespace"):
        causes.append(("metadata.namespace", "not allowed on this cluster-scoped type"))
    return causes


def _default_device_requests(claim_spec: Any) -> None:
    """resource.k8s.io/v1 request defaults: allocationMode ExactCount, and then count 1."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        alternatives = request.get("firstAvailable")
        chosen = [request.get("exactly")]
        chosen += alternatives if isinstance(alternatives, list) else []
        for entry in chosen:
            if isinstance(entry, dict):
                entry.setdefault("allocationMode", "ExactCount")
                if entry["allocationMode"] == "ExactCount":
                    entry.setdefault("count", 1)


def _default_taint_time(rule_spec: Any) -> None:
    """A DeviceTaintRule's taint gets `timeAdded` (now) when the writer leaves it out."""
    taint = rule_spec.get("taint") if isinstance(rule_spec, dict) else None
    if isinstance(taint, dict) and not taint.get("timeAdded"):
        taint["timeAdded"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Validator:
    """Validates writes for the resource types of one server; thread-safe once built."""

    def __init__(self, *, cel_rules: bool = True) -> None:
        #: Evaluate CRDs' x-kubernetes-validations. Off: as a server without CEL, or for objects
        #: stored before a rule existed (the controller must still cope with those).
        self.cel_rules = cel_rules
        self._crd: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self._crd_lax: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self._crd_schemas: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._cel: dict[tuple[str, str], list[CelRule]] = {}

    def register_crd_version(
        self, resource: resources.ResourceType, schema: Mapping[str, Any] | None
    ) -> None:
        key = (resource.api_version, resource.kind)
        if schema is None:
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        self._crd[key] = crd_validator(schema)
        self._crd_lax[key] = crd_validator(schema, strict=False)
        self._crd_schemas[key] = schema
        self._cel[key] = cel_rules(schema)

    def default(self, resource: resources.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Apply CRD schema defaults (and a few built-in defaults) in place; returns `obj`."""
        schema = self._crd_schemas.get((resource.api_version, resource.kind))
        if schema is not None:
            apply_defaults(schema, obj)
        elif resource.kind == "ResourceClaim" and resource.version == "v1alpha2":
            obj.setdefault("spec", {}).setdefault("allocationMode", "WaitForFirstConsumer")
        elif resource.kind == "ResourceClaimTemplate" and resource.version == "v1alpha2":
            inner = obj.setdefault("spec", {}).setdefault("spec", {})
            inner.setdefault("allocationMode", "WaitForFirstConsumer")
        elif resource.kind == "ResourceClaim" and resource.version == "v1":
            _default_device_requests(obj.get("spec"))
        elif resource.kind == "ResourceClaimTemplate" and resource.version == "v1":
            _default_device_requests((obj.get("spec") or {}).get("spec"))
        elif resource.kind == "DeviceTaintRule":
            _default_taint_time(obj.get("spec"))
        return obj

    def check(
        self, resource: resources.ResourceType, obj: Mapping[str, Any], *, strict: bool = True
    ) -> None:
        """Raise 422 Invalid naming every offending field path."""
        causes = self.causes(resource, obj, strict=strict)
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.invalid(kind=resource.kind, group=resource.group, name=name, causes=causes)

    def prune(self, resource: resources.ResourceType, obj: dict[str, Any]) -> list[str]:
        """Drop the fields the schema does not know, in place, as fieldValidation=Ignore|Warn
        does; the field paths dropped. Built-ins follow the schema version that knows most."""
        key = (resource.api_version, resource.kind)
        if key in self._crd:
            candidates = [_unknown_fields(self._crd[key], obj)]
        else:
            candidates = [
                _unknown_fields(validator, obj)
                for version in resource.schema_versions
                if (validator := _builtin_validator(version, True, *key)) is not None
            ]
        unknown = min(candidates, key=len, default=[])
        for path in sorted(unknown, key=len, reverse=True):
            _drop(obj, path)
        return [field_path(path) for path in unknown]

    def causes(
        self, resource: resources.ResourceType, obj: Mapping[str, Any], *, strict: bool = True
    ) -> list[Cause]:
        """Every (field path, message) the metadata rules and the schema find."""
        causes = _metadata_causes(obj, resource.namespaced)
        causes.extend(self._schema_causes(resource, obj, strict))
        return causes

    def _schema_causes(
        self, resource: resources.ResourceType, obj: Mapping[str, Any], strict: bool
    ) -> Sequence[Cause]:
        crd = (self._crd if strict else self._crd_lax).get((resource.api_version, resource.kind))
        if crd is not None:
            causes = _causes(crd, obj)
            rules = self._cel.get((resource.api_version, resource.kind), [])
            if not rules or not self.cel_rules:
                return causes
            # As the real server: a wrong type, a missing or unsupported value, or a list, map or
            # string too long stops the CEL rules, which it says in a cause of its own.
            if any(errors.blocks_cel(message) for _, message in causes):
                return [*causes, CEL_SKIPPED]
            return [*causes, *_cel_causes(rules, obj)]
        # Accepted if any version's schema accepts it; otherwise the closest version's complaints
        # (fewest causes), so a 1.34-shaped pod is not told about 1.30's field names.
        closest: list[Cause] | None = None
        for version in resource.schema_versions:
            validator = _builtin_validator(version, strict, resource.api_version, resource.kind)
            if validator is None:
                continue
            # metadata is ObjectMeta's Go validation on the real server (_metadata_causes),
            # not the schema's: e.g. an ownerReference without a uid is one cause, not two.
            causes = [
                (path, message)
                for path, message in _causes(validator, obj)
                if not path.startswith("metadata.") or message.startswith("unknown field")
            ]
            if not causes:
                return []
            if closest is None or len(causes) < len(closest):
                closest = causes
        return closest or []
