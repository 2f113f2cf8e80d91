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
