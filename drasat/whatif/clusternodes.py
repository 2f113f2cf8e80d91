"""The `--cluster` input: NodeAllocationState objects (ours or NVIDIA's), a compact `Cluster`, or
ResourceSlices and Nodes (`resource.k8s.io/v1`, drasat's or NVIDIA's driver; `v1cluster`).

`kubectl get nas -A -o yaml` and `kubectl get resourceslices,nodes -o yaml` print a `List`;
hand-written files are multi-document YAML; all may be mixed with compact descriptions, which the
catalog expands. A NodeAllocationState whose status is NotReady (or a Node whose Ready condition
is not True) makes its node unsuitable for every claim; one without a status is taken as Ready
(hand-written objects rarely carry one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drasat import loading
from drasat.api import catalog, cluster, groups, limits
from drasat.api.inputerrors import InputError
from drasat.api.nas import NasStatus, NodeAllocationState
from drasat.solver.problem import NodeState
from drasat.v1 import nasinventory, publisheddevices
from drasat.whatif import manifestindex, nvidiaformat, v1cluster
from drasat.whatif.manifestindex import Ignored

M = TypeVar("M", NodeAllocationState, cluster.Cluster)


@dataclass(frozen=True)
class ClusterNodes:
    #: Every node's NodeAllocationState as read (or expanded), in input order.
    nas: tuple[NodeAllocationState, ...]
    states: tuple[NodeState, ...]
    ignored: tuple[Ignored, ...]
    #: Devices of nodes read from ResourceSlices, as their driver published them, by node
    #: (other nodes publish what drasat's node plugin would: `published`).
    #: (node -> drasat's device name -> device; `api.devicemodel.names`).
    devices: Mapping[str, Mapping[str, publisheddevices.Published]] = field(default_factory=dict)
    #: The Node objects given, by name.
    node_objects: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    #: Counter sets of the slices read: (driver, pool, set) -> counter -> value.
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, int]] = field(default_factory=dict)
    #: `published`'s answers, by node (the run asks several times per node).
    _published: dict[str, tuple[publisheddevices.Published, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _states: dict[str, NodeState] = field(default_factory=dict, compare=False, repr=False)
    #: `publisheddevices.shape_of` -> the template of its nodes (None: not copyable) and
    #: whether its copies keep its devices' kinds (`same_kinds`; None: not known yet).
    _shapes: dict[tuple[object, ...], tuple[publisheddevices.Template | None, bool | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def published(self, node: str) -> tuple[publisheddevices.Published, ...]:
        """What the node publishes: the slices read, or drasat's device model of its NAS."""
        found = self._published.get(node)
        if found is not None:
            return found
        if node in self.devices:
            found = tuple(self.devices[node].values())
        else:
            if not self._states:
                self._states.update((s.name, s) for s in self.states)
            devices = self._states[node].devices
            shape = publisheddevices.shape_of(devices)
            like = None if shape is None else self._shapes.get(shape)
            template, kinds_kept = like or (None, None)
            if shape is not None and template is not None:
                found = tuple(publisheddevices.alike(template, node, devices))
                if kinds_kept is None:
                    kinds_kept = publisheddevices.same_kinds(template.published, found)
                    self._shapes[shape] = (template, kinds_kept)
                if kinds_kept:
                    publisheddevices.keep_kinds(template.published, found)
            else:
                found = tuple(publisheddevices.drasat_devices(node, devices))
                if shape is not None and like is None:
                    self._shapes[shape] = (publisheddevices.template_of(devices, found), None)
        self._published[node] = found
        return found

    def offered_profiles(self) -> frozenset[str]:
        """MIG profiles published by a node or offered by the catalog for a GPU in the cluster."""
        offered: set[str] = set()
        for nas in self.nas:
            offered.update(m.profile for m in nas.spec.mig_profiles())
            for gpu in nas.spec.gpus():
                product = catalog.product_for_name(gpu.productName)
                if product is not None:
                    offered.update(p.name for p in product.mig_profiles)
        return frozenset(offered)

    def existing_uids(self) -> dict[tuple[str, str], str]:
        """(namespace, name) -> uid of every claim some node already has allocated."""
        return {
            (a.claimInfo.namespace, a.claimInfo.name): a.claimInfo.uid
            for nas in self.nas
            for a in nas.spec.allocatedClaims.values()
        }


HOSTNAME_LABEL = "kubernetes.io/hostname"


def matching_nodes(
    states: Sequence[NodeState], *, node_name: str | None, node_selector: dict[str, str] | None
) -> tuple[str, ...] | None:
    """Nodes a pod's spec.nodeName and spec.nodeSelector allow (None: no constraint). Pure.

    Every node carries the `kubernetes.io/hostname` label with its name, as kubelets set it.
    """
    if node_name is None and not node_selector:
        return None
    allowed = []
    for state in states:
        labels = {HOSTNAME_LABEL: state.name, **dict(state.labels)}
        if node_name is not None and state.name != node_name:
            continue
        if all(labels.get(k) == v for k, v in (node_selector or {}).items()):
            allowed.append(state.name)
    return tuple(allowed)


def node_objects(found: ClusterNodes) -> list[dict[str, Any]]:
    """Every node as a Node object: the cluster's own, else its name and labels (with
    `kubernetes.io/hostname`, as kubelets set it). Pure."""
    return [
        found.node_objects.get(state.name)
        or {"metadata": {"name": state.name,
                         "labels": {HOSTNAME_LABEL: state.name, **dict(state.labels)}}}
        for state in found.states
    ]  # fmt: skip


def load(documents: Sequence[loading.Document], *, source: str | None = None) -> ClusterNodes:
    """Validate and expand the cluster documents. Raises InputError on bad or duplicate nodes.

    source: the input the documents came from (the --cluster file), named when it holds no
    node at all, even when it holds no document (an empty file, or only empty Lists).
    """
    found: list[tuple[str, NodeAllocationState, cluster.ExpandedNode | None]] = []
    ignored: list[Ignored] = []
    most = loading.env_limit("DRASAT_MAX_NODES", limits.MAX_NODES)
    compact, published = _compact(documents, most)
    v1 = v1cluster.load([*documents, *published])
    ignored.extend(v1.ignored)
    for document in documents:
        if v1cluster.is_v1_cluster_document(document.data):
            continue
        api_version = str(document.data.get("apiVersion", ""))
        kind = document.data.get("kind")
        group = groups.group_of(api_version)
        where = manifestindex.located(document, _namespace(document))
        if group in groups.NAS_GROUPS or group == cluster.CLUSTER_GROUP:
            expected = groups.NODE_ALLOCATION_STATE if group in groups.NAS_GROUPS else "Cluster"
            if kind != expected or api_version != f"{group}/{groups.VERSION}":
                raise InputError(
                    f"kind: unknown kind {kind!r} of {api_version} (expected {expected} of "
                    f"{group}/{groups.VERSION})",
                    where=where,
                )
        if group in groups.NAS_GROUPS:
            nas = _validate(NodeAllocationState, document, where)
            _check_total(len(found) + 1, most, where)
            found.append((where, nas, None))
        elif group == cluster.CLUSTER_GROUP:
            own = compact[id(document)]
            _check_total(len(found) + len(own), most, where)
            found.extend((where, n.nas, n) for n in own)
        else:
            what = where.removeprefix(f"{document.where}: ")
            ignored.append(Ignored(document.where, what, "not a NodeAllocationState or Cluster"))
    if not found and not v1.nodes:
        where = source or (documents[0].source if documents else "--cluster")
        raise InputError(
            "no nodes: expected NodeAllocationState objects or a Cluster description, or "
            "ResourceSlices and Nodes (kubectl get resourceslices,nodes -o yaml)",
            where=where,
        )
    described = {nas.metadata.name for _, nas, _ in found}
    # A Node without slices beside a NAS or compact node of its name adds what NAS lacks
    # (`kubectl get nas,nodes`): CPU, memory, labels, taints.
    extra = {n.name: n.node for n in v1.nodes if not n.devices and n.name in described}
    v1_nodes = [n for n in v1.nodes if n.name not in extra]
    _check_total(len(found) + len(v1_nodes), most, source or "--cluster")
    found += [(f"node {n.name} (from ResourceSlices)", n.nas, None) for n in v1_nodes]
    _check_unique([(w, n) for w, n, _ in found])
    read = {n.name: n for n in v1_nodes}
    states = tuple(
        read[nas.metadata.name].state if expanded is None and nas.metadata.name in read
        else _state(nas, expanded, extra.get(nas.metadata.name))
        for _, nas, expanded in found
    )  # fmt: skip
    return ClusterNodes(
        tuple(n for _, n, _ in found),
        states,
        tuple(ignored),
        devices={n.name: n.devices for n in v1_nodes},
        node_objects={n.name: n.node for n in v1.nodes if n.node is not None},
        counter_sets=v1.counter_sets,
    )


def _compact(
    documents: Sequence[loading.Document], most: int
) -> tuple[dict[int, list[cluster.ExpandedNode]], list[loading.Document]]:
    """Each compact Cluster's nodes of drasat's driver, by document, and the Nodes and
    ResourceSlices of its nodes of NVIDIA's driver (`nvidiaformat`), which are read as NVIDIA's
    slices are read. Raises InputError naming the document and field."""
    expanded: dict[int, list[cluster.ExpandedNode]] = {}
    published: list[loading.Document] = []
    for document in documents:
        data = document.data
        if groups.group_of(str(data.get("apiVersion", ""))) != cluster.CLUSTER_GROUP:
            continue
        where = manifestindex.located(document, _namespace(document))
        if data.get("kind") != "Cluster" or data.get("apiVersion") != cluster.CLUSTER_API_VERSION:
            continue  # refused with its kind by the caller
        description = _validate(cluster.Cluster, document, where)
        _check_total(sum(n.count for n in description.spec.nodes), most, where)
        groups_of = [g for g in description.spec.nodes for _ in g.node_names()]
        nodes = cluster.expand(description.spec)
        expanded[id(document)] = [
            n for g, n in zip(groups_of, nodes, strict=True) if g.driver != cluster.NVIDIA_FORMAT
        ]
        for group, node in zip(groups_of, nodes, strict=True):
            if group.driver == cluster.NVIDIA_FORMAT:
                source = f"{document.where} (node {node.nas.metadata.name}, {group.driver})"
                published += [
                    loading.Document(source, number, body)
                    for number, body in enumerate(nvidiaformat.node_documents(group, node), 1)
                ]
    return expanded, published


def _check_total(nodes: int, most: int, where: str) -> None:
    if nodes > most:
        raise InputError(
            f"the cluster has more than {most:,} nodes, three times Kubernetes' limit (raise the "
            "limit with DRASAT_MAX_NODES)",
            where=where,
        )


def _namespace(document: loading.Document) -> str:
    metadata = document.data.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return namespace if isinstance(namespace, str) else ""


def _validate(model: type[M], document: loading.Document, where: str) -> M:
    try:
        return loading.validate(model, document)
    except InputError as error:
        raise InputError(error.detail, where=where) from None


def _check_unique(found: list[tuple[str, NodeAllocationState]]) -> None:
    """Each node described once, each GPU uuid on one node (a cluster cannot hold one GPU
    twice: the solver would refuse every pod with an internal error instead)."""
    seen: dict[str, str] = {}
    gpus: dict[str, str] = {}
    for where, nas in found:
        name = nas.metadata.name
        if not name:
            raise InputError("metadata.name: missing (the node's name)", where=where)
        if name in seen:
            raise InputError(f"node {name!r} is also described at {seen[name]}", where=where)
        seen[name] = where
        for number, device in enumerate(nas.spec.allocatableDevices):
            if device.gpu is None:
                continue
            other = gpus.setdefault(device.gpu.uuid, name)
            if other != name:
                raise InputError(
                    f"spec.allocatableDevices[{number}].gpu.uuid: {device.gpu.uuid} is also a GPU "
                    f"of node {other!r} ({seen[other]})",
                    where=where,
                )


def _state(
    nas: NodeAllocationState,
    expanded: cluster.ExpandedNode | None,
    node: dict[str, Any] | None = None,
) -> NodeState:
    if node is not None:
        devices = nasinventory.devices_of(nas.spec)
        ledger = nasinventory.ledger_of(nas.spec)
        state = v1cluster.node_state(nas.metadata.name, devices, node, ledger=ledger)
        if expanded is not None:
            state = dataclasses.replace(
                state,
                cpu_milli=expanded.cpu_milli if state.cpu_milli is None else state.cpu_milli,
                memory_mib=expanded.memory_mib if state.memory_mib is None else state.memory_mib,
                labels=tuple(sorted({**expanded.labels, **dict(state.labels)}.items())),
            )
        if nas.status is NasStatus.NotReady:
            state = dataclasses.replace(
                state, ready=False, unready_reason="NodeAllocationState status is NotReady"
            )
        return state
    ready = nas.status is not NasStatus.NotReady
    return nasinventory.node_state(
        nas.metadata.name,
        nas.spec,
        ready=ready,
        unready_reason="" if ready else "NodeAllocationState status is NotReady",
        cpu_milli=expanded.cpu_milli if expanded else None,
        memory_mib=expanded.memory_mib if expanded else None,
        labels=tuple(sorted(expanded.labels.items())) if expanded else (),
    )
