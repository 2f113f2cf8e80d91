"""The v1 what-if's output (issue 16 items 3 and 5): what `-o yaml` prints is checked by an
independent checker (`v1checker`: devices exist, selectors and constraints hold, counters and
capacities are not exceeded, no device twice) on NVIDIA's quickstart shapes over NVIDIA's and
drasat's slices and on random small clusters; the printed claims pass the real API server's
validation; the table, wide and html forms say what they should, once."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import textwrap
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import v1checker
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.cli import main as cli_main

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    import kubernetes
    from conftest import RunCli, WriteYaml

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"
NVIDIA_SLICES = QUICKSTART / "cluster/nvidia-slices.yaml"

#: NVIDIA's DeviceClasses as its Helm chart installs them (the checker is given them; the
#: what-if has them built in).
NVIDIA_CLASSES = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel:
      expression: >-
        device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig.nvidia.com}
spec:
  selectors:
  - cel:
      expression: >-
        device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'
"""

Obj = dict[str, Any]


def _drasat(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main.main(list(argv)) == 0
    return out.getvalue()


def _unique_uuids(text: str, node: str) -> str:
    """A simulated fleet numbers its GPUs the same on every node; real UUIDs differ."""
    return re.sub(
        r"GPU-[0-9a-f-]{36}",
        lambda m: "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, node + m.group(0))),
        text,
    )


def drasat_slices(fleet: dict[str, str]) -> str:
    """What drasat's node plugin publishes on each node (`drasat resourceslices`)."""
    return "---\n".join(
        _unique_uuids(_drasat("resourceslices", "--node-name", node, "--simulate-gpus", gpus), node)
        for node, gpus in fleet.items()
    )


def drasat_classes() -> str:
    printed = _drasat(
        "resourceslices", "--node-name", "x", "--simulate-gpus", "1xT4", "--with-classes"
    )
    return "---\n".join(
        yaml.safe_dump(d) for d in yaml.safe_load_all(printed) if d["kind"] == "DeviceClass"
    )


DRASAT_FLEET = {"t4": "3xT4", "a100": "1xA100-40GB,mig=0"}
DRASAT_CLASSES = drasat_classes()


@pytest.fixture(scope="module")
def drasat_cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(cluster file, its slices and drasat's classes as the checker reads them)."""
    folder = tmp_path_factory.mktemp("drasat-cluster")
    slices = drasat_slices(DRASAT_FLEET)
    path = folder / "slices.yaml"
    path.write_text(slices, encoding="utf-8")
    return str(path), slices + "---\n" + DRASAT_CLASSES


def _placed(run_cli: RunCli, cluster: str, checked: str, *files: str) -> tuple[list[Obj], Obj]:
    """Run `-o yaml`, check its claims; (every claim, the List)."""
    argv = ["--cluster", cluster]
    for name in files:
        argv += ["-f", name]
    result = run_cli(*argv, "-o", "yaml")
    assert result.code == 0, result.err
    listing = yaml.safe_load(result.out)
    claims = [i for i in listing["items"] if i["kind"] == "ResourceClaim"]
    objects = v1checker.documents([checked])
    assert v1checker.violations(objects, claims) == []
    return claims, listing


def _nvidia(*files: str) -> tuple[str, str, tuple[str, ...]]:
    text = NVIDIA_SLICES.read_text(encoding="utf-8") + "---\n" + NVIDIA_CLASSES
    return str(NVIDIA_SLICES), text, tuple(str(QUICKSTART / f) for f in files)


def _results(claim: Obj) -> list[Obj]:
    found: list[Obj] = claim["status"]["allocation"]["devices"]["results"]
    return found


# -- NVIDIA's quickstart shapes on NVIDIA's slices -------------------------------------------------


def test_single_gpu_per_pod_gets_two_different_gpus(run_cli: RunCli) -> None:
    cluster, checked, files = _nvidia("gpu-test1.yaml")
    claims, _ = _placed(run_cli, cluster, checked, *files)
    devices = [(r["pool"], r["device"]) for c in claims for r in _results(c)]
    assert len(devices) == 2 and len(set(devices)) == 2
    # gpu-2 of nv-t4 carries a NoSchedule device taint; the others are free.
    assert ("nv-t4", "gpu-2") not in devices


def test_a_claim_shared_by_containers_and_by_pods_is_allocated_once(run_cli: RunCli) -> None:
    for name in ("gpu-test2.yaml", "gpu-test3.yaml"):
        cluster, checked, files = _nvidia(name)
        claims, _ = _placed(run_cli, cluster, checked, *files)
        (claim,) = claims
        assert len(_results(claim)) == 1
    result = run_cli("--cluster", cluster, "-f", files[0], "-o", "wide")
    rows = [line.split() for line in result.out.splitlines() if line.startswith("gpu-test3/")]
    assert [r[3] for r in rows] == ["nv-t4", "nv-t4"] and rows[0][5] == rows[1][5]
    assert all(line[-2:] == ["2", "pods"] for line in rows)


def test_mig_devices_of_one_parent_respect_the_counters(run_cli: RunCli) -> None:
    cluster, checked, files = _nvidia("gpu-test4.yaml")
    claims, _ = _placed(run_cli, cluster, checked, *files)
    allocated = v1checker.allocated(claims)
    # 1g + 1g + 2g + 3g take 7 of an A100's 8 memory slices: one pod per MIG GPU of the cluster.
    assert 1 <= len(allocated) <= 2
    for claim in allocated:
        names = [r["device"] for r in _results(claim)]
        assert len(names) == 4 and len({n.split("-mig-")[0] for n in names}) == 1
    for claim in claims:
        if claim not in allocated:
            assert "do not fit" in claim["metadata"]["annotations"]["whatif.drasat.io/reason"]


def test_mps_and_time_slicing_configs_go_to_their_requests(run_cli: RunCli) -> None:
    cluster, checked, files = _nvidia("gpu-test5.yaml")
    claims, _ = _placed(run_cli, cluster, checked, *files)
    (claim,) = claims
    config = claim["status"]["allocation"]["devices"]["config"]
    strategies = {
        tuple(c["requests"]): c["opaque"]["parameters"]["sharing"]["strategy"] for c in config
    }
    assert strategies == {("ts-gpu",): "TimeSlicing", ("mps-gpu",): "MPS"}
    assert all(c["source"] == "FromClaim" for c in config)
    cluster, checked, files = _nvidia("gpu-test-mps.yaml")
    (claim,), _ = _placed(run_cli, cluster, checked, *files)
    assert claim["status"]["allocation"]["devices"]["config"][0]["requests"] == ["mps-gpu"]


CEL_APP = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: t4}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel:
            expression: >-
              device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*t4$') &&
              device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) < 0 &&
              device.attributes['resource.kubernetes.io'].pciBusID == '0000:3c:00.0'
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: trainer}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers: [{name: c, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimName: t4}]
"""


def test_a_cel_selector_picks_one_t4_by_its_pci_address(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster, checked, _ = _nvidia()
    (claim,), listing = _placed(run_cli, cluster, checked, write_yaml("app.yaml", CEL_APP))
    (result,) = _results(claim)
    # Product (lower-cased, by regular expression), memory (quantity) and PCI address (an
    # attribute of another domain) leave one T4.
    assert (result["pool"], result["device"]) == ("nv-t4", "gpu-1")
    ledger = next(i for i in listing["items"] if i["metadata"]["name"] == "nv-t4")
    assert ledger["kind"] == "NodeAllocationState"
    assert [e["claimInfo"]["name"] for e in ledger["spec"]["allocatedClaims"].values()] == ["t4"]


# -- drasat's slices -------------------------------------------------------------------------------

SHARES_APP = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: slice}
spec:
  spec:
    devices:
      requests:
      - name: share
        exactly:
          deviceClassName: gpu.drasat.io
          selectors:
          - cel:
              expression: >-
                device.attributes["gpu.drasat.io"].productName.lowerAscii().contains("t4")
          capacity: {requests: {memory: 6Gi, compute: "30"}}
"""


def _share_pods(count: int) -> str:
    pod = """
    ---
    apiVersion: v1
    kind: Pod
    metadata: {{namespace: ml, name: infer-{i}}}
    spec:
      containers: [{{name: c, resources: {{claims: [{{name: gpu}}]}}}}]
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: slice}}]
    """
    return "".join(textwrap.dedent(pod.format(i=i)) for i in range(count))


def test_consumable_memory_shares_stay_within_each_gpu(
    run_cli: RunCli, write_yaml: WriteYaml, drasat_cluster: tuple[str, str]
) -> None:
    cluster, checked = drasat_cluster
    # A T4 has 15Gi: two 6Gi shares fit on one, three do not; seven pods need four GPUs of
    # three, so exactly six are placed.
    app = write_yaml("app.yaml", SHARES_APP + _share_pods(7))
    claims, _ = _placed(run_cli, cluster, checked, app)
    allocated = v1checker.allocated(claims)
    assert len(allocated) == 6
    per_gpu: dict[str, int] = {}
    for claim in allocated:
        (result,) = _results(claim)
        assert result["consumedCapacity"] == {"memory": str(6 * 2**30), "compute": "30"}
        per_gpu[result["device"]] = per_gpu.get(result["device"], 0) + 1
    assert sorted(per_gpu.values()) == [2, 2, 2]
    table = run_cli("--cluster", cluster, "-f", app).out
    assert table.count("(share 30%, 6Gi of GPU ") == 6
    assert table.count("not placed: ") == 1


def test_drasat_examples_on_drasats_slices(
    run_cli: RunCli, drasat_cluster: tuple[str, str]
) -> None:
    cluster, checked = drasat_cluster
    examples = REPO / "deploy/examples"
    for name in ("v1-shared-gpu", "v1-mig-by-profile", "v1-reference-cases", "v1-optional-gpu"):
        claims, _ = _placed(run_cli, cluster, checked, str(examples / name))
        assert v1checker.allocated(claims) and all(
            "whatif.drasat.io/reason" not in c["metadata"]["annotations"] for c in claims
        )


# -- the checker fails what is wrong ---------------------------------------------------------------


def _broken(claims: list[Obj], change: Any) -> list[str]:
    changed = copy.deepcopy(claims)
    change(changed)
    text = NVIDIA_SLICES.read_text(encoding="utf-8") + "---\n" + NVIDIA_CLASSES
    return v1checker.violations(v1checker.documents([text]), changed)


def test_the_checker_finds_each_kind_of_wrong_allocation(run_cli: RunCli) -> None:
    cluster, checked, files = _nvidia("gpu-test1.yaml", "gpu-test4.yaml")
    claims, _ = _placed(run_cli, cluster, checked, *files)
    gpus = [c for c in v1checker.allocated(claims) if c["metadata"]["namespace"] == "gpu-test1"]
    mig = next(c for c in v1checker.allocated(claims) if c["metadata"]["namespace"] == "gpu-test4")
    where = {id(c): i for i, c in enumerate(claims)}

    def results(claim: Obj) -> Any:
        return lambda cs: _results(cs[where[id(claim)]])

    def set_device(claim: Obj, index: int, device: str) -> Any:
        return lambda cs: results(claim)(cs)[index].update(device=device)

    cases = {
        "no device gpu-9": set_device(gpus[0], 0, "gpu-9"),
        "already allocated": set_device(gpus[0], 0, _results(gpus[1])[0]["device"]),
        "class gpu.nvidia.com selector": lambda cs: results(gpus[0])(cs)[0].update(
            pool="nv-a100", device="gpu-0-mig-1g5gb-19-0"
        ),
        "is on node nv-a100, the claim on nv-t4": lambda cs: results(gpus[0])(cs)[0].update(
            pool="nv-a100", device="gpu-0"
        ),
        "has 2 results, asks for 1": lambda cs: results(gpus[0])(cs).append(
            {
                **_results(gpus[0])[0],
                "device": "gpu-1" if _results(gpus[0])[0]["device"] != "gpu-1" else "gpu-0",
            }
        ),
        "consumed": set_device(mig, 3, "gpu-0-mig-3g20gb-9-0"),  # overlaps 1g@0: slice 0 twice
        "matchAttribute gpu.nvidia.com/parentUUID": lambda cs: results(mig)(cs)[0].update(
            pool="nv-a100-static", device=_static_1g(cs)
        ),
        "has no result": lambda cs: results(mig)(cs).pop(),
    }
    for expected, change in cases.items():
        found = _broken(claims, change)
        assert any(expected in line for line in found), (expected, found)


def _static_1g(_claims: Any) -> str:
    objects = v1checker.documents([NVIDIA_SLICES.read_text(encoding="utf-8")])
    inventory = v1checker.inventory(objects)
    return next(
        name
        for driver, pool, name in inventory.devices
        if pool == "nv-a100-static" and "1g" in name
    )


def test_the_checker_counts_consumable_capacity(
    run_cli: RunCli, write_yaml: WriteYaml, drasat_cluster: tuple[str, str]
) -> None:
    cluster, checked = drasat_cluster
    claims, _ = _placed(
        run_cli, cluster, checked, write_yaml("a.yaml", SHARES_APP + _share_pods(2))
    )
    changed = copy.deepcopy(claims)
    for claim in changed:
        _results(claim)[0].update(
            device="gpu-0", consumedCapacity={"memory": "9Gi", "compute": "30"}
        )
    found = v1checker.violations(v1checker.documents([checked]), changed)
    assert any("memory consumed" in line for line in found), found
    _results(changed[0])[0]["consumedCapacity"] = {"memory": "1Gi", "compute": "30"}
    found = v1checker.violations(v1checker.documents([checked]), changed[:1])
    assert any("does not cover the request" in line for line in found), found


# -- random small clusters and claims --------------------------------------------------------------


def _nvidia_nodes() -> dict[str, list[Obj]]:
    """The objects of each node of NVIDIA's example dump (its Node and slices)."""
    by_node: dict[str, list[Obj]] = {}
    for obj in v1checker.documents([NVIDIA_SLICES.read_text(encoding="utf-8")]):
        node = obj["metadata"]["name"] if obj["kind"] == "Node" else obj["spec"]["nodeName"]
        by_node.setdefault(node, []).append(obj)
    return by_node


NODE_KINDS = _nvidia_nodes()


def _copy_node(kind: str, name: str) -> list[Obj]:
    text = json.dumps(NODE_KINDS[kind]).replace(f'"{kind}"', f'"{name}"')
    text = re.sub(
        r"GPU-[0-9a-f-]{36}",
        lambda m: "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, name + m.group(0))),
        text,
    )
    objects: list[Obj] = json.loads(text)
    for obj in objects:
        obj["metadata"]["name"] = obj["metadata"]["name"].replace(kind, name)
    return objects


CLAIM_SHAPES = {
    "one-gpu": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
    "two-gpus": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
    "t4": [
        {
            "name": "g",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.attributes['gpu.nvidia.com'].productName "
                            "== 'Tesla T4'"
                        }
                    }
                ],
            },
        }
    ],
    "mig-1g": [
        {
            "name": "m",
            "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
                        }
                    }
                ],
            },
        }
    ],
    "mig-pair": [
        {
            "name": f"m{i}",
            "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "selectors": [
                    {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{p}'"}}
                ],
            },
        }
        for i, p in enumerate(("2g.10gb", "3g.20gb"))
    ],
}


def _app(shapes: list[str], shared: bool) -> str:
    docs: list[Obj] = []
    for i, shape in enumerate(shapes):
        spec: Obj = {"devices": {"requests": CLAIM_SHAPES[shape]}}
        if shape == "mig-pair":
            spec["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"namespace": "r", "name": f"c{i}"},
                "spec": spec,
            }
        )
        for j in range(2 if shared and i == 0 else 1):
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"namespace": "r", "name": f"p{i}-{j}"},
                    "spec": {
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                        "containers": [{"name": "c", "resources": {"claims": [{"name": "x"}]}}],
                        "resourceClaims": [{"name": "x", "resourceClaimName": f"c{i}"}],
                    },
                }
            )
    return "---\n".join(yaml.safe_dump(d) for d in docs)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    nodes=st.lists(st.sampled_from(sorted(NODE_KINDS)), min_size=1, max_size=3),
    shapes=st.lists(st.sampled_from(sorted(CLAIM_SHAPES)), min_size=1, max_size=5),
    shared=st.booleans(),
)
def test_random_clusters_and_claims_pass_the_checker(
    run_cli: RunCli, write_yaml: WriteYaml, nodes: list[str], shapes: list[str], shared: bool
) -> None:
    objects = [o for i, kind in enumerate(nodes) for o in _copy_node(kind, f"n{i}")]
    cluster = write_yaml(
        "random-cluster.yaml",
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}),
    )
    app = write_yaml("random-app.yaml", _app(shapes, shared))
    checked = Path(cluster).read_text(encoding="utf-8") + "---\n" + NVIDIA_CLASSES
    claims, _ = _placed(run_cli, cluster, checked, app)
    # A claim is not placed only with a reason; one that is placed is whole (checked above).
    for claim in claims:
        if not v1checker.allocated([claim]):
            assert claim["metadata"]["annotations"]["whatif.drasat.io/reason"]
    # Every placed pod's claim is allocated; a shared claim's pods share its node.
    result = run_cli("--cluster", cluster, "-f", app, "-o", "wide")
    rows = [line.split() for line in result.out.splitlines() if line.startswith("r/p")]
    on = {row[2]: row[3] for row in rows if row[1] == "x" and row[3] != "-"}
    assert len(on) == len(v1checker.allocated(claims))


HELD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: held}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
status:
  allocation:
    devices:
      results: [{request: gpu, driver: gpu.nvidia.com, pool: nv-t4, device: gpu-0}]
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [nv-t4]}]}]
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: running}
spec:
  nodeName: nv-t4
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers: [{name: c, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimName: held}]
"""
NEW = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: new}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: next}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers: [{name: c, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimName: new}]
"""


def test_claims_allocated_in_the_cluster_keep_their_devices(
    run_cli: RunCli, write_yaml: WriteYaml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim the cluster holds allocated (read with --from-cluster: a claim of the -f files
    has its status dropped) keeps its devices beside the new one."""
    from drasat import loading
    from drasat.cli import whatif as whatif_cli
    from drasat.whatif import v1manifests

    cluster, checked, _ = _nvidia()
    live = loading.read_documents(cluster) + loading.parse_documents(HELD, v1manifests.LIVE_SOURCE)
    monkeypatch.setattr(whatif_cli, "_live_documents", lambda args: live)
    app = write_yaml("app.yaml", NEW)
    result = run_cli("--from-cluster", "-f", app, "-o", "yaml")
    assert result.code == 0, result.err
    listing = yaml.safe_load(result.out)
    claims = [i for i in listing["items"] if i["kind"] == "ResourceClaim"]
    assert v1checker.violations(v1checker.documents([checked]), claims) == []
    # The checker sees both: gpu-0 held, the new claim on the other healthy T4.
    results = {c["metadata"]["name"]: _results(c) for c in claims}
    assert [r["device"] for r in results["held"]] == ["gpu-0"]
    assert [r["device"] for r in results["new"]] == ["gpu-1"]
    ledger = next(i for i in listing["items"] if i["metadata"]["name"] == "nv-t4")
    held = sorted(e["claimInfo"]["name"] for e in ledger["spec"]["allocatedClaims"].values())
    assert held == ["held", "new"]
    table = run_cli("--from-cluster", "-f", app).out
    assert "ml/running  g      nv-t4  gpu: gpu-0 (already allocated)" in table
    assert "claims: 1 allocated, 1 already in the cluster" in table
    page = run_cli("--from-cluster", "-f", app, "-o", "html").out
    assert re.search(r'class="seg existing" title="ml/held \(already allocated\)"', page)


def test_an_allocation_written_in_a_file_is_dropped_and_said(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    """The API server drops the status of a claim it creates: a -f claim's allocation holds
    nothing (its pod is placed anew, gpu-0 is free for it) and the table says why."""
    cluster, _, _ = _nvidia()
    app = write_yaml("app.yaml", HELD.replace("  nodeName: nv-t4\n", ""))
    result = run_cli("--cluster", cluster, "-f", app)
    table = result.out
    assert result.code == 0, result.err
    assert "already allocated" not in table
    assert "claims: 1 allocated, 0 already in the cluster" in table
    assert (
        f"note: ResourceClaim ml/held ({app}: document 1): status dropped: the API server "
        "drops the status of a claim it creates" in table
    )


FLEETS = ("1xT4", "2xT4", "1xA100-40GB,mig=0", "1xA100-40GB", "1xT4,1xA100-40GB,mig=1")


def _drasat_request(shape: tuple[str, int, int]) -> Obj:
    kind, memory, compute = shape
    if kind == "mig":
        profile = "device.attributes['gpu.drasat.io'].profile == '1g.5gb'"
        return {"deviceClassName": "mig.drasat.io", "selectors": [{"cel": {"expression": profile}}]}
    if kind == "share":
        asked = {"memory": f"{memory}Gi", "compute": str(compute)}
        return {"deviceClassName": "gpu.drasat.io", "capacity": {"requests": asked}}
    return {"deviceClassName": "gpu.drasat.io", "count": 2 if kind == "two" else 1}


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fleet=st.lists(st.sampled_from(FLEETS), min_size=1, max_size=2),
    shapes=st.lists(
        st.tuples(
            st.sampled_from(["whole", "two", "share", "mig"]),
            st.integers(1, 9),
            st.integers(5, 70),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_random_drasat_fleets_and_shares_pass_the_checker(
    run_cli: RunCli,
    write_yaml: WriteYaml,
    fleet: list[str],
    shapes: list[tuple[str, int, int]],
) -> None:
    slices = drasat_slices({f"n{i}": gpus for i, gpus in enumerate(fleet)})
    cluster = write_yaml("random-drasat.yaml", slices)
    docs: list[Obj] = []
    for i, shape in enumerate(shapes):
        request = {"name": "r", "exactly": _drasat_request(shape)}
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"namespace": "d", "name": f"c{i}"},
                "spec": {"devices": {"requests": [request]}},
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"namespace": "d", "name": f"p{i}"},
                "spec": {
                    "containers": [{"name": "c", "resources": {"claims": [{"name": "x"}]}}],
                    "resourceClaims": [{"name": "x", "resourceClaimName": f"c{i}"}],
                },
            }
        )
    app = write_yaml("random-drasat-app.yaml", "---\n".join(yaml.safe_dump(d) for d in docs))
    claims, _ = _placed(run_cli, cluster, slices + "---\n" + DRASAT_CLASSES, app)
    for claim in claims:
        if not v1checker.allocated([claim]):
            assert claim["metadata"]["annotations"]["whatif.drasat.io/reason"]


# -- what the table, wide and html say -------------------------------------------------------------

TWO_CLAIMS = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: big}
spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: ml, name: small}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: trainer}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers: [{name: c, resources: {claims: [{name: a}, {name: b}]}}]
  resourceClaims: [{name: a, resourceClaimName: big}, {name: b, resourceClaimName: small}]
"""


def test_why_a_pod_is_not_placed_is_said_once(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    app = write_yaml("app.yaml", TWO_CLAIMS)
    table = run_cli("--cluster", str(NVIDIA_SLICES), "-f", app).out
    rows = [line for line in table.splitlines() if line.startswith("ml/trainer ")]
    assert len(rows) == 3 and all(r.endswith("not placed (see below)") for r in rows[:2])
    (why,) = [r for r in table.splitlines() if "not placed: " in r]
    assert why.startswith("ml/trainer not placed: ") and "ml/big" in why
    wide = run_cli("--cluster", str(NVIDIA_SLICES), "-f", app, "-o", "wide").out
    asks = [line.strip() for line in wide.splitlines() if line.startswith("  ml/")]
    assert asks[0].startswith("ml/big request gpus: class gpu.nvidia.com, count 9, selectors (")
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in asks[0]


def test_the_solver_status_says_what_it_proves(run_cli: RunCli) -> None:
    cluster, _, files = _nvidia("gpu-test1.yaml")
    table = run_cli("--cluster", cluster, "-f", *files).out
    (line,) = [line for line in table.splitlines() if line.startswith("solver: ")]
    assert line.startswith(
        "solver: OPTIMAL (proven optimal for the whole set, each pod with its first choice of "
        "devices); best bound "
    )
    online = run_cli("--cluster", cluster, "-f", *files, "--mode", "online").out
    assert "solver: PER_POD_OPTIMAL (each pod optimal among its candidate nodes" in online


def test_html_draws_mig_placements_and_shares(
    run_cli: RunCli, write_yaml: WriteYaml, drasat_cluster: tuple[str, str]
) -> None:
    cluster, _, files = _nvidia("gpu-test4.yaml")
    page = run_cli("--cluster", cluster, "-f", *files, "-o", "html").out
    segments = re.findall(
        r'class="seg[^"]*" title="([^"]*)"\s+style="left: ([^;]*); width: ([^;]*);', page
    )
    mig = sorted((left, width, title.split()[0]) for title, left, width in segments)
    # gpu-test4's four devices at their placements on the A100's 8 memory slices: the two
    # tilings of slices 0-3 by two 1g.5gb and one 2g.10gb cost the same (either may come).
    assert ("50%", "50%", "3g.20gb") in mig
    low = sorted((left, width, profile) for left, width, profile in mig if left != "50%")
    assert low in (
        [("0%", "12.5%", "1g.5gb"), ("12.5%", "12.5%", "1g.5gb"), ("25%", "25%", "2g.10gb")],
        [("0%", "25%", "2g.10gb"), ("25%", "12.5%", "1g.5gb"), ("37.5%", "12.5%", "1g.5gb")],
    ), low
    shares_cluster, _ = drasat_cluster
    app = write_yaml("app.yaml", SHARES_APP + _share_pods(2))
    page = run_cli("--cluster", shares_cluster, "-f", app, "-o", "html").out
    widths = re.findall(
        r'class="seg[^"]*" title="30% [^"]*"\s+style="left: ([^;]*); width: 30%', page
    )
    assert sorted(widths) == ["0%", "30%"]


# -- bad input -------------------------------------------------------------------------------------

BAD_CEL = CEL_APP.replace("device.capacity['gpu.nvidia.com'].memory", "device.(")


@pytest.mark.parametrize(
    ("app", "code", "expected"),
    [
        (  # the API server refuses such a claim: bad input, not a pod left unplaced
            BAD_CEL,
            2,
            "app.yaml: document 1: ResourceClaim ml/t4: "
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: CEL expression",
        ),
        (
            CEL_APP.replace("deviceClassName: gpu.nvidia.com", "deviceClassName: gpu.example.com"),
            2,
            "spec.devices.requests[0].exactly.deviceClassName: no DeviceClass gpu.example.com",
        ),
        (
            CEL_APP.replace(
                "deviceClassName: gpu.nvidia.com",
                "deviceClassName: gpu.nvidia.com\n        count: x",
            ),
            2,
            "app.yaml: document 1: ResourceClaim ml/t4: spec.devices.requests[0].exactly.count: "
            "cannot unmarshal string into Go struct field "
            "ExactDeviceRequest.spec.devices.requests.exactly.count of type int64",
        ),
    ],
)
def test_bad_v1_input(
    run_cli: RunCli, write_yaml: WriteYaml, app: str, code: int, expected: str
) -> None:
    result = run_cli("--cluster", str(NVIDIA_SLICES), "-f", write_yaml("app.yaml", app))
    assert result.code == code, (result.out, result.err)
    assert expected in result.out + result.err
    assert "Traceback" not in result.err


def test_a_checker_given_bad_slices_says_so() -> None:
    objects = v1checker.documents([NVIDIA_CLASSES])
    claim = {
        "metadata": {"namespace": "a", "name": "b"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "g", "driver": "gpu.nvidia.com", "pool": "p", "device": "gpu-0"}
                    ]
                }
            }
        },
    }
    assert v1checker.violations(objects, [claim]) == [
        "claim a/b results[0] (g: gpu-0): no device gpu-0 in pool p of driver gpu.nvidia.com",
        "claim a/b: request g has no result",
    ]
    with pytest.raises(ValueError, match="not a quantity"):
        v1checker.quantity("12 apples")


# -- the real API server accepts what is printed ---------------------------------------------------


def test_printed_claims_pass_the_api_servers_validation(
    run_cli: RunCli,
    write_yaml: WriteYaml,
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    drasat_cluster: tuple[str, str],
) -> None:
    """Each printed claim as `kubectl apply --dry-run=server` sends it; then its status as the
    controller writes it (a dry-run status update of the claim created for real), which the API
    server validates against the claim's spec (request names, driver/pool/device names,
    shareID, consumedCapacity, nodeSelector)."""
    import kubernetes

    custom = kubernetes.client.CustomObjectsApi(kube_api)
    claims = []
    runs = [_nvidia(f"gpu-test{n}.yaml") for n in ("1", "3", "4", "5", "-mps")]
    shares = write_yaml("s.yaml", SHARES_APP + _share_pods(2))
    runs.append((drasat_cluster[0], drasat_cluster[1], (shares,)))
    for cluster, checked, files in runs:
        printed, _ = _placed(run_cli, cluster, checked, *files)
        claims += v1checker.allocated(printed)
    # Whole GPUs, a shared claim, MIG devices, TimeSlicing/MPS configs, consumable shares.
    assert len(claims) == 8
    for printed in claims:
        body = copy.deepcopy(printed)
        body["metadata"]["namespace"] = kube_namespace
        body["metadata"].pop("uid")
        status = body.pop("status")
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", kube_namespace, "resourceclaims", body, dry_run="All"
        )
        body["metadata"].pop("ownerReferences", None)  # no such pod: the collector would delete it
        made = custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", kube_namespace, "resourceclaims", body
        )
        made["status"] = status
        kept = custom.replace_namespaced_custom_object_status(
            "resource.k8s.io",
            "v1",
            kube_namespace,
            "resourceclaims",
            made["metadata"]["name"],
            made,
            dry_run="All",
        )
        assert (
            kept["status"]["allocation"]["devices"]["results"]
            == status["allocation"]["devices"]["results"]
        )
    # The same update with a result naming no request of the claim is refused: the server did
    # check the printed allocations against the claims.
    made["status"]["allocation"]["devices"]["results"][0]["request"] = "no-such-request"
    with pytest.raises(kubernetes.client.ApiException) as refused:
        custom.replace_namespaced_custom_object_status(
            "resource.k8s.io",
            "v1",
            kube_namespace,
            "resourceclaims",
            made["metadata"]["name"],
            made,
            dry_run="All",
        )
    assert refused.value.status == 422 and "no-such-request" in str(refused.value.body)


def test_a_selector_that_does_not_compile_is_one_line_naming_file_object_and_field(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    """As the API server refuses the claim on create: exit 2, one line, the expression whole
    and where cel-go would say the syntax error is (issue 26 item 5)."""
    expression = "device.attributes['gpu.nvidia.com'].productName == 'Tesla T4' && (device.x ="
    app = CEL_APP.replace("device.capacity['gpu.nvidia.com'].memory", "(" + expression + ") ||")
    result = run_cli("--cluster", str(NVIDIA_SLICES), "-f", write_yaml("app.yaml", app))
    assert result.code == 2 and result.out == ""
    (line,) = result.err.splitlines()
    assert line.startswith("error: ") and line.endswith(": Syntax error")
    assert "app.yaml: document 1: ResourceClaim ml/t4: " in line
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression: " in line
    assert expression in line and "ERROR: <input>:1:" in line
