"""The controller gives a GPU in MIG mode whole only to a request that asks for MIG mode (the
what-if's rule, tests/whatif/test_whatif_v1_mig_mode.py): a plain one-GPU claim on a node whose
only GPU is an A100 in MIG mode is refused, one selecting `migEnabled` true gets it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ctl_slices
import test_v1controller as base
from ctl_cluster import a100_mig, add_node
from test_v1controller import _pod, _settled, _status

from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient

Obj = dict[str, Any]

# The in-process API server with drasat's DeviceClasses, and controllers stepped by hand.
server, api, controller = base.server, base.api, base.controller


def _a100_node(api: KubeClient, name: str) -> None:
    api.create(
        r.NODES,
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    devices = a100_mig(0)
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _claim(api: KubeClient, name: str, selector: str | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.drasat.io"}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def test_a_plain_claim_is_refused_a_mig_mode_gpu_whole(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _a100_node(api, "n1")
    _claim(api, "c")
    _pod(api, "p", "c")
    ctl = controller()
    assert _settled(ctl, lambda: "default/p" in ctl.explanations)
    assert not _status(api, "c").get("allocation")
    assert "no GPU without MIG" in ctl.explanations["default/p"]


def test_a_request_selecting_mig_mode_gets_the_gpu_whole(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _a100_node(api, "n1")
    _claim(api, "c", 'device.attributes["gpu.drasat.io"].migEnabled')
    _pod(api, "p", "c")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c").get("allocation"))
    (result,) = _status(api, "c")["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0"
