"""The wings around the v1 product (issue 25): the classic wing (drasat.classic) and the test bed
(the simulated API server) stay apart from it; import-linter's contracts in pyproject.toml check
the imports, these check what a process loads and what the product does without classic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from drasat.api.inputerrors import InputError
from drasat.controller.app import App, Options
from drasat.testbed.sim import apiserver


def test_the_simulator_does_not_load_the_solver() -> None:
    """The test bed (the demo's and the tests' API server) starts without ortools: it reads the
    node filters from drasat.api.nodefit, not through drasat.v1 (whose package loads the solver)."""
    code = (
        "import sys, drasat.testbed.sim.apiserver, drasat.testbed.sim.scheduling, "
        "drasat.testbed.sim.controllers, drasat.testbed.sim.v1scheduler, "
        "drasat.testbed.sim.kubelet; "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'ortools'); "
        "print(loaded); sys.exit(bool(loaded))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_classic_dra_without_the_classic_wing_is_a_clear_error() -> None:
    """A copy of drasat without drasat.classic refuses --dra-api classic by name, no traceback."""
    with apiserver.ApiServer.running() as server:
        from drasat.kube.client import KubeClient, configuration_for

        client = KubeClient(configuration_for(server.url), request_timeout=10)
        try:
            with pytest.raises(InputError, match=r"drasat\.classic.*--dra-api v1"):
                App(Options(dra_api="classic", metrics_address=""), api=client, classic=None)
        finally:
            client.close()
