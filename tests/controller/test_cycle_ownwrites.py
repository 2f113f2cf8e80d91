"""This process's memory of its own NAS writes (`drasat.controller.cycle.ownwrites`): a write
counts from the moment it is written, until the informer's copy is as new."""

from __future__ import annotations

from typing import Any

from drasat.controller.cycle.ownwrites import OwnWrites, WrittenClaim

Obj = dict[str, Any]


def _nas(version: str, name: str = "n1") -> Obj:
    return {"metadata": {"name": name, "resourceVersion": version}}


def test_a_cycle_counts_our_nas_write_until_the_informer_has_caught_up() -> None:
    own = OwnWrites()
    own.remember_nas(_nas("7"))
    assert own.nas_over(_nas("5"))["metadata"]["resourceVersion"] == "7"  # the cache is behind
    assert own.nases, "kept while the cache is behind"
    assert own.nas_over(_nas("7"))["metadata"]["resourceVersion"] == "7"
    assert not own.nases, "forgotten once the cache has it"
    assert own.nas_over(_nas("9"))["metadata"]["resourceVersion"] == "9"


def test_a_node_never_written_is_the_informers() -> None:
    cached = _nas("3", name="n2")
    own = OwnWrites()
    own.remember_nas(_nas("7"))
    assert own.nas_over(cached) is cached
    assert own.known_nas("n2", cached) is cached
    assert own.known_nas("n2", None) is None


def test_a_write_starts_from_the_newer_of_ours_and_the_informers() -> None:
    own = OwnWrites()
    own.remember_nas(_nas("7"))
    assert own.known_nas("n1", None) == _nas("7")
    assert own.known_nas("n1", _nas("5")) == _nas("7")
    assert own.known_nas("n1", _nas("8")) == _nas("8")
    assert own.nas_versions() == ["7"]


def test_our_status_write_is_unseen_while_the_caches_claim_is_older() -> None:
    written = WrittenClaim(node="n1", version="10")
    assert written.unseen_in({"metadata": {"resourceVersion": "9"}})
    assert not written.unseen_in({"metadata": {"resourceVersion": "10"}})
    assert not written.unseen_in({"metadata": {"resourceVersion": "11"}})
