"""`drasat controller`: the central controller, on current Kubernetes (resource.k8s.io/v1) or
classic DRA (v1alpha2). Its flags come in groups, one function each, as `--help` shows them.

Every flag has an environment variable (DRASAT_<FLAG>, e.g. DRASAT_NAMESPACE); flags win.
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING, Any

from drasat import stopsignals
from drasat.api.inputerrors import InputError
from drasat.cli.envflags import flag, kubeconfig_flag

if TYPE_CHECKING:  # the controller (Kubernetes client, solver) loads when it runs, not for --help
    from drasat.controller import app


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "controller",
        help="run the central controller (v1 or classic DRA)",
        description="Place ResourceClaims of driver gpu.drasat.io with the solver and record "
        "them in NodeAllocationState and claim status: on current Kubernetes (v1) for pending "
        "pods in batches that kube-scheduler then binds; on classic DRA through "
        "PodSchedulingContexts.",
    )
    _api_flags(p.add_argument_group("Kubernetes API"))
    _serving_flags(p.add_argument_group("metrics and logs"))
    _policy_flags(p.add_argument_group("allocation policy"))
    _leader_flags(p.add_argument_group("leader election"))
    _allocation_flags(p.add_argument_group("allocation (current Kubernetes, resource.k8s.io/v1)"))
    _webhook_flags(p.add_argument_group("admission webhook (v1)"))
    _classic_flags(p.add_argument_group("classic DRA (legacy, resource.k8s.io/v1alpha2)"))
    p.set_defaults(func=run)


def _api_flags(g: Any) -> None:
    kubeconfig_flag(g)
    flag(
        g,
        "--namespace",
        "drasat",
        "driver namespace: NodeAllocationStates, Lease, policy",
        fallback="POD_NAMESPACE",
    )
    flag(g, "--kube-api-qps", 50, "API requests per second (0: unlimited; default 50)", type=float)
    flag(g, "--kube-api-burst", 100, "API request burst (default 100)", type=int)
    flag(
        g,
        "--resync-period",
        30.0,
        "seconds between full NAS/claim consistency passes (default 30)",
        type=float,
    )


def _serving_flags(g: Any) -> None:
    flag(
        g,
        "--metrics-address",
        ":8080",
        "host:port of /metrics, /healthz, /readyz ('' to disable; default :8080)",
    )
    flag(
        g,
        "--log-format",
        "text",
        "text, or json: one JSON object a line with claim/node fields",
        choices=["text", "json"],
    )


def _policy_flags(g: Any) -> None:
    source = g.add_mutually_exclusive_group()
    flag(source, "--policy-file", None, "AllocationPolicy YAML file, reloaded when it changes")
    flag(
        source,
        "--policy-configmap",
        None,
        "ConfigMap (in --namespace) holding the AllocationPolicy",
    )
    flag(
        g, "--policy-key", "policy.yaml", "key of the policy in the ConfigMap (default policy.yaml)"
    )


def _leader_flags(g: Any) -> None:
    flag(
        g,
        "--leader-elect",
        False,
        "elect a leader with a coordination.k8s.io Lease (run several replicas)",
        action="store_true",
    )
    flag(
        g, "--leader-election-lease", "drasat-controller", "Lease name (default drasat-controller)"
    )
    flag(
        g,
        "--leader-election-identity",
        "",
        "this replica's identity (default $POD_NAME, else hostname-random)",
    )
    flag(g, "--lease-duration", 15.0, "seconds (default 15)", type=float)
    flag(g, "--renew-deadline", 10.0, "seconds (default 10)", type=float)
    flag(g, "--retry-period", 2.0, "seconds (default 2)", type=float)


def _allocation_flags(g: Any) -> None:
    flag(
        g,
        "--dra-api",
        "auto",
        "which DRA to serve: v1 (resource.k8s.io/v1, Kubernetes 1.34+: drasat allocates, "
        "kube-scheduler binds), classic (v1alpha2, <= 1.31), or auto from what the API server "
        "serves (default auto)",
        choices=["auto", "v1", "classic"],
    )
    flag(
        g,
        "--driver",
        "gpu.drasat.io",
        "allocate the claims of this driver's DeviceClasses: gpu.drasat.io (drasat's own), "
        "gpu.nvidia.com (NVIDIA's DRA driver, whose node plugin then prepares what drasat "
        "allocated), or both as a comma-separated list (default gpu.drasat.io)",
    )
    flag(
        g,
        "--device-taint",
        True,
        "keep a DeviceTaintRule that taints every gpu.drasat.io device NoSchedule, so "
        "kube-scheduler's own allocator leaves them to drasat (default on)",
        action=argparse.BooleanOptionalAction,
    )
    flag(
        g,
        "--batch-window",
        0.05,
        "seconds a cycle waits to gather pods that arrive together, counted from the first "
        "event since the last cycle began (default 0.05)",
        type=float,
    )
    flag(
        g,
        "--batch-max",
        64,
        "most pods placed together in one solver call (default 64)",
        type=int,
    )
    flag(
        g,
        "--cycle-mode",
        "online",
        "place a cycle's pods one by one (online, each proven best given those before "
        "it) or in one batch model (slower; see docs/PERFORMANCE.md) (default online)",
        choices=["online", "batch"],
    )
    flag(
        g,
        "--cycle-time-limit",
        1.0,
        "seconds one cycle's batch solve may take; it is warm-started from placing the "
        "pods one by one, so stopping early never places fewer (default 1)",
        type=float,
    )


def _webhook_flags(g: Any) -> None:
    flag(
        g,
        "--webhook-address",
        "",
        "host:port of the admission webhook that gives pods of drasat's its scheduling gate "
        "(HTTPS; '' for none, the default)",
    )
    flag(
        g, "--webhook-cert-file", "", "the webhook's TLS certificate (PEM), re-read when it changes"
    )
    flag(g, "--webhook-key-file", "", "the webhook's TLS key (PEM)")
    flag(
        g,
        "--webhook-extended-resources",
        False,
        "the webhook also turns containers' nvidia.com/gpu into claims of gpu.drasat.io",
        action="store_true",
    )


def _classic_flags(g: Any) -> None:
    flag(g, "--workers", 2, "concurrent reconcile workers (default 2)", type=int)
    flag(
        g,
        "--hold-ttl",
        30.0,
        "seconds a tentative device choice is held for a negotiating pod",
        type=float,
    )


def options(args: argparse.Namespace) -> app.Options:
    """Flags -> Options; InputError on inconsistent values (a pure function)."""
    from drasat.controller import app

    if args.workers < 1:
        raise InputError("--workers must be at least 1")
    if args.batch_max < 1:
        raise InputError("--batch-max must be at least 1")
    if not 0 < args.cycle_time_limit <= 600:
        raise InputError("--cycle-time-limit must be more than 0 and at most 600 seconds")
    if not 0 <= args.batch_window <= 60:
        raise InputError("--batch-window must be between 0 and 60 seconds")
    if args.webhook_address and not (args.webhook_cert_file and args.webhook_key_file):
        raise InputError("--webhook-address needs --webhook-cert-file and --webhook-key-file")
    if not args.renew_deadline < args.lease_duration:
        raise InputError("--renew-deadline must be shorter than --lease-duration")
    from drasat.controller import drivers

    allocated = drivers.parse([args.driver])
    return app.Options(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        workers=args.workers,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        metrics_address=args.metrics_address,
        policy_file=args.policy_file,
        policy_configmap=args.policy_configmap,
        policy_key=args.policy_key,
        leader_elect=args.leader_elect,
        lease_name=args.leader_election_lease,
        identity=args.leader_election_identity,
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
        resync_s=args.resync_period,
        hold_ttl_s=args.hold_ttl,
        dra_api=args.dra_api,
        device_taint=args.device_taint,
        batch_window_s=args.batch_window,
        batch_max=args.batch_max,
        cycle_time_limit_s=args.cycle_time_limit,
        cycle_mode=args.cycle_mode,
        webhook_address=args.webhook_address,
        webhook_cert_file=args.webhook_cert_file,
        webhook_key_file=args.webhook_key_file,
        webhook_extended_resources=args.webhook_extended_resources,
        drivers=allocated,
    )


def classic_controller() -> app.Classic | None:
    """The classic-DRA controller (drasat.classic), or None in a copy of drasat without it."""
    try:
        from drasat.classic.controller import for_app
    except ImportError:
        return None
    return for_app


def run(args: argparse.Namespace) -> int:
    from drasat.controller import app, logs

    if args.log_format == "json":
        logs.use_json()
    stop = threading.Event()
    controller_app = app.App(options(args), classic=classic_controller())
    with stopsignals.relayed(stop):
        controller_app.run(stop)
    return 0
