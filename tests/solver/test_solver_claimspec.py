"""The solver's own claim specification (`drasat.solver.claimspec`): what it admits, and that the
solver reads no claim parameters CRD model (import-linter's contract in pyproject.toml checks the
imports; this checks what a process loads)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from checker import assert_valid, make_node, pod

from drasat.api.sharing import GpuShare
from drasat.solver import ClaimRequest, GpuDemand, MigDemand, Problem, SolveParams, solve


def test_the_solver_loads_no_claim_parameters_model() -> None:
    code = (
        "import sys, drasat.solver, drasat.solver.placement, drasat.solver.explain; "
        "sys.exit('drasat.api.claims' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_demand_refuses_what_no_claim_can_be() -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        GpuDemand(count=0)
    with pytest.raises(ValueError, match="count must be 1"):
        GpuDemand(count=2, share=GpuShare(compute=50))
    with pytest.raises(ValueError, match="not both"):
        MigDemand(profile="1g.5gb", compute_slices=1)


@pytest.mark.parametrize("allowed", [False, True])
def test_a_mig_mode_gpu_goes_whole_only_where_the_demand_says_so(allowed: bool) -> None:
    """The demand's own field decides, with no selector (NVIDIA's pattern spelled as data)."""
    node = make_node("m", "A100-40GB", 1, mig=True)
    demand = GpuDemand(mig_mode_gpus_allowed=allowed)
    claim = ClaimRequest(uid="c", namespace="default", name="c", gpu=demand)
    problem = Problem(nodes=(node,), pods=(pod("p", claim),))
    solution = solve(problem, SolveParams())
    assert bool(solution.placements) is allowed
    assert_valid(problem, solution)
    if not allowed:
        (rejection,) = solution.unplaced
        assert "no GPU without MIG" in " ".join(rejection.reasons)
