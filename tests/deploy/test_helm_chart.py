"""The Helm chart, checked with the real helm binary and the real Kubernetes schemas.

Every rendered manifest is validated: built-in kinds against the Kubernetes JSON schemas bundled
in kubernetes-validate, ours against the openAPIV3Schema of our CRDs.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
from typing import Any

import celpy
import chart_schema
import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_rendering import CHART, REPO, Manifest, Render, Rendered

from drasat.api import policy as policy_api
from drasat.cli import controller as controller_cli
from drasat.cli import main
from drasat.cli import nodeplugin as nodeplugin_cli

CRD_DIR = REPO / "deploy" / "crds"
SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD the chart ships."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def validate_all(manifests: list[Manifest], kube: str = "1.30") -> None:
    """Every manifest valid for Kubernetes `kube` (built-ins) or for our CRDs (our kinds)."""
    ours = _crd_schemas()
    for manifest in manifests:
        key = (manifest["apiVersion"], manifest["kind"])
        if key in ours:
            jsonschema.validate(manifest, ours[key])
        elif manifest["apiVersion"] == "monitoring.coreos.com/v1":
            # The Prometheus operator's CRD is not ours and not in Kubernetes: shape only.
            assert manifest["spec"]["endpoints"][0]["port"] == "metrics"
        else:
            kubernetes_validate.validate(manifest, kube, strict=True)


def _container(manifest: Manifest) -> Manifest:
    containers: list[Manifest] = manifest["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


# ---------------------------------------------------------------- lint and the default install


@pytest.mark.parametrize("values", [None, "non-default"])
def test_helm_lint_passes_strict(
    helm: pathlib.Path, tmp_path: pathlib.Path, values: str | None
) -> None:
    command = [str(helm), "lint", "--strict", str(CHART), "--namespace", "drasat"]
    command += ["--kube-version", "1.30.0"]
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(NON_DEFAULT))
        command += ["--values", str(path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in completed.stdout


def test_default_values_render_valid_manifests(render: Render) -> None:
    rendered = render()
    assert rendered.returncode == 0, rendered.stderr
    assert sorted(rendered.kinds()) == sorted(
        ["ServiceAccount", "ServiceAccount", "ConfigMap", "Service", "Deployment"]
        + ["DaemonSet"] * 2  # the node plugin and the MPS host
        + ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] * 2
        + ["DeviceClassParameters", "ResourceClass"]
        # helm template cannot see the cluster: the security policy is assumed served (GA 1.30)
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )
    validate_all(rendered.manifests)
    for manifest in rendered.manifests:
        if "namespace" in manifest["metadata"]:
            assert manifest["metadata"]["namespace"] == "drasat"


@pytest.mark.parametrize("kube", ["1.27", "1.28", "1.29", "1.30", "1.31"])
def test_manifests_are_valid_on_every_supported_kubernetes(render: Render, kube: str) -> None:
    rendered = render(kube_version=f"{kube}.0")
    assert rendered.returncode == 0, rendered.stderr
    validate_all(rendered.manifests, kube=kube)


def test_resource_class_names_our_driver_and_its_parameters(render: Render) -> None:
    rendered = render()
    resource_class = rendered.one("ResourceClass")
    parameters = rendered.one("DeviceClassParameters")
    assert resource_class["apiVersion"] == "resource.k8s.io/v1alpha2"
    assert resource_class["metadata"]["name"] == "gpu.drasat.io"
    assert resource_class["driverName"] == "gpu.drasat.io"
    assert resource_class["parametersRef"] == {
        "apiGroup": "gpu.drasat.io",
        "kind": "DeviceClassParameters",
        "name": parameters["metadata"]["name"],
    }
    assert parameters["spec"] == {"sharable": True}
    assert render("resourceClass.sharable=false").one("DeviceClassParameters")["spec"] == {
        "sharable": False
    }


def test_crds_ship_with_the_chart(render: Render) -> None:
    rendered = render(include_crds=True)
    crds = [m for m in rendered.manifests if m["kind"] == "CustomResourceDefinition"]
    assert sorted(c["spec"]["names"]["kind"] for c in crds) == [
        "DeviceClassParameters",
        "GpuClaimParameters",
        "MigDeviceClaimParameters",
        "NodeAllocationState",
    ]
    validate_all(crds)


def test_chart_crds_are_the_generated_ones() -> None:
    if not CRD_DIR.is_dir():
        pytest.skip("deploy/crds/ does not exist yet (generated by `drasat crds`)")
    generated = {p.name: p.read_bytes() for p in CRD_DIR.glob("*.yaml")}
    shipped = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert shipped == generated, (
        "the chart's CRDs are stale: cp deploy/crds/*.yaml deploy/helm/drasat/crds/"
    )


# ---------------------------------------------------------------- the two components


def test_controller_deployment(render: Render) -> None:
    deployment = render().one("Deployment", "-controller")
    container = _container(deployment)
    args = container["args"]
    assert args[:2] == ["--log-level=INFO", "controller"]
    assert "--leader-elect" in args
    assert "--leader-election-lease=drasat-controller" in args
    assert "--metrics-address=:8080" in args
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert container["resources"]["requests"] == {"cpu": "200m", "memory": "256Mi"}
    # Only the leader is ready, so a rolling update could never finish: replace, do not roll.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == "drasat-controller"


def _mounts(daemonset: Manifest) -> dict[str, tuple[Manifest, Manifest]]:
    """Volume name -> (volumeMount, volume) of the plugin container."""
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    return {m["name"]: (m, volumes[m["name"]]) for m in _container(daemonset)["volumeMounts"]}


def test_node_plugin_daemonset_mounts(render: Render) -> None:
    mounts = _mounts(render().one("DaemonSet", "-node-plugin"))
    plugin, plugin_volume = mounts["plugin-dir"]
    assert plugin["mountPath"] == plugin_volume["hostPath"]["path"]
    assert plugin["mountPath"] == "/var/lib/kubelet/plugins/gpu.drasat.io"
    registry, registry_volume = mounts["registry-dir"]
    assert registry["mountPath"] == registry_volume["hostPath"]["path"]
    assert registry["mountPath"] == "/var/lib/kubelet/plugins_registry"
    assert mounts["cdi-root"][1]["hostPath"]["path"] == "/var/run/cdi"
    driver, driver_volume = mounts["driver-root"]
    assert driver["readOnly"] is True and driver["mountPropagation"] == "HostToContainer"
    assert driver_volume["hostPath"]["path"] == "/"
    # Paths the plugin hands to the kubelet and the runtime are the same inside and outside.
    for name in ("plugin-dir", "registry-dir", "cdi-root", "state-dir"):
        assert mounts[name][0]["mountPath"] == mounts[name][1]["hostPath"]["path"], name
    # The plugin makes no mounts, so none may propagate back to the host.
    assert all(m.get("mountPropagation") != "Bidirectional" for m, _ in mounts.values())


def test_node_plugin_daemonset_runs_on_gpu_nodes_and_marks_not_ready_on_stop(
    render: Render,
) -> None:
    daemonset = render().one("DaemonSet", "-node-plugin")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    container = _container(daemonset)
    assert container["args"][:2] == ["--log-level=INFO", "nodeplugin"]
    assert "--node-name=$(NODE_NAME)" in container["args"]
    assert container["securityContext"]["privileged"] is True
    # drasat nodeplugin marks its NAS NotReady on SIGTERM; the hook sends it to PID 1 (the
    # image's exec-form ENTRYPOINT) before the kubelet does.
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sh", "-c", "kill -TERM 1"]
    assert pod["serviceAccountName"] == "drasat-node-plugin"


# ---------------------------------------------------------------- non-default values


NON_DEFAULT: Manifest = {
    "fullnameOverride": "gpu-alloc",
    "commonLabels": {"team": "ml-platform"},
    "image": {"repository": "registry.example/drasat", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": ["pull-secret"],
    "logLevel": "DEBUG",
    "policy": {
        "spec": {
            "objective": [{"term": "spread", "weight": 3}],
            "rules": {
                "reservations": [{"name": "reserve-team-a", "namespaces": ["team-a"], "count": 2}]
            },
        }
    },
    "controller": {
        "replicas": 2,
        "workers": 8,
        "extraArgs": ["--hold-ttl=60"],
        "leaderElection": {"leaseName": "gpu-alloc-leader"},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "priorityClassName": "system-cluster-critical",
    },
    "nodePlugin": {
        "kubeletDir": "/var/lib/k0s/kubelet/",
        "cdiRoot": "/etc/cdi",
        "driverRoot": "/run/nvidia/driver",
        # helm merges maps: null drops the default label
        "nodeSelector": {"gpu": "yes", "nvidia.com/gpu.present": None},
        "tolerations": [],
        "extraArgs": ["--gc-interval=30"],
        "orphanMig": "report",
    },
    "nodeAdmissionPolicy": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
}


def test_non_default_values_render_valid_manifests(render: Render, tmp_path: pathlib.Path) -> None:
    rendered = render(
        namespace="gpu-system", values=NON_DEFAULT, tmp=tmp_path, api_versions=[SERVICE_MONITOR]
    )
    assert rendered.returncode == 0, rendered.stderr
    validate_all(rendered.manifests)
    kinds = rendered.kinds()
    assert "ServiceMonitor" in kinds and "ValidatingAdmissionPolicy" in kinds
    for manifest in rendered.manifests:
        assert manifest["metadata"]["labels"]["team"] == "ml-platform"
        assert manifest["metadata"]["name"].startswith(("gpu-alloc", "gpu.drasat.io"))

    deployment = rendered.one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = _container(deployment)
    assert container["image"] == "registry.example/drasat:0.1.0-rc1"
    assert container["args"][0] == "--log-level=DEBUG"
    assert {"--workers=8", "--hold-ttl=60", "--leader-election-lease=gpu-alloc-leader"} <= set(
        container["args"]
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "pull-secret"}]
    assert pod["priorityClassName"] == "system-cluster-critical"

    daemonset = rendered.one("DaemonSet", "-node-plugin")
    mounts = _mounts(daemonset)
    assert mounts["plugin-dir"][0]["mountPath"] == "/var/lib/k0s/kubelet/plugins/gpu.drasat.io"
    assert mounts["registry-dir"][1]["hostPath"]["path"] == "/var/lib/k0s/kubelet/plugins_registry"
    assert mounts["cdi-root"][1]["hostPath"]["path"] == "/etc/cdi"
    assert mounts["driver-root"][1]["hostPath"]["path"] == "/run/nvidia/driver"
    assert "--driver-root=/run/nvidia/driver" in _container(daemonset)["args"]
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes"}
    assert "tolerations" not in daemonset["spec"]["template"]["spec"]
    assert {"--orphan-mig=report", "--gc-interval=30"} <= set(_container(daemonset)["args"])
    assert not any(a.startswith("--simulate-gpus") for a in _container(daemonset)["args"])

    lease_rule = [r for r in rendered.one("Role", "-controller")["rules"] if r.get("resourceNames")]
    assert ["gpu-alloc-leader"] in [r["resourceNames"] for r in lease_rule]
    assert rendered.one("ServiceMonitor")["metadata"]["labels"]["release"] == "prom"


def test_inline_policy_is_a_valid_allocation_policy(render: Render, tmp_path: pathlib.Path) -> None:
    rendered = render(values=NON_DEFAULT, tmp=tmp_path, api_versions=[SERVICE_MONITOR])
    text = rendered.one("ConfigMap", "-policy")["data"]["policy.yaml"]
    policy = policy_api.AllocationPolicy.model_validate(yaml.safe_load(text))
    assert policy.spec.rules.reservations[0].name == "reserve-team-a"
    assert [t.term.value for t in policy.spec.objective] == ["spread"]
    default = render().one("ConfigMap", "-policy")["data"]["policy.yaml"]
    assert policy_api.AllocationPolicy.model_validate(yaml.safe_load(default)).spec.objective


def test_existing_policy_config_map_is_used_not_created(render: Render) -> None:
    rendered = render("policy.existingConfigMap=site-gpu-policy", "policy.key=gpu.yaml")
    assert rendered.returncode == 0, rendered.stderr
    assert "ConfigMap" not in rendered.kinds()
    args = _container(rendered.one("Deployment"))["args"]
    assert "--policy-configmap=site-gpu-policy" in args and "--policy-key=gpu.yaml" in args
    rules = rendered.one("Role", "-controller")["rules"]
    assert {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["site-gpu-policy"],
            "verbs": ["get"]} in rules  # fmt: skip


def test_kubernetes_1_31_gets_a_v1alpha3_device_class(render: Render) -> None:
    rendered = render(kube_version="1.31.0")
    assert rendered.returncode == 0, rendered.stderr
    assert "ResourceClass" not in rendered.kinds()
    device_class = rendered.one("DeviceClass")
    assert device_class["apiVersion"] == "resource.k8s.io/v1alpha3"
    assert device_class["spec"]["config"][0]["opaque"]["driver"] == "gpu.drasat.io"
    validate_all(rendered.manifests, kube="1.31")
    classes = [r for r in rendered.one("ClusterRole", "-controller")["rules"]
               if "deviceclasses" in r["resources"]]  # fmt: skip
    assert classes, "the controller must read DeviceClasses on 1.31"


def test_values_schema_embeds_the_current_policy_schema() -> None:
    current = json.loads((CHART / "values.schema.json").read_text())
    assert current == chart_schema.synced(current), (
        "values.schema.json is stale: run .venv/bin/python tests/deploy/chart_schema.py"
    )


# ---------------------------------------------------------------- refusals


def test_refuses_the_default_namespace_with_an_explanation(render: Render) -> None:
    refused = render(namespace="default")
    assert refused.returncode != 0
    assert "refuses to install into the `default` namespace" in refused.stderr
    assert "--namespace drasat --create-namespace" in refused.stderr
    allowed = render("allowDefaultNamespace=true", namespace="default")
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # a wrong type names the value's path
        ("controller.workers=many", "/controller/workers"),
        ("controller.replicas=0", "/controller/replicas"),
        ("logLevel=LOUD", "/logLevel"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("nodePlugin.cdiRoot=var/run/cdi", "/nodePlugin/cdiRoot"),
        ("nodeAdmissionPolicy.enabled=maybe", "/nodeAdmissionPolicy/enabled"),
        ("resourceClass.apiVersion=resource.k8s.io/v1", "/resourceClass/apiVersion"),
        ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
        # the inline policy is checked against the AllocationPolicy schema
        ("policy.spec.objective[0].term=cheapest", "/policy/spec/objective/0/term"),
        ("policy.spec.rules.reservations[0].name=x", "missing property 'namespaces'"),
        ("policy.spec.solver.workers=0", "/policy/spec/solver/workers"),
        # a misspelt key is an error, not silently ignored
        ("controler.replicas=1", "controler"),
        ("nodePlugin.cdiDir=/etc/cdi", "cdiDir"),
    ],
)
def test_schema_rejects_bad_values(render: Render, setting: str, message: str) -> None:
    rejected = render(setting)
    assert rejected.returncode != 0
    assert "values don't meet the specifications of the schema" in rejected.stderr
    assert message in rejected.stderr


@pytest.mark.parametrize(
    ("sets", "kube_version", "message"),
    [
        (["controller.replicas=3", "controller.leaderElection.enabled=false"], "1.30.0",
         "needs controller.leaderElection.enabled=true"),
        (["resourceClass.apiVersion=resource.k8s.io/v1alpha2"], "1.31.0",
         "1.31 serves classic DRA as resource.k8s.io/v1alpha3"),
        (["metrics.serviceMonitor.enabled=true"], "1.30.0", "install the Prometheus operator"),
    ],
)  # fmt: skip
def test_validation_template_explains_bad_combinations(
    render: Render, sets: list[str], kube_version: str, message: str
) -> None:
    rejected = render(*sets, kube_version=kube_version)
    assert rejected.returncode != 0
    assert message in rejected.stderr


def test_kubernetes_versions_without_a_dra_api_drasat_speaks_are_refused(render: Render) -> None:
    rejected = render(kube_version="1.26.0")  # before DRA: Chart.yaml's kubeVersion
    assert rejected.returncode != 0
    assert "chart requires kubeVersion" in rejected.stderr
    for version in ("1.32.0", "1.33.5"):  # classic DRA removed, resource.k8s.io/v1 not yet GA
        rejected = render(kube_version=version)
        assert rejected.returncode != 0
        assert f"Kubernetes v{version} has neither DRA API drasat speaks" in rejected.stderr
        assert "classic DRA" in rejected.stderr and "removed in 1.32" in rejected.stderr


# ---------------------------------------------------------------- RBAC


def _all_renders(render: Render, tmp_path: pathlib.Path) -> list[Rendered]:
    return [
        render(api_versions=[VAP]),
        render(values=NON_DEFAULT, tmp=tmp_path, api_versions=[SERVICE_MONITOR]),
        render(kube_version="1.31.0"),
    ]


def test_rbac_lists_every_resource_and_verb_no_wildcards(
    render: Render, tmp_path: pathlib.Path
) -> None:
    for rendered in _all_renders(render, tmp_path):
        roles = [m for m in rendered.manifests if m["kind"] in ("Role", "ClusterRole")]
        assert len(roles) == 4
        for role in roles:
            for rule in role["rules"]:
                assert "nonResourceURLs" not in rule
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    for item in rule.get(field, []):
                        assert "*" not in item, f"{role['metadata']['name']}: {field} {item}"


def _grants(role: Manifest) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


WRITE = {"create", "update", "patch", "delete", "deletecollection"}


def test_node_plugin_may_write_only_node_allocation_states(render: Render) -> None:
    """...and Events in its own namespace (Warning Events on its NAS), created only."""
    rendered = render()
    cluster = _grants(rendered.one("ClusterRole", "-node-plugin"))
    assert cluster == {("", "nodes", "get"), ("resource.k8s.io", "resourceclaims", "get")}
    namespaced = _grants(rendered.one("Role", "-node-plugin"))
    writes = {(g, r, v) for g, r, v in namespaced if v in WRITE}
    assert {(g, r) for g, r, _ in writes} == {
        ("nas.gpu.drasat.io", "nodeallocationstates"),
        ("", "events"),
    }
    assert [v for g, r, v in writes if r == "events"] == ["create"]
    assert not any(v == "delete" for _, _, v in namespaced)


def test_controller_and_plugin_have_separate_roles_and_accounts(render: Render) -> None:
    rendered = render()
    bindings = [m for m in rendered.manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    subjects = {b["roleRef"]["name"]: b["subjects"][0]["name"] for b in bindings}
    assert subjects == {
        "drasat-controller": "drasat-controller",
        "drasat-node-plugin": "drasat-node-plugin",
    }
    controller = _grants(rendered.one("ClusterRole", "-controller"))
    assert ("resource.k8s.io", "resourceclaims/status", "update") in controller
    assert not any(r == "secrets" for _, r, _ in controller)
    # The controller's NAS access is namespaced, and it never creates or deletes NAS objects.
    nas = {
        v for g, r, v in _grants(rendered.one("Role", "-controller")) if r == "nodeallocationstates"
    }
    assert nas == {"get", "list", "watch", "update"}


def test_rbac_can_be_left_to_the_operator(render: Render) -> None:
    kinds = render("rbac.create=false").kinds()
    assert not {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} & set(kinds)


# ---------------------------------------------------------------- node admission policy


def test_node_admission_policy_follows_the_cluster(render: Render) -> None:
    # a real install's discovery (kinds listed) without the kind; helm template before 1.30
    served_kinds = ["resource.k8s.io/v1/DeviceClass"]
    assert (
        "ValidatingAdmissionPolicy"
        not in render(kube_version="1.34.0", api_versions=served_kinds).kinds()
    )
    assert "ValidatingAdmissionPolicy" not in render(kube_version="1.29.0").kinds()
    # helm template from 1.30 on: GA there, so assumed (the security controls stay in a GitOps
    # render), and the NOTES say so
    assert "ValidatingAdmissionPolicy" in render(kube_version="1.34.0").kinds()
    rendered = render(api_versions=[VAP])
    validate_all(rendered.manifests)
    policy = rendered.one("ValidatingAdmissionPolicy")
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert "system:serviceaccount:drasat:drasat-node-plugin" in condition
    binding = rendered.one("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert (
        "ValidatingAdmissionPolicy"
        not in render("nodeAdmissionPolicy.enabled=false", api_versions=[VAP]).kinds()
    )


# ---------------------------------------------------------------- values.yaml and NOTES.txt


def _schema_paths(schema: Manifest, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of every key our schema describes with its own properties (not passthroughs)."""
    out = []
    for name, sub in schema.get("properties", {}).items():
        if name == "global":
            continue
        out.append((*prefix, name))
        out.extend(_schema_paths(sub, (*prefix, name)))
    return out


def _commented_keys(text: str) -> dict[tuple[str, ...], bool]:
    """Key path -> whether a comment line sits right above it (block-style keys only)."""
    out: dict[tuple[str, ...], bool] = {}
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in text.splitlines():
        match = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if match:
            indent, key = len(match.group(1)), match.group(2)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            out[tuple(k for _, k in stack)] = previous.lstrip().startswith("#")
        if line.strip():
            previous = line
    return out


def test_every_values_key_is_commented_and_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    commented = _commented_keys((CHART / "values.yaml").read_text())
    paths = _schema_paths(schema)
    missing = [".".join(p) for p in paths if p not in commented]
    assert not missing, f"in values.schema.json but not in values.yaml: {missing}"
    uncommented = [".".join(p) for p in paths if not commented[p]]
    assert not uncommented, f"values.yaml keys without a comment: {uncommented}"
    described = [(), *(p for p in paths if "properties" in _at(schema, p))]
    unknown = [".".join(p) for p in commented if p not in paths and p[:-1] in described]
    assert not unknown, f"in values.yaml but not described by values.schema.json: {unknown}"


def _at(schema: Manifest, path: tuple[str, ...]) -> Manifest:
    for name in path:
        schema = schema["properties"][name]
    return schema


def _notes(helm: pathlib.Path, tmp_path: pathlib.Path, *extra: str) -> str:
    # helm renders NOTES.txt only on install; render it as a template of a copy of the chart.
    chart = tmp_path / "drasat"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "notes.check" -}}\n' + notes + "{{- end -}}\n"
    )
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ include "notes.check" . | toJson }}\n'
    )
    completed = subprocess.run(
        [str(helm), "template", "r", str(chart), "-n", "gpu-system", "--kube-version", "1.30.0",
         "--show-only", "templates/notes.yaml", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    notes: str = yaml.safe_load(completed.stdout)["data"]["notes"]
    return notes


def test_notes_tell_the_user_how_to_check_the_install(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    text = _notes(helm, tmp_path, "--api-versions", VAP)
    assert "kubectl -n gpu-system get deployment,daemonset,pods" in text
    assert "get nodeallocationstates.nas.gpu.drasat.io" in text
    assert "kubectl get resourceclasses.resource.k8s.io gpu.drasat.io" in text
    assert "logs deployment/r-drasat-controller" in text
    assert "node admission policy was not created" not in text


def test_notes_warn_when_the_node_admission_policy_is_missing(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    text = _notes(helm, tmp_path, "--api-versions", "resource.k8s.io/v1/DeviceClass")
    assert "the node admission policy was not created (this cluster does not serve" in text
    older = _notes(helm, tmp_path / "older", "--kube-version", "1.29.0")
    assert "not created (Kubernetes v1.29.0 is older than 1.30, where" in older
    assumed = _notes(helm, tmp_path / "assumed", "--kube-version", "1.34.0")
    assert "Rendered without the cluster's APIs" in assumed
    assert "- ValidatingAdmissionPolicy v1 (GA since 1.30): the security policies are" in assumed
    assert "node admission policy was not created" not in assumed


# ---------------------------------------------------------------- the admission policy's CEL


def _admission(rendered: Rendered) -> Any:
    """A function (request, object, oldObject) -> None (admitted) or the denial message."""
    spec = rendered.one("ValidatingAdmissionPolicy")["spec"]
    env = celpy.Environment()

    def compile_(text: str) -> Any:
        return env.program(env.compile(text))

    condition = compile_(spec["matchConditions"][0]["expression"])
    variables = [(v["name"], compile_(v["expression"])) for v in spec["variables"]]
    checks = [(compile_(v["expression"]), v) for v in spec["validations"]]

    def admit(request: Manifest, obj: Manifest | None, old: Manifest | None) -> str | None:
        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
        }
        if not bool(condition.evaluate(activation)):
            return None
        activation["variables"] = celpy.json_to_cel(
            {name: str(program.evaluate(activation)) for name, program in variables}
        )
        for program, validation in checks:
            if not bool(program.evaluate(activation)):
                if "messageExpression" in validation:
                    return str(compile_(validation["messageExpression"]).evaluate(activation))
                return str(validation["message"])
        return None

    return admit


PLUGIN_USER = "system:serviceaccount:drasat:drasat-node-plugin"


def _request(operation: str, name: str, node: str | None, user: str = PLUGIN_USER) -> Manifest:
    extra = {} if node is None else {"authentication.kubernetes.io/node-name": [node]}
    return {"operation": operation, "name": name, "userInfo": {"username": user, "extra": extra}}


def _nas(allocated: Manifest | None = None, prepared: Manifest | None = None) -> Manifest:
    spec: Manifest = {"allocatableDevices": []}
    if allocated is not None:
        spec["allocatedClaims"] = allocated
    if prepared is not None:
        spec["preparedClaims"] = prepared
    return {"metadata": {"name": "n"}, "spec": spec}


CLAIM = {"uid-1": {"claimInfo": {"namespace": "a", "name": "c", "uid": "uid-1"}}}


def test_admission_policy_lets_a_plugin_write_only_its_own_nodes_nas(render: Render) -> None:
    admit = _admission(render(api_versions=[VAP]))
    # its own node: create, update (prepared claims, status), delete
    assert admit(_request("CREATE", "node-a", "node-a"), _nas(), None) is None
    own_update = admit(_request("UPDATE", "node-a", "node-a"), _nas(CLAIM, CLAIM), _nas(CLAIM))
    assert own_update is None
    assert admit(_request("DELETE", "node-a", "node-a"), None, _nas()) is None
    # another node's NAS, or a token without the node claim
    denied = admit(_request("UPDATE", "node-b", "node-a"), _nas(), _nas())
    assert denied is not None and 'on node "node-a" may write only' in denied
    assert 'not "node-b"' in denied
    assert admit(_request("DELETE", "node-b", "node-a"), None, _nas()) is not None
    assert admit(_request("CREATE", "node-a", None), _nas(), None) is not None
    # the controller's part of the object
    changed = admit(_request("UPDATE", "node-a", "node-a"), _nas(), _nas(CLAIM))
    assert changed == "spec.allocatedClaims is written by the drasat controller only"
    created = admit(_request("CREATE", "node-a", "node-a"), _nas(CLAIM), None)
    assert created == "a node plugin creates its NodeAllocationState without allocatedClaims"
    # other users (the controller) are not this policy's business
    controller = "system:serviceaccount:drasat:drasat-controller"
    assert admit(_request("UPDATE", "node-b", None, controller), _nas(CLAIM), _nas()) is None


# ---------------------------------------------------------------- the flags are the CLI's


def _parsed(container: Manifest) -> Any:
    """The container's args parsed by the real `drasat` parser, env references filled in."""
    env = {"NODE_NAME": "gpu-node-1", "POD_NAMESPACE": "drasat", "POD_NAME": "drasat-0"}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
    return main.build_parser().parse_args(args)


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["default", "non-default"])
def test_chart_flags_are_accepted_by_drasat(
    render: Render, tmp_path: pathlib.Path, values: Manifest
) -> None:
    rendered = render(values=values, tmp=tmp_path, api_versions=[SERVICE_MONITOR])
    controller = _parsed(_container(rendered.one("Deployment")))
    options = controller_cli.options(controller)
    assert options.namespace == "drasat" and options.leader_elect
    assert options.policy_configmap == rendered.one("ConfigMap", "-policy")["metadata"]["name"]
    plugin = nodeplugin_cli.options(
        _parsed(_container(rendered.one("DaemonSet", "-node-plugin")))
    ).config
    mounts = {
        m["mountPath"]
        for m in _container(rendered.one("DaemonSet", "-node-plugin"))["volumeMounts"]
    }
    assert plugin.node_name == "gpu-node-1"
    # the plugin's socket dir <plugin dir>/gpu.drasat.io, its registry, CDI and state dirs are
    # all mounted where it will look
    assert str(plugin.plugin_dir / "gpu.drasat.io") in mounts
    assert {str(plugin.registry_dir), str(plugin.cdi_root), str(plugin.state_dir)} <= mounts


def test_node_plugin_can_run_on_a_simulated_fleet(render: Render) -> None:
    # For trying the chart on a cluster without GPUs; the CLI checks the fleet text.
    daemonset = render("nodePlugin.simulateGpus=2xA100-40GB\\,mig=all").one(
        "DaemonSet", "-node-plugin"
    )
    options = nodeplugin_cli.options(_parsed(_container(daemonset)))
    assert options.simulate_gpus == "2xA100-40GB,mig=all"


def test_the_mps_host_runs_the_daemons_beside_the_plugin(render: Render) -> None:
    """The MPS daemons run in a DaemonSet of their own (so they outlive the plugin's pod), on
    the plugin's nodes, without API access, replaced only when deleted; the plugin is pointed at
    its socket in the state folder both mount at the same path."""
    rendered = render()
    plugin = rendered.one("DaemonSet", "-node-plugin")
    host = rendered.one("DaemonSet", "-mps-host")
    plugin_pod, host_pod = plugin["spec"]["template"]["spec"], host["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        assert host_pod[key] == plugin_pod[key], key
    assert host["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert host_pod["automountServiceAccountToken"] is False
    assert host_pod["shareProcessNamespace"] is True  # pause reaps the orphans, not drasat
    assert _container(host)["securityContext"]["privileged"] is True
    args = _parsed(_container(host))
    assert (args.command, args.state_dir, args.simulate) == ("mps-host", "/var/lib/drasat", False)
    options = nodeplugin_cli.options(_parsed(_container(plugin)))
    assert options.mps_host_socket == "/var/lib/drasat/mps-host.sock"
    host_mounts = {m["name"]: m["mountPath"] for m in _container(host)["volumeMounts"]}
    assert host_mounts["state-dir"] == str(options.config.state_dir)
    validate_all(rendered.manifests)


def test_the_mps_host_follows_the_simulated_fleet_and_can_be_left_out(render: Render) -> None:
    simulated = render("nodePlugin.simulateGpus=T4").one("DaemonSet", "-mps-host")
    assert _parsed(_container(simulated)).simulate is True
    rendered = render("nodePlugin.mpsHost.enabled=false")
    assert rendered.kinds().count("DaemonSet") == 1
    plugin = nodeplugin_cli.options(_parsed(_container(rendered.one("DaemonSet"))))
    assert plugin.mps_host_socket == ""
