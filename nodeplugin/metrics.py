"""Prometheus metrics of one node plugin (its own registry, so several can live in one process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "drasat_nodeplugin"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._unreadable = Gauge(
            f"{PREFIX}_checkpoint_unreadable_entries",
            "Checkpoint entries that could not be read and are kept for an operator (their "
            "claims are neither prepared nor unprepared until the files are removed).",
            registry=r,
        )
        self.lost_gpus = Gauge(
            f"{PREFIX}_lost_gpus",
            "GPUs that fell off the bus (NVML_ERROR_GPU_IS_LOST or XID 79), tainted NoExecute.",
            registry=r,
        )
        self.mps_daemons_down = Gauge(
            f"{PREFIX}_mps_daemons_down",
            "MPS daemons that claims hold but that are not running and could not be started "
            "again at the last check (start-up and every garbage-collection round).",
            registry=r,
        )
        self.mps_daemon_problems = Counter(
            f"{PREFIX}_mps_daemon_problems",
            "MPS daemons found not running (restarted: started again, their clients lost their "
            "server; down: could not be) or enforcing other limits than recorded "
            "(limits_restored), by outcome.",
            ["outcome"],
            registry=r,
        )
        self.checkpoint_read_failures = Counter(
            f"{PREFIX}_checkpoint_read_failures",
            "Checkpoint entries found unreadable at start-up, by kind (claim, claims, "
            "created-migs, settings, legacy).",
            ["kind"],
            registry=r,
        )

    def count_unreadable(self, entries: Callable[[], int]) -> None:
        """The unreadable-entries gauge reads `entries()` at every scrape."""
        self._unreadable.set_function(lambda: float(entries()))

    def unreadable_entries(self) -> float:
        value = self.registry.get_sample_value(f"{PREFIX}_checkpoint_unreadable_entries")
        return value or 0.0
