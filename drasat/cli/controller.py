"""`drasat controller`: the central classic-DRA controller (resource.k8s.io/v1alpha2).

Every flag has an environment variable (DRASAT_<FLAG>, e.g. DRASAT_NAMESPACE); flags win.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from drasat.api.errors import InputError
from drasat.cli.envflags import env as _env
from drasat.cli.envflags import env_flag

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
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")),
        help="kubeconfig file (default: in-cluster config, else ~/.kube/config)",
    )
    p.add_argument(
        "--namespace",
        default=_env("NAMESPACE", os.environ.get("POD_NAMESPACE", "drasat")),
        help="driver namespace: NodeAllocationStates, Lease, policy",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=_env("WORKERS", 2),
        help="concurrent reconcile workers (default 2)",
    )
    p.add_argument(
        "--kube-api-qps",
        type=float,
        default=_env("KUBE_API_QPS", 20),
        help="API requests per second (0: unlimited; default 20)",
    )
    p.add_argument(
        "--kube-api-burst",
        type=int,
        default=_env("KUBE_API_BURST", 40),
        help="API request burst (default 40)",
    )
    p.add_argument(
        "--metrics-address",
        default=_env("METRICS_ADDRESS", ":8080"),
        help="host:port of /metrics, /healthz, /readyz ('' to disable; default :8080)",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--policy-file",
        default=_env("POLICY_FILE", None),
        help="AllocationPolicy YAML file, reloaded when it changes",
    )
    source.add_argument(
        "--policy-configmap",
        default=_env("POLICY_CONFIGMAP", None),
        help="ConfigMap (in --namespace) holding the AllocationPolicy",
    )
    p.add_argument(
        "--policy-key",
        default=_env("POLICY_KEY", "policy.yaml"),
        help="key of the policy in the ConfigMap (default policy.yaml)",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        default=_env("LEADER_ELECT", "") in ("1", "true"),
        help="elect a leader with a coordination.k8s.io Lease (run several replicas)",
    )
    p.add_argument(
        "--leader-election-lease",
        default=_env("LEADER_ELECTION_LEASE", "drasat-controller"),
        help="Lease name (default drasat-controller)",
    )
    p.add_argument(
        "--leader-election-identity",
        default=_env("LEADER_ELECTION_IDENTITY", ""),
        help="this replica's identity (default $POD_NAME, else hostname-random)",
    )
    p.add_argument("--lease-duration", type=float, default=15.0, help="seconds (default 15)")
    p.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--retry-period", type=float, default=2.0, help="seconds (default 2)")
    p.add_argument(
        "--resync-period",
        type=float,
        default=30.0,
        help="seconds between full NAS/claim consistency passes (default 30)",
    )
    p.add_argument(
        "--hold-ttl",
        type=float,
        default=30.0,
        help="seconds a tentative device choice is held for a negotiating pod",
    )
    p.add_argument(
        "--dra-api",
        choices=["auto", "v1", "classic"],
        default=_env("DRA_API", "auto"),
        help="which DRA to serve: v1 (resource.k8s.io/v1, Kubernetes 1.34+: drasat allocates, "
        "kube-scheduler binds), classic (v1alpha2, <= 1.31), or auto from what the API server "
        "serves (default auto)",
    )
    p.add_argument(
        "--device-taint",
        action=argparse.BooleanOptionalAction,
        default=env_flag("DEVICE_TAINT", True),
        help="v1: keep a DeviceTaintRule that taints every gpu.drasat.io device NoSchedule, so "
        "kube-scheduler's own allocator leaves them to drasat (default on)",
    )
    p.add_argument(
        "--batch-window",
        type=float,
        default=_env("BATCH_WINDOW", 0.2),
        help="v1: seconds a cycle waits to gather pods that arrive together (default 0.2)",
    )
    p.add_argument(
        "--batch-max",
        type=int,
        default=_env("BATCH_MAX", 64),
        help="v1: most pods placed together in one solver call (default 64)",
    )
    p.add_argument(
        "--cycle-mode",
        choices=["online", "batch"],
        default=_env("CYCLE_MODE", "online"),
        help="v1: place a cycle's pods one by one (online, each proven best given those before "
        "it) or in one batch model (slower; see docs/PERFORMANCE.md) (default online)",
    )
    p.add_argument(
        "--cycle-time-limit",
        type=float,
        default=_env("CYCLE_TIME_LIMIT", 1.0),
        help="v1: seconds one cycle's batch solve may take; it is warm-started from placing the "
        "pods one by one, so stopping early never places fewer (default 1)",
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=_env("LOG_FORMAT", "text"),
        help="text, or json: one JSON object a line with claim/node fields",
    )
    p.set_defaults(func=run)  # fmt: skip


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
    if not args.renew_deadline < args.lease_duration:
        raise InputError("--renew-deadline must be shorter than --lease-duration")
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
    )


def run(args: argparse.Namespace) -> int:
    from drasat.controller import app, logs

    if args.log_format == "json":
        logs.use_json()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    controller_app = app.App(options(args))
    try:
        controller_app.run(stop)
    except KeyboardInterrupt:
        controller_app.shutdown()
    return 0
