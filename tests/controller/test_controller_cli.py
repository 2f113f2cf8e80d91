"""`drasat controller` flags and structured logs."""

from __future__ import annotations

import json
import logging
from typing import Any

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


# -- what the controller cannot do, said in one line ---------------------------------------------


def _run_cli(tmp_path: Any, server: Any, *argv: str) -> int:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    return main.main(["controller", "--kubeconfig", str(kubeconfig), "--dra-api", "v1", *argv])


def test_a_metrics_port_that_is_taken_is_one_line_and_exit_2(
    tmp_path: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    import socket

    from drasat.api import crds
    from drasat.testbed.sim import apiserver

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with apiserver.ApiServer.running(crds=crds.all_crds()) as server:
            code = _run_cli(tmp_path, server, "--metrics-address", f"127.0.0.1:{port}")
    finally:
        taken.close()
    err = capfd.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: --metrics-address '127.0.0.1:{port}': cannot serve there: Address already in use"
    ]
    assert "Traceback" not in err


def test_drasats_driver_without_drasats_crds_is_said_once_and_exit_2(
    tmp_path: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from drasat.testbed.sim import apiserver

    with apiserver.ApiServer.running() as server:  # no CRDs of drasat's
        code = _run_cli(tmp_path, server, "--metrics-address", "")
    err = capfd.readouterr().err
    assert code == 2
    assert "error: the API server does not serve nodeallocationstates.nas.gpu.drasat.io" in err
    assert "drasat crds | kubectl apply -f -" in err and "--driver gpu.nvidia.com" in err
    assert "Traceback" not in err


def test_nvidias_driver_alone_needs_no_crd_of_drasats() -> None:
    """NVIDIA's nodes keep their ledger in the claims' statuses: the controller runs where
    drasat's CRDs are not installed, and never asks for NodeAllocationStates."""
    import threading
    import time

    from ctl_kubefake import FakeApi

    from drasat.controller import app
    from drasat.kube import errors

    class NoCrds(FakeApi):
        def _check(self, verb: str, resource: Any, name: str | None = None) -> None:
            super()._check(verb, resource, name)
            if resource.plural == "nodeallocationstates":
                raise errors.NotFound(
                    "the server could not find the requested resource", status=404
                )

    api = NoCrds()
    with pytest.raises(InputError, match=r"nodeallocationstates\.nas\.gpu\.drasat\.io"):
        app.App(app.Options(dra_api="v1", metrics_address=""), api=api)
    found = app.App(
        app.Options(dra_api="v1", metrics_address="", drivers=("gpu.nvidia.com",)), api=api
    )
    stop = threading.Event()
    runner = threading.Thread(target=found.run, args=(stop,))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while not found.controller.ready:
            assert time.monotonic() < deadline, "the controller never got ready"
            time.sleep(0.05)
    finally:
        stop.set()
        runner.join(10)
    asked = [c for c in api.calls if c[1] == "nodeallocationstates"]
    assert asked == [("list", "nodeallocationstates")]  # only the first App's check
