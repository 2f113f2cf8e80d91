"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), applied to plain dicts.

Purely computational: each function returns a new document and never changes its input.
Strategic merge patch knows the merge keys of the lists drasat's kinds patch (`STRATEGIC_KEYS`);
other lists are replaced, as for lists without a patch strategy.
"""

from __future__ import annotations

import copy
from typing import Any

from drasat.testbed.sim import errors


def merge(target: Any, patch: Any) -> Any:
    """Apply a merge patch: dicts merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise errors.bad_request(f"invalid JSON pointer {pointer!r}")
    return [_unescape(token) for token in pointer[1:].split("/")]


def _parent(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node


def _child(node: Any, token: str, pointer: str) -> Any:
    try:
        if isinstance(node, list):
            return node[int(token)]
        return node[token]
    except (KeyError, IndexError, ValueError, TypeError):
        raise errors.ApiError(
            422, "Invalid", f"jsonpatch: path {pointer!r} does not exist"
        ) from None


def _get(doc: Any, pointer: str) -> Any:
    node = doc
    for token in _split(pointer):
        node = _child(node, token, pointer)
    return node


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _split(pointer)
    parent = _parent(doc, tokens, pointer)
    value = _child(parent, tokens[-1], pointer)
    if isinstance(parent, list):
        del parent[int(tokens[-1])]
    else:
        del parent[tokens[-1]]
    return value


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _split(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise errors.ApiError(422, "Invalid", f"jsonpatch: index out of range in {pointer!r}")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise errors.ApiError(422, "Invalid", f"jsonpatch: cannot add at {pointer!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) in order."""
    if not isinstance(operations, list):
        raise errors.bad_request("json patch body must be a list of operations")
    result = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise errors.bad_request(f"invalid json patch operation {operation!r}")
        op, path = operation["op"], operation["path"]
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            _remove(result, path)
        elif op == "replace":
            _get(result, path)
            if path == "":
                result = copy.deepcopy(operation.get("value"))
            else:
                _remove(result, path)
                result = _add(result, path, copy.deepcopy(operation.get("value")))
        elif op == "move":
            value = _remove(result, operation["from"])
            result = _add(result, path, value)
        elif op == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, operation["from"])))
        elif op == "test":
            if _get(result, path) != operation.get("value"):
                raise errors.ApiError(422, "Invalid", f"jsonpatch: test failed at {path!r}")
        else:
            raise errors.bad_request(f"unknown json patch operation {op!r}")
    return result


# --- strategic merge patch ------------------------------------------------------------------

#: A list merged as a set of primitives (patchStrategy=merge on a []string).
SET = "<set>"

#: Lists that strategic merge patch merges, by kind: path (list indices dropped) -> merge key.
#: From the patchStrategy/patchMergeKey tags of k8s.io/api; any other list is replaced.
_COMMON: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): SET,
    ("metadata", "ownerReferences"): "uid",
}
STRATEGIC_KEYS: dict[tuple[str, str], dict[tuple[str, ...], str]] = {
    ("v1", "Pod"): {
        **_COMMON,
        ("spec", "containers"): "name",
        ("spec", "initContainers"): "name",
        ("spec", "containers", "env"): "name",
        ("spec", "containers", "ports"): "containerPort",
        ("spec", "volumes"): "name",
        ("spec", "resourceClaims"): "name",
        ("spec", "schedulingGates"): "name",
        ("status", "conditions"): "type",
        ("status", "resourceClaimStatuses"): "name",
    },
    ("v1", "Node"): {
        **_COMMON,
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
    ("resource.k8s.io/v1alpha2", "ResourceClaim"): {
        **_COMMON,
        ("status", "reservedFor"): "uid",
    },
    ("resource.k8s.io/v1alpha2", "PodSchedulingContext"): {
        **_COMMON,
        ("status", "resourceClaims"): "name",
    },
}
_DELETE_FROM = "$deleteFromPrimitiveList/"
_IGNORED_DIRECTIVES = ("$setElementOrder/", "$retainKeys")


def strategic_keys(api_version: str, kind: str) -> dict[tuple[str, ...], str]:
    """The merge keys of a kind (finalizers and ownerReferences for every kind)."""
    return STRATEGIC_KEYS.get((api_version, kind), _COMMON)


def strategic_merge(
    target: Any, patch: Any, keys: dict[tuple[str, ...], str], path: tuple[str, ...] = ()
) -> Any:
    """Apply a strategic merge patch: maps merge, lists with a merge key merge by it, primitive
    sets are unions, `$patch: delete|replace` and `$deleteFromPrimitiveList/` are honoured."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(_IGNORED_DIRECTIVES) or key == "$patch":
            continue
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            remove = set(value or [])
            result[field] = [item for item in result.get(field) or [] if item not in remove]
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = (*path, key)
        strategy = keys.get(child)
        if isinstance(value, list) and strategy == SET:
            merged = list(result.get(key) or [])
            result[key] = merged + [item for item in value if item not in merged]
        elif isinstance(value, list) and strategy is not None:
            result[key] = _merge_list(result.get(key) or [], value, strategy, keys, child)
        else:
            result[key] = strategic_merge(result.get(key), value, keys, child)
    return result


def _merge_list(
    current: list[Any],
    patch: list[Any],
    merge_key: str,
    keys: dict[tuple[str, ...], str],
    path: tuple[str, ...],
) -> list[Any]:
    merged = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise errors.bad_request(f"{'.'.join(path)}: list item without merge key {merge_key!r}")
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(strategic_merge({}, item, keys, path))
        else:
            merged[index] = strategic_merge(merged[index], item, keys, path)
    return merged
