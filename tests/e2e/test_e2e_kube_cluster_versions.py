"""`scripts/kube-cluster up --version V --kubelets 1 --drasat-plugins 2xT4` (the module it runs)
on each version users run: that release with its default gates, a real kubelet, and drasat's node
plugin on it, which waits for the driver namespace and drasat's CRDs (a chart installed later
makes both), then keeps its NodeAllocationState there, where a `drasat controller` started by
hand reads it and allocates the reference case's claims. Before, the plugins kept their NAS in
memory and the controller refused every pod ("no NodeAllocationState")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
import pytest
from helm_binary import kubectl_path
from kubecluster import wait_for

from drasat.api.groups import NAS_GROUP, VERSION
from drasat.testbed.controlplane import binaries, realcluster

ROOT = Path(__file__).resolve().parents[2]
#: `make test`: the oldest (test_e2e_real_kubelet.py runs `up --kubelets` on 1.37 with every
#: DRA gate on); `make e2e-versions`: all four.
VERSIONS = [v for v in os.environ.get("DRASAT_E2E_VERSIONS", "1.34").split(",") if v]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize("version", VERSIONS)
def test_kube_cluster_up_version_gives_plugins_a_controller_can_allocate_on(version: str) -> None:
    try:
        binaries.locate(version=version)
    except binaries.MissingBinaries as error:
        pytest.fail(f"Kubernetes {version} is not built: {error}", pytrace=False)
    folder = Path(tempfile.mkdtemp(prefix="kcv-", dir="/tmp")) / "c"  # short socket paths
    command = [sys.executable, "-m", "drasat.testbed.controlplane"]
    controller = None
    try:
        up = subprocess.run(
            [*command, "up", "--dir", str(folder), "--version", version, "--kubelets", "1",
             "--drasat-plugins", "2xT4"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr
        assert "publish their NodeAllocationStates in namespace drasat once it" in up.stderr
        started = realcluster.Cluster.load(folder)
        plugin_log = folder / "logs" / "drasat-plugin-node-1.log"
        env = {**os.environ, "KUBECONFIG": str(started.kubeconfig)}
        with kubernetes.config.new_client_from_config(config_file=str(started.kubeconfig)) as api:
            core = kubernetes.client.CoreV1Api(api)
            node = core.read_node("node-1")
            assert node.status.node_info.kubelet_version == binaries.USER_VERSIONS.get(
                version, binaries.KUBE_VERSION
            )
            # nothing to publish into yet: the plugin waits, and says why
            wait_for(
                lambda: "cannot publish the NAS" in plugin_log.read_text(errors="replace"),
                timeout=60,
                what="the plugin to say it waits for its namespace",
            )
            # what a chart (or the user) makes later: the namespace, the CRDs, the classes
            core.create_namespace({"metadata": {"name": "drasat"}})
            kubectl_bin = str(kubectl_path())
            for path in ("deploy/helm/drasat/crds/", "deploy/examples/v1-device-classes/"):
                done = subprocess.run(
                    [kubectl_bin, "apply", "-f", str(ROOT / path)], env=env,
                    capture_output=True, text=True, timeout=120, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
            custom = kubernetes.client.CustomObjectsApi(api)

            def nas() -> dict[str, Any]:
                try:
                    found: dict[str, Any] = custom.get_namespaced_custom_object(
                        NAS_GROUP, VERSION, "drasat", "nodeallocationstates", "node-1"
                    )
                except kubernetes.client.ApiException:
                    return {}
                return found

            def ledger() -> dict[str, Any]:
                held: dict[str, Any] = nas().get("spec", {}).get("allocatedClaims") or {}
                return held

            wait_for(
                lambda: nas().get("status") == "Ready",
                timeout=120,
                what=f"node-1's NAS, Ready\n{plugin_log.read_text(errors='replace')[-3000:]}",
            )
            # a controller started by hand, as the cluster's administrator
            log = folder.parent / "controller.log"
            controller = drasatprocess.run(
                ["controller", "--kubeconfig", str(started.kubeconfig)], log
            )
            # it reads the NAS and keeps its DeviceTaintRule where served before the pods come
            # (no admission here gates them: kube-scheduler tries them at once)
            drasatprocess.wait_started(
                controller, lambda: "controller: " in log.read_text(errors="replace"), log,
                "the controller",
            )  # fmt: skip
            done = subprocess.run(
                [kubectl_bin, "apply", "-f",
                 str(ROOT / "deploy/examples/v1-reference-cases/exclusive-gpus.yaml")],
                env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr

            def running() -> bool:
                pods = core.list_namespaced_pod("gpu-test1-v1").items
                return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

            wait_for(
                running,
                timeout=180,
                what=f"the reference case's pods\n{log.read_text(errors='replace')[-3000:]}",
            )
            # drasat's ledger holds both claims (its allocation, or where no gate and no taint
            # kept kube-scheduler's allocator away, the one it recorded)
            tail = log.read_text(errors="replace")[-3000:]
            wait_for(
                lambda: len(ledger()) == 2,
                timeout=60,
                what=f"both claims in drasat's ledger\n{tail}",
            )
    finally:
        if controller is not None:
            drasatprocess.stop(controller)
        subprocess.run([*command, "down", "--dir", str(folder)], capture_output=True, timeout=120)
        if (folder / realcluster.STATE_FILE).exists():
            assert not realcluster.Cluster.load(folder).running()
        shutil.rmtree(folder.parent, ignore_errors=True)
