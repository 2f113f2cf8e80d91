"""The compact cluster's published devices are made once per shape of node and copied for its
other nodes (`publisheddevices.alike`): every node must publish exactly what drasat's device
model makes of its own devices, kinds (`kind_id`) included."""

from __future__ import annotations

from drasat import loading
from drasat.v1 import cel, publisheddevices
from drasat.whatif import clusternodes

CLUSTER = """\
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: shapes}
spec:
  nodes:
  - {name: t4, count: 3, gpus: [{product: T4, count: 3}], cpu: 32, memory: 251Gi}
  - {name: mig, count: 3, gpus: [{product: A100-40GB, count: 2, mig: true}]}
  - name: mixed
    count: 2
    gpus: [{product: A100-80GB, count: 1, mig: true}, {product: H100-80GB, count: 2}]
  - {name: lone, gpus: [{product: T4, count: 1}]}
"""


def test_every_node_publishes_what_its_own_devices_make() -> None:
    loaded = clusternodes.load(loading.parse_documents(CLUSTER, "shapes.yaml"))
    assert len(loaded.states) == 9
    for state in loaded.states:
        direct = publisheddevices.drasat_devices(state.name, state.devices)
        found = loaded.published(state.name)
        assert list(found) == direct, state.name
        assert [d.kind_id for d in found] == [d.kind_id for d in direct], state.name
        assert [d.kind_id for d in found] == [cel.kind_id(d.driver, d.device) for d in found], (
            state.name
        )
    # Copies, not the template's own objects: one node's device changed is no other's.
    first, second = loaded.published("t4-0"), loaded.published("t4-1")
    assert first[0].device is not second[0].device
    assert first[0].device["attributes"] is not second[0].device["attributes"]
    assert first[0].gpu_uuid != second[0].gpu_uuid


def test_nodes_of_one_shape_share_it_and_others_do_not() -> None:
    loaded = clusternodes.load(loading.parse_documents(CLUSTER, "shapes.yaml"))
    shapes = {publisheddevices.shape_of(s.devices) for s in loaded.states}
    assert len(shapes) == 4


def test_a_uuid_outside_the_attributes_leaves_the_shape_uncopied() -> None:
    loaded = clusternodes.load(loading.parse_documents(CLUSTER, "shapes.yaml"))
    state = loaded.states[0]
    published = publisheddevices.drasat_devices(state.name, state.devices)
    assert publisheddevices.template_of(state.devices, published) is not None
    uuid = state.devices.gpus[0].uuid
    first = published[0]
    odd = publisheddevices.Published(
        first.driver, first.pool, {**first.device, "note": [uuid]}, first.kind, first.gpu_uuid
    )
    assert publisheddevices.template_of(state.devices, [odd, *published[1:]]) is None
