"""The input paths the fuzzer drives, in-process: each turns one case into an outcome class.

An outcome is `accepted`, `input error` (one short line naming the input) or `rejected` (the
component named the bad object and kept serving); anything else raises `Failure` with its class:
`traceback` (an exception escaped), `message` (an error of more than one line, too long, or not
naming its input), `internal error` (the node plugin caught a bug of its own), `lost claim` (a
gRPC response without one of the request's claims). Hangs are the runner's to catch.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drasat import loading, policyfiles
from drasat.api import handles
from drasat.api.inputerrors import InputError
from drasat.api.nas import AllocatedDevices
from drasat.classic import params
from drasat.classic.whatif import manifests
from drasat.controller import nasnodes
from drasat.whatif import clusternodes, run

from .mutate import SCALARS, Mutator

REPO = Path(__file__).resolve().parents[2]
#: Longest error message accepted (api/inputerrors.py cuts each part at 1,000 characters).
MAX_MESSAGE = 2200
LINE_BREAKS = ("\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c")


class Failure(Exception):
    """A case the input path did not survive; `kind` is its outcome class."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def check_message(message: str, source: str) -> None:
    if any(c in message for c in LINE_BREAKS):
        raise Failure("message", f"more than one line: {message[:300]!r}")
    if len(message) > MAX_MESSAGE:
        raise Failure("message", f"{len(message)} characters: {message[:300]!r}")
    if source and not message.startswith(source):
        raise Failure("message", f"does not start with {source!r}: {message[:300]!r}")


@dataclass
class Target:
    """One input path: its seeds, how a case is made from a seed, and how it is run."""

    name: str
    description: str
    seeds: Callable[[], list[Any]]
    make: Callable[[Mutator, Any], Any]
    run: Callable[[Any, Path], str]
    _seeds: list[Any] | None = field(default=None, repr=False)

    def case(self, rng: random.Random) -> Any:
        if self._seeds is None:
            self._seeds = self.seeds()
        return self.make(Mutator(rng), rng.choice(self._seeds))


# --- YAML files: what-if cluster and manifests, policies --------------------------------------


def _yaml_seeds(*patterns: str, leave_out: str = "") -> Callable[[], list[str]]:
    def seeds() -> list[str]:
        found = sorted(p for pattern in patterns for p in REPO.glob(pattern))
        found = [p for p in found if not (leave_out and leave_out in str(p))]
        return [p.read_text(encoding="utf-8") for p in found]

    return seeds


def _file_case(mutator: Mutator, text: str) -> bytes:
    """A seed file, damaged: structurally (re-dumped), in its YAML text, or byte by byte."""
    rng = mutator.rng
    roll = rng.random()
    if roll < 0.6:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
        if documents:
            index = rng.randrange(len(documents))
            documents[index] = mutator.structural(documents[index])
            if rng.random() < 0.1:
                documents.append(rng.choice(documents))
        text = mutator.dump(documents)
        if rng.random() < 0.2:
            text = mutator.text(text)
    elif roll < 0.85:
        text = mutator.text(text)
    else:
        return mutator.bytes_(text.encode("utf-8"))
    return text.encode("utf-8", "surrogatepass")


def _write(raw: bytes, workdir: Path, name: str) -> str:
    path = workdir / name
    path.write_bytes(raw)
    return str(path)


def _as_input_error(action: Callable[[], object], source: str) -> str:
    try:
        action()
    except InputError as error:
        check_message(str(error), source)
        return "input error"
    return "accepted"


_CLUSTER_NODES = None


def _small_cluster() -> clusternodes.ClusterNodes:
    global _CLUSTER_NODES
    if _CLUSTER_NODES is None:
        _CLUSTER_NODES = clusternodes.load(run.embedded(run.COMPACT_CLUSTER))
    return _CLUSTER_NODES


def run_cluster(raw: bytes, workdir: Path) -> str:
    path = _write(raw, workdir, "cluster.yaml")
    return _as_input_error(
        lambda: clusternodes.load(loading.read_documents(path), source=path), path
    )


def run_manifests(raw: bytes, workdir: Path) -> str:
    path = _write(raw, workdir, "manifests.yaml")
    cluster = _small_cluster()

    def compile_() -> None:
        workload = manifests.compile_manifests(
            loading.read_documents(path),
            offered_profiles=cluster.offered_profiles(),
            existing_uids=cluster.existing_uids(),
        )
        workload.requests()

    return _as_input_error(compile_, path)


def run_policy(raw: bytes, workdir: Path) -> str:
    # The CLI's `policy validate` (a file) and the controller's reload (a ConfigMap's text).
    path = _write(raw, workdir, "policy.yaml")
    outcome = _as_input_error(lambda: policyfiles.load(path), path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return outcome  # a ConfigMap value is a string: the API server would refuse these bytes
    source = "ConfigMap drasat/policy key policy.yaml"
    again = _as_input_error(lambda: policyfiles.from_text(text, source=source), source)
    if again != outcome:
        raise Failure("traceback", f"file and ConfigMap text disagree: {outcome} vs {again}")
    return outcome


def _cli_case(mutator: Mutator, text: str) -> dict[str, Any]:
    rng = mutator.rng
    output = rng.choice(["table", "wide", "yaml", "json", "html"])
    return {
        "manifests": _file_case(mutator, text),
        "output": output,
        "mode": rng.choice(["batch", "online"]),
    }


def run_cli(case: dict[str, Any], workdir: Path) -> str:
    """The whole `drasat whatif` in-process: read, compile, solve (1 s budget), render."""
    from drasat.cli import main as cli_main

    path = _write(case["manifests"], workdir, "manifests.yaml")
    policy = workdir / "fast-policy.yaml"
    if not policy.exists():
        policy.write_text(
            "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\n"
            "metadata: {name: fast}\nspec: {solver: {timeLimitSeconds: 1}}\n",
            encoding="utf-8",
        )
    out, err = io.StringIO(), io.StringIO()
    argv = [
        "whatif",
        "-f",
        path,
        "--policy",
        str(policy),
        "-o",
        case["output"],
        "--mode",
        case["mode"],
    ]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main.main(argv)
    if code == 2:
        message = err.getvalue()
        if not message.startswith("error: ") or message.count("\n") != 1:
            raise Failure("message", f"exit 2 with {message[:300]!r}")
        check_message(message.removeprefix("error: ").rstrip("\n"), path)
        return "input error"
    if code != 0:
        raise Failure("traceback", f"exit {code}: {err.getvalue()[-300:]!r}")
    return "accepted"


# --- API objects the controller and node plugin read -----------------------------------------

NAS_SEED: dict[str, Any] = {
    "apiVersion": "nas.gpu.drasat.io/v1alpha1",
    "kind": "NodeAllocationState",
    "metadata": {"name": "node-1", "namespace": "drasat", "resourceVersion": "7"},
    "spec": {
        "allocatableDevices": [
            {
                "gpu": {
                    "index": 0,
                    "uuid": "GPU-a",
                    "minor": 0,
                    "migEnabled": False,
                    "memoryBytes": 16106127360,
                    "productName": "Tesla T4",
                    "architecture": "Turing",
                    "cudaComputeCapability": "7.5",
                    "nvlinkPeers": ["GPU-b"],
                    "numaNode": 0,
                    "pciBusID": "0000:3b:00.0",
                }
            },
            {
                "gpu": {
                    "index": 1,
                    "uuid": "GPU-b",
                    "migEnabled": True,
                    "memoryBytes": 42949672960,
                    "productName": "NVIDIA A100-SXM4-40GB",
                }
            },
            {
                "mig": {
                    "profile": "3g.20gb",
                    "parentProductName": "NVIDIA A100-SXM4-40GB",
                    "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
                    "giProfileId": 9,
                    "memoryBytes": 21474836480,
                    "computeSlices": 3,
                }
            },
        ],
        "allocatedClaims": {
            "uid-1": {
                "claimInfo": {"namespace": "ns", "name": "c1", "uid": "uid-1"},
                "gpu": {
                    "devices": [{"uuid": "GPU-a"}],
                    "sharing": {
                        "strategy": "TimeSlicing",
                        "timeSlicingConfig": {"timeSlice": "Long"},
                    },
                },
                "lifecycle": [{"action": "setComputeMode", "value": "ExclusiveProcess"}],
            },
            "uid-2": {
                "claimInfo": {"namespace": "ns", "name": "c2", "uid": "uid-2"},
                "mig": {
                    "devices": [
                        {
                            "profile": "3g.20gb",
                            "parentUUID": "GPU-b",
                            "placement": {"start": 0, "size": 4},
                        }
                    ]
                },
            },
            "uid-3": {
                "claimInfo": {"namespace": "ns", "name": "c3", "uid": "uid-3"},
                "gpu": {"devices": [{"uuid": "GPU-a"}]},
                "share": {"compute": 50, "memory": "4Gi"},
            },
        },
        "preparedClaims": {"uid-1": {"gpu": {"devices": [{"uuid": "GPU-a"}]}}},
    },
    "status": "Ready",
}


def _object_case(mutator: Mutator, seed: dict[str, Any]) -> dict[str, Any]:
    # The API server holds objects with metadata, apiVersion and kind it checked itself: only
    # what a schema (or a corrupt store, or an older CRD) lets through is mutated.
    keep = ("metadata", "apiVersion", "kind")
    mutated = mutator.structural(seed, keep=keep)
    if not isinstance(mutated, dict):
        mutated = {}
    return {**mutated, **{k: seed[k] for k in keep if k in seed}}


def _claim_case(mutator: Mutator, claim: dict[str, Any]) -> dict[str, Any]:
    """A built-in ResourceClaim: the API server checked its types, so only its values vary."""
    rng = mutator.rng
    claim = json.loads(json.dumps(claim))
    spec = claim["spec"]
    roll = rng.random()
    strings = [v for v in SCALARS if isinstance(v, str)]
    if roll < 0.2:
        del spec["parametersRef"]
    elif roll < 0.4:
        spec["allocationMode"] = rng.choice(["Immediate", "WaitForFirstConsumer"])
    else:
        ref = spec["parametersRef"]
        key = rng.choice(["apiGroup", "kind", "name"])
        if key == "apiGroup" and rng.random() < 0.3:
            del ref[key]
        else:
            ref[key] = rng.choice(strings)
    return claim


def run_nas(obj: dict[str, Any], workdir: Path) -> str:
    # The controller's view: never raises; a bad object makes its node unsuitable, named.
    parsed = nasnodes.parse(obj)
    if parsed.problem:
        check_message(parsed.problem, "NodeAllocationState drasat/node-1")
    # The what-if's view of the same object (kubectl get nas -o yaml).
    document = loading.Document("nas.yaml", 1, obj)
    outcome = _as_input_error(lambda: clusternodes.load([document], source="nas.yaml"), "nas.yaml")
    return "rejected" if parsed.problem else outcome


GPU_PARAMS: dict[str, Any] = {
    "apiVersion": "gpu.drasat.io/v1alpha1",
    "kind": "GpuClaimParameters",
    "metadata": {"name": "params", "namespace": "ns"},
    "spec": {
        "count": 2,
        "selector": {
            "andExpression": [
                {"productName": "*A100*"},
                {"memory": {"value": "40Gi", "operator": "GreaterThanOrEqualTo"}},
                {
                    "orExpression": [
                        {"cudaComputeCapability": {"value": "8.0", "operator": "GreaterThan"}},
                        {"index": 0},
                    ]
                },
            ]
        },
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"0": "5Gi"},
            },
        },
        "topology": {"sameNVLinkDomain": "Preferred"},
    },
}
SHARE_PARAMS: dict[str, Any] = {
    "apiVersion": "gpu.drasat.io/v1alpha1",
    "kind": "GpuClaimParameters",
    "metadata": {"name": "params", "namespace": "ns"},
    "spec": {
        "share": {"compute": 30, "memory": "8Gi"},
        "optional": True,
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}},
    },
}
MIG_PARAMS: dict[str, Any] = {
    "apiVersion": "gpu.drasat.io/v1alpha1",
    "kind": "MigDeviceClaimParameters",
    "metadata": {"name": "params", "namespace": "ns"},
    "spec": {"profile": "3g.20gb", "gpuClaimName": "gpu"},
}
MIG_NEEDS_PARAMS: dict[str, Any] = {
    "apiVersion": "gpu.drasat.io/v1alpha1",
    "kind": "MigDeviceClaimParameters",
    "metadata": {"name": "params", "namespace": "ns"},
    "spec": {"memory": "10Gi", "computeSlices": 2},
}
CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1alpha2",
    "kind": "ResourceClaim",
    "metadata": {"name": "claim", "namespace": "ns", "uid": "uid-9"},
    "spec": {
        "resourceClassName": "gpu.drasat.io",
        "allocationMode": "WaitForFirstConsumer",
        "parametersRef": {
            "apiGroup": "gpu.drasat.io",
            "kind": "GpuClaimParameters",
            "name": "params",
        },
    },
}
CLASS_PARAMS: dict[str, Any] = {
    "apiVersion": "gpu.drasat.io/v1alpha1",
    "kind": "DeviceClassParameters",
    "metadata": {"name": "class-params"},
    "spec": {"sharable": False},
}


def _params_case(mutator: Mutator, seed: dict[str, Any]) -> dict[str, Any]:
    rng = mutator.rng
    claim = json.loads(json.dumps(CLAIM))
    claim["spec"]["parametersRef"]["kind"] = seed["kind"]
    parameters, class_params = seed, CLASS_PARAMS
    roll = rng.random()
    if roll < 0.7:
        parameters = _object_case(mutator, seed)
    elif roll < 0.85:
        claim = _claim_case(mutator, claim)
    else:
        class_params = _object_case(mutator, CLASS_PARAMS)
    return {"claim": claim, "parameters": parameters, "classParameters": class_params}


def run_params(case: dict[str, Any], workdir: Path) -> str:
    """The controller's claim → parameters → ClaimRequest, through an informer-like lookup."""
    objects = {
        (o["kind"], (o.get("metadata") or {}).get("name")): o
        for o in (case["parameters"], case["classParameters"])
    }

    def lookup(group: str, kind: str, namespace: str | None, name: str) -> Any:
        return objects.get((kind, name))

    resource_class = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClass",
        "metadata": {"name": "gpu.drasat.io"},
        "driverName": "gpu.drasat.io",
        "parametersRef": {
            "apiGroup": "gpu.drasat.io",
            "kind": "DeviceClassParameters",
            "name": "class-params",
        },
    }
    try:
        info = params.resolve_class(resource_class, lookup)
        params.resolve_claim(case["claim"], info, lookup)
        params.allocation_mode(case["claim"])
    except params.ParameterError as error:
        check_message(error.message, "")
        return "rejected"
    return "accepted"


# --- the node plugin's gRPC services ----------------------------------------------------------


class _NasClaims:
    """The v1 services' claim reader: a v1 ResourceClaim made from the (fuzzed) NAS entry that
    names the claim, its GPUs as allocation results (`gpu-<minor>`, or the UUID when unknown)."""

    def __init__(self, store: Any, gpus: Any) -> None:
        self.store, self.gpus = store, gpus

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        from drasat.nodeplugin.state import ClaimError

        minors = {gpu.uuid: gpu.minor for gpu in self.gpus()}
        try:
            for uid, entry in (self.store.obj["spec"].get("allocatedClaims") or {}).items():
                info = entry.get("claimInfo") or {}
                if (info.get("namespace"), info.get("name")) != (namespace, name):
                    continue
                uuids = [d.get("uuid") for d in (entry.get("gpu") or {}).get("devices") or []]
                results = [
                    {"request": "gpu", "driver": "gpu.drasat.io", "pool": "gpu-node-1",
                     "device": f"gpu-{minors[u]}" if u in minors else str(u)}
                    for u in uuids
                ]  # fmt: skip
                allocation = {"devices": {"results": results}}
                return {"metadata": {"uid": uid}, "status": {"allocation": allocation}}
        except (AttributeError, TypeError, KeyError) as error:
            raise ClaimError(f"damaged NAS entry: {error!r}") from None
        raise ClaimError(f"ResourceClaim {namespace}/{name} not found")


class _Node:
    """One simulated GPU node with the production plugin code over it (as tests/nodeplugin)."""

    def __init__(self) -> None:
        from drasat.nodeplugin import dra, mps, nvml, v1claims
        from drasat.nodeplugin.nasstore import MemoryNasStore
        from drasat.nodeplugin.plugin import Config, NodePlugin
        from drasat.testbed import simnvml

        self.root = Path(tempfile.mkdtemp(prefix="fz-", dir="/tmp"))
        self.sim = simnvml.SimulatedNvml("2xT4,1xA100-40GB,mig=all")
        lib = nvml.NvmlDeviceLib(self.sim, run=self.sim.run)
        self.store = MemoryNasStore(node="gpu-node-1", namespace="drasat")
        config = Config(
            node_name="gpu-node-1",
            namespace="drasat",
            cdi_root=self.root / "cdi",
            plugin_dir=self.root / "plugins",
            registry_dir=self.root / "registry",
            state_dir=self.root / "state",
            gc_interval_s=0,
            health_wait_ms=50,
        )
        self.plugin = NodePlugin(
            config, lib=lib, store=self.store, mps_runner=mps.RecordingRunner()
        )
        self.plugin.publish()
        allocations = v1claims.ClaimAllocations(
            _NasClaims(self.store, self.plugin.state.gpus),
            pool="gpu-node-1",
            gpus=self.plugin.state.gpus,
        )
        self.services = {
            "v1alpha3": dra.NodeV1alpha3(self.plugin.state),
            "v1beta1": dra.DraPluginV1beta1(self.plugin.state, allocations),
            "v1": dra.DraPluginV1(self.plugin.state, allocations),
        }
        self.uuids = [g.uuid for g in self.sim.gpus]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_NODE: _Node | None = None


def node() -> _Node:
    global _NODE
    if _NODE is None:
        _NODE = _Node()
    return _NODE


def _grpc_seeds() -> list[dict[str, Any]]:
    served = node()
    t4, a100 = served.uuids[0], served.uuids[-1]

    def allocation(uid: str, **kind: Any) -> dict[str, Any]:
        return {"claimInfo": {"namespace": "ns", "name": f"c-{uid}", "uid": uid}, **kind}

    gpu = allocation(
        "u-gpu",
        gpu={
            "devices": [{"uuid": t4}],
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
        },
        lifecycle=[{"action": "setComputeMode", "value": "ExclusiveProcess"}],
    )
    mps = allocation(
        "u-mps",
        gpu={
            "devices": [{"uuid": served.uuids[1]}],
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {
                    "defaultActiveThreadPercentage": 40,
                    "defaultPinnedDeviceMemoryLimit": "2Gi",
                },
            },
        },
        share={"compute": 40},
    )
    mig = allocation(
        "u-mig",
        mig={
            "devices": [
                {"profile": "3g.20gb", "parentUUID": a100, "placement": {"start": 4, "size": 4}}
            ]
        },
    )
    optional = allocation("u-opt", gpu={"devices": []}, optional=True)
    return [
        {"allocations": {"u-gpu": gpu}, "claims": [["u-gpu", "ns", "c-u-gpu", ""]]},
        {"allocations": {"u-mps": mps}, "claims": [["u-mps", "ns", "c-u-mps", ""]]},
        {
            "allocations": {"u-mig": mig, "u-opt": optional},
            "claims": [["u-mig", "ns", "c-u-mig", ""], ["u-opt", "ns", "c-u-opt", ""]],
        },
        {
            "allocations": {},
            "claims": [
                [
                    "u-h",
                    "ns",
                    "c-u-h",
                    handles.encode(
                        "gpu-node-1",
                        AllocatedDevices.model_validate(
                            {**gpu, "claimInfo": {"namespace": "ns", "name": "c-u-h", "uid": "u-h"}}
                        ),
                    ),
                ]
            ],
        },
    ]


def _grpc_case(mutator: Mutator, seed: dict[str, Any]) -> dict[str, Any]:
    rng = mutator.rng
    case = json.loads(json.dumps(seed))
    roll = rng.random()
    if roll < 0.4:
        case["allocations"] = mutator.structural(case["allocations"])
    elif roll < 0.65:
        case["claims"] = mutator.structural(case["claims"])
    elif roll < 0.75:  # unknown claims, duplicates, odd strings
        case["claims"] += [
            [
                rng.choice(["", "nope", "u-gpu", "x" * 5000, "a\nb", "\u2028", "../../etc"]),
                rng.choice(["", "ns", "other", "\x00"]),
                rng.choice(["", "c-u-gpu", "z" * 300]),
                rng.choice(["", "{}", "[]", "null", '{"gpu": 1}', "[" * 10000, "9" * 5000]),
            ]
            for _ in range(rng.randint(1, 5))
        ]
    elif roll < 0.8:  # a huge list
        case["claims"] = [[f"u-{i}", "ns", f"c-{i}", ""] for i in range(rng.choice([500, 3000]))]
    else:  # a damaged resource handle
        claims = case["claims"]
        if claims and isinstance(claims[0], list) and len(claims[0]) == 4:
            handle = claims[0][3] or json.dumps(next(iter(case["allocations"].values()), {}))
            claims[0][3] = mutator.bytes_(handle.encode()).decode("utf-8", "replace")
    case["service"] = rng.choice(["v1alpha3", "v1beta1", "v1"])
    return case


def _claims_of(case: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The request's claims as protobuf would carry them (strings; anything else is dropped by
    the kubelet's own marshalling, so it is turned into its text here)."""
    out = []
    claims = case.get("claims")
    for claim in claims if isinstance(claims, list) else []:
        fields = claim if isinstance(claim, list) else [claim]
        texts = [f if isinstance(f, str) else json.dumps(f) for f in [*fields, "", "", "", ""][:4]]
        out.append((texts[0], texts[1], texts[2], texts[3]))
    return out


def run_grpc(case: dict[str, Any], workdir: Path) -> str:
    served = node()
    store = served.store
    allocations = case.get("allocations")
    if not isinstance(allocations, dict):  # the NAS's allocatedClaims map holds anything
        allocations = case["allocations"] = {"u-gpu": allocations}
    for uid, allocation in allocations.items():
        store.allocate(str(uid), allocation)
    service = served.services[case.get("service", "v1alpha3")]
    claims = _claims_of(case)
    module = _pb2(case.get("service", "v1alpha3"))
    try:
        prepare = module.NodePrepareResourcesRequest()
        unprepare = module.NodeUnprepareResourcesRequest()
        for uid, namespace, name, handle in claims:
            for request in (prepare, unprepare):
                entry = request.claims.add(uid=uid, namespace=namespace, name=name)
                if hasattr(entry, "resource_handle"):
                    entry.resource_handle = handle
        prepared = service.NodePrepareResources(prepare, None)
        unprepared = service.NodeUnprepareResources(unprepare, None)
    finally:
        for uid in list(case.get("allocations") or {}):
            store.deallocate(str(uid))
    wanted = {uid for uid, *_ in claims}
    for response, what in ((prepared, "prepare"), (unprepared, "unprepare")):
        got = set(response.claims.keys())
        if got != wanted:
            raise Failure("lost claim", f"{what}: {len(wanted)} claims asked, {len(got)} answered")
        for uid, result in response.claims.items():
            if "internal error" in result.error:
                raise Failure("internal error", f"{what} {uid[:40]!r}: {result.error[-300:]}")
    if any(result.error for result in prepared.claims.values()):
        return "claim errors"
    return "prepared" if claims else "empty request"


def _pb2(service: str) -> Any:
    from drasat.nodeplugin.gen import dra_v1_pb2, dra_v1alpha3_pb2, dra_v1beta1_pb2

    return {"v1alpha3": dra_v1alpha3_pb2, "v1beta1": dra_v1beta1_pb2, "v1": dra_v1_pb2}[service]


def check_node_still_serves() -> None:
    """After a run: a good claim is prepared and unprepared on the same plugin."""
    served = node()
    uid = "u-after"
    served.store.allocate(
        uid,
        {
            "claimInfo": {"namespace": "ns", "name": "after", "uid": uid},
            "gpu": {"devices": [{"uuid": served.uuids[0]}]},
        },
    )
    try:
        service = served.services["v1"]
        module = _pb2("v1")
        request = module.NodePrepareResourcesRequest()
        request.claims.add(uid=uid, namespace="ns", name="after")
        response = service.NodePrepareResources(request, None)
        if response.claims[uid].error:
            raise Failure("traceback", f"the plugin stopped serving: {response.claims[uid].error}")
        undo = module.NodeUnprepareResourcesRequest()
        undo.claims.add(uid=uid, namespace="ns", name="after")
        if service.NodeUnprepareResources(undo, None).claims[uid].error:
            raise Failure("traceback", "the plugin could not unprepare a good claim")
    finally:
        served.store.deallocate(uid)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "whatif-cluster",
            "drasat whatif --cluster FILE (Cluster descriptions, NAS dumps)",
            _yaml_seeds(
                "drasat/whatif/default-cluster.yaml",
                "deploy/examples/clusters/*.yaml",
                "tests/fuzz/seeds/*-nas.yaml",
            ),
            _file_case,
            run_cluster,
        ),
        Target(
            "whatif-manifests",
            "drasat whatif -f FILE (claims, parameters, pods, workloads)",
            _yaml_seeds(
                "drasat/whatif/default-manifests.yaml",
                "drasat/classic/whatif/default-manifests-classic.yaml",
                "deploy/examples/*/*.yaml",
                leave_out="/clusters/",
            ),
            _file_case,
            run_manifests,
        ),
        Target(
            "whatif-cli",
            "the whole drasat whatif -f FILE in-process: compile, solve "
            "(1 s budget), every output format",
            _yaml_seeds(
                "drasat/whatif/default-manifests.yaml",
                "drasat/classic/whatif/default-manifests-classic.yaml",
                "deploy/examples/*/*.yaml",
                leave_out="/clusters/",
            ),
            _cli_case,
            run_cli,
        ),
        Target(
            "policy",
            "drasat policy validate FILE and the controller's ConfigMap reload",
            _yaml_seeds("policies/*.yaml"),
            _file_case,
            run_policy,
        ),
        Target(
            "nas",
            "NodeAllocationState objects from the API server (controller, what-if)",
            lambda: [NAS_SEED],
            _object_case,
            run_nas,
        ),
        Target(
            "claim-parameters",
            "classic claim parameters read by the controller",
            lambda: [GPU_PARAMS, SHARE_PARAMS, MIG_PARAMS, MIG_NEEDS_PARAMS],
            _params_case,
            run_params,
        ),
        Target(
            "nodeplugin-grpc",
            "NodePrepareResources/NodeUnprepareResources (v1alpha3, "
            "v1beta1, v1) with damaged NAS entries, requests and resource handles",
            _grpc_seeds,
            _grpc_case,
            run_grpc,
        ),
    ]
}
