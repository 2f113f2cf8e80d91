"""A checkpoint written by the version-1 code (issue 25): `fixtures/checkpoint-v1/` holds the
claim files of a node that prepared whole GPUs with time-slicing, two MPS shares of one GPU, a MIG
device, a cpu-fallback claim and a classic NAS claim (`npcheckpointv1.py` wrote them, with the
kubelet's answers and the CDI specs beside). Today's plugin, started over them on the node they
describe, loads every record, answers a re-prepare as it was answered then, and unprepares every
claim back to the node's own state."""

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
    assert {r.uid: r.model_dump(mode="json") for r in loaded.records()} == written

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
