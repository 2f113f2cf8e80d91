"""A simulated kubelet for one node: runs the pods bound to it through their DRA plugins.

It does what a classic-DRA kubelet (Kubernetes 1.27–1.31) does with resource claims, and nothing
else (no containers, no probes):

- **plugin registration**: every `*.sock` in the registry directory is asked `GetInfo`; a
  `DRAPlugin` that speaks a semver version (`1.0.0`: the `v1alpha3.Node` service) is registered
  under its driver name and told so with `NotifyRegistrationStatus`, others are refused;
- **pod start**: for a pod bound to the node (spec.nodeName) whose claims are all allocated and
  reserved for it, it calls `NodePrepareResources` on each driver's DRA socket with the claims
  (namespace, uid, name, the allocation's resource handle), resolves the returned CDI device ids
  against the spec files in the CDI root as a container runtime does, records the environment
  the container would get (`PodRun.env`: its "log") and sets the pod's status to Running;
- **pod stop**: when a pod is marked for deletion (deletionTimestamp) or gone, it calls
  `NodeUnprepareResources` for each claim no other pod on the node still uses, then confirms the
  deletion (DELETE with gracePeriodSeconds=0). Releasing the claims (reservedFor) and deleting
  the claims made from templates is not the kubelet's job: the simulated scheduler (as the
  resourceclaim controller) and the API server's garbage collector do it, as in a cluster.

Every pass reads the pods afresh (level-triggered). Passes run when a pod or claim changes, or
every `resync` seconds. It talks HTTP through `kubeclient` (never the `kubernetes` library).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from drasat.nodeplugin.gen import dra_v1alpha3_pb2 as dra_pb2
from drasat.nodeplugin.gen import dra_v1alpha3_pb2_grpc as dra_grpc
from drasat.nodeplugin.gen import pluginregistration_v1_pb2 as reg_pb2
from drasat.nodeplugin.gen import pluginregistration_v1_pb2_grpc as reg_grpc
from drasat.sim import actor, errors, kubeclient, scheduling

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_RES = ("resource.k8s.io", "v1alpha2")
PLUGIN_TYPE = "DRAPlugin"
#: CDI spec files a runtime reads (the CDI specification: JSON or YAML).
_SPEC_SUFFIXES = (".json", ".yaml", ".yml")


class Waiting(Exception):
    """The pod cannot start yet; the message says what it waits for."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str
    driver: str
    resource_handle: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PodRun:
    """A pod this kubelet started: its claims and what its container sees."""

    namespace: str
    name: str
    uid: str
    claims: list[ClaimRef]
    #: The CDI device ids NodePrepareResources returned, by claim UID.
    devices: dict[str, list[str]] = field(default_factory=dict)
    #: Each CDI device's environment (its spec's edits, then the device's own).
    device_env: dict[str, dict[str, str]] = field(default_factory=dict)

    def claim_env(self, claim_uid: str) -> dict[str, str]:
        """The environment the devices of one claim give the container."""
        env: dict[str, str] = {}
        for device in self.devices.get(claim_uid, []):
            env.update(self.device_env.get(device, {}))
        return env

    @property
    def env(self) -> dict[str, str]:
        """The container's environment: every claim's, in the pod's order (later ones win)."""
        env: dict[str, str] = {}
        for claim in self.claims:
            env.update(self.claim_env(claim.uid))
        return env


@dataclass(frozen=True)
class Plugin:
    driver: str
    endpoint: str
    registration_socket: str


def _core(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


def _claims_url(namespace: str | None = None, name: str | None = None) -> str:
    return kubeclient.path(*_RES, "resourceclaims", namespace=namespace, name=name)


def _stub(make: Any, channel: Any) -> Any:
    """A generated client stub (the generated code is untyped)."""
    return make(channel)


def _speaks_classic(versions: Iterable[str]) -> bool:
    """Kubelets up to 1.31 accept semver-like versions (`1.0.0`) and then call v1alpha3.Node."""
    return any(v[:1].isdigit() for v in versions)


def cdi_edits(
    cdi_root: Path, device_ids: Iterable[str]
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The environment each fully qualified CDI device id gives a container, read from the spec
    files in `cdi_root` as a runtime reads them, and the ids no spec defines. A device's env is
    its spec's `containerEdits.env`, then its own (a later value of a variable wins)."""
    found: dict[str, dict[str, str]] = {}
    if cdi_root.is_dir():
        for path in sorted(cdi_root.iterdir()):
            if path.suffix not in _SPEC_SUFFIXES or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
                spec = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            except (OSError, ValueError, yaml.YAMLError) as error:
                log.warning("unreadable CDI spec %s: %s", path, error)
                continue
            if not isinstance(spec, dict):
                continue
            common = list((spec.get("containerEdits") or {}).get("env") or [])
            for device in spec.get("devices") or []:
                own = list((device.get("containerEdits") or {}).get("env") or [])
                env: dict[str, str] = {}
                for entry in [*common, *own]:
                    key, _, value = str(entry).partition("=")
                    env[key] = value
                found[f"{spec.get('kind')}={device.get('name')}"] = env
    wanted = list(device_ids)
    return {d: found[d] for d in wanted if d in found}, [d for d in wanted if d not in found]


class Kubelet(actor.WatchDrivenLoop):
    """Run `run_once()` yourself, or `start()` a background thread and `stop()` it."""

    pass_errors = (OSError, errors.ApiError, grpc.RpcError)

    def __init__(
        self,
        client: kubeclient.KubeClient,
        *,
        node: str,
        registry_dir: Path,
        cdi_root: Path,
        resync: float = 0.5,
        call_timeout: float = 30.0,
    ) -> None:
        super().__init__(client, resync=resync)
        self.name = f"sim-kubelet-{node}"
        self.node = node
        self.registry_dir = registry_dir
        self.cdi_root = cdi_root
        self._call_timeout = call_timeout
        self._progress = threading.Condition()
        #: Registered plugins by driver name.
        self.plugins: dict[str, Plugin] = {}
        #: Registration sockets that were refused, with the reason.
        self.refused: dict[str, str] = {}
        #: Pods running here, by pod UID.
        self._runs: dict[str, PodRun] = {}
        #: Claims handed to NodePrepareResources, by pod UID (so a failed start is undone too).
        self._attempted: dict[str, list[ClaimRef]] = {}
        #: Why each pod ((namespace, name)) has not started or not finished stopping.
        self.reasons: dict[tuple[str, str], str] = {}
        #: Pods this kubelet stopped and cleaned up, with their UID.
        self.stopped: dict[tuple[str, str], str] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def watched(self) -> list[tuple[str, Mapping[str, str]]]:
        return [
            (_core("pods"), {"fieldSelector": f"spec.nodeName={self.node}"}),
            (_claims_url(), {}),
        ]

    # --- what tests and the demo wait for -----------------------------------------------------

    def running(self, namespace: str, name: str) -> PodRun | None:
        with self._progress:
            for run in self._runs.values():
                if (run.namespace, run.name) == (namespace, name):
                    return run
        return None

    def wait_for(self, check: Callable[[], Any], timeout: float) -> Any:
        """Wait (at most `timeout` s) until `check()` is true after some pass; its last value."""
        with self._progress:
            return self._progress.wait_for(check, timeout)

    def wait_running(self, namespace: str, name: str, *, timeout: float = 30.0) -> PodRun:
        """The pod's run once it started here; TimeoutError with the reason it did not."""
        run = self.wait_for(lambda: self.running(namespace, name), timeout)
        if isinstance(run, PodRun):
            return run
        reason = self.reasons.get((namespace, name), "never seen on this node")
        raise TimeoutError(f"pod {namespace}/{name} not running after {timeout}s: {reason}")

    def wait_stopped(self, namespace: str, name: str, *, timeout: float = 30.0) -> None:
        """Wait until the pod was stopped and its claims unprepared here."""
        if not self.wait_for(lambda: (namespace, name) in self.stopped, timeout):
            reason = self.reasons.get((namespace, name), "not being deleted")
            raise TimeoutError(f"pod {namespace}/{name} not stopped after {timeout}s: {reason}")

    def _note(self, key: tuple[str, str], reason: str | None) -> None:
        with self._progress:
            if reason is None:
                self.reasons.pop(key, None)
            else:
                self.reasons[key] = reason
            self._progress.notify_all()

    # --- one pass -----------------------------------------------------------------------------

    def run_once(self) -> None:
        """Register new plugins, start pods that can start, stop pods that are going."""
        self.discover_plugins()
        pods = self._client.list(_core("pods"), fieldSelector=f"spec.nodeName={self.node}")
        present = {}
        for pod in sorted(
            pods["items"], key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        ):
            meta = pod["metadata"]
            present[meta["uid"]] = pod
            key = (meta["namespace"], meta["name"])
            if meta.get("deletionTimestamp"):
                self._stop_pod(meta["uid"], key, pod)
            elif meta["uid"] not in self._runs:
                try:
                    self._start_pod(pod)
                except Waiting as waiting:
                    self._note(key, str(waiting))
                except errors.ApiError as exc:  # the next pass retries; the other pods go on
                    self._note(key, f"API error, will retry: {exc.code} {exc.message}")
        for uid in [u for u in {*self._runs, *self._attempted} if u not in present]:
            run = self._runs.get(uid)
            if run is not None:
                self._stop_pod(uid, (run.namespace, run.name), None)
            else:
                self._stop_pod(uid, None, None)
        with self._progress:
            self._progress.notify_all()

    # --- plugins ------------------------------------------------------------------------------

    def discover_plugins(self) -> None:
        """Register the DRA plugins whose registration sockets appeared since the last pass."""
        if not self.registry_dir.is_dir():
            return
        known = {p.registration_socket for p in self.plugins.values()} | set(self.refused)
        for socket in sorted(self.registry_dir.glob("*.sock")):
            if str(socket) in known:
                continue
            try:
                self._register(socket)
            except grpc.RpcError as error:
                log.debug("plugin at %s not answering yet: %s", socket, error)

    def _register(self, socket: Path) -> None:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = _stub(reg_grpc.RegistrationStub, channel)
            info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=self._call_timeout)
            problem = ""
            if info.type != PLUGIN_TYPE:
                problem = f"plugin type {info.type!r} is not {PLUGIN_TYPE}"
            elif not _speaks_classic(info.supported_versions):
                problem = (
                    f"none of the versions {list(info.supported_versions)} is served by this "
                    "kubelet (it calls v1alpha3.Node: a semver version such as 1.0.0)"
                )
            stub.NotifyRegistrationStatus(
                reg_pb2.RegistrationStatus(plugin_registered=not problem, error=problem),
                timeout=self._call_timeout,
            )
        if problem:
            log.warning("kubelet %s refused the plugin at %s: %s", self.node, socket, problem)
            self.refused[str(socket)] = problem
            return
        self.plugins[info.name] = Plugin(info.name, info.endpoint, str(socket))

    def _plugin(self, driver: str) -> Plugin:
        plugin = self.plugins.get(driver)
        if plugin is None:
            raise Waiting(f"no DRA plugin registered for driver {driver!r} on node {self.node}")
        return plugin

    def _call(self, driver: str, claims: list[ClaimRef], *, prepare: bool) -> dict[str, Any]:
        """One NodePrepareResources / NodeUnprepareResources call; the answer per claim UID."""
        plugin = self._plugin(driver)
        refs = [
            dra_pb2.Claim(
                namespace=c.namespace, uid=c.uid, name=c.name, resource_handle=c.resource_handle
            )
            for c in claims
        ]
        try:
            with grpc.insecure_channel(f"unix://{plugin.endpoint}") as channel:
                stub = _stub(dra_grpc.NodeStub, channel)
                if prepare:
                    answer: Any = stub.NodePrepareResources(
                        dra_pb2.NodePrepareResourcesRequest(claims=refs),
                        timeout=self._call_timeout,
                    )
                else:
                    answer = stub.NodeUnprepareResources(
                        dra_pb2.NodeUnprepareResourcesRequest(claims=refs),
                        timeout=self._call_timeout,
                    )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:  # gone: register again when back
                self.plugins.pop(driver, None)
            call = "NodePrepareResources" if prepare else "NodeUnprepareResources"
            raise Waiting(f"{call} on {driver!r} failed: {error.code().name}") from None
        return dict(answer.claims)

    # --- starting -----------------------------------------------------------------------------

    def _pod_claims(self, pod: Obj) -> list[ClaimRef]:
        meta = pod["metadata"]
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        refs = []
        for entry in scheduling.pod_claims(pod):
            name = entry.claim_name or statuses.get(entry.name)
            if not name:
                raise Waiting(f"the claim for {entry.name!r} has not been created yet")
            try:
                claim = self._client.get(_claims_url(meta["namespace"], name))
            except errors.ApiError as exc:
                if exc.code == 404:
                    raise Waiting(f"claim {name!r} does not exist") from None
                raise
            status = claim.get("status") or {}
            allocation = status.get("allocation")
            if not allocation:
                raise Waiting(f"claim {name!r} is not allocated yet")
            reserved = status.get("reservedFor") or []
            if not any(r.get("uid") == meta["uid"] for r in reserved):
                raise Waiting(f"claim {name!r} is not reserved for the pod yet")
            handles = allocation.get("resourceHandles") or [{}]
            driver = str(status.get("driverName") or handles[0].get("driverName") or "")
            refs.append(
                ClaimRef(
                    namespace=meta["namespace"],
                    name=name,
                    uid=claim["metadata"]["uid"],
                    driver=driver,
                    resource_handle=str(handles[0].get("data") or ""),
                )
            )
        return refs

    def _start_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        claims = self._pod_claims(pod)
        by_driver: dict[str, list[ClaimRef]] = {}
        for claim in claims:
            by_driver.setdefault(claim.driver, []).append(claim)
        for driver in by_driver:
            self._plugin(driver)
        self._attempted[meta["uid"]] = claims  # from here on, a stop unprepares them
        devices: dict[str, list[str]] = {}
        for driver, group in sorted(by_driver.items()):
            answers = self._call(driver, group, prepare=True)
            for claim in group:
                answer = answers.get(claim.uid)
                if answer is None:
                    raise Waiting(f"NodePrepareResources did not answer for claim {claim.key}")
                if answer.error:
                    raise Waiting(f"NodePrepareResources failed for claim {claim.key}: "
                                  f"{answer.error}")  # fmt: skip
                devices[claim.uid] = list(answer.cdi_devices)
        env, missing = cdi_edits(self.cdi_root, [d for ids in devices.values() for d in ids])
        if missing:
            raise Waiting(f"CDI devices {missing} are not defined by any spec in {self.cdi_root}")
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        }
        url = _core("pods", meta["namespace"], meta["name"], "status")
        self._client.merge_patch(url, {"status": status})
        run = PodRun(meta["namespace"], meta["name"], meta["uid"], claims, devices, env)
        with self._progress:
            self._runs[meta["uid"]] = run
        self._note(key, None)
        log.info("kubelet %s: pod %s/%s running with %s", self.node, *key, sorted(env))

    # --- stopping -----------------------------------------------------------------------------

    def _users(self, claim_uid: str, besides: str) -> list[str]:
        return [
            pod for pod, claims in self._attempted.items()
            if pod != besides and any(c.uid == claim_uid for c in claims)
        ]  # fmt: skip

    def _stop_pod(self, uid: str, key: tuple[str, str] | None, pod: Obj | None) -> None:
        claims = self._attempted.get(uid, [])
        # A claim shared with another pod here stays prepared until its last pod stops.
        release = [c for c in claims if not self._users(c.uid, besides=uid)]
        by_driver: dict[str, list[ClaimRef]] = {}
        for claim in release:
            by_driver.setdefault(claim.driver, []).append(claim)
        try:
            for driver, group in sorted(by_driver.items()):
                answers = self._call(driver, group, prepare=False)
                failed = [
                    f"{c.key}: {answers[c.uid].error}"
                    for c in group
                    if c.uid in answers and answers[c.uid].error
                ]
                if failed:
                    raise Waiting(f"NodeUnprepareResources failed for {'; '.join(failed)}")
        except Waiting as waiting:
            if key is not None:
                self._note(key, str(waiting))
            return
        if pod is not None:  # confirm the graceful deletion: the object goes now
            meta = pod["metadata"]
            url = _core("pods", meta["namespace"], meta["name"])
            try:
                self._client.request(
                    "DELETE",
                    url,
                    body={"kind": "DeleteOptions", "apiVersion": "v1",
                          "gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                )  # fmt: skip
            except errors.ApiError as exc:
                if exc.code not in (404, 409):  # gone, or a new pod of the same name
                    raise
        with self._progress:
            self._attempted.pop(uid, None)
            self._runs.pop(uid, None)
            if key is not None:
                self.stopped[key] = uid
                self.reasons.pop(key, None)
            self._progress.notify_all()
        if key is not None:
            log.info("kubelet %s: pod %s/%s stopped", self.node, *key)
