"""One answer for one input: where `drasat whatif` places each pod and where `drasat demo` (on
the simulated API server or the real control plane) ran it, in one form to compare: pod ->
the (node, device) pairs of its claims, or None for a pod that is not placed (the what-if) or
stayed Pending (a demo).

The inputs are the reference cases and pods asking `nvidia.com/gpu` (which the what-if, the
simulated API server's admission and the real API server's MutatingAdmissionPolicy turn into
the same claims: `drasat.v1.extended`), each on the demo's default cluster (the what-if's
embedded `default-cluster.yaml`), which both commands use when given no cluster.
"""

from __future__ import annotations

import pathlib
import re

from drasat.cli.main import main

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deploy" / "examples"

#: One pod as a workload written for NVIDIA's device plugin asks for a GPU.
ONE_GPU_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: one-gpu, namespace: default}
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    resources:
      limits: {nvidia.com/gpu: 1}
"""

Placement = dict[str, frozenset[tuple[str, str]] | None]

_ROW = re.compile(r"^(?P<pod>\S+/\S+)  +(?P<claim>\S+)  +(?P<node>\S+)  +(?P<devices>.+)$")
_RUNNING = re.compile(r"^pod (\S+/\S+)  Pending -> Running on (\S+)$")
_PENDING = re.compile(r"^pod (\S+/\S+)  stays Pending: ")
_CLAIM = re.compile(r"^  claim \S+: (.+)$")


def inputs(tmp_path: pathlib.Path) -> dict[str, list[pathlib.Path]]:
    """Each case's manifests (files or folders), by name."""
    one = tmp_path / "one-gpu.yaml"
    one.write_text(ONE_GPU_POD, encoding="utf-8")
    return {
        "reference cases": [EXAMPLES / "v1-reference-cases"],
        "an nvidia.com/gpu: 1 pod": [one],
        "pods asking nvidia.com/gpu 1 and 2": [EXAMPLES / "v1-extended-resource"],
    }


def whatif_placement(out: str) -> Placement:
    """pod -> (node, device) of each claim, from the what-if's table (`POD CLAIM NODE DEVICES`,
    devices as `request: device; ...`); None for a pod not placed."""
    placed: Placement = {}
    for line in out.splitlines():
        match = _ROW.match(line)
        if match is None or match["pod"] == "POD":
            continue
        pod = match["pod"]
        if match["devices"].startswith("not placed"):
            placed[pod] = None
            continue
        devices = {(match["node"], d.split(": ", 1)[1]) for d in match["devices"].split("; ")}
        held = placed.get(pod, frozenset())
        placed[pod] = None if held is None else held | devices
    return placed


def demo_placement(out: str) -> Placement:
    """pod -> (node, device) of each claim it ran with, from a demo's `pod ... Running on NODE`
    and `  claim NAME: POOL/DEVICE, ...` lines; None for a pod that stayed Pending."""
    placed: Placement = {}
    current = ""
    for line in out.splitlines():
        if match := _RUNNING.match(line):
            current = match[1]
            placed[current] = frozenset()
        elif match := _PENDING.match(line):
            placed[match[1]] = None
            current = ""
        elif (match := _CLAIM.match(line)) and current:
            devices = {tuple(d.split("/", 1)) for d in match[1].split(", ") if "/" in d}
            placed[current] = (placed[current] or frozenset()) | {(n, d) for n, d in devices}
        elif not line.startswith("  "):
            current = ""
    return placed


def run_whatif(paths: list[pathlib.Path], capsys: object) -> Placement:
    """`drasat whatif -f PATH...` in this process, read by `whatif_placement`."""
    argv = ["whatif"]
    for path in paths:
        argv += ["-f", str(path)]
    code = main(argv)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert code == 0, out
    return whatif_placement(out)
