"""drasat.v1.requests: a v1 claim read into requests and alternatives as written (classes,
selectors in order, counts, modes, capacity requests, constraints, configs), v1beta1 claims read
in the v1 shape, and every claim drasat cannot allocate as written refused with its field
path."""

from __future__ import annotations

from typing import Any

import pytest
from v1kit import CLASSES, FALLBACK, GPU, MIG, attr, claim, exactly

from drasat.v1 import requests
from drasat.v1.requests import ClaimError, read_claim

Obj = dict[str, Any]


# -- v1beta1 in the v1 shape -----------------------------------------------------------------------


def test_a_v1beta1_request_is_read_as_v1_exactly() -> None:
    selectors = [{"cel": {"expression": attr("index") + " == 0"}}]
    beta = {
        "devices": {
            "requests": [{"name": "gpu", "deviceClassName": GPU, "count": 2,
                          "selectors": selectors}],
            "constraints": [{"matchAttribute": "gpu.drasat.io/numaNode"}],
        },
        "other": 1,
    }  # fmt: skip
    assert requests.v1_spec(beta) == {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "count": 2,
                                                     "selectors": selectors}}],
            "constraints": [{"matchAttribute": "gpu.drasat.io/numaNode"}],
        },
        "other": 1,
    }  # fmt: skip


def test_a_v1_spec_is_read_unchanged() -> None:
    spec = claim("c", {"gpu": exactly(), "opt": {"firstAvailable": [
        {"name": "a", "deviceClassName": GPU}]}})["spec"]  # fmt: skip
    assert requests.v1_spec(spec) == spec
    assert requests.v1_spec({}) == {"devices": {}}


def test_a_v1beta1_claim_allocates_like_its_v1_twin() -> None:
    beta = claim("c", {})
    beta["spec"]["devices"]["requests"] = [
        {"name": "gpu", "deviceClassName": GPU, "count": 2, "allocationMode": "ExactCount"}
    ]
    (request,) = read_claim(beta, CLASSES).requests
    (alternative,) = request.alternatives
    assert (request.name, alternative.result_name, alternative.device_class) == ("gpu", "gpu", GPU)
    assert (alternative.mode, alternative.count) == (requests.EXACT_COUNT, 2)


# -- what is read ----------------------------------------------------------------------------------


def test_a_claim_is_read_with_its_identity_requests_and_alternatives() -> None:
    written = claim("c", {
        "gpu": exactly(GPU, attr("index") + " == 0", count=3),
        "all": exactly(MIG, allocationMode="All"),
        "opt": {"firstAvailable": [{"name": "big", "deviceClassName": GPU},
                                   {"name": "cpu", "deviceClassName": FALLBACK}]},
    })  # fmt: skip
    read = read_claim(written, CLASSES)
    assert (read.uid, read.namespace, read.name, read.ref) == ("uid-c", "default", "c", "default/c")
    gpu, every, optional = read.requests
    assert [r.name for r in read.requests] == ["gpu", "all", "opt"]
    assert (gpu.alternatives[0].mode, gpu.alternatives[0].count) == ("ExactCount", 3)
    assert (every.alternatives[0].mode, every.alternatives[0].device_class) == ("All", MIG)
    assert every.alternatives[0].count == 1  # the default
    assert [a.result_name for a in optional.alternatives] == ["opt/big", "opt/cpu"]
    assert [a.device_class for a in optional.alternatives] == [GPU, FALLBACK]
    assert read.constraints == () and read.config == ()


def test_the_class_selectors_come_first_then_the_requests() -> None:
    device_class = {
        "metadata": {"name": "big"},
        "spec": {
            "selectors": [{"cel": {"expression": 'device.driver == "gpu.drasat.io"'}}],
            "config": [{"opaque": {"driver": "x.io", "parameters": {"a": 1}}}],
        },
    }
    written = claim("c", {"gpu": exactly("big", attr("index") + " == 1", attr("minor") + " < 4")})
    (alternative,) = read_claim(written, {"big": device_class}).requests[0].alternatives
    assert [s.expression for s in alternative.selectors] == [
        'device.driver == "gpu.drasat.io"',
        attr("index") + " == 1",
        attr("minor") + " < 4",
    ]
    assert alternative.class_config == ({"opaque": {"driver": "x.io", "parameters": {"a": 1}}},)


def test_capacity_requests_are_read_in_bytes_by_name_as_written_sorted() -> None:
    # Upstream matches a capacity request's name literally against the device's capacity names.
    wanted = {"requests": {"gpu.drasat.io/memory": "4Gi", "compute": "25"}}
    written = claim("c", {"s": exactly(GPU, capacity=wanted)})
    (alternative,) = read_claim(written, CLASSES).requests[0].alternatives
    assert alternative.capacity == (("compute", 25), ("gpu.drasat.io/memory", 4 * 2**30))
    plain = read_claim(claim("c", {"g": exactly()}), CLASSES).requests[0].alternatives[0]
    assert plain.capacity == ()


def test_constraints_and_configs_are_kept_as_written() -> None:
    ours = {"opaque": {"driver": "gpu.drasat.io", "parameters": {
        "apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig"}}}  # fmt: skip
    theirs = {"requests": ["a"], "opaque": {"driver": "x.io", "parameters": "anything"}}
    written = claim(
        "c",
        {"a": exactly(), "b": exactly()},
        constraints=[{"matchAttribute": "gpu.drasat.io/numaNode"},
                     {"requests": ["a", "b"], "matchAttribute": "gpu.drasat.io/productName"}],
        config=[ours, theirs],
    )  # fmt: skip
    read = read_claim(written, CLASSES)
    everywhere, pair = read.constraints
    assert (everywhere.attribute, everywhere.requests) == ("gpu.drasat.io/numaNode", ())
    assert (pair.attribute, pair.requests) == ("gpu.drasat.io/productName", ("a", "b"))
    assert pair.field == "spec.devices.constraints[1]"
    assert read.config == (ours, theirs)


# -- refusals, with the field ----------------------------------------------------------------------


def _refusal(requests_: dict[str, Obj], **fields: Any) -> ClaimError:
    with pytest.raises(ClaimError) as raised:
        read_claim(claim("c", requests_, **fields), CLASSES)
    error = raised.value
    assert error.claim == "default/c"
    assert str(error).startswith(f"ResourceClaim default/c: {error.field}: ")
    return error


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (exactly("nope"), "spec.devices.requests[0].exactly.deviceClassName", "'nope' not found"),
        (exactly(adminAccess=True), "spec.devices.requests[0].exactly.adminAccess", "admin"),
        (exactly(allocationMode="Some"), "spec.devices.requests[0].exactly.allocationMode",
         "'Some'"),
        (exactly(GPU, "device.driver ==="),
         "spec.devices.requests[0].exactly.selectors[0].cel.expression", "does not compile"),
        (exactly(selectors=[{"other": {}}]), "spec.devices.requests[0].exactly.selectors[0]",
         "only cel"),
        (exactly(capacity={"requests": {"memory": "lots"}}),
         "spec.devices.requests[0].exactly.capacity.requests.memory", "lots"),
        ({"firstAvailable": [{"name": "a", "deviceClassName": GPU},
                             {"name": "b", "deviceClassName": "nope"}]},
         "spec.devices.requests[0].firstAvailable[1].deviceClassName", "'nope' not found"),
        ({"firstAvailable": []}, "spec.devices.requests[0]", "exactly or firstAvailable"),
    ],
)  # fmt: skip
def test_a_request_drasat_cannot_allocate_is_refused_with_its_field(
    request_: Obj, field: str, says: str
) -> None:
    error = _refusal({"gpu": request_})
    assert error.field == field
    assert says in str(error)


def test_a_class_selector_that_does_not_compile_names_the_class() -> None:
    broken = {"metadata": {"name": "b"}, "spec": {"selectors": [{"cel": {"expression": "(("}}]}}
    with pytest.raises(ClaimError) as raised:
        read_claim(claim("c", {"gpu": exactly("b")}), {"b": broken})
    assert raised.value.field == "DeviceClass b spec.selectors[0].cel.expression"


def test_the_second_request_is_named_by_its_index() -> None:
    error = _refusal({"a": exactly(), "b": exactly("nope")})
    assert error.field == "spec.devices.requests[1].exactly.deviceClassName"


def test_a_constraint_drasat_does_not_know_or_naming_no_request_is_refused() -> None:
    unknown = _refusal({"a": exactly()}, constraints=[{"requests": ["a"], "sameRack": "x"}])
    assert unknown.field == "spec.devices.constraints[0].sameRack"
    stranger = _refusal(
        {"a": exactly()},
        constraints=[{"requests": ["a", "z"], "matchAttribute": "gpu.drasat.io/numaNode"}],
    )
    assert stranger.field == "spec.devices.constraints[0].requests" and "'z'" in str(stranger)


def test_a_bad_configuration_of_our_driver_is_refused_another_drivers_is_not_ours_to_judge() -> (
    None
):
    bad = {"opaque": {"driver": "gpu.drasat.io", "parameters": {"kind": "Nope"}}}
    error = _refusal({"a": exactly()}, config=[{"opaque": {"driver": "x.io"}}, bad])
    assert error.field == "spec.devices.config[1].opaque"
    # drivers named before and after ours: only our own driver's name is ours
    others = [{"opaque": {"driver": d, "parameters": {"kind": "Nope"}}}
              for d in ("a.example.com", "x.io", "gpu.drasat.io.example.com")]  # fmt: skip
    assert read_claim(claim("c", {"a": exactly()}, config=others), CLASSES).config == tuple(others)


def test_match_and_distinct_constraints_are_told_apart_and_named_so() -> None:
    written = claim(
        "c",
        {"a": exactly(), "b": exactly()},
        constraints=[{"matchAttribute": "gpu.drasat.io/productName"},
                     {"distinctAttribute": "gpu.drasat.io/numaNode", "requests": ["a", "b"]}],
    )  # fmt: skip
    same, apart = read_claim(written, CLASSES).constraints
    assert (same.distinct, same.label) == (False, "matchAttribute gpu.drasat.io/productName")
    assert (apart.distinct, apart.label) == (True, "distinctAttribute gpu.drasat.io/numaNode")
