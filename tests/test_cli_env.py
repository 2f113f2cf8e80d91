"""Daemon flags read DRASAT_<FLAG>; a bad value is a usage error naming the flag, not a crash."""

from __future__ import annotations

import argparse

import pytest

from drasat.cli.main import build_parser


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_environment_sets_typed_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRASAT_WORKERS", "7")
    monkeypatch.setenv("DRASAT_GC_INTERVAL", "2.5")
    assert _parse("controller").workers == 7
    assert _parse("nodeplugin").gc_interval == 2.5


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRASAT_WORKERS", "7")
    assert _parse("controller", "--workers", "3").workers == 3


@pytest.mark.parametrize(
    ("variable", "command", "flag"),
    [("DRASAT_WORKERS", "controller", "--workers"), ("DRASAT_GC_INTERVAL", "nodeplugin", "--gc")],
)
def test_a_bad_environment_value_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    command: str,
    flag: str,
) -> None:
    monkeypatch.setenv(variable, "lots")
    with pytest.raises(SystemExit) as exited:
        _parse(command)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "'lots'" in err


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser(only=command)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


@pytest.mark.parametrize("command", ["controller", "nodeplugin"])
def test_every_daemon_flag_reads_its_variable(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Each flag's default follows DRASAT_<FLAG> (the one helper, drasat.cli.envflags.flag):
    a switch turns on or off, any other flag takes the variable's value through its type."""
    for action in _subparser(command)._actions:
        name = action.option_strings[0] if action.option_strings else ""
        if not name.startswith("--") or name in ("--help", "--toolkit-spec-dir"):
            continue
        variable = "DRASAT_" + name[2:].replace("-", "_").upper()
        if action.nargs == 0:  # a switch
            want: object = not action.default
            value = "1" if want else "0"
        else:
            value = str(action.choices[-1]) if action.choices else "7"
            want = action.type(value) if action.type else value
        monkeypatch.setenv(variable, value)
        assert getattr(_subparser(command).parse_args([]), action.dest) == want, name
        monkeypatch.delenv(variable)


@pytest.mark.parametrize("command", ["controller", "nodeplugin"])
def test_every_daemon_flag_stands_in_a_titled_group_of_the_help(command: str) -> None:
    # `--help` of a daemon with thirty flags reads by topic (API, policy, leader election, ...);
    # a flag added outside the groups would land in argparse's untitled "options" list.
    parser = _subparser(command)
    for group in parser._action_groups:
        flags = [a.option_strings[0] for a in group._group_actions if a.option_strings]
        if group.title in ("options", "optional arguments", "positional arguments"):
            assert flags in ([], ["-h"]), (group.title, flags)
        else:
            assert flags, f"empty group {group.title!r}"
    titles = [g.title for g in parser._action_groups]
    assert "Kubernetes API" in titles
    assert ("leader election" in titles) == (command == "controller")


@pytest.mark.parametrize(
    "argv", [["controller"], ["nodeplugin"], ["explain", "some-pod"], ["whatif"]]
)
def test_every_kubeconfig_flag_reads_the_same_variables(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """One `--kubeconfig` (drasat.cli.envflags.kubeconfig_flag) for every subcommand that talks
    to a cluster: $DRASAT_KUBECONFIG, else $KUBECONFIG as kubectl reads it, else none."""

    def kubeconfig() -> object:
        return _subparser(argv[0]).parse_args(argv[1:]).kubeconfig

    monkeypatch.delenv("DRASAT_KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert kubeconfig() is None
    monkeypatch.setenv("KUBECONFIG", "from-kubectl")
    assert kubeconfig() == "from-kubectl"
    monkeypatch.setenv("DRASAT_KUBECONFIG", "from-drasat")
    assert kubeconfig() == "from-drasat"
