"""`-f` manifests in v1 terms: claims, templates and DeviceClasses (v1, v1beta2, v1beta1),
opaque configs, NVIDIA's quickstart shapes, what drasat does not support, and the whole run."""

from __future__ import annotations

import json
import pathlib
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from checker import make_gpus

from drasat import loading
from drasat.api.devicemodel import pool
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.api.inputerrors import InputError
from drasat.api.policy import AllocationPolicySpec
from drasat.whatif import v1manifests, v1run
from drasat.whatif.run import _manifest_paths

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    from conftest import RunCli, WriteYaml

REPO = pathlib.Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"
NVIDIA_SLICES = str(QUICKSTART / "cluster/nvidia-slices.yaml")


def parse(text: str, source: str = "app.yaml") -> list[loading.Document]:
    return loading.parse_documents(textwrap.dedent(text), source)


def compile_text(text: str, **options: Any) -> v1manifests.V1Workload:
    return v1manifests.compile_v1(parse(text), **options)


TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: one-gpu}
spec:
  metadata:
    labels: {team: vision}
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: trainer, uid: 11111111-2222-3333-4444-555555555555}
spec:
  containers: [{name: c, resources: {claims: [{name: gpu}]}}]
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
"""


# ---------------------------------------------------------------- claims from templates


def test_a_template_claim_is_made_as_the_resourceclaim_controller_makes_it() -> None:
    workload = compile_text(TEMPLATE)
    (pod,) = workload.pods
    ((pod_claim, claim),) = pod.claims
    name = claim.name
    assert pod_claim == "gpu" and claim.template == "one-gpu"
    # generateName `<pod>-<podClaimName>-` plus 5 characters of Kubernetes' suffix alphabet.
    assert name.startswith("trainer-gpu-") and len(name) == len("trainer-gpu-") + 5
    assert set(name[-5:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    metadata = claim.obj["metadata"]
    assert metadata["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert metadata["labels"] == {"team": "vision"}
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": "11111111-2222-3333-4444-555555555555",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim.obj["spec"] == {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
    }
    assert pod.obj["status"] == {
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": name}]
    }
    # Same input, same name: runs agree.
    assert compile_text(TEMPLATE).pods[0].claims[0][1].name == name


def test_a_long_generate_name_is_cut_to_57_characters() -> None:
    name = v1manifests.generated_name("p" * 60, "claim", "seed")
    assert name[:57] == "p" * 57 and name[57] == "-" and len(name) == 63


_READ_BACK_STATUS = (
    "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n",
    "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n"
    "status:\n  resourceClaimStatuses: [{name: gpu, resourceClaimName: trainer-gpu-abcde}]\n",
)


def test_a_pod_to_apply_gets_a_claim_made_whatever_its_status_names() -> None:
    """A pod of the -f files is one to apply: the API server drops its status on create, so
    the resourceclaim controller makes its claim from the template."""
    (pod,) = compile_text(TEMPLATE.replace(*_READ_BACK_STATUS)).pods
    ((_, found),) = pod.claims
    assert found.template == "one-gpu" and found.name != "trainer-gpu-abcde"
    assert "status" not in pod.obj or "nominatedNodeName" not in pod.obj["status"]


def test_a_live_pod_keeps_the_claim_its_status_names() -> None:
    text = TEMPLATE.replace(
        "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n",
        "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n"
        "status:\n  resourceClaimStatuses: [{name: gpu, resourceClaimName: trainer-gpu-abcde}]\n",
    )
    claim = """
    ---
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {namespace: ml, name: trainer-gpu-abcde, uid: c1}
    spec:
      devices:
        requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
    status:
      allocation:
        devices:
          results: [{request: gpu, driver: gpu.nvidia.com, pool: n, device: gpu-0}]
    """
    (pod,) = v1manifests.compile_v1(
        parse(text + textwrap.dedent(claim), v1manifests.LIVE_SOURCE)
    ).pods
    ((_, found),) = pod.claims
    assert (found.name, found.obj["metadata"]["uid"], found.template) == (
        "trainer-gpu-abcde",
        "c1",
        None,
    )
    assert pod.pending() == ()


# ---------------------------------------------------------------- versions and classes


def test_v1beta1_requests_are_read_in_v1_shape() -> None:
    text = """
    apiVersion: resource.k8s.io/v1beta1
    kind: ResourceClaim
    metadata: {name: two}
    spec:
      devices:
        requests:
        - {name: gpus, deviceClassName: gpu.drasat.io, allocationMode: ExactCount, count: 2}
        - name: any
          firstAvailable:
          - {name: gpu, deviceClassName: gpu.drasat.io}
          - {name: cpu, deviceClassName: cpu-fallback.drasat.io}
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: p}
    spec:
      containers: [{name: c}]
      resourceClaims: [{name: c, resourceClaimName: two}]
    """
    (claim,) = compile_text(text).claims.values()
    assert claim.obj["apiVersion"] == "resource.k8s.io/v1"
    assert claim.obj["spec"]["devices"]["requests"] == [
        {
            "name": "gpus",
            "exactly": {
                "deviceClassName": "gpu.drasat.io",
                "allocationMode": "ExactCount",
                "count": 2,
            },
        },
        {
            "name": "any",
            "firstAvailable": [
                {"name": "gpu", "deviceClassName": "gpu.drasat.io"},
                {"name": "cpu", "deviceClassName": "cpu-fallback.drasat.io"},
            ],
        },
    ]
    assert claim.obj["metadata"]["namespace"] == "default"


def test_nvidia_and_drasat_classes_are_built_in_and_manifests_replace_them() -> None:
    classes = compile_text(TEMPLATE).classes
    assert classes["gpu.nvidia.com"]["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ],
        "extendedResourceName": "nvidia.com/gpu",
    }
    assert "mig.nvidia.com" in classes and "mig.drasat.io" in classes
    own = """
    ---
    apiVersion: resource.k8s.io/v1beta2
    kind: DeviceClass
    metadata: {name: gpu.nvidia.com}
    spec:
      selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com'"}}]
    """
    replaced = compile_text(TEMPLATE + textwrap.dedent(own)).classes["gpu.nvidia.com"]
    assert replaced["apiVersion"] == "resource.k8s.io/v1"
    assert replaced["spec"] == {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
    }


# ---------------------------------------------------------------- NVIDIA's quickstart


def quickstart() -> list[loading.Document]:
    return [d for p in _manifest_paths(str(QUICKSTART)) for d in loading.read_documents(p)]


def test_nvidias_quickstart_shapes_are_accepted_unchanged() -> None:
    workload = v1manifests.compile_v1(quickstart())
    per_namespace: dict[str, int] = {}
    for pod in workload.pods:
        per_namespace[pod.instance.namespace] = per_namespace.get(pod.instance.namespace, 0) + 1
    assert per_namespace == {
        "gpu-test1": 2,
        "gpu-test2": 1,
        "gpu-test3": 2,
        "gpu-test4": 4,
        "gpu-test5": 1,
        "gpu-test6": 4,
        "gpu-test-mps": 1,
    }
    # gpu-test3: one ResourceClaim shared by two pods is one claim; the others one per pod.
    assert len(workload.claims) == 14
    shared = [p.claims[0][1].key for p in workload.pods if p.instance.namespace == "gpu-test3"]
    assert shared == ["gpu-test3/single-gpu", "gpu-test3/single-gpu"]
    assert {i.what.split()[0] for i in workload.ignored} == {"Namespace"}


# ---------------------------------------------------------------- unsupported


VFIO = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: vfio, name: single-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: vfio.gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {namespace: vfio, name: pod1}
spec:
  containers: [{name: c}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: single-gpu}]
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            VFIO,
            "app.yaml: document 1: ResourceClaimTemplate vfio/single-gpu: "
            "spec.spec.devices.requests[0].exactly.deviceClassName: vfio.gpu.nvidia.com (VFIO "
            "passthrough) is not supported by drasat (--skip-unsupported leaves out this file "
            "and places the rest)",
        ),
        (
            """
            apiVersion: resource.k8s.io/v1
            kind: ResourceClaim
            metadata: {namespace: imex, name: channel}
            spec:
              devices:
                requests: [{name: channel, exactly: {deviceClassName: imex.nvidia.com}}]
            """,
            "app.yaml: document 1: ResourceClaim imex/channel: "
            "spec.devices.requests[0].exactly.deviceClassName: imex.nvidia.com (IMEX channels) "
            "is not supported by drasat",
        ),
        (
            """
            apiVersion: resource.nvidia.com/v1beta1
            kind: ComputeDomain
            metadata: {namespace: cd, name: domain}
            spec: {numNodes: 2, channel: {resourceClaimTemplate: {name: ch}}}
            """,
            "app.yaml: document 1: ComputeDomain cd/domain: kind: ComputeDomain "
            "(ComputeDomains) is not supported by drasat",
        ),
        (
            """
            apiVersion: resource.k8s.io/v1
            kind: ResourceClaimTemplate
            metadata: {name: cfg}
            spec:
              spec:
                devices:
                  requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
                  config:
                  - requests: [gpu]
                    opaque:
                      driver: gpu.nvidia.com
                      parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: VfioDeviceConfig}
            """,
            "app.yaml: document 1: ResourceClaimTemplate cfg: "
            "spec.spec.devices.config[0].opaque.parameters.kind: VfioDeviceConfig (VFIO "
            "passthrough) is not supported by drasat",
        ),
        (
            """
            apiVersion: resource.k8s.io/v1
            kind: DeviceClass
            metadata: {name: my-channels}
            spec:
              selectors:
              - cel: {expression: "device.driver == 'compute-domain.nvidia.com'"}
            ---
            apiVersion: resource.k8s.io/v1
            kind: ResourceClaim
            metadata: {name: mine}
            spec:
              devices:
                requests:
                - name: ch
                  firstAvailable: [{name: a, deviceClassName: my-channels}]
            """,
            "app.yaml: document 2: ResourceClaim mine: "
            "spec.devices.requests[0].firstAvailable[0].deviceClassName: my-channels "
            "(ComputeDomains (IMEX channels)) is not supported by drasat",
        ),
    ],
)
def test_what_drasat_does_not_support_is_refused_naming_file_object_and_field(
    text: str, message: str
) -> None:
    with pytest.raises(v1manifests.Unsupported) as error:
        compile_text(text)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_skip_unsupported_leaves_out_the_file_and_the_pods_that_need_it() -> None:
    other = """
    apiVersion: v1
    kind: Pod
    metadata: {namespace: vfio, name: pod2}
    spec:
      containers: [{name: c}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: single-gpu}]
    """
    documents = parse(VFIO, "vfio.yaml") + parse(other, "other.yaml") + parse(TEMPLATE, "ok.yaml")
    workload = v1manifests.compile_v1(documents, skip_unsupported=True)
    assert [p.key for p in workload.pods] == ["ml/trainer"]
    reasons = {(i.where, i.what): i.reason for i in workload.ignored}
    assert reasons[("vfio.yaml: document 2", "Pod vfio/pod1")].startswith(
        "left out with its file (vfio.yaml: document 1: ResourceClaimTemplate vfio/single-gpu: "
        "spec.spec.devices.requests[0].exactly.deviceClassName: vfio.gpu.nvidia.com"
    )
    assert reasons[("other.yaml: document 1: Pod vfio/pod2", "Pod vfio/pod2")] == (
        "its ResourceClaimTemplate vfio/single-gpu was left out with vfio.yaml"
    )


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("gpu.nvidia.com}", "gpu.nvidia.con}"),
            "app.yaml: document 1: ResourceClaimTemplate ml/one-gpu: "
            "spec.spec.devices.requests[0].exactly.deviceClassName: no DeviceClass "
            "gpu.nvidia.con (in the manifests or built in: cpu-fallback.drasat.io, "
            "gpu.drasat.io, gpu.nvidia.com, mig.drasat.io, mig.nvidia.com)",
        ),
        (
            ("exactly: {deviceClassName", "exactly: {devicClassName"),
            "app.yaml: document 1: ResourceClaimTemplate ml/one-gpu: "
            "spec.spec.devices.requests[0].exactly.devicClassName: strict decoding error: "
            'unknown field "spec.spec.devices.requests[0].exactly.devicClassName"',
        ),
        (
            (
                "- name: gpu\n",
                "- name: gpu\n        firstAvailable: [{name: a, deviceClassName: x}]\n",
            ),
            "spec.spec.devices.requests[0]: exactly one of exactly or firstAvailable must be set",
        ),
        (
            ("resourceClaimTemplateName: one-gpu}", "resourceClaimTemplateName: none}"),
            "app.yaml: document 2: Pod ml/trainer: spec.resourceClaims[0]."
            "resourceClaimTemplateName: ResourceClaimTemplate ml/none is not in the manifests",
        ),
        (
            (
                "apiVersion: resource.k8s.io/v1\n",
                "apiVersion: resource.k8s.io/v1\n---\n"
                "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClass\nmetadata: {name: c}\n"
                "driverName: gpu.drasat.io\n---\napiVersion: resource.k8s.io/v1\n",
            ),
            "app.yaml: document 2: ResourceClass c: apiVersion: resource.k8s.io/v1alpha2 is "
            "classic DRA; these manifests also hold resource.k8s.io/v1 objects",
        ),
    ],
)
def test_bad_claims_are_refused_naming_file_object_and_field(
    change: tuple[str, str], message: str
) -> None:
    text = textwrap.dedent(TEMPLATE).replace(*change, 1)
    with pytest.raises(InputError) as error:
        v1manifests.compile_v1(loading.parse_documents(text, "app.yaml"))
    assert message in str(error.value)


def test_a_bad_opaque_config_names_its_field() -> None:
    text = """
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {name: c}
    spec:
      devices:
        requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
        config:
        - opaque:
            driver: gpu.nvidia.com
            parameters:
              apiVersion: resource.nvidia.com/v1beta1
              kind: GpuConfig
              sharing: {strategy: Sometimes}
    """
    with pytest.raises(InputError) as error:
        compile_text(text)
    assert str(error.value).startswith(
        "app.yaml: document 1: ResourceClaim default/c: spec.devices.config[0].opaque."
        "parameters.sharing.strategy: "
    )


# ---------------------------------------------------------------- the whole run


def test_nvidia_slices_and_quickstart_through_the_cli(run_cli: RunCli) -> None:
    # gpu-test1's two pods on NVIDIA's slices: two different healthy T4s (gpu-2 has an XID
    # taint), named as NVIDIA names them, and the node's taint is tolerated by the pods.
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", str(QUICKSTART / "gpu-test1.yaml"))
    assert result.code == 0, result.err
    rows = [line.split() for line in result.out.splitlines()[1:3]]
    assert [r[:3] for r in rows] == [
        ["gpu-test1/pod1", "gpu", "nv-t4"],
        ["gpu-test1/pod2", "gpu", "nv-t4"],
    ]
    assert sorted(r[4] for r in rows) == ["gpu-0", "gpu-1"]


def test_a_node_taint_the_pod_does_not_tolerate_keeps_it_off(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    app = write_yaml("app.yaml", TEMPLATE)
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", app, "-o", "yaml")
    assert result.code == 0, result.err
    assert (
        "no node admits the pod: nv-t4: untolerated taint nvidia.com/gpu=present:NoSchedule"
        in result.out
    )


def test_unsupported_is_exit_2_and_skip_places_the_rest(
    run_cli: RunCli, write_yaml: WriteYaml, tmp_path: pathlib.Path
) -> None:
    write_yaml("a-vfio.yaml", VFIO)
    write_yaml(
        "b-ok.yaml",
        TEMPLATE.replace(
            "  resourceClaims:", "  tolerations: [{operator: Exists}]\n  resourceClaims:"
        ),
    )
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", str(tmp_path))
    assert result.code == 2
    assert result.err.startswith(
        f"error: {tmp_path}/a-vfio.yaml: document 1: ResourceClaimTemplate"
    )
    assert result.err.count("\n") == 1
    result = run_cli(
        "--cluster", NVIDIA_SLICES, "-f", str(tmp_path), "--skip-unsupported", "-o", "wide"
    )
    assert result.code == 0, result.err
    assert "ml/trainer" in result.out and "nv-t4" in result.out
    assert "ignored: Pod vfio/pod1" in result.out


def test_existing_allocations_of_nvidia_devices_take_their_gpu() -> None:
    # A claim already allocated on NVIDIA's gpu-0 enters the node's ledger under drasat's
    # terms, so gpu-0 is taken and the new pod gets gpu-1.
    from drasat import solver
    from drasat.solver.problem import SolveParams
    from drasat.whatif import clusternodes

    held = """
    ---
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {namespace: ml, name: held, uid: held-uid}
    spec:
      devices:
        requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
    status:
      allocation:
        devices:
          results: [{request: gpu, driver: gpu.nvidia.com, pool: nv-t4, device: gpu-0}]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {namespace: ml, name: running}
    spec:
      nodeName: nv-t4
      containers: [{name: c, resources: {requests: {cpu: "30"}}}]
      resourceClaims: [{name: gpu, resourceClaimName: held}]
    """
    text = TEMPLATE.replace(
        "  resourceClaims:", "  tolerations: [{operator: Exists}]\n  resourceClaims:"
    )
    # Read back from the cluster: a claim of the -f files has its status dropped.
    workload = v1manifests.compile_v1(parse(text + textwrap.dedent(held), v1manifests.LIVE_SOURCE))
    cluster = clusternodes.load(loading.read_documents(NVIDIA_SLICES))
    (t4,) = [n for n in v1run.node_inputs(cluster, workload) if n.state.name == "nv-t4"]
    assert t4.state.used_cpu_milli == 30_000
    assert [a.gpus[0] for a in t4.state.ledger.allocated.values() if a.gpus] == [
        cluster.devices["nv-t4"]["gpu-0"].gpu_uuid
    ]
    result = v1run.run_v1(
        cluster,
        workload,
        policy=AllocationPolicySpec(),
        params=SolveParams(),
        solve=solver.solve,
    )
    (allocation,) = result.outcome.allocations.values()
    assert allocation.node == "nv-t4"
    assert [r["device"] for r in allocation.allocation["devices"]["results"]] == ["gpu-1"]


def test_a_live_claim_of_a_missing_class_leaves_its_pod_out_instead_of_failing() -> None:
    text = """
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {namespace: ml, name: nic, uid: u1}
    spec:
      devices:
        requests: [{name: nic, exactly: {deviceClassName: dra.net}}]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {namespace: ml, name: router}
    spec:
      containers: [{name: c}]
      resourceClaims: [{name: nic, resourceClaimName: nic}]
    """
    documents = parse(text, v1manifests.LIVE_SOURCE)
    workload = v1manifests.compile_v1(documents)
    assert workload.pods == () and workload.claims == {}
    reasons = {i.what: i.reason for i in workload.ignored}
    assert reasons["Pod ml/router"].startswith(
        "spec.devices.requests[0].exactly.deviceClassName: no DeviceClass dra.net"
    )
    with pytest.raises(InputError, match=r"no DeviceClass dra\.net"):
        v1manifests.compile_v1(parse(text))  # the same written by the user is bad input


LAB = str(REPO / "deploy/examples/clusters/lab.yaml")


def _table(run_cli: RunCli, *argv: str) -> list[list[str]]:
    result = run_cli(*argv)
    assert result.code == 0, result.err
    lines = result.out.split("\n\n", 1)[0].splitlines()[1:]
    return [line.split(None, 3) for line in lines]


def test_drasats_v1_examples_on_the_compact_lab_cluster(run_cli: RunCli) -> None:
    examples = REPO / "deploy/examples"
    # Two shares of one GPU by consumable capacity: one node, the same GPU, 4Gi and 25% each.
    rows = _table(run_cli, "--cluster", LAB, "-f", str(examples / "v1-shared-gpu"))
    assert len(rows) == 2 and rows[0][2] == rows[1][2]
    assert rows[0][3].split(" (")[0] == rows[1][3].split(" (")[0]
    assert all("(share 25%, 4Gi of GPU " in r[3] for r in rows)
    # gpu-test4's shape: four MIG devices of one parent GPU, no two overlapping.
    ((_, _, node, devices),) = _table(
        run_cli, "--cluster", LAB, "-f", str(examples / "v1-mig-by-profile")
    )
    names = [part.split(": ")[1] for part in devices.split("; ")]
    assert node == "a100-node" and len({n.split("-mig-")[0] for n in names}) == 1
    profiles = sorted(n.split("-")[3] for n in names)
    assert profiles == ["1g5gb", "1g5gb", "2g10gb", "3g20gb"]


def test_classic_manifests_on_slices_honour_the_nodes_taints(run_cli: RunCli) -> None:
    classic = str(REPO / "deploy/examples/reference-cases/exclusive-gpus.yaml")
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", classic)
    assert result.code == 0, result.err
    assert result.out.count("untolerated taint nvidia.com/gpu=present:NoSchedule") >= 2


def test_v1_output_forms(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    app = write_yaml("app.yaml", TEMPLATE)
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", app, "-o", "html")
    assert result.code == 0 and result.out.startswith("<!DOCTYPE html>")
    assert "ml/trainer" in result.out
    result = run_cli("--cluster", NVIDIA_SLICES, "-f", app, "-o", "json", "--fail-on-unplaced")
    assert result.code == 1 and result.err == "1 pod(s) not placed\n"
    items = json.loads(result.out)["items"]
    (claim,) = [i for i in items if i["kind"] == "ResourceClaim"]
    reason = claim["metadata"]["annotations"]["whatif.drasat.io/reason"]
    assert reason.startswith("no node admits the pod: nv-t4: untolerated taint")


@pytest.mark.parametrize(
    ("node", "pod_extra", "message"),
    [
        (
            "spec: {taints: [x]}",
            "",
            "cluster.yaml: document 1: Node n: spec.taints[0]: Input should be a valid dictionary",
        ),
        (
            "metadata: {name: n, labels: {zone: 1}}",
            "",
            "cluster.yaml: document 1: Node n: metadata.labels.zone: Input should be a valid "
            "string",
        ),
        (
            "spec: {}",
            "  affinity: {nodeAffinity: yes}\n",
            "app.yaml: document 2: Pod ml/trainer: spec.affinity.nodeAffinity: cannot unmarshal "
            "bool into Go struct field Affinity.spec.affinity.nodeAffinity of type v1.NodeAffinity",
        ),
    ],
)
def test_bad_nodes_and_pod_scheduling_fields_are_exit_2(
    run_cli: RunCli, write_yaml: WriteYaml, node: str, pod_extra: str, message: str
) -> None:
    metadata = "" if node.startswith("metadata") else "metadata: {name: n}\n"
    cluster_file = write_yaml("cluster.yaml", f"apiVersion: v1\nkind: Node\n{metadata}{node}\n")
    app = write_yaml(
        "app.yaml", TEMPLATE.replace("  resourceClaims:", pod_extra + "  resourceClaims:")
    )
    result = run_cli("--cluster", cluster_file, "-f", app)
    assert result.code == 2
    assert message in result.err and result.err.count("\n") == 1


def test_a_pod_with_an_allocated_claim_is_tied_to_its_node() -> None:
    from drasat.whatif import clusternodes

    text = """
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {namespace: ml, name: held, uid: held-uid}
    spec:
      devices:
        requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
    status:
      allocation:
        devices:
          results: [{request: gpu, driver: gpu.nvidia.com, pool: nv-a100, device: gpu-0}]
    """
    pod = TEMPLATE.replace(
        "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n",
        "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n"
        "  - {name: old, resourceClaimName: held}\n",
    ).replace("  resourceClaims:", "  tolerations: [{operator: Exists}]\n  resourceClaims:")
    workload = v1manifests.compile_v1(
        parse(pod + "---\n" + textwrap.dedent(text), v1manifests.LIVE_SOURCE)
    )
    cluster = clusternodes.load(loading.read_documents(NVIDIA_SLICES))
    (found,), blocked = v1run.pod_inputs(cluster, workload)
    assert found.candidate_nodes == ("nv-a100",) and blocked == {}
    assert [c["metadata"]["name"] for c in found.claims] == [workload.pods[0].claims[0][1].name]


def test_a_node_that_runs_its_most_pods_admits_no_more(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    node = """
    apiVersion: v1
    kind: Node
    metadata: {name: n}
    status: {allocatable: {cpu: "8", memory: 8Gi, pods: "1"}}
    """
    cluster_file = write_yaml("nodes.yaml", node)
    running = """
    ---
    apiVersion: v1
    kind: Pod
    metadata: {namespace: ml, name: other}
    spec: {nodeName: n, containers: [{name: c}]}
    """
    app = write_yaml("app.yaml", TEMPLATE + textwrap.dedent(running))
    result = run_cli("--cluster", cluster_file, "-f", app, "-o", "wide")
    assert result.code == 0, result.err
    assert "not placed: no node admits the pod: n: node already runs its 1 pods" in result.out


def test_an_all_entry_a_constraint_refuses_fails_the_claim(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    # The what-if decides as the controller (drasat.v1): upstream's allocator errs on the All
    # entry's GPUs without numaNode and never tries `one`.
    gpus = make_gpus("n1", "T4", 3, numa=[0, None, None])  # type: ignore[list-item]
    slices = pool.node_slices("n1", Inventory(gpus=gpus, mig_profiles={}, shares=False))
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    cluster_path = write_yaml("cluster.yaml", yaml.safe_dump_all([*slices, node]))
    app = write_yaml(
        "app.yaml",
        """
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {name: c, namespace: default}
        spec:
          devices:
            requests:
            - name: g
              firstAvailable:
              - {name: all, deviceClassName: gpu.drasat.io, allocationMode: All}
              - {name: one, deviceClassName: gpu.drasat.io}
            constraints:
            - matchAttribute: gpu.drasat.io/numaNode
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: default}
        spec:
          containers: [{name: c, image: x, resources: {claims: [{name: g}]}}]
          resourceClaims: [{name: g, resourceClaimName: c}]
        """,
    )
    result = run_cli("--cluster", cluster_path, "-f", app)
    assert result.code == 0, result.err
    assert "default/p not placed: claim default/c:" in result.out, result.out
    assert "a claim constraint refuses one of its devices on n1" in result.out, result.out
