"""Rendering from hand-made solutions: device descriptions, summary counts, merged NAS, bars."""

from __future__ import annotations

from drasat import loading
from drasat.api.nas import (
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    MigPlacement,
)
from drasat.api.sharing import GpuShare
from drasat.classic.whatif import manifests, report, table
from drasat.solver.problem import PodPlacement, PodRejection, Solution, Status
from drasat.v1 import nasinventory
from drasat.whatif import clusternodes, html

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: c}
spec:
  nodes:
  - {name: t4, gpus: [{product: T4, count: 2}]}
  - {name: a100, gpus: [{product: A100-40GB, mig: true}]}
"""

MANIFESTS = """
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: half, namespace: ns}
spec: {share: {compute: 50, memory: 8Gi}}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: maybe, namespace: ns}
spec: {optional: true}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: MigDeviceClaimParameters
metadata: {name: small, namespace: ns}
spec: {profile: 1g.5gb}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: half, namespace: ns}
spec: {spec: {resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: gpu.drasat.io,
       kind: GpuClaimParameters, name: half}}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: maybe, namespace: ns}
spec: {spec: {resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: gpu.drasat.io,
       kind: GpuClaimParameters, name: maybe}}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: small, namespace: ns}
spec: {spec: {resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: gpu.drasat.io,
       kind: MigDeviceClaimParameters, name: small}}}
---
apiVersion: v1
kind: Pod
metadata: {name: sharer, namespace: ns}
spec: {containers: [], resourceClaims: [{name: g, resourceClaimTemplateName: half}]}
---
apiVersion: v1
kind: Pod
metadata: {name: opt, namespace: ns}
spec: {containers: [], resourceClaims: [{name: g, resourceClaimTemplateName: maybe}]}
---
apiVersion: v1
kind: Pod
metadata: {name: mig, namespace: ns}
spec: {containers: [], resourceClaims: [{name: m, resourceClaimTemplateName: small}]}
---
apiVersion: v1
kind: Pod
metadata: {name: late, namespace: ns}
spec: {containers: [], resourceClaims: [{name: m, resourceClaimTemplateName: small}]}
"""


def _build() -> report.Report:
    cluster = clusternodes.load(loading.parse_documents(CLUSTER, "c.yaml"))
    workload = manifests.compile_manifests(loading.parse_documents(MANIFESTS, "m.yaml"))
    claims = {c.key: c.request for c in workload.claims}
    t4_gpu1 = cluster.nas[0].spec.gpus()[1].uuid
    a100 = cluster.nas[1].spec.gpus()[0].uuid

    def info(key: str) -> ClaimInfo:
        request = claims[key]
        return ClaimInfo(namespace=request.namespace, name=request.name, uid=request.uid)

    share = AllocatedDevices(
        claimInfo=info("ns/sharer-g"),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=t4_gpu1)]),
        share=GpuShare(compute=50, memory="8Gi"),
    )
    optional = AllocatedDevices(
        claimInfo=info("ns/opt-g"), gpu=AllocatedGpus(devices=[]), optional=True
    )
    mig = AllocatedDevices(
        claimInfo=info("ns/mig-m"),
        mig=AllocatedMigDevices(
            devices=[
                AllocatedMigDevice(
                    profile="1g.5gb", parentUUID=a100, placement=MigPlacement(start=6, size=1)
                )
            ]
        ),
    )
    solution = Solution(
        status=Status.FEASIBLE,
        placements=(
            PodPlacement(
                "ns/sharer", "t4", {share.claimInfo.uid: nasinventory.allocation_of(share)}
            ),
            PodPlacement(
                "ns/opt", "t4", {optional.claimInfo.uid: nasinventory.allocation_of(optional)}
            ),
            PodPlacement("ns/mig", "a100", {mig.claimInfo.uid: nasinventory.allocation_of(mig)}),
        ),
        unplaced=(PodRejection("ns/late", ("1g.5gb: every placement overlaps",)),),
        objective=3,
        best_bound=4,
        gap=0.25,
        wall_time_s=0.012,
    )
    return report.build(cluster, workload, solution, mode="batch")


def test_rows_describe_share_optional_mig_and_reasons() -> None:
    rows = {r.pod: r for r in _build().rows}
    assert rows["ns/sharer"].devices.startswith("share 50%/8Gi on GPU 1 (GPU-")
    assert rows["ns/opt"].devices == "none (optional, CPU-only)"
    assert rows["ns/mig"].devices == "1g.5gb@6 on GPU 0"
    assert rows["ns/mig"].devices_wide.startswith("1g.5gb@6 on GPU 0 (GPU-")
    assert len(rows["ns/mig"].devices_wide) > len(rows["ns/mig"].devices) + 30  # full UUID
    assert rows["ns/late"].node is None
    assert rows["ns/late"].reason == "1g.5gb: every placement overlaps"


def test_summary_counts_gpus_slices_pods_and_solver() -> None:
    summary = _build().summary
    assert (summary.gpus_used, summary.gpus_free, summary.gpus_total) == (2, 1, 3)
    assert (summary.mig_slices_used, summary.mig_slices_free) == (1, 7)
    assert (summary.pods_placed, summary.pods_unplaced) == (3, 1)
    lines = table.summary_lines(summary)
    assert lines[1].endswith("claims: 3 allocated, 0 already in the cluster")
    assert lines[2].endswith(
        "solver: FEASIBLE (batch: not proven optimal), objective 3, best bound 4, gap 25.00%, 12 ms"
    )


def test_merge_adds_new_allocations_to_the_right_node() -> None:
    built = _build()
    t4, a100 = built.nas
    assert len(t4.spec.allocatedClaims) == 2 and len(a100.spec.allocatedClaims) == 1


def test_bars_place_mig_devices_and_shares() -> None:
    built = _build()
    t4, a100 = built.nodes
    (mig_segment,) = a100.gpus[0].segments
    assert (mig_segment.start, mig_segment.size, a100.gpus[0].slots) == (6, 1, 8)
    (share_segment,) = t4.gpus[1].segments
    assert (share_segment.start, share_segment.size, t4.gpus[1].slots) == (0, 50, 100)
    assert share_segment.colour == built.colours["ns/sharer-g"]
    assert share_segment.label == share_segment.text == "50% ns/sharer-g"
    assert (mig_segment.label, mig_segment.text) == ("1g.5gb ns/mig-m", "1g.5gb")
    assert len(set(built.colours.values())) == len(built.colours)
    page = html.render_page(built)
    assert "left: 75%; width: 12.5%" in page  # 1g.5gb at slice 6 of 8
    assert "width: 50%" in page
