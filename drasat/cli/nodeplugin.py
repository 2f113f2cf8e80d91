"""`drasat nodeplugin`: the kubelet DRA plugin of one GPU node (runs in the DaemonSet).

Every flag has an environment variable (DRASAT_<FLAG>, e.g. DRASAT_NODE_NAME); flags win.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from drasat.api.inputerrors import InputError
from drasat.cli.envflags import env as _env
from drasat.cli.envflags import flag, kubeconfig_flag
from drasat.nodeplugin import app, cdi, plugin, registration, state


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "nodeplugin",
        help="run the kubelet DRA plugin of this node",
        description="Publish this node's GPUs in its NodeAllocationState and prepare the claims "
        "the controller allocated here when the kubelet asks (MIG, sharing, CDI).",
    )
    _api_flags(p.add_argument_group("Kubernetes API"))
    _kubelet_flags(p.add_argument_group("kubelet and ResourceSlices"))
    _cdi_flags(p.add_argument_group("CDI and the driver's files"))
    _state_flags(p.add_argument_group("state and cleanup"))
    _testing_flags(p.add_argument_group("testing"))
    p.set_defaults(func=run)


def _api_flags(g: Any) -> None:
    flag(g, "--node-name", "", "this node's name (default: $NODE_NAME)", fallback="NODE_NAME")
    flag(
        g,
        "--namespace",
        "drasat",
        "driver namespace of the NodeAllocationState (default drasat)",
        fallback="POD_NAMESPACE",
    )
    kubeconfig_flag(g)
    flag(
        g,
        "--start-timeout",
        120.0,
        "seconds the first NodeAllocationState write is retried while the API server, the "
        "namespace or drasat's CRDs are not there yet (0: until they are; default 120)",
        type=float,
    )


def _kubelet_flags(g: Any) -> None:
    flag(
        g,
        "--kubelet-plugin-dir",
        "/var/lib/kubelet/plugins",
        "kubelet plugins directory; the DRA socket is <dir>/gpu.drasat.io/dra.sock",
    )
    flag(
        g,
        "--kubelet-registry-dir",
        "/var/lib/kubelet/plugins_registry",
        "kubelet plugin registry directory (default /var/lib/kubelet/plugins_registry)",
    )
    flag(
        g,
        "--kubelet-api",
        "classic",
        "versions to register: classic (v1alpha3.Node, kubelets <= 1.31), structured "
        "(v1/v1beta1 DRAPlugin) or both (default classic)",
        choices=[a.value for a in registration.KubeletApi],
    )
    flag(
        g,
        "--resourceslices",
        False,
        "publish this node's ResourceSlices (resource.k8s.io/v1) for the kube-scheduler "
        "to allocate from; needs --kubelet-api structured|both and API access",
        action="store_true",
    )
    flag(
        g,
        "--shares",
        True,
        "publish non-MIG GPUs in the ResourceSlices as shareable (consumable capacity: "
        "memory, compute %%; a claim without capacity.requests still gets the whole GPU); "
        "default on, --no-shares: whole GPUs only",
        action=argparse.BooleanOptionalAction,
    )


def _cdi_flags(g: Any) -> None:
    flag(g, "--cdi-root", "/var/run/cdi", "directory of CDI spec files (default /var/run/cdi)")
    flag(
        g,
        "--cdi-mode",
        "drasat",
        "drasat: claim specs carry the driver's files and hooks (default); toolkit: the "
        "node's NVIDIA container toolkit spec (nvidia.com/gpu) does, and the kubelet gets its "
        "device names beside the claim's",
        choices=[m.value for m in cdi.CdiMode],
    )
    flag(
        g,
        "--cdi-hook-path",
        cdi.HOOK_PATH,
        f"the host's nvidia-cdi-hook for the specs' hooks (default {cdi.HOOK_PATH}; '': no hooks)",
    )
    g.add_argument(
        "--toolkit-spec-dir",
        action="append",
        default=None,
        help="with --cdi-mode toolkit: a folder of the toolkit's CDI specs (repeatable; default "
        "$DRASAT_TOOLKIT_SPEC_DIR, colon-separated, else /etc/cdi and /var/run/cdi)",
    )
    flag(
        g,
        "--driver-root",
        "",
        "where the NVIDIA driver is installed on the host: its libraries, binaries and "
        "firmware go into the CDI specs under this hostPath (default /; with --simulate-gpus: "
        "none, the specs carry device nodes and environment only)",
    )
    flag(
        g,
        "--dev-root",
        "",
        "host directory holding the GPUs' dev/ nodes, for CDI hostPath (default: the driver root)",
    )
    flag(
        g,
        "--container-driver-root",
        "",
        "where this process reads the driver root, e.g. /driver-root in the Helm chart's "
        "pod (default: the driver root's host path)",
    )
    flag(
        g,
        "--container-dev-root",
        "",
        "where this process reads the dev root's dev/ nodes (default: the dev root)",
    )
    flag(
        g,
        "--proc-root",
        "/proc",
        "where this process reads driver/nvidia-caps/mig-minors, the MIG capability device "
        "numbers (default /proc)",
    )


def _state_flags(g: Any) -> None:
    flag(
        g,
        "--state-dir",
        "/var/lib/drasat",
        "checkpoint and MPS directories (default /var/lib/drasat)",
    )
    flag(
        g,
        "--orphan-mig",
        "report",
        "MIG devices no prepared claim owns, found at start: report them (default; a log "
        "line and the NAS spec.orphanMigDevices, kept out of allocations), destroy-own (destroy "
        "those this plugin made, as its checkpoint marks them) or destroy-all (every one, other "
        "tenants' too; `destroy` is an older spelling of it)",
        choices=[*(o.value for o in state.OrphanPolicy), "destroy"],
    )
    flag(
        g,
        "--mps-host-socket",
        "",
        "the socket of this node's `drasat mps-host`, which then runs the MPS daemons, so "
        "that they outlive this process's container (the Helm chart: <state dir>/mps-host.sock; "
        "default: none, this process runs them and they die with it)",
    )
    flag(
        g,
        "--gc-interval",
        60,
        "seconds between unpreparing claims no longer allocated here (0: off; default 60)",
        type=float,
    )
    flag(
        g,
        "--metrics-address",
        "",
        "serve Prometheus /metrics (and /healthz) on host:port, e.g. :8081 (default: off): "
        "checkpoint entries kept unreadable, lost GPUs",
    )


def _testing_flags(g: Any) -> None:
    flag(
        g,
        "--simulate-gpus",
        "",
        "use a simulated GPU fleet instead of NVML, e.g. '2xA100-40GB,mig=1' (testing)",
    )
    flag(
        g,
        "--in-memory-nas",
        False,
        "keep the NodeAllocationState in memory, no API server (testing)",
        action="store_true",
    )


def simulator() -> app.Simulator | None:
    """The simulated fleet of --simulate-gpus (the test bed), or None where it is not installed."""
    try:
        from drasat.testbed.simnvml import node_plugin_parts
    except ImportError:
        return None
    return node_plugin_parts


def options(args: argparse.Namespace) -> app.Options:
    if not args.node_name:
        raise InputError("--node-name (or $NODE_NAME) is required")
    config = plugin.Config(
        node_name=args.node_name,
        namespace=args.namespace,
        cdi_root=Path(args.cdi_root),
        plugin_dir=Path(args.kubelet_plugin_dir),
        registry_dir=Path(args.kubelet_registry_dir),
        driver_root=args.driver_root,
        dev_root=args.dev_root,
        driver_root_mount=args.container_driver_root,
        dev_root_mount=args.container_dev_root,
        proc_root=Path(args.proc_root),
        cdi_mode=cdi.CdiMode(args.cdi_mode),
        cdi_hook_path=args.cdi_hook_path,
        toolkit_spec_dirs=tuple(
            Path(d)
            for d in args.toolkit_spec_dir
            or _env("TOOLKIT_SPEC_DIR", "/etc/cdi:/var/run/cdi").split(":")
            if d
        ),
        state_dir=Path(args.state_dir),
        kubelet_api=registration.KubeletApi(args.kubelet_api),
        orphans=state.OrphanPolicy.parse(args.orphan_mig),
        gc_interval_s=args.gc_interval,
        publish_slices=args.resourceslices,
        slice_shares=args.shares,
        start_timeout_s=args.start_timeout,
    )
    return app.Options(
        config=config,
        simulate_gpus=args.simulate_gpus,
        simulator=simulator() if args.simulate_gpus else None,
        kubeconfig=args.kubeconfig,
        in_memory_nas=args.in_memory_nas,
        mps_host_socket=args.mps_host_socket,
    )


def run(args: argparse.Namespace) -> int:
    serve = None
    if args.metrics_address:
        from drasat.controller import metrics_server  # the one /metrics endpoint

        def serve(registry: Any) -> None:
            metrics_server.serve(args.metrics_address, registry)

    return app.run(options(args), serve_metrics=serve)
