"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), applied to plain dicts.

Purely computational: each function returns a new document and never changes its input.
Strategic merge patch is served as a merge patch (lists are replaced, not merged by key).
"""

from __future__ import annotations

import copy
from typing import Any

from drasat.sim import errors


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
