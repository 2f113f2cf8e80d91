"""deploy/Dockerfile cannot be built here (no Docker engine): check what it copies and runs."""

from __future__ import annotations

import fnmatch
import json
import shlex
import tomllib

import pytest
from chart_rendering import REPO, Render

DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "Dockerfile.dockerignore"

Instruction = tuple[str, str]


def instructions(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, rest = whole.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def final_stage(steps: list[Instruction]) -> list[Instruction]:
    starts = [i for i, (keyword, _) in enumerate(steps) if keyword == "FROM"]
    return steps[starts[-1] :]


def copy_sources(steps: list[Instruction]) -> list[str]:
    """Sources of every COPY from the build context (not --from another stage)."""
    sources: list[str] = []
    for keyword, rest in steps:
        if keyword != "COPY":
            continue
        words = shlex.split(rest)
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        sources.extend(words[:-1])
    return sources


def ignored(path: str, patterns: list[str]) -> bool:
    clean = path.rstrip("/")
    return any(
        fnmatch.fnmatch(clean, p) or fnmatch.fnmatch(clean, p.removeprefix("**/")) for p in patterns
    )


def _ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _scripts() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    scripts: dict[str, str] = project["scripts"]
    return scripts


@pytest.fixture(scope="module")
def steps() -> list[Instruction]:
    return instructions(DOCKERFILE.read_text())


def test_every_copied_path_exists_and_is_in_the_build_context(steps: list[Instruction]) -> None:
    sources = copy_sources(steps)
    assert "pyproject.toml" in sources and "drasat/" in sources
    patterns = _ignore_patterns()
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"
        assert not ignored(source, patterns), f"COPY {source}: excluded by the .dockerignore"


def test_every_folder_the_wheel_is_built_from_is_copied(steps: list[Instruction]) -> None:
    # The packages are mapped from top-level folders (package-dir), listed by setup.py.
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    copied = {source.rstrip("/") for source in copy_sources(steps)}
    assert "setup.py" in copied
    for package, folder in setuptools["package-dir"].items():
        assert folder in copied, f"{package} is built from {folder}/, which is not copied"


def test_package_readme_is_copied(steps: list[Instruction]) -> None:
    # setuptools reads the readme named in pyproject.toml while building the wheel.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["readme"] in copy_sources(steps)


def test_entrypoint_is_an_installed_console_script(steps: list[Instruction]) -> None:
    entrypoints = [rest for keyword, rest in final_stage(steps) if keyword == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    command = json.loads(entrypoints[0])  # exec form, so signals reach drasat directly
    assert command[0] in _scripts()


def test_build_runs_both_console_scripts(steps: list[Instruction]) -> None:
    runs = " ".join(rest for keyword, rest in final_stage(steps) if keyword == "RUN")
    for script in _scripts():
        assert f"{script} --version" in runs, f"the image build never runs {script}"


def test_runs_as_a_non_root_user(steps: list[Instruction]) -> None:
    users = [rest for keyword, rest in final_stage(steps) if keyword == "USER"]
    assert users, "no USER in the final stage: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root")


def test_chart_uses_the_image_entrypoint(render: Render) -> None:
    # The chart passes args only, so the image's ENTRYPOINT (drasat) runs them.
    rendered = render()
    for kind, name in (
        ("Deployment", ""),
        ("DaemonSet", "-node-plugin"),
        ("DaemonSet", "-mps-host"),
    ):
        container = rendered.one(kind, name)["spec"]["template"]["spec"]["containers"][0]
        assert "command" not in container
        assert container["args"][0].startswith("--log-level=")


def test_instruction_parser_joins_continuations() -> None:
    parsed = instructions("# c\nFROM x AS b\nRUN a \\\n    && b\nCOPY a b/\n")
    assert parsed == [("FROM", "x AS b"), ("RUN", "a && b"), ("COPY", "a b/")]
    assert copy_sources(parsed) == ["a"]
