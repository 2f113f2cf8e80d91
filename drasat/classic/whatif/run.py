"""A classic what-if run: compile the classic manifests, constrain their pods to the nodes that
admit them, solve, report. The inputs come from `drasat.whatif.run.read_inputs`; the classic
example workload (`example_manifests`) is its default for a cluster of NodeAllocationStates."""

from __future__ import annotations

import logging
from dataclasses import replace

from drasat import loading
from drasat.api import nodefit
from drasat.api.inputerrors import InputError
from drasat.classic.whatif import manifests, report
from drasat.solver.problem import Mode, PodRejection, Problem, Solution, SolveParams, Status
from drasat.whatif import clusternodes
from drasat.whatif.run import Inputs, Solve, embedded

log = logging.getLogger(__name__)

#: Package data: the reference cases, a MIG claim and an optional claim in classic DRA terms.
EXAMPLE_MANIFESTS = "default-manifests-classic.yaml"


def example_manifests() -> list[loading.Document]:
    """The classic example workload (`drasat whatif --cluster NAS-FILE` without -f)."""
    return embedded(EXAMPLE_MANIFESTS, package="drasat.classic.whatif")


def run(
    inputs: Inputs,
    *,
    mode: Mode,
    solve: Solve,
    node_feasibility: bool = False,
    deadline: float | None = None,
) -> report.Report:
    """Compile, solve and describe. Raises InputError on bad input, never on a solver failure.

    node_feasibility: ask the solver (online mode) why each node is unsuitable for each pod.
    deadline: `time.monotonic()` by which the solve must be done (`SolveParams.deadline`).
    """
    cluster = clusternodes.load(inputs.cluster, source=inputs.cluster_source)
    try:
        workload = manifests.compile_manifests(
            inputs.manifests,
            offered_profiles=cluster.offered_profiles(),
            existing_uids=cluster.existing_uids(),
        )
    except InputError as misfit:
        if not inputs.manifests_embedded or inputs.cluster_source.startswith("<embedded>"):
            raise
        # Only the user's --cluster was given: name it, not the example it does not fit.
        raise InputError(
            f"the embedded example manifests (run without -f) do not fit this cluster: {misfit}",
            where=inputs.cluster_source,
        ) from None
    workload = _constrain_nodes(workload, cluster)
    problem = Problem(nodes=cluster.states, pods=workload.requests(), policy=inputs.policy)
    error: str | None = None
    try:
        params = SolveParams(mode=mode, node_feasibility=node_feasibility, deadline=deadline)
        solution = solve(problem, params)
    except Exception as failure:  # a solver bug must still end in a report, not a traceback
        log.debug("solver failed", exc_info=True)
        error = f"solver failed: {type(failure).__name__}: {failure}"
        solution = Solution(
            status=Status.UNKNOWN,
            placements=(),
            unplaced=tuple(PodRejection(p.key, (error,)) for p in problem.pods),
        )
    return report.build(cluster, workload, solution, mode=mode.value, solver_error=error)


def _constrain_nodes(
    workload: manifests.Workload, cluster: clusternodes.ClusterNodes
) -> manifests.Workload:
    """Give pods with spec.nodeName/nodeSelector their candidate nodes; block those with none."""
    pods = []
    for pod in workload.pods:
        spec = pod.pod.spec
        allowed = clusternodes.matching_nodes(
            cluster.states, node_name=spec.nodeName, node_selector=spec.nodeSelector
        )
        if cluster.node_objects:  # Nodes given: the scheduler's filters (taints, cordons, ...)
            allowed, refusals = _admitting(pod, cluster, allowed)
            if allowed == () and pod.blocked is None:
                pods.append(replace(pod, candidate_nodes=allowed, blocked=refusals))
                continue
        blocked = pod.blocked
        if allowed == () and blocked is None:
            wanted = [f"nodeName={spec.nodeName}"] if spec.nodeName else []
            wanted += [f"{k}={v}" for k, v in (spec.nodeSelector or {}).items()]
            blocked = f"no node matches the pod's {', '.join(wanted)}"
        pods.append(replace(pod, candidate_nodes=allowed, blocked=blocked))
    return replace(workload, pods=tuple(pods))


def _admitting(
    pod: manifests.CompiledPod, cluster: clusternodes.ClusterNodes, allowed: tuple[str, ...] | None
) -> tuple[tuple[str, ...], str]:
    """The nodes among `allowed` whose Node object (when given) admits the pod, and why none
    does."""
    obj = {"spec": pod.pod.spec.model_dump(mode="json", by_alias=True, exclude_none=True)}
    kept, reasons = [], []
    for state in cluster.states:
        if allowed is not None and state.name not in allowed:
            continue
        node = cluster.node_objects.get(state.name)
        why = nodefit.unfit(obj, node) if node is not None else None
        if why is None:
            kept.append(state.name)
        else:
            reasons.append(f"{state.name}: {why}")
    return tuple(kept), "no node admits the pod: " + "; ".join(reasons or ["no node matches"])
