"""GPU health: critical XID events mark a GPU Unhealthy in the NAS, so the controller stops
allocating it. XIDs caused by applications, not by the GPU, are ignored (as NVIDIA's device plugin
does); an Unhealthy GPU stays so until the plugin restarts (a GPU reset needs a drain anyway)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from drasat.nodeplugin.devices import DeviceError, DeviceLib

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
    ) -> None:
        self.lib = lib
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
        """Handle the events of one wait; True when the unhealthy set changed."""
        changed = False
        for event in self.lib.wait_events(self.wait_ms):
            if event.xid in self.ignored:
                log.info("GPU %s: XID %d (application error) ignored", event.gpu_uuid, event.xid)
                continue
            if event.gpu_uuid not in self.unhealthy:
                log.error("GPU %s: critical XID %d: marked Unhealthy", event.gpu_uuid, event.xid)
                self.xids[event.gpu_uuid] = event.xid  # first: readers of `unhealthy` see it
                self.unhealthy = self.unhealthy | {event.gpu_uuid}
                changed = True
        if changed:
            self.on_change(self.unhealthy)
        return changed

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
