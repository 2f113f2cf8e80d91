"""`drasat mps-host`: run this node's MPS control daemons for the node plugin (its own DaemonSet).

The daemons live in this process's PID namespace, not the plugin's, so they outlive the plugin's
container (docs/NODEPLUGIN.md, "Where the daemons run"). Every flag has an environment variable
(DRASAT_<FLAG>); flags win.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from pathlib import Path
from typing import Any

from drasat import stopsignals
from drasat.cli.envflags import flag
from drasat.nodeplugin import mps, mpshost
from drasat.nodeplugin.devicelib import DeviceError

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "mps-host",
        help="run this node's MPS control daemons for the node plugin",
        description="Start, control and stop the MPS control daemons the node plugin asks for "
        "over a UNIX socket in its state folder, so that they outlive the plugin's container.",
    )
    flag(
        p,
        "--state-dir",
        "/var/lib/drasat",
        "the node plugin's state folder: the daemons' folders are under its mps/ and the "
        "socket is its mps-host.sock (default /var/lib/drasat)",
    )
    flag(
        p,
        "--driver-root",
        "/",
        "where the NVIDIA driver is installed on the host (default /): with /, the host's "
        "nvidia-cuda-mps-control runs chrooted into --container-driver-root",
    )
    flag(
        p,
        "--container-driver-root",
        "",
        "where this process sees the driver root, e.g. /driver-root in the Helm chart's pod "
        "(default: the driver root's host path)",
    )
    flag(
        p,
        "--simulate",
        False,
        "run the stand-in daemon of the simulated fleet (simmps.py) instead of "
        "nvidia-cuda-mps-control, for a node plugin run with --simulate-gpus (testing)",
        action="store_true",
    )
    p.add_argument(
        "--status",
        action="store_true",
        help="print, as JSON, each daemon of the state folder: its record, whether it runs and "
        "the limits it answers with (asked of the running MPS host), then exit",
    )
    p.set_defaults(func=run)


def runner(args: argparse.Namespace) -> mps.ProcessRunner:
    if args.simulate:
        log.warning("SIMULATED MPS: the daemons are the stand-in simmps.py")
        return mps.ProcessRunner(mps.SIM_PROGRAM, private_shm=False)
    root = args.container_driver_root or args.driver_root
    # A driver container's root (other than /) has no shell or mount to chroot into: the
    # binary is then found on PATH, as for the node plugin.
    return mps.ProcessRunner(root=root if args.driver_root == "/" and root != "/" else "")


def status(state: Path) -> int:
    """What `--status` prints: one entry per daemon folder; exit 1 when the host does not answer."""
    client = mpshost.MpsHostClient(state / mpshost.SOCKET_NAME)
    manager = mps.MpsManager(state / "mps", client)
    daemons = []
    try:
        for name in manager.names():
            daemon = manager.read(name)
            if daemon is None:
                daemons.append({"name": name, "record": None, "alive": False})
                continue
            entry: dict[str, Any] = {
                "name": name,
                "devices": list(daemon.devices),
                "scope": daemon.scope,
                "pid": daemon.pid,
                "namespace": daemon.namespace,
                "limits": daemon.limits.dump(),
                "alive": manager.alive(daemon),
            }
            if entry["alive"]:
                asks = ["get_default_active_thread_percentage"] + [
                    f"get_default_device_pinned_mem_limit {d}" for d in daemon.devices
                ]
                answers = client.control(daemon.description, asks).splitlines()
                entry["answers"] = dict(zip(asks, answers, strict=False))
            daemons.append(entry)
    except DeviceError as error:
        print(json.dumps({"error": str(error), "daemons": daemons}, indent=1))
        return 1
    print(json.dumps({"daemons": daemons}, indent=1))
    return 0


def run(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    if args.status:
        return status(state)
    host = mpshost.MpsHost(state / "mps", runner(args), state / mpshost.SOCKET_NAME)
    stop = threading.Event()
    with stopsignals.relayed(stop):
        host.serve(stop)
    return 0
