"""A simulated kubelet for one node: runs the pods bound to it through their DRA plugins.

It does what a kubelet does with resource claims, and nothing else (no containers, no probes),
in one of two flavours (`DraApi`): `classic`, a kubelet of Kubernetes 1.27–1.31
(`resource.k8s.io/v1alpha2` claims, the `v1alpha3.Node` service), or `v1`, a kubelet of 1.34+
(`resource.k8s.io/v1` claims, the `v1.DRAPlugin` service, else `v1beta1.DRAPlugin`):

- **plugin registration**: every `*.sock` in the registry directory is asked `GetInfo`; a
  `DRAPlugin` whose `supported_versions` include one this kubelet speaks (classic: a semver
  version such as `1.0.0`; v1: `v1.DRAPlugin` or `v1beta1.DRAPlugin`) is registered under its
  driver name and told so with `NotifyRegistrationStatus`, others are refused;
- **pod start**: for a pod bound to the node (spec.nodeName) whose claims (by name, or from
  `status.resourceClaimStatuses` for templates) are all allocated and reserved for it, it calls
  `NodePrepareResources` on the DRA socket of each driver of each claim (classic: the claim's
  driver, with namespace, uid, name and the allocation's resource handle; v1: every driver that
  has results in `status.allocation.devices.results`, with namespace, uid and name) but not for a
  claim another pod on the node already prepared (as the real kubelet's claim info cache: one
  prepare per claim, however many pods share it), resolves the
  returned CDI device ids against the spec files in the CDI root as a container runtime does,
  records the environment each container would get (`PodRun.container_env`; `PodRun.env`: its
  "log") and sets the pod's status to Running. As the real kubelet (1.37
  `pkg/kubelet/cm/dra`, `cdiDevicesAsList`), a container gets, of each claim it lists in
  `resources.claims`, the CDI ids of the devices of the request it names (a device answered
  without request names goes to every container of the claim), or of all the claim's devices
  when it names none; a classic claim's ids go to every container that lists the claim;
- **pod stop**: when a pod is marked for deletion (deletionTimestamp) or gone, it calls
  `NodeUnprepareResources` for each claim no other pod on the node still uses, then confirms the
  deletion (DELETE with gracePeriodSeconds=0). Releasing the claims (reservedFor) and deleting
  the claims made from templates is not the kubelet's job: the simulated scheduler (as the
  resourceclaim controller) and the API server's garbage collector do it, as in a cluster.
  With `checkpoint`, the claims handed to NodePrepareResources are kept in that file, as the
  real kubelet's DRA checkpoint: a kubelet killed and started again unprepares the claims of the
  pods deleted while it was down;
- **device health** (v1): a plugin that lists `v1.DRAResourceHealth` (or `v1alpha1.…`) is
  watched through its `NodeWatchResources` stream, and each running pod's
  `status.containerStatuses[].allocatedResourcesStatus` says the health of its claims' devices,
  as the 1.37 kubelet computes it (`kubelethealth.py`).

Every pass reads the pods afresh (level-triggered). Passes run when a pod or claim changes, or
every `resync` seconds. It talks HTTP(S) through `kubeclient` (never the `kubernetes` library),
to the simulated API server or a real one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import grpc
import yaml

from drasat.nodeplugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1alpha3_pb2,
    dra_v1alpha3_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from drasat.nodeplugin.gen import pluginregistration_v1_pb2 as reg_pb2
from drasat.nodeplugin.gen import pluginregistration_v1_pb2_grpc as reg_grpc
from drasat.testbed.sim import actor, errors, kubeclient, kubelethealth, scheduling

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PLUGIN_TYPE = "DRAPlugin"
#: CDI spec files a runtime reads (the CDI specification: JSON or YAML).
_SPEC_SUFFIXES = (".json", ".yaml", ".yml")


class DraApi(StrEnum):
    """The DRA a kubelet speaks: which claims it reads and which plugin service it calls."""

    #: Kubernetes 1.27–1.31: `resource.k8s.io/v1alpha2` claims, `v1alpha3.Node`.
    classic = "classic"
    #: Kubernetes 1.34+: `resource.k8s.io/v1` claims, `v1.DRAPlugin` (else `v1beta1`).
    v1 = "v1"

    @property
    def claims_version(self) -> str:
        return "v1alpha2" if self is DraApi.classic else "v1"


#: The gRPC service versions: generated messages and the client stub of each.
_SERVICES: dict[str, tuple[Any, Any]] = {
    "v1alpha3": (dra_v1alpha3_pb2, dra_v1alpha3_pb2_grpc.NodeStub),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginStub),
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginStub),
}


def service_for(api: DraApi, versions: Iterable[str]) -> str | None:
    """The DRA service a kubelet of `api` calls on a plugin announcing `versions`, None when it
    speaks none of them. Kubelets up to 1.31 accept semver-like versions (`1.0.0`) and then call
    v1alpha3.Node; 1.34+ look for `v1.DRAPlugin`, then `v1beta1.DRAPlugin`."""
    versions = list(versions)
    if api is DraApi.classic:
        return "v1alpha3" if any(v[:1].isdigit() for v in versions) else None
    return next((s for s in ("v1", "v1beta1") if f"{s}.DRAPlugin" in versions), None)


class Waiting(Exception):
    """The pod cannot start yet; the message says what it waits for."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str
    #: The drivers to call for it: the classic claim's driver; a v1 claim's drivers with results.
    drivers: tuple[str, ...]
    resource_handle: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a v1 NodePrepareResources answer."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    #: v1 only: the result's share of a multi-allocatable device ("" when none).
    share_id: str = ""


@dataclass(frozen=True)
class Answer:
    """A plugin's answer for one claim, in any service version."""

    error: str = ""
    cdi_device_ids: tuple[str, ...] = ()
    #: v1/v1beta1 only: the devices with their requests.
    devices: tuple[PreparedDevice, ...] = ()


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
    #: v1 kubelets: the devices NodePrepareResources listed, by claim UID.
    prepared: dict[str, list[PreparedDevice]] = field(default_factory=dict)
    #: v1 kubelets: the pod's claim names (spec.resourceClaims[].name) -> claim UID.
    claim_uids: dict[str, str] = field(default_factory=dict)
    #: v1 kubelets: the prepared devices with their driver, by claim UID (for their health).
    claim_devices: dict[str, list[kubelethealth.ClaimDevice]] = field(default_factory=dict)
    started_at: str = ""
    #: v1 kubelets: the `containerStatuses` last written (None: not yet).
    container_statuses: list[Obj] | None = None
    #: The CDI device ids each container (by name) is created with, as the kubelet picks them.
    containers: dict[str, list[str]] = field(default_factory=dict)

    def _env_of(self, ids: Iterable[str]) -> dict[str, str]:
        env: dict[str, str] = {}
        for device in ids:  # a later CDI device's value of a variable wins, as in a runtime
            env.update(self.device_env.get(device, {}))
        return env

    def claim_env(self, claim_uid: str) -> dict[str, str]:
        """The environment all the devices of one claim give a container."""
        return self._env_of(self.devices.get(claim_uid, []))

    def container_env(self, container: str) -> dict[str, str]:
        """The environment one container's CDI devices give it."""
        return self._env_of(self.containers[container])

    @property
    def env(self) -> dict[str, str]:
        """The environment of the pod's only container; with several, every claim's devices, in
        the pod's order (later ones win; `container_env` says what each container gets)."""
        if len(self.containers) == 1:
            return self.container_env(next(iter(self.containers)))
        env: dict[str, str] = {}
        for claim in self.claims:
            env.update(self.claim_env(claim.uid))
        return env


@dataclass(frozen=True)
class Plugin:
    driver: str
    endpoint: str
    registration_socket: str
    #: The DRA service this kubelet calls on it (`v1alpha3`, `v1beta1` or `v1`).
    service: str = "v1alpha3"
    #: The health service it streams device health on ("": none, or a classic kubelet).
    health_service: str = ""


def _core(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


def _stub(make: Any, channel: Any) -> Any:
    """A generated client stub (the generated code is untyped)."""
    return make(channel)


def claim_drivers(api: DraApi, claim: Obj) -> tuple[str, ...]:
    """The drivers a kubelet calls for an allocated claim: classic, the claim's driver (status
    or its resource handle); v1, each driver with results, in the order of the results."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    if api is DraApi.classic:
        handles = allocation.get("resourceHandles") or [{}]
        return (str(status.get("driverName") or handles[0].get("driverName") or ""),)
    results = (allocation.get("devices") or {}).get("results") or []
    return tuple(dict.fromkeys(str(r.get("driver", "")) for r in results))


def _answer(service: str, answer: Any) -> Answer:
    if service == "v1alpha3":
        return Answer(answer.error, tuple(answer.cdi_devices))
    devices = tuple(
        PreparedDevice(
            tuple(d.request_names),
            d.pool_name,
            d.device_name,
            tuple(d.cdi_device_ids),
            getattr(d, "share_id", ""),  # v1beta1's Device has none
        )
        for d in answer.devices
    )
    ids = tuple(dict.fromkeys(i for d in devices for i in d.cdi_device_ids))
    return Answer(answer.error, ids, devices)


def container_cdi_ids(
    pod: Obj,
    claim_uids: Mapping[str, str],
    devices: Mapping[str, list[str]],
    prepared: Mapping[str, list[PreparedDevice]],
) -> dict[str, list[str]]:
    """The CDI ids the kubelet creates each container (init containers too) with: of each claim
    in its `resources.claims` (by the pod's name for it, `claim_uids`), the devices of the
    request it names, or all of them; a classic claim's (no `prepared` devices) all its ids.
    Each id once, in the order the kubelet collects them."""
    spec = pod.get("spec") or {}
    out: dict[str, list[str]] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        ids: list[str] = []
        for entry in (container.get("resources") or {}).get("claims") or []:
            uid = claim_uids.get(str(entry.get("name", "")))
            if uid is None:
                continue
            request = str(entry.get("request") or "")
            if uid not in prepared:
                ids += devices.get(uid, [])
                continue
            for device in prepared[uid]:
                if not request or not device.request_names or request in device.request_names:
                    ids += device.cdi_device_ids
        out[str(container.get("name", ""))] = list(dict.fromkeys(ids))
    return out


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

    # What the API server's restart cuts short (a reset, a chunked answer read in part, a
    # truncated JSON body) is retried at the next pass, as the real kubelet retries; before,
    # one IncompleteRead ended the kubelet's loop for good (found by the chaos soak).
    pass_errors = (*actor.WATCH_ERRORS, grpc.RpcError)

    def __init__(
        self,
        client: kubeclient.KubeClient,
        *,
        node: str,
        registry_dir: Path,
        cdi_root: Path,
        resync: float = 0.5,
        call_timeout: float = 30.0,
        api: DraApi = DraApi.classic,
        health_retry: float = 5.0,
        checkpoint: Path | None = None,
    ) -> None:
        super().__init__(client, resync=resync)
        self.name = f"sim-kubelet-{node}"
        self.node = node
        self.api = api
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
        #: The answer of each claim's prepare, by (claim UID, driver), until its unprepare: as the
        #: real kubelet's claim info cache, a claim another pod here already prepared is not
        #: prepared again (one NodePrepareResources per claim, however many pods share it).
        self._prepared: dict[tuple[str, str], Answer] = {}
        #: Why each pod ((namespace, name)) has not started or not finished stopping.
        self.reasons: dict[tuple[str, str], str] = {}
        #: Pods this kubelet stopped and cleaned up, with their UID.
        self.stopped: dict[tuple[str, str], str] = {}
        #: v1: what the plugins' health streams said, and the streams by driver.
        self.health = kubelethealth.HealthCache()
        self.health_watches: dict[str, kubelethealth.HealthWatch] = {}
        self._health_retry = health_retry
        #: Where the claims handed to NodePrepareResources are kept across a restart, as the
        #: real kubelet's DRA checkpoint: a kubelet killed and started again still unprepares
        #: the claims of pods deleted meanwhile (None: kept in memory only).
        self.checkpoint = checkpoint
        if checkpoint is not None and checkpoint.exists():
            saved = json.loads(checkpoint.read_text())
            self._attempted = {
                pod: [ClaimRef(**{**c, "drivers": tuple(c["drivers"])}) for c in claims]
                for pod, claims in saved.items()
            }

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        for watch in list(self.health_watches.values()):
            watch.stop(timeout)
        self.health_watches.clear()

    # --- lifecycle ----------------------------------------------------------------------------

    def _claims_url(self, namespace: str | None = None, name: str | None = None) -> str:
        version = self.api.claims_version
        return kubeclient.path(
            "resource.k8s.io", version, "resourceclaims", namespace=namespace, name=name
        )

    def watched(self) -> list[tuple[str, Mapping[str, str]]]:
        return [
            (_core("pods"), {"fieldSelector": f"spec.nodeName={self.node}"}),
            (self._claims_url(), {}),
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
        self._sync_health(present)
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
            service = service_for(self.api, info.supported_versions)
            if info.type != PLUGIN_TYPE:
                problem = f"plugin type {info.type!r} is not {PLUGIN_TYPE}"
            elif service is None:
                wanted = (
                    "it calls v1alpha3.Node: a semver version such as 1.0.0"
                    if self.api is DraApi.classic
                    else "it calls v1.DRAPlugin or v1beta1.DRAPlugin"
                )
                problem = (
                    f"none of the versions {list(info.supported_versions)} is served by this "
                    f"kubelet ({wanted})"
                )
            stub.NotifyRegistrationStatus(
                reg_pb2.RegistrationStatus(plugin_registered=not problem, error=problem),
                timeout=self._call_timeout,
            )
        if problem:
            log.warning("kubelet %s refused the plugin at %s: %s", self.node, socket, problem)
            self.refused[str(socket)] = problem
            return
        assert service is not None
        health = kubelethealth.health_service_for(info.supported_versions)
        if self.api is DraApi.classic:
            health = ""
        self.plugins[info.name] = Plugin(info.name, info.endpoint, str(socket), service, health)
        old = self.health_watches.pop(info.name, None)
        if old is not None:
            old.stop()
        if health:
            self.health_watches[info.name] = kubelethealth.HealthWatch(
                info.name,
                info.endpoint,
                health,
                self.health,
                self._changed.set,  # a pass updates the pods' allocatedResourcesStatus
                retry_s=self._health_retry,
            ).start()

    def _plugin(self, driver: str) -> Plugin:
        plugin = self.plugins.get(driver)
        if plugin is None:
            raise Waiting(f"no DRA plugin registered for driver {driver!r} on node {self.node}")
        return plugin

    def _call(self, driver: str, claims: list[ClaimRef], *, prepare: bool) -> dict[str, Answer]:
        """One NodePrepareResources / NodeUnprepareResources call, in the service version the
        plugin was registered with; the answer per claim UID."""
        plugin = self._plugin(driver)
        pb2, make_stub = _SERVICES[plugin.service]
        refs = []
        for c in claims:
            # Classic claims carry the allocation's resource handle; v1 ones only name the claim.
            extra = {"resource_handle": c.resource_handle} if plugin.service == "v1alpha3" else {}
            refs.append(pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name, **extra))
        try:
            with grpc.insecure_channel(f"unix://{plugin.endpoint}") as channel:
                stub = _stub(make_stub, channel)
                if prepare:
                    answer: Any = stub.NodePrepareResources(
                        pb2.NodePrepareResourcesRequest(claims=refs), timeout=self._call_timeout
                    )
                else:
                    answer = stub.NodeUnprepareResources(
                        pb2.NodeUnprepareResourcesRequest(claims=refs), timeout=self._call_timeout
                    )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:  # gone: register again when back
                self.plugins.pop(driver, None)
            call = "NodePrepareResources" if prepare else "NodeUnprepareResources"
            raise Waiting(f"{call} on {driver!r} failed: {error.code().name}") from None
        if not prepare:
            return {uid: Answer(a.error) for uid, a in answer.claims.items()}
        return {uid: _answer(plugin.service, a) for uid, a in answer.claims.items()}

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
                claim = self._client.get(self._claims_url(meta["namespace"], name))
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
            refs.append(
                ClaimRef(
                    namespace=meta["namespace"],
                    name=name,
                    uid=claim["metadata"]["uid"],
                    drivers=claim_drivers(self.api, claim),
                    resource_handle=str(handles[0].get("data") or ""),
                )
            )
        return refs

    def _start_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        claims = self._pod_claims(pod)
        by_driver = _by_driver(claims)
        for driver in by_driver:
            self._plugin(driver)
        self._attempted[meta["uid"]] = claims  # from here on, a stop unprepares them
        self._save_checkpoint()
        devices: dict[str, list[str]] = {c.uid: [] for c in claims}
        prepared: dict[str, list[PreparedDevice]] = {}
        claim_devices: dict[str, list[kubelethealth.ClaimDevice]] = {}
        for driver, group in sorted(by_driver.items()):
            todo = [c for c in group if (c.uid, driver) not in self._prepared]
            answers = self._call(driver, todo, prepare=True) if todo else {}
            for claim in group:
                answer = self._prepared.get((claim.uid, driver)) or answers.get(claim.uid)
                if answer is None:
                    raise Waiting(f"NodePrepareResources did not answer for claim {claim.key}")
                if answer.error:
                    raise Waiting(f"NodePrepareResources failed for claim {claim.key}: "
                                  f"{answer.error}")  # fmt: skip
                self._prepared[(claim.uid, driver)] = answer
                devices[claim.uid].extend(answer.cdi_device_ids)
                if self.api is DraApi.v1:
                    prepared.setdefault(claim.uid, []).extend(answer.devices)
                    claim_devices.setdefault(claim.uid, []).extend(
                        kubelethealth.ClaimDevice(
                            driver, d.request_names, d.pool_name, d.device_name, d.cdi_device_ids
                        )
                        for d in answer.devices
                    )
        env, missing = cdi_edits(self.cdi_root, [d for ids in devices.values() for d in ids])
        if missing:
            raise Waiting(f"CDI devices {missing} are not defined by any spec in {self.cdi_root}")
        url = _core("pods", meta["namespace"], meta["name"], "status")
        run = PodRun(meta["namespace"], meta["name"], meta["uid"], claims, devices, env, prepared)
        entries = scheduling.pod_claims(pod)
        uids = {e.name: c.uid for e, c in zip(entries, claims, strict=True)}
        run.containers = container_cdi_ids(pod, uids, devices, prepared)
        status = _running_status(pod)
        if self.api is DraApi.v1:
            run.claim_uids = uids
            run.claim_devices = claim_devices
            run.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            run.container_statuses = self._container_statuses(pod, run)
            status["containerStatuses"] = run.container_statuses
        self._client.merge_patch(url, {"status": status})
        with self._progress:
            self._runs[meta["uid"]] = run
        self._note(key, None)
        log.info("kubelet %s: pod %s/%s running with %s", self.node, *key, sorted(env))

    # --- device health (v1) -------------------------------------------------------------------

    def _container_statuses(self, pod: Obj, run: PodRun) -> list[Obj]:
        return kubelethealth.container_statuses(
            pod, run.claim_uids, run.claim_devices, self.health, started_at=run.started_at
        )

    def _sync_health(self, pods: Mapping[str, Obj]) -> None:
        """Write the running pods' containerStatuses where their devices' health changed."""
        if self.api is not DraApi.v1:
            return
        for uid, run in list(self._runs.items()):
            pod = pods.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            statuses = self._container_statuses(pod, run)
            if statuses == run.container_statuses:
                continue
            url = _core("pods", run.namespace, run.name, "status")
            try:
                self._client.merge_patch(url, {"status": {"containerStatuses": statuses}})
            except errors.ApiError as exc:  # the next pass retries
                log.info("kubelet %s: pod %s/%s status: %s", self.node, run.namespace, run.name,
                         exc)  # fmt: skip
                continue
            run.container_statuses = statuses

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
        by_driver = _by_driver(release)
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
                for claim in group:
                    self._prepared.pop((claim.uid, driver), None)
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
            self._save_checkpoint()
            self._runs.pop(uid, None)
            if key is not None:
                self.stopped[key] = uid
                self.reasons.pop(key, None)
            self._progress.notify_all()
        if key is not None:
            log.info("kubelet %s: pod %s/%s stopped", self.node, *key)

    def _save_checkpoint(self) -> None:
        if self.checkpoint is None:
            return
        saved = {pod: [asdict(c) for c in claims] for pod, claims in self._attempted.items()}
        partial = self.checkpoint.with_name(self.checkpoint.name + ".tmp")
        partial.write_text(json.dumps(saved))
        partial.replace(self.checkpoint)


def _by_driver(claims: Iterable[ClaimRef]) -> dict[str, list[ClaimRef]]:
    """The claims to hand each driver's plugin (a v1 claim goes to every driver it uses)."""
    groups: dict[str, list[ClaimRef]] = {}
    for claim in claims:
        for driver in claim.drivers:
            groups.setdefault(driver, []).append(claim)
    return groups


def _running_status(pod: Obj) -> Obj:
    """The status of a started pod: Running and Ready, other conditions (PodScheduled) kept (a
    merge patch replaces the whole list)."""
    ours = {"Initialized", "ContainersReady", "Ready"}
    kept = [
        c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") not in ours
    ]
    return {
        "phase": "Running",
        "conditions": [*kept, *({"type": t, "status": "True"} for t in sorted(ours))],
    }
