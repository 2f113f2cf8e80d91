"""`drasat controller` flags and structured logs."""

from __future__ import annotations

import json
import logging

import pytest

from drasat.api.inputerrors import InputError
from drasat.cli import controller as cli
from drasat.cli import main
from drasat.controller.logs import JsonFormatter


def _args(*argv: str) -> object:
    return main.build_parser().parse_args(["controller", *argv])


def test_flags_become_options() -> None:
    args = _args("--namespace=gpu", "--workers=4", "--kube-api-qps=5", "--kube-api-burst=9",
                 "--metrics-address=:9090", "--policy-configmap=pol", "--policy-key=p.yaml",
                 "--leader-elect", "--leader-election-lease=lease", "--hold-ttl=7")  # fmt: skip
    options = cli.options(args)  # type: ignore[arg-type]
    assert (options.namespace, options.workers, options.qps, options.burst) == ("gpu", 4, 5.0, 9)
    assert options.metrics_address == ":9090" and options.policy_configmap == "pol"
    assert options.policy_key == "p.yaml" and options.leader_elect and options.lease_name == "lease"
    assert options.hold_ttl_s == 7.0


def test_environment_gives_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRASAT_NAMESPACE", "from-env")
    monkeypatch.setenv("DRASAT_WORKERS", "3")
    options = cli.options(_args())  # type: ignore[arg-type]
    assert options.namespace == "from-env" and options.workers == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers=0"], "--workers"),
        (["--lease-duration=5", "--renew-deadline=5"], "--renew-deadline"),
    ],
)
def test_inconsistent_flags_are_input_errors(argv: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        cli.options(_args(*argv))  # type: ignore[arg-type]


def test_policy_sources_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _args("--policy-file=x", "--policy-configmap=y")
    assert "not allowed with" in capsys.readouterr().err


def test_json_logs_carry_the_extra_fields() -> None:
    record = logging.LogRecord("drasat.controller", logging.INFO, "f", 1, "allocated %s", ("a/b",),
                               None)  # fmt: skip
    record.claim, record.node = "a/b", "n1"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "allocated a/b" and line["claim"] == "a/b" and line["node"] == "n1"
    assert line["level"] == "INFO" and line["logger"] == "drasat.controller"
