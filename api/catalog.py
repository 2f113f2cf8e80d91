"""Hardware catalog: GPU products and their MIG profiles.

Used to expand a compact cluster description into NodeAllocationState objects and by the simulated
NVML fleet. Real nodes report their own values through NVML; these are the published ones.
Placements are in memory-slice units (`memorySlices` per GPU: 8 on A100/H100/H200, 4 on A30).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

GiB = 2**30


@dataclass(frozen=True)
class MigProfile:
    name: str  # e.g. "3g.20gb"
    gi_profile_id: int  # `nvidia-smi mig -lgip` id
    compute_slices: int
    memory_slices: int  # placement size
    memory_bytes: int
    starts: tuple[int, ...]  # possible placement starts
    media_extensions: bool = False  # "+me": at most one per GPU

    @property
    def placements(self) -> tuple[tuple[int, int], ...]:
        return tuple((s, self.memory_slices) for s in self.starts)


@dataclass(frozen=True)
class Product:
    key: str  # short catalog name, e.g. "A100-40GB"
    product_name: str  # as NVML reports it
    memory_bytes: int
    architecture: str
    compute_capability: str
    brand: str = "Nvidia"
    memory_slices: int = 0  # 0: no MIG
    compute_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = field(default=())
    aliases: tuple[str, ...] = field(default=())

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _eight_slice_profiles(gb1: int, gb1x2: int, gb3: int, gb7: int) -> tuple[MigProfile, ...]:
    """The seven A100/H100/H200 profiles; memory per profile from the product's published names."""
    return (
        MigProfile(f"1g.{gb1}gb", 19, 1, 1, gb1 * GiB, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile(f"1g.{gb1}gb+me", 20, 1, 1, gb1 * GiB, (0, 1, 2, 3, 4, 5, 6), True),
        MigProfile(f"1g.{gb1x2}gb", 15, 1, 2, gb1x2 * GiB, (0, 2, 4, 6)),
        MigProfile(f"2g.{gb1x2}gb", 14, 2, 2, gb1x2 * GiB, (0, 2, 4)),
        MigProfile(f"3g.{gb3}gb", 9, 3, 4, gb3 * GiB, (0, 4)),
        MigProfile(f"4g.{gb3}gb", 5, 4, 4, gb3 * GiB, (0,)),
        MigProfile(f"7g.{gb7}gb", 0, 7, 8, gb7 * GiB, (0,)),
    )


PRODUCTS: tuple[Product, ...] = (
    Product(
        "A100-40GB",
        "NVIDIA A100-SXM4-40GB",
        40 * GiB,
        "Ampere",
        "8.0",
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_profiles(5, 10, 20, 40),
        aliases=("A100", "A100-SXM4-40GB", "A100-PCIE-40GB"),
    ),
    Product(
        "A100-80GB",
        "NVIDIA A100-SXM4-80GB",
        80 * GiB,
        "Ampere",
        "8.0",
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_profiles(10, 20, 40, 80),
        aliases=("A100-SXM4-80GB", "A100-PCIE-80GB"),
    ),
    Product(
        "H100-80GB",
        "NVIDIA H100 80GB HBM3",
        80 * GiB,
        "Hopper",
        "9.0",
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_profiles(10, 20, 40, 80),
        aliases=("H100", "H100-SXM5-80GB"),
    ),
    Product(
        "H200-141GB",
        "NVIDIA H200",
        141 * GiB,
        "Hopper",
        "9.0",
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_profiles(18, 35, 71, 141),
        aliases=("H200",),
    ),
    Product(
        "A30-24GB",
        "NVIDIA A30",
        24 * GiB,
        "Ampere",
        "8.0",
        memory_slices=4,
        compute_slices=4,
        mig_profiles=(
            MigProfile("1g.6gb", 14, 1, 1, 6 * GiB, (0, 1, 2, 3)),
            MigProfile("1g.6gb+me", 21, 1, 1, 6 * GiB, (0, 1, 2, 3), True),
            MigProfile("2g.12gb", 5, 2, 2, 12 * GiB, (0, 2)),
            MigProfile("2g.12gb+me", 6, 2, 2, 12 * GiB, (0, 2), True),
            MigProfile("4g.24gb", 0, 4, 4, 24 * GiB, (0,)),
        ),
        aliases=("A30",),
    ),
    Product("T4", "Tesla T4", 15 * GiB, "Turing", "7.5", aliases=("Tesla-T4",)),
    Product("L4", "NVIDIA L4", 24 * GiB, "Ada Lovelace", "8.9"),
    Product("V100-16GB", "Tesla V100-SXM2-16GB", 16 * GiB, "Volta", "7.0", aliases=("V100M16",)),
    Product("V100-32GB", "Tesla V100-SXM2-32GB", 32 * GiB, "Volta", "7.0", aliases=("V100M32",)),
)


def find_product(name: str) -> Product | None:
    """Look a product up by catalog key, alias or NVML product name (case-insensitive)."""
    wanted = name.strip().lower()
    for product in PRODUCTS:
        names = (product.key, product.product_name, *product.aliases)
        if wanted in (n.lower() for n in names):
            return product
    return None


def product_for_name(product_name: str) -> Product | None:
    """The catalog entry of a GPU as NVML names it (exact, then by alias glob)."""
    found = find_product(product_name)
    if found is not None:
        return found
    lowered = product_name.lower()
    for product in PRODUCTS:
        if any(fnmatch.fnmatchcase(lowered, f"*{a.lower()}*") for a in product.aliases):
            return product
    return None
