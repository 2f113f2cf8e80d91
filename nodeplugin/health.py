"""GPU health: critical XID events mark a GPU Unhealthy in the NAS, so the controller stops
allocating it. XIDs caused by applications, not by the GPU, are ignored (as NVIDIA's device plugin
does); an Unhealthy GPU stays so until the plugin restarts (a GPU reset needs a drain anyway).

A GPU that fell off the bus may send no event at all (the XID 79 goes to the kernel log while
NVML only answers `NVML_ERROR_GPU_IS_LOST` for it), so every health period (one event wait) also
asks NVML whether each GPU still answers; a lost GPU is marked with XID 79, which the device model
turns into a NoExecute taint. A wait that fails because a GPU is lost does not stop monitoring.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from drasat.api.devicemodel.nodegpus import XID_GPU_LOST
from drasat.nodeplugin.devicelib import DeviceError, DeviceLib, GpuDevice

log = logging.getLogger(__name__)

#: Application-caused XIDs: 13 graphics engine exception, 31 memory page fault, 43 stopped
#: channel, 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class HealthMonitor:
    """Waits for NVML events in a thread; calls `on_change` with the new unhealthy set."""

    def __init__(
        self,
        lib: DeviceLib,
        on_change: Callable[[frozenset[str]], None],
        *,
        ignored: frozenset[int] = IGNORED_XIDS,
        wait_ms: int = 500,
        gpus: Callable[[], list[GpuDevice]] | None = None,
    ) -> None:
        self.lib = lib
        #: The GPUs whose loss is checked every period (the plugin's discovery, which keeps the
        #: identity of a GPU lost since).
        self.gpus = gpus or self._discovered
        self._found: list[GpuDevice] | None = None
        self.on_change = on_change
        self.ignored = ignored
        self.wait_ms = wait_ms
        self.unhealthy: frozenset[str] = frozenset()
        #: The critical XID that made each unhealthy GPU so (its device taint says it).
        self.xids: dict[str, int] = {}
        #: Why health events stopped ("" while watching): the GPUs' health is then unknown.
        self.failed = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> bool:
        """Handle the events of one wait, then look for lost GPUs; True when the unhealthy set
        changed."""
        changed = False
        for event in self.lib.wait_events(self.wait_ms):
            if event.xid in self.ignored:
                log.info("GPU %s: XID %d (application error) ignored", event.gpu_uuid, event.xid)
                continue
            changed |= self._mark(event.gpu_uuid, event.xid)
        changed |= self._find_lost()
        if changed:
            self.on_change(self.unhealthy)
        return changed

    def _discovered(self) -> list[GpuDevice]:
        if self._found is None:
            self._found = self.lib.gpus()
        return self._found

    def check_lost(self) -> bool:
        """Mark the GPUs that no longer answer (before the first publish, so a plugin started on
        a node with a lost GPU never publishes it healthy); True when any was new. No callback:
        the caller publishes."""
        return self._find_lost()

    def _find_lost(self) -> bool:
        changed = False
        for gpu in self.gpus():
            if not gpu.uuid or self.xids.get(gpu.uuid) == XID_GPU_LOST:
                continue
            if gpu.lost or self.lib.lost(gpu.uuid):
                changed |= self._mark(gpu.uuid, XID_GPU_LOST, lost=True)
        return changed

    def _mark(self, uuid: str, xid: int, *, lost: bool = False) -> bool:
        if uuid in self.unhealthy and not lost:
            return False
        what = "fell off the bus (NVML_ERROR_GPU_IS_LOST)" if lost else f"critical XID {xid}"
        log.error("GPU %s: %s: marked Unhealthy", uuid, what)
        self.xids[uuid] = xid  # first: readers of `unhealthy` see it
        self.unhealthy = self.unhealthy | {uuid}
        return True

    def lost(self) -> frozenset[str]:
        """The GPUs that fell off the bus."""
        return frozenset(u for u, x in dict(self.xids).items() if x == XID_GPU_LOST)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except DeviceError as error:
                log.error("health events unavailable (%s); health monitoring stopped", error)
                self.failed = str(error) or type(error).__name__
                try:
                    self.on_change(self.unhealthy)
                except Exception:
                    log.exception("health monitor")
                return
            except Exception:  # publishing failed (API down): keep watching, retry next event
                log.exception("health monitor")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="drasat-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_ms / 1000 + 5)
