"""Every command of README.md and docs/ is run by a test (issue 26, "Done when"), so the docs
cannot go stale: the drasat commands run here, offline, in this process, on stand-in files named
as the docs name them (app.yaml, cluster.yaml, ...: tests/docs_commands.py's rules), each with
exit 0 and the output the docs show where they show one; `helm install/upgrade` is rendered by the
real helm (`helm template` with the same flags); `kubectl apply -f deploy/...` goes to the real
API server as a server-side dry run (tests/e2e/test_e2e_docs_commands.py). The rest is listed
with the reason it cannot run here (test_every_command_is_run_or_has_a_reason)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import docs_commands as docs
import helm_binary
import pytest
import yaml

from drasat.cli import main
from drasat.testbed import fakedriver

ROOT = docs.ROOT
ALL = docs.commands()
RUNNABLE = [c for c in ALL if docs.what_to_do(c) in (docs.RUN, docs.HELM)]
BENCHMARKS = [c for c in ALL if docs.what_to_do(c) == docs.FLAGS]

#: Stand-ins for the files the docs name (the examples' own files where they fit).
STAND_INS = {
    "app.yaml": "deploy/examples/v1-reference-cases/exclusive-gpus.yaml",
    "a.yaml": "deploy/examples/v1-reference-cases/shared-time-sliced-gpu.yaml",
    "my-pod-and-claims.yaml": "deploy/examples/v1-optional-gpu",
    "cluster.yaml": "deploy/examples/v1-nvidia-quickstart/cluster/drasat-slices.yaml",
    "nas.yaml": "tests/fuzz/seeds/two-nodes-nas.yaml",
    "my-policy.yaml": "policies/binpack.yaml",
}
#: `-f app/`: a folder of manifests.
APP_FOLDER = ("deploy/examples/v1-nvidia-quickstart", "deploy/examples/v1-shared-gpu")
PLACEHOLDERS = {"<registry>": "registry.example.com", "<new>": "0.2.0"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out as the docs assume: the repository's deploy/ and policies/ (deploy/crds
    empty, for `drasat crds --out deploy/crds`), the stand-ins, a fake driver root as DIR."""
    work = tmp_path_factory.mktemp("docs")
    (work / "deploy").mkdir()
    for entry in (ROOT / "deploy").iterdir():
        if entry.name != "crds":
            (work / "deploy" / entry.name).symlink_to(entry)
    (work / "deploy" / "crds").mkdir()
    (work / "policies").symlink_to(ROOT / "policies")
    for name, source in STAND_INS.items():
        path = ROOT / source
        if path.is_dir():
            (work / name).write_text(
                "\n---\n".join(p.read_text() for p in sorted(path.glob("*.yaml")))
            )
        else:
            shutil.copy(path, work / name)
    (work / "app").mkdir()
    for folder in APP_FOLDER:
        for path in sorted((ROOT / folder).glob("*.yaml")):
            shutil.copy(path, work / "app" / f"{Path(folder).name}-{path.name}")
    fakedriver.make(work / "driver-root")
    return work


def _argv(command: docs.Command, work: Path) -> tuple[list[str], str | None]:
    """The command's words with the placeholders filled in and a synopsis' optional [...] parts
    and `...` left out; and the file of a trailing `> FILE`."""
    text = command.text
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    text = re.sub(r"\bDIR\b", str(work / "driver-root"), text)
    text = re.sub(r"\[[^]]*\]", "", text)
    words = [w for w in shlex.split(text) if w != "..."]
    redirect = None
    if len(words) > 2 and words[-2] == ">":
        words, redirect = words[:-2], words[-1]
    return words, redirect


def _texts(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _same_output(shown: str, printed: str) -> bool:
    """The docs' output and the command's, times left out (`5 ms`, `took 4.5s`)."""

    def plain(text: str) -> str:
        return re.sub(r"\d+(\.\d+)? ?m?s\b", "T", text).rstrip()

    return plain(shown) == plain(printed)


@pytest.mark.parametrize("command", RUNNABLE, ids=[c.id for c in RUNNABLE])
def test_the_command_runs_as_the_docs_say(
    command: docs.Command, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)
    words, redirect = _argv(command, workspace)
    if docs.what_to_do(command) == docs.HELM:
        _helm_template(words, workspace)
        return
    assert words[0] == "drasat", command
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main.main(words[1:])
    assert code == 0, f"{command.id}: {command.text}: exit {code}: {err.getvalue()}"
    if redirect:
        (workspace / redirect).write_text(out.getvalue())
    if words[1:3] == ["crds", "--out"]:  # "what `make generate` writes", the README says
        assert _texts(workspace / words[3]) == _texts(ROOT / "deploy" / "crds")
    if command.output:
        assert _same_output(command.output, out.getvalue()), (
            f"{command.id}: the docs show another output than `{command.text}` prints:\n"
            f"{out.getvalue()}"
        )


def _helm_template(words: list[str], work: Path) -> None:
    """`helm install/upgrade NAME CHART FLAGS` as `helm template NAME CHART FLAGS` (without the
    flags only an upgrade has)."""
    try:
        helm = helm_binary.helm_path()
    except helm_binary.HelmUnavailable as error:
        pytest.fail(str(error))
    flags = [w for w in words[2:] if w != "--reuse-values"]
    done = subprocess.run(
        [str(helm), "template", *flags], cwd=work, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"helm template {' '.join(flags)}: {done.stderr}"
    assert "kind: Deployment" in done.stdout


class _Parsed(Exception):
    """Raised in place of running a benchmark once its parser accepted the flags."""


@pytest.mark.parametrize("command", BENCHMARKS, ids=[c.id for c in BENCHMARKS])
def test_a_benchmarks_flags_are_the_ones_it_takes(
    command: docs.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reduced form of a benchmark: its `main` parses the documented flags with its own
    parser (names, choices, types), and stops there."""
    words = shlex.split(re.sub(r"\bS\b", "1", command.text))  # `--seed S`: S = 1..5
    assert words[:2] == [".venv/bin/python", "-m"], command
    module = importlib.import_module(words[2])
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Parsed(parse(self, *args, **kwargs))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(_Parsed):
        try:
            module.main(words[3:])
        except SystemExit as exit:
            pytest.fail(f"{command.id}: {command.text}: exit {exit.code}: {err.getvalue()}")


def test_every_command_is_run_or_has_a_reason() -> None:
    """A command no rule covers fails here: give it a test (RUN, HELM, DRY_RUN) or a reason."""
    uncovered = [f"{c.id}: {c.text}" for c in ALL if docs.what_to_do(c) is None]
    assert not uncovered, "commands of the docs no test runs:\n" + "\n".join(uncovered)


def test_the_reasons_name_tests_that_exist() -> None:
    for _, verdict in docs.RULES:
        for path in re.findall(r"tests/[\w/]+\.py", verdict):
            assert (ROOT / path).is_file(), f"{path} (named in a reason) does not exist"


def test_the_check_finds_the_commands() -> None:
    """The extraction itself: prompts, continuation lines and comments."""
    by_id = {c.id: c for c in ALL}
    readme = [c for c in ALL if c.doc == "README.md"]
    assert any(c.text == "drasat policy list" for c in readme)  # comment cut off
    install = next(
        c for c in readme if c.text.startswith("helm install") and "<registry>" in c.text
    )
    assert install.text.endswith("--set image.repository=<registry>/drasat")  # lines joined
    shown = next(c for c in ALL if c.output and c.text.startswith("drasat whatif"))
    assert shown.output.startswith("POD ")
    assert len(by_id) == len(ALL)


@pytest.mark.parametrize(
    ("doc", "classic_tail"),
    [
        ("docs/TROUBLESHOOTING.md", set()),
        ("docs/WHATIF.md", set()),
        # the parameter objects are the legacy section's; Limits hold for every input
        (
            "docs/OBJECTS.md",
            {"GpuClaimParameters", "MigDeviceClaimParameters", "DeviceClassParameters", "Limits"},
        ),
    ],
)
def test_the_docs_lead_with_current_kubernetes(doc: str, classic_tail: set[str]) -> None:
    """Classic DRA is the legacy section after the current Kubernetes ones (issue 26 item 1)."""
    headings = re.findall(r"^## (.+)$", (ROOT / doc).read_text(), re.M)
    (legacy,) = [i for i, h in enumerate(headings) if h.startswith("Classic DRA (legacy)")]
    assert legacy > 0 and set(headings[legacy + 1 :]) <= classic_tail, headings
    assert "resource.k8s.io/v1`" in (ROOT / doc).read_text().split("## Classic DRA")[0]


# -- claims of the docs that a command can check --------------------------------------------------


def _doc(name: str) -> str:
    return " ".join((ROOT / name).read_text().split())


def test_the_chart_installs_the_validating_admission_policies_install_md_counts() -> None:
    """docs/INSTALL.md: "the four ValidatingAdmissionPolicies" (the fourth keeps claims from
    tolerating drasat's allocator taint)."""
    assert "the four ValidatingAdmissionPolicies" in _doc("docs/INSTALL.md")
    text = " ".join(_doc("docs/INSTALL.md").split())
    assert "three ValidatingAdmissionPolicies" not in text
    assert "three security ValidatingAdmissionPolicies" not in text
    helm = helm_binary.helm_path()
    # As helm install sees a 1.37 server (its admissionregistration and resource APIs served).
    done = subprocess.run(
        [str(helm), "template", "drasat", str(ROOT / "deploy/helm/drasat"), "-n", "drasat",
         "--kube-version", "1.37.0",
         "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
         "--api-versions", "resource.k8s.io/v1/DeviceClass"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = [d.get("kind") for d in rendered]
    assert kinds.count("ValidatingAdmissionPolicy") == 4
    # docs/SECURITY.md counts them too, and says what is open without them.
    security = _doc("docs/SECURITY.md")
    assert "The four policies exist where the cluster serves" in security
    assert "three policies" not in security
    assert "a tenant's claim tolerating drasat's allocator taint is admitted" in security
    # docs/NODEPLUGIN.md: the chart publishes slices in v1 mode (the flag, the grant, the classes).
    nodeplugin = _doc("docs/NODEPLUGIN.md")
    assert "The Helm chart does not yet grant" not in nodeplugin
    grants_it = "the chart passes it in v1 mode, grants the plugin `resourceslices` and installs"
    assert f"{grants_it} the v1 DeviceClasses" in nodeplugin
    (plugin,) = [
        d
        for d in rendered
        if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("-node-plugin")
    ]
    assert "--resourceslices" in plugin["spec"]["template"]["spec"]["containers"][0]["args"]
    grants = [
        rule
        for d in rendered
        if d["kind"] in ("ClusterRole", "Role") and "node-plugin" in d["metadata"]["name"]
        for rule in d.get("rules") or []
    ]
    assert any("resourceslices" in rule.get("resources", []) for rule in grants)
    assert kinds.count("DeviceClass") == 3


#: What the docs name in backquotes as a file of this repository (a function of it as
#: `path.function`), and as a `drasat.` module or name; a renamed or moved file goes stale there.
_PATH = re.compile(
    r"`((?:api|solver|controller|nodeplugin|policies|drasat|tests|bench|scripts|deploy|docs)/"
    r"[\w./-]+)`"
)
_NAME = re.compile(r"`(drasat(?:\.\w+)+)(?:\(\))?`")
#: Written by the benchmarks and the fuzzer's long runs, not committed.
_GENERATED = ("bench/results",)


def _docs_and_readmes() -> list[Path]:
    return [*docs.DOCS, *sorted((ROOT / "deploy").rglob("README.md"))]


def _named_path_exists(named: str) -> bool:
    if named.startswith(_GENERATED) or (ROOT / named).exists():
        return True
    # `solver/placement._gang`: the function `_gang` of solver/placement.py
    module, _, function = named.rpartition(".")
    source = ROOT / f"{module}.py"
    return (
        source.is_file()
        and re.search(
            rf"def {re.escape(function)}\b|class {re.escape(function)}\b", source.read_text()
        )
        is not None
    )


def test_every_file_the_docs_name_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}: {named}"
        for doc in _docs_and_readmes()
        for named in _PATH.findall(doc.read_text())
        if not _named_path_exists(named.rstrip(".,:;"))
    ]
    assert not missing


def test_every_drasat_name_the_docs_give_exists() -> None:
    """`drasat.v1.extended.convert`: a module, then attributes of it, as Python finds them."""
    missing = []
    for doc in _docs_and_readmes():
        for named in dict.fromkeys(_NAME.findall(doc.read_text())):
            parts = named.split(".")
            for split in range(len(parts), 0, -1):
                try:
                    found: Any = importlib.import_module(".".join(parts[:split]))
                    break
                except ImportError:
                    continue
            for attribute in parts[split:]:
                if not hasattr(found, attribute):
                    missing.append(f"{doc.relative_to(ROOT)}: {named}")
                    break
                found = getattr(found, attribute)
    assert not missing


def test_the_whatif_totals_objects_md_gives_are_the_codes() -> None:
    """docs/OBJECTS.md, "What-if totals": each limit and its variable as the code has them (the
    docs allowed 150,000 replicas where one run is refused past 10,000 pods)."""
    from drasat.api import limits
    from drasat.whatif import run

    table = (ROOT / "docs/OBJECTS.md").read_text()
    rows = re.findall(r"\| ([\d,]+) \| `(DRASAT_\w+)` \|", table)
    assert {variable: int(value.replace(",", "")) for value, variable in rows} == {
        "DRASAT_MAX_NODES": limits.MAX_NODES,
        "DRASAT_MAX_PODS": limits.MAX_PODS,
        "DRASAT_WHATIF_MAX_PODS": run.MAX_PODS_PER_RUN,
    }


def test_no_doc_says_drasat_does_not_preempt_while_it_does_by_default() -> None:
    from drasat import policyfiles

    assert policyfiles.shipped("default").spec.preemption.enabled
    for doc in docs.DOCS:
        assert "drasat does not preempt" not in " ".join(doc.read_text().split()), doc


def test_no_doc_installs_drasat_by_a_package_name_pypi_does_not_serve() -> None:
    """drasat is not published: `pip install 'drasat[demo]'` would fetch nothing (or another
    project's package); the docs install the demo extra from a wheel built here."""
    for doc in docs.DOCS:
        assert "pip install 'drasat[" not in doc.read_text(), doc
    assert "pip install 'dist/drasat-0.1.0-py3-none-any.whl[demo]'" in _doc("README.md")


def test_the_quickstart_readme_names_the_devices_the_whatif_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """deploy/examples/v1-nvidia-quickstart/README.md names gpu-test4's first pod's devices."""
    readme = _doc("deploy/examples/v1-nvidia-quickstart/README.md")
    named = re.search(r"gets `(gpu-0-mig-[^`]+)`, `…-(19-\d)`, `([^`]+)` and `([^`]+)` on", readme)
    assert named is not None, "the README no longer names gpu-test4's devices this way"
    first, second, third, fourth = named.groups()
    second = first.rsplit("-", 2)[0] + "-" + second
    out = io.StringIO()
    monkeypatch.chdir(ROOT)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main.main([
            "whatif",
            "--cluster", "deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml",
            "-f", "deploy/examples/v1-nvidia-quickstart/gpu-test4.yaml",
        ])  # fmt: skip
    row = next(r for r in out.getvalue().splitlines() if "nv-a100 " in r)
    for device in (first, second, third, fourth):
        assert f": {device} (" in row, (device, row)
