"""`drasat --help`, `--version` and `drasat policy ...` import no heavy part: not the controller,
the solver (OR-Tools), the Kubernetes client, the simulators or the node plugin. Each case runs
in a fresh interpreter and reads sys.modules (not a timed test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from drasat.cli import main

HEAVY = (
    "ortools",
    "kubernetes",
    "grpc",
    "numpy",
    "pandas",
    "jinja2",
    "prometheus_client",
    "pynvml",
    "drasat.controller",
    "drasat.solver",
    "drasat.testbed.sim",
    "drasat.nodeplugin",
    "drasat.kube",
    "drasat.whatif",
)

_PROBE = """
import contextlib, io, json, sys
from drasat.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main.main(json.loads(sys.argv[1]))
    except SystemExit as done:
        code = done.code
heavy = json.loads(sys.argv[2])
loaded = sorted(n for n in sys.modules if any(n == h or n.startswith(h + ".") for h in heavy))
print(json.dumps({"code": code, "loaded": loaded, "out": out.getvalue()}))
"""


def _probe(argv: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        [],
        ["--version"],
        ["policy", "--help"],
        ["policy", "list"],
        ["policy", "show", "spread"],
        ["policy", "schema"],
        ["--log-level", "INFO", "policy", "list"],
    ],
)
def test_help_and_policy_import_nothing_heavy(argv: list[str]) -> None:
    result = _probe(argv)
    assert result["loaded"] == [], result["loaded"]
    assert result["code"] in (0, 2, None)


def test_help_lists_every_subcommand_with_its_own_help() -> None:
    """The light top-level help shows the same one-liners the subcommands register."""
    out = str(_probe(["--help"])["out"])
    for name, text in main.SUBCOMMANDS.items():
        assert name in out
        assert " ".join(text.split()[:3]) in " ".join(out.split())
    registered = {
        action.dest: action.help
        for group in main.build_parser()._subparsers._group_actions  # type: ignore[union-attr]
        for action in group._choices_actions  # type: ignore[attr-defined]
    }
    assert registered == dict(main.SUBCOMMANDS)


def test_a_subcommand_still_gets_its_full_parser() -> None:
    result = _probe(["whatif", "--help"])
    assert result["code"] == 0
    assert "--fail-on-unplaced" in str(result["out"])


@pytest.mark.parametrize("command", ["whatif", "controller", "crds"])
def test_a_subcommands_help_loads_only_its_parser(command: str) -> None:
    """`drasat whatif --help` and `drasat controller --help` load no solver, client or
    controller: those load when the command runs."""
    result = _probe([command, "--help"])
    assert result["code"] == 0
    assert result["loaded"] == []


def test_whatif_modes_are_the_solvers() -> None:
    from drasat.cli import whatif
    from drasat.solver import Mode

    assert tuple(m.value for m in Mode) == whatif.MODES
