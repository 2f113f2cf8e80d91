"""A kubeconfig for the simulated server, and `python -m drasat.testbed.sim` as a process."""

from __future__ import annotations

import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import kubernetes

from drasat.testbed.sim import apiserver


def test_kubeconfig_configures_the_official_loader(
    server: apiserver.ApiServer, tmp_path: pathlib.Path
) -> None:
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == server.url
    with kubernetes.client.ApiClient(configuration) as client:
        names = {
            n.metadata.name for n in kubernetes.client.CoreV1Api(client).list_namespace().items
        }
    assert "default" in names


def test_module_runs_the_v1_scheduler_and_controller_manager(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [sys.executable, "-m", "drasat.testbed.sim", "--kubeconfig", str(kubeconfig), "--v1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        lines.get(timeout=60)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
        with kubernetes.client.ApiClient(configuration) as client:
            core = kubernetes.client.CoreV1Api(client)
            apps = kubernetes.client.AppsV1Api(client)
            core.create_node({"metadata": {"name": "n1"}})
            template = {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
            apps.create_namespaced_deployment(
                "default",
                {
                    "metadata": {"name": "web"},
                    "spec": {
                        "replicas": 2,
                        "selector": {"matchLabels": {"app": "w"}},
                        "template": template,
                    },
                },
            )

            def bound() -> list[str]:
                pods = core.list_namespaced_pod("default").items
                return [p.spec.node_name for p in pods if p.spec.node_name]

            deadline = time.monotonic() + 30
            while len(bound()) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert bound() == ["n1", "n1"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
