"""MPS daemons (real processes, the simmps.py stand-in): one for the shares of a namespace on a GPU
(the isolation rule's other cases: test_np_isolation), bounding them by the largest and each share's
own part in its CDI environment, stopped after the last claim, adopted or restarted by a restarted
plugin, and the GPU's compute mode held and restored."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from npfixtures import Node, gpu_allocation, make_node, ref

from drasat.nodeplugin import mps
from drasat.nodeplugin.devicelib import ComputeMode
from drasat.nodeplugin.state import ClaimError


def _spec(node: Node, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(node.state.cdi.path(uid).read_text())
    return spec


def _mounts(node: Node, uid: str) -> list[tuple[str, str]]:
    edits = _spec(node, uid)["devices"][0]["containerEdits"]
    return [(m["hostPath"], m["containerPath"]) for m in edits.get("mounts", [])]


def _pid(node: Node) -> int:
    (daemon,) = node.state.mps.running().values()
    return daemon.pid


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if mps.start_time(pid) is None:
            return True
        time.sleep(0.02)
    return False


SHARES = (("share-a", 30, "8Gi"), ("share-b", 50, "16Gi"), ("share-c", 20, "4Gi"))


def _prepare_shares(node: Node, gpu: int = 0) -> None:
    for uid, compute, memory in SHARES:
        node.allocate(
            uid, gpu_allocation(uid, node.gpu(gpu), share={"compute": compute, "memory": memory})
        )
        node.state.prepare(ref(uid))


def test_share_claims_on_one_gpu_use_one_daemon_each_with_its_own_limits(
    node_factory: Any,
) -> None:
    node = node_factory("A100-40GB")
    _prepare_shares(node)
    ((name, daemon),) = node.state.mps.running().items()
    assert daemon.devices == (node.gpu(0),)
    assert node.state.mps.users(name) == {"share-a", "share-b", "share-c"}
    daemon_dir = node.state.mps.daemon_dir(name)
    # the daemon is a real process that made its control FIFO and log where clients look
    assert (daemon_dir / "pipe" / mps.CONTROL_FIFO).exists()
    assert f"devices {node.gpu(0)}" in (daemon_dir / "log" / "control.log").read_text()
    for uid, compute, memory in SHARES:
        mib = {"8Gi": 8192, "16Gi": 16384, "4Gi": 4096}[memory]
        assert node.mps_limits(uid) == {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(compute),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={mib}M",
        }
        # every claim's containers reach the same daemon: same pipes, same shared memory
        assert _mounts(node, uid) == [
            (str(daemon_dir / "pipe"), "/tmp/nvidia-mps"),
            (str(daemon_dir / "shm"), "/dev/shm"),
        ]
    assert node.sim.gpus[0].compute_mode == 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


def test_the_daemon_stops_after_the_last_claim_and_the_compute_mode_returns(
    node_factory: Any,
) -> None:
    node = node_factory("A100-40GB")
    prohibited = 2  # NVML_COMPUTEMODE_PROHIBITED: a baseline that is not the default
    node.sim.gpus[0].compute_mode = prohibited
    _prepare_shares(node)
    pid = _pid(node)
    assert node.sim.gpus[0].compute_mode == 3
    for uid, _, _ in SHARES[:-1]:
        node.state.unprepare(ref(uid))
        assert _pid(node) == pid  # still serving the others
        assert node.sim.gpus[0].compute_mode == 3
    node.state.unprepare(ref(SHARES[-1][0]))
    assert _gone(pid)
    assert node.daemons() == {} and node.state.mps.names() == []
    assert node.sim.gpus[0].compute_mode == prohibited  # restored, not reset to Default


def test_a_restarted_plugin_adopts_the_running_daemon(node_factory: Any) -> None:
    node = node_factory("A100-40GB")
    _prepare_shares(node)
    pid = _pid(node)
    restarted = node.restart()
    report = restarted.state.reconcile()
    assert any(line.endswith(": adopted") for line in report), report
    assert _pid(restarted) == pid  # the same process, not a new one
    # a new claim joins it (what is left of the GPU: the shares took all of its compute), and
    # the adopted daemon still stops after the last claim
    restarted.allocate("late", gpu_allocation("late", node.gpu(0), share={"memory": "1Gi"}))
    restarted.state.prepare(ref("late"))
    assert _pid(restarted) == pid
    for uid in ["late", *(s[0] for s in SHARES)]:
        restarted.state.unprepare(ref(uid))
    assert _gone(pid)
    assert restarted.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


def test_a_restarted_plugin_starts_a_dead_daemon_again(node_factory: Any) -> None:
    node = node_factory("A100-40GB")
    _prepare_shares(node)
    pid = _pid(node)
    spec_before = _spec(node, "share-a")
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    restarted = node.restart()
    report = restarted.state.reconcile()
    assert any("): restarted: it was not running" in line for line in report), report
    new_pid = _pid(restarted)
    assert new_pid != pid
    # same daemon directory: the claims' specs (and their running containers' mounts) hold
    assert _spec(restarted, "share-a") == spec_before
    for uid, _, _ in SHARES:
        restarted.state.unprepare(ref(uid))
    assert _gone(new_pid)


def test_a_pid_reused_by_another_process_is_not_taken_for_the_daemon(
    node_factory: Any,
) -> None:
    """The record's start time tells the daemon from a process that got its pid later."""
    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("one"))
    ((name, daemon),) = node.state.mps.running().items()
    record = node.state.mps.daemon_dir(name) / mps.DESCRIPTION
    body = json.loads(record.read_text())
    os.kill(daemon.pid, signal.SIGKILL)
    assert _gone(daemon.pid)
    body["pid"] = os.getpid()  # a live process, started at another time
    record.write_text(json.dumps(body))
    restarted = node.restart()
    assert any("): restarted: it was not running" in line for line in restarted.state.reconcile())
    assert _pid(restarted) not in (daemon.pid, os.getpid())
    restarted.state.unprepare(ref("one"))


def test_a_daemon_that_dies_while_serving_is_started_again_for_the_next_claim(
    node_factory: Any,
) -> None:
    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("one"))
    pid = _pid(node)
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    node.allocate("two", gpu_allocation("two", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("two"))
    assert _pid(node) != pid
    assert node.state.mps.users(next(iter(node.daemons()))) == {"one", "two"}
    node.state.unprepare(ref("one"))
    node.state.unprepare(ref("two"))
    assert node.daemons() == {}


def test_gpus_get_a_daemon_each(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    for uid, gpu in (("a", 0), ("b", 1), ("c", 0)):
        node.allocate(uid, gpu_allocation(uid, node.gpu(gpu), share={"compute": 25}))
        node.state.prepare(ref(uid))
    assert sorted(node.daemons().values()) == sorted([(node.gpu(0),), (node.gpu(1),)])
    node.state.unprepare(ref("b"))
    assert list(node.daemons().values()) == [(node.gpu(0),)]
    assert node.sim.gpus[1].compute_mode == 0 and node.sim.gpus[0].compute_mode == 3


def test_a_claim_whose_devices_overlap_another_daemons_set_is_refused(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("one"))
    both = gpu_allocation("both", node.gpu(0), node.gpu(1), sharing={"strategy": "MPS"})
    node.allocate("both", both)
    with pytest.raises(ClaimError, match=f"{node.gpu(0)} already has an MPS daemon"):
        node.state.prepare(ref("both"))
    assert list(node.daemons().values()) == [(node.gpu(0),)]
    assert node.sim.gpus[1].compute_mode == 0  # the refused claim changed nothing
    assert node.state.checkpoint.get("both") is None


def test_killed_between_starting_the_daemon_and_recording_it(node_factory: Any) -> None:
    """The daemon a killed prepare left without a record (no claim holds it) is stopped when
    start-up rolls the prepare back."""
    from drasat.nodeplugin.state import Fault

    class Killed(BaseException):
        pass

    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
    node.state.faults.append(Fault("mps", Killed()))
    with pytest.raises(Killed):
        node.state.prepare(ref("one"))
    pid = _pid(node)
    restarted = node.restart()
    report = restarted.state.reconcile()
    assert report == ["rolled back interrupted prepare of one"], report
    assert _gone(pid) and restarted.state.mps.names() == []
    assert restarted.sim.gpus[0].compute_mode == 0


def test_client_env_and_daemon_names_are_pure() -> None:
    limits = mps.MpsLimits("u", ("GPU-a", "GPU-b"), 35, {1: 3 * 2**30, 0: 3 * 2**30})
    assert mps.client_env(limits) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "35",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3072M,1=3072M",
    }
    # different limits per device: a CUDA index is the client's order, not the claim's, so they
    # are the daemon's (by UUID) only
    uneven = mps.MpsLimits("u", ("GPU-a", "GPU-b"), None, {1: 3 * 2**30, 0: 1})
    assert mps.client_env(uneven) == {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}
    # what the daemon enforces already is left out; only a tighter part is added
    enforced = mps.DaemonLimits(35, (("GPU-a", 4 * 2**30), ("GPU-b", 2**30)))
    assert mps.client_env(limits, enforced) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3072M,1=3072M",
    }
    loose = mps.DaemonLimits(35, (("GPU-a", 3 * 2**30), ("GPU-b", 2**30)))
    assert mps.client_env(limits, loose) == {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}
    assert mps.DaemonLimits(20, (("GPU-a", 5),)).widest(mps.DaemonLimits(60, (("GPU-a", 9),))) == (
        mps.DaemonLimits(60, (("GPU-a", 9),))
    )
    assert mps.DaemonLimits(20).widest(mps.DaemonLimits()) == mps.DaemonLimits()
    assert mps.DaemonLimits(60, (("GPU-a", 2**30),)).commands(mps.DaemonLimits(60)) == [
        "set_default_device_pinned_mem_limit GPU-a 1024M"
    ]
    assert mps.daemon_name(("GPU-a",), "claim:x") != mps.daemon_name(("GPU-a",), "claim:y")
    assert mps.client_env(mps.MpsLimits("u", ("GPU-a",))) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"
    }
    with pytest.raises(ValueError, match="thread percentage 0"):
        mps.client_env(mps.MpsLimits("u", ("GPU-a",), 0))
    assert mps.daemon_name(("GPU-b", "GPU-a")) == mps.daemon_name(["GPU-a", "GPU-b", "GPU-a"])
    assert mps.daemon_name(("GPU-a",)) != mps.daemon_name(("GPU-b",))
    described = mps.render(("GPU-a",), daemon_dir=Path("/d"), program=("nvidia-cuda-mps-control",))
    assert described["command"] == ["nvidia-cuda-mps-control", "-f"]
    assert described["env"] == {
        "CUDA_VISIBLE_DEVICES": "GPU-a",
        "CUDA_MPS_PIPE_DIRECTORY": "/d/pipe",
        "CUDA_MPS_LOG_DIRECTORY": "/d/log",
    }
    with pytest.raises(ValueError, match="unsafe"):
        mps.render(("GPU-a; rm -rf /",), daemon_dir=Path("/d"), program=("x",))


def test_start_up_stops_a_daemon_no_claim_holds(node_factory: Any) -> None:
    node = node_factory("T4")
    name = node.state.mps.acquire("gone", (node.gpu(0),))  # its claim's record is lost
    pid = _pid(node)
    report = node.restart().state.reconcile()
    assert f"stopped MPS daemon {name}: no claim holds it" in report
    assert _gone(pid) and node.state.mps.names() == []


def test_parallel_share_prepares_start_one_daemon(node_factory: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    node = node_factory("T4 x2")
    uids = [f"p{i}" for i in range(12)]
    for i, uid in enumerate(uids):
        node.allocate(uid, gpu_allocation(uid, node.gpu(i % 2), share={"compute": 10}))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda uid: node.state.prepare(ref(uid)), uids))
    assert sorted(node.daemons().values()) == sorted([(node.gpu(0),), (node.gpu(1),)])
    assert len(node.state.mps.names()) == 2  # no second daemon folder for a GPU, even briefly
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda uid: node.state.unprepare(ref(uid)), uids))
    assert node.daemons() == {} and node.state.mps.names() == []
    assert [g.compute_mode for g in node.sim.gpus] == [0, 0]


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("prepare"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("unprepare"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("kill"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("restart"), st.just(0), st.just(0)),
    ),
    max_size=8,
)


@settings(max_examples=20, deadline=None)
@given(ops=_OPS)
@example(
    ops=[
        ("prepare", 0, 0),
        ("prepare", 1, 0),
        ("restart", 0, 0),
        ("unprepare", 0, 0),
        ("kill", 0, 0),
        ("prepare", 2, 1),
        ("unprepare", 1, 0),
    ]
)
def test_daemons_run_exactly_for_gpus_with_mps_claims(ops: list[Any]) -> None:
    """Whatever the order of prepares, unprepares, killed daemons and plugin restarts (each
    followed by start-up's reconcile), after every step a daemon runs for exactly the GPUs that
    have a prepared MPS claim, and a GPU is in EXCLUSIVE_PROCESS exactly then."""
    root = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))  # short: UNIX socket paths
    node = make_node(root, "T4 x2")
    prepared: dict[str, int] = {}  # claim -> GPU index
    try:
        for op, claim, gpu in ops:
            uid = f"c{claim}"
            if op == "prepare" and uid not in prepared:
                node.allocate(uid, gpu_allocation(uid, node.gpu(gpu), share={"compute": 10}))
                node.state.prepare(ref(uid))
                prepared[uid] = gpu
            elif op == "unprepare" and uid in prepared:
                node.state.unprepare(ref(uid))
                node.store.deallocate(uid)
                del prepared[uid]
            elif op == "kill":
                for daemon in node.state.mps.running().values():
                    if daemon.devices == (node.gpu(claim),):
                        os.kill(daemon.pid, signal.SIGKILL)
                        assert _gone(daemon.pid)
                node = node.restart()
                node.state.reconcile()
            elif op == "restart":
                node = node.restart()
                node.state.reconcile()
            in_use = {node.gpu(g) for g in prepared.values()}
            assert {d for ds in node.daemons().values() for d in ds} == in_use
            assert len(node.daemons()) == len(in_use)
            modes = {g.uuid: g.compute_mode for g in node.sim.gpus}
            assert {u for u, m in modes.items() if m == 3} == in_use
    finally:
        mps.stop_simulated()
        shutil.rmtree(root, ignore_errors=True)


def test_the_running_plugin_starts_a_daemon_that_died_again(node_factory: Any) -> None:
    """The garbage-collection loop checks the daemons: one killed between prepares comes back
    for its claims' clients without waiting for a prepare or a restart."""
    node = node_factory("T4", gc_interval_s=0.05)
    node.plugin.start()
    try:
        node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
        node.state.prepare(ref("one"))
        pid = _pid(node)
        os.kill(pid, signal.SIGKILL)
        assert _gone(pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not node.daemons():
            time.sleep(0.05)
        assert _pid(node) != pid
        node.state.unprepare(ref("one"))
        assert node.daemons() == {}
    finally:
        node.plugin.stop(grace_s=0)


def _unshare_works() -> bool:
    import subprocess

    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.parametrize("root", ["", "/"], ids=["direct", "chroot"])
def test_the_real_runner_gives_the_daemon_its_own_shared_memory_folder(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """The wrapper a GPU node runs (a private mount namespace whose /dev/shm is the daemon's
    shm/, optionally chrooted into the host root), run here with the stand-in as the program:
    what the daemon puts in /dev/shm lands in the folder the claims' containers mount."""
    if not _unshare_works():
        pytest.skip("unshare --mount is not permitted here (needs CAP_SYS_ADMIN)")
    monkeypatch.setenv("DRASAT_SIMMPS_SHM_PROBE", "drasat-probe")
    runner = mps.ProcessRunner(mps.SIM_PROGRAM, root=root, start_timeout_s=10)
    manager = mps.MpsManager(short_tmp / "mps", runner)
    name = manager.acquire("claim", ("GPU-x",))
    daemon = manager.read(name)
    assert daemon is not None and daemon.running()
    shm = manager.daemon_dir(name) / "shm"
    assert (shm / "drasat-probe").read_text().strip() == str(daemon.pid)  # the daemon's own pid
    assert not Path("/dev/shm/drasat-probe").exists()  # not the plugin's /dev/shm
    assert manager.release("claim") == [name]
    assert _gone(daemon.pid)


def test_the_real_runners_command_lines() -> None:
    described = mps.render(("GPU-a",), daemon_dir=Path("/s/d"), program=mps.REAL_PROGRAM)
    host = mps.ProcessRunner(root="/driver-root")
    assert host._argv(described, Path("/s/d")) == [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'shm=$0 root=$1 dir=$2; shift 2; mount --bind "$shm" "$root/dev/shm" && '
        'mount --bind "$dir/pipe" "$root$dir/pipe" && '
        'mount --bind "$dir/log" "$root$dir/log" && exec chroot "$root" "$@"',
        "/s/d/shm", "/driver-root", "/s/d", "nvidia-cuda-mps-control", "-f",
    ]  # fmt: skip
    assert host.control_argv() == ["chroot", "/driver-root", "nvidia-cuda-mps-control"]
    plain = mps.ProcessRunner(private_shm=False)
    assert plain._argv(described, Path("/s/d")) == ["nvidia-cuda-mps-control", "-f"]
    assert plain.control_argv() == ["nvidia-cuda-mps-control"]
