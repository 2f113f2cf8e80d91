"""The node of the checkpoint fixture `fixtures/checkpoint-v1/` (issue 25): what it prepared.

`fixtures/checkpoint-v1/` holds the claim files of a node that prepared `prepare_all`'s claims,
written by the checkpoint format 1 (commit 422a704, before records had a `version`):
`test_np_checkpoint_v1.py` loads them with today's code. Run as a program to write them again
(`python tests/nodeplugin/npcheckpointv1.py DIR`): only meaningful with the version-1 code, which
is why the files are committed rather than made by the test. The state directory's path is
written as `@ROOT@` (the test's temporary directory) and a MIG device's UUID (random in the
simulator) as `@MIG-<gpu>-<start>-<ci>@`; each file's checksum is computed again when it is put
back.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from npfixtures import NODE, V1, Claims, Node, gpu_allocation, make_node, ref, v1_claim

FLEET = "4xA100-40GB,mig=2"
ROOT = "@ROOT@"

WHOLE = "f1c70000-0000-4000-8000-000000000001"  # gpu-0, NVIDIA GpuConfig time-slicing Long
SHARE_A = "f1c70000-0000-4000-8000-000000000002"  # 30% and 8Gi of gpu-1
SHARE_B = "f1c70000-0000-4000-8000-000000000003"  # 70% and 16Gi of gpu-1
MIG = "f1c70000-0000-4000-8000-000000000004"  # a 3g.20gb at start 0 of gpu-2
FALLBACK = "f1c70000-0000-4000-8000-000000000005"  # the node's cpu-fallback only
CLASSIC = "f1c70000-0000-4000-8000-000000000006"  # gpu-3, a classic claim in the NAS

V1_CLAIMS = (WHOLE, SHARE_A, SHARE_B, MIG, FALLBACK)

TIME_SLICING = {
    "source": "FromClaim",
    "opaque": {
        "driver": "gpu.drasat.io",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        },
    },
}


def claims() -> Claims:
    """The ResourceClaims of the v1 claims, as the API server has them."""
    found = Claims()
    found.add(v1_claim(WHOLE, ("gpu", NODE, "gpu-0"), name="whole", config=[TIME_SLICING]))
    for uid, name, compute, memory in (
        (SHARE_A, "share-a", "30", "8Gi"),
        (SHARE_B, "share-b", "70", "16Gi"),
    ):
        claim = v1_claim(uid, ("share", NODE, "gpu-1"), name=name)
        result = claim["status"]["allocation"]["devices"]["results"][0]
        result.update(
            shareID=f"share-{name}", consumedCapacity={"memory": memory, "compute": compute}
        )
        found.add(claim)
    found.add(v1_claim(MIG, ("mig", NODE, "gpu-2-mig-3g20gb-9-0"), name="mig"))
    found.add(v1_claim(FALLBACK, ("gpu-or-cpu/cpu", NODE, "cpu-fallback"), name="fallback"))
    return found


NAMES = {WHOLE: "whole", SHARE_A: "share-a", SHARE_B: "share-b", MIG: "mig", FALLBACK: "fallback"}


def prepare_all(node: Node, found: Claims) -> dict[str, Any]:
    """Prepare every claim of the fixture on `node`: the kubelet's answers by uid (v1) and the
    classic claim's CDI ids."""
    answers = dict(V1(node, found).prepare(*[(uid, NAMES[uid]) for uid in V1_CLAIMS]))
    node.allocate(CLASSIC, gpu_allocation(CLASSIC, node.gpu(3)))
    answers[CLASSIC] = node.state.prepare(ref(CLASSIC))
    return answers


def placeholders(node: Node) -> dict[str, str]:
    """The node's run-specific names -> their placeholders in the fixture: the state directory's
    root, and each MIG device's UUID (random in the simulator) by GPU index and start."""
    found = {str(node.root): ROOT}
    for index, gpu in enumerate(node.sim.gpus):
        for gi in gpu.gpu_instances.values():
            for ci in gi.compute_instances.values():
                found[ci.uuid] = f"@MIG-{index}-{gi.start}-{ci.id}@"
    return found


def anonymous(text: str, node: Node) -> str:
    for name, placeholder in placeholders(node).items():
        text = text.replace(name, placeholder)
    return text


def concrete(text: str, node: Node) -> str:
    for name, placeholder in placeholders(node).items():
        text = text.replace(placeholder, name)
    return text


def cdi_specs(node: Node) -> list[Path]:
    """The claims' CDI spec files on the node."""
    return sorted(node.config.cdi_root.glob("*claim_*.json"))


def answered(answers: dict[str, Any]) -> dict[str, Any]:
    """What the kubelet was answered (v1: each device's requests, pool, name, CDI ids, share) and
    the classic claim's CDI ids, as JSON."""
    out: dict[str, Any] = {CLASSIC: list(answers[CLASSIC])}
    for uid in V1_CLAIMS:
        out[uid] = [
            [list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids), d.share_id]
            for d in answers[uid].devices
        ]
    return out


def write(target: Path) -> None:
    """Prepare the claims on a fresh node and copy its checkpoint directory to `target`."""
    root = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    try:
        node = make_node(root, FLEET)
        answers = prepare_all(node, claims())
        for uid in V1_CLAIMS:
            assert answers[uid].error == "", answers[uid].error
        source = root / "state" / "checkpoint"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in sorted(source.rglob("*.json")):
            text = anonymous(path.read_text(), node)
            body = json.loads(text)["data"]
            out = target / path.relative_to(source)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        text = anonymous(json.dumps(answered(answers), indent=1, sort_keys=True) + "\n", node)
        (target.parent / f"{target.name}-answers.json").write_text(text)
        specs = {p.name: json.loads(anonymous(p.read_text(), node)) for p in cdi_specs(node)}
        text = json.dumps(specs, indent=1, sort_keys=True) + "\n"
        (target.parent / f"{target.name}-cdi.json").write_text(text)
    finally:
        from drasat.nodeplugin import mps

        mps.stop_simulated()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    write(Path(sys.argv[1]))
