"""bench/timeline.py: one pod's steps from a recording of watch events and the controller log."""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest

from bench import kube_alloc, timeline
from drasat.api.groups import SCHEDULING_GATE

T0 = 1_000_000.0
UID = "0f0e0d0c-0b0a-4909-8807-060504030201"


def _pod(
    gates: list[str], node: str | None = None, claims: tuple[str, ...] = (), **cond: str
) -> dict:
    return {
        "name": "t00",
        "gates": gates,
        "node": node,
        "conditions": {k: [v, None] for k, v in cond.items()},
        "claims": list(claims),
    }


def _claim(
    finalizers: tuple[str, ...] = (), allocated: bool = False, reserved: bool = False
) -> dict:
    return {
        "name": "t00-gpu-x",
        "uid": UID,
        "owner": "t00",
        "finalizers": list(finalizers),
        "allocated": allocated,
        "reserved": ["t00"] if reserved else [],
    }


def _rec(dt: float, kind: str, change: str, obj: dict) -> dict:
    return {"t": T0 + dt, "kind": kind, "type": change, "object": obj}


def _log_line(t: float, message: str) -> str:
    stamp = datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return f"{stamp} INFO controller.v1controller: {message}"


FINALIZER = "gpu.drasat.io/allocation"


def gated_recording() -> tuple[list[dict], list[str]]:
    r = [
        {"t": T0, "kind": "Create", "object": {"name": "t00"}},
        _rec(0.010, "Pod", "ADDED", _pod([SCHEDULING_GATE])),
        _rec(0.030, "ResourceClaim", "ADDED", _claim()),
        _rec(0.040, "Pod", "MODIFIED", _pod([SCHEDULING_GATE], claims=("t00-gpu-x",))),
        _rec(0.300, "NAS", "MODIFIED", {"name": "n1", "uids": [UID]}),
        _rec(0.320, "ResourceClaim", "MODIFIED", _claim(allocated=True)),
        _rec(0.330, "Pod", "MODIFIED", _pod([], claims=("t00-gpu-x",))),
        _rec(0.340, "ResourceClaim", "MODIFIED", _claim(allocated=True, reserved=True)),
        _rec(0.350, "Pod", "MODIFIED", _pod([], "n1", ("t00-gpu-x",), PodScheduled="True")),
        _rec(0.360, "ResourceClaim", "MODIFIED", _claim((FINALIZER,), True, True)),
        # Another pod's claim and a NAS without ours: not in this pod's timeline.
        _rec(0.370, "NAS", "MODIFIED", {"name": "n2", "uids": []}),
    ]  # fmt: skip
    log = [
        _log_line(T0 + 0.310, "cycle 3: 1 pods, 1 placed, 0 refused in 0.150s (optimal)"),
        _log_line(T0 + 0.320, "allocated ns/t00-gpu-x on n1 for ns/t00"),
        _log_line(T0 + 0.330, f"ns/t00: scheduling gate {SCHEDULING_GATE} lifted (allocated)"),
        _log_line(T0 - 5, "cycle 2: 1 pods, 1 placed, 0 refused in 0.100s (optimal)"),
    ]
    return r, log


def test_the_gated_path_step_by_step() -> None:
    records, log = gated_recording()
    rows = timeline.steps(records, timeline.parse_log(log), "t00", "ns")
    got = [(round(1000 * s.t), s.source, s.what.split(" (")[0]) for s in rows]
    assert got == [
        (0, "bench", "create call sent"),
        (10, "API", "pod created"),
        (30, "resourceclaim controller", "claim t00-gpu-x created"),
        (40, "resourceclaim controller", "pod status names its claim"),
        (160, "drasat log", "cycle starts its solve"),
        (300, "drasat", "write: NAS n1 lists the claim"),
        (310, "drasat log", "cycle 3: 1 pods, 1 placed, 0 refused in 0.150s"),
        (320, "allocator", "write: claim status.allocation"),
        (320, "drasat log", "allocated ns/t00-gpu-x on n1 for ns/t00"),
        (330, "drasat", "write: scheduling gate lifted"),
        (330, "drasat log", f"ns/t00: scheduling gate {SCHEDULING_GATE} lifted"),
        (340, "kube-scheduler", "write: claim status.reservedFor"),
        (350, "kube-scheduler", "PodScheduled=True"),
        (350, "kube-scheduler", "bound to n1"),
        (360, "drasat", f"write: claim finalizer {FINALIZER}"),
    ]
    assert rows[1].what == f"pod created (scheduling gates: {SCHEDULING_GATE})"
    assert timeline.bound_after(rows) == pytest.approx(0.35)


def test_each_scheduler_attempt_is_a_step() -> None:
    """An ungated pod: FailedScheduling, then the same Event's count going up (aggregated
    attempts), each one step; an Event of another pod is not."""

    def event(t: float, count: int, name: str = "t00") -> dict:
        body = {
            "name": f"{name}.1",
            "object": ["Pod", name],
            "reason": "FailedScheduling",
            "message": "0/2 nodes are available: 2 cannot allocate all claims.",
            "source": "default-scheduler",
            "count": count,
        }
        return _rec(t, "Event", "MODIFIED", body)

    records = [
        {"t": T0, "kind": "Create", "object": {"name": "t00"}},
        _rec(0.01, "Pod", "ADDED", _pod([])),
        event(0.05, 1),
        event(0.06, 1),  # the same attempt seen again (another field changed): no step
        event(1.05, 2),
        event(1.10, 5, name="t01"),
        _rec(3.0, "Pod", "MODIFIED", _pod([], "n2", PodScheduled="True")),
    ]  # fmt: skip
    rows = timeline.steps(records, [], "t00", "ns")
    assert [(round(s.t, 2), s.source, s.what[:25]) for s in rows] == [
        (0.0, "bench", "create call sent"),
        (0.01, "API", "pod created (scheduling g"),
        (0.05, "default-scheduler", "Event FailedScheduling: 0"),
        (1.05, "default-scheduler", "Event FailedScheduling #2"),
        (3.0, "kube-scheduler", "PodScheduled=True"),
        (3.0, "kube-scheduler", "bound to n2"),
    ]


def test_trim_keeps_what_the_timeline_reads() -> None:
    pod = {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], "nodeName": None},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
            ],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-1"}],
        },
    }
    assert timeline.trim("Pod", pod) == {
        "name": "p",
        "gates": [SCHEDULING_GATE],
        "node": None,
        "conditions": {"PodScheduled": ["False", "SchedulingGated"]},
        "claims": ["p-gpu-1"],
    }
    nas = {"metadata": {"name": "n"}, "spec": {"allocatedClaims": {UID: {}, "x": 1}}}
    assert timeline.trim("NAS", nas) == {"name": "n", "uids": [UID]}
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"},
             "reason": "R", "message": "m", "source": {"component": "c"}, "count": 3}  # fmt: skip
    assert timeline.trim("Event", event)["count"] == 3


def test_gated_pods_only_for_drasat_with_admission() -> None:
    body = kube_alloc.pod("p", "t", gated=True)
    assert body["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]
    assert "schedulingGates" not in kube_alloc.pod("p", "t")["spec"]
    assert set(kube_alloc.GATED) == {"drasat"}


def test_replay_prints_the_tables(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records, log = gated_recording()
    data = {
        "runs": [
            {
                "allocator": "drasat",
                "namespace": "ns",
                "pods": ["t00"],
                "records": records,
                "log": log,
            }
        ]
    }
    (tmp_path / "records.json").write_text(json.dumps(data))
    assert timeline.main(["--replay", str(tmp_path / "records.json")]) == 0
    out = capsys.readouterr().out
    assert "creation -> bound of 1 pods (s): 0.350; median 0.350" in out
    assert "| 350 | 0 | kube-scheduler | bound to n1 |" in out
    assert timeline.main(["--replay", str(tmp_path / "missing.json")]) == 2


def test_plots_arithmetic_and_files(tmp_path: pathlib.Path) -> None:
    from bench import perf_plots

    claims = [[0.0, True, 0.1], [1.0, False, None], [2.0, True, 0.3], [3.0, True, 0.2]]
    assert perf_plots.rolling_acceptance(claims, window=2) == [
        (0.0, 1.0),
        (1.0, 0.5),
        (2.0, 0.5),
        (3.0, 1.0),
    ]
    assert perf_plots.cdf([0.3, 0.1, 0.2, 0.4]) == ([0.1, 0.2, 0.3, 0.4], [0.25, 0.5, 0.75, 1.0])
    records, log = gated_recording()
    run = {"allocator": "drasat", "namespace": "ns", "pods": ["t00"], "records": records}
    (tmp_path / "tl.json").write_text(json.dumps({"runs": [{**run, "log": log}]}))
    churn = {"accepted_share": 0.75, "claims_timeline": claims}
    results = {"argv": ["--seed", "2"], "allocators": [{"allocator": "kube", "churn": churn}]}
    (tmp_path / "r.json").write_text(json.dumps(results))
    for what, source in (("timeline", "tl.json"), ("churn", "r.json"), ("cdf", "r.json")):
        out = tmp_path / f"{what}.png"
        assert perf_plots.main([what, str(tmp_path / source), "--out", str(out)]) == 0
        assert out.read_bytes()[:4] == b"\x89PNG"


def test_releases_time_each_step_from_the_pods_deletion() -> None:
    uid_a, uid_b = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"

    def claim(t: float, uid: str, owner: str, allocated: bool, kind: str = "MODIFIED") -> dict:
        o = {"name": f"{owner}-gpu", "uid": uid, "owner": owner, "allocated": allocated}
        return {"t": t, "kind": "ResourceClaim", "type": kind, "object": o}

    def nas(t: float, *uids: str) -> dict:
        return {"t": t, "kind": "NAS", "type": "MODIFIED", "object": {"name": "n0", "uids": uids}}

    def pod_deleted(t: float, name: str) -> dict:
        return {"t": t, "kind": "Pod", "type": "DELETED", "object": {"name": name}}

    records = [
        claim(1.0, uid_a, "a", True),
        claim(1.1, uid_b, "b", False),  # b is never allocated: no release to time
        nas(1.2, uid_a),
        pod_deleted(10.0, "a"),
        pod_deleted(10.1, "b"),
        claim(10.4, uid_a, "a", False),
        claim(10.5, uid_a, "a", False, "DELETED"),  # only the first sight counts
        nas(11.5),
    ]
    assert timeline.releases(records) == {
        "a": {"claim deallocated or deleted": 0.4, "claim left drasat's ledger": 1.5}
    }
    table = timeline.release_table(records)
    assert "| claim left drasat's ledger | 1 | 1.500 | 1.500 | 1.500 |" in table
