"""Claims across drivers in the controller's cycle, on the in-process API server: a claim drasat
takes that also asks for another driver's device (a NIC beside its GPU) gets both, read from the
NIC driver's ResourceSlices, with `matchAttribute` across drivers as upstream's allocator reads
it; the NIC's ledger is the claims' statuses; a claim that cannot have its NIC is refused for
that, never for a class "not found"; a claim of the NIC alone stays kube-scheduler's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ctl_slices
import test_v1controller_nvidia as nvidia
from ctl_cluster import add_node, t4
from test_v1controller_nvidia import _publish, _settled

from drasat.api.groups import DRIVER_NAME
from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient

Obj = dict[str, Any]

# The in-process API server with drasat's and NVIDIA's DeviceClasses, and controllers stepped by
# hand (`controller(*drivers)`: NVIDIA's by default).
api, controller = nvidia.api, nvidia.controller

NIC = "nic.example.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def _nic_class(api: KubeClient) -> None:
    api.create(r.DEVICE_CLASSES_V1, {
        "metadata": {"name": NIC},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
    })  # fmt: skip


def _nics(api: KubeClient, node: str, roots: dict[str, str]) -> None:
    """The NIC driver's slice on the node: one NIC per name, on the PCIe root given."""
    devices = [{"name": name, "attributes": {PCIE_ROOT: {"string": root}}}
               for name, root in roots.items()]  # fmt: skip
    api.create(r.RESOURCE_SLICES_V1, {
        "metadata": {"name": f"{node}-{NIC}"},
        "spec": {"driver": NIC, "nodeName": node, "devices": devices,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
    })  # fmt: skip


def _claim(api: KubeClient, name: str, gpu_class: str | None, *, same_root: bool) -> Obj:
    requests = [{"name": "nic", "exactly": {"deviceClassName": NIC}}]
    if gpu_class is not None:
        requests.insert(0, {"name": "gpu", "exactly": {"deviceClassName": gpu_class}})
    devices: Obj = {"requests": requests}
    if same_root:
        devices["constraints"] = [{"matchAttribute": PCIE_ROOT}]
    body = {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: KubeClient, name: str, claim: str) -> Obj:
    return nvidia._pod(api, name, claim)


def _results(api: KubeClient, name: str) -> list[tuple[str, str, str, str]]:
    status = api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default").get("status") or {}
    found = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted((x["request"], x["driver"], x["pool"], x["device"]) for x in found)


def test_a_gpu_and_a_nic_on_one_pcie_root_are_placed_together(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    # NVIDIA's T4 node: gpu-0 on pci0000:3a, gpu-1 on pci0000:3b, gpu-2 (tainted) on 3c. The
    # only NIC beside a usable GPU is on 3b: the GPU first fit takes (gpu-0) has none.
    _publish(api, "nv-t4", "t4")
    _nic_class(api)
    _nics(api, "t4", {"nic-0": "pci0000:3b", "nic-1": "pci0000:3c"})
    ctl = controller()
    _claim(api, "c1", nvidia.NVIDIA, same_root=True)
    _pod(api, "p1", "c1")
    assert _settled(ctl, lambda: _results(api, "c1"))
    assert _results(api, "c1") == [
        ("gpu", nvidia.NVIDIA, "t4", "gpu-1"),
        ("nic", NIC, "t4", "nic-0"),
    ]
    # The second claim alike: gpu-0 is free, but no NIC on its root; nic-0 is held by c1's
    # status (the NIC driver keeps no other ledger). Refused for what it is.
    _claim(api, "c2", nvidia.NVIDIA, same_root=True)
    _pod(api, "p2", "c2")
    assert _settled(ctl, lambda: "default/p2" in ctl.explanations)
    assert _results(api, "c2") == []
    why = ctl.explanations["default/p2"]
    assert f"matchAttribute {PCIE_ROOT}" in why, why
    assert "not found" not in why, why
    # c1 goes: its NIC and GPU are free again, and c2 gets them.
    api.delete(r.PODS, "p1", namespace="default")
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    assert _settled(ctl, lambda: _results(api, "c2"))
    assert _results(api, "c2") == [
        ("gpu", nvidia.NVIDIA, "t4", "gpu-1"),
        ("nic", NIC, "t4", "nic-0"),
    ]


def test_drasats_gpus_and_one_nic_go_to_one_claim_of_two(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    # drasat's own driver, two T4s and one NIC: its GPUs publish no PCIe root, so no
    # constraint ties them.
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    api.create(r.NODES, {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}})
    devices = [t4(0), t4(1)]
    add_node(api, "n1", devices)
    ctl_slices.publish(api, "n1", devices)
    _nic_class(api)
    _nics(api, "n1", {"nic-0": "pci0000:00"})
    ctl = controller(DRIVER_NAME)
    for name in ("a", "b"):
        _claim(api, name, DRIVER_NAME, same_root=False)
        _pod(api, f"p-{name}", name)
    _claim(api, "nic-only", None, same_root=False)
    _pod(api, "q", "nic-only")
    # One cycle places both pods' claims together: the NIC goes to one of them only.
    assert _settled(ctl, lambda: _results(api, "a") or _results(api, "b"))
    placed, refused = ("a", "b") if _results(api, "a") else ("b", "a")
    assert [x[3] for x in _results(api, placed)] in (["gpu-0", "nic-0"], ["gpu-1", "nic-0"])
    why = ctl.explanations[f"default/p-{refused}"]
    assert "not found" not in why and "nic" in why, why
    # Later cycles read the NIC as held by the placed claim's status: still refused.
    for _ in range(3):
        ctl.cycle()
    assert _results(api, refused) == []
    # A claim of the NIC alone names no class of drasat's: kube-scheduler's, never touched.
    assert _results(api, "nic-only") == []
    assert "default/q" not in ctl.explanations
