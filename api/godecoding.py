"""How kube-apiserver words an object it cannot decode, for a pydantic model of a Kubernetes kind.

The API server decodes a request body with Go's `encoding/json` into its Go structs before it
validates anything, and refuses what does not decode with that package's words:

- a value of the wrong JSON type: `json: cannot unmarshal string into Go struct field
  ExactDeviceRequest.spec.devices.requests.exactly.count of type int64` (the Go struct that holds
  the field, the field's JSON path from the object's root without list indexes, the Go type;
  a number that is not a whole one for an integer field is `number 2.5`);
- a field the struct lacks (strict field validation, what `kubectl apply` asks for):
  `strict decoding error: unknown field "spec.devices.requests[0].exactly.cout"`.

A model says it stands for a Kubernetes kind by `go_decoding = True` on its root class; each of
its models may name its Go struct (`go_struct`, default the class name; `{kind}` stands for the
root object's kind, as one model serves DeploymentSpec and ReplicaSetSpec) and the Go integer
type of its integer fields (`go_ints`, default `int64`). `message` answers None where it cannot
say what Go would (the caller keeps pydantic's words then). This is a purely computational module.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

#: pydantic error types that are Go decoding errors of a value of the wrong JSON type.
TYPE_ERRORS = frozenset({
    "int_type", "int_parsing", "int_from_float", "bool_type", "bool_parsing", "string_type",
    "float_type", "float_parsing", "list_type", "dict_type", "model_type", "model_attributes_type",
})  # fmt: skip


def applies(model: type[BaseModel] | None) -> bool:
    """Whether `model` stands for a Kubernetes kind the API server decodes."""
    return model is not None and bool(getattr(model, "go_decoding", False))


def message(
    model: type[BaseModel], error: dict[str, Any], kind: str, location: Sequence[int | str]
) -> str | None:
    """The API server's words for one pydantic error of `model` (None: not a decoding error, or
    one whose Go form it cannot tell). `location` is the error's field path without pydantic's
    union tags; `kind` the root object's kind."""
    if error["type"] == "extra_forbidden":
        return f'strict decoding error: unknown field "{_indexed(location)}"'
    if error["type"] not in TYPE_ERRORS:
        return None
    found = _field(model, location, kind)
    if found is None:
        return None
    struct, annotation, go_int = found
    go_type = _go_type(annotation, go_int, kind)
    value = _json_kind(error.get("input"), go_type)
    if go_type is None or value is None:
        return None
    path = ".".join(p for p in location if isinstance(p, str))
    return f"cannot unmarshal {value} into Go struct field {struct}.{path} of type {go_type}"


def _indexed(location: Sequence[int | str]) -> str:
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _go_name(model: type[Any], kind: str) -> str:
    return str(getattr(model, "go_struct", model.__name__)).format(kind=kind)


def _strip(annotation: Any) -> Any:
    """`X | None` -> X; `Annotated[X, ...]` -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
            continue
        return annotation


def _field(
    model: type[BaseModel], location: Sequence[int | str], kind: str
) -> tuple[str, Any, str] | None:
    """(Go struct holding the last field, its annotation, its Go integer type) along `location`."""
    current: Any = model
    struct: str | None = None
    annotation: Any = None
    go_int = "int64"
    for part in location:
        current = _strip(current)
        if isinstance(part, int):
            if typing.get_origin(current) is not list:
                return None
            current = typing.get_args(current)[0]
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        fields = current.model_fields
        name = next((n for n, f in fields.items() if (f.alias or n) == part), None)
        if name is None:
            return None
        struct = _go_name(current, kind)
        go_int = dict(getattr(current, "go_ints", {})).get(part, "int64")
        annotation = current = fields[name].annotation
    if struct is None:
        return None
    return struct, annotation, go_int


def _go_type(annotation: Any, go_int: str, kind: str) -> str | None:
    annotation = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is list:
        inner = _go_type(typing.get_args(annotation)[0], go_int, kind)
        return None if inner is None else f"[]{inner}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        inner = _go_type(value, go_int, kind)
        return None if key is not str or inner is None else f"map[string]{inner}"
    if annotation is bool:
        return "bool"
    if annotation is str:
        return "string"
    if annotation is int:
        return go_int
    if annotation is float:
        return "float64"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel | enum.Enum):
        return f"v1.{_go_name(annotation, kind)}"
    return None


def _json_kind(value: Any, go_type: str | None) -> str | None:
    """How `encoding/json` names the value it could not put in a `go_type`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        if go_type is not None and go_type.startswith(("int", "uint")):
            return f"number {json.dumps(value)}"  # a literal that is no whole number there
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return None  # null decodes into anything
