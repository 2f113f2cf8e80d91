"""The node plugin process: publish devices, reconcile, serve the kubelet, collect garbage.

Start order: discover GPUs and write the NAS `allocatableDevices` (status Ready), reconcile the
checkpoint with NVML and the NAS, serve the DRA socket, then the registration socket (the kubelet
calls the DRA socket as soon as it sees the registration). Stop: status NotReady, sockets removed.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from drasat import DRIVER_NAME
from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.api.nas import NasStatus, NodeAllocationState
from drasat.nodeplugin import (
    cdi,
    checkpoint,
    dra,
    driverfiles,
    health,
    healthservice,
    mps,
    publish,
    registration,
    slicepublisher,
    state,
    v1claims,
)
from drasat.nodeplugin.devicelib import DeviceError, DeviceLib
from drasat.nodeplugin.nasstore import NasError, NasStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    node_name: str
    namespace: str = "drasat"
    cdi_root: Path = Path("/var/run/cdi")
    plugin_dir: Path = Path("/var/lib/kubelet/plugins")
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    #: The host's driver root (CDI `hostPath` prefix of the driver's files). "": none given,
    #: the driver's files are not discovered (only the simulated fleet runs so: `app.build`
    #: makes it `/` for NVML).
    driver_root: str = ""
    dev_root: str = ""  # host prefix of device nodes in CDI specs; "": the driver root
    #: Where this process reads the driver root and the dev root ("": at their host paths; the
    #: Helm chart mounts the driver root at /driver-root and the host's /dev at /dev).
    driver_root_mount: str = ""
    dev_root_mount: str = ""
    #: `drasat`: the claim specs carry the driver's files; `toolkit`: the node's NVIDIA container
    #: toolkit spec (`nvidia.com/gpu`) does, and the kubelet gets its device names too.
    cdi_mode: cdi.CdiMode = cdi.CdiMode.drasat
    cdi_hook_path: str = cdi.HOOK_PATH  # the host's nvidia-cdi-hook ("": no hooks)
    toolkit_spec_dirs: tuple[Path, ...] = (Path("/etc/cdi"), Path("/var/run/cdi"))
    state_dir: Path = Path("/var/lib/drasat")
    proc_root: Path = Path("/proc")  # where /proc/driver/nvidia-caps/mig-minors is read
    kubelet_api: registration.KubeletApi = registration.KubeletApi.classic
    orphans: state.OrphanPolicy = state.OrphanPolicy.report
    gc_interval_s: float = 60.0
    health_events: bool = True
    health_wait_ms: int = 1000  # one NVML event wait; also how long a stop may wait for it
    workers: int = 16
    #: How long the first NAS write is retried (0: until it succeeds, e.g. while the namespace
    #: and CRDs a chart installs later are not there yet).
    start_timeout_s: float = 120.0
    #: Publish the node's `resource.k8s.io/v1` ResourceSlices (with a structured kubelet API
    #: and API access), so the kube-scheduler allocates from them.
    publish_slices: bool = False
    #: Publish non-MIG GPUs as shareable (consumable capacity) in the ResourceSlices: the v1
    #: prepare takes shares (MPS limits) and treats a result that consumed the whole GPU (a
    #: request without capacity.requests) as exclusive.
    slice_shares: bool = True
    #: What the API server keeps of the slices (asked at start, drasat.kube.served): devices
    #: that allow multiple allocations (DRAConsumableCapacity; off: no shares either) and MIG
    #: counter sets (DRAPartitionableDevices). What it would drop is not published, so a publish
    #: compares with what the server stored.
    slice_consumable_capacity: bool = True
    slice_counters: bool = True

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / DRIVER_NAME / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER_NAME}-reg.sock"


def _socket_dir(path: Path, mode: int) -> None:
    """Create a socket's directory, readable by no other user when it is ours to create."""
    existed = path.exists()
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    if not existed:
        os.chmod(path, mode)


def _serve(socket: Path, workers: int) -> Any:
    socket.unlink(missing_ok=True)  # a stale socket of a previous run
    return grpc.server(futures.ThreadPoolExecutor(max_workers=workers))


class NodePlugin:
    def __init__(
        self,
        config: Config,
        *,
        lib: DeviceLib,
        store: NasStore,
        mps_runner: mps.Runner,
        claim_reader: v1claims.ClaimReader | None = None,
        slice_publisher: slicepublisher.SlicePublisher | None = None,
    ) -> None:
        self.config = config
        self.lib = lib
        self.store = store
        #: Reads v1 ResourceClaims for the v1/v1beta1 DRAPlugin services (None: no API access,
        #: their prepares fail with an error saying so).
        self.claim_reader = claim_reader
        #: Keeps the node's `resource.k8s.io/v1` ResourceSlices in step with what `publish`
        #: writes to the NAS (None: no slices, e.g. for classic kubelets).
        self.slice_publisher = slice_publisher
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Ours alone even when it existed (the chart's hostPath DirectoryOrCreate makes it 0755):
        # the checkpoint names every claim, and the MPS pipes under mps/ reach its daemons.
        # Containers get their own daemon's folders bind-mounted, never through this path.
        os.chmod(config.state_dir, 0o700)
        self.state = state.DeviceState(
            lib=lib,
            store=store,
            checkpoint=checkpoint.Checkpoint(config.state_dir),
            cdi=cdi.CdiWriter(
                config.cdi_root,
                driver_root=config.dev_root or config.driver_root,
                driver=self._driver_edits(config),
                toolkit=cdi.ToolkitDevices(config.toolkit_spec_dirs),
            ),
            mps=mps.MpsManager(config.state_dir / "mps", mps_runner),
            orphans=config.orphans,
            proc_root=config.proc_root,
        )
        self.registration = registration.Registration(
            endpoint=str(config.dra_socket), api=config.kubelet_api
        )
        self.health = health.HealthMonitor(
            lib, self._health_changed, wait_ms=config.health_wait_ms, gpus=self.state.gpus
        )
        #: What the kubelet's health stream (`DRAResourceHealth`) reports, from `self.health`.
        self.health_board = healthservice.HealthBoard(
            lambda: healthservice.pool_devices(lib, self.state.gpus()),
            self.health,
            watching=config.health_events,
        )
        self._servers: list[Any] = []
        self._stop = threading.Event()
        self._started = False
        self._gc: threading.Thread | None = None

    def _driver_edits(self, config: Config) -> cdi.DriverEdits:
        """The driver's part of every claim spec, found once, at the version NVML reports."""
        roots = None
        if config.driver_root:
            roots = driverfiles.Roots(
                driver_root=config.driver_root,
                dev_root=config.dev_root,
                driver_mount=config.driver_root_mount,
                dev_mount=config.dev_root_mount,
                proc_root=str(config.proc_root),
            )

        def version() -> str:
            gpus = self.state.gpus()
            return gpus[0].driver_version if gpus else ""

        return cdi.DriverEdits(
            roots,
            version,
            hook_path=config.cdi_hook_path,
            mode=config.cdi_mode,
            proc_root=str(config.proc_root),
        )

    def publish(self, *, ready: bool | None = None) -> NodeAllocationState:
        """Write allocatableDevices (with health) and the status (None: Ready once serving)."""
        if ready is None:
            ready = bool(self._servers) or not self._started
        gpus = self.state.gpus()
        profiles = slicepublisher.mig_profiles(self.lib, gpus)
        devices = publish.allocatable_devices(gpus, profiles, unhealthy=self.health.unhealthy)
        status = NasStatus.Ready if ready else NasStatus.NotReady

        def mutate(nas: NodeAllocationState) -> bool:
            if nas.spec.allocatableDevices == devices and nas.status == status:
                return False
            nas.spec.allocatableDevices = devices
            nas.status = status
            return True

        nas = self.store.update(mutate, create=True)
        self.publish_slices()
        return nas

    def publish_slices(self) -> slicepublisher.SyncResult | None:
        """Sync the ResourceSlices with the GPUs and their health; a failure is logged (the next
        publish retries), it never stops the plugin."""
        if self.slice_publisher is None:
            return None
        unhealthy = {
            uuid: GpuHealth.from_xid(self.health.xids.get(uuid)) for uuid in self.health.unhealthy
        }
        try:
            wanted = slicepublisher.inventory(
                self.lib,
                health=unhealthy,
                shares=self.config.slice_shares,
                gpus=self.state.gpus(),
                consumable_capacity=self.config.slice_consumable_capacity,
                counters=self.config.slice_counters,
            )
            return self.slice_publisher.sync(wanted)
        except Exception as error:  # the API is down, the Node is gone: try again next time
            log.error(
                "could not publish the ResourceSlices of %s: %s", self.config.node_name, error
            )
            return None

    def _health_changed(self, unhealthy: frozenset[str]) -> None:
        self._note_lost()
        self.health_board.changed()  # the kubelet first: publishing may wait on the API
        self.publish()

    def _note_lost(self) -> None:
        """The state refuses claims on lost GPUs and skips undoing what went with them."""
        lost = self.health.lost()
        self.state.lost = lost
        self.state.metrics.lost_gpus.set(len(lost))

    def set_status(self, status: NasStatus) -> None:
        def mutate(nas: NodeAllocationState) -> bool:
            changed = nas.status != status
            nas.status = status
            return changed

        self.store.update(mutate)

    def start(self) -> list[str]:
        """Publish, reconcile, serve; the reconcile report.

        The first NAS write is retried (with backoff, up to `start_timeout_s`) while the API server
        is unreachable; later status writes that fail are logged, not fatal."""
        self._started = True
        try:  # a GPU lost before start is published tainted from the first write
            self.health.check_lost()
            self._note_lost()
        except DeviceError as error:
            log.error("cannot check the GPUs for lost ones: %s", error)
        self._publish_first()
        try:  # found now, so a wrong driver root shows at start, not only at the first claim
            self.state.cdi.driver.get()
        except driverfiles.DriverFilesError as error:
            log.error("CDI specs: %s; GPU claims fail to prepare until it is fixed", error)
        report = self.state.reconcile()
        _socket_dir(self.config.dra_socket.parent, 0o750)
        _socket_dir(self.config.registry_dir, 0o750)
        dra_server = _serve(self.config.dra_socket, self.config.workers)
        allocations = v1claims.ClaimAllocations(
            self.claim_reader,
            pool=self.config.node_name,
            gpus=self.state.gpus,
            profiles=self.lib.mig_profiles,
        )
        dra.add_services(dra_server, self.state, allocations)
        healthservice.add_services(dra_server, self.health_board, self.config.node_name)
        dra_server.add_insecure_port(f"unix://{self.config.dra_socket}")
        dra_server.start()
        os.chmod(self.config.dra_socket, 0o660)
        self._servers.append(dra_server)
        try:
            self.set_status(NasStatus.Ready)
        except NasError as error:
            log.error("could not mark the NAS Ready (%s); the next publish retries", error)
        reg_server = _serve(self.config.registration_socket, 2)
        registration.add_service(reg_server, self.registration)
        reg_server.add_insecure_port(f"unix://{self.config.registration_socket}")
        reg_server.start()
        os.chmod(self.config.registration_socket, 0o660)
        self._servers.append(reg_server)
        if self.config.health_events:
            self.health.start()
        if self.config.gc_interval_s > 0:
            self._gc = threading.Thread(target=self._collect, name="drasat-gc", daemon=True)
            self._gc.start()
        log.warning(
            "node plugin serving %s and %s", self.config.dra_socket, self.config.registration_socket
        )
        return report

    def _publish_first(self) -> None:
        timeout = self.config.start_timeout_s
        delay, deadline = 0.5, time.monotonic() + (timeout if timeout > 0 else math.inf)
        while True:
            try:
                self.publish(ready=False)
                return
            except NasError as error:
                if time.monotonic() + delay > deadline:
                    raise
                log.error("cannot publish the NAS (%s); retrying in %.1fs", error, delay)
                if self._stop.wait(delay):
                    raise
                delay = min(delay * 2, 10.0)

    def _collect(self) -> None:
        while not self._stop.wait(self.config.gc_interval_s):
            try:
                collected = self.state.garbage_collect()
            except Exception:  # keep collecting on the next round
                log.exception("garbage collection")
                continue
            if collected:
                log.warning("unprepared claims no longer allocated here: %s", ", ".join(collected))
            try:
                # A daemon that died between prepares is reported and started again for its
                # claims' clients.
                self.state.ensure_mps_daemons()
            except Exception:
                log.exception("MPS daemons")
            try:
                for line in self.state.refresh_orphans():
                    log.warning("%s", line)
            except Exception:
                log.exception("orphan MIG devices")
            # The slices are owned by the Node: a Node deleted and registered again took them
            # with it (the chaos soak's node-delete, issue 29). Each round publishes them again;
            # a sync that finds them as wanted writes nothing.
            self.publish_slices()

    def stop(self, *, grace_s: float = 2.0) -> None:
        self._stop.set()
        self.health.stop()
        self.health_board.close()  # ends the kubelet's health streams before the servers stop
        for server in reversed(self._servers):  # registration first: the kubelet stops calling
            server.stop(grace_s).wait()
        self._servers.clear()
        for socket in (self.config.registration_socket, self.config.dra_socket):
            socket.unlink(missing_ok=True)
        try:
            self.set_status(NasStatus.NotReady)
        except NasError as error:
            log.error("could not mark the NAS NotReady: %s", error)
        self.lib.shutdown()

    @property
    def stopping(self) -> threading.Event:
        """Set when the plugin stops (or is asked to): its threads end on it."""
        return self._stop
