"""The name codec: what it builds, that parsing gives it back, and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drasat.api.devicemodel import names


@pytest.mark.parametrize(
    ("profile", "safe"),
    [
        ("1g.5gb", "1g5gb"),  # KEP 4815's spelling: dots dropped
        ("1g.5gb+me", "1g5gbme"),  # the media-extension variant stays apart from 1g.5gb
        ("7g.141gb", "7g141gb"),
        ("1g.10gb", "1g10gb"),
        ("Odd Name!", "odd-name"),  # anything else becomes a DNS-label character
    ],
)
def test_dns_safe_profile(profile: str, safe: str) -> None:
    assert names.dns_safe(profile) == safe


def test_names_of_each_kind() -> None:
    assert names.gpu_name(3) == "gpu-3"
    assert names.mig_name(0, "3g.20gb", 9, 4) == "gpu-0-mig-3g20gb-9-4"
    assert names.counter_set_name(12) == "gpu-12-counter-set"
    assert names.memory_slice_counter(7) == "memory-slice-7"
    assert names.CPU_FALLBACK == "cpu-fallback"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("gpu-0", names.GpuName(0)),
        ("gpu-17", names.GpuName(17)),
        ("gpu-1-mig-1g10gb-15-6", names.MigName(1, "1g10gb", 15, 6)),
        ("gpu-0-mig-1g5gbme-20-0", names.MigName(0, "1g5gbme", 20, 0)),
        ("cpu-fallback", names.FallbackName()),
        ("gpu-01", None),  # not how a minor is written
        ("gpu--1", None),
        ("gpu-0-counter-set", None),  # a counter set is no device
        ("gpu-0-mig--9-0", None),
        ("nvidia-0", None),
    ],
)
def test_parse(name: str, parsed: names.DeviceName | None) -> None:
    assert names.parse(name) == parsed


@given(
    minor=st.integers(0, 63),
    profile=st.from_regex(r"[1-7]g\.[0-9]{1,3}gb(\+me)?", fullmatch=True),
    profile_id=st.integers(0, 40),
    start=st.integers(0, 7),
)
def test_parse_inverts_mig_name(minor: int, profile: str, profile_id: int, start: int) -> None:
    built = names.mig_name(minor, profile, profile_id, start)
    assert names.parse(built) == names.MigName(minor, names.dns_safe(profile), profile_id, start)


def test_a_name_longer_than_a_dns_label_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 63"):
        names.mig_name(0, "x" * 60, 1, 0)
