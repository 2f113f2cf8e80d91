"""`drasat mps-host`: run this node's MPS control daemons for the node plugin (its own DaemonSet).

The daemons live in this process's PID namespace, not the plugin's, so they outlive the plugin's
container (docs/NODEPLUGIN.md, "Where the daemons run"). Every flag has an environment variable
(DRASAT_<FLAG>); flags win.
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from typing import Any

from drasat import stopsignals
from drasat.cli.envflags import flag
from drasat.nodeplugin import mps, mpshost

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
    p.set_defaults(func=run)


def runner(args: argparse.Namespace) -> mps.ProcessRunner:
    if args.simulate:
        log.warning("SIMULATED MPS: the daemons are the stand-in simmps.py")
        return mps.ProcessRunner(mps.SIM_PROGRAM, private_shm=False)
    root = args.container_driver_root or args.driver_root
    # A driver container's root (other than /) has no shell or mount to chroot into: the
    # binary is then found on PATH, as for the node plugin.
    return mps.ProcessRunner(root=root if args.driver_root == "/" and root != "/" else "")


def run(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    host = mpshost.MpsHost(state / "mps", runner(args), state / mpshost.SOCKET_NAME)
    stop = threading.Event()
    with stopsignals.relayed(stop):
        host.serve(stop)
    return 0
