"""The DeviceTaintRules that keep kube-scheduler's allocator off the devices drasat allocates: one
per driver (`drivers.taint_rule_name`), tainting every device of it with drasat's allocator taint
NoSchedule. kube-scheduler does not look at taints for an allocated claim, so drasat's own
allocations are honoured; where the API server serves no DeviceTaintRule, gated pods are still
drasat's alone (docs/CONTROLLER.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE
from drasat.controller import v1inputs
from drasat.controller.drivers import taint_rule_name
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj

log = logging.getLogger(__name__)

TAINT_RULE = taint_rule_name(DRIVER_NAME)
TAINT_KEY = v1inputs.ALLOCATOR_TAINT["key"]
TAINT_VALUE = v1inputs.ALLOCATOR_TAINT["value"]


def taint_rule(resource: r.Resource = r.DEVICE_TAINT_RULES_V1, driver: str = DRIVER_NAME) -> Obj:
    """The DeviceTaintRule that keeps kube-scheduler's allocator off every device of a driver
    drasat allocates (`TAINT_RULE` for drasat's own; `drivers.taint_rule_name`)."""
    return {
        "apiVersion": resource.api_version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": taint_rule_name(driver),
            "labels": {"app.kubernetes.io/managed-by": "drasat"},
        },
        "spec": {
            "deviceSelector": {"driver": driver},
            "taint": {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"},
        },
    }


def ensure(api: Api, drivers: Iterable[str]) -> None:
    """Create or restore the DeviceTaintRule of each driver drasat allocates, in the newest
    version the server serves (v1 from 1.37; v1beta2 and v1alpha3 behind the
    DRADeviceTaintRules gate before). Only get, create and update are used (the chart grants
    no more): a version the server does not serve answers 404 to both get and create. A
    server without the kind is logged, not fatal (kube-scheduler may then allocate our
    devices first: docs/INSTALL.md)."""
    for driver in drivers:
        if not _ensure_driver_rule(api, driver):
            return  # said once: the next driver's rule would fail alike


def _ensure_driver_rule(api: Api, driver: str) -> bool:
    """One driver's rule; False when it cannot be kept (logged)."""
    name = taint_rule_name(driver)
    for version in ("v1", "v1beta2", "v1alpha3"):
        resource = dataclasses.replace(r.DEVICE_TAINT_RULES_V1, version=version)
        try:
            if _ensure_taint_rule(api, resource, driver):
                return True
        except errors.KubeError as error:
            log.error("cannot keep DeviceTaintRule %s (%s): %s; drasat relies on its "
                      "scheduling gate %s (pods without it may get kube-scheduler's "
                      "allocation of drasat's devices)", name, resource.api_version,
                      error, SCHEDULING_GATE)  # fmt: skip
            return False
    log.warning(
        "the API server serves no DeviceTaintRule (resource.k8s.io v1, v1beta2 or v1alpha3): "
        "drasat relies on its scheduling gate %s (kube-scheduler never tries a gated pod "
        "before drasat allocates it); a pod that arrives without the gate may be given "
        "drasat's devices by kube-scheduler's allocator first; see docs/CONTROLLER.md",
        SCHEDULING_GATE,
    )
    return False


def _ensure_taint_rule(api: Api, resource: r.Resource, driver: str = DRIVER_NAME) -> bool:
    """Whether the server serves this version (and the rule is now as wanted there)."""
    wanted = taint_rule(resource, driver)
    name = wanted["metadata"]["name"]
    try:
        current = api.get(resource, name)
    except errors.NotFound:
        try:
            api.create(resource, wanted)
        except errors.AlreadyExists:
            return True
        except errors.NotFound:
            return False  # this version is not served
        log.info("created DeviceTaintRule %s (%s, %s:NoSchedule on every %s device)",
                 name, resource.api_version, TAINT_KEY, driver)  # fmt: skip
        return True
    spec = current.get("spec") or {}
    if (spec.get("taint") or {}).get("key") != TAINT_KEY or (
        spec.get("deviceSelector") != wanted["spec"]["deviceSelector"]
    ):
        current["spec"] = wanted["spec"]
        api.replace(resource, current)
        log.warning("restored DeviceTaintRule %s", name)
    return True
