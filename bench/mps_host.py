"""What running the MPS daemons in the MPS host costs the node plugin, against running them itself.

    python -m bench.mps_host [--rounds 5] [--dir DIR]

On a simulated A100 (the stand-in daemon, `simmps.py`), each round prepares three `share` claims
of one namespace on one GPU and unprepares them, with the node plugin's own code, once with the
daemons run by the plugin's process (`mps.SimulatedRunner`, what `drasat nodeplugin` does without
`--mps-host-socket`) and once by a `drasat mps-host --simulate` process over its socket (what the
chart runs). It prints the median per step: the first share's prepare (the daemon started and
its limits set), a joining share of the same size, one that widens the daemon's limits, the
check a restarted plugin (or each garbage-collection round) makes of a running daemon
(`ensure_mps_daemons`: alive, and its limits read back), a leaving share's unprepare, and the
last one's (the daemon stopped).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from drasat.nodeplugin import mps, mpshost, nvml
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.nodeplugin.state import ClaimRef
from drasat.testbed import simnvml

STEPS = ("first share", "joining share", "widening share", "check", "leaving share", "last share")


def _node(root: Path, runner: mps.Runner) -> tuple[NodePlugin, MemoryNasStore, str]:
    sim = simnvml.SimulatedNvml("A100-40GB")
    lib = nvml.NvmlDeviceLib(sim, run=sim.run)
    store = MemoryNasStore(node="n", namespace="drasat")
    config = Config(
        node_name="n",
        namespace="drasat",
        cdi_root=root / "cdi",
        plugin_dir=root / "p",
        registry_dir=root / "r",
        state_dir=root / "state",
        gc_interval_s=0,
    )
    plugin = NodePlugin(config, lib=lib, store=store, mps_runner=runner)
    plugin.publish()
    return plugin, store, sim.gpus[0].uuid


def _timed(steps: dict[str, list[float]], step: str, call: Callable[[], object]) -> None:
    start = time.perf_counter()
    call()
    steps[step].append((time.perf_counter() - start) * 1000)


def run(root: Path, runner: mps.Runner, rounds: int) -> dict[str, list[float]]:
    plugin, store, gpu = _node(root, runner)
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    shares = [("a", 30, "8Gi", "first share"), ("b", 30, "8Gi", "joining share")]
    shares.append(("c", 50, "16Gi", "widening share"))
    for n in range(rounds):
        for uid, compute, memory, step in shares:
            entry = {
                "claimInfo": {"namespace": "team", "name": uid, "uid": f"{uid}{n}"},
                "gpu": {"devices": [{"uuid": gpu}]},
                "share": {"compute": compute, "memory": memory},
            }
            store.allocate(f"{uid}{n}", entry)
            ref = ClaimRef(f"{uid}{n}", "team", uid)
            _timed(steps, step, lambda ref=ref: plugin.state.prepare(ref))
        _timed(steps, "check", plugin.state.ensure_mps_daemons)
        for uid, step in (("a", "leaving share"), ("b", "leaving share"), ("c", "last share")):
            ref = ClaimRef(f"{uid}{n}", "team", uid)
            _timed(steps, step, lambda ref=ref: plugin.state.unprepare(ref))
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="mpshost-", dir=args.dir or "/tmp"))
    results = {"in the plugin": run(base / "own", mps.SimulatedRunner(), args.rounds)}
    state = base / "host" / "state"
    host = subprocess.Popen(
        [sys.executable, "-m", "drasat", "mps-host", "--state-dir", str(state), "--simulate"],
        stderr=subprocess.DEVNULL,
    )
    try:
        while not (state / mpshost.SOCKET_NAME).exists():
            time.sleep(0.05)
        client = mpshost.MpsHostClient(state / mpshost.SOCKET_NAME, program=mps.SIM_PROGRAM)
        results["in the MPS host"] = run(base / "host", client, args.rounds)
    finally:
        host.terminate()
        host.wait(timeout=60)
    print(f"median ms over {args.rounds} rounds")
    print(f"{'step':<16}" + "".join(f"{name:>18}" for name in results))
    for step in STEPS:
        row = "".join(f"{statistics.median(r[step]):>18.1f}" for r in results.values())
        print(f"{step:<16}{row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
