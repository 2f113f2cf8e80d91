"""`python -m drasat.testbed.sim`: serve the simulated API server (with drasat's CRDs) and
optionally the simulated v1 scheduler and controller manager (`--v1`) until interrupted, for manual
runs of the controller, what-if or helm. `python -m drasat.classic` is the same with the simulated
classic DRA scheduler (`--scheduler`), which lives in the classic wing.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import threading
from collections.abc import Callable, Sequence

from drasat import stopsignals
from drasat.api import crds
from drasat.testbed.sim import actor, apiserver, controllers, kubeclient, v1scheduler

#: Makes the classic scheduler for a client (drasat.classic.scheduler.Scheduler).
Scheduler = Callable[[kubeclient.KubeClient], actor.WatchDrivenLoop]


def main(
    argv: Sequence[str] | None = None,
    *,
    prog: str = "python -m drasat.testbed.sim",
    classic_scheduler: Scheduler | None = None,
) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument(
        "--kubeconfig", type=pathlib.Path, help="write a kubeconfig for the server to this file"
    )
    if classic_scheduler is not None:
        parser.add_argument(
            "--scheduler", action="store_true", help="also run the simulated classic DRA scheduler"
        )
    parser.add_argument(
        "--v1",
        action="store_true",
        help="also run the simulated v1 scheduler (honours allocations, allocates nothing) and "
        "controller manager (claims from templates, Deployments, Jobs)",
    )
    args = parser.parse_args(argv)
    done = threading.Event()
    with stopsignals.relayed(done), apiserver.ApiServer.running(crds=crds.all_crds()) as server:
        if args.kubeconfig is not None:
            server.write_kubeconfig(args.kubeconfig)
        loops: list[actor.WatchDrivenLoop] = []
        if classic_scheduler is not None and args.scheduler:
            loops.append(classic_scheduler(kubeclient.KubeClient(server.url)))
        if args.v1:
            loops.append(v1scheduler.V1Scheduler(kubeclient.KubeClient(server.url)))
            loops.append(controllers.ControllerManager(kubeclient.KubeClient(server.url)))
        for loop in loops:
            loop.start()
        print(server.url, flush=True)
        done.wait()
        for loop in reversed(loops):
            loop.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
