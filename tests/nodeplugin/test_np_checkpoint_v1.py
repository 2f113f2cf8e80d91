"""A checkpoint written by the format-1 code (issue 25): `fixtures/checkpoint-v1/` holds the
claim files (records without `version`) of a node that prepared whole GPUs with time-slicing, two
MPS shares of one GPU, a MIG device, a cpu-fallback claim and a classic NAS claim
(`npcheckpointv1.py` wrote them, with the kubelet's answers and the CDI specs beside). Today's
plugin, started over them on the node they describe, loads every record (upgraded to format 2
and written back), answers a re-prepare as it was answered then, and unprepares every claim back
to the node's own state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import npcheckpointv1 as fx
from npfixtures import V1, Node, gpu_instances, make_node, ref

from drasat.nodeplugin import checkpoint

FIXTURES = Path(__file__).parent / "fixtures"


def expected(name: str, node: Node) -> Any:
    return json.loads(fx.concrete((FIXTURES / name).read_text(), node))


def put_back(node: Node) -> None:
    """Replace the node's checkpoint with the fixture's files (as the version-1 code left it)."""
    target = node.config.state_dir / "checkpoint"
    for path in target.rglob("*.json"):
        path.unlink()
    source = FIXTURES / "checkpoint-v1"
    for path in sorted(source.rglob("*.json")):
        body = json.loads(fx.concrete(path.read_text(), node))
        out = target / path.relative_to(source)
        out.write_text(checkpoint._envelope(body))


def test_a_version_1_checkpoint_is_loaded_reprepared_and_unprepared(short_tmp: Path) -> None:
    node = make_node(short_tmp, fx.FLEET)
    claims = fx.claims()
    answers = fx.prepare_all(node, claims)
    assert fx.answered(answers) == expected("checkpoint-v1-answers.json", node)
    specs = {p.name: json.loads(p.read_text()) for p in fx.cdi_specs(node)}
    assert specs == expected("checkpoint-v1-cdi.json", node)
    written = {r.uid: r.model_dump(mode="json") for r in node.state.checkpoint.records()}

    put_back(node)
    restarted = node.restart()
    loaded = restarted.state.checkpoint
    assert loaded.unreadable == []
    upgraded = {r.uid: r.model_dump(mode="json") for r in loaded.records()}
    assert {u: {**r, "devices": None} for u, r in upgraded.items()} == {
        u: {**r, "devices": None} for u, r in written.items()
    }
    # the results version 1 kept, in the API's shape; what it did not keep stays absent
    # (consumedCapacity, the configuration)
    for uid, record in upgraded.items():
        kept = ("request", "driver", "pool", "device", "shareID")
        assert record["devices"].get("results", []) == [
            {k: r[k] for k in kept if k in r} for r in written[uid]["devices"].get("results", [])
        ]
    on_disk = loaded.claims_dir.glob("*.json")
    assert {json.loads(p.read_text())["data"]["version"] for p in on_disk} == {2}

    # the API cannot be read: the upgraded records answer the kubelet as before
    offline = dict(V1(restarted, None).prepare(*[(u, fx.NAMES[u]) for u in fx.V1_CLAIMS]))
    offline[fx.CLASSIC] = answers[fx.CLASSIC]
    assert fx.answered(offline) == fx.answered(answers)

    v1 = V1(restarted, claims)
    again = dict(v1.prepare(*[(uid, fx.NAMES[uid]) for uid in fx.V1_CLAIMS]))
    again[fx.CLASSIC] = restarted.state.prepare(ref(fx.CLASSIC))
    assert fx.answered(again) == fx.answered(answers)
    assert {p.name: json.loads(p.read_text()) for p in fx.cdi_specs(restarted)} == specs

    gone = v1.unprepare(*fx.V1_CLAIMS)
    assert {uid: a.error for uid, a in gone.items()} == dict.fromkeys(fx.V1_CLAIMS, "")
    restarted.state.unprepare(ref(fx.CLASSIC))
    assert restarted.state.checkpoint.records() == []
    assert fx.cdi_specs(restarted) == []
    assert restarted.daemons() == {}
    assert gpu_instances(restarted, 2) == []
    assert restarted.sim.gpus[0].time_slice == 0


def test_a_record_of_a_newer_format_is_left_in_place_for_its_plugin(short_tmp: Path) -> None:
    node = make_node(short_tmp, fx.FLEET)
    answers = fx.prepare_all(node, fx.claims())
    assert answers[fx.CLASSIC]
    path = node.state.checkpoint._claim_path(fx.CLASSIC)
    body = json.loads(path.read_text())["data"]
    path.write_text(checkpoint._envelope({**body, "version": checkpoint.VERSION + 1}))
    restarted = node.restart()
    (entry,) = restarted.state.checkpoint.unreadable
    assert (entry.path, entry.uid) == (path, fx.CLASSIC)
    assert "newer node plugin (format 3" in entry.why
    assert path.exists()  # not moved aside: a downgrade keeps what the newer plugin recorded


def test_upgrade_of_a_format_1_record() -> None:
    old = {
        "uid": "u",
        "results": [
            {"request": "gpu", "pool": "n", "device": "gpu-0", "share_id": None},
            {"request": "s", "pool": "n", "device": "gpu-1", "share_id": "x"},
        ],
    }
    new, changed = checkpoint.upgrade(old)
    assert changed and new == {
        "uid": "u",
        "version": 2,
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.drasat.io", "pool": "n", "device": "gpu-0"},
                {
                    "request": "s",
                    "driver": "gpu.drasat.io",
                    "pool": "n",
                    "device": "gpu-1",
                    "shareID": "x",
                },
            ]
        },
    }
    assert checkpoint.upgrade({"uid": "c", "results": []}) == (
        {"uid": "c", "version": 2, "devices": {}},
        True,
    )
    assert checkpoint.upgrade(new) == (new, False)
