"""Node plugin prepare/unprepare latency over the real DRA socket, on the simulated fleet.

    python -m bench.nodeplugin_prepare [--claims 56] [--delays 0 1ms 5ms] [--concurrency 1 8]

A plugin serves `8xA100-40GB,mig=all` (each NVML call delayed by `delay`, standing in for the
driver's own latency); a gRPC client plays the kubelet: NodePrepareResources then
NodeUnprepareResources of `--claims` 1g.5gb MIG claims (7 per GPU, every placement), one claim per
call, `concurrency` calls at a time. Prints p50/p95/max per call, and NVML calls per claim.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc

from drasat.nodeplugin import mps, nvml, simnvml
from drasat.nodeplugin.gen import dra_v1alpha3_pb2 as pb2
from drasat.nodeplugin.gen import dra_v1alpha3_pb2_grpc as pb2_grpc
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin


def _run(claims: int, delay: str, concurrency: int) -> str:
    root = Path(tempfile.mkdtemp(prefix="npb-", dir="/tmp"))
    sim = simnvml.SimulatedNvml(f"8xA100-40GB,mig=all,delay={delay}")
    store = MemoryNasStore(node="bench", namespace="drasat")
    config = Config(
        node_name="bench",
        cdi_root=root / "cdi",
        plugin_dir=root / "p",
        registry_dir=root / "r",
        state_dir=root / "s",
        gc_interval_s=0,
        health_events=False,
    )
    plugin = NodePlugin(
        config,
        lib=nvml.NvmlDeviceLib(sim, run=sim.run),
        store=store,
        mps_runner=mps.RecordingRunner(),
    )
    plugin.start()
    uids = []
    for i in range(claims):
        gpu, start = divmod(i % 56, 7)
        uid = f"claim-{i}"
        device = {"profile": "1g.5gb", "parentUUID": sim.gpus[gpu].uuid,
                  "placement": {"start": start, "size": 1}}  # fmt: skip
        info = {"namespace": "bench", "name": uid, "uid": uid}
        store.allocate(uid, {"claimInfo": info, "mig": {"devices": [device]}})
        uids.append(uid)
    channel = grpc.insecure_channel(f"unix://{config.dra_socket}")
    stub = pb2_grpc.NodeStub(channel)

    def timed(method: str, uid: str) -> float:
        claim = pb2.Claim(namespace="bench", name=uid, uid=uid)
        request = getattr(pb2, f"{method}Request")(claims=[claim])
        started = time.perf_counter()
        response = getattr(stub, method)(request, timeout=120)
        elapsed = time.perf_counter() - started
        if response.claims[uid].error:
            raise SystemExit(f"{method} {uid}: {response.claims[uid].error}")
        return elapsed

    calls_before = len(sim.calls)
    lines = []
    with futures.ThreadPoolExecutor(concurrency) as pool:
        for method in ("NodePrepareResources", "NodeUnprepareResources"):
            started = time.perf_counter()
            times = sorted(pool.map(lambda u, m=method: timed(m, u), uids))
            wall = time.perf_counter() - started
            p95 = times[max(0, int(len(times) * 0.95) - 1)]
            lines.append(
                f"{method:24} delay={delay:>5} conc={concurrency:>2}  "
                f"p50 {statistics.median(times) * 1e3:7.1f} ms  p95 {p95 * 1e3:7.1f} ms  "
                f"max {times[-1] * 1e3:7.1f} ms  {len(times) / wall:6.1f} claims/s"
            )
    per_claim = (len(sim.calls) - calls_before) / claims
    lines.append(f"  NVML calls per claim (prepare + unprepare): {per_claim:.0f}")
    channel.close()
    plugin.stop(grace_s=0)
    shutil.rmtree(root, ignore_errors=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=56)
    parser.add_argument("--delays", nargs="+", default=["0", "1ms"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    args = parser.parse_args()
    for delay in args.delays:
        for concurrency in args.concurrency:
            print(_run(args.claims, delay, concurrency), flush=True)


if __name__ == "__main__":
    main()
