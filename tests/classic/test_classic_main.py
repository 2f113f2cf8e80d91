"""`python -m drasat.classic`: the simulated API server with the classic scheduler, as a process."""

from __future__ import annotations

import pathlib
import queue
import signal
import subprocess
import sys
import threading

import kubernetes


def test_classic_module_serves_until_terminated(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [sys.executable, "-m", "drasat.classic", "--kubeconfig", str(kubeconfig), "--scheduler"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        url = lines.get(timeout=60).strip()
        assert url.startswith("http://127.0.0.1:")
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
        assert configuration.host == url
        with kubernetes.client.ApiClient(configuration) as client:
            version = kubernetes.client.VersionApi(client).get_code()
        assert version.minor == "30"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
