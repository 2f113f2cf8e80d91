"""MIG placement cost variants on the MIG churn events: a study, not the product's placement.

    python -m bench.mig_churn_variants [--variants base,tenants,...] [--seeds 1,2,3,4,5]
                                       [--load 1.2] [--gpus 64] [--events 3000]

Each variant is a pure-Python copy of drasat's online MIG decision (the shipped default
objective: 2 per untouched GPU of the node, 2 for opening an untouched GPU, 4 per memory slice
of every free (profile, placement) the new instance blocks, 1 per slice of MIG waste by needs;
the cheapest (GPU, placement) in node and GPU order wins) with one change, run on the events of
`bench.mig_churn` (by-profile claims on their product). It exists to measure cost changes quickly
before porting one to the solver; `base` is the copy without the "+me" profiles (the bench never
asks for them), `shipped` counts them as the solver does. Figures from here are the variants',
never drasat's: drasat's come from `bench.mig_churn`, through `drasat.solver.solve`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from bench import mig_churn
from drasat.api import catalog

#: (profile, start): one placement a product offers.
Option = tuple[catalog.MigProfile, int]


def _options(product: str, media: bool) -> list[Option]:
    found = catalog.find_product(product)
    assert found is not None
    profiles = [p for p in found.mig_profiles if media or not p.media_extensions]
    return [(p, s) for p in profiles for s in p.starts]


def _occupied(gpu: mig_churn.Gpu) -> set[int]:
    return {t for _, start, size in gpu.held.values() for t in range(start, start + size)}


#: The default mix's profile weights by (product, profile name): the "oracle" mix.
_MIX = {
    (product, mig_churn._profiles(product)[index].name): weight
    for index, weight in mig_churn.PROFILE_MIX
    for product in mig_churn.PRODUCTS
}


class Variant(mig_churn.Policy):
    """The copy of the default decision rule; subclasses change one part of it."""

    name = "base"
    media = False  # count the "+me" profiles' windows (as the solver does)

    def __init__(self, gpus: list[mig_churn.Gpu]) -> None:
        super().__init__(gpus)
        self.held_counts: dict[tuple[str, str], int] = {}

    def profile_weight(self, profile: catalog.MigProfile, product: str) -> float:
        """What blocking one free placement of the profile costs (before the weight 4)."""
        return profile.memory_slices

    def extra(self, gpu: mig_churn.Gpu, occupied: set[int], profile: catalog.MigProfile) -> float:
        return 0.0

    def node_weight(self) -> int:
        return 2

    def _blocked(self, gpu: mig_churn.Gpu, occupied: set[int], start: int, size: int) -> float:
        windows: dict[tuple[int, int], float] = {}
        for p, s in _options(gpu.product, self.media):
            key = (s, p.memory_slices)
            windows[key] = windows.get(key, 0.0) + self.profile_weight(p, gpu.product)
        total = 0.0
        for (s, z), weight in windows.items():
            if any(t in occupied for t in range(s, s + z)):
                continue
            if s < start + size and start < s + z:
                total += weight
        return total

    def arrive(self, request: mig_churn.Request) -> bool:
        self.held_counts = {}
        for g in self.gpus:
            for profile_name, _, _ in g.held.values():
                key = (g.product, profile_name)
                self.held_counts[key] = self.held_counts.get(key, 0) + 1
        best: tuple[float, mig_churn.Gpu, catalog.MigProfile, int] | None = None
        nodes: dict[str, list[mig_churn.Gpu]] = {}
        for g in self.gpus:
            nodes.setdefault(g.node, []).append(g)
        for gpus in nodes.values():
            free = sum(1 for g in gpus if not g.held)
            for g in gpus:
                fitting = [
                    p for p in mig_churn._profiles(g.product) if request.covers(p, g.product)
                ]
                if not fitting:
                    continue
                occupied = _occupied(g)
                smallest = min(q.memory_slices + q.compute_slices for q in fitting)
                for p, s in _options(g.product, media=False):
                    if p not in fitting or any(
                        t in occupied for t in range(s, s + p.memory_slices)
                    ):
                        continue
                    cost = self.node_weight() * free + (2.0 if not occupied else 0.0)
                    cost += 4 * self._blocked(g, occupied, s, p.memory_slices)
                    if request.profile is None:
                        cost += p.memory_slices + p.compute_slices - smallest
                    cost += self.extra(g, occupied, p)
                    if best is None or cost < best[0]:
                        best = (cost, g, p, s)
        if best is None:
            return False
        _, g, p, s = best
        self.take(request, g, p.name, s, p.memory_slices)
        return True


class Shipped(Variant):
    name = "shipped"
    media = True


class MixWeights(Variant):
    """Blocked placements weighted by the default mix's profile weights (known in advance)."""

    name = "mix-weights"

    def profile_weight(self, profile: catalog.MigProfile, product: str) -> float:
        return _MIX.get((product, profile.name), 0) * profile.memory_slices / 10


class HeldWeights(Variant):
    """Blocked placements weighted by 1 + the instances of the profile held now (what an online
    solver can see of the mix)."""

    name = "held-weights"

    def profile_weight(self, profile: catalog.MigProfile, product: str) -> float:
        held = self.held_counts.get((product, profile.name), 0)
        return (1 + held) * profile.memory_slices / 10


class Tenants(Variant):
    """-4 per instance already on the GPU: keep few-tenant GPUs draining towards a 7g."""

    name = "tenants"

    def extra(self, gpu: mig_churn.Gpu, occupied: set[int], profile: catalog.MigProfile) -> float:
        return -4.0 * len(gpu.held)


class Tenants16(Variant):
    name = "tenants16"

    def extra(self, gpu: mig_churn.Gpu, occupied: set[int], profile: catalog.MigProfile) -> float:
        return -16.0 * len(gpu.held)


class NoNode(Variant):
    """Without the node-level binpack term."""

    name = "no-node-term"

    def node_weight(self) -> int:
        return 0


class BestFit(Variant):
    """+2 per memory slice left free on the GPU: best fit on top of the rule."""

    name = "best-fit"

    def extra(self, gpu: mig_churn.Gpu, occupied: set[int], profile: catalog.MigProfile) -> float:
        return 2.0 * (mig_churn.SLICES - len(occupied) - profile.memory_slices)


class PureBestFit(Variant):
    """Best fit first (1000 per slice left free), the rule only among equally full GPUs."""

    name = "pure-best-fit"

    def extra(self, gpu: mig_churn.Gpu, occupied: set[int], profile: catalog.MigProfile) -> float:
        return 1000.0 * (mig_churn.SLICES - len(occupied) - profile.memory_slices)


_ALL: tuple[type[Variant], ...] = (
    Variant,
    Shipped,
    MixWeights,
    HeldWeights,
    Tenants,
    Tenants16,
    NoNode,
    BestFit,
    PureBestFit,
)
VARIANTS: dict[str, type[mig_churn.Policy]] = {v.name: v for v in _ALL}


def accepted(variant: str, requests: Sequence[mig_churn.Request], gpus: int) -> int:
    """The claims the variant accepts from the events (the bench's replay loop)."""
    mig_churn.POLICIES[variant] = VARIANTS[variant]
    try:
        return mig_churn.run(variant, requests, gpus).accepted
    finally:
        del mig_churn.POLICIES[variant]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mig_churn_variants", description=__doc__)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--load", type=float, default=1.2)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    events = {s: mig_churn.events(args.events, s, args.gpus, args.load) for s in seeds}
    print("| variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |")
    print("|" + "---|" * (len(seeds) + 2))
    for name in args.variants.split(","):
        started = time.perf_counter()
        counts = [accepted(name, events[s], args.gpus) for s in seeds]
        mean = sum(counts) / len(counts)
        print(f"| {name} | " + " | ".join(map(str, counts)) + f" | {mean:.1f} |", flush=True)
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
