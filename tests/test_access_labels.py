"""The SHARING labels: what a claim actually gets, read from its allocation (NAS entry).

The solver writes NVIDIA's default sharing (time-slicing, default slice) into every allocation
that names none, so a per-pod claim's entry says TimeSlicing: it must still read `exclusive`.
"""

from __future__ import annotations

import pytest

from drasat.api import access
from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.api.sharing import GpuShare, GpuSharing, default_sharing
from drasat.testbed.demoshow import sharing_text


def _entry(sharing: GpuSharing | None, share: GpuShare | None = None) -> AllocatedDevices:
    return AllocatedDevices(
        claimInfo=ClaimInfo(namespace="ns", name="c", uid="u"),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid="GPU-1")], sharing=sharing),
        share=share,
    )


def _sharing(**spec: object) -> GpuSharing:
    return GpuSharing.model_validate(spec)


@pytest.mark.parametrize(
    ("sharing", "share", "users", "label"),
    [
        (default_sharing(), None, 1, "exclusive"),
        (None, None, 1, "exclusive"),
        (default_sharing(), None, 2, "time-sliced (Default), 2 pods"),
        (_sharing(strategy="TimeSlicing", timeSlicingConfig={"timeSlice": "Long"}), None, 1,
         "time-sliced (Long)"),
        (_sharing(strategy="TimeSlicing", timeSlicingConfig={"interval": "Short"}), None, 3,
         "time-sliced (Short), 3 pods"),
        (_sharing(strategy="MPS"), None, 1, "MPS"),
        (_sharing(strategy="MPS"), None, 2, "MPS, 2 pods"),
        (_sharing(strategy="MPS"), GpuShare(compute=50, memory="8Gi"), 1, "share 50%/8Gi (MPS)"),
        (default_sharing(), GpuShare(compute=25), 1, "share 25% (time-sliced)"),
        (None, GpuShare(memory="4Gi"), 1, "share 4Gi (MPS)"),
    ],
)  # fmt: skip
def test_label(sharing: GpuSharing | None, share: GpuShare | None, users: int, label: str) -> None:
    assert access.label(sharing, share, users) == label
    assert sharing_text(_entry(sharing, share), users) == label


def test_a_per_pod_claim_of_the_demo_is_exclusive_not_time_slicing() -> None:
    text = sharing_text(_entry(default_sharing()), 1)
    assert text == "exclusive"
    assert "TimeSlicing" not in text
