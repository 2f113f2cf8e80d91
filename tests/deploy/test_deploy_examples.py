"""deploy/examples: every manifest valid, and every example placed as its README says.

Each README holds `drasat whatif` commands with the table they print on the lab cluster; this
test runs them through `drasat.cli.main.main` and compares. When a change to the solver moves a
placement on purpose, refresh the tables (then read the diff):

    .venv/bin/python tests/deploy/test_deploy_examples.py --update
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import shlex
import sys
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from drasat.api import claims, cluster, policy
from drasat.cli import main as cli

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
CRDS = REPO / "deploy" / "crds"

#: Our kinds: the pydantic model that must accept them.
MODELS: dict[str, type[BaseModel]] = {
    "GpuClaimParameters": claims.GpuClaimParameters,
    "MigDeviceClaimParameters": claims.MigDeviceClaimParameters,
    "DeviceClassParameters": claims.DeviceClassParameters,
    "AllocationPolicy": policy.AllocationPolicy,
    "Cluster": cluster.Cluster,
}

#: ```console blocks that run the what-if: the command line, then the table it prints.
BLOCK = re.compile(r"```console\n\$ drasat (whatif [^\n]*)\n(.*?)```", re.DOTALL)


#: Folders of `resource.k8s.io/v1` examples (current Kubernetes): left out here because
#: kubernetes-validate's 1.30 schemas predate v1 DRA; tests/e2e/test_e2e_slices_examples.py
#: applies them to the real v1.37 API server and scheduler instead.
V1_PREFIX = "v1-"


def manifests() -> list[pathlib.Path]:
    return sorted(
        p
        for p in EXAMPLES.rglob("*.yaml")
        if not p.relative_to(EXAMPLES).parts[0].startswith(V1_PREFIX)
    )


def readmes() -> list[pathlib.Path]:
    return sorted(EXAMPLES.glob("*/README.md"))


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def whatif(command: str) -> tuple[int, str, str]:
    """Run `drasat <command>` in-process from the repository root: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(shlex.split(command))
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


def table(stdout: str) -> str:
    """The placement rows of the what-if's table output (the summary after them has timings)."""
    return stdout.split("\n\n", 1)[0].rstrip("\n") + "\n"


Row = tuple[str, ...]
_GPU = re.compile(r"GPU (\d+)(?: \(GPU-[0-9a-f]+\))?")
_MIG_START = re.compile(r"@\d+ on ")
_RULE = re.compile(r"policy rule [\w.-]+")


def placements(rows: str) -> list[Row]:
    """The table's rows, invariant to choices between interchangeable devices.

    Two idle T4s of one node are alike: which one a pod gets is the solver's free choice and
    may change with any change to the objective. So GPUs are named by first appearance per
    node (`gpu-a`, `gpu-b`, ...), MIG placements lose their start slice, and a pod that is not
    placed keeps only the policy rules its reason names. What stays is what a user relies on:
    the node, which pods share a device and which do not, the kind and profile of each device.
    """
    names: dict[tuple[str, str], str] = {}
    out: list[Row] = []
    for line in rows.splitlines()[1:]:
        pod, claim, node, devices = re.split(r"\s{2,}", line.strip(), maxsplit=3)

        def name(match: re.Match[str], node: str = node) -> str:
            key = (node, match.group(1))
            return names.setdefault(key, f"gpu-{chr(ord('a') + len(names))}")

        if devices.startswith("not placed"):
            devices = "not placed: " + ", ".join(_RULE.findall(devices))
        else:
            devices = _GPU.sub(name, _MIG_START.sub(" on ", devices))
        out.append((pod, claim, node, devices))
    return out


def _examples() -> list[tuple[str, str, str]]:
    return [
        (f"{readme.parent.name}#{n}", m.group(1), m.group(2))
        for readme in readmes()
        for n, m in enumerate(BLOCK.finditer(readme.read_text()), start=1)
    ]


# ---------------------------------------------------------------- every document is valid


@pytest.mark.parametrize("path", manifests(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_documents_are_valid(path: pathlib.Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    ours = _crd_schemas()
    for document in documents:
        kind = document["kind"]
        if kind in MODELS:
            MODELS[kind].model_validate(document)
            key = (document["apiVersion"], kind)
            if key in ours:  # also what the API server would check
                jsonschema.validate(document, ours[key])
        else:
            kubernetes_validate.validate(document, "1.30", strict=True)


def test_every_example_has_a_readme_that_runs_it() -> None:
    commands = " ".join(command for _, command, _ in _examples())
    for path in manifests():
        relative = str(path.relative_to(REPO))
        folder = path.parent
        assert (folder / "README.md").is_file() or folder.name == "clusters", relative
        assert relative in commands, f"no README runs {relative} through the what-if"


# ---------------------------------------------------------------- placed as the README says


@pytest.mark.parametrize(
    ("name", "command", "expected"), _examples(), ids=[e[0] for e in _examples()]
)
def test_example_is_placed_as_its_readme_says(name: str, command: str, expected: str) -> None:
    code, stdout, stderr = whatif(command)
    assert code == 0, stderr
    assert placements(table(stdout)) == placements(expected), (
        f"{name}: the what-if now prints\n{table(stdout)}\n(refresh with "
        "`.venv/bin/python tests/deploy/test_deploy_examples.py --update` if that is intended)"
    )


def test_reference_cases_place_exclusive_and_shared_gpus() -> None:
    # Independent of the README text: the two reference cases' defining properties.
    lab = "--cluster deploy/examples/clusters/lab.yaml"
    _, stdout, _ = whatif(f"whatif {lab} -f deploy/examples/reference-cases/exclusive-gpus.yaml")
    rows = [line.split() for line in table(stdout).splitlines()[1:]]
    assert len(rows) == 2 and rows[0][4] != rows[1][4], "each pod needs a GPU of its own"
    shared = "deploy/examples/reference-cases/shared-time-sliced-gpu.yaml"
    _, stdout, _ = whatif(f"whatif {lab} -f {shared}")
    rows = [line.split() for line in table(stdout).splitlines()[1:]]
    assert len(rows) == 2 and rows[0][2:] == rows[1][2:], "both pods share one GPU"


def test_a_wrong_mig_profile_is_explained(tmp_path: pathlib.Path) -> None:
    source = (EXAMPLES / "dynamic-mig" / "by-profile.yaml").read_text()
    wrong = tmp_path / "wrong-profile.yaml"
    wrong.write_text(source.replace("profile: 3g.20gb", "profile: 3g.40gb"))
    code, stdout, _ = whatif(f"whatif --cluster deploy/examples/clusters/lab.yaml -f {wrong}")
    assert code == 0
    assert "gpu-mig/trainer" in stdout
    assert "not placed: claim gpu-mig/trainer-mig: 3g.40gb: no MIG-enabled GPU offers it" in stdout


def _fresh(match: re.Match[str]) -> str:
    code, stdout, stderr = whatif(match.group(1))
    if code != 0:
        raise SystemExit(f"drasat {match.group(1)} failed: {stderr}")
    return f"```console\n$ drasat {match.group(1)}\n{table(stdout)}```"


def _update() -> None:
    for readme in readmes():
        readme.write_text(BLOCK.sub(_fresh, readme.read_text()))
        print(f"refreshed {readme.relative_to(REPO)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        raise SystemExit(__doc__)
    _update()


def test_placements_ignore_only_interchangeable_choices() -> None:
    header = "POD  CLAIM  NODE  DEVICES\n"
    one = header + "a/p1  gpu  n1  GPU 0 (GPU-11)\na/p2  gpu  n1  GPU 1 (GPU-22)\n"
    swapped = header + "a/p1  gpu  n1  GPU 1 (GPU-22)\na/p2  gpu  n1  GPU 0 (GPU-11)\n"
    shared = header + "a/p1  gpu  n1  GPU 0 (GPU-11)\na/p2  gpu  n1  GPU 0 (GPU-11)\n"
    assert placements(one) == placements(swapped)
    assert placements(one) != placements(shared)
    mig = header + "a/p  mig  n2  3g.20gb@4 on GPU 0\n"
    assert placements(mig) == placements(mig.replace("@4", "@0"))
    assert placements(mig) != placements(mig.replace("3g.20gb", "2g.10gb"))
    refused = header + "a/p  gpu  -  not placed: x; policy rule keep-a-t4 (node n1)\n"
    assert placements(refused) == [("a/p", "gpu", "-", "not placed: policy rule keep-a-t4")]
