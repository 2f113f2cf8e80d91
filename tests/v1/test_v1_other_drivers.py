"""Claims across drivers: drasat allocates every request of a claim it takes, other drivers'
devices too (a NIC beside a GPU), read from their ResourceSlices (`drasat.v1.otherdevices`), with
upstream's semantics: selectors on their attributes and capacity, counts and `All`,
`matchAttribute` and `distinctAttribute` across drivers, devices held by allocated claims,
consumable capacity, shared counters, device taints."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from v1kit import CLASSES, GPU, claim, exactly, node, pod

from drasat import v1
from drasat.solver import Mode, SolveParams
from drasat.v1 import nasinventory, otherdevices, publisheddevices
from drasat.v1.publisheddevices import Published

Obj = dict[str, Any]

NIC = "nic.example.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NIC_CLASS: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": NIC},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
}
ALL_CLASSES = {**CLASSES, NIC: NIC_CLASS}
SAME_ROOT = [{"matchAttribute": PCIE_ROOT}]


def nic(name: str, root: str | None = None, **fields: Any) -> Obj:
    attributes: Obj = {"model": {"string": "cx7"}}
    if root is not None:
        attributes[PCIE_ROOT] = {"string": root}
    return {"name": name, "attributes": attributes, **fields}


def nic_slice(node_name: str, *devices: Obj, counters: list[Obj] | None = None) -> Obj:
    spec: Obj = {
        "driver": NIC,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
        "devices": list(devices),
    }
    if counters:
        spec["sharedCounters"] = counters
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{NIC}"},
        "spec": spec,
    }


def gpu_node(name: str, roots: list[str], product: str = "T4") -> v1.Node:
    """drasat's GPUs, each on the PCIe root given (as a driver that knows it publishes it)."""
    found = node(name, product, len(roots))
    devices = []
    for d in found.devices:
        if d.kind == publisheddevices.GPU:
            minor = int(d.name.removeprefix("gpu-"))
            attributes = {**d.device["attributes"], PCIE_ROOT: {"string": roots[minor]}}
            d = dataclasses.replace(d, device={**d.device, "attributes": attributes})
        devices.append(d)
    return v1.Node(found.state, tuple(devices))


def with_nics(found: v1.Node, *slices: Obj, held: list[Obj] | None = None) -> v1.Node:
    others = otherdevices.read(slices, {"gpu.drasat.io"})
    used = otherdevices.held(held or [], others).get(found.state.name, {})
    return v1.with_other_devices(found, others.get(found.state.name), used)


def allocate(nodes: list[v1.Node], *claims: Obj, mode: Mode = Mode.online) -> v1.Outcome:
    pods = [pod(f"p-{c['metadata']['name']}", c) for c in claims]
    return v1.allocate(nodes, pods, ALL_CLASSES, params=SolveParams(mode=mode))


def results(outcome: v1.Outcome, name: str) -> list[Obj]:
    found = [a for a in outcome.allocations.values() if a.name == name]
    return list(found[0].allocation["devices"]["results"]) if found else []


def devices(outcome: v1.Outcome, name: str) -> list[str]:
    return sorted(f"{r['driver']}/{r['device']}" for r in results(outcome, name))


def allocated(outcome: v1.Outcome, name: str) -> Obj:
    """The claim as its status would read once written (for `otherdevices.held`)."""
    found = next(a for a in outcome.allocations.values() if a.name == name)
    return {"metadata": {"name": name}, "status": {"allocation": found.allocation}}


def gpu_and_nic(name: str, **nic_fields: Any) -> Obj:
    return claim(
        name, {"gpu": exactly(GPU), "nic": exactly(NIC, **nic_fields)}, constraints=SAME_ROOT
    )


def test_a_claim_with_a_gpu_and_a_nic_gets_both_and_no_ledger_entry_for_the_nic() -> None:
    found = with_nics(node("a", "T4"), nic_slice("a", nic("eth0")))
    out = allocate([found], claim("c", {"gpu": exactly(GPU), "nic": exactly(NIC)}))
    assert out.placed == {"default/p-c": "a"}
    assert [(r["request"], r["driver"], r["pool"], r["device"]) for r in results(out, "c")] == [
        ("gpu", "gpu.drasat.io", "a", "gpu-0"),
        ("nic", NIC, "a", "eth0"),
    ]
    (allocation,) = out.allocations.values()
    assert list(allocation.ledger) == ["uid-c/gpu"]  # the NIC's ledger is the claim's status


def test_a_gpu_and_a_nic_on_one_pcie_root() -> None:
    # Two T4s on roots A and B; the one NIC is on root B: the claim takes gpu-1.
    found = with_nics(gpu_node("a", ["pci-A", "pci-B"]), nic_slice("a", nic("eth0", "pci-B")))
    out = allocate([found], gpu_and_nic("c"))
    assert devices(out, "c") == ["gpu.drasat.io/gpu-1", f"{NIC}/eth0"]
    # A NIC without the attribute never serves a request the constraint covers.
    bare = with_nics(gpu_node("a", ["pci-A", "pci-B"]), nic_slice("a", nic("eth0")))
    out = allocate([bare], gpu_and_nic("c"))
    assert out.placed == {}
    assert "matchAttribute resource.kubernetes.io/pcieRoot" in out.refused["default/p-c"][0]


def test_a_nic_an_allocated_claim_holds_is_not_given_again() -> None:
    slices = nic_slice("a", nic("eth0", "pci-A"), nic("eth1", "pci-B"))
    gpus = gpu_node("a", ["pci-A", "pci-B"])
    first = allocate([with_nics(gpus, slices)], gpu_and_nic("c"))
    taken = devices(first, "c")
    # The first claim's status holds its NIC: the next claim takes the other root's pair.
    held = [allocated(first, "c")]
    gpus_left = v1.Node(
        nasinventory.with_entries(gpus.state, first.allocations["uid-c"].ledger),
        gpus.devices,
    )
    second = allocate([with_nics(gpus_left, slices, held=held)], gpu_and_nic("d"))
    assert second.placed == {"default/p-d": "a"}
    assert set(devices(second, "d")).isdisjoint(taken)
    # Both NICs held (the GPUs free again): a third claim waits, and says why.
    held.append(allocated(second, "d"))
    out = allocate([with_nics(gpus, slices, held=held)], gpu_and_nic("e"))
    assert out.placed == {}
    assert "0 that its selectors match free" in out.refused["default/p-e"][0]


def test_pods_of_one_round_never_share_an_exclusive_nic() -> None:
    found = with_nics(node("a", "T4", 2), nic_slice("a", nic("eth0")))
    both = [claim(n, {"gpu": exactly(GPU), "nic": exactly(NIC)}) for n in ("c", "d")]
    for mode in (Mode.online, Mode.batch):
        out = allocate([found], *both, mode=mode)
        assert len(out.placed) == 1 and len(out.refused) == 1


def test_distinct_attribute_across_nics_and_all() -> None:
    slices = nic_slice("a", nic("eth0", "pci-A"), nic("eth1", "pci-A"), nic("eth2", "pci-B"))
    found = with_nics(node("a", "T4"), slices)
    two = claim(
        "c",
        {"gpu": exactly(GPU), "nic": exactly(NIC, count=2)},
        constraints=[{"requests": ["nic"], "distinctAttribute": PCIE_ROOT}],
    )
    out = allocate([found], two)
    taken = devices(out, "c")
    assert f"{NIC}/eth2" in taken and len(taken) == 3
    every = claim("c", {"gpu": exactly(GPU), "nic": exactly(NIC, allocationMode="All")})
    out = allocate([found], every)
    assert devices(out, "c") == ["gpu.drasat.io/gpu-0", f"{NIC}/eth0", f"{NIC}/eth1", f"{NIC}/eth2"]


def test_selectors_read_the_other_drivers_attributes_and_capacity() -> None:
    slices = nic_slice(
        "a",
        nic("slow", capacity={"bandwidth": {"value": "25G"}}),
        nic("fast", capacity={"bandwidth": {"value": "200G"}}),
    )
    found = with_nics(node("a", "T4"), slices)
    fast = f'device.capacity["{NIC}"].bandwidth.compareTo(quantity("100G")) >= 0'
    model = f'device.attributes["{NIC}"].model == "cx7"'
    out = allocate([found], claim("c", {"gpu": exactly(GPU), "nic": exactly(NIC, fast, model)}))
    assert devices(out, "c") == ["gpu.drasat.io/gpu-0", f"{NIC}/fast"]


def test_a_tainted_nic_only_for_a_request_that_tolerates_it() -> None:
    taint = {"key": "nic.example.com/link-down", "value": "true", "effect": "NoSchedule"}
    found = with_nics(node("a", "T4"), nic_slice("a", nic("eth0", taints=[taint])))
    out = allocate([found], claim("c", {"gpu": exactly(GPU), "nic": exactly(NIC)}))
    assert out.placed == {}
    tolerated = [{"key": "nic.example.com/link-down", "operator": "Exists"}]
    out = allocate(
        [found], claim("c", {"gpu": exactly(GPU), "nic": exactly(NIC, tolerations=tolerated)})
    )
    assert devices(out, "c") == ["gpu.drasat.io/gpu-0", f"{NIC}/eth0"]


def test_a_shared_nic_counts_its_consumable_capacity() -> None:
    policy = {"default": "10G", "validRange": {"min": "10G", "step": "10G"}}
    shared = nic(
        "eth0",
        allowMultipleAllocations=True,
        capacity={"bandwidth": {"value": "100G", "requestPolicy": policy}},
    )
    found = with_nics(node("a", "T4", 4), nic_slice("a", shared))
    ask = {"requests": {"bandwidth": "35G"}}  # rounded up to the policy's step: 40G
    claims = [claim(n, {"gpu": exactly(GPU), "nic": exactly(NIC, capacity=ask)}) for n in "cde"]
    out = allocate([found], *claims)
    assert len(out.placed) == 2  # 40G + 40G; a third 40G is more than the 100G left
    for name in ("c", "d"):
        (result,) = [r for r in results(out, name) if r["driver"] == NIC]
        assert result["consumedCapacity"] == {"bandwidth": "40000000000"}
        assert result["shareID"]
    # What they hold counts when read back from their statuses.
    held = [allocated(out, "c"), allocated(out, "d")]
    again = with_nics(node("a", "T4", 4), nic_slice("a", shared), held=held)
    assert dict(again.state.amounts) == {f"capacity/{NIC}/a/eth0/bandwidth": 20_000_000_000}


def test_devices_that_consume_a_shared_counter() -> None:
    # Two virtual functions of one port share its one counter: one at a time.
    vf = {"consumesCounters": [{"counterSet": "port", "counters": {"vfs": {"value": "1"}}}]}
    counters = [{"name": "port", "counters": {"vfs": {"value": "1"}}}]
    slices = nic_slice("a", nic("vf0", **vf), nic("vf1", **vf), counters=counters)
    found = with_nics(node("a", "T4", 2), slices)
    both = [claim(n, {"gpu": exactly(GPU), "nic": exactly(NIC)}) for n in ("c", "d")]
    out = allocate([found], *both)
    assert len(out.placed) == 1


def test_batch_places_what_first_fit_cannot() -> None:
    # Root A holds gpu-0 and the free NIC eth0; root B gpu-1 and eth1, which is held. A pod with
    # one GPU comes first, then a pod with a GPU and a NIC on one root. First fit gives the
    # first pod gpu-0 and leaves the second nothing; drasat's batch gives it gpu-1.
    slices = nic_slice("a", nic("eth0", "pci-A"), nic("eth1", "pci-B"))
    holder = {
        "metadata": {"name": "holder"},
        "status": {"allocation": {"devices": {"results": [
            {"request": "nic", "driver": NIC, "pool": "a", "device": "eth1"}]}}},
    }  # fmt: skip
    found = with_nics(gpu_node("a", ["pci-A", "pci-B"]), slices, held=[holder])
    out = allocate([found], claim("c", {"gpu": exactly(GPU)}), gpu_and_nic("d"), mode=Mode.batch)
    assert len(out.placed) == 2
    assert devices(out, "c") == ["gpu.drasat.io/gpu-1"]
    assert devices(out, "d") == ["gpu.drasat.io/gpu-0", f"{NIC}/eth0"]


@pytest.mark.parametrize("driver", ["gpu.drasat.io"])
def test_slices_of_gpu_drivers_are_not_read_as_other_devices(driver: str) -> None:
    found = nic_slice("a", nic("eth0"))
    found["spec"]["driver"] = driver
    assert otherdevices.read([found], {driver}) == {}


def test_the_key_of_another_drivers_device() -> None:
    device = Published(NIC, "pool-1", {"name": "eth0"}, publisheddevices.OTHER)
    assert device.key == f"{NIC}/pool-1/eth0"


def test_another_drivers_quantity_over_64_bits_leaves_its_slice_out_naming_the_field() -> None:
    """drasat counts every capacity of another driver's device in 64-bit integers: a slice with
    one over 64 bits (which the API server accepts) is left out, with the field in the note."""
    big = nic_slice("a", nic("eth0", capacity={"bandwidth": {"value": "10E"}}))
    read = otherdevices.read([big], {"gpu.drasat.io"})
    assert read["a"].devices == ()
    assert read["a"].notes == (
        f"ResourceSlice a-{NIC}: spec.devices[0].capacity.bandwidth: quantity '10E' is over "
        "9223372036854775807 (64 bits)",
    )
