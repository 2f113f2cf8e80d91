"""API models: defaults as NVIDIA's, strict fields, nested selectors, both API groups."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from drasat.api import catalog
from drasat.api.claims import GpuClaimParametersSpec, MigDeviceClaimParametersSpec
from drasat.api.inputerrors import describe_validation_error
from drasat.api.nas import GpuInfo, NodeAllocationState
from drasat.api.quantity import base_units, to_bytes
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import SharingStrategy


def _gpu(**overrides: object) -> GpuInfo:
    base: dict[str, object] = {
        "index": 0,
        "uuid": "GPU-0",
        "memoryBytes": 40 * 2**30,
        "productName": "NVIDIA A100-SXM4-40GB",
        "architecture": "Ampere",
        "cudaComputeCapability": "8.0",
        "driverVersion": "550.54.15",
        "cudaDriverVersion": "12.4",
    }
    base.update(overrides)
    return GpuInfo.model_validate(base)


def test_gpu_claim_defaults_match_nvidia() -> None:
    spec = GpuClaimParametersSpec()
    assert spec.count == 1
    assert spec.sharing is None
    assert spec.optional is False


def test_unknown_field_is_rejected_with_its_path() -> None:
    with pytest.raises(ValidationError) as info:
        GpuClaimParametersSpec.model_validate({"count": 1, "sharng": {}})
    assert describe_validation_error(info.value, prefix=["spec"]) == "spec.sharng: unknown field"


def test_count_below_one_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        GpuClaimParametersSpec.model_validate({"count": 0})
    assert "spec.count" in describe_validation_error(info.value, prefix=["spec"])


def test_selectors_nest_and_match() -> None:
    selector = GpuSelector.model_validate(
        {
            "andExpression": [
                {"productName": "*a100*"},
                {
                    "orExpression": [
                        {"memory": {"value": "40Gi", "operator": "GreaterThanOrEqualTo"}},
                        {"cudaComputeCapability": {"value": "9.0", "operator": "Equals"}},
                    ]
                },
            ]
        }
    )
    assert selector.matches(_gpu())
    assert not selector.matches(_gpu(memoryBytes=16 * 2**30))
    assert (
        selector.describe()
        == "(productName=*a100* and (memory>=40Gi or cudaComputeCapability=9.0))"
    )


def test_selector_holds_exactly_one_field() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        GpuSelector.model_validate({"productName": "*", "index": 0})


def test_version_compare_is_numeric() -> None:
    newer = GpuSelector.model_validate(
        {"driverVersion": {"value": "535.9", "operator": "GreaterThan"}}
    )
    assert newer.matches(_gpu(driverVersion="535.104.05"))


def test_mig_claim_needs_profile_or_needs() -> None:
    assert MigDeviceClaimParametersSpec.model_validate({"profile": "1g.5gb"}).profile == "1g.5gb"
    assert MigDeviceClaimParametersSpec.model_validate({"memory": "10Gi"}).memory == "10Gi"
    with pytest.raises(ValidationError):
        MigDeviceClaimParametersSpec.model_validate({})
    with pytest.raises(ValidationError):
        MigDeviceClaimParametersSpec.model_validate({"profile": "1g.5gb", "computeSlices": 1})


def test_quantities() -> None:
    assert to_bytes("40Gi") == 40 * 2**30
    assert to_bytes("5G") == 5 * 10**9
    assert to_bytes(123) == 123
    with pytest.raises(ValueError):
        to_bytes("forty")


def test_example_nas_parses(shared_dir: object) -> None:
    import pathlib

    import yaml

    path = pathlib.Path(str(shared_dir)) / "examples" / "nodeallocationstate.yaml"
    if not path.exists():
        pytest.skip("shared examples not present")
    nas = NodeAllocationState.model_validate(yaml.safe_load(path.read_text()))
    assert nas.status is not None and nas.status.value == "Ready"
    assert len(nas.spec.gpus()) == 2
    claim = nas.spec.allocatedClaims["5b0a6c1e-1111-4a6f-9f0e-000000000001"]
    assert claim.gpu is not None and claim.gpu.sharing is not None
    assert claim.gpu.sharing.strategy is SharingStrategy.TimeSlicing


def test_catalog_lookups() -> None:
    a100 = catalog.find_product("A100-40GB")
    assert a100 is not None and a100.profile("3g.20gb") is not None
    assert catalog.product_for_name("NVIDIA A100-SXM4-40GB") is a100
    h200 = catalog.find_product("H200")
    assert h200 is not None and h200.profile("7g.141gb") is not None


def test_quantities_over_64_bits() -> None:
    """The API server accepts any well-formed quantity (`10E` is 10**19): `base_units` reads
    it, `to_bytes` (what the solver counts) refuses it."""
    assert base_units("10E") == 10**19
    with pytest.raises(ValueError, match="64 bits"):
        to_bytes("10E")
    with pytest.raises(ValueError, match="over 100 digits"):
        base_units("1e999999")
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        base_units("forty")
