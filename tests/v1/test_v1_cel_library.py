"""drasat.v1.cel: what a selector sees of a device and Kubernetes' CEL library functions, each
with the answer Kubernetes documents (the `device` variable of DRA selectors; the quantity,
semver and string extension libraries)."""

from __future__ import annotations

from typing import Any

import pytest

from drasat.v1 import cel

DRIVER = "gpu.drasat.io"

DEVICE: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {
        "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "uuid": {"string": "GPU-a"},
        "index": {"int": 3},
        "migEnabled": {"bool": False},
        "driverVersion": {"version": "550.54.15"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
    },
    "capacity": {"memory": {"value": "40Gi"}, "compute": {"value": "100"}},
}


def holds(expression: str, device: dict[str, Any] | None = None, driver: str = DRIVER) -> bool:
    """Whether the selector matches the device (a fresh selector: no memo from other tests)."""
    selector = cel.compile_selector(expression)
    selector._memo.clear()
    return selector.matches(driver, DEVICE if device is None else device)


A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'


# -- the device variable ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{DRIVER}"',
        f'{A}.productName == "NVIDIA A100-SXM4-40GB"',
        f"{A}.index == 3",
        f"{A}.migEnabled == false",
        f'{A}.driverVersion.isGreaterThan(semver("550.0.0"))',
        'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"',
        f'{C}.memory.compareTo(quantity("40Gi")) == 0',
        f'{C}.compute.compareTo(quantity("100")) == 0',
        "device.allowMultipleAllocations == false",
        f'"productName" in {A} && !("numaNode" in {A})',
    ],
)
def test_a_selector_sees_driver_attributes_by_domain_capacity_and_sharing(expression: str) -> None:
    assert holds(expression)


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "gpu.example.com"',
        f"{A}.index == 4",
        f"{A}.migEnabled == true",
        f'{A}.driverVersion.isLessThan(semver("550.0.0"))',
        f'{C}.memory.compareTo(quantity("80Gi")) == 0',
        "device.allowMultipleAllocations",
        f'"pcieRoot" in {A}',  # a qualified name lives under its own domain only
    ],
)
def test_a_selector_that_does_not_hold_does_not_match(expression: str) -> None:
    assert not holds(expression)


def test_allow_multiple_allocations_is_the_devices_own() -> None:
    shared = {**DEVICE, "allowMultipleAllocations": True}
    assert holds("device.allowMultipleAllocations", shared)


def test_the_driver_is_the_one_publishing_the_device() -> None:
    assert holds('device.driver == "gpu.example.com"', driver="gpu.example.com")
    assert holds('device.attributes["gpu.example.com"].index == 3', driver="gpu.example.com")


def test_activation_maps_each_domain_to_its_unqualified_names() -> None:
    seen = cel.activation(DRIVER, DEVICE)["device"]
    assert set(seen["attributes"]) == {DRIVER, "resource.kubernetes.io"}
    assert set(seen["attributes"][DRIVER]) == {
        "productName", "uuid", "index", "migEnabled", "driverVersion"
    }  # fmt: skip
    assert set(seen["attributes"]["resource.kubernetes.io"]) == {"pcieRoot"}
    assert set(seen["capacity"]) == {DRIVER} and set(seen["capacity"][DRIVER]) == {
        "memory",
        "compute",
    }
    assert seen["driver"] == DRIVER


# -- quantity --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('quantity("40Gi").compareTo(quantity("30Gi")) == 1', True),
        ('quantity("30Gi").compareTo(quantity("40Gi")) == -1', True),
        ('quantity("1Gi").compareTo(quantity("1024Mi")) == 0', True),
        ('quantity("2Gi").isGreaterThan(quantity("1Gi"))', True),
        ('quantity("1Gi").isGreaterThan(quantity("1Gi"))', False),
        ('quantity("1Gi").isLessThan(quantity("2Gi"))', True),
        ('quantity("2Gi").isLessThan(quantity("2Gi"))', False),
        ('quantity("2k").asInteger() == 2000', True),
        ('quantity("4Gi").asInteger() == 4294967296', True),
        ('quantity("4Gi").isInteger()', True),
    ],
)
def test_quantity_library(expression: str, expected: bool) -> None:
    assert holds(expression) is expected


# -- semver ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('semver("1.10.0").isGreaterThan(semver("1.9.0"))', True),  # by number, not text
        ('semver("1.9.0").isGreaterThan(semver("1.10.0"))', False),
        ('semver("1.9.0").isLessThan(semver("1.10.0"))', True),
        ('semver("1.2.3").isLessThan(semver("1.2.3"))', False),
        ('semver("2.0.0").compareTo(semver("1.99.99")) == 1', True),
        ('semver("1.2.3").compareTo(semver("1.2.4")) == -1', True),
        ('semver("1.2.3").compareTo(semver("1.2.3")) == 0', True),
        ('semver("1.2.3").major() == 1', True),
        ('semver("1.2.3").minor() == 2', True),
        ('semver("1.2.3").patch() == 3', True),
        (f"{A}.driverVersion.major() == 550", True),
        (f"{A}.driverVersion.minor() == 54", True),
        (f"{A}.driverVersion.patch() == 15", True),
    ],
)
def test_semver_library(expression: str, expected: bool) -> None:
    assert holds(expression) is expected


# -- strings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        '"A100-SXM4".lowerAscii() == "a100-sxm4"',
        '"a100-sxm4".upperAscii() == "A100-SXM4"',
        '"  h100 ".trim() == "h100"',
        '"hello".indexOf("l") == 2',
        '"hello".indexOf("z") == -1',
        '"hello".lastIndexOf("l") == 3',
        '"a-b-c".replace("-", "+") == "a+b+c"',
        '"a,b,c".split(",") == ["a", "b", "c"]',
        f'{A}.productName.lowerAscii().indexOf("a100") == 7',
    ],
)
def test_string_library(expression: str) -> None:
    assert holds(expression)


# -- compiling and memo ----------------------------------------------------------------------------


def test_an_expression_that_does_not_compile_is_a_selector_error_naming_it() -> None:
    with pytest.raises(cel.SelectorError, match="does not compile") as raised:
        cel.compile_selector('device.driver == "x" &&')
    assert 'device.driver == "x" &&' in str(raised.value)


def test_one_compiled_selector_per_expression_text() -> None:
    expression = f'{A}.productName.startsWith("NVIDIA")'
    assert cel.compile_selector(expression) is cel.compile_selector(expression)


def test_devices_of_different_kinds_are_evaluated_apart() -> None:
    """The memo shares an evaluation only between devices that differ in identity; any other
    attribute, capacity or sharing gives a device its own evaluation."""
    selector = cel.compile_selector(
        f'{C}.memory.compareTo(quantity("40Gi")) == 0 && '
        f"{A}.migEnabled == false && !device.allowMultipleAllocations"
    )
    selector._memo.clear()
    assert selector.matches(DRIVER, DEVICE)
    attributes = DEVICE["attributes"]
    bigger = {**DEVICE, "capacity": {**DEVICE["capacity"], "memory": {"value": "80Gi"}}}
    mig = {**DEVICE, "attributes": {**attributes, "migEnabled": {"bool": True}}}
    shared = {**DEVICE, "allowMultipleAllocations": True}
    assert not selector.matches(DRIVER, bigger)
    assert not selector.matches(DRIVER, mig)
    assert not selector.matches(DRIVER, shared)
    assert not selector.matches("gpu.example.com", DEVICE)
    other = {**DEVICE, "name": "gpu-1", "attributes": {**attributes, "uuid": {"string": "GPU-b"}}}
    assert selector.matches(DRIVER, other)
    assert len(selector._memo) == 5


def test_an_expression_naming_an_identity_attribute_is_evaluated_per_device() -> None:
    attributes = {**DEVICE["attributes"], "minor": {"int": 0}, "pciBusID": {"string": "3b:00.0"}}
    device = {**DEVICE, "attributes": attributes}
    changed = {"index": {"int": 4}, "minor": {"int": 1}, "pciBusID": {"string": "5e:00.0"}}
    other = {**device, "name": "gpu-1", "attributes": {**attributes, **changed}}
    for name, value in (("index", "3"), ("minor", "0"), ("pciBusID", '"3b:00.0"')):
        selector = cel.compile_selector(f"{A}.{name} == {value}")
        selector._memo.clear()
        assert selector.matches(DRIVER, device), name
        assert not selector.matches(DRIVER, other), name
