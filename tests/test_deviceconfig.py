"""Who may set what in opaque device configuration (issue 23 item 1): `lifecycle` is the cluster's
(a DeviceClass config), never a claim's own, in the node plugin's prepare and in the NAS ledger the
v1 controller writes (`drasat.v1.results.with_configs`), which both merge by `for_request`."""

from __future__ import annotations

from typing import Any

import pytest

from drasat.api import deviceconfig
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.api.sharing import GpuShare
from drasat.v1 import results

POWER = {"action": "setPowerLimitWatts", "value": 200}
DRASAT = {"apiVersion": deviceconfig.DRASAT_CONFIG_API_VERSION, "kind": "GpuConfig"}


def _item(parameters: dict[str, Any], source: str | None = None, **more: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"opaque": {"driver": DRIVER_NAME, "parameters": parameters}, **more}
    if source is not None:
        item["source"] = source
    return item


def test_a_claims_own_lifecycle_is_refused_naming_the_entry() -> None:
    items = [
        _item({**DRASAT, "lifecycle": [POWER]}, "FromClass"),
        {"opaque": {"driver": "other.example.com", "parameters": {"lifecycle": [POWER]}}},
        _item({**DRASAT, "lifecycle": [POWER]}, "FromClaim"),
    ]
    (refusal,) = deviceconfig.refusals(deviceconfig.applied(items, DRIVER_NAME))
    assert refusal.startswith(
        "status.allocation.devices.config[2] (source FromClaim): opaque.parameters.lifecycle: "
    )
    assert "the cluster's to set" in refusal


def test_the_claims_spec_is_checked_the_same_way() -> None:
    # what the allocator can check before it allocates: the claim's spec.devices.config
    spec = [_item({**DRASAT, "share": {"compute": 10}}), _item({**DRASAT, "lifecycle": [POWER]})]
    applied = deviceconfig.applied(spec, DRIVER_NAME, path="spec.devices.config")
    (refusal,) = deviceconfig.refusals(applied)
    assert refusal.startswith("spec.devices.config[1]: opaque.parameters.lifecycle: ")


@pytest.mark.parametrize(
    "parameters",
    [
        {**DRASAT, "sharing": {"strategy": "MPS"}, "share": {"compute": 20}},
        {**DRASAT, "lifecycle": []},  # nothing asked
        {
            "apiVersion": deviceconfig.NVIDIA_CONFIG_API_VERSION,
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing"},
        },
    ],
)
def test_a_claims_own_sharing_and_share_are_its_own(parameters: dict[str, Any]) -> None:
    applied = deviceconfig.applied([_item(parameters, "FromClaim")], DRIVER_NAME)
    assert deviceconfig.refusals(applied) == []


def test_for_request_takes_lifecycle_from_the_class_only() -> None:
    items = [
        _item({**DRASAT, "lifecycle": [POWER]}, "FromClaim"),
        _item({**DRASAT, "lifecycle": [{"action": "lockGpuClocksMHz", "value": 900}]}, "FromClass"),
        _item({**DRASAT, "share": {"compute": 30}}, "FromClaim"),
    ]
    merged = deviceconfig.for_request(deviceconfig.applied(items, DRIVER_NAME), "gpu")
    assert [step.dump() for step in merged.lifecycle or []] == [
        {"action": "lockGpuClocksMHz", "value": 900}
    ]
    assert merged.share == GpuShare(compute=30)
    only_claim = deviceconfig.applied(items[:1], DRIVER_NAME)
    assert deviceconfig.for_request(only_claim, "gpu").lifecycle is None


def test_the_nas_ledger_never_shows_a_claims_own_lifecycle() -> None:
    entry = AllocatedDevices(
        claimInfo=ClaimInfo(namespace="n", name="c", uid="u"),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid="GPU-a")]),
    )
    claim_only = [_item({**DRASAT, "lifecycle": [POWER]}, "FromClaim")]
    names = {"u/gpu": "gpu"}
    assert results.with_configs({"u/gpu": entry}, claim_only, names)["u/gpu"].lifecycle is None
    from_class = [_item({**DRASAT, "lifecycle": [POWER]}, "FromClass")]
    (step,) = results.with_configs({"u/gpu": entry}, from_class, names)["u/gpu"].lifecycle or []
    assert step.dump() == POWER
