"""drasat.v1.cel: selectors on the device model's devices, and their memo."""

from __future__ import annotations

from drasat.v1 import cel

DRIVER = "gpu.drasat.io"


def _gpu(name: str, product: str, uuid: str) -> dict[str, object]:
    return {
        "name": name,
        "attributes": {"productName": {"string": product}, "uuid": {"string": uuid}},
        "capacity": {"memory": {"value": "40Gi"}},
    }


def test_devices_that_differ_in_what_the_expression_reads_are_told_apart() -> None:
    selector = cel.compile_selector(f'device.attributes["{DRIVER}"].productName == "A100"')
    assert selector.matches(DRIVER, _gpu("gpu-0", "A100", "GPU-a"))
    assert not selector.matches(DRIVER, _gpu("gpu-1", "H100", "GPU-b"))


def test_identity_is_read_per_device_and_kinds_share_one_evaluation() -> None:
    by_uuid = cel.compile_selector(f'device.attributes["{DRIVER}"].uuid == "GPU-b"')
    assert not by_uuid.matches(DRIVER, _gpu("gpu-0", "A100", "GPU-a"))
    assert by_uuid.matches(DRIVER, _gpu("gpu-1", "A100", "GPU-b"))
    by_memory = cel.compile_selector(
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
    )
    for i in range(5):
        assert by_memory.matches(DRIVER, _gpu(f"gpu-{i}", "A100", f"GPU-{i}"))
    assert len(by_memory._memo) == 1


def test_a_missing_attribute_does_not_match_and_is_remembered() -> None:
    selector = cel.compile_selector(f'device.attributes["{DRIVER}"].numaNode == 0')
    assert not selector.matches(DRIVER, _gpu("gpu-0", "A100", "GPU-a"))
    assert selector.error is not None and "numaNode" in selector.error
