"""Reading the Events the controller wrote."""

from __future__ import annotations

from typing import Any

from drasat.kube import resources as r
from drasat.kube.client import Api


def events_for(api: Api, namespace: str, name: str, reason: str | None = None) -> list[Any]:
    return [
        e
        for e in api.list(r.EVENTS, namespace=namespace).items
        if e["involvedObject"]["name"] == name and reason in (None, e["reason"])
    ]
