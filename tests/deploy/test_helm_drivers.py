"""`controller.drivers` (issue 30): drasat as the allocator for NVIDIA's DRA driver. With drasat's
own driver left out the chart installs the controller only (no node plugin, none of drasat's
classes, no nvidia.com/gpu conversion into drasat's class), passes the list to the controller,
and its NOTES say what was installed."""

from __future__ import annotations

import pathlib

from chart_rendering import Render
from test_helm_chart import VAP, _container, _notes, validate_all

MAP_V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
DEVICE_CLASS = "resource.k8s.io/v1/DeviceClass"
TAINT_RULE = "resource.k8s.io/v1/DeviceTaintRule"
SERVED = [VAP, MAP_V1, DEVICE_CLASS, TAINT_RULE]
NVIDIA_ONLY = "controller.drivers={gpu.nvidia.com}"


def test_the_default_is_drasats_own_driver(render: Render) -> None:
    rendered = render(kube_version="1.37.2", api_versions=SERVED)
    assert rendered.returncode == 0, rendered.stderr
    assert "--driver=gpu.drasat.io" in _container(rendered.one("Deployment"))["args"]
    assert rendered.kinds().count("DaemonSet") == 2  # the node plugin, the MPS host


def test_nvidias_driver_alone_installs_the_controller_only(render: Render) -> None:
    rendered = render(NVIDIA_ONLY, kube_version="1.37.2", api_versions=SERVED)
    assert rendered.returncode == 0, rendered.stderr
    kinds = rendered.kinds()
    assert "DaemonSet" not in kinds and "DeviceClass" not in kinds
    # Nothing of the node plugin: its ServiceAccount, RBAC, own-NAS and own-slices policies.
    names = [m["metadata"]["name"] for m in rendered.manifests]
    assert not [n for n in names if "node-plugin" in n]
    # The gate still comes from admission, and the conversion of nvidia.com/gpu: its templates
    # are of NVIDIA's class, which NVIDIA's chart has serve nvidia.com/gpu (kube-scheduler's own
    # claim for such a pod it cannot allocate: drasat's DeviceTaintRule is on the devices).
    policies = [m["metadata"]["name"] for m in rendered.manifests
                if m["kind"] == "MutatingAdmissionPolicy"]  # fmt: skip
    assert policies == ["drasat-scheduling-gate", "drasat-extended-resources"]
    args = _container(rendered.one("Deployment"))["args"]
    assert "--driver=gpu.nvidia.com" in args and "--device-taint" in args
    validate_all(rendered.manifests, kube="1.37")


def test_both_drivers(render: Render) -> None:
    rendered = render(
        "controller.drivers={gpu.drasat.io,gpu.nvidia.com}",
        kube_version="1.37.2",
        api_versions=SERVED,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "--driver=gpu.drasat.io,gpu.nvidia.com" in _container(rendered.one("Deployment"))["args"]
    assert rendered.kinds().count("DaemonSet") == 2  # the node plugin, the MPS host
    assert rendered.kinds().count("DeviceClass") == 3


def test_an_unknown_or_empty_driver_list_is_refused(render: Render) -> None:
    unknown = render("controller.drivers={gpu.amd.com}", kube_version="1.37.2")
    assert unknown.returncode != 0 and "/controller/drivers/0" in unknown.stderr
    empty = render("controller.drivers=null", kube_version="1.37.2")
    assert empty.returncode != 0


def test_kube_scheduler_as_allocator_without_drasats_driver_installs_nothing(
    render: Render,
) -> None:
    rendered = render("allocator=kube-scheduler", NVIDIA_ONLY, kube_version="1.37.2")
    assert rendered.returncode != 0
    assert "keep allocator=drasat and set controller.drivers={gpu.nvidia.com}" in rendered.stderr


def test_notes_say_only_the_controller_was_installed(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    text = _notes(helm, tmp_path, "--kube-version", "1.37.2", "--set", NVIDIA_ONLY,
                  *[a for v in SERVED for a in ("--api-versions", v)])  # fmt: skip
    assert "claims of the DeviceClasses of gpu.nvidia.com with the solver" in text
    assert "Installed: the controller only" in text and "no node plugin" in text
    assert "The DeviceTaintRule drasat-allocator-gpu.nvidia.com keeps" in text
    assert "--field-selector spec.driver=gpu.nvidia.com" in text
    assert "nodeallocationstates" not in text and "daemonset" not in text
    both = _notes(helm, tmp_path / "b", "--kube-version", "1.37.2",
                  "--set", "controller.drivers={gpu.drasat.io,gpu.nvidia.com}",
                  *[a for v in SERVED for a in ("--api-versions", v)])  # fmt: skip
    assert "DeviceTaintRules drasat-allocator and drasat-allocator-gpu.nvidia.com keep" in both
    assert "get nodeallocationstates" in both and "spec.driver=gpu.nvidia.com" in both
