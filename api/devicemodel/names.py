"""Device and counter names: the one codec that builds and parses them.

The names follow NVIDIA's current DRA driver, so a name carries what prepare needs:

- `gpu-<minor>`: a whole GPU;
- `gpu-<minor>-mig-<profile>-<profileID>-<start>`: a MIG placement (dynamic MIG), the profile
  made DNS-safe (`1g.10gb` -> `1g10gb` as in KEP 4815's example, `1g.5gb+me` -> `1g5gbme`) and
  the GPU-instance profile id
  from NVML, which keeps two profiles apart that only differ in size (A100-40GB's `1g.10gb` is
  id 15 and 2 memory slices, A100-80GB's is id 19 and one);
- `cpu-fallback`: the node's virtual device for "no GPU";
- `gpu-<minor>-counter-set` and its counters `memory-slice-<i>` and `profile-<id>-instances`
  (KEP 4815).

`parse` is the inverse of the builders: `parse(mig_name(...))` gives back minor, profile id and
start (the profile's own spelling is not recoverable from its DNS-safe form: prepare looks it up
by id). This is a purely computational module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The virtual device of a node that stands for "run without a GPU".
CPU_FALLBACK = "cpu-fallback"

#: Device names are DNS labels (RFC 1123): at most 63 characters.
MAX_NAME = 63

_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")
_GPU = re.compile(r"^gpu-(0|[1-9][0-9]*)$")
_MIG = re.compile(r"^gpu-(0|[1-9][0-9]*)-mig-([a-z0-9](?:[a-z0-9-]*[a-z0-9])?)-(\d+)-(\d+)$")


@dataclass(frozen=True)
class GpuName:
    """A whole GPU."""

    minor: int


@dataclass(frozen=True)
class MigName:
    """A MIG placement: profile (DNS-safe), GPU-instance profile id and first memory slice."""

    minor: int
    profile: str
    profile_id: int
    start: int


@dataclass(frozen=True)
class FallbackName:
    """The node's `cpu-fallback` device."""


DeviceName = GpuName | MigName | FallbackName


def dns_safe(profile: str) -> str:
    """A MIG profile name as part of a DNS label: lower case, `.` and `+` dropped (`1g.10gb` ->
    `1g10gb`, `1g.5gb+me` -> `1g5gbme`), other odd characters as `-`."""
    text = profile.lower().replace(".", "").replace("+", "")
    return _DNS_UNSAFE.sub("-", text).strip("-") or "profile"


def gpu_name(minor: int) -> str:
    """`gpu-<minor>`: a whole GPU."""
    return f"gpu-{minor}"


def mig_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """`gpu-<minor>-mig-<profile>-<profileID>-<start>`: one placement of one MIG profile."""
    name = f"gpu-{minor}-mig-{dns_safe(profile)}-{profile_id}-{start}"
    if len(name) > MAX_NAME:
        raise ValueError(f"MIG device name {name!r} is longer than {MAX_NAME} characters")
    return name


def counter_set_name(minor: int) -> str:
    """`gpu-<minor>-counter-set`: the counters a MIG-enabled GPU shares among its partitions."""
    return f"{gpu_name(minor)}-counter-set"


def memory_slice_counter(index: int) -> str:
    """`memory-slice-<i>`: one memory slice of a GPU (value 1)."""
    return f"memory-slice-{index}"


def instances_counter(profile_id: int) -> str:
    """`profile-<id>-instances`: how many more instances of a capped profile the GPU allows."""
    return f"profile-{profile_id}-instances"


def parse(name: str) -> DeviceName | None:
    """The device a published name stands for; None when it is not one of drasat's names."""
    if name == CPU_FALLBACK:
        return FallbackName()
    if match := _GPU.match(name):
        return GpuName(int(match.group(1)))
    if match := _MIG.match(name):
        return MigName(
            minor=int(match.group(1)),
            profile=match.group(2),
            profile_id=int(match.group(3)),
            start=int(match.group(4)),
        )
    return None
