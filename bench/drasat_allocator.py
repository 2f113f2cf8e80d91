"""drasat's v1 controller as allocator B of `bench.kube_alloc`, on a fleet of fake nodes.

The fake nodes run no node plugin, so what the plugins would publish besides their
ResourceSlices — each node's NodeAllocationState — is read back from those slices (the what-if's
reader, `drasat.whatif.v1cluster`: the same device model both ways) and created Ready in the
controller's namespace. Then the real `drasat controller --dra-api v1` process starts with the
bench's kubeconfig; `start` returns once its DeviceTaintRule exists and its /readyz answers (every
informer synced: pods created before would otherwise wait for the sync, which is not the path
being measured). `stop` ends the process and
removes the rule and the NodeAllocationStates, so allocator A runs on untainted devices again.
"""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from drasat import loading
from drasat.api import crds
from drasat.api.groups import DRIVER_NAME, NAS_GROUP, VERSION
from drasat.api.nas import NasStatus
from drasat.testbed.controlplane.realcluster import free_port
from drasat.whatif import v1cluster

RESOURCE = ("resource.k8s.io", "v1")
TAINT_RULE = "drasat-allocator"
#: More flags for `drasat controller` (`bench.kube_alloc --controller-args`), e.g. a batch
#: window to compare.
EXTRA_ARGS: list[str] = []


@dataclass
class DrasatController:
    process: subprocess.Popen[bytes]
    api: Any
    namespace: str
    nodes: list[str]
    log: pathlib.Path
    metrics_url: str
    #: The controller's /metrics text, read by `stop()` just before it ends the process.
    metrics: str = ""
    kubeconfig: pathlib.Path | None = None

    def read_metrics(self) -> str:
        with contextlib.suppress(OSError), urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            return str(r.read().decode())
        return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.metrics = self.read_metrics()
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        custom = kubernetes.client.CustomObjectsApi(self.api)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*RESOURCE, "devicetaintrules", TAINT_RULE)
        remove_states(self.api, self.namespace, self.nodes)
        self.api.close()


def _install_crds(api: Any) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(api)
    for crd in crds.all_crds():
        with contextlib.suppress(ApiException):
            extensions.create_custom_resource_definition(crd)
    deadline = time.monotonic() + 60
    for crd in crds.all_crds():
        while True:
            found = extensions.read_custom_resource_definition(crd["metadata"]["name"])
            if any(
                c.type == "Established" and c.status == "True"
                for c in found.status.conditions or []
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {crd['metadata']['name']} not established")
            time.sleep(0.2)


def install(api: Any, namespace: str) -> None:
    """drasat's CRDs and the controller's namespace."""
    _install_crds(api)
    with contextlib.suppress(ApiException):
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})


def remove_states(api: Any, namespace: str, nodes: list[str]) -> None:
    custom = kubernetes.client.CustomObjectsApi(api)
    for name in nodes:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(
                NAS_GROUP, VERSION, namespace, "nodeallocationstates", name
            )


def _node_states(api: Any, namespace: str, only: set[str] | None = None) -> list[str]:
    """Create each fleet node's NodeAllocationState (`only`: of these nodes) from its slices;
    the node names."""
    custom = kubernetes.client.CustomObjectsApi(api)
    listed = custom.list_cluster_custom_object(*RESOURCE, "resourceslices")["items"]
    ours = [
        s
        for s in listed
        if (s.get("spec") or {}).get("driver") == DRIVER_NAME
        and (only is None or s["spec"].get("nodeName") in only)
    ]
    documents = [
        loading.Document(
            "resourceslices",
            i + 1,
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s},
        )
        for i, s in enumerate(ours)
    ]
    cluster = v1cluster.load(documents)
    names = []
    for node in cluster.nodes:
        body = node.nas.model_copy(update={"status": NasStatus.Ready}).dump()
        body["metadata"] = {"name": node.name, "namespace": namespace}
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(
                NAS_GROUP, VERSION, namespace, "nodeallocationstates", node.name
            )
        # The NAS has no status subresource: its `status: Ready` is written with it.
        custom.create_namespaced_custom_object(
            NAS_GROUP, VERSION, namespace, "nodeallocationstates", body
        )
        names.append(node.name)
    return names


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:  # refused while starting, or 503 (HTTPError) until every informer synced
        return False


def start(kubeconfig: pathlib.Path, namespace: str) -> DrasatController:
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    install(api, namespace)
    nodes = _node_states(api, namespace)
    log = pathlib.Path(tempfile.mkdtemp(prefix="bench-drasat-")) / "controller.log"
    process, url = _launch(kubeconfig, namespace, log)
    handle = DrasatController(process, api, namespace, nodes, log, f"{url}/metrics", "",
                              kubeconfig)  # fmt: skip
    _wait_started(handle, url)
    return handle


def restart(handle: DrasatController) -> DrasatController:
    """The controller process started again (the one before has ended, or is ended here) over
    the same NodeAllocationStates and DeviceTaintRule: a restart, as a rollout does it."""
    if handle.process.poll() is None:
        handle.process.terminate()
        handle.process.wait(timeout=20)
    assert handle.kubeconfig is not None
    process, url = _launch(handle.kubeconfig, handle.namespace, handle.log)
    found = DrasatController(process, handle.api, handle.namespace, handle.nodes, handle.log,
                             f"{url}/metrics", "", handle.kubeconfig)  # fmt: skip
    _wait_started(found, url)
    return found


def _launch(
    kubeconfig: pathlib.Path, namespace: str, log: pathlib.Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "drasat", "--log-level", "INFO", "controller", "--dra-api", "v1",
             "--kubeconfig", str(kubeconfig), "--namespace", namespace,
             "--metrics-address", f"127.0.0.1:{port}", "--kube-api-qps", "0", *EXTRA_ARGS],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


def _wait_started(handle: DrasatController, url: str) -> None:
    """Until the DeviceTaintRule exists and /readyz answers (every informer synced)."""
    process, log = handle.process, handle.log
    custom = kubernetes.client.CustomObjectsApi(handle.api)
    deadline = time.monotonic() + 120
    while True:
        try:
            custom.get_cluster_custom_object(*RESOURCE, "devicetaintrules", TAINT_RULE)
            if _ready(f"{url}/readyz"):
                break
            raise ConnectionError("not ready")
        except (ApiException, ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                handle.stop()
                raise RuntimeError(
                    f"drasat's controller did not start:\n{log.read_text()[-3000:]}"
                ) from None
            time.sleep(0.2)
