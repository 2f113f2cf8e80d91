"""What kube-apiserver's decoding makes of the objects the what-if reads: the pods and workloads
with pod templates (a CronJob's too), the PodGroups that make gangs and the `resource.k8s.io/v1`
claims, templates and classes (and every object's metadata), as Go's `encoding/json` decodes
them into the server's structs before anything validates them.

- A null is the zero value: a struct's field left absent (`replicas:` with no value, as Helm
  renders it), a map's value or a list's item the zero of its type (a label `team: null` is
  `""`). `decode` rewrites the object so, in place, once, before any model reads it.
- A value of the wrong JSON type is refused in the server's words (`json: cannot unmarshal
  string into Go struct field Container.spec.containers.command of type []string`), the first
  in the document's order: `decode` answers it, also in fields the what-if never reads.
- A quantity (`resources.limits`, a claim's `capacity.requests`) has its own decoder,
  apimachinery's `ParseQuantity`: one that does not parse (`1.5.3`, `true`, `1ki`) is refused
  in its words, which name no field (`quantities must match the regular expression ...`), and
  ends the decoding there, before an earlier value of the wrong type (`api.quantity`).
- A field the structs lack is refused by strict decoding (with strict field validation, as
  `kubectl apply` asks for): `strict decoding error: unknown field "spec.foo"`, every unknown
  field of the object in one message in the document's order (`unknown_fields`); a type error
  comes first.

`knownfields.json` holds the structs' fields and their values' types as kube-apiserver v1.37.2
serves them in its OpenAPI documents (`scripts/knownfields.py` writes it). Purely computational.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drasat.api import quantity

#: A field's type as `scripts/knownfields.py` writes it: a struct's name (with dots), "[X" (a
#: list of X), "{X" (a map of X), a scalar ("string", "string-enum", "int32", "int64", "bool",
#: "float64", "quantity", "int-or-string") or "" (taken whole).
_Structs = Mapping[str, Mapping[str, str]]
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: Go structs embedded in another, whose fields OpenAPI lists as the outer struct's own: Go's
#: errors name the embedded struct in the path (`livenessProbe.ProbeHandler.httpGet.port`).
_EMBEDDED = {
    "io.k8s.api.core.v1.Probe": ("ProbeHandler", {"exec", "httpGet", "tcpSocket", "grpc"}),
    "io.k8s.api.core.v1.Volume": ("VolumeSource", None),  # every field but `name`
}
#: Kubernetes' ObjectMeta: the metadata of every kind, and of a claim template's claims.
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@functools.cache
def _known() -> tuple[Mapping[str, str], _Structs]:
    found = json.loads((pathlib.Path(__file__).parent / "knownfields.json").read_text())
    return found["roots"], found["structs"]


def _root(obj: Mapping[str, Any]) -> str | None:
    return _known()[0].get(f"{obj.get('apiVersion')} {obj.get('kind')}")


def unknown_fields(obj: Mapping[str, Any]) -> list[str]:
    """The paths (`spec.containers[0].foo`) of the fields of `obj`, an object of a kind and
    version listed here, that the API server's structs lack, in the document's order; [] for
    other kinds."""
    root = _root(obj)
    if root is None or _all_known(_known()[1], root, obj):
        return []
    out: list[str] = []
    _walk(_known()[1], root, obj, "", out)
    return out


def unknown_metadata(obj: Mapping[str, Any], path: str = "metadata") -> list[str]:
    """The paths of the fields of `obj`'s `metadata` (an ObjectMeta of any kind) that the API
    server's struct lacks, in the document's order; `path` names where `obj`'s metadata is."""
    out: list[str] = []
    _walk(_known()[1], OBJECT_META, obj.get("metadata"), path, out)
    return out


def message(paths: list[str]) -> str:
    """The API server's words for the unknown fields `paths` (non-empty)."""
    return "strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in paths)


def _walk(structs: _Structs, struct: str, value: Any, path: str, out: list[str]) -> None:
    if not isinstance(value, Mapping):
        return  # a value of another type: decoding says so (`decode`)
    fields = structs[struct]
    for name, inner in value.items():
        here = f"{path}.{name}" if path else str(name)
        shape = fields.get(name) if isinstance(name, str) else None
        if shape is None:
            out.append(here)
            continue
        _walk_value(structs, shape, inner, here, out)


def _all_known(structs: _Structs, struct: str, value: Any) -> bool:
    """Whether `_walk` would find no unknown field: the same walk without the paths, which it
    spends most of its time spelling (a run checks every manifest, and nearly all are clean)."""
    if not isinstance(value, Mapping):
        return True
    fields = structs[struct]
    for name, inner in value.items():
        shape = fields.get(name) if isinstance(name, str) else None
        if shape is None or not _all_known_value(structs, shape, inner):
            return False
    return True


def _all_known_value(structs: _Structs, shape: str, value: Any) -> bool:
    if shape.startswith("[") and isinstance(value, list):
        return all(_all_known_value(structs, shape[1:], item) for item in value)
    if shape.startswith("{") and isinstance(value, Mapping):
        return all(_all_known_value(structs, shape[1:], item) for item in value.values())
    if "." in shape and not shape.startswith(("[", "{")):
        return _all_known(structs, shape, value)
    return True


def _walk_value(structs: _Structs, shape: str, value: Any, path: str, out: list[str]) -> None:
    if shape.startswith("[") and isinstance(value, list):
        for index, item in enumerate(value):
            _walk_value(structs, shape[1:], item, f"{path}[{index}]", out)
    elif shape.startswith("{") and isinstance(value, Mapping):
        for key, item in value.items():
            _walk_value(structs, shape[1:], item, f"{path}[{key}]", out)
    elif "." in shape and not shape.startswith(("[", "{")):
        _walk(structs, shape, value, path, out)


@dataclass(frozen=True)
class Undecodable:
    """A value the API server cannot decode: where (`spec.containers[0].command`) and its
    words for it."""

    path: str
    words: str


class _Stop(Exception):
    """A value whose own decoder (a Quantity's) refused it: Go's decoding stops there."""

    def __init__(self, found: Undecodable) -> None:
        super().__init__(found.words)
        self.found = found


def decode(obj: dict[str, Any]) -> Undecodable | None:
    """`obj` as the API server's decoder takes it, in place: nulls become the zero values Go
    makes of them. Answers the first quantity that does not parse (`1.5.3`: in apimachinery's
    words, which name no field), else the first value (in the document's order) of the wrong
    type, None when all decode. Objects of other kinds and versions: their metadata only."""
    structs = _known()[1]
    root = _root(obj)
    try:
        if root is not None:
            return _decode_struct(structs, root, obj, "", "")
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return None
        return _decode_struct(structs, OBJECT_META, metadata, "metadata", "metadata")
    except _Stop as stop:
        return stop.found


def _decode_struct(
    structs: _Structs, struct: str, value: dict[str, Any], path: str, go_path: str
) -> Undecodable | None:
    fields = structs[struct]
    first: Undecodable | None = None
    for name, inner in list(value.items()):
        shape = fields.get(name) if isinstance(name, str) else None
        if shape is None:
            continue  # an unknown field: strict decoding's (`unknown_fields`)
        if inner is None:
            del value[name]  # Go leaves the field at its zero value: as if absent
            continue
        here = f"{path}.{name}" if path else name
        go_here = f"{go_path}.{_embedded(struct, name)}{name}" if go_path else name
        found = _decode_value(structs, shape, inner, here, go_here, _go_name(struct))
        first = first or found
    return first


def _decode_value(
    structs: _Structs, shape: str, value: Any, path: str, go_path: str, owner: str
) -> Undecodable | None:
    """`owner`: the Go struct that holds the field `go_path` (the path without indexes, as
    Go's errors name it)."""
    if shape == "":
        return None  # taken whole
    if shape == "quantity":
        words = quantity.go_decode_error(value)
        if words is not None:
            # Its own decoder's error ends the decoding at once, before any value of the
            # wrong type that came earlier (which Go's decoder only notes and goes on).
            raise _Stop(Undecodable(path, words))
        return None
    if shape[0] in "[{":
        items: list[tuple[Any, Any]]
        if shape[0] == "[":
            if not isinstance(value, list):
                return _type_error(value, shape, path, go_path, owner)
            items = list(enumerate(value))
        else:
            if not isinstance(value, dict):
                return _type_error(value, shape, path, go_path, owner)
            items = list(value.items())
        first: Undecodable | None = None
        for key, item in items:
            if item is None:
                value[key] = _zero(shape[1:])
                continue
            here = f"{path}[{key}]"
            first = first or _decode_value(structs, shape[1:], item, here, go_path, owner)
        return first
    if "." in shape:
        if not isinstance(value, dict):
            return _type_error(value, shape, path, go_path, owner)
        return _decode_struct(structs, shape, value, path, go_path)
    if _scalar_decodes(shape, value):
        return None
    # An int-or-string that is no string is decoded as an int32 (its words say so).
    return _type_error(value, "int32" if shape == "int-or-string" else shape, path, go_path,
                       owner)  # fmt: skip


def _embedded(struct: str, field: str) -> str:
    """`Struct.` when `field` of `struct` belongs to a struct embedded in it, else ""."""
    found = _EMBEDDED.get(struct)
    if found is None:
        return ""
    name, fields = found
    inside = field != "name" if fields is None else field in fields
    return f"{name}." if inside else ""


def _scalar_decodes(shape: str, value: Any) -> bool:
    if shape in ("string", "string-enum"):
        return isinstance(value, str)
    if shape == "bool":
        return isinstance(value, bool)
    if shape == "float64":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if shape == "int-or-string" and isinstance(value, str):
        return True
    low, high = _INT_RANGES["int32" if shape == "int-or-string" else shape]
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


_ZEROS: dict[str, Any] = {
    "string": "", "string-enum": "", "bool": False, "int32": 0, "int64": 0, "float64": 0,
    "int-or-string": 0, "quantity": "0",
}  # fmt: skip


def _zero(shape: str) -> Any:
    """The zero value Go gives a null map value or list item of type `shape`."""
    if shape in _ZEROS:
        return _ZEROS[shape]
    return {} if "." in shape and shape[0] not in "[{" else None


def _go_name(struct: str) -> str:
    return struct.rsplit(".", 1)[-1]


def _go_type(shape: str) -> str | None:
    """Go's name of the type (None for a named string type: OpenAPI does not say its name)."""
    if shape[0] == "[":
        inner = _go_type(shape[1:]) if shape[1:] else None
        return None if inner is None else f"[]{inner}"
    if shape[0] == "{":
        inner = _go_type(shape[1:]) if shape[1:] else None
        return None if inner is None else f"map[string]{inner}"
    if "." in shape:
        package, name = shape.rsplit(".", 2)[-2:]
        return f"{package}.{name}"
    return None if shape == "string-enum" else shape


def _json_kind(value: Any, go_type: str | None) -> str:
    """How `encoding/json` names the value it could not put in a `go_type`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        if go_type is not None and go_type.startswith("int"):
            return f"number {json.dumps(value)}"  # no whole number, or out of the type's range
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def _type_error(value: Any, shape: str, path: str, go_path: str, owner: str) -> Undecodable:
    go_type = _go_type(shape)
    words = f"cannot unmarshal {_json_kind(value, go_type)} into Go struct field {owner}.{go_path}"
    return Undecodable(path, words if go_type is None else f"{words} of type {go_type}")
