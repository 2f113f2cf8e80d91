"""Preemption on the lifecycle model's cluster with graceful termination (`lc_world.World`:
an evicted pod stays Terminating, its claims reserved and its devices in use, for
`GRACE_ROUNDS` rounds), and with an eviction refused midway: explicit sequences beside the
model's random runs (docs/RELIABILITY.md, "The lifecycle model")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lc_objects as objects
import lc_truth as truth
import pytest
from lc_api import ModelApi
from lc_world import GRACE_ROUNDS, NAMESPACE, World

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.v1.nominations import Nomination

Obj = dict[str, Any]
BOUND = 8


def _template(world: World, name: str, kind: str) -> None:
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template(name, kind), namespace=NAMESPACE
    )


def _pod(world: World, name: str, **kw: Any) -> None:
    world.admin.create(r.PODS, objects.pod(name, **kw), namespace=NAMESPACE)


def _pods(world: World) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in world.read(r.PODS, NAMESPACE)}


def _problems(world: World) -> list[truth.Problem]:
    held, _ = truth.holdings(world.read(r.RESOURCE_CLAIMS_V1, NAMESPACE), world.gpus, {})
    return truth.problems(held, world.gpus)


def _allocated(world: World, pod: Obj) -> bool:
    claims = {c["metadata"]["name"]: c for c in world.read(r.RESOURCE_CLAIMS_V1, NAMESPACE)}
    names = truth.claim_names(pod)
    return bool(names) and all(truth.results_of(claims.get(str(n)) or {}) for n in names)


def test_a_terminating_victim_keeps_its_gpu_and_its_preemptor_waits(
    cluster: Callable[..., World],
) -> None:
    """One T4, held by a pod of priority 0; a pod of priority 1000 evicts it. The victim runs on
    for its grace period: its claim stays allocated and reserved, the preemptor keeps its
    nomination and gets nothing (no T4 held twice) and no one else is evicted; once the victim
    is gone, the preemptor is placed on the T4."""
    world = cluster(n1="t4x1")
    _template(world, "one", "gpu")
    _pod(world, "low", template="one")
    for _ in range(3):
        world.round()
    assert (_pods(world)["low"].get("status") or {}).get("phase") == "Running"
    _template(world, "big", "gpu")
    _pod(world, "urgent", template="big", priority=1000)
    terminating = 0
    for _ in range(GRACE_ROUNDS + BOUND):
        world.round()
        pods = _pods(world)
        assert _problems(world) == []
        low = pods.get("low")
        if low is not None and low["metadata"].get("deletionTimestamp"):
            terminating += 1
            assert _allocated(world, low), "the victim's claim went while it still runs"
            assert not _allocated(world, pods["urgent"]), "the preemptor took a held GPU"
            found = Nomination.of_pod(pods["urgent"])
            assert found is not None and found.victims == ("ml/low",)
    assert terminating >= GRACE_ROUNDS - 1
    assert [pod for _, pod in world.evictions] == ["ml/low"]
    assert "low" not in _pods(world)
    assert (_pods(world)["urgent"].get("status") or {}).get("phase") == "Running"


def test_a_victim_gang_evicted_in_part_is_finished(
    cluster: Callable[..., World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two T4s held by a gang of two (it goes whole); a pod of priority 1000 needs one. Both
    dry runs pass, the real eviction of the second member fails once (a 500): the first is
    evicted already. The gang's other pod must not keep its T4 for nothing: drasat evicts it the
    next cycle, and the preemptor is placed."""
    world = cluster(n1="t4x2")
    _template(world, "member", "gpu")
    labels = {GANG_LABEL: "job", GANG_SIZE_LABEL: "2"}
    for name in ("g1", "g2"):
        _pod(world, name, template="member", labels=labels)
    for _ in range(4):
        world.round()
    assert all((p.get("status") or {}).get("phase") == "Running" for p in _pods(world).values())
    evict = ModelApi._evict
    failed: list[str] = []

    def once(self: ModelApi, body: Obj, namespace: str | None) -> Obj:
        name = str(body["metadata"]["name"])
        dry = (body.get("deleteOptions") or {}).get("dryRun")
        if name == "g2" and not dry and not failed:
            failed.append(name)
            raise errors.Unavailable("500 InternalError", status=500)
        return evict(self, body, namespace)

    monkeypatch.setattr(ModelApi, "_evict", once)
    _template(world, "big", "gpu")
    _pod(world, "urgent", template="big", priority=1000)
    for _ in range(GRACE_ROUNDS + BOUND):
        world.round()
        assert _problems(world) == []
    assert failed == ["g2"]
    assert sorted(pod for _, pod in world.evictions) == ["ml/g1", "ml/g2"]
    pods = _pods(world)
    assert "g1" not in pods and "g2" not in pods, "a gang left evicted in part"
    assert (pods["urgent"].get("status") or {}).get("phase") == "Running"
