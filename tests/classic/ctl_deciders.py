"""A controller driven by hand on the in-memory API: informers synced (or left lagging) on demand,
decisions called directly, and an interleaver that runs several deciders one API call at a time.

Nothing runs in the background: `Rig.sync` lists a kind into the controller's cache, and
`Rig.deliver_claim_event` hands the claim informer the next event it has not seen, so a test
chooses exactly how far the claim cache lags behind the server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ctl_classic import FAST
from ctl_cluster import NS, add_claim, add_class, add_node, add_pod, t4
from ctl_kubefake import FakeApi

from drasat.api import groups
from drasat.classic.controller import Controller
from drasat.controller import allocation
from drasat.kube import informer
from drasat.kube import resources as r
from drasat.kube.client import Obj

CLAIMS_KIND = FakeApi._kind(r.RESOURCE_CLAIMS)


class Rig:
    """A FakeApi with `nodes` (each `gpus` T4s) and the class; claims, pods and contexts are added
    by the test."""

    def __init__(self, nodes: Iterable[str] = ("node-a", "node-b"), gpus: int = 1) -> None:
        self.api = FakeApi()
        for name in nodes:
            add_node(self.api, name, [t4(g) for g in range(gpus)])
        add_class(self.api)
        #: Per controller: the server version up to which its claim informer has seen events.
        self._seen: dict[int, int] = {}

    def claim(self, name: str, *, finalizer: bool = False) -> Obj:
        created = add_claim(self.api, "ns", name)
        if not finalizer:
            return created
        patch = {"metadata": {"finalizers": [groups.FINALIZER]}}
        return self.api.patch(r.RESOURCE_CLAIMS, name, patch, namespace="ns")

    def pod(self, name: str, claims: dict[str, str], selected: str | None) -> None:
        """A pod using `claims` (entry -> claim name) and its scheduling context."""
        pod = add_pod(self.api, "ns", name, claims)
        spec: Obj = {"potentialNodes": ["node-a", "node-b"]}
        if selected:
            spec["selectedNode"] = selected
        self.api.create(r.POD_SCHEDULING_CONTEXTS, {
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name,
                 "uid": pod["metadata"]["uid"]}]},
            "spec": spec,
        })  # fmt: skip

    def select(self, pod: str, node: str) -> None:
        """The scheduler picks another node for `pod`."""
        context = self.api.get(r.POD_SCHEDULING_CONTEXTS, pod, namespace="ns")
        context["spec"]["selectedNode"] = node
        self.api.replace(r.POD_SCHEDULING_CONTEXTS, context)

    def controller(self, api: Any = None) -> Controller:
        """A controller (not started) whose caches hold everything the server holds now."""
        ctl = Controller(api or self.api, FAST)
        self._seen[id(ctl)] = self.api.version
        for inf in ctl._informers:
            inf._relist()
        return ctl

    def sync(self, ctl: Controller, *informers: informer.Informer) -> None:
        for inf in informers:
            inf._relist()
            if inf is ctl.claims:
                self._seen[id(ctl)] = self.api.version

    def deliver_claim_event(self, ctl: Controller) -> bool:
        """The claim informer receives the next claim event it has not seen; False if none."""
        with self.api.lock:
            seen = self._seen[id(ctl)]
            found = [(v, e) for v, k, _, e in self.api.log if v > seen and k == CLAIMS_KIND]
            if not found:
                return False
            version, event = found[0]
            self._seen[id(ctl)] = version
        ctl.claims._apply(event.type, event.object)
        return True

    # What the server holds.
    def nas_owners(self) -> dict[str, set[str]]:
        """claim uid -> the nodes whose NAS lists it."""
        out: dict[str, set[str]] = {}
        for obj in self.api.list(r.NAS, namespace=NS).items:
            for uid in (obj.get("spec") or {}).get("allocatedClaims") or {}:
                out.setdefault(uid, set()).add(obj["metadata"]["name"])
        return out

    def status_node(self, name: str) -> str | None:
        return allocation.allocated_node(self.api.get(r.RESOURCE_CLAIMS, name, namespace="ns"))

    def uid(self, name: str) -> str:
        return str(self.api.get(r.RESOURCE_CLAIMS, name, namespace="ns")["metadata"]["uid"])

    def gpu_users(self) -> dict[str, list[str]]:
        users: dict[str, list[str]] = {}
        for obj in self.api.list(r.NAS, namespace=NS).items:
            for uid, entry in ((obj.get("spec") or {}).get("allocatedClaims") or {}).items():
                for device in (entry.get("gpu") or {}).get("devices") or []:
                    users.setdefault(device["uuid"], []).append(uid)
        return users


class Killed(BaseException):
    """The process died at this call: not an Exception, so the controller cannot catch it."""


class DiesAt:
    """An Api that dies at the first call `verb` on `plural`, and stays dead."""

    def __init__(self, api: FakeApi, verb: str, plural: str) -> None:
        self._api, self._verb, self._plural, self.dead = api, verb, plural, False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)

        def call(resource: r.Resource, *args: Any, **kwargs: Any) -> Any:
            if self.dead or (name == self._verb and resource.plural == self._plural):
                self.dead = True
                raise Killed(f"{name} {resource.plural}")
            return method(resource, *args, **kwargs)

        return call


class Interleaver:
    """Runs actors (functions) in threads, one at a time between API calls, in an order given by
    `choices`: before each API call an actor waits at its gate; when every actor is at its gate
    or finished, the next choice picks what happens: one waiting actor goes on to its next gate,
    or one of the `moves` runs in the test's thread (e.g. an informer receives an event). Options
    are the waiting actors then the moves, in order; the choice is taken modulo their number;
    after the choices run out, the first waiting actor goes on.

    `gated(api)` wraps an Api so that its calls pass the gate; calls from threads that are not
    actors pass straight through, and so do Events (fire and forget).
    """

    def __init__(self, choices: list[int], *, step_timeout_s: float = 20.0) -> None:
        self._choices = list(choices)
        self._timeout = step_timeout_s
        self._cv = threading.Condition()
        self._waiting: set[str] = set()
        self._done: set[str] = set()
        self._granted: str | None = None
        self._local = threading.local()
        self.errors: dict[str, BaseException] = {}

    def gate(self) -> None:
        name = getattr(self._local, "name", None)
        if name is None:
            return
        with self._cv:
            self._waiting.add(name)
            self._cv.notify_all()
            if not self._cv.wait_for(lambda: self._granted == name, self._timeout):
                raise AssertionError(f"{name} never got its turn")
            self._granted = None
            self._waiting.discard(name)
            self._cv.notify_all()

    def gated(self, api: Any) -> Any:
        gate = self.gate

        class Gated:
            def __getattr__(self, name: str) -> Any:
                method = getattr(api, name)
                if name not in ("get", "list", "create", "replace", "replace_status", "patch",
                                "delete"):  # fmt: skip
                    return method

                def call(resource: r.Resource, *args: Any, **kwargs: Any) -> Any:
                    if resource.plural != "events":
                        gate()
                    return method(resource, *args, **kwargs)

                return call

        return Gated()

    def run(
        self,
        actors: dict[str, Callable[[], None]],
        *,
        moves: Iterable[Callable[[], Any]] = (),
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """Run `actors` to their end; `check` runs (in the test's thread) whenever all are
        parked. An actor's exception is kept in `errors`."""
        order = sorted(actors)
        extra = list(moves)

        def body(name: str, fn: Callable[[], None]) -> None:
            self._local.name = name
            try:
                fn()
            except BaseException as error:  # reported to the test
                self.errors[name] = error
            finally:
                with self._cv:
                    self._done.add(name)
                    self._cv.notify_all()

        threads = [threading.Thread(target=body, args=item, daemon=True) for item in actors.items()]
        for thread in threads:
            thread.start()

        def parked() -> bool:
            return self._granted is None and all(
                n in self._waiting or n in self._done for n in order
            )

        while True:
            with self._cv:
                if not self._cv.wait_for(parked, self._timeout):
                    raise AssertionError("an actor neither reached its gate nor finished")
                waiting = [n for n in order if n in self._waiting]
            check()
            if not waiting:
                break
            options: list[str | Callable[[], Any]] = [*waiting, *extra]
            choice = self._choices.pop(0) if self._choices else 0
            picked = options[choice % len(options)]
            if callable(picked):
                picked()
                continue
            with self._cv:
                self._granted = picked
                self._cv.notify_all()
        for thread in threads:
            thread.join(self._timeout)
