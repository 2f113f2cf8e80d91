"""`python -m drasat.testbed.controlplane up|down|status [--dir D]`: what `scripts/kube-cluster`
runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drasat.testbed.controlplane import binaries, realcluster, realkubelet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kube-cluster",
        description=(
            f"A real Kubernetes {binaries.KUBE_VERSION} control plane on loopback (etcd, "
            "kube-apiserver, kube-scheduler, kube-controller-manager) for drasat's tests."
        ),
    )
    parser.add_argument("command", choices=("up", "down", "status", "logs"))
    parser.add_argument(
        "--dir",
        type=Path,
        default=realcluster.default_dir(),
        help="the cluster folder: data, logs, kubeconfigs, pids (default: %(default)s)",
    )
    parser.add_argument(
        "--bin-dir",
        type=Path,
        default=None,
        help=f"where the binaries are (default: $DRASAT_KUBE_BIN or {binaries.default_dir()})",
    )
    parser.add_argument(
        "--classic",
        action="store_true",
        help=f"up: Kubernetes {binaries.CLASSIC_VERSION} with classic DRA (resource.k8s.io/"
        f"v1alpha2) from $DRASAT_KUBE_CLASSIC_BIN or {binaries.default_dir(classic=True)}",
    )
    parser.add_argument(
        "--version",
        choices=binaries.VERSIONS,
        default=None,
        help="up: Kubernetes MINOR as a user's cluster of that version comes, with its default "
        "feature gates and API versions (nothing turned on), from $DRASAT_KUBE_BIN_1_34 (...) or "
        "the cache scripts/kube-build MINOR builds into (default: "
        f"{binaries.KUBE_VERSION} with every DRA gate on)",
    )
    parser.add_argument(
        "--kubelets",
        type=int,
        default=0,
        metavar="N",
        help="up: also start N real kubelets (nodes node-1..node-N), each on its own fake "
        "container runtime (fakecri), registering its own Node",
    )
    parser.add_argument(
        "--drasat-plugins",
        metavar="FLEET",
        default="",
        help="up, with --kubelets: also start drasat's node plugin for each kubelet on the "
        "simulated fleet FLEET (e.g. 2xT4), registering through that kubelet's plugin watcher "
        "(needs drasat importable by this Python); each keeps its NodeAllocationState in "
        "--drasat-namespace, waiting until that namespace and drasat's CRDs exist (a `drasat "
        "controller` then allocates on them)",
    )
    parser.add_argument(
        "--drasat-namespace",
        default="drasat",
        metavar="NS",
        help="up, with --drasat-plugins: the node plugins' driver namespace, where the "
        "controller reads their NodeAllocationStates (default: %(default)s, the chart's)",
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for up")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return _up(args)
        recorded = realcluster.Cluster.load(args.dir)
    except (realcluster.ClusterError, binaries.MissingBinaries) as exc:
        print(f"kube-cluster: {exc}", file=sys.stderr)
        return 1
    if args.command == "down":
        stopped = recorded.stop()
        print(f"kube-cluster: stopped {', '.join(stopped) or 'nothing (none was running)'}")
    elif args.command == "logs":
        print(recorded.logs(lines=200))
    else:
        for process in recorded.processes:
            state = "running" if process.alive() else "stopped"
            print(f"{process.name:<24} pid {process.pid:<8} {state}")
        print(f"kubeconfig: {recorded.kubeconfig}")
    return 0


def _up(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        print(f"kube-cluster: starting {line}", file=sys.stderr, flush=True)

    if args.drasat_plugins and not args.kubelets:
        print("kube-cluster: --drasat-plugins needs --kubelets N", file=sys.stderr)
        return 2
    if args.kubelets and args.classic:
        print("kube-cluster: --kubelets runs v1.37 kubelets; not with --classic", file=sys.stderr)
        return 2
    if args.version and args.classic:
        print("kube-cluster: --version and --classic are two different clusters", file=sys.stderr)
        return 2
    bin_dir = args.bin_dir or _bin_dir_of_version(args)
    started = realcluster.Cluster.start(
        directory=args.dir,
        bin_dir=bin_dir,
        timeout=args.timeout,
        progress=progress,
        root_ca_publisher=args.kubelets > 0,
        default_gates=args.version is not None,
    )
    for index in range(1, args.kubelets + 1):
        name = f"node-{index}"
        progress(f"kubelet {name} on its fake container runtime")
        try:
            node = realkubelet.Kubelet.start(started, name, timeout=args.timeout)
        except BaseException:
            started.stop()
            raise
        print(
            f"kube-cluster: kubelet {name} Ready; a DRA plugin registers in {node.registry_dir} "
            f"and serves in {node.plugins_dir}/<driver>/",
            file=sys.stderr,
        )
        if args.drasat_plugins:
            plugin = node.start_drasat_plugin(
                args.drasat_plugins, python=sys.executable, namespace=args.drasat_namespace
            )
            print(f"kube-cluster: drasat's node plugin for {name}: {plugin.log}", file=sys.stderr)
    if args.drasat_plugins:
        print(
            f"kube-cluster: drasat's node plugins publish their NodeAllocationStates in namespace "
            f"{args.drasat_namespace} once it and drasat's CRDs exist (helm install ... "
            f"--namespace {args.drasat_namespace} --create-namespace, or kubectl create namespace "
            f"{args.drasat_namespace} and kubectl apply -f deploy/helm/drasat/crds/), then "
            "register with their kubelets",
            file=sys.stderr,
        )
    print(f"kube-cluster: up at {started.url} (logs in {args.dir / 'logs'})", file=sys.stderr)
    print(started.kubeconfig)
    return 0


def _bin_dir_of_version(args: argparse.Namespace) -> Path:
    """The binaries of `--version` (default: the current control plane's, or classic's)."""
    if args.version is None:
        return binaries.default_dir(classic=args.classic)
    return binaries.locate(version=args.version)


if __name__ == "__main__":
    sys.exit(main())
