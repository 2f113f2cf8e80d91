"""The ResourceClaimTemplates of drasat's extended-resource conversion (`drasat.v1.extended`): a
pod whose `nvidia.com/gpu` became claims at admission names `drasat-nvidia-com-gpu-<N>` in its
namespace; the controller creates each such template the first time a pending pod names it, and
the resourceclaim controller (which retries a pod when a template it waits for appears) then
makes the pod's claims, which drasat allocates as any other. Templates stay (one per count and
namespace, a few objects) and are never changed once made; one deleted while pods still name it
is made again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api
from drasat.v1 import extended

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class TemplateKeeper:
    """Creates the templates that pending pods name and that do not exist yet.

    What it made (or found made) it does not try again for `recheck_s`, nor a template the API
    server refused (a namespace being deleted): a template deleted by hand is made again within
    that time, and a refusal is logged once per period, not once per cycle. A create that found
    the server unavailable (a 429, a 5xx, a timeout) is tried again at the next cycle."""

    def __init__(
        self, api: Api, *, recheck_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.api = api
        self.recheck_s = recheck_s
        self._clock = clock
        #: (namespace, name) -> when it was last created, found or refused.
        self._tried: dict[tuple[str, str], float] = {}

    def ensure(self, pods: Iterable[Obj]) -> list[str]:
        """Create what is missing; `namespace/name` of each template created."""
        now = self._clock()
        self._tried = {k: t for k, t in self._tried.items() if now - t < self.recheck_s}
        created = []
        for body in extended.missing_templates(pods, self._tried):
            meta = body["metadata"]
            key = (meta["namespace"], meta["name"])
            self._tried[key] = now
            try:
                self.api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, body, namespace=key[0])
            except errors.AlreadyExists:
                continue
            except errors.Unavailable as error:
                del self._tried[key]  # not refused: tried again at the next cycle
                log.info("cannot create ResourceClaimTemplate %s/%s now: %s", *key, error)
                continue
            except errors.KubeError as error:
                log.warning("cannot create ResourceClaimTemplate %s/%s: %s", *key, error)
                continue
            created.append("/".join(key))
            log.info("created ResourceClaimTemplate %s/%s for pods asking %s",
                     *key, extended.RESOURCE)  # fmt: skip
        return created
