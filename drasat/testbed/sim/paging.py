"""List paging (`limit`, `continue`), purely computational."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from drasat.testbed.sim import errors

Obj = dict[str, Any]


def page(items: list[Obj], query: Mapping[str, str]) -> tuple[list[Obj], Obj]:
    """One page of a sorted list and the list metadata to add (`continue`, remaining count).

    Pages go in (namespace, name) order and the token is the last key, so unlike the real
    server later pages show the current state, not the first page's snapshot.
    """

    def key(obj: Obj) -> list[str]:
        return [obj["metadata"].get("namespace", ""), obj["metadata"]["name"]]

    token = query.get("continue")
    if token:
        try:
            after = json.loads(base64.urlsafe_b64decode(token.encode()))
        except ValueError:
            raise errors.bad_request(f"invalid continue token {token!r}") from None
        items = [obj for obj in items if key(obj) > after]
    try:
        limit = int(query.get("limit") or 0)
    except ValueError:
        raise errors.bad_request(f"invalid limit {query.get('limit')!r}") from None
    if limit <= 0 or len(items) <= limit:
        return items, {}
    chosen = items[:limit]
    token = base64.urlsafe_b64encode(json.dumps(key(chosen[-1])).encode()).decode()
    return chosen, {"continue": token, "remainingItemCount": len(items) - limit}
