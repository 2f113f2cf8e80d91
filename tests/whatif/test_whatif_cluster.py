"""The compact cluster description and the --cluster loader (NAS of both groups, NotReady)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from drasat import loading
from drasat.api import cluster
from drasat.api.inputerrors import InputError, describe_validation_error
from drasat.whatif import clusternodes


def _spec(**node: object) -> cluster.ClusterSpec:
    return cluster.ClusterSpec.model_validate({"nodes": [{"name": "n", **node}]})


def test_expansion_is_deterministic_and_uses_the_catalog() -> None:
    spec = _spec(gpus=[{"product": "T4", "count": 1}, {"product": "A100-40GB", "mig": True}])
    first, again = cluster.expand(spec), cluster.expand(spec)
    assert first == again
    gpus = first[0].nas.spec.gpus()
    assert [g.index for g in gpus] == [0, 1]
    assert [g.productName for g in gpus] == ["Tesla T4", "NVIDIA A100-SXM4-40GB"]
    assert [g.migEnabled for g in gpus] == [False, True]
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g.uuid) for g in gpus)
    assert gpus[0].uuid != gpus[1].uuid
    # MIG profiles are listed once per MIG-enabled product, with catalog placements.
    profiles = {m.profile: m for m in first[0].nas.spec.mig_profiles()}
    assert "3g.20gb" in profiles and "1g.5gb" in profiles
    assert [(p.start, p.size) for p in profiles["3g.20gb"].placements] == [(0, 4), (4, 4)]


def test_a_mig_products_profiles_are_built_once_for_all_its_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 5,000 compact nodes, a third with an A100: its catalog profiles were validated into
    # MigInfo objects for every node; now once per product, shared by the nodes' NAS.
    calls = 0
    real = cluster._mig_info

    def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(cluster, "_mig_info", counted)
    expanded = cluster.expand(_spec(count=20, gpus=[{"product": "A100-40GB", "mig": True}]))
    per_node = len(expanded[0].nas.spec.mig_profiles())
    assert per_node > 1 and calls == per_node
    assert all(n.nas.spec.mig_profiles() == expanded[0].nas.spec.mig_profiles() for n in expanded)


def test_uuid_depends_on_node_and_index() -> None:
    assert cluster.gpu_uuid("a", 0) != cluster.gpu_uuid("b", 0)
    assert cluster.gpu_uuid("a", 0) != cluster.gpu_uuid("a", 1)
    assert cluster.gpu_uuid("a", 0) == cluster.gpu_uuid("a", 0)


def test_node_groups_are_numbered_and_carry_capacity() -> None:
    expanded = cluster.expand(_spec(count=3, cpu="1500m", memory="2Gi", gpus=[{"product": "L4"}]))
    assert [n.nas.metadata.name for n in expanded] == ["n-0", "n-1", "n-2"]
    assert (expanded[0].cpu_milli, expanded[0].memory_mib) == (1500, 2048)


def test_not_ready_node_is_published_not_ready() -> None:
    expanded = cluster.expand(_spec(ready=False, gpus=[{"product": "T4"}]))
    assert expanded[0].nas.status is not None and expanded[0].nas.status.value == "NotReady"


@pytest.mark.parametrize(
    ("node", "message"),
    [
        # a typo of a product must not become a GPU with made-up properties
        ({"gpus": [{"product": "A200"}]}, "nodes[0].gpus[0].product: unknown GPU product 'A200'"),
        ({"gpus": [{"product": "T4", "mig": True}]}, "nodes[0].gpus[0]: T4 does not support MIG"),
        ({"gpus": [{"product": "T4", "count": 0}]}, "nodes[0].gpus[0].count: Input should be"),
        ({"cpu": "lots"}, "nodes[0].cpu: not a CPU quantity"),
        ({"gpu": []}, "nodes[0].gpu: unknown field"),
    ],
)
def test_bad_descriptions_name_the_field(node: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        cluster.ClusterSpec.model_validate({"nodes": [{"name": "n", **node}]})
    assert describe_validation_error(info.value).startswith(message)


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(ValidationError, match="node name 'n-0' is used twice"):
        cluster.ClusterSpec.model_validate({"nodes": [{"name": "n", "count": 2}, {"name": "n-0"}]})


NAS = """
apiVersion: v1
kind: List
items:
- apiVersion: nas.gpu.resource.nvidia.com/v1alpha1
  kind: NodeAllocationState
  metadata: {name: nvidia-node, namespace: nvidia}
  spec:
    allocatableDevices:
    - gpu: {index: 0, uuid: GPU-a, memoryBytes: 16106127360, productName: Tesla T4}
    allocatedClaims:
      uid-1:
        claimInfo: {namespace: ns, name: old, uid: uid-1}
        gpu: {devices: [{uuid: GPU-a}]}
  status: Ready
- apiVersion: nas.gpu.drasat.io/v1alpha1
  kind: NodeAllocationState
  metadata: {name: broken, namespace: drasat}
  spec: {}
  status: NotReady
"""


def test_nas_list_of_both_groups_with_not_ready_and_existing_claims() -> None:
    loaded = clusternodes.load(loading.parse_documents(NAS, "nas.yaml"))
    assert [s.name for s in loaded.states] == ["nvidia-node", "broken"]
    assert [s.ready for s in loaded.states] == [True, False]
    assert "NotReady" in loaded.states[1].unready_reason
    assert loaded.existing_uids() == {("ns", "old"): "uid-1"}
    # the T4 offers no MIG profile, so nothing is offered
    assert loaded.offered_profiles() == frozenset()


def test_compact_and_nas_mix_and_a_node_adds_to_its_nas() -> None:
    text = (
        NAS
        + "---\n"
        + (
            "apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {name: c}\n"
            "spec: {nodes: [{name: extra, gpus: [{product: A100-40GB, mig: true}]}]}\n"
            "---\napiVersion: v1\nkind: Node\nmetadata: {name: extra, labels: {zone: a}}\n"
            "status: {allocatable: {cpu: 8, memory: 1Gi}}\n"
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
        )
    )
    loaded = clusternodes.load(loading.parse_documents(text, "mixed.yaml"))
    assert [s.name for s in loaded.states] == ["nvidia-node", "broken", "extra"]
    assert "3g.20gb" in loaded.offered_profiles()
    # The Node of a compact node adds its CPU, memory and labels (kubectl get nas,nodes).
    extra = loaded.states[2]
    assert (extra.cpu_milli, extra.memory_mib, dict(extra.labels)) == (8000, 1024, {"zone": "a"})
    assert [i.what for i in loaded.ignored] == ["ConfigMap x"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: nas.gpu.drasat.io/v1alpha1\nkind: NodeAllocationStat\n"
            "metadata: {name: a}\n",
            "c.yaml: document 1: NodeAllocationStat a: kind: unknown kind 'NodeAllocationStat'",
        ),
        (
            "apiVersion: nas.gpu.drasat.io/v1alpha1\nkind: NodeAllocationState\n"
            "metadata: {name: a}\nspec: {allocatableDevice: []}\n",
            "c.yaml: document 1: NodeAllocationState a: spec.allocatableDevice: unknown field",
        ),
        (
            "apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {name: a}\n"
            "spec: {nodes: [{name: x}]}\n---\n"
            "apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {name: b}\n"
            "spec: {nodes: [{name: x}]}\n",
            "c.yaml: document 2: Cluster b: node 'x' is also described at c.yaml: document 1",
        ),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "c.yaml: no nodes"),
        (
            # One GPU on two nodes (a NAS copied to another node's name): bad input, exit 2,
            # not every pod refused with the solver's internal error.
            "".join(
                "apiVersion: nas.gpu.drasat.io/v1alpha1\nkind: NodeAllocationState\n"
                f"metadata: {{name: {node}}}\nspec: {{allocatableDevices: [{{gpu: "
                f"{{index: 0, uuid: GPU-{uuid}, productName: Tesla T4, memoryBytes: 1}}}}]}}\n---\n"
                for node, uuid in (("a", "1"), ("b", "2"), ("c", "1"))
            ),
            "c.yaml: document 3: NodeAllocationState c: spec.allocatableDevices[0].gpu.uuid: "
            "GPU-1 is also a GPU of node 'a' (c.yaml: document 1: NodeAllocationState a)",
        ),
    ],
)
def test_bad_cluster_files(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        clusternodes.load(loading.parse_documents(text, "c.yaml"))
    assert str(info.value).startswith(message)


def test_many_gpus_get_distinct_well_formed_pci_bus_ids() -> None:
    gpus = cluster.expand(_spec(gpus=[{"product": "H100-80GB", "count": 40}]))[0].nas.spec.gpus()
    ids = [g.pciBusID or "" for g in gpus]
    assert len(set(ids)) == 40
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:00\.0", i) for i in ids)
