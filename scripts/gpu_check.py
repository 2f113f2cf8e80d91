"""`make gpu-check`: what drasat's node plugin would do on this machine's real GPUs, checked without
changing them, in well under 5 minutes.

1. discovery through the real `pynvml` (the plugin's `nvml.py`): GPUs, driver, MIG profiles;
2. the ResourceSlices this node would publish (`slicepublisher.py`, the device model);
3. the CDI spec of a claim for GPU 0 (`nodeplugin/cdispec.py`: the plugin's own prepare of an
   exclusive whole GPU, which sets nothing on the GPU), and every path it lists present on the host;
4. `nvidia-smi` (from the spec's mounts) run with only the spec's environment and its libraries'
   folders as LD_LIBRARY_PATH, and, when `nvcc` is installed, a tiny CUDA program run the same way;
5. every GPU's MIG mode, compute mode, persistence mode and power limit the same after as before.

Read-only: it never changes MIG mode, compute mode, clocks or power, and never creates MIG devices.
Prints a verdict table (check, result, detail). Exit 0: every check passed or was skipped; 1: a
check failed; 77: no NVIDIA GPU or driver here (nothing could be checked).

    .venv/bin/python scripts/gpu_check.py [--driver-root /] [--dev-root DIR] [--cdi-hook-path P]

`--simulate-gpus SPEC` runs the same steps on the simulated fleet (with a fake driver root), which
is how CI tests this script.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

NO_GPU = 77
DEADLINE_S = 240.0  # the whole run; each command gets what is left, at most its own limit
CUDA_SAMPLE = r"""
#include <cstdio>
__global__ void add(int *x) { x[threadIdx.x] += threadIdx.x; }
int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) { printf("no CUDA device\n"); return 2; }
  int host[32] = {0}, *dev = nullptr;
  cudaMalloc(&dev, sizeof host);
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  add<<<1, 32>>>(dev);
  cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  cudaError_t err = cudaGetLastError();
  int sum = 0;
  for (int i = 0; i < 32; i++) sum += host[i];
  printf("devices %d sum %d %s\n", n, sum, cudaGetErrorString(err));
  return sum == 496 && err == cudaSuccess ? 0 : 1;
}
"""


@dataclass
class Row:
    check: str
    result: str  # PASS, FAIL, SKIP
    detail: str


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.started = time.monotonic()

    def add(self, check: str, result: str, detail: str) -> None:
        self.rows.append(Row(check, result, " ".join(detail.split())))

    def left(self, limit: float) -> float:
        return max(1.0, min(limit, DEADLINE_S - (time.monotonic() - self.started)))

    def print(self) -> None:
        width = max(len(r.check) for r in self.rows)
        print(f"{'check':<{width}}  result  detail")
        for row in self.rows:
            print(f"{row.check:<{width}}  {row.result:<6}  {row.detail}")
        took = time.monotonic() - self.started
        failed = sum(r.result == "FAIL" for r in self.rows)
        print(f"-- {len(self.rows)} checks, {failed} failed, {took:.1f} s", flush=True)

    def code(self) -> int:
        return 1 if any(r.result == "FAIL" for r in self.rows) else 0


def _library(lib: Any, report: Report, simulate: str) -> Any:
    """The plugin's NVML library (real pynvml unless `simulate`); None when there is no GPU."""
    from drasat.nodeplugin import nvml
    from drasat.nodeplugin.devicelib import DeviceError
    from drasat.testbed import simnvml

    if simulate:
        fleet = simnvml.SimulatedNvml(simulate)
        return nvml.NvmlDeviceLib(fleet, run=fleet.run)
    try:
        return lib()
    except DeviceError as error:
        text = str(error)
        absent = ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "NO_PERMISSION", "GPU_IS_LOST")
        result = "SKIP" if any(a in text for a in absent) else "FAIL"
        detail = f"NO GPU: no NVIDIA GPU or driver on this machine ({text}); nothing checked"
        report.add("discovery (pynvml)", result, detail if result == "SKIP" else text)
        return None


def _settings(lib: Any) -> dict[str, tuple[Any, ...]]:
    out = {}
    for gpu in lib.gpus():
        s = lib.settings(gpu.uuid)
        out[gpu.uuid] = (gpu.mig_enabled, s.compute_mode, s.persistence_mode, s.power_limit_watts)
    return out


def _discovery(lib: Any, report: Report) -> bool:
    gpus = lib.gpus()
    if not gpus:
        report.add("discovery (pynvml)", "SKIP", "NO GPU: NVML found no GPU; nothing checked")
        return False
    names = ", ".join(
        f"{g.index}:{g.product_name} minor {g.minor}{' MIG' if g.mig_enabled else ''}" for g in gpus
    )
    try:
        version = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        version = "?"
    report.add(
        "discovery (pynvml)",
        "PASS",
        f"{len(gpus)} GPU(s) [{names}]; driver {gpus[0].driver_version}, CUDA "
        f"{gpus[0].cuda_driver_version}; nvidia-ml-py {version}",
    )
    for gpu in gpus:
        if gpu.mig_enabled:
            profiles = lib.mig_profiles(gpu.uuid)
            placements = sum(len(p.placements) for p in profiles)
            report.add(
                f"MIG profiles of GPU {gpu.index}",
                "PASS" if profiles else "FAIL",
                f"{len(profiles)} profiles, {placements} placements: "
                + ", ".join(p.name for p in profiles),
            )
    return True


def _slices(lib: Any, report: Report, node: str) -> None:
    from drasat.nodeplugin import slicepublisher

    wanted = slicepublisher.inventory(lib, shares=True)
    objects = slicepublisher.desired(node, wanted)
    devices = [d["name"] for o in objects for d in o["spec"].get("devices", [])]
    missing = [f"gpu-{g.minor}" for g in lib.gpus() if f"gpu-{g.minor}" not in devices]
    report.add(
        "ResourceSlices",
        "FAIL" if missing else "PASS",
        f"{len(objects)} slice(s), {len(devices)} devices"
        + (f"; missing {', '.join(missing)}" if missing else f": {', '.join(devices[:6])}")
        + (" ..." if len(devices) > 6 else ""),
    )


def _spec(lib: Any, report: Report, args: argparse.Namespace) -> dict[str, Any] | None:
    from drasat.nodeplugin import cdi, cdispec, plugin, state

    device = cdispec.first_gpu(lib)
    config = plugin.Config(
        node_name=cdispec.NODE,
        driver_root=args.driver_root,
        dev_root=args.dev_root,
        proc_root=Path(args.proc_root),
        cdi_hook_path=cdi.HOOK_PATH if args.cdi_hook_path is None else args.cdi_hook_path,
    )
    try:
        prepared = cdispec.prepare(device, lib=lib, config=config)
    except state.ClaimError as error:
        report.add(f"CDI spec ({device})", "FAIL", str(error))
        return None
    spec = prepared.spec
    shared = spec.get("containerEdits", {})
    edits = spec["devices"][0]["containerEdits"]
    nodes = len(shared.get("deviceNodes", [])) + len(edits.get("deviceNodes", []))
    report.add(
        f"CDI spec ({device})",
        "PASS",
        f"cdiVersion {spec['cdiVersion']}, {nodes} device nodes, {len(shared.get('mounts', []))} "
        f"mounts, hooks {[h['args'][1] for h in shared.get('hooks', [])]}; ids "
        + ", ".join(prepared.device_ids),
    )
    return spec


def _paths(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, host path) of everything the spec names on the host."""
    out = []
    for edits in (spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])):
        out += [
            ("device node", n.get("hostPath") or n["path"]) for n in edits.get("deviceNodes", [])
        ]
        out += [("mount", m["hostPath"]) for m in edits.get("mounts", [])]
        out += [("hook", h["path"]) for h in edits.get("hooks", [])]
    return out


def _present(spec: dict[str, Any], report: Report) -> None:
    paths = list(dict.fromkeys(_paths(spec)))  # both hooks run the one nvidia-cdi-hook
    missing = [f"{what} {path}" for what, path in paths if not os.path.lexists(path)]
    report.add(
        "spec paths on the host",
        "FAIL" if missing else "PASS",
        f"missing: {'; '.join(missing)}" if missing else f"all {len(paths)} present",
    )


def _env(spec: dict[str, Any]) -> dict[str, str]:
    """Only what the spec gives a container: its environment and its libraries' folders."""
    env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
    editses = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    for edits in editses:
        for item in edits.get("env", []):
            key, _, value = item.partition("=")
            env[key] = value
    folders = [
        m["hostPath"].rpartition("/")[0]
        for edits in editses
        for m in edits.get("mounts", [])
        if m["containerPath"].rpartition("/")[2].startswith("lib")
    ]
    env["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys(folders))
    return env


def _run(
    report: Report, check: str, argv: list[str], env: dict[str, str], ok: Callable[[str], bool]
) -> None:
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=report.left(90), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        report.add(check, "FAIL", f"{' '.join(argv)}: {error}")
        return
    output = (done.stdout + done.stderr).strip().replace("\n", " | ")
    passed = done.returncode == 0 and ok(done.stdout)
    report.add(check, "PASS" if passed else "FAIL", f"exit {done.returncode}: {output[:300]}")


def _smi(spec: dict[str, Any], lib: Any, report: Report) -> None:
    mounts = spec.get("containerEdits", {}).get("mounts", [])
    smi = next((m["hostPath"] for m in mounts if m["containerPath"].endswith("/nvidia-smi")), None)
    if smi is None:
        report.add("nvidia-smi with the spec's env", "FAIL", "the spec mounts no nvidia-smi")
        return
    uuid = sorted(lib.gpus(), key=lambda g: g.index)[0].uuid
    env = _env(spec)
    _run(report, "nvidia-smi with the spec's env", [smi, "-L"], env, lambda out: uuid in out)


def _cuda(spec: dict[str, Any], report: Report) -> None:
    nvcc = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )
    if nvcc is None:
        report.add("CUDA program with the spec's env", "SKIP", "no nvcc on this machine")
        return
    with tempfile.TemporaryDirectory(prefix="drasat-gpu-check-") as work:
        source, binary = Path(work) / "add.cu", Path(work) / "add"
        source.write_text(CUDA_SAMPLE)
        try:
            subprocess.run(
                [nvcc, "-o", str(binary), str(source)],
                capture_output=True,
                text=True,
                timeout=report.left(150),
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", "") or str(error)
            report.add("CUDA program with the spec's env", "FAIL", f"nvcc: {detail[:300]}")
            return
        check = "CUDA program with the spec's env"
        _run(report, check, [str(binary)], _env(spec), lambda out: "sum 496" in out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--driver-root", default="/", help="the driver's root (default /)")
    parser.add_argument("--dev-root", default="", help="root of dev/ (default: the driver root)")
    parser.add_argument("--proc-root", default="/proc", help="where the driver's proc files are")
    parser.add_argument("--cdi-hook-path", default=None, help="nvidia-cdi-hook ('': no hooks)")
    parser.add_argument("--node-name", default=os.uname().nodename, help="for the slices")
    parser.add_argument("--simulate-gpus", default="", help="test this script on a simulated fleet")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from drasat.nodeplugin import nvml

    report = Report()
    lib = _library(nvml.NvmlDeviceLib, report, args.simulate_gpus)
    if lib is None:
        report.print()
        return NO_GPU if report.rows[-1].result == "SKIP" else 1
    try:
        if not _discovery(lib, report):
            report.print()
            return NO_GPU
        before = _settings(lib)
        _slices(lib, report, args.node_name)
        spec = _spec(lib, report, args)
        if spec is not None:
            _present(spec, report)
            _smi(spec, lib, report)
            _cuda(spec, report)
        after = _settings(lib)
        changed = [u for u in before if before[u] != after.get(u)]
        report.add(
            "GPUs unchanged (read-only)",
            "FAIL" if changed else "PASS",
            f"changed: {changed}"
            if changed
            else "MIG, compute and persistence modes, power limits",
        )
    finally:
        lib.shutdown()
    report.print()
    return report.code()


if __name__ == "__main__":
    sys.exit(main())
