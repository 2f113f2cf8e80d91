"""The classic wing's edge to the solver: GpuClaimParameters and MigDeviceClaimParameters become
the solver's own GpuDemand and MigDemand (`drasat.classic.params`); the claim parameters CRD
models stay out of the solver (tests/solver/test_solver_claimspec.py), and the texts the solver
keys and ranks claims by are as they were when it read the CRD models (so no placement moves)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_crds import _SELECTOR

from drasat.api.claims import GpuClaimParametersSpec, MigDeviceClaimParametersSpec
from drasat.classic.params import gpu_demand, mig_demand
from drasat.solver import GpuDemand, MigDemand, Requirement

_REQUIREMENT = st.sampled_from([None, "Preferred", "Required"])
_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "count": st.integers(1, 8),
        "selector": _SELECTOR,
        "optional": st.booleans(),
        "sharing": st.sampled_from(
            [
                {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
                {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
            ]
        ),
        "topology": st.fixed_dictionaries(
            {"sameNVLinkDomain": _REQUIREMENT, "sameNUMANode": _REQUIREMENT}
        ),
    },
)


def _asks_mig_enabled(selector: Any) -> bool:
    """An independent reading of NVIDIA's rule: `migEnabled: true` anywhere in the tree."""
    if not isinstance(selector, dict):
        return False
    if selector.get("migEnabled") is True:
        return True
    children = selector.get("andExpression", []) + selector.get("orExpression", [])
    return any(_asks_mig_enabled(c) for c in children)


@settings(max_examples=300, deadline=None)
@given(_SPEC, st.sampled_from([None, {"compute": 30}, {"memory": "8Gi", "compute": 10}]))
def test_a_gpu_claim_becomes_a_gpu_demand_keyed_as_before(raw: dict[str, Any], share: Any) -> None:
    if share is not None:
        raw = {**raw, "count": 1, "share": share}
    spec = GpuClaimParametersSpec.model_validate(raw)
    demand = gpu_demand(spec)
    assert demand.mig_mode_gpus_allowed == _asks_mig_enabled(raw.get("selector"))
    assert (demand.count, demand.selector, demand.sharing, demand.optional, demand.share) == (
        spec.count,
        spec.selector,
        spec.sharing,
        spec.optional,
        spec.share,
    )
    if spec.topology is not None:
        assert demand.topology is not None
        assert demand.topology.same_numa_node == spec.topology.sameNUMANode
        assert demand.topology.same_nvlink_domain == spec.topology.sameNVLinkDomain
    # The memo keys (`nodes.shape`, `model.claim_shape`) and the text that ranks workload
    # classes of equal weight (`workload.Workload._build`) are the CRD model's JSON, as before.
    assert demand.key() == spec.model_dump_json(exclude_none=True)
    assert demand.key(leave_out=("count", "share")) == spec.model_dump_json(
        exclude_none=True, exclude={"count", "share"}
    )


def test_a_v1_claim_allowed_mig_mode_gpus_ranks_where_its_selector_put_it() -> None:
    """v1 once said "MIG-mode GPUs may go whole" with a selector matching every GPU; its class
    text now says it outright and still ranks after the claim that does not say it."""
    either = {"orExpression": [{"migEnabled": True}, {"migEnabled": False}]}
    before = [
        GpuClaimParametersSpec.model_validate(raw).model_dump_json(
            exclude_none=True, exclude={"count", "share"}
        )
        for raw in ({"count": 2}, {"count": 2, "selector": either})
    ]
    after = [
        GpuDemand(count=2, mig_mode_gpus_allowed=allowed).key(leave_out=("count", "share"))
        for allowed in (False, True)
    ]
    assert after[0] == before[0] and (after[0] < after[1]) == (before[0] < before[1])


def test_a_mig_claim_becomes_a_mig_demand() -> None:
    by_needs = MigDeviceClaimParametersSpec.model_validate(
        {"memory": "10Gi", "computeSlices": 2, "gpuClaimName": "gpu"}
    )
    assert mig_demand(by_needs) == MigDemand(
        memory_bytes=10 * 2**30, compute_slices=2, gpu_claim_name="gpu"
    )
    named = MigDeviceClaimParametersSpec.model_validate({"profile": "1g.5gb"})
    assert mig_demand(named) == MigDemand(profile="1g.5gb")
    assert Requirement("Required") is Requirement.Required
