"""bench.churn_fit: whether a churn claim fit at its arrival, on one-GPU nodes, exactly."""

from __future__ import annotations

import pytest

from bench import churn_fit, kube_alloc
from drasat.api.groups import DRIVER_NAME

A100 = "A100-40GB"
H100 = "H100-80GB"


def judge(*products: str) -> churn_fit.Judge:
    """One node of one MIG GPU per product, as bench.kube_alloc publishes them."""
    published = {}
    for i, product in enumerate(products):
        node = kube_alloc.FleetNode(f"n{i}", f"1x{product},mig=all,seed=n{i}", {})
        published[node.name] = kube_alloc.node_slices(node, f"uid-{i}")
    classes = {body["metadata"]["name"]: body for body in kube_alloc.class_bodies()}
    templates = {n: kube_alloc.template(n, r) for n, r in kube_alloc.churn_templates().items()}
    return churn_fit.Judge(published, templates, classes)


def kind(product: str | None, profile: str | None = None, memory: int | None = None) -> str:
    return kube_alloc._churn_name(product, profile, memory, None)


def held(
    node: str,
    device: str,
    *,
    bound: float = 0.0,
    deleted: float | None = None,
    name: str = "h",
) -> churn_fit.Held:
    result = {"request": "gpu", "driver": DRIVER_NAME, "pool": node, "device": device}
    return churn_fit.Held(name, "any", 0.0, bound, deleted, (result,))


@pytest.fixture(scope="module")
def a100() -> churn_fit.Judge:
    return judge(A100)


def test_an_empty_gpu_takes_a_whole_gpu_profile(a100: churn_fit.Judge) -> None:
    assert a100.fits(kind(A100, "7g.40gb"), [])


def test_one_small_instance_held_leaves_no_room_for_the_whole_gpu_profile(
    a100: churn_fit.Judge,
) -> None:
    one = held("n0", "gpu-0-mig-1g5gb-19-6")
    assert not a100.fits(kind(A100, "7g.40gb"), [one])
    assert a100.fits(kind(A100, "3g.20gb"), [one])  # slices 0-3 are free


def test_placements_count_not_only_free_slices(a100: churn_fit.Judge) -> None:
    """3g.20gb at slices 0-3 held: 4 slices are free, but 4g.20gb only starts at 0."""
    low = held("n0", "gpu-0-mig-3g20gb-9-0")
    assert not a100.fits(kind(A100, "4g.20gb"), [low])
    assert a100.fits(kind(A100, "3g.20gb"), [low])
    high = held("n0", "gpu-0-mig-3g20gb-9-4")
    assert a100.fits(kind(A100, "4g.20gb"), [high])


def test_a_whole_gpu_held_leaves_nothing(a100: churn_fit.Judge) -> None:
    whole = held("n0", "gpu-0")
    assert not a100.fits(kind(A100, "1g.5gb"), [whole])
    assert not a100.fits(kind(None, None, 5), [whole])


def test_a_claim_by_profile_fits_only_its_product() -> None:
    both = judge(A100, H100)
    full_h100 = held("n1", "gpu-0")
    assert both.fits(kind(A100, "1g.5gb"), [full_h100])
    assert not both.fits(kind(H100, "1g.10gb"), [full_h100])
    assert both.fits(kind(None, None, 10), [full_h100])  # by needs: the A100's 1g.10gb


def test_held_means_bound_by_the_arrival_and_not_yet_deleted(a100: churn_fit.Judge) -> None:
    run = {
        "c0": {"kind": kind(A100, "7g.40gb"), "created": 0.0, "bound": 0.2, "deleted": 10.0},
        # Arrives while c0 holds the GPU: does not fit.
        "c1": {"kind": kind(A100, "1g.5gb"), "created": 5.0, "bound": None, "deleted": 5.5},
        # Arrives at c0's deletion: fits (the devices are the workload's to give back then).
        "c2": {"kind": kind(A100, "7g.40gb"), "created": 10.0, "bound": 12.0, "deleted": 20.0},
        # Arrives after c2's creation, before c2 was bound: c2 holds nothing yet.
        "c3": {"kind": kind(A100, "7g.40gb"), "created": 11.0, "bound": None, "deleted": 16.0},
    }
    seven = [{"request": "gpu", "driver": DRIVER_NAME, "pool": "n0", "device": "gpu-0"}]
    run["c0"]["results"] = seven
    run["c2"]["results"] = seven
    assert churn_fit.fit_at_arrival(a100, run) == {"c0": True, "c1": False, "c2": True, "c3": True}
