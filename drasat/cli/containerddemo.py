"""`drasat demo --kube-bin DIR --runtime containerd`: drasat as it is deployed, watched.

The real control plane from DIR, two real kubelets on real containerd (runc, CDI; built by
scripts/runtime-build), drasat installed by its Helm chart with the image `localhost/drasat:dev`
(scripts/image-build; the controller and the node plugins run as containers, the plugins on
simulated GPUs with a fake driver root), then the probe workloads (`localhost/drasat-probe:dev`:
the two reference cases, a MIG device, two MPS shares). It prints, per pod, what its container
sees of its GPUs (its own log: device nodes, variables, MPS pipe directory, /dev/shm), checks
each sees exactly its claims' devices and that containerd applied drasat's CDI specs, deletes the
workloads and stops everything.

Where things come from: `$DRASAT_RUNTIME_BIN` (the runtime), `--images` or `$DRASAT_IMAGES` (the
image archives), `$DRASAT_CHART` (the chart folder), `$DRASAT_HELM` (helm); `make demo-containerd`
builds and sets them all. Exit codes: 0 every pod ran and saw what it should; 1 a step failed (the
last line says which); 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TextIO

from drasat.api.inputerrors import InputError
from drasat.testbed import probes
from drasat.testbed.controlplane import binaries, containerdnode, deployment, realcluster

NODES = 2


def run(args: argparse.Namespace, stream: TextIO) -> int:
    def say(line: str) -> None:
        print(line, file=stream, flush=True)

    if args.kube_bin is None:
        raise InputError("--runtime containerd runs on the real control plane", where="--kube-bin")
    try:
        bin_dir = binaries.locate(Path(args.kube_bin))
        runtime = containerdnode.locate_runtime()
    except binaries.MissingBinaries as error:
        raise InputError(str(error), where="--kube-bin") from None
    images = args.images or _env_path("DRASAT_IMAGES")
    archives = sorted(images.glob("*.tar")) if images else []
    try:
        deployment.check_images(archives)
        deployment.chart_folder(None)
        deployment.helm_binary()
    except realcluster.ClusterError as error:
        raise InputError(str(error), where="--images") from None
    timeout = max(args.timeout, 300.0)
    folder = Path(tempfile.mkdtemp(prefix="drasat-demo-"))
    began = time.monotonic()
    cluster = None
    nodes: list[containerdnode.ContainerdKubelet] = []
    try:
        say(f"== starting the real control plane from {bin_dir}")
        cluster = realcluster.Cluster.start(
            directory=folder / "cluster",
            bin_dir=bin_dir,
            timeout=timeout,
            die_with_parent=True,
            root_ca_publisher=True,
            egress_proxy=True,
            progress=lambda line: say(f"  {line}"),
        )
        say(f"== {NODES} nodes: real kubelets on containerd {containerdnode.CONTAINERD_VERSION}")
        nodes = containerdnode.start_nodes(
            cluster,
            NODES,
            images=tuple(archives),
            runtime_dir=runtime,
            timeout=timeout,
            progress=lambda line: say(f"  {line}"),
        )
        say(f"== installing drasat's chart (localhost/drasat:dev; {deployment.VALUES_NOTE})")
        deployment.install(cluster, nodes, timeout=timeout)
        say(f"   every node serves its GPUs ({deployment.DEFAULT_FLEET} each, simulated)")
        manifests = probes.workloads()
        names = probes.namespaces(manifests)
        say(f"== applying the probe workloads: {', '.join(names)}")
        probes.apply(cluster, manifests)
        probes.wait_running(cluster, names, timeout=timeout)
        views = probes.collect(cluster, names, {n.name: n for n in nodes})
        say("== what each container sees (its own log)")
        for line in probes.describe(views).splitlines():
            say(f"  {line}")
        found = probes.problems(views)
        say("== deleting the workloads")
        probes.delete_namespaces(cluster, names)
    except (realcluster.ClusterError, probes.ApiError, TimeoutError) as error:
        say(f"== demo FAILED: {error}")
        return 1
    finally:
        for node in nodes:
            node.stop()
        if cluster is not None:
            cluster.stop()
            containerdnode.remove_node_cgroups(cluster)
        shutil.rmtree(folder, ignore_errors=True)
    took = time.monotonic() - began
    if found:
        for problem in found:
            say(f"  {problem}")
        say(f"== demo FAILED: {len(found)} check(s) failed ({took:.0f}s)")
        return 1
    say(
        f"== demo ok (real kubelets on containerd, drasat from its chart): {len(views)} "
        f"containers saw exactly their claims' devices, as drasat's CDI specs say ({took:.0f}s)"
    )
    return 0


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
