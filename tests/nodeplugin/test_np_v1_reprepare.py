"""A v1 re-prepare of a claim already prepared here (issue 23, the unconfirmed items): it answers
from the checkpoint while the API server cannot be read, and a claim allocated again to other
devices (same uid) is prepared for those, not answered with the old devices' spec."""

from __future__ import annotations

import json
from typing import Any

from npfixtures import NODE, V1, Claims, Node, v1_claim

from drasat.nodeplugin.state import ClaimError

UID = "c0ffee00-0000-4000-8000-000000000001"


def visible(node: Node, uid: str) -> str:
    spec = json.loads((node.config.cdi_root / f"k8s.gpu.drasat.io-claim_{uid}.json").read_text())
    device = spec["devices"][0]  # the whole claim's (each allocated device follows)
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    return env["DRASAT_GPU_UUIDS"]


class Outage(Claims):
    """ResourceClaims the API server stops answering for."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        if self.down:
            self.reads += 1
            raise ClaimError(f"cannot read ResourceClaim {namespace}/{name}: connection refused")
        return super().read(namespace, name)


def devices(answer: Any) -> list[tuple[list[str], str, str, list[str]]]:
    return [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in answer.devices
    ]


def test_a_reprepare_during_an_api_outage_answers_a_prepared_claim(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    claims = Outage()
    claims.add(v1_claim(UID, ("a", NODE, "gpu-1"), ("b", NODE, "gpu-0")))
    first = V1(node, claims).prepare((UID, "claim"))[UID]
    assert first.error == ""
    claims.down = True
    restarted = node.restart()  # the kubelet re-prepares after a restart, the API is down
    again = V1(restarted, claims).prepare((UID, "claim"))[UID]
    assert again.error == "", again.error
    assert devices(again) == devices(first)
    # a claim not prepared here still fails, naming the outage
    other = V1(restarted, claims).prepare(("not-prepared", "other"))["not-prepared"]
    assert "connection refused" in other.error


def test_a_claim_allocated_again_to_other_devices_is_prepared_for_them(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    claims = Claims()
    claims.add(v1_claim(UID, ("a", NODE, "gpu-0")))
    v1 = V1(node, claims)
    assert v1.prepare((UID, "claim"))[UID].error == ""
    assert visible(node, UID) == node.gpu(0)
    # deallocated and allocated again (same uid) to the other GPU, with no unprepare between
    claims.add(v1_claim(UID, ("a", NODE, "gpu-1")))
    answer = v1.prepare((UID, "claim"))[UID]
    assert answer.error == ""
    assert [d.device_name for d in answer.devices] == ["gpu-1"]
    assert visible(node, UID) == node.gpu(1), "the spec still names the old GPU"
    assert v1.unprepare(UID)[UID].error == ""
