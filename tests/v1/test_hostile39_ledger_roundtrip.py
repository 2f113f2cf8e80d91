"""Hostile review of the one NAS <-> solver translation (`drasat.v1.nasinventory`): an
allocatedClaims entry read into the solver's ledger and written back is the same entry, every
field kept (shares, sharing strategy and its config, init steps, optional, MIG placements)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api.nas import (
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    LifecycleStep,
    MigPlacement,
)
from drasat.api.sharing import GpuShare, GpuSharing, MpsConfig, SharingStrategy, TimeSlicingConfig
from drasat.v1 import nasinventory

_names = st.text("abcdef-0123", min_size=1, max_size=8)
_sharing = st.one_of(
    st.none(),
    st.builds(GpuSharing, strategy=st.sampled_from(list(SharingStrategy))),
    st.builds(
        GpuSharing,
        strategy=st.just(SharingStrategy.TimeSlicing),
        timeSlicingConfig=st.builds(TimeSlicingConfig),
    ),
    st.builds(
        GpuSharing,
        strategy=st.just(SharingStrategy.MPS),
        mpsConfig=st.builds(
            MpsConfig, defaultActiveThreadPercentage=st.one_of(st.none(), st.integers(1, 100))
        ),
    ),
)
_share = st.one_of(
    st.none(),
    st.builds(GpuShare, compute=st.integers(1, 100)),
    st.builds(
        GpuShare,
        compute=st.one_of(st.none(), st.integers(1, 100)),
        memory=st.sampled_from(["8Gi", "1500Mi", "10G"]),
    ),
)
_steps = st.one_of(
    st.none(),
    st.lists(
        st.builds(
            LifecycleStep,
            action=_names,
            value=st.one_of(st.none(), st.integers(0, 9), _names),
        ),
        min_size=1,
        max_size=3,
    ),
)
_placement = st.integers(0, 6).flatmap(
    lambda start: st.builds(MigPlacement, start=st.just(start), size=st.integers(1, 7 - start + 1))
)
_gpus = st.builds(
    AllocatedGpus,
    devices=st.lists(st.builds(AllocatedGpu, uuid=_names), max_size=3),
    sharing=_sharing,
)
_migs = st.builds(
    AllocatedMigDevices,
    devices=st.lists(
        st.builds(
            AllocatedMigDevice,
            profile=st.sampled_from(["1g.10gb", "3g.40gb", "1g.10gb+me"]),
            parentUUID=_names,
            placement=_placement,
        ),
        max_size=3,
    ),
    sharing=_sharing,
)


@st.composite
def _entries(draw: st.DrawFn) -> AllocatedDevices:
    mig = draw(st.booleans())
    return AllocatedDevices(
        claimInfo=ClaimInfo(namespace=draw(_names), name=draw(_names), uid=draw(_names)),
        gpu=None if mig else draw(_gpus),
        mig=draw(_migs) if mig else None,
        share=draw(_share),
        optional=draw(st.sampled_from([None, True])),
        lifecycle=draw(_steps),
    )


@settings(max_examples=300, deadline=None)
@given(_entries())
def test_an_entry_read_into_the_ledger_and_written_back_is_the_same_entry(
    entry: AllocatedDevices,
) -> None:
    back = nasinventory.entry_of(nasinventory.allocation_of(entry))
    assert back.model_dump(mode="json") == entry.model_dump(mode="json")
    # And read again, the same allocation (the ledger the next cycle holds).
    assert nasinventory.allocation_of(back) == nasinventory.allocation_of(entry)
