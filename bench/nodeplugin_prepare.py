"""Node plugin prepare/unprepare latency over the real DRA socket, on the simulated fleet.

    python -m bench.nodeplugin_prepare [--kinds exclusive mig mps timeslice] [--calls 512]
        [--delays 0 1ms] [--concurrency 1 8 64] [--dir DIR] [--client process|thread]
        [--profile 25]

A plugin serves a simulated fleet (each NVML call delayed by `delay`, standing in for the driver's
own latency); a gRPC client plays the kubelet over the plugin's unix socket, from a process of its
own by default (as the kubelet is): NodePrepareResources of every claim of a round, then
NodeUnprepareResources of every claim, one claim per call, `concurrency` calls in flight; rounds
repeat until each method has run `--calls` times (after one warm-up round). Kinds:

- `exclusive`: one whole GPU per claim, 64 claims on `64xA100-40GB` (MIG off);
- `mig`: a 1g.5gb MIG device per claim at every placement, 56 claims on `8xA100-40GB,mig=all`;
- `mps`: 8 claims per GPU on `8xA100-40GB` sharing it under MPS (50% threads, 4Gi pinned memory:
  an MPS daemon per claim rendered from the jinja2 template; the simulation's daemon runner
  records what it would run and starts nothing);
- `timeslice`: 8 claims per GPU on `8xA100-40GB`, time-slicing `Long` (`nvidia-smi
  compute-policy`, simulated).

The plugin's state dir (checkpoint, MPS directories) and CDI root go under `--dir` (default: the
temp dir). The first table is what the client saw per call: p50/p95/p99/max, and p99 of the same
calls minus the time spent inside the simulated hardware during that call (NVML, nvidia-smi, the
MPS daemon runner), measured inside the plugin per call: "excluding the simulated hardware's own
delay". The second splits a call: inside the plugin (wall, and CPU time of the serving thread),
hardware, and the rest (gRPC, queueing, scheduling). `--profile N` runs one extra round per kind
at concurrency 1 under cProfile (inside the plugin's prepare and unprepare only) and prints the
top N functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import multiprocessing
import pstats
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.gen import dra_v1alpha3_pb2 as pb2
from drasat.nodeplugin.gen import dra_v1alpha3_pb2_grpc as pb2_grpc
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.nodeplugin.state import ClaimRef
from drasat.testbed import simnvml

KINDS = ("exclusive", "mig", "mps", "timeslice")
METHODS = ("NodePrepareResources", "NodeUnprepareResources")


@dataclass(frozen=True)
class Kind:
    fleet: str  # without the delay option
    claims: int  # claims per round


FLEETS: dict[str, Kind] = {
    "exclusive": Kind("64xA100-40GB", 64),
    "mig": Kind("8xA100-40GB,mig=all", 56),
    "mps": Kind("8xA100-40GB", 64),
    "timeslice": Kind("8xA100-40GB", 64),
}


def allocation(kind: str, index: int, uid: str, gpus: Sequence[str]) -> dict[str, Any]:
    """The NAS allocatedClaims entry the controller would write for claim `index` of `kind`."""
    info = {"namespace": "bench", "name": uid, "uid": uid}
    if kind == "mig":
        gpu, start = divmod(index % 56, 7)
        placement = {"start": start, "size": 1}
        device = {"profile": "1g.5gb", "parentUUID": gpus[gpu], "placement": placement}
        return {"claimInfo": info, "mig": {"devices": [device]}}
    if kind == "exclusive":
        return {"claimInfo": info, "gpu": {"devices": [{"uuid": gpus[index % len(gpus)]}]}}
    mps_config = {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "4Gi"}
    sharing: dict[str, Any] = (
        {"strategy": "MPS", "mpsConfig": mps_config}
        if kind == "mps"
        else {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    )
    device = {"uuid": gpus[index % len(gpus)]}
    return {"claimInfo": info, "gpu": {"devices": [device], "sharing": sharing}}


class HardwareClock:
    """Seconds spent inside the simulated hardware (NVML calls, nvidia-smi), per thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def reset(self) -> None:
        self._local.spent = 0.0

    def spent(self) -> float:
        return float(getattr(self._local, "spent", 0.0))

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args)
            finally:
                self._local.spent = self.spent() + time.perf_counter() - started

        return call


class TimedNvml:
    """The simulated NVML with every `nvml*` call timed by a HardwareClock."""

    def __init__(self, sim: simnvml.SimulatedNvml, clock: HardwareClock) -> None:
        self._sim = sim
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._sim, name)
        return self._clock.timed(attr) if name.startswith("nvml") else attr


class TimedRunner(mps.RecordingRunner):
    """The simulation's MPS daemon runner (records, starts nothing), timed as hardware."""

    def __init__(self, clock: HardwareClock) -> None:
        super().__init__()
        self.start = clock.timed(super().start)  # type: ignore[method-assign]
        self.stop = clock.timed(super().stop)  # type: ignore[method-assign]


@dataclass
class Sample:
    """One gRPC call: what the client saw; inside the plugin: wall and CPU time (of the thread
    serving it), and the part of it spent in the simulated hardware."""

    wall_s: float
    hardware_s: float
    plugin_s: float = 0.0
    plugin_cpu_s: float = 0.0


@dataclass
class Result:
    kind: str
    delay: str
    concurrency: int
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)
    nvml_calls_per_claim: float = 0.0
    profile: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of `values` (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


#: What a client saw: per method, (claim uid, seconds) of every call in order; and the wall time of
#: all rounds per method.
Timings = tuple[dict[str, list[tuple[str, float]]], dict[str, float]]


class Client:
    """The kubelet's side: one channel to the DRA socket, calls `concurrency` at a time."""

    def __init__(self, socket: str, kind: str, uids: Sequence[str]) -> None:
        self.kind = kind
        self.uids = list(uids)
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = pb2_grpc.NodeStub(self.channel)  # type: ignore[no-untyped-call]

    def call(self, method: str, uid: str) -> tuple[str, float]:
        claim = pb2.Claim(namespace="bench", name=uid, uid=uid)
        request = getattr(pb2, f"{method}Request")(claims=[claim])
        started = time.perf_counter()
        response = getattr(self.stub, method)(request, timeout=120)
        elapsed = time.perf_counter() - started
        if response.claims[uid].error:
            raise SystemExit(f"{self.kind} {method} {uid}: {response.claims[uid].error}")
        return uid, elapsed

    def rounds(self, concurrency: int, calls: int) -> Timings:
        """Rounds (prepare every claim, then unprepare every claim) until `calls` of each."""
        samples: dict[str, list[tuple[str, float]]] = {m: [] for m in METHODS}
        walls = dict.fromkeys(METHODS, 0.0)
        done = 0
        with futures.ThreadPoolExecutor(concurrency) as pool:
            while done < calls:
                uids = self.uids[: calls - done]
                for method in METHODS:
                    started = time.perf_counter()
                    samples[method] += pool.map(lambda u, m=method: self.call(m, u), uids)
                    walls[method] += time.perf_counter() - started
                done += len(uids)
        return samples, walls

    def close(self) -> None:
        self.channel.close()


def client_rounds(
    socket: str, kind: str, uids: Sequence[str], concurrency: int, calls: int
) -> Timings:
    """`Client.rounds` in a process of its own, as the kubelet is: no GIL shared with the plugin."""
    client = Client(socket, kind, uids)
    try:
        return client.rounds(concurrency, calls)
    finally:
        client.close()


class Bench:
    """One plugin on a fresh simulated node, serving the DRA socket, with the claims allocated."""

    def __init__(self, kind: str, delay: str, *, directory: str | None = None) -> None:
        self.kind = kind
        self.root = Path(tempfile.mkdtemp(prefix="npb-", dir=directory))
        spec = FLEETS[kind]
        self.sim = simnvml.SimulatedNvml(f"{spec.fleet},delay={delay}")
        self.clock = HardwareClock()
        self.store = MemoryNasStore(node="bench", namespace="drasat")
        self.config = Config(
            node_name="bench",
            cdi_root=self.root / "cdi",
            plugin_dir=self.root / "p",
            registry_dir=self.root / "r",
            state_dir=self.root / "s",
            gc_interval_s=0,
            health_events=False,
            workers=64,
        )
        lib = nvml.NvmlDeviceLib(
            TimedNvml(self.sim, self.clock), run=self.clock.timed(self.sim.run)
        )
        self.plugin = NodePlugin(
            self.config, lib=lib, store=self.store, mps_runner=TimedRunner(self.clock)
        )
        #: (method, uid) -> (hardware, plugin wall, plugin CPU) seconds of each call, in order
        self.inside: dict[tuple[str, str], deque[tuple[float, float, float]]] = {}
        self.profiler: cProfile.Profile | None = None
        self._instrument()
        self.plugin.start()
        gpus = [g.uuid for g in self.sim.gpus]
        self.uids = [f"{kind}-{i}" for i in range(spec.claims)]
        for i, uid in enumerate(self.uids):
            self.store.allocate(uid, allocation(kind, i, uid, gpus))
        self.socket = str(self.config.dra_socket)

    def _instrument(self) -> None:
        """Time every prepare/unprepare inside the plugin (the gRPC servicer calls these)."""
        state = self.plugin.state
        for method, original in (
            ("NodePrepareResources", state.prepare),
            ("NodeUnprepareResources", state.unprepare),
        ):

            def wrapped(claim: ClaimRef, m: str = method, f: Any = original) -> Any:
                self.clock.reset()
                profiler = self.profiler
                if profiler is not None:
                    profiler.enable()
                started, cpu = time.perf_counter(), time.thread_time()
                try:
                    return f(claim)
                finally:
                    wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
                    if profiler is not None:
                        profiler.disable()
                    spent = (self.clock.spent(), wall, cpu)
                    self.inside.setdefault((m, claim.uid), deque()).append(spent)

            setattr(state, "prepare" if method == METHODS[0] else "unprepare", wrapped)

    def samples(self, timings: Timings, result: Result) -> None:
        """Join what the client saw with what the plugin measured: the k-th call of a claim and
        method in the client's order is the k-th the plugin served (rounds do not overlap)."""
        calls, walls = timings
        for method in METHODS:
            result.samples[method] = [
                Sample(wall, *self.inside[(method, uid)].popleft()) for uid, wall in calls[method]
            ]
            result.wall_s[method] = walls[method]

    def close(self) -> None:
        self.plugin.stop(grace_s=0)
        shutil.rmtree(self.root, ignore_errors=True)


def run(
    kind: str,
    delay: str,
    concurrency: int,
    calls: int,
    *,
    profile: int = 0,
    directory: str | None = None,
    client: str = "process",
) -> Result:
    """Measure one kind at one delay and concurrency: `calls` prepares and as many unprepares.

    `client`: "process" runs the kubelet's side in a process of its own, "thread" in this one."""
    bench = Bench(kind, delay, directory=directory)
    result = Result(kind, delay, concurrency)
    local = Client(bench.socket, kind, bench.uids)
    try:
        measure: Callable[[int], Timings]
        pool = multiprocessing.get_context("spawn").Pool(1) if client == "process" else None
        if pool is not None:
            args = (bench.socket, kind, bench.uids, concurrency)
            measure = lambda n: pool.apply(client_rounds, (*args, n))  # noqa: E731
        else:
            measure = lambda n: local.rounds(concurrency, n)  # noqa: E731
        try:
            measure(min(concurrency, len(bench.uids)))  # warm-up
            bench.inside.clear()
            calls_before = len(bench.sim.calls)
            bench.samples(measure(calls), result)
            result.nvml_calls_per_claim = (len(bench.sim.calls) - calls_before) / calls
        finally:
            if pool is not None:
                pool.close()
                pool.join()
        if profile:
            bench.inside.clear()
            bench.profiler = cProfile.Profile()
            local.rounds(1, len(bench.uids))
            out = io.StringIO()
            stats = pstats.Stats(bench.profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(profile)
            result.profile = out.getvalue()
    finally:
        local.close()
        bench.close()
    return result


HEADER = (
    "| kind | delay | conc. | calls | prepare p50 | p95 | p99 | max | p99 excl. hw "
    "| prepares/s | unprepare p50 | p99 | p99 excl. hw | unprepares/s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 0.1 else f"{seconds * 1e3:.0f}"


def row(result: Result) -> str:
    cells = [result.kind, result.delay, str(result.concurrency)]
    for method in METHODS:
        samples = result.samples[method]
        wall = [s.wall_s for s in samples]
        excl = [s.wall_s - s.hardware_s for s in samples]
        rate = f"{len(samples) / result.wall_s[method]:.0f}"
        if method == METHODS[0]:
            cells.append(str(len(samples)))
            cells += [_ms(percentile(wall, q)) for q in (50, 95, 99, 100)]
            cells += [_ms(percentile(excl, 99)), rate]
        else:
            cells += [_ms(percentile(wall, 50)), _ms(percentile(wall, 99))]
            cells += [_ms(percentile(excl, 99)), rate]
    return "| " + " | ".join(cells) + " |"


BREAKDOWN = (
    "| kind | delay | conc. | method | client p50 | in plugin p50 | p99 | plugin CPU p50 | p99 "
    "| hardware p50 | client − plugin p50 |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def breakdown(result: Result) -> list[str]:
    """Where a call's time goes: client-observed, inside the plugin (wall, CPU), hardware."""
    lines = []
    for method in METHODS:
        samples = result.samples[method]
        client = [s.wall_s for s in samples]
        inside = [s.plugin_s for s in samples]
        cpu = [s.plugin_cpu_s for s in samples]
        outside = [s.wall_s - s.plugin_s for s in samples]
        cells = [result.kind, result.delay, str(result.concurrency), method.removeprefix("Node")]
        cells += [_ms(percentile(client, 50)), _ms(percentile(inside, 50))]
        cells += [_ms(percentile(inside, 99)), _ms(percentile(cpu, 50)), _ms(percentile(cpu, 99))]
        cells += [_ms(percentile([s.hardware_s for s in samples], 50))]
        cells += [_ms(percentile(outside, 50))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--calls", type=int, default=512, help="prepares (and unprepares) per row")
    parser.add_argument("--delays", nargs="+", default=["0"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--client",
        choices=["process", "thread"],
        default="process",
        help="the kubelet's side in a process of its own (default) or in the plugin's",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="where the plugin's state dir, CDI root and sockets go (default: the temp dir)",
    )
    args = parser.parse_args(argv)
    where = args.dir or tempfile.gettempdir()
    print(f"times in ms; state and CDI under {where}; 'excl. hw': minus the time inside the")
    print("simulated hardware during the call (NVML, nvidia-smi, the MPS daemon runner)")
    print(HEADER, flush=True)
    counts, notes, breakdowns = [], [], []
    for kind in args.kinds:
        for delay in args.delays:
            for concurrency in args.concurrency:
                profile = args.profile if concurrency == args.concurrency[0] else 0
                result = run(
                    kind,
                    delay,
                    concurrency,
                    args.calls,
                    profile=profile,
                    directory=args.dir,
                    client=args.client,
                )
                print(row(result), flush=True)
                breakdowns += breakdown(result)
                if result.profile:
                    notes.append(f"== {kind} delay={delay}: prepare+unprepare, cProfile")
                    notes.append(result.profile)
        calls = result.nvml_calls_per_claim
        counts.append(f"{kind}: {calls:.0f} NVML calls per claim (prepare + unprepare)")
    print("\n".join(counts))
    print(BREAKDOWN)
    print("\n".join(breakdowns + notes))


if __name__ == "__main__":
    main()
