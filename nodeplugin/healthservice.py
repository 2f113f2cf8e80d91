"""Device health to the kubelet: `DRAResourceHealth.NodeWatchResources` (KEP 4680).

Devices are named by pool and device name, not by CDI id; the kubelet keys a pod's entries by each
prepared device's first CDI id, which is the device's own (`cdi.device_id(uid, device)`), so each
device of a claim gets its own entry.

The kubelet (1.36+: feature gate `ResourceHealthStatus`, beta and on) opens one server stream per
registered plugin that advertises `v1.DRAResourceHealth` (or `v1alpha1.DRAResourceHealth`, which
1.37-1.39 still accept) in `supported_versions`, and shows what it reads in the pod's
`status.containerStatuses[].allocatedResourcesStatus` for the devices of the pod's claims
(matched by pool and device name).

What the stream carries: every message is the complete list of this node's pool (pool = node
name; device names from the device model, `api/devicemodel`): each whole GPU `gpu-<minor>`, each
MIG placement device of a MIG-enabled GPU (it takes its parent's health) and the node's
`cpu-fallback` device (always HEALTHY: nothing of it can fail). A GPU is UNHEALTHY once the health
monitor (`health.py`) saw a critical XID on it (the message names the XID), HEALTHY otherwise,
and UNKNOWN when nothing watches its health (monitoring off, or NVML events unavailable). The
first message goes out at once; then one on every change, and the same list again every
`resend_s` seconds, because the kubelet takes a device it has not heard of within
`health_check_timeout_seconds` (sent as 3 x `resend_s`) as Unknown.

A stream holds one thread of the DRA socket's pool for its lifetime; at most `max_streams` run at
once (the kubelet opens one; more are refused with RESOURCE_EXHAUSTED and the kubelet retries).
A client that goes away ends its stream at once (a gRPC done-callback wakes it), and `close` (the
plugin stopping) ends every stream (the kubelet sees the end of the stream and reconnects later).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from drasat.api.devicemodel import names, pool
from drasat.api.devicemodel.nodegpus import XID_GPU_LOST
from drasat.nodeplugin import slicepublisher
from drasat.nodeplugin.devicelib import DeviceLib, GpuDevice
from drasat.nodeplugin.gen import (
    drahealth_v1_pb2,
    drahealth_v1_pb2_grpc,
    drahealth_v1alpha1_pb2,
    drahealth_v1alpha1_pb2_grpc,
)
from drasat.nodeplugin.health import HealthMonitor

log = logging.getLogger(__name__)

#: The strings a plugin lists in `supported_versions` for the health service, newest first:
#: exactly the kubelet's `DRAResourceHealthService` constants (`<proto package>.<service>`).
SERVICE_NAMES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")

#: Seconds between two full reports when nothing changes (the kubelet's default timeout is 30).
RESEND_S = 10.0
#: Concurrent streams served; the kubelet holds one per plugin registration.
MAX_STREAMS = 4
#: The kubelet truncates longer messages.
MAX_MESSAGE = 1024


class Health(enum.StrEnum):
    """The proto's `HealthStatus` names."""

    UNKNOWN = "UNKNOWN"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"


@dataclass(frozen=True)
class PoolDevice:
    """A device of this node's pool and the GPU whose health it has (None: not a GPU's)."""

    name: str
    gpu_uuid: str | None


@dataclass(frozen=True)
class DeviceReport:
    name: str
    health: Health
    message: str = ""


def pool_devices(lib: DeviceLib, gpus: Sequence[GpuDevice] | None = None) -> list[PoolDevice]:
    """Every device the device model publishes for this node (of `gpus`, or the lib's
    discovery), with the GPU each belongs to."""
    out = []
    for device in pool.all_devices(slicepublisher.inventory(lib, gpus=gpus)):
        attributes = device.get("attributes", {})
        uuid = attributes.get("parentUUID", attributes.get("uuid", {})).get("string")
        out.append(PoolDevice(device["name"], uuid))
    return out


def _unhealthy_message(uuid: str, xid: int | None) -> str:
    if xid == XID_GPU_LOST:
        return f"GPU {uuid}: XID {xid}, fallen off the bus"
    if xid is None:
        return f"GPU {uuid}: marked unhealthy"
    return f"GPU {uuid}: critical XID {xid}"


class HealthBoard:
    """The health of every device of the pool, and a version that changes with it; streams wait
    on it. `changed` is called by whoever changes the monitor's state (the plugin's callback)."""

    def __init__(
        self,
        devices: Callable[[], Sequence[PoolDevice]],
        monitor: HealthMonitor,
        *,
        watching: bool = True,
    ) -> None:
        self._devices_of = devices
        self._devices: Sequence[PoolDevice] | None = None
        self.monitor = monitor
        #: False: nothing watches the GPUs' health (monitoring off): their health is UNKNOWN.
        self.watching = watching
        self.version = 0
        self.closed = False
        self.streams = 0
        self._cond = threading.Condition()

    def devices(self) -> Sequence[PoolDevice]:
        """The pool's devices, read once (MIG mode and GPUs change only with a plugin restart);
        a failed read is retried on the next report."""
        if self._devices is None:
            self._devices = list(self._devices_of())
        return self._devices

    def reports(self) -> list[DeviceReport]:
        unhealthy = self.monitor.unhealthy
        xids = dict(self.monitor.xids)
        failed = self.monitor.failed
        gpu_names: dict[str, str] = {}
        for device in self.devices():
            if device.gpu_uuid is not None and isinstance(names.parse(device.name), names.GpuName):
                gpu_names[device.gpu_uuid] = device.name
        out = []
        for device in self.devices():
            uuid = device.gpu_uuid
            if uuid is None:
                out.append(DeviceReport(device.name, Health.HEALTHY))
                continue
            of_parent = "" if gpu_names.get(uuid) == device.name else "parent "
            if uuid in unhealthy:
                message = of_parent + _unhealthy_message(uuid, xids.get(uuid))
                out.append(DeviceReport(device.name, Health.UNHEALTHY, message[:MAX_MESSAGE]))
            elif not self.watching or failed:
                why = (
                    f"GPU health events unavailable: {failed}"
                    if failed
                    else "GPU health is not watched (health events off)"
                )
                out.append(DeviceReport(device.name, Health.UNKNOWN, why[:MAX_MESSAGE]))
            else:
                out.append(DeviceReport(device.name, Health.HEALTHY))
        return out

    def changed(self) -> None:
        with self._cond:
            self.version += 1
            self._cond.notify_all()

    def close(self) -> None:
        """End every stream (the plugin stops)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float, done: threading.Event) -> int:
        """Wait until the version differs from `seen`, `timeout` passed, `done` is set or the
        board closed; the version now."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.version == seen and not self.closed and not done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.version

    def open_stream(self, limit: int) -> bool:
        with self._cond:
            if self.streams >= limit:
                return False
            self.streams += 1
            return True

    def close_stream(self) -> None:
        with self._cond:
            self.streams -= 1


class _Service:
    """`DRAResourceHealth` (v1 and v1alpha1 have the same messages under their own package)."""

    pb2: Any

    def __init__(
        self,
        board: HealthBoard,
        pool_name: str,
        *,
        resend_s: float = RESEND_S,
        max_streams: int = MAX_STREAMS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.board = board
        self.pool_name = pool_name
        self.resend_s = resend_s
        self.max_streams = max_streams
        self.clock = clock

    def response(self, reports: Sequence[DeviceReport]) -> Any:
        now = int(self.clock())
        timeout = max(1, int(3 * self.resend_s))
        response = self.pb2.NodeWatchResourcesResponse()
        for report in reports:
            response.devices.add(
                device=self.pb2.DeviceIdentifier(pool_name=self.pool_name, device_name=report.name),
                health=self.pb2.HealthStatus.Value(report.health.value),
                last_updated_time=now,
                health_check_timeout_seconds=timeout,
                message=report.message,
            )
        return response

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
        done = threading.Event()

        def finished() -> None:
            done.set()
            self.board.wake()

        if not context.add_callback(finished):
            return  # the client is already gone
        if not self.board.open_stream(self.max_streams):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.max_streams} health streams already open on this plugin",
            )
        log.info("health stream opened (%s)", self.pb2.DESCRIPTOR.package)
        try:
            version = self.board.version
            while not done.is_set() and not self.board.closed:
                try:
                    reports = self.board.reports()
                except Exception as error:  # NVML unreadable at the first read: say so
                    log.error("health stream: cannot list the pool's devices: %s", error)
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot list devices: {error}")
                yield self.response(reports)
                version = self.board.wait(version, self.resend_s, done)
        finally:
            self.board.close_stream()
            log.info("health stream closed (%s)", self.pb2.DESCRIPTOR.package)


class HealthV1(_Service, drahealth_v1_pb2_grpc.DRAResourceHealthServicer):
    pb2 = drahealth_v1_pb2


class HealthV1alpha1(_Service, drahealth_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    pb2 = drahealth_v1alpha1_pb2


def add_services(server: Any, board: HealthBoard, pool_name: str, **options: Any) -> None:
    """Serve both versions on the DRA socket (the kubelet picks the newest it and we list)."""
    add_v1: Any = drahealth_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server
    add_v1alpha1: Any = drahealth_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server
    add_v1(HealthV1(board, pool_name, **options), server)
    add_v1alpha1(HealthV1alpha1(board, pool_name, **options), server)
