"""The ResourceClaimTemplates of drasat's extended-resource conversion (`drasat.v1.extended`): a
pod whose `nvidia.com/gpu` became claims at admission names `drasat-nvidia-com-gpu-<N>` in its
namespace; the controller creates each such template the first time a pending pod names it, and
the resourceclaim controller (which retries a pod when a template it waits for appears) then
makes the pod's claims, which their class's allocator allocates as any other.

A template asks its devices of the DeviceClass that serves `nvidia.com/gpu` as kube-scheduler
picks it (`extended.device_class_for`: the class whose `extendedResourceName` names it, e.g.
NVIDIA's `gpu.nvidia.com` as NVIDIA's chart installs it; else drasat's own class where drasat
allocates for its own driver). Templates stay (one per count and namespace, a few objects); one
of drasat's that asks another class than the one serving the resource now is made again (a
template's spec cannot be changed), and one deleted while pods still name it is made again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from drasat.api.groups import DRIVER_NAME
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
    the server unavailable (a 429, a 5xx, a timeout) is tried again at the next cycle. A change
    of the class that serves the resource is looked at once for every template pending pods
    name."""

    def __init__(
        self, api: Api, *, recheck_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.api = api
        self.recheck_s = recheck_s
        self._clock = clock
        #: (namespace, name) -> when it was last created, found or refused.
        self._tried: dict[tuple[str, str], float] = {}
        self._class: str | None = None

    def ensure(
        self,
        pods: Iterable[Obj],
        classes: Iterable[Obj] = (),
        drivers: Iterable[str] = (DRIVER_NAME,),
    ) -> list[str]:
        """Create what is missing, of the class that serves the resource among `classes` (the
        cluster's DeviceClasses; where none names it, drasat's own class if its driver is among
        the `drivers` drasat allocates for, else nothing is made); `namespace/name` of each
        template created."""
        default = extended.DEVICE_CLASS if DRIVER_NAME in tuple(drivers) else None
        device_class = extended.device_class_for(extended.RESOURCE, classes, default)
        if device_class != self._class:
            if device_class is None:
                log.warning(
                    "no DeviceClass serves %s (none names it as its extendedResourceName): the "
                    "templates of pods asking it are not made",
                    extended.RESOURCE,
                )
            self._class, self._tried = device_class, {}
        if device_class is None:
            return []
        now = self._clock()
        self._tried = {k: t for k, t in self._tried.items() if now - t < self.recheck_s}
        created = []
        for body in extended.missing_templates(pods, self._tried, device_class):
            meta = body["metadata"]
            key = (meta["namespace"], meta["name"])
            self._tried[key] = now
            try:
                self.api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, body, namespace=key[0])
            except errors.AlreadyExists:
                if not self._made_again(body, device_class):
                    continue
            except errors.Unavailable as error:
                del self._tried[key]  # not refused: tried again at the next cycle
                log.info("cannot create ResourceClaimTemplate %s/%s now: %s", *key, error)
                continue
            except errors.KubeError as error:
                log.warning("cannot create ResourceClaimTemplate %s/%s: %s", *key, error)
                continue
            created.append("/".join(key))
            log.info("created ResourceClaimTemplate %s/%s of class %s for pods asking %s",
                     *key, device_class, extended.RESOURCE)  # fmt: skip
        return created

    def _made_again(self, body: Obj, device_class: str) -> bool:
        """A template of drasat's of that name asking another class: deleted and made again
        (claims made from it meanwhile keep their class); True when made."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            found = self.api.get(r.RESOURCE_CLAIM_TEMPLATES_V1, name, namespace=namespace)
            labels = (found.get("metadata") or {}).get("labels") or {}
            ours = all(labels.get(k) == v for k, v in extended.MANAGED_BY.items())
            if not ours or extended.template_class(found) == device_class:
                return False
            self.api.delete(r.RESOURCE_CLAIM_TEMPLATES_V1, name, namespace=namespace)
            self.api.create(r.RESOURCE_CLAIM_TEMPLATES_V1, body, namespace=namespace)
        except errors.KubeError as error:
            log.warning("cannot make ResourceClaimTemplate %s/%s again of class %s: %s",
                        namespace, name, device_class, error)  # fmt: skip
            return False
        return True
