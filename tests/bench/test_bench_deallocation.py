"""The deallocation bench (bench/deallocation.py) without a cluster: its table and its flags, so
the harness cannot rot between runs (a run needs the real control plane for minutes)."""

from __future__ import annotations

from bench import deallocation


def test_the_table_gives_each_endings_percentiles_and_the_restarts() -> None:
    ends = [{"ending": e, "freed_s": f, "reused_s": f + 0.1}
            for e in ("finished", "deleted") for f in (0.1, 0.2, 0.3)]  # fmt: skip
    restart = [{"freed_while_down": False, "freed_s": 20.0, "reused_after_start_s": 0.2}]
    text = deallocation.summary({"ways": [{"way": "drasat", "ends": ends, "restart": restart}]})
    assert "| drasat | finished | 3 | 0.200 s | 0.300 s | 0.300 s | 0.400 s |" in text
    assert "| drasat | 1 | 0 | 20.000 s | 0.200 s | 0.200 s |" in text


def test_the_documented_flags_parse() -> None:
    args = deallocation.parse_args(["--rounds", "10", "--restarts", "2", "--down", "5"])
    assert (args.rounds, args.restarts, args.down, args.kubeconfig) == (10, 2, 5.0, None)
