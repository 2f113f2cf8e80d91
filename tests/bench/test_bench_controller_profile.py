"""bench/controller_profile.py: a tiny run end to end (the controller's cycle over fixed informer
caches, no API server): the held pods are placed, each round's pods are placed, the profile and
the table are written."""

from __future__ import annotations

import json
import pathlib

from bench import controller_profile, perf_plots


def test_a_small_fleet_places_every_round_and_writes_the_profile(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    argv = ["--nodes", "4", "--pods", "4", "--rounds", "1", "--held", "0.25", "--profile", "4"]
    assert controller_profile.main([*argv, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    (step,) = results["steps"]
    assert step["nodes"] == 4 and step["held_pods"] >= 8  # a quarter of 32 GPUs, about a pod each
    # (one MIG node, an A100: a round's H100 MIG pod, if drawn, fits nowhere)
    assert step["first"]["placed"] > 0 and all(r["placed"] > 0 for r in step["rounds"])
    assert "allocate.py" in (out / "profile-4.txt").read_text()
    assert (out / "summary.md").read_text().splitlines()[-1].startswith("| 4 | ")
    picture = tmp_path / "scale.png"
    assert perf_plots.main(["scale", str(out / "results.json"), "--out", str(picture)]) == 0
    assert picture.stat().st_size > 0


def test_the_median_round_of_each_timing() -> None:
    rounds = [
        {"snapshot_s": s, "pending_s": 0.1, "nodes_s": 0.2, "allocate_s": a, "total_s": t,
         "cpu_s": c}
        for s, a, t, c in ((0.3, 1.0, 1.6, 1.1), (0.1, 3.0, 3.4, 2.0), (0.2, 2.0, 2.5, 1.5))
    ]  # fmt: skip
    assert perf_plots.median_rounds({"rounds": rounds}) == {
        "snapshot_s": 0.2, "pending_s": 0.1, "nodes_s": 0.2, "allocate_s": 2.0, "total_s": 2.5,
        "cpu_s": 1.5,
    }  # fmt: skip
