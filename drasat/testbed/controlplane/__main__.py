"""`python -m drasat.testbed.controlplane up|down|status|logs|import-images [--dir D]`: what
`scripts/kube-cluster` runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from drasat.testbed.controlplane import (
    binaries,
    containerdnode,
    deployment,
    realcluster,
    realkubelet,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kube-cluster",
        description=(
            f"A real Kubernetes {binaries.KUBE_VERSION} control plane on loopback (etcd, "
            "kube-apiserver, kube-scheduler, kube-controller-manager) for drasat's tests."
        ),
    )
    parser.add_argument("command", choices=("up", "down", "status", "logs", "import-images"))
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
        help="up: also start N real kubelets (nodes node-1..node-N), each on its own container "
        "runtime (--runtime), registering its own Node",
    )
    _runtime_flags(parser)
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
        if args.command == "import-images" and not (args.dir / realcluster.STATE_FILE).exists():
            return _import_images(None, args)
        recorded = realcluster.Cluster.load(args.dir)
    except (realcluster.ClusterError, binaries.MissingBinaries) as exc:
        print(f"kube-cluster: {exc}", file=sys.stderr)
        return 1
    if args.command == "down":
        stopped = recorded.stop()
        left = containerdnode.remove_node_cgroups(recorded)
        print(f"kube-cluster: stopped {', '.join(stopped) or 'nothing (none was running)'}")
        if left:
            print(f"kube-cluster: cgroups left (still in use): {', '.join(left)}", file=sys.stderr)
    elif args.command == "import-images":
        return _import_images(recorded, args)
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
    refused = _refused_runtime_flags(args)
    if refused:
        print(f"kube-cluster: {refused}", file=sys.stderr)
        return 2
    bin_dir = args.bin_dir or _bin_dir_of_version(args)
    started = realcluster.Cluster.start(
        directory=args.dir,
        bin_dir=bin_dir,
        timeout=args.timeout,
        progress=progress,
        root_ca_publisher=args.kubelets > 0,
        default_gates=args.version is not None,
        egress_proxy=args.runtime == "containerd",
    )
    if args.runtime == "containerd":
        return _up_on_containerd(started, args, progress)
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


# --- real container runtime (containerd) ------------------------------------------------------


def _runtime_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=("fake", "containerd"),
        default="fake",
        help="up, with --kubelets: the nodes' container runtime: fake (fakecri, in memory: no "
        "container runs; the default) or containerd (real containers by runc, with CDI, each "
        "node in namespaces of its own; built by scripts/runtime-build)",
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="up, with --runtime containerd: install drasat's chart (--chart) with the image "
        "localhost/drasat:dev, simulated GPUs and a fake driver root on each node "
        f"({deployment.VALUES_NOTE}); waits until drasat serves every node",
    )
    parser.add_argument(
        "--images",
        type=Path,
        default=None,
        help="up --runtime containerd, import-images: a folder of image archives (*.tar) to "
        "import into every node (default: $DRASAT_IMAGES, which scripts/kube-cluster sets to "
        "scripts/image-build's folder with --install)",
    )
    parser.add_argument(
        "--fleet",
        default=deployment.DEFAULT_FLEET,
        help="up --install: each node's simulated GPU fleet (default: %(default)s)",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        default=None,
        help="up --install: drasat's chart folder (default: $DRASAT_CHART)",
    )


def _refused_runtime_flags(args: argparse.Namespace) -> str:
    if args.runtime == "containerd" and not args.kubelets:
        return "--runtime containerd needs --kubelets N"
    if args.install and args.runtime != "containerd":
        return "--install needs --runtime containerd (the fake runtime runs no container)"
    if args.runtime == "containerd" and args.drasat_plugins:
        return "--drasat-plugins runs host processes; with --runtime containerd use --install"
    return ""


def _archives(args: argparse.Namespace) -> list[Path]:
    folder = args.images or (
        Path(os.environ["DRASAT_IMAGES"]) if "DRASAT_IMAGES" in os.environ else None
    )
    if folder is None:
        return []
    archives = sorted(folder.glob("*.tar"))
    if not archives:
        raise realcluster.ClusterError(
            f"{folder}: no image archive (*.tar): run scripts/image-build"
        )
    return archives


def _up_on_containerd(started: realcluster.Cluster, args: argparse.Namespace, progress: Any) -> int:
    archives = _archives(args)
    if args.install:
        deployment.check_images(archives)
    try:
        nodes = containerdnode.start_nodes(
            started, args.kubelets, images=tuple(archives), timeout=args.timeout, progress=progress
        )
        for node in nodes:
            print(
                f"kube-cluster: kubelet {node.name} Ready on containerd; its /run and /var/lib "
                f"are {node.fs}/run and {node.fs}/var-lib",
                file=sys.stderr,
            )
        if args.install:
            progress("drasat: its chart with localhost/drasat:dev")
            deployment.install(
                started, nodes, chart=args.chart, fleet=args.fleet, timeout=args.timeout
            )
    except BaseException:
        started.stop()
        containerdnode.remove_node_cgroups(started)
        raise
    print(f"kube-cluster: up at {started.url} (logs in {args.dir / 'logs'})", file=sys.stderr)
    print(started.kubeconfig)
    return 0


def _import_images(recorded: realcluster.Cluster | None, args: argparse.Namespace) -> int:
    archives = _archives(args)
    if not archives:
        print("kube-cluster: import-images needs --images DIR (or $DRASAT_IMAGES)", file=sys.stderr)
        return 2
    imported = containerdnode.import_into_running(recorded, archives) if recorded else []
    if not imported:
        print(
            f"kube-cluster: no containerd node runs in {args.dir}: the images are imported by "
            "the next `scripts/kube-cluster up --kubelets N --runtime containerd`",
            file=sys.stderr,
        )
        return 0
    names = ", ".join(a.name for a in archives)
    print(f"kube-cluster: imported {names} into {', '.join(imported)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
