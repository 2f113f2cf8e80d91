"""Wire the node plugin from options: NVML or the simulated fleet, the NAS store, the MPS runner.

The simulated fleet (`--simulate-gpus` / DRASAT_SIMULATE_GPUS) is never chosen silently: it is
logged as a warning at start and marked on every NAS write's log line of the plugin. It belongs to
the test bed (drasat.testbed.simnvml), which the caller hands in (`Options.simulator`): the node
plugin never imports it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drasat import stopsignals
from drasat.api.inputerrors import InputError
from drasat.kube import client as kube_client
from drasat.kube import served
from drasat.nodeplugin import (
    cdi,
    mps,
    mpshost,
    nvml,
    registration,
    slicepublisher,
    state,
    v1claims,
)
from drasat.nodeplugin.devicelib import DeviceLib
from drasat.nodeplugin.nasstore import KubeNasStore, MemoryNasStore, NasError, NasStore
from drasat.nodeplugin.plugin import Config, NodePlugin

log = logging.getLogger(__name__)

#: Crash tests: exit the process (code 137, like SIGKILL) after this prepare/unprepare step.
CRASH_AFTER_ENV = "DRASAT_SIM_CRASH_AFTER"


#: A simulated fleet from a --simulate-gpus spec: its device library and MPS runner, and how many
#: GPUs it has (drasat.testbed.simnvml.node_plugin_parts).
Simulator = Callable[[str], tuple[DeviceLib, mps.Runner, int]]


@dataclass(frozen=True)
class Options:
    config: Config
    simulate_gpus: str = ""
    simulator: Simulator | None = None
    kubeconfig: str | None = None
    in_memory_nas: bool = False
    #: The MPS host's socket (`drasat mps-host`), which runs the MPS daemons; "": this process
    #: runs them itself, and they die with it.
    mps_host_socket: str = ""


def build(options: Options) -> NodePlugin:
    config = options.config
    if not config.driver_root and not options.simulate_gpus:
        config = dataclasses.replace(config, driver_root="/")  # real GPUs: a host install
    if not config.driver_root and config.cdi_mode is cdi.CdiMode.drasat:
        log.warning("%s", cdi.undiscovered_driver_note(str(config.proc_root)))
    runner: mps.Runner
    lib: DeviceLib
    if options.simulate_gpus:
        if options.simulator is None:
            raise InputError("--simulate-gpus needs the test bed (drasat.testbed), not installed")
        lib, runner, gpus = options.simulator(options.simulate_gpus)
        log.warning(
            "SIMULATED GPUs (%s): %d GPU(s); no NVML, no nvidia-smi; MPS daemons are the "
            "stand-in simmps.py",
            options.simulate_gpus,
            gpus,
        )
    else:
        lib = nvml.NvmlDeviceLib()
        # The host's MPS binaries, chrooted into the host's root where the plugin sees it.
        host_root = config.driver_root_mount if config.driver_root == "/" else ""
        runner = mps.ProcessRunner(root=host_root)
    if options.mps_host_socket:
        program = mps.SIM_PROGRAM if options.simulate_gpus else mps.REAL_PROGRAM
        runner = mpshost.MpsHostClient(Path(options.mps_host_socket), program=program)
    elif os.getpid() == 1:
        log.warning(
            "MPS daemons are this process's children and it is PID 1 of its PID namespace (a "
            "container): they die when it exits, under running workloads; run `drasat "
            "mps-host` and give --mps-host-socket (the Helm chart does)"
        )
    store: NasStore
    api: kube_client.KubeClient | None = None
    if not options.in_memory_nas or options.kubeconfig:
        # The NAS and v1 ResourceClaims; an in-memory NAS with a kubeconfig still reads claims.
        api = kube_client.KubeClient(kube_client.load_configuration(options.kubeconfig))
    if options.in_memory_nas:
        log.warning("NodeAllocationState kept in memory only: the controller cannot see it")
        store = MemoryNasStore(node=config.node_name, namespace=config.namespace)
    else:
        assert api is not None
        store = KubeNasStore(api, node=config.node_name, namespace=config.namespace)
    reader = v1claims.KubeClaimReader(api) if api is not None else None
    publisher = None
    if config.publish_slices:
        if api is None or config.kubelet_api is registration.KubeletApi.classic:
            raise InputError(
                "--resourceslices needs API access (no --in-memory-nas, or a --kubeconfig) and "
                "--kubelet-api structured or both"
            )
        publisher = slicepublisher.SlicePublisher(api, node_name=config.node_name)
        config = fit_to_server(config, api)
    plugin = NodePlugin(
        config,
        lib=lib,
        store=store,
        mps_runner=runner,
        claim_reader=reader,
        slice_publisher=publisher,
    )
    crash_after = os.environ.get(CRASH_AFTER_ENV, "")
    if crash_after:
        if not options.simulate_gpus:
            raise InputError(f"{CRASH_AFTER_ENV} (fault injection) needs --simulate-gpus")
        log.warning("fault injection: the process exits after step %s", crash_after)
        plugin.state.faults.append(state.Fault(crash_after, state.ProcessExit()))
    return plugin


def fit_to_server(config: Config, api: served.Prober) -> Config:
    """Publish only what this API server keeps of the slices (drasat.kube.served): asked once,
    said in one log line."""
    capacity = served.slice_shares(api, config.node_name)
    counters = served.slice_counters(api, config.node_name)
    log.warning("%s", served.line(f"node plugin on {config.node_name}", (capacity, counters)))
    return dataclasses.replace(
        config, slice_consumable_capacity=capacity.on, slice_counters=counters.on
    )


def run(
    options: Options,
    *,
    ready: threading.Event | None = None,
    serve_metrics: Callable[[Any], None] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop. `serve_metrics` gets the plugin's
    Prometheus registry (the caller's HTTP endpoint)."""
    plugin = build(options)
    if serve_metrics is not None:
        serve_metrics(plugin.state.metrics.registry)
    # A signal during the start ends its retries of the first NAS write (`giving up`).
    with stopsignals.relayed(plugin.stopping):
        try:
            report = plugin.start()
        except NasError as error:
            log.error("giving up: %s", error)
            return 1
        for line in report:
            log.warning("start-up: %s", line)
        if ready is not None:
            ready.set()
        try:
            plugin.stopping.wait()
        finally:
            plugin.stop()
    return 0
