"""The simulated v1 kubelet's device health: the plugin's `DRAResourceHealth` stream, and the
pods' `status.containerStatuses[].allocatedResourcesStatus` made from it.

As the 1.37 kubelet does (`pkg/kubelet/cm/dra`: `pickHealthService`, `HandleWatchResourcesStream`,
`healthinfo.go`, `UpdateAllocatedResourcesStatus`):

- the health service is the first of `v1.DRAResourceHealth`, `v1alpha1.DRAResourceHealth` the
  plugin lists in `supported_versions` (none: no stream);
- one stream per registered plugin, reopened `retry` seconds after it ends or fails, except on
  UNIMPLEMENTED; when it ends, what it said about the driver's devices is forgotten;
- each report stamps its devices with the time it arrived; a device not reported within its
  `health_check_timeout_seconds` (default 30) reads as Unknown, as does one never reported;
- per container, per claim it names (`resources.claims[]`): an entry `claim:<name>` (or
  `claim:<name>/<request>`) listing the claim's prepared devices (of that request) as
  `{resourceID, health, message}`, resourceID = the device's first CDI id (else
  `<driver>/<pool>/<device>`), each resourceID once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from drasat.nodeplugin.gen import (
    drahealth_v1_pb2,
    drahealth_v1_pb2_grpc,
    drahealth_v1alpha1_pb2,
    drahealth_v1alpha1_pb2_grpc,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: The health services a 1.37 kubelet speaks, newest first.
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
_STUBS: dict[str, tuple[Any, Any]] = {
    "v1.DRAResourceHealth": (drahealth_v1_pb2, drahealth_v1_pb2_grpc.DRAResourceHealthStub),
    "v1alpha1.DRAResourceHealth": (
        drahealth_v1alpha1_pb2,
        drahealth_v1alpha1_pb2_grpc.DRAResourceHealthStub,
    ),
}
#: The kubelet's `DefaultHealthTimeout`.
DEFAULT_TIMEOUT_S = 30.0
_HEALTH = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}  # HealthStatus -> v1.ResourceHealthStatus


def health_service_for(versions: Iterable[str]) -> str:
    """The health service a 1.37 kubelet uses with a plugin listing `versions` ("": none)."""
    listed = set(versions)
    return next((s for s in HEALTH_SERVICES if s in listed), "")


@dataclass(frozen=True)
class DeviceHealth:
    health: str  # Healthy | Unhealthy | Unknown
    message: str
    received: float  # time.monotonic() when the report came
    timeout_s: float


class HealthCache:
    """What the plugins' streams said, by (driver, pool, device)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._devices: dict[tuple[str, str, str], DeviceHealth] = {}

    def report(self, driver: str, response: Any) -> None:
        now = self._clock()
        with self._lock:
            for device in response.devices:
                timeout = device.health_check_timeout_seconds
                key = (driver, device.device.pool_name, device.device.device_name)
                self._devices[key] = DeviceHealth(
                    _HEALTH.get(device.health, "Unknown"),
                    device.message[:1024],
                    now,
                    float(timeout) if timeout > 0 else DEFAULT_TIMEOUT_S,
                )

    def clear(self, driver: str) -> None:
        with self._lock:
            for key in [k for k in self._devices if k[0] == driver]:
                del self._devices[key]

    def get(self, driver: str, pool: str, device: str) -> tuple[str, str]:
        """(health, message); Unknown when never reported or timed out."""
        with self._lock:
            found = self._devices.get((driver, pool, device))
        if found is None or self._clock() - found.received > found.timeout_s:
            return "Unknown", ""
        return found.health, found.message


class HealthWatch:
    """One plugin's health stream, consumed in a thread into `cache`; `on_change` after each
    report and when the stream ends."""

    def __init__(
        self,
        driver: str,
        endpoint: str,
        service: str,
        cache: HealthCache,
        on_change: Callable[[], None],
        *,
        retry_s: float = 5.0,
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.service = service
        self.cache = cache
        self.on_change = on_change
        self.retry_s = retry_s
        self.reports = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._call: Any = None
        self._thread = threading.Thread(
            target=self._run, name=f"sim-kubelet-health-{driver}", daemon=True
        )

    def start(self) -> HealthWatch:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
        self._thread.join(timeout)

    def _run(self) -> None:
        pb2, make_stub = _STUBS[self.service]
        while not self._stop.is_set():
            code = None
            try:
                with grpc.insecure_channel(f"unix://{self.endpoint}") as channel:
                    call = make_stub(channel).NodeWatchResources(pb2.NodeWatchResourcesRequest())
                    with self._lock:
                        self._call = call
                    if self._stop.is_set():
                        call.cancel()
                    for response in call:
                        self.cache.report(self.driver, response)
                        self.reports += 1
                        self.on_change()
            except grpc.RpcError as error:
                code = error.code()
                log.debug("health stream of %s ended: %s", self.driver, code)
            finally:
                with self._lock:
                    self._call = None
                self.cache.clear(self.driver)
                self.on_change()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                log.info("plugin %s does not stream health; not watching", self.driver)
                return
            self._stop.wait(self.retry_s)


@dataclass(frozen=True)
class ClaimDevice:
    """A device NodePrepareResources returned for a claim."""

    driver: str
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


def container_statuses(
    pod: Obj,
    claim_uids: Mapping[str, str],
    devices: Mapping[str, Sequence[ClaimDevice]],
    cache: HealthCache,
    *,
    started_at: str,
) -> list[Obj]:
    """`status.containerStatuses` of a running pod with each container's
    `allocatedResourcesStatus`. `claim_uids`: the pod's claim names (spec.resourceClaims[].name)
    -> the ResourceClaim's UID; `devices`: claim UID -> its prepared devices."""
    out = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        status: Obj = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started_at}},
        }
        resources: list[Obj] = []
        for claim in (container.get("resources") or {}).get("claims") or []:
            uid = claim_uids.get(claim.get("name", ""))
            if uid is None:
                continue
            request = claim.get("request") or ""
            name = f"claim:{claim['name']}" + (f"/{request}" if request else "")
            base = request.split("/", 1)[0]
            seen: set[str] = set()
            entries = []
            for device in devices.get(uid, ()):
                # the kubelet keeps a result's request without its subrequest (`req/sub`)
                requests = {r.split("/", 1)[0] for r in device.request_names}
                if request and requests and base not in requests:
                    continue
                resource_id = (
                    device.cdi_device_ids[0]
                    if device.cdi_device_ids
                    else f"{device.driver}/{device.pool_name}/{device.device_name}"
                )
                if resource_id in seen:
                    continue
                seen.add(resource_id)
                health, message = cache.get(device.driver, device.pool_name, device.device_name)
                entry: Obj = {"resourceID": resource_id, "health": health}
                if message:
                    entry["message"] = message
                entries.append(entry)
            if entries:
                resources.append({"name": name, "resources": entries})
        if resources:
            status["allocatedResourcesStatus"] = resources
        out.append(status)
    return out
