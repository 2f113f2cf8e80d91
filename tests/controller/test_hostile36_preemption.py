"""Hostile review of the preemption side of the v1 controller (`controller/preemption.py`),
over the fake API of test_v1controller_preemption.py: defects found, each xfail(strict) until
it is fixed."""

from __future__ import annotations

from test_v1controller_preemption import POLICY, FakeApi, _cluster, _preempter, _snapshot, _urgent

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL


def test_a_running_gang_is_never_evicted_in_part_when_one_eviction_is_refused() -> None:
    # n1: 2 T4s held by the running gang a+b (minimum 2). urgent (priority 100) needs one GPU:
    # the gang is one unit, so its plan evicts a and b. The Eviction API refuses b (429).
    gang = {GANG_LABEL: "run", GANG_SIZE_LABEL: "2"}
    node, pods, claims = _cluster(("a", 0, gang), ("b", 0, gang))
    urgent = _urgent(claims)
    api = FakeApi(refuse={"b"})
    preempter = _preempter(api)
    preempter.consider(_snapshot([*pods, urgent.pod], claims), [node], [urgent], POLICY)
    # All of the gang or none of it: a alone gone leaves b holding a GPU of a broken gang (and
    # no nomination holds a's GPU for urgent either).
    assert api.evicted in ([], ["ml/a", "ml/b"]), api.evicted
