"""The chart on current Kubernetes (resource.k8s.io/v1, 1.34+), checked with the real helm.

The mode comes from the version helm reports (`draApi: auto`): v1 from 1.34, classic up to 1.31,
1.32/1.33 refused. Every v1 rendering is validated against the Kubernetes JSON schemas of the
version it was rendered for (kubernetes-validate bundles 1.34-1.37), which covers what the real
1.37 API server in tests/e2e/test_e2e_helm.py cannot: that the objects are also valid for the
older versions' API.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import kubernetes_validate
import pytest
from chart_rendering import CHART, Manifest, Render, Rendered
from test_helm_chart import SERVICE_MONITOR, VAP, _container, _grants, _notes, _parsed, validate_all

from drasat.api.devicemodel import classes
from drasat.cli import main
from drasat.cli import nodeplugin as nodeplugin_cli

V1_VERSIONS = ["1.34.0", "1.35.0", "1.36.0", "1.37.2"]
DEVICE_CLASS = "resource.k8s.io/v1/DeviceClass"  # in helm's capabilities on a v1 cluster
CLASSIC_ONLY_KINDS = {"DeviceClassParameters", "ResourceClass"}


def _v1(render: Render, *sets: str, kube_version: str = "1.37.2", **kwargs: Any) -> Rendered:
    rendered = render(*sets, kube_version=kube_version, **kwargs)
    assert rendered.returncode == 0, rendered.stderr
    return rendered


# ---------------------------------------------------------------- which mode


@pytest.mark.parametrize("kube_version", V1_VERSIONS)
def test_auto_installs_v1_on_1_34_and_later(render: Render, kube_version: str) -> None:
    rendered = _v1(render, kube_version=kube_version, api_versions=[VAP])
    kinds = rendered.kinds()
    assert kinds.count("DeviceClass") == 3
    assert not CLASSIC_ONLY_KINDS & set(kinds)
    assert {m["apiVersion"] for m in rendered.manifests if m["kind"] == "DeviceClass"} == {
        "resource.k8s.io/v1"
    }
    # every object valid for that version's API, not just the newest one
    validate_all(rendered.manifests, kube=kube_version.rsplit(".", 1)[0])
    controller = _container(rendered.one("Deployment"))["args"]
    assert "--dra-api=v1" in controller and "--device-taint" in controller
    plugin = _container(rendered.one("DaemonSet", "-node-plugin"))["args"]
    assert "--kubelet-api=structured" in plugin and "--resourceslices" in plugin


@pytest.mark.parametrize("kube_version", ["1.30.0", "1.31.0"])
def test_auto_installs_classic_up_to_1_31(render: Render, kube_version: str) -> None:
    rendered = _v1(render, kube_version=kube_version)
    assert "DeviceClassParameters" in rendered.kinds()
    assert not any(m["apiVersion"] == "resource.k8s.io/v1" for m in rendered.manifests)
    assert not any(
        a.startswith("--dra-api") for a in _container(rendered.one("Deployment"))["args"]
    )
    plugin = _container(rendered.one("DaemonSet", "-node-plugin"))["args"]
    assert "--kubelet-api=classic" in plugin and "--resourceslices" not in plugin


def test_dra_api_forces_the_mode_whatever_the_version(render: Render) -> None:
    # For when helm cannot tell: `helm template` without --kube-version assumes its own version.
    forced_v1 = _v1(render, "draApi=v1", kube_version="1.33.0")
    assert forced_v1.kinds().count("DeviceClass") == 3
    forced_classic = _v1(render, "draApi=classic", kube_version="1.30.0")
    assert "ResourceClass" in forced_classic.kinds()


# ---------------------------------------------------------------- the classes are classes.py's


def test_chart_device_classes_are_the_ones_drasat_ships(render: Render) -> None:
    rendered = _v1(render)
    chart = {
        m["metadata"]["name"]: (m["apiVersion"], m["spec"])
        for m in rendered.manifests
        if m["kind"] == "DeviceClass"
    }
    shipped = {
        c["metadata"]["name"]: (c["apiVersion"], c["spec"]) for c in classes.device_classes()
    }
    assert chart == shipped
    for manifest in rendered.manifests:
        if manifest["kind"] == "DeviceClass":
            assert manifest["metadata"]["labels"]["app.kubernetes.io/instance"] == "drasat"


def test_chart_device_classes_are_what_drasat_resourceslices_prints(
    render: Render, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI's --with-classes output, the documented way to see them without the chart.
    args = main.build_parser().parse_args(
        ["resourceslices", "--node-name", "n", "--simulate-gpus", "1xA100-40GB", "--with-classes"]
    )
    printed = [o for o in _resourceslices_objects(args) if o["kind"] == "DeviceClass"]
    chart = [m for m in _v1(render).manifests if m["kind"] == "DeviceClass"]
    assert [(c["metadata"]["name"], c["spec"]) for c in printed] == [
        (c["metadata"]["name"], c["spec"]) for c in chart
    ]


def _resourceslices_objects(args: argparse.Namespace) -> list[Manifest]:
    from drasat.cli import resourceslices

    return resourceslices.objects(args)


def test_device_classes_can_be_left_out(render: Render) -> None:
    assert "DeviceClass" not in _v1(render, "deviceClasses.create=false").kinds()


# ---------------------------------------------------------------- what the chart refuses


@pytest.mark.parametrize(
    ("sets", "kube_version", "message"),
    [
        (["allocator=kube-scheduler"], "1.30.0",
         "allocator=kube-scheduler needs draApi=v1"),
        (["nodePlugin.kubeletApi=classic"], "1.34.0",
         "nodePlugin.kubeletApi=classic cannot serve draApi=v1"),
        (["allocator=kube-scheduler", "metrics.serviceMonitor.enabled=true"], "1.36.0",
         "installs no drasat controller"),
    ],
)  # fmt: skip
def test_validation_explains_bad_v1_combinations(
    render: Render, sets: list[str], kube_version: str, message: str
) -> None:
    rejected = render(*sets, kube_version=kube_version, api_versions=[SERVICE_MONITOR])
    assert rejected.returncode != 0
    assert message in rejected.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [("draApi=v2", "/draApi"), ("allocator=first-fit", "/allocator"),
     ("controller.deviceTaint=yes", "/controller/deviceTaint"),
     ("nodePlugin.shares=1", "/nodePlugin/shares"),
     ("nodePlugin.kubeletApi=v1", "/nodePlugin/kubeletApi")],
)  # fmt: skip
def test_schema_rejects_bad_v1_values(render: Render, setting: str, message: str) -> None:
    rejected = render(setting, kube_version="1.37.2")
    assert rejected.returncode != 0
    assert "values don't meet the specifications of the schema" in rejected.stderr
    assert message in rejected.stderr


@pytest.mark.parametrize(
    "taint_rule",
    [
        "resource.k8s.io/v1alpha3/DeviceTaintRule",  # 1.34/1.35 with their gates
        "resource.k8s.io/v1beta2/DeviceTaintRule",  # 1.36 with DRADeviceTaintRules
        "resource.k8s.io/v1/DeviceTaintRule",  # 1.37
    ],
)
def test_device_taint_where_the_cluster_serves_it_else_the_gate_alone(
    render: Render, taint_rule: str
) -> None:
    # helm install fills Capabilities.APIVersions from discovery, kinds included; a cluster
    # listing v1 DeviceClass but no DeviceTaintRule has the taint rules off (1.34-1.36's
    # defaults): drasat's scheduling gate alone keeps kube-scheduler's allocator off its pods.
    served = _v1(render, kube_version="1.34.0", api_versions=[DEVICE_CLASS, taint_rule])
    assert "--device-taint" in _container(served.one("Deployment"))["args"]
    gated = _v1(render, kube_version="1.34.0", api_versions=[DEVICE_CLASS])
    assert "--no-device-taint" in _container(gated.one("Deployment"))["args"]
    assert not any(r == "devicetaintrules" for _, r, _ in
                   _grants(gated.one("ClusterRole", "-controller")))  # fmt: skip
    assert gated.one("MutatingWebhookConfiguration")
    # what cannot work there is refused, with what to change
    forced = render("controller.deviceTaint=true", kube_version="1.34.0",
                    api_versions=[DEVICE_CLASS])  # fmt: skip
    assert forced.returncode != 0
    assert "This cluster (Kubernetes v1.34.0) serves no DeviceTaintRule" in forced.stderr
    assert "Leave controller.deviceTaint=auto" in forced.stderr
    ungated = render("controller.admission.mode=off", kube_version="1.34.0",
                     api_versions=[DEVICE_CLASS])  # fmt: skip
    assert ungated.returncode != 0
    assert "serves no DeviceTaintRule and controller.admission.mode=off" in ungated.stderr
    assert "allocator=kube-scheduler" in ungated.stderr
    # no taint wanted, or no drasat controller: nothing to check
    for setting in ("controller.deviceTaint=false", "allocator=kube-scheduler"):
        allowed = render(setting, kube_version="1.34.0", api_versions=[DEVICE_CLASS])
        assert allowed.returncode == 0, allowed.stderr
    # helm template without kinds cannot tell: the taint, as before (the controller logs if the
    # server does not serve it)
    assert "--device-taint" in _container(_v1(render).one("Deployment"))["args"]


#: The DeviceTaintRule `drasat controller --device-taint` keeps (see docs/INSTALL.md), in the
#: versions that serve it: v1alpha3 from 1.33, v1beta2 from 1.36, v1 from 1.37.
TAINT_RULE_SPEC: Manifest = {
    "deviceSelector": {"driver": "gpu.drasat.io"},
    "taint": {"key": "gpu.drasat.io/allocator", "value": "drasat", "effect": "NoSchedule"},
}


@pytest.mark.parametrize(
    ("kube", "api_version"),
    [("1.34", "v1alpha3"), ("1.35", "v1alpha3"), ("1.36", "v1alpha3"), ("1.36", "v1beta2"),
     ("1.37", "v1alpha3"), ("1.37", "v1beta2"), ("1.37", "v1")],
)  # fmt: skip
def test_the_device_taint_rule_is_valid_in_each_version_that_serves_it(
    kube: str, api_version: str
) -> None:
    rule = {
        "apiVersion": f"resource.k8s.io/{api_version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drasat-allocator"},
        "spec": TAINT_RULE_SPEC,
    }
    kubernetes_validate.validate(rule, kube, strict=True)


@pytest.mark.parametrize(("kube", "api_version"), [("1.35", "v1beta2"), ("1.36", "v1")])
def test_the_device_taint_rule_api_is_absent_before_its_version(
    kube: str, api_version: str
) -> None:
    # 1.35 has no beta DeviceTaintRule yet, 1.36 no GA one: the controller must pick a version
    # the server serves (docs/INSTALL.md's table).
    rule = {"apiVersion": f"resource.k8s.io/{api_version}", "kind": "DeviceTaintRule"}
    rule |= {"metadata": {"name": "drasat-allocator"}, "spec": TAINT_RULE_SPEC}
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(rule, kube, strict=True)


# ---------------------------------------------------------------- RBAC: only what is used


def test_v1_controller_rbac(render: Render) -> None:
    rendered = _v1(render)
    cluster = _grants(rendered.one("ClusterRole", "-controller"))
    resource = "resource.k8s.io"
    # what controller/v1controller.py and its parts (controller/cycle/) call: informers (list,
    # watch; the slices are the devices it allocates), the claim's finalizer
    # (patch), its status (update), a re-read after a conflict (get), the taint rule
    assert cluster == {
        *((resource, "resourceclaims", v) for v in ("get", "list", "watch", "patch")),
        (resource, "resourceclaims/status", "update"),
        (resource, "resourceclaims/binding", "update"),
        (resource, "deviceclasses", "list"), (resource, "deviceclasses", "watch"),
        (resource, "resourceslices", "list"), (resource, "resourceslices", "watch"),
        *((resource, "devicetaintrules", v) for v in ("get", "create", "update")),
        # the templates of pods converted from nvidia.com/gpu: made, and made again (read,
        # deleted, created) of the class that serves it now
        *((resource, "resourceclaimtemplates", v) for v in ("create", "get", "delete")),
        # pending pods; drasat's scheduling gate lifted (patch), the pod re-read on a conflict;
        # the pods of a claim that gives way to another tenant's on one GPU deleted
        *(("", "pods", v) for v in ("get", "list", "watch", "patch", "delete")),
        # preemption: victims evicted through the Eviction API, budgets read when choosing
        ("", "pods/eviction", "create"), ("policy", "poddisruptionbudgets", "list"),
        # a preemptor's nomination: status.nominatedNodeName
        ("", "pods/status", "patch"),
        # gangs from the Workload API's PodGroups, where served
        ("scheduling.k8s.io", "podgroups", "list"), ("scheduling.k8s.io", "podgroups", "watch"),
        # the admission webhook (helm template cannot tell MutatingAdmissionPolicy is served)
        *((resource, "resourceclaimtemplates", v) for v in ("get", "list", "watch")),
        ("", "nodes", "list"), ("", "nodes", "watch"),
        ("", "events", "create"), ("", "events", "patch"),
    }  # fmt: skip
    # classic DRA's objects and parameters are not the v1 controller's business
    assert not any(r.startswith("podschedulingcontexts") for _, r, _ in cluster)
    assert not any(g.startswith("gpu.") for g, _, _ in cluster)
    untainted = _grants(
        _v1(render, "controller.deviceTaint=false").one("ClusterRole", "-controller")
    )
    assert cluster - untainted == {
        (resource, "devicetaintrules", v) for v in ("get", "create", "update")
    }
    policy = _grants(
        _v1(render, "controller.admission.mode=policy").one("ClusterRole", "-controller")
    )
    assert cluster - policy == {(resource, "resourceclaimtemplates", v) for v in ("list", "watch")}
    assert (
        "--no-device-taint"
        in _container(_v1(render, "controller.deviceTaint=false").one("Deployment"))["args"]
    )
    # in the driver namespace, as in classic mode: NAS, Lease, policy ConfigMap
    namespaced = _grants(rendered.one("Role", "-controller"))
    assert {r for _, r, _ in namespaced} == {"nodeallocationstates", "leases", "configmaps"}


def test_v1_node_plugin_rbac(render: Render) -> None:
    cluster = _grants(_v1(render).one("ClusterRole", "-node-plugin"))
    assert cluster == {
        ("", "nodes", "get"),
        ("resource.k8s.io", "resourceclaims", "get"),
        *(("resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")),
    }
    classic = _grants(render().one("ClusterRole", "-node-plugin"))
    assert not any(r == "resourceslices" for _, r, _ in classic)


def test_kube_scheduler_allocator_installs_no_controller(render: Render) -> None:
    rendered = _v1(render, "allocator=kube-scheduler", api_versions=[VAP])
    kinds = rendered.kinds()
    assert not {"Deployment", "Service", "ConfigMap"} & set(kinds)
    names = [m["metadata"]["name"] for m in rendered.manifests]
    assert not [n for n in names if "controller" in n], names
    assert kinds.count("DeviceClass") == 3
    plugin = _container(rendered.one("DaemonSet", "-node-plugin"))["args"]
    assert "--resourceslices" in plugin
    validate_all(rendered.manifests, kube="1.37")


# ---------------------------------------------------------------- flags are the CLI's


def test_v1_node_plugin_flags_are_accepted_by_drasat(render: Render) -> None:
    daemonset = _v1(render, "nodePlugin.shares=false").one("DaemonSet", "-node-plugin")
    config = nodeplugin_cli.options(_parsed(_container(daemonset))).config
    assert config.kubelet_api.value == "structured"
    assert config.publish_slices and not config.slice_shares
    both = _v1(render, "nodePlugin.kubeletApi=both").one("DaemonSet", "-node-plugin")
    config = nodeplugin_cli.options(_parsed(_container(both))).config
    assert config.kubelet_api.value == "both" and config.slice_shares


@pytest.mark.parametrize("taint", [True, False])
def test_v1_controller_flags_are_accepted_by_drasat(
    render: Render, tmp_path: pathlib.Path, taint: bool
) -> None:
    deployment = _v1(render, f"controller.deviceTaint={str(taint).lower()}",
                     "controller.admission.mode=policy").one("Deployment")  # fmt: skip
    parsed = _parsed(_container(deployment))
    assert parsed.dra_api == "v1"
    assert parsed.device_taint is taint
    assert (parsed.batch_window, parsed.batch_max) == (0.05, 64)
    batch = {"controller": {"batch": {"windowSeconds": 1.5, "maxPods": 8}}}
    batched = _v1(render, values=batch, tmp=tmp_path)
    parsed = _parsed(_container(batched.one("Deployment")))
    assert (parsed.batch_window, parsed.batch_max) == (1.5, 8)


# ---------------------------------------------------------------- NOTES say which mode


def test_notes_say_which_mode_was_installed(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    v1 = _notes(helm, tmp_path / "a", "--kube-version", "1.36.0")
    assert "Mode: current DRA (resource.k8s.io/v1), chosen for Kubernetes v1.36.0." in v1
    assert "DeviceTaintRule drasat-allocator" in v1
    assert "kubectl get deviceclasses.resource.k8s.io gpu.drasat.io" in v1
    assert "logs deployment/r-drasat-controller" in v1
    scheduler = _notes(
        helm, tmp_path / "b", "--kube-version", "1.34.0", "--set", "allocator=kube-scheduler"
    )
    assert "Allocator: kube-scheduler (allocator=kube-scheduler, first-fit)" in scheduler
    assert "deployment" not in scheduler
    classic = _notes(helm, tmp_path / "c")
    assert "Mode: classic DRA (resource.k8s.io/v1alpha2), chosen for Kubernetes v1.30.0." in classic


def test_every_v1_value_is_in_the_schema() -> None:
    # test_helm_chart checks every key is commented and typed; these are the v1 ones
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert schema["draApi"]["enum"] == ["auto", "v1", "classic"]
    assert schema["allocator"]["enum"] == ["drasat", "kube-scheduler"]
    assert "deviceTaint" in schema["controller"]["properties"]
    assert "shares" in schema["nodePlugin"]["properties"]
