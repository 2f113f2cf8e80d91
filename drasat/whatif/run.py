"""One what-if run: read the cluster and the manifests, build the problem, solve, report.

The solver is passed in (the CLI passes `drasat.solver.solve`), so tests can run everything else
against hand-made solutions. A solver that raises is reported as a failed run, not a traceback.
"""

from __future__ import annotations

import importlib.resources
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drasat import loading, policyfiles
from drasat.api import groups
from drasat.api.inputerrors import InputError
from drasat.api.policy import AllocationPolicy, AllocationPolicySpec
from drasat.solver.problem import Mode, Problem, Solution, SolveParams
from drasat.whatif import (
    apivalidation,
    clusternodes,
    knownfields,
    manifestindex,
    v1cluster,
    v1kinds,
    v1manifests,
    v1run,
)

log = logging.getLogger(__name__)

Solve = Callable[[Problem, SolveParams], Solution]

#: Package data of the embedded default, used for what is not given (--cluster, -f): the example
#: workload (resource.k8s.io/v1 claims and pods) and the example cluster it is placed on, the
#: ResourceSlices and Nodes drasat's node plugin publishes for the nodes of `COMPACT_CLUSTER`
#: (generated from it by tests/whatif/default_slices.py).
DEFAULT_MANIFESTS = "default-manifests.yaml"
DEFAULT_CLUSTER = "default-slices.yaml"
#: The same nodes as a compact Cluster description (the hardware `drasat demo` simulates): the
#: example cluster of classic manifests, which the classic what-if places on NodeAllocationStates.
COMPACT_CLUSTER = "default-cluster.yaml"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Inputs:
    cluster: list[loading.Document]
    manifests: list[loading.Document]
    policy: AllocationPolicySpec
    #: What errors about the cluster as a whole name (the --cluster file, even an empty one).
    cluster_source: str = "--cluster"
    #: The manifests are the embedded example (no -f): an error in them is the cluster's misfit.
    manifests_embedded: bool = False
    #: Leave out the files of v1 manifests that ask for what drasat does not support (VFIO,
    #: IMEX, ComputeDomains) instead of refusing the run.
    skip_unsupported: bool = False


def embedded(name: str, package: str = "drasat.whatif") -> list[loading.Document]:
    """Documents of a YAML file shipped in a package (found in an installed wheel too)."""
    text = (importlib.resources.files(package) / name).read_text(encoding="utf-8")
    return loading.parse_documents(text, f"<embedded>/{name}")


def read_inputs(
    *,
    cluster: str | None,
    manifest_files: Sequence[str],
    policy: str | None,
    live: Sequence[loading.Document] | None = None,
    skip_unsupported: bool = False,
    classic_example: Callable[[], list[loading.Document] | None] | None = None,
) -> Inputs:
    """The run's input files; the embedded default stands in for what is not given, of the
    generation of what is given: without --cluster, classic manifests are placed on the compact
    example cluster (NodeAllocationStates), all others on its ResourceSlices; without -f, a
    cluster of NodeAllocationStates and no ResourceSlices (a classic cluster's inventory) gets
    `classic_example()`, the classic wing's example workload (the CLI passes it; None, or a
    wing that is not installed, gives the v1 example like every other cluster).

    `live`: the documents of a running cluster (`--from-cluster`). Its NodeAllocationStates are
    the cluster and everything else (classes, claims, parameters) comes before the -f manifests,
    so the answer is "what if I apply these manifests now"; no embedded default is mixed in.
    """
    if cluster == "-" and "-" in manifest_files:
        raise InputError("--cluster and -f cannot both read standard input", where="-")
    if live is not None and cluster:
        raise InputError("--cluster and --from-cluster are alternatives; give one", where=cluster)
    paths = [p for given in manifest_files for p in _manifest_paths(given)]
    files = [d for path in paths for d in loading.read_documents(path)]
    if manifest_files and not files:
        # As `kubectl apply -f` says of an empty input ("no objects passed to apply").
        raise InputError("no objects (the manifests are empty)", where=", ".join(manifest_files))
    strict = manifestindex.current_server_fields(files)
    for document in files:
        _as_the_api_server_checks(document, strict_fields=strict)
    _within_one_run(files)
    if live is not None:
        nodes_of = [d for d in live if _describes_nodes(d)]
        rest = [d for d in live if not _describes_nodes(d)]
        return Inputs(
            nodes_of,
            rest + files,
            _policy(policy).spec,
            cluster_source="--from-cluster",
            skip_unsupported=skip_unsupported,
        )
    cluster_docs = loading.read_documents(cluster) if cluster else None
    manifest_docs = files if manifest_files else None
    if manifest_docs is None:
        wing = classic_example if cluster_docs and _classic_cluster(cluster_docs) else None
        manifest_docs = (wing() if wing else None) or embedded(DEFAULT_MANIFESTS)
    if cluster_docs is None:
        name = DEFAULT_CLUSTER if v1manifests.uses_v1(manifest_docs) else COMPACT_CLUSTER
        cluster_docs = embedded(name)
    source = cluster or cluster_docs[0].source
    return Inputs(
        cluster_docs,
        manifest_docs,
        _policy(policy).spec,
        cluster_source=source,
        manifests_embedded=not manifest_files,
        skip_unsupported=skip_unsupported,
    )


#: The most pods one run places: past it the solver's model alone outgrows the time limit
#: and memory grows past 2 GiB (docs/PERFORMANCE.md, "What-if at cluster scale"), so such an
#: input is refused before any work, saying how to split it. DRASAT_WHATIF_MAX_PODS sets another.
MAX_PODS_PER_RUN = 10_000


def _within_one_run(documents: Sequence[loading.Document]) -> None:
    """InputError, before any work, when the manifests stand for more pods than one run places:
    counted as the API server's controllers would make them (a Pod, a workload's replicas, a
    Job's parallelism up to its completions)."""
    most = loading.env_limit("DRASAT_WHATIF_MAX_PODS", MAX_PODS_PER_RUN)
    total = 0
    for document in documents:
        count, field = _pods_made(document.data)
        total += count
        if total > most:
            raise InputError(
                f"{field}: the manifests stand for {total:,} pods so far, more than one what-if "
                f"run places ({most:,}; DRASAT_WHATIF_MAX_PODS sets another): split the input, "
                "e.g. run each workload or namespace apart, or ask what fewer replicas of the "
                "same template get (they are placed alike)",
                where=manifestindex.located(document, None),
            )


def _pods_made(data: Mapping[str, Any]) -> tuple[int, str]:
    """(how many pods the document makes, the field that says so); (0, "") for other kinds."""
    kind, spec = data.get("kind"), data.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    group = groups.group_of(str(data.get("apiVersion", "")))
    if kind == "Pod" and group == "":
        return 1, "kind"
    if group == "apps" and kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        replicas = spec.get("replicas", 1)
        return (int(replicas) if _whole(replicas) else 0), "spec.replicas"
    if group == "batch" and kind == "Job":
        parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
        count = int(parallelism) if _whole(parallelism) else 0
        if isinstance(completions, int) and _whole(completions):
            count = min(count, completions)
        return count, "spec.parallelism"
    return 0, ""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _as_the_api_server_checks(document: loading.Document, *, strict_fields: bool) -> None:
    """InputError for what `kubectl apply` of the document would be refused: a version or kind
    Kubernetes does not serve, a field its strict decoding does not know (`strict_fields`), a
    pod's claims or extended resources it refuses."""
    data = document.data
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return  # the envelope's own check names what is missing
    problem = apivalidation.unserved(api_version, kind)
    # The server decodes before it validates: nulls become zero values (for every reader
    # after this), and a value of the wrong type is its first answer.
    undecodable = knownfields.decode(data) if problem is None else None
    if undecodable is not None:
        raise InputError(f"{undecodable.path}: {undecodable.words}",
                         where=manifestindex.located(document, _namespace(data)))  # fmt: skip
    # Strict decoding's unknown fields come before anything the server's validation says.
    unknown = knownfields.unknown_fields(data) if strict_fields and problem is None else []
    if unknown:
        raise InputError(f"{unknown[0]}: {knownfields.message(unknown)}",
                         where=manifestindex.located(document, _namespace(data)))  # fmt: skip
    # Claims, templates and classes have their names checked after their model decodes, in
    # v1manifests: the server decodes before it validates.
    decoded_later = api_version in v1kinds.VERSIONS and kind in v1manifests.KINDS
    if problem is None and kind in apivalidation.NAMED_LIKE_SUBDOMAINS and not decoded_later:
        problem = apivalidation.object_name_problem(data)
    # A field that does not decode is named by the workload's model, later, as the server names
    # it before its pod spec's problems.
    checked = problem is None and apivalidation.decodes(data)
    for spec, path in apivalidation.pod_specs(data) if checked else ():
        problem = apivalidation.pod_spec_problem(spec, path)
        if problem:
            break
    if checked and problem is None:
        problem = apivalidation.restart_policy_problem(data)
    if problem:
        raise InputError(problem, where=manifestindex.located(document, None))
    for spec, _ in apivalidation.pod_specs(data) if checked else ():
        _as_the_api_server_stores(spec)


def _namespace(data: Mapping[str, Any]) -> str:
    """The object's namespace as the later checks name it ("" for cluster-scoped kinds)."""
    if data.get("kind") in manifestindex.CLUSTER_SCOPED_KINDS:
        return ""
    metadata = data.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return (
        namespace if isinstance(namespace, str) and namespace else manifestindex.DEFAULT_NAMESPACE
    )


def _as_the_api_server_stores(spec: Any) -> None:
    """The pod spec's extended resources as the API server stores them, in place: a whole count
    in any spelling it accepts (`1000m`, `1.0`, `+1`) as its number, which is what the
    conversion to claims (`drasat.v1.extended`) reads in a cluster."""
    if not isinstance(spec, dict):
        return
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for container in containers if isinstance(containers, list) else []:
            resources = container.get("resources") if isinstance(container, dict) else None
            for part in ("limits", "requests"):
                found = resources.get(part) if isinstance(resources, dict) else None
                if not isinstance(found, dict):
                    continue
                for name, value in found.items():
                    if apivalidation.is_extended(str(name)):
                        found[name] = apivalidation.stored_count(value)


def _describes_nodes(document: loading.Document) -> bool:
    """NodeAllocationStates, ResourceSlices and Nodes describe the cluster's nodes."""
    data = document.data
    return data.get("kind") == groups.NODE_ALLOCATION_STATE or v1cluster.is_v1_cluster_document(
        data
    )


def _classic_cluster(documents: Sequence[loading.Document]) -> bool:
    """NodeAllocationStates and no ResourceSlice: the inventory of a classic DRA cluster."""
    kinds = {d.data.get("kind") for d in documents}
    return groups.NODE_ALLOCATION_STATE in kinds and "ResourceSlice" not in kinds


def _policy(given: str | None) -> AllocationPolicy:
    """A policy file, or the name of a shipped policy (`binpack`); none: the shipped default."""
    if given is None:
        return policyfiles.shipped("default")
    shipped = given in policyfiles.shipped_names() or not _looks_like_a_path(given)
    if not Path(given).exists() and shipped:
        try:
            return policyfiles.shipped(given)
        except InputError as unknown:  # neither a file nor a shipped name: list the names
            raise InputError(
                f"{unknown.detail}; or the path of an AllocationPolicy file", where="--policy"
            ) from None
    return policyfiles.load(given)


def _looks_like_a_path(given: str) -> bool:
    """A name with a folder or a YAML suffix is a file the user meant, not a shipped name."""
    return "/" in given or given.endswith((".yaml", ".yml", ".json")) or given == "-"


def _manifest_paths(given: str) -> list[str]:
    """A file, '-', or (as `kubectl apply -f DIR`) the YAML and JSON files of a directory."""
    path = Path(given)
    if given == "-" or not path.is_dir():
        return [given]
    found = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    if not found:
        raise InputError("directory holds no .yaml, .yml or .json file", where=given)
    return [str(p) for p in found]


def is_v1(inputs: Inputs) -> bool:
    """The manifests are `resource.k8s.io/v1` (or v1beta1/v1beta2) claims: the v1 run."""
    return v1manifests.uses_v1(inputs.manifests)


def deadline(inputs: Inputs, started: float) -> float:
    """When a run begun at `started` (`time.monotonic()`) must be done: the policy's batch time
    limit holds for the whole run (reading, every solve, the output), not for each solve."""
    return started + inputs.policy.solver.timeLimitSeconds


#: The work after the solves (each allocation recorded, the preemptions planned for the refused
#: pods, the output built and written) as a share of the time the run took to read its input
#: (Python's start and imports included): both grow with the input and slow down alike on a busy
#: machine. Measured (300 nodes × 1,100 pods with shares, 5,000 × 9,900): the work after the
#: solves took 0.2–0.35 of the time before them.
AFTER_SOLVE_SHARE = 0.5
#: The least kept for the work after the solves (a small input).
MIN_AFTER_SOLVE_S = 0.1


def solve_deadline(deadline: float, reading_s: float) -> float:
    """By when the solves must end (`time.monotonic()`) for a run that must be done by
    `deadline` and took `reading_s` from its start to read its input: early enough for the work
    after them. Pure."""
    return deadline - max(MIN_AFTER_SOLVE_S, AFTER_SOLVE_SHARE * reading_s)


def run_v1(
    inputs: Inputs, *, mode: Mode, solve: Solve, deadline: float | None = None
) -> v1run.V1Result:
    """The v1 run: the claims of the manifests placed by `drasat.v1.allocate`. Raises
    InputError on bad input (`v1manifests.Unsupported` for what drasat does not do).

    deadline: `time.monotonic()` by which the solves must be done (`SolveParams.deadline`)."""
    cluster = clusternodes.load(inputs.cluster, source=inputs.cluster_source)
    workload = v1manifests.compile_v1(
        inputs.manifests,
        skip_unsupported=inputs.skip_unsupported,
        nodes=clusternodes.node_objects(cluster),
    )
    params = SolveParams(mode=mode, deadline=deadline)
    result = v1run.run_v1(cluster, workload, policy=inputs.policy, params=params, solve=solve)
    if inputs.cluster_source.startswith("<embedded>"):
        # A claim of another driver's class (NVIDIA's quickstart, say) on the example cluster.
        said, meant = (
            "the cluster publishes",
            "the embedded example cluster (no --cluster) publishes",
        )
        for key, reasons in result.outcome.refused.items():
            result.outcome.refused[key] = tuple(r.replace(said, meant) for r in reasons)
    return result
