"""`drasat whatif`: place manifests on a cluster offline and show where every claim would go.

Exit codes: 0 it ran (even when some pods do not fit); 1 with --fail-on-unplaced when some pod was
not placed, or when the solver failed; 2 bad input (one line naming file, document, object, field).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drasat.api.inputerrors import InputError
from drasat.cli.envflags import kubeconfig_flag

if TYPE_CHECKING:  # the solver (OR-Tools) and the rest load when the command runs, not for --help
    from drasat import loading
    from drasat.classic.whatif.report import Report
    from drasat.whatif import run
    from drasat.whatif.progress import Progress

FORMATS = ("table", "wide", "yaml", "json", "html")
#: drasat.solver.Mode's values (a test keeps them equal; importing it would load OR-Tools).
MODES = ("online", "batch")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "whatif",
        help="place manifests on a cluster offline and show the result",
        description="Place the claims of Kubernetes manifests on a cluster, offline, with the "
        "drasat solver. Without --cluster and -f it runs an embedded example (resource.k8s.io/v1 "
        "claims on the ResourceSlices and Nodes of three nodes); either one alone is combined "
        "with the embedded other, of its kind: classic DRA manifests get the example cluster as "
        "NodeAllocationStates, a cluster of NodeAllocationStates the classic example workload.",
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="ResourceSlices and Nodes (kubectl get resourceslices,nodes -o yaml; drasat's or "
        "NVIDIA's gpu.nvidia.com driver), NodeAllocationState objects (kubectl get nas -A -o "
        "yaml) or a compact Cluster description (default: the embedded example cluster)",
    )
    parser.add_argument(
        "--from-cluster",
        action="store_true",
        help="read the cluster the kubeconfig points at instead of --cluster, read only: "
        "ResourceSlices, Nodes, DeviceClasses, ResourceClaims, templates and Pods of a "
        "resource.k8s.io/v1 cluster, else the NodeAllocationStates, classes, claims and "
        "parameters of a classic one",
    )
    kubeconfig_flag(
        parser,
        "with --from-cluster (default: $KUBECONFIG, in-cluster config, then ~/.kube/config)",
        metavar="FILE",
    )
    parser.add_argument("--context", help="kubeconfig context for --from-cluster")
    parser.add_argument(
        "-f",
        "--filename",
        dest="manifests",
        metavar="MANIFESTS",
        action="append",
        default=[],
        help="manifests you would kubectl apply: a file, a directory or '-' for standard input "
        "(repeatable; default: the embedded example workload)",
    )
    parser.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="leave out the manifest files that ask for what drasat does not support (VFIO "
        "passthrough, IMEX channels, ComputeDomains) and place the rest, instead of exit 2",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="AllocationPolicy file, or the name of a shipped one (drasat policy list); "
        "default: the shipped default policy",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="batch",
        help="batch: all pods in one model (default); online: one pod at a time, in input order",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="output format; yaml and json list the nodes' NodeAllocationStates (drasat's "
        "ledger) and then every ResourceClaim with its allocation (see --claims-only)",
    )
    parser.add_argument(
        "--claims-only",
        action="store_true",
        help="with -o yaml or json: leave out the NodeAllocationStates, so that the output is "
        "only ResourceClaims, ready for kubectl apply (a cluster without drasat's classic CRDs "
        "refuses NodeAllocationState objects)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the output to FILE, not stdout")
    parser.add_argument(
        "--fail-on-unplaced", action="store_true", help="exit 1 when some pod was not placed"
    )
    parser.add_argument(
        "--timings",
        metavar="FILE",
        help="write when each step began to FILE as JSON, in seconds since the command started "
        "(the time limit holds from there to the output's last byte)",
    )
    parser.set_defaults(func=main)


def _solver() -> run.Solve:
    from drasat import solver

    return solver.solve


def render(result: Report, output: str, *, claims_only: bool = False) -> str:
    """A classic run's output."""
    import yaml

    from drasat.classic.whatif import objects, table
    from drasat.whatif import html

    if output in ("table", "wide"):
        return table.render(result, wide=output == "wide")
    if output == "html":
        return html.render_page(result)
    listing = objects.as_list(result, claims_only=claims_only)
    if output == "json":
        return json.dumps(listing, indent=2) + "\n"
    return yaml.safe_dump(listing, sort_keys=False, width=100)


def _live_documents(args: argparse.Namespace) -> list[loading.Document] | None:
    """The cluster's objects for --from-cluster (read only), or None without it."""
    if not args.from_cluster:
        return None
    from drasat.kube import snapshot
    from drasat.kube.errors import KubeError
    from drasat.whatif import v1live

    try:
        api = snapshot.connect(args.kubeconfig, args.context)
        found = v1live.read_documents(api)
        if found is not None and any(d.data["kind"] == "ResourceSlice" for d in found):
            return found
        # No v1 devices: a classic cluster (NodeAllocationStates), if it has any.
        classic = snapshot.read_cluster_documents(api)
        has_nas = any(d.data.get("kind") == "NodeAllocationState" for d in classic)
        return classic if found is None or has_nas else found
    except KubeError as error:
        raise InputError(f"cannot read the cluster: {error}", where="--from-cluster") from None


#: Allocations between two young collections of Python's cyclic garbage collector in a what-if
#: run (Python's default: 700), and young collections between two middle ones (default: 10).
#: See `collect_less_often`.
YOUNG_COLLECTION_EVERY = 50_000
MIDDLE_COLLECTION_EVERY = 100


@contextlib.contextmanager
def collect_less_often() -> Iterator[None]:
    """The cyclic collector's young collections every `YOUNG_COLLECTION_EVERY` allocations
    rather than 700, its middle ones every `MIDDLE_COLLECTION_EVERY` young ones rather than 10,
    while a run lasts; the thresholds as they were afterwards (a caller that runs the what-if in
    its own process keeps its own). A what-if allocates millions of long-lived objects (the
    input's documents, the pods, the nodes' devices), few of them garbage in cycles; with the
    defaults each collection moves survivors on and the older collections walk them all again
    and again: at 5,000 nodes and 9,900 pods, 6 of 18 s of CPU with Python's thresholds, 3.9 of
    16.5 s with young collections only made rarer, 0.9 of 14 s with both (the same peak memory
    each time). The oldest generation keeps its threshold, so cyclic garbage is still
    collected."""
    before = gc.get_threshold()
    young, middle, old = before
    gc.set_threshold(max(young, YOUNG_COLLECTION_EVERY), max(middle, MIDDLE_COLLECTION_EVERY), old)
    try:
        yield
    finally:
        gc.set_threshold(*before)


#: A run's result, kept from being freed when the run returns: a command line's process ends
#: once the output is written (`drasat.cli.main`), without freeing it object by object first
#: (about a second at 5,000 nodes).
_KEPT: list[object] = []


def main(args: argparse.Namespace) -> int:
    from drasat.whatif.progress import Progress

    # The policy's time limit counts from the process's start (`drasat.cli.main`), else here.
    started = getattr(args, "started", None) or time.monotonic()
    # The policy's time limit is the default's until the policy is read.
    with (
        collect_less_often(),
        Progress(sys.stderr, started=started, limit_s=10.0) as progress,
    ):
        try:
            return _main(args, started, progress)
        finally:
            if args.timings:
                _write_timings(args.timings, progress.timings())


def _main(args: argparse.Namespace, started: float, progress: Progress) -> int:
    from drasat.solver.problem import Mode
    from drasat.whatif import run

    inputs = run.read_inputs(
        cluster=args.cluster,
        manifest_files=args.manifests,
        policy=args.policy,
        live=_live_documents(args),
        skip_unsupported=args.skip_unsupported,
        classic_example=_classic_example,
    )
    # The run ends by its deadline; the solves end early enough for the work after them.
    deadline = run.solve_deadline(run.deadline(inputs, started), time.monotonic() - started)
    progress.limit(run.deadline(inputs, started) - started)
    progress.mark("solves_end_by_s", deadline)
    progress.step("placing the pods")
    mode = Mode(args.mode)
    if run.is_v1(inputs):
        return _main_v1(args, inputs, mode, deadline, progress)
    classic = _classic_run()
    # Per-node reasons cost a solve per node; only the wide table of online mode shows them.
    per_node = mode is Mode.online and args.output == "wide"
    result = classic.run(
        inputs, mode=mode, solve=_solver(), node_feasibility=per_node, deadline=deadline
    )
    progress.step("writing the output")
    text = render(result, args.output, claims_only=args.claims_only)
    progress.close()
    _write(args, text)
    progress.mark("written_s")
    if getattr(args, "ends_when_written", False):
        _KEPT.append(result)
    if result.solver_error:
        print(f"error: {result.solver_error}", file=sys.stderr)
        return 1
    if args.fail_on_unplaced and result.summary.pods_unplaced:
        print(f"{result.summary.pods_unplaced} pod(s) not placed", file=sys.stderr)
        return 1
    return 0


def _classic_run() -> Any:
    """The classic what-if (drasat.classic.whatif.run); InputError in a copy without the wing."""
    try:
        from drasat.classic.whatif import run
    except ImportError:
        raise InputError(
            "the manifests are classic DRA (resource.k8s.io/v1alpha2), and this copy of drasat "
            "has no classic wing (the drasat.classic package): give resource.k8s.io/v1 manifests",
            where="-f",
        ) from None
    return run


def _classic_example() -> list[loading.Document] | None:
    """The classic wing's example workload; None in a copy without the wing (the v1 one then)."""
    try:
        from drasat.classic.whatif import run
    except ImportError:
        return None
    return run.example_manifests()


def _main_v1(
    args: argparse.Namespace, inputs: run.Inputs, mode: Any, deadline: float, progress: Progress
) -> int:
    from drasat.whatif import run, v1output

    result = run.run_v1(inputs, mode=mode, solve=_solver(), deadline=deadline)
    progress.step("writing the output")
    text = v1output.render(result, args.output, claims_only=args.claims_only)
    progress.close()
    _write(args, text)
    progress.mark("written_s")
    if getattr(args, "ends_when_written", False):
        _KEPT.append(result)
    if result.solver_error:
        print(f"error: {result.solver_error}", file=sys.stderr)
        return 1
    unplaced = len(result.outcome.refused)
    if args.fail_on_unplaced and unplaced:
        print(f"{unplaced} pod(s) not placed", file=sys.stderr)
        return 1
    return 0


def _write_timings(path: str, timings: dict[str, Any]) -> None:
    try:
        Path(path).write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", where=path) from None


def _write(args: argparse.Namespace, text: str) -> None:
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as error:
            raise InputError(f"cannot write: {error.strerror or error}", where=args.out) from None
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
