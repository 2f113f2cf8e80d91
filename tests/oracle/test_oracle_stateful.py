"""drasat's real controller against kube-scheduler's allocator (k8s.io/dynamic-resource-allocation
structured v0.37.2, through drasat-oracle) over sequences of claims on a cluster of several nodes:
pods with claims arrive, the controller's cycles allocate them, pods leave and their claims are
released, others arrive and are allocated again; another allocator (upstream itself) allocates
claims beside drasat's. After every step, from what the API holds:

- validity: every allocation drasat wrote is one upstream accepts beside every other allocation
  in the cluster (upstream's allocator run with the claim's devices pinned and the others'
  allocations as its allocated state: devices, shares' consumed capacity, counters);
- feasibility: no pod drasat left waiting could be placed by upstream on any node, given the
  same allocations;
- release: a pod's claims deleted are released (gone) within the step's cycles.

The nodes are drasat's (the node plugin's slices and NodeAllocationState: whole GPUs, shares,
MIG with partitionable counters; `fleet`) and NVIDIA's (NVIDIA-format slices: `nvidiaslices`);
the claims `claimgen`'s (half of them one device with at most one selector, so that nodes fill
and empty), for either driver's classes, without the known differences (`known`).
docs/RELIABILITY.md says what this covers and what it does not.

$DRASAT_ORACLE_SEQUENCES sets the number of sequences (the long run, docs/RELIABILITY.md); CI
runs 25 of 12 steps.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any, ClassVar

import claimgen
import clusterkit
import fleet
import known
import oraclekit
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from oraclekit import Oracle

from drasat.controller import v1inputs

Obj = dict[str, Any]

#: What the checks saw (printed with -s: how much a run covered).
SEEN: collections.Counter[str] = collections.Counter()
#: Steps per sequence: a pod arrives, a pod leaves, another allocator allocates.
STEPS = 12


def _node_specs() -> st.SearchStrategy[list[clusterkit.NodeSpec]]:
    def one(i: int) -> st.SearchStrategy[clusterkit.NodeSpec]:
        name = f"n{i}"
        drasat = fleet.node_cases(name, max_gpus=3).map(
            lambda case: clusterkit.NodeSpec(name, drasat=case)
        )
        nvidia = st.sampled_from(clusterkit.NVIDIA_KINDS).map(
            lambda kind: clusterkit.NodeSpec(name, nvidia=kind)
        )
        return st.one_of(drasat, nvidia)

    return st.integers(2, 3).flatmap(lambda n: st.tuples(*(one(i) for i in range(n)))).map(list)


class Sequences(RuleBasedStateMachine):
    """One cluster, one controller, many steps; the checks after each (see the top)."""

    oracle: ClassVar[Oracle]

    def __init__(self) -> None:
        super().__init__()
        self.cluster: clusterkit.Cluster | None = None
        #: Pods of the sequence still there: pod name -> its claims' names.
        self.pods: dict[str, list[str]] = {}
        #: claim uid -> the allocation (JSON) found valid: checked again only when it changes.
        self.valid: dict[str, str] = {}
        #: Whether a pod upstream places only through a known difference is let wait (the
        #: exact tests of those differences turn it off).
        self.known_differences = True

    @property
    def _cluster(self) -> clusterkit.Cluster:
        assert self.cluster is not None
        return self.cluster

    @initialize(nodes=_node_specs())
    def build(self, nodes: list[clusterkit.NodeSpec]) -> None:
        self.cluster = clusterkit.Cluster(nodes)

    def teardown(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            SEEN["sequences"] += 1

    def _claims(self, data: st.DataObject, many: int, *, drasats: bool = True) -> list[Obj]:
        """Claims for one driver's classes (one the cluster has nodes of), each drawn again (up
        to 5 times) while it runs into a known difference or (`drasats`) tolerates drasat's
        allocator taint (drasat allocates such a claim too, `v1inputs.allocates`, but these
        sequences give it only to the other allocator, as kube-scheduler takes it for an
        ungated pod); none if one still does, and the step is skipped (a filter would end the
        whole sequence where it fails)."""
        drivers = {spec.drasat is not None for spec in self._cluster.nodes}
        nvidia = data.draw(st.sampled_from(sorted(drivers)), label="drasat's classes") is False
        words = claimgen.NVIDIA if nvidia else claimgen.DRASAT
        strategy = st.one_of(claimgen.simple_claims(words=words), claimgen.claims(words=words))
        tainted = self._cluster.tainted

        def wanted(claim: Obj) -> bool:
            if known.difference(claim, tainted, held=True) is not None:
                return False
            return not drasats or not v1inputs.tolerates_allocator_taint(claim)

        out = []
        for i in range(many):
            for _ in range(5):
                claim = data.draw(strategy, label=f"claim {i}")
                if wanted(claim):
                    out.append(claim)
                    break
                SEEN["claims drawn again (a known difference, or kube-scheduler's)"] += 1
            else:
                SEEN["steps skipped"] += 1
                return []
        return out

    @rule(data=st.data(), many=st.sampled_from([1, 1, 1, 2]))
    def arrive(self, data: st.DataObject, many: int) -> None:
        """A pod with one or two claims arrives; the controller's cycles run."""
        claims = self._claims(data, many)
        if claims:
            self.pod_arrives(claims)

    def pod_arrives(self, claims: list[Obj]) -> str:
        pod = self._cluster.arrive(claims)
        self.pods[pod] = [f"{pod}-c{i}" for i in range(len(claims))]
        self._cluster.run()
        SEEN["pods arrived"] += 1
        return pod

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A pod, placed or waiting, and its claims are deleted; the controller's cycles release
        them."""
        self._leave(data.draw(st.sampled_from(sorted(self.pods)), label="pod leaving"))

    @precondition(lambda self: bool(self._placed()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """A placed pod finishes: it and its claims are deleted (so that sequences free devices
        as often as they take them, and the next pods are placed again on what was freed)."""
        self._leave(data.draw(st.sampled_from(self._placed()), label="pod finishing"))

    def _placed(self) -> list[str]:
        if self.cluster is None:
            return []
        allocated = {
            c["metadata"]["name"]
            for c in self.cluster.claims().values()
            if clusterkit.allocation(c)
        }
        return sorted(p for p, names in self.pods.items() if set(names) <= allocated)

    def _leave(self, pod: str) -> None:
        """The pod leaves; its claims must be gone after the step's cycles."""
        names = self.pods.pop(pod)
        self._cluster.leave(pod)
        self._cluster.run()
        left = {c["metadata"]["name"] for c in self._cluster.claims().values()}
        kept = sorted(set(names) & left)
        SEEN["pods left"] += 1
        assert not kept, (
            f"claims {kept} of the deleted pod {pod} were not released within "
            f"{clusterkit.MAX_CYCLES} cycles"
        )

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data())
    def allocated_by_another(self, data: st.DataObject) -> None:
        """Another allocator (upstream's, as kube-scheduler) allocates a pod's claims on the
        first node where they fit beside every allocation, and binds the pod there."""
        claims = self._claims(data, 1, drasats=False)
        if claims:
            self.another_allocates(claims)

    def another_allocates(self, claims: list[Obj]) -> str | None:
        cluster = self._cluster
        state = [clusterkit.allocation(c) for c in cluster.claims().values()]
        held = [a for a in state if a is not None]
        slices, classes = cluster.slices, cluster.classes
        named = [
            dict(c, metadata={"name": "x", "namespace": "default", "uid": "x"}) for c in claims
        ]
        answers = self.oracle.ask_many(
            [
                oraclekit.pod_request(spec.name, slices, classes, named, held)
                for spec in cluster.nodes
            ]
        )
        for spec, answer in zip(cluster.nodes, answers, strict=True):
            if answer.get("allocated"):
                pod = cluster.bound_elsewhere(spec.name, claims, answer["allocations"])
                self.pods[pod] = [f"{pod}-c{i}" for i in range(len(claims))]
                SEEN["allocated by another"] += 1
                cluster.run()
                return pod
        cluster.run()
        return None

    # -- the checks ------------------------------------------------------------------------------

    def check(self) -> None:
        """Both checks (what the state machine runs after every step)."""
        self.every_allocation_is_one_upstream_accepts()
        self.no_pod_waits_that_upstream_places()

    @invariant()
    def every_allocation_is_one_upstream_accepts(self) -> None:
        if self.cluster is None:
            return
        claims = self.cluster.claims()
        allocated = {u: a for u, c in claims.items() if (a := clusterkit.allocation(c))}
        todo = []
        for uid, found in allocated.items():
            text = json.dumps(found, sort_keys=True)
            if self.valid.get(uid) != text:
                todo.append((uid, text))
        if not todo:
            return
        slices, classes = self.cluster.slices, self.cluster.classes
        requests = []
        for uid, _ in todo:
            claim = claims[uid]
            others = [a for u, a in allocated.items() if u != uid]
            node = clusterkit.node_of(claim) or ""
            requests.append(
                oraclekit.validate_request(
                    node, slices, classes, clusterkit.spec_only(claim), allocated[uid], others
                )
            )
        for (uid, text), verdict in zip(todo, self.oracle.ask_many(requests), strict=True):
            claim = claims[uid]
            assert verdict.get("valid"), (
                f"{claim['metadata']['name']}'s allocation is not one upstream accepts beside "
                f"the {len(allocated) - 1} others: {verdict.get('reason')}\n"
                f"claim: {json.dumps(claim['spec'])}\nallocation: {text}\n"
                f"nodes: {'; '.join(s.describe() for s in self.cluster.nodes)}"
            )
            self.valid[uid] = text
            SEEN["allocations validated"] += 1
        self.valid = {u: t for u, t in self.valid.items() if u in allocated}

    @invariant()
    def no_pod_waits_that_upstream_places(self) -> None:
        if self.cluster is None:
            return
        claims = {c["metadata"]["name"]: c for c in self.cluster.claims().values()}
        held = [a for c in claims.values() if (a := clusterkit.allocation(c))]
        slices, classes = self.cluster.slices, self.cluster.classes
        asked: list[tuple[str, str]] = []
        requests = []
        for pod, names in sorted(self.pods.items()):
            mine = [claims[n] for n in names if n in claims]
            waiting = [clusterkit.spec_only(c) for c in mine if not clusterkit.allocation(c)]
            if not waiting:
                continue
            pinned = {clusterkit.node_of(c) for c in mine if clusterkit.allocation(c)}
            for spec in self.cluster.nodes:
                if pinned and spec.name not in pinned:
                    continue
                asked.append((pod, spec.name))
                requests.append(oraclekit.pod_request(spec.name, slices, classes, waiting, held))
        SEEN["waiting pods x nodes asked"] += len(asked)
        answers = self.oracle.ask_many(requests)
        found = [
            (a, r, x)
            for a, r, x in zip(asked, requests, answers, strict=True)
            if x.get("allocated")
        ]
        if found and self.known_differences:
            found = self._beyond_known(found, held)
        for (pod, node), _, answer in found[:1]:
            raise AssertionError(
                f"drasat left pod {pod} waiting; upstream places it on {node} beside the "
                f"{len(held)} allocations: {json.dumps(answer.get('allocations'))}\n"
                f"claims: {[json.dumps(claims[n]['spec']) for n in self.pods[pod]]}\n"
                f"nodes: {'; '.join(s.describe() for s in self.cluster.nodes)}\n"
                f"controller: {self.cluster.controller.explanations.get('default/' + pod)}"
            )

    def _beyond_known(
        self, found: list[tuple[tuple[str, str], Obj, Obj]], held: list[Obj]
    ) -> list[tuple[tuple[str, str], Obj, Obj]]:
        """The pods upstream places that it still places with the known differences that depend
        on the cluster's state applied (each counted in SEEN where it alone explains a pod):

        - drasat gives a whole GPU in MIG mode only to a request that asks for MIG mode (never
          on NVIDIA's slices, which publish no `migEnabled`); upstream to any: those GPUs are
          tainted (`clusterkit.unusable`: matched, not allocated), unless allocated already,
          and the requests that ask for MIG mode tolerate the taint
          (`known.mig_mode_tolerated`)."""
        assert self.cluster is not None
        whole = clusterkit.mig_mode_gpus(self.cluster.slices) - clusterkit.devices_of(held)
        reduced = clusterkit.unusable(self.cluster.slices, whole)

        def shaped(request: Obj) -> Obj:
            claims = [known.mig_mode_tolerated(c, clusterkit.UNUSABLE) for c in request["claims"]]
            return dict(request, slices=reduced, claims=claims)

        answers = self.oracle.ask_many([shaped(r) for _, r, _ in found])
        out = []
        for item, answer in zip(found, answers, strict=True):
            if answer.get("allocated"):
                out.append(item)
            else:
                SEEN["known: a whole GPU in MIG mode"] += 1
        return out


# A failure replays sequences while hypothesis shrinks it (minutes): the minimal case is worth it.
# The long run has no limit (a marker's timeout wins over pytest's --timeout).
@pytest.mark.timeout(0 if "DRASAT_ORACLE_SEQUENCES" in os.environ else 900)
def test_sequences_of_claims_agree_with_upstream_beside_every_allocation(oracle: Oracle) -> None:
    Sequences.oracle = oracle
    SEEN.clear()
    try:
        _run()
    finally:
        print(f"stateful oracle: {dict(SEEN)}")


def _run() -> None:
    run_state_machine_as_test(
        Sequences,
        settings=settings(
            max_examples=oraclekit.sequences(25),
            stateful_step_count=STEPS,
            deadline=None,
            # No explain phase: tracing every line of a sequence (the controller's included)
            # makes each replay several times slower.
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
            ],
        ),
    )
