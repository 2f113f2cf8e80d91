"""`drasat nodeplugin`: the kubelet DRA plugin of one GPU node (runs in the DaemonSet).

Every flag has an environment variable (DRASAT_<FLAG>, e.g. DRASAT_NODE_NAME); flags win.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from drasat.api.errors import InputError
from drasat.cli.envflags import env as _env
from drasat.cli.envflags import env_flag as _env_flag
from drasat.nodeplugin import app, cdi, plugin, registration, state


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "nodeplugin",
        help="run the kubelet DRA plugin of this node",
        description="Publish this node's GPUs in its NodeAllocationState and prepare the claims "
        "the controller allocated here when the kubelet asks (MIG, sharing, CDI).",
    )
    add = p.add_argument
    add(
        "--node-name",
        default=_env("NODE_NAME", os.environ.get("NODE_NAME", "")),
        help="this node's name (default: $NODE_NAME)",
    )
    add(
        "--namespace",
        default=_env("NAMESPACE", os.environ.get("POD_NAMESPACE", "drasat")),
        help="driver namespace of the NodeAllocationState (default drasat)",
    )
    add(
        "--cdi-root",
        default=_env("CDI_ROOT", "/var/run/cdi"),
        help="directory of CDI spec files (default /var/run/cdi)",
    )
    add(
        "--kubelet-plugin-dir",
        default=_env("KUBELET_PLUGIN_DIR", "/var/lib/kubelet/plugins"),
        help="kubelet plugins directory; the DRA socket is <dir>/gpu.drasat.io/dra.sock",
    )
    add(
        "--kubelet-registry-dir",
        default=_env("KUBELET_REGISTRY_DIR", "/var/lib/kubelet/plugins_registry"),
        help="kubelet plugin registry directory (default /var/lib/kubelet/plugins_registry)",
    )
    add(
        "--driver-root",
        default=_env("DRIVER_ROOT", ""),
        help="where the NVIDIA driver is installed on the host: its libraries, binaries and "
        "firmware go into the CDI specs under this hostPath (default /; with --simulate-gpus: "
        "none, the specs carry device nodes and environment only)",
    )
    add(
        "--dev-root",
        default=_env("DEV_ROOT", ""),
        help="host directory holding the GPUs' dev/ nodes, for CDI hostPath (default: the "
        "driver root)",
    )
    add(
        "--container-driver-root",
        default=_env("CONTAINER_DRIVER_ROOT", ""),
        help="where this process reads the driver root, e.g. /driver-root in the Helm chart's "
        "pod (default: the driver root's host path)",
    )
    add(
        "--container-dev-root",
        default=_env("CONTAINER_DEV_ROOT", ""),
        help="where this process reads the dev root's dev/ nodes (default: the dev root)",
    )
    add(
        "--cdi-mode",
        choices=[m.value for m in cdi.CdiMode],
        default=_env("CDI_MODE", "drasat"),
        help="drasat: claim specs carry the driver's files and hooks (default); toolkit: the "
        "node's NVIDIA container toolkit spec (nvidia.com/gpu) does, and the kubelet gets its "
        "device names beside the claim's",
    )
    add(
        "--cdi-hook-path",
        default=_env("CDI_HOOK_PATH", cdi.HOOK_PATH),
        help=f"the host's nvidia-cdi-hook for the specs' hooks (default {cdi.HOOK_PATH}; "
        "'': no hooks)",
    )
    add(
        "--toolkit-spec-dir",
        action="append",
        default=None,
        help="with --cdi-mode toolkit: a folder of the toolkit's CDI specs (repeatable; default "
        "$DRASAT_TOOLKIT_SPEC_DIR, colon-separated, else /etc/cdi and /var/run/cdi)",
    )
    add(
        "--state-dir",
        default=_env("STATE_DIR", "/var/lib/drasat"),
        help="checkpoint and MPS directories (default /var/lib/drasat)",
    )
    add(
        "--kubeconfig",
        default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")),
        help="kubeconfig file (default: in-cluster config, else ~/.kube/config)",
    )
    add(
        "--kubelet-api",
        choices=[a.value for a in registration.KubeletApi],
        default=_env("KUBELET_API", "classic"),
        help="versions to register: classic (v1alpha3.Node, kubelets <= 1.31), structured "
        "(v1/v1beta1 DRAPlugin) or both (default classic)",
    )
    add(
        "--orphan-mig",
        choices=[*(o.value for o in state.OrphanPolicy), "destroy"],
        default=_env("ORPHAN_MIG", "report"),
        help="MIG devices no prepared claim owns, found at start: report them (default; a log "
        "line and the NAS spec.orphanMigDevices, kept out of allocations), destroy-own (destroy "
        "those this plugin made, as its checkpoint marks them) or destroy-all (every one, other "
        "tenants' too; `destroy` is an older spelling of it)",
    )
    add(
        "--gc-interval",
        type=float,
        default=_env("GC_INTERVAL", 60),
        help="seconds between unpreparing claims no longer allocated here (0: off; default 60)",
    )
    add(
        "--simulate-gpus",
        default=_env("SIMULATE_GPUS", ""),
        help="use a simulated GPU fleet instead of NVML, e.g. '2xA100-40GB,mig=1' (testing)",
    )
    add(
        "--resourceslices",
        action="store_true",
        default=_env_flag("RESOURCESLICES"),
        help="publish this node's ResourceSlices (resource.k8s.io/v1) for the kube-scheduler "
        "to allocate from; needs --kubelet-api structured|both and API access",
    )
    add(
        "--shares",
        action=argparse.BooleanOptionalAction,
        default=_env_flag("SHARES", default=True),
        help="publish non-MIG GPUs in the ResourceSlices as shareable (consumable capacity: "
        "memory, compute %%; a claim without capacity.requests still gets the whole GPU); "
        "default on, --no-shares: whole GPUs only",
    )
    add(
        "--metrics-address",
        default=_env("METRICS_ADDRESS", ""),
        help="serve Prometheus /metrics (and /healthz) on host:port, e.g. :8081 (default: off): "
        "checkpoint entries kept unreadable, lost GPUs",
    )
    add(
        "--in-memory-nas",
        action="store_true",
        default=_env_flag("IN_MEMORY_NAS"),
        help="keep the NodeAllocationState in memory, no API server (testing)",
    )
    p.set_defaults(func=run)


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
    )
    return app.Options(
        config=config,
        simulate_gpus=args.simulate_gpus,
        kubeconfig=args.kubeconfig,
        in_memory_nas=args.in_memory_nas,
    )


def run(args: argparse.Namespace) -> int:
    serve = None
    if args.metrics_address:
        from drasat.controller import metrics_server  # the one /metrics endpoint

        def serve(registry: Any) -> None:
            metrics_server.serve(args.metrics_address, registry)

    return app.run(options(args), serve_metrics=serve)
