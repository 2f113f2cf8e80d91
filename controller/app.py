"""`drasat controller` wired together: API client, policy, metrics endpoint, leader election.

Without leader election the controller starts at once. With it, the controller starts when this
replica takes the Lease and every write is gated on still holding it; when leadership is lost the
controller stops and `run` returns (the process exits and is restarted, as client-go's do).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import InputError
from drasat.controller import admission, leader
from drasat.controller.cycle.allocating import Solve
from drasat.controller.metrics import Metrics
from drasat.controller.metrics_server import serve
from drasat.controller.policy import CONFIGMAP_KEY, PolicySource
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors, served
from drasat.kube import resources as r
from drasat.kube.client import Api, KubeClient, load_configuration
from drasat.solver import Mode

log = logging.getLogger(__name__)


class Loop(Protocol):
    """What the app runs: the v1 controller, or the classic one (drasat.classic)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def ready(self) -> bool: ...


#: Builds the classic-DRA controller for an app (drasat.classic.controller.for_app). The caller
#: passes it (the CLI, the classic demo, classic tests): the product never imports the classic
#: wing, which a v1-only copy of drasat may leave out.
Classic = Callable[["App", Solve | None], Loop]


@dataclass(frozen=True)
class Options:
    namespace: str = "drasat"
    kubeconfig: str | None = None
    workers: int = 2
    qps: float = 20.0
    burst: int = 40
    metrics_address: str = ":8080"
    policy_file: str | None = None
    policy_configmap: str | None = None
    policy_key: str = CONFIGMAP_KEY
    leader_elect: bool = False
    lease_name: str = "drasat-controller"
    identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    resync_s: float = 30.0
    hold_ttl_s: float = 30.0
    #: auto (v1 when the server serves resource.k8s.io/v1 DeviceClasses), v1 or classic.
    dra_api: str = "auto"
    device_taint: bool = True
    batch_window_s: float = 0.05
    batch_max: int = 64
    cycle_time_limit_s: float = 1.0
    cycle_mode: str = "online"
    #: host:port of the admission webhook that adds drasat's scheduling gate ("": none), and its
    #: TLS certificate and key files (controller/admission.py).
    webhook_address: str = ""
    webhook_cert_file: str = ""
    webhook_key_file: str = ""
    #: The webhook also turns `nvidia.com/gpu` into claims of drasat's class (where the API
    #: server serves no MutatingAdmissionPolicy to do it).
    webhook_extended_resources: bool = False
    #: v1: the drivers whose DeviceClasses drasat allocates (`controller.drivers`).
    drivers: tuple[str, ...] = (DRIVER_NAME,)


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


class App:
    def __init__(
        self,
        options: Options,
        *,
        api: Api | None = None,
        solve: Solve | None = None,
        classic: Classic | None = None,
    ) -> None:
        self.options = options
        self.api: Api = api or KubeClient(
            load_configuration(options.kubeconfig), qps=options.qps, burst=options.burst
        )
        self.metrics = Metrics()
        self.policy = self._policy_source()
        self.elector: leader.LeaderElector | None = None
        if options.leader_elect:
            config = leader.Config(
                namespace=options.namespace,
                name=options.lease_name,
                identity=options.identity or default_identity(),
                lease_duration_s=options.lease_duration_s,
                renew_deadline_s=options.renew_deadline_s,
                retry_period_s=options.retry_period_s,
            )
            self.elector = leader.LeaderElector(self.api, config, on_change=self._on_leading)
        self.dra_api = self._dra_api()
        log.info("DRA API: %s (--dra-api %s)", self.dra_api, options.dra_api)
        if self.dra_api == "v1":
            log.info("allocating the claims of the DeviceClasses of %s", ", ".join(options.drivers))
            self._check_ledger_kind()
        self.controller: Loop
        if self.dra_api == "v1":
            device_taint, pod_groups = options.device_taint, False
            if isinstance(self.api, served.Prober):
                device_taint, pod_groups = self._fit_to_server(self.api, device_taint)
            self.controller = V1Controller(
                self.api,
                V1Config(
                    namespace=options.namespace,
                    batch_window_s=options.batch_window_s,
                    batch_max=options.batch_max,
                    time_limit_s=options.cycle_time_limit_s,
                    mode=Mode(options.cycle_mode),
                    resync_s=min(options.resync_s, 10.0),
                    device_taint=device_taint,
                    policy_source=self.policy.source,
                    drivers=options.drivers,
                    pod_groups=pod_groups,
                ),
                policy=self.policy.current,
                poll_policy=self.policy.poll,
                metrics=self.metrics,
                solve=solve,
                may_write=self.may_write,
            )
        elif classic is None:
            raise InputError(
                "classic DRA (resource.k8s.io/v1alpha2) needs the drasat.classic package, which "
                "this installation leaves out; serve resource.k8s.io/v1 (--dra-api v1)"
            )
        else:
            self.controller = classic(self, solve)
        if options.webhook_address and self.dra_api != "v1":
            raise InputError("the admission webhook (--webhook-address) serves v1 mode only")
        self.server: Any = None
        self.webhook: admission.WebhookServer | None = None
        self.lookup: admission.Lookup | None = None
        self._done = threading.Event()
        self._started = False

    def _dra_api(self) -> str:
        """auto: classic where the server still serves classic DRA (v1alpha2, Kubernetes <=
        1.31, and the simulated API server), else v1 where it serves resource.k8s.io/v1."""
        if self.options.dra_api != "auto":
            return self.options.dra_api
        for resource, answer in (
            (r.POD_SCHEDULING_CONTEXTS, "classic"),
            (r.DEVICE_CLASSES_V1, "v1"),
        ):
            try:
                self.api.list(resource, namespace="default" if resource.namespaced else None)
            except errors.NotFound:
                continue
            return answer
        return "classic"

    def _check_ledger_kind(self) -> None:
        """drasat's own nodes keep their ledger in NodeAllocationStates: with its driver among
        those allocated, a server that does not serve that kind (drasat's CRDs not installed) is
        said once, as an input error (exit 2), rather than watched for ever. NVIDIA's nodes need
        no NAS (their ledger is the claims' statuses): without drasat's driver the controller
        neither needs nor watches the kind. A server that cannot be asked now is not an answer:
        the informers retry."""
        if DRIVER_NAME not in self.options.drivers:
            return
        try:
            self.api.list(r.NAS, namespace=self.options.namespace)
        except errors.NotFound:
            raise InputError(
                f"the API server does not serve {r.NAS.plural}.{r.NAS.group} (drasat's CRDs are "
                f"not installed): the nodes of drasat's driver ({DRIVER_NAME}) keep their ledger "
                "there. Install the CRDs (`drasat crds | kubectl apply -f -`, or the Helm chart), "
                "or allocate NVIDIA's nodes only (--driver gpu.nvidia.com), which need none"
            ) from None
        except errors.KubeError as error:
            log.info("cannot check for %s now (%s): the informers retry", r.NAS.plural, error)

    def _fit_to_server(self, api: served.Prober, device_taint: bool) -> tuple[bool, bool]:
        """What this API server serves and keeps (drasat.kube.served), said in one log line;
        whether to keep the DeviceTaintRule (not where no version of it is served), and whether
        to read gangs from PodGroups (where served)."""
        groups = served.pod_groups(api)
        findings = [
            served.claim_shares(api, self.options.namespace),
            served.mutating_admission_policies(api),
            groups,
        ]
        if device_taint:
            taint = served.device_taint_rules(api)
            findings.insert(0, taint)
            device_taint = taint.on
        log.warning("%s", served.line("controller", findings))
        return device_taint, groups.on

    def _policy_source(self) -> PolicySource:
        def counted(result: str) -> None:
            self.metrics.policy_reloads.labels(result).inc()

        o = self.options
        if o.policy_file:
            return PolicySource.from_file(o.policy_file, on_result=counted)
        if o.policy_configmap:
            return PolicySource.from_configmap(
                self.api, namespace=o.namespace, name=o.policy_configmap, key=o.policy_key,
                on_result=counted,
            )  # fmt: skip
        return PolicySource(source="default")

    def may_write(self) -> bool:
        """Whether this replica may write: it leads, or runs alone."""
        return self.elector is None or self.elector.leading

    def _on_leading(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading and not self._started:
            self._started = True
            threading.Thread(target=self.controller.start, name="start", daemon=True).start()
        elif not leading and self._started:
            if not self._done.is_set():
                log.warning("lost leadership: stopping")
            self._done.set()

    def run(self, stop: threading.Event | None = None) -> None:
        """Serve metrics, lead (or not), run the controller until `stop` or lost leadership."""
        if self.options.metrics_address:
            address = self.options.metrics_address
            try:
                self.server = serve(
                    address,
                    self.metrics.registry,
                    ready=lambda: self._started and self.controller.ready,
                )
            except (OSError, ValueError) as error:  # the port is taken, a host that is not ours
                raise InputError(
                    f"--metrics-address {address!r}: cannot serve there: "
                    f"{getattr(error, 'strerror', None) or error}"
                ) from None
        if self.options.webhook_address:
            self._serve_webhook()
        stop = stop or threading.Event()
        if self.elector is None:
            self._started = True
            self.controller.start()
        else:
            self.elector.start()
        while not stop.is_set() and not self._done.is_set():
            stop.wait(0.2)
        self.shutdown()

    def _serve_webhook(self) -> None:
        """Every replica answers admission, leader or not, from its own caches."""
        o = self.options

        def count(answer: admission.Answer) -> None:
            self.metrics.admission_reviews.labels(answer.outcome).inc()
            if answer.why:
                log.debug("admission: gated (%s)", answer.why)

        lookup = admission.Lookup(self.api, o.drivers)
        try:
            self.webhook = admission.serve(
                o.webhook_address, cert_file=o.webhook_cert_file, key_file=o.webhook_key_file,
                lookup=lookup, on_answer=count, convert_extended=o.webhook_extended_resources,
            )  # fmt: skip
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            raise InputError(
                f"admission webhook on {o.webhook_address!r} (--webhook-cert-file "
                f"{o.webhook_cert_file}, --webhook-key-file {o.webhook_key_file}): {error}"
            ) from None
        self.lookup = lookup
        lookup.start()
        host, port = self.webhook.server_address[:2]  # the port bound where `:0` asked any
        log.info("admission webhook on %s:%s%s: pods of drasat's get the scheduling gate",
                 host, port, admission.PATH)  # fmt: skip

    def shutdown(self) -> None:
        self._done.set()
        if self.webhook is not None:
            self.webhook.shutdown()
            self.webhook.server_close()
            self.webhook = None
        if self.lookup is not None:
            self.lookup.stop()
            self.lookup = None
        if self.elector is not None:
            self.elector.stop()
        self.controller.stop()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
