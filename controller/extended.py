"""The ResourceClaimTemplates of drasat's extended-resource conversion (`drasat.v1.extended`): a
pod whose `nvidia.com/gpu` became claims at admission names `drasat-nvidia-com-gpu-<N>` in its
namespace; the controller creates each such template the first time a pending pod names it, and
the resourceclaim controller (which retries a pod when a template it waits for appears) then
makes the pod's claims, which drasat allocates as any other. Templates stay (one per count and
namespace, a few objects) and are never changed once made."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api
from drasat.v1 import extended

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class TemplateKeeper:
    """Creates the templates that pending pods name and that do not exist yet."""

    def __init__(self, api: Api) -> None:
        self.api = api
        #: (namespace, name) of the templates known to exist.
        self._known: set[tuple[str, str]] = set()

    def ensure(self, pods: Iterable[Obj]) -> list[str]:
        """Create what is missing; `namespace/name` of each template created."""
        created = []
        for body in extended.missing_templates(pods, self._known):
            meta = body["metadata"]
            key = (meta["namespace"], meta["name"])
            try:
                self.api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, body, namespace=key[0])
                created.append("/".join(key))
                log.info("created ResourceClaimTemplate %s/%s for pods asking %s",
                         *key, extended.RESOURCE)  # fmt: skip
            except errors.AlreadyExists:
                pass
            except errors.KubeError as error:
                log.warning("cannot create ResourceClaimTemplate %s/%s: %s", *key, error)
                continue
            self._known.add(key)
        return created
