"""The API server's request semantics, independent of HTTP: resolve a route to a resource,
check and apply the write, and answer discovery. `apiserver` puts this on the wire.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drasat.testbed.sim import (
    discovery,
    errors,
    faults,
    labelselectors,
    paging,
    patching,
    resources,
    routing,
    semanticchecks,
    storage,
    validation,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

_CRD_GROUP = "apiextensions.k8s.io"
BOOT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
#: Kinds whose status is reset on create (the status subresource owns it); nodes keep theirs,
#: as a kubelet registers its Node with status in one request.
_KEEP_STATUS_ON_CREATE = frozenset({"Node"})
_INITIAL_STATUS: dict[str, Obj] = {"Pod": {"phase": "Pending"}, "Namespace": {"phase": "Active"}}

#: A mutating admission step on create: the object's kind and the object, which it changes in
#: place. kube-apiserver runs mutating admission after defaulting and before validation, on dry
#: runs too; so does `Api.create`. What a cluster's admission policies would do (the chart's
#: MutatingAdmissionPolicy) is given as such steps, in the rule's own Python form.
Admission = Callable[[resources.ResourceType, Obj], None]


class Api:
    """Resource registry, storage and validation behind one request interface."""

    def __init__(
        self,
        *,
        fault_config: faults.Faults,
        history: int = 10_000,
        crds: Iterable[Mapping[str, Any]] = (),
        cel_rules: bool = True,
        graceful_pod_deletion: bool = False,
        admission: Iterable[Admission] = (),
    ) -> None:
        self.faults = fault_config
        self.admission = tuple(admission)
        #: Deleting a pod on a node only marks it until a delete with gracePeriodSeconds=0 (the
        #: kubelet's, after the containers stopped); off: pods go at once.
        self.graceful_pod_deletion = graceful_pod_deletion
        self.validator = validation.Validator(cel_rules=cel_rules)
        self.store = storage.Store(validate=self._validate_strict, history=history)
        self._types_lock = threading.Lock()
        self._types: dict[tuple[str, str, str], resources.ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in resources.BUILTINS
        }
        namespaces = self._types[("", "v1", "namespaces")]
        for name in BOOT_NAMESPACES:
            self.create(routing.Route("", "v1", namespaces.plural), {"metadata": {"name": name}})
        crd_route = routing.Route(_CRD_GROUP, "v1", "customresourcedefinitions")
        for crd in crds:
            self.create(crd_route, copy.deepcopy(dict(crd)))

    # --- resources ----------------------------------------------------------------------------

    def is_plural(self, group: str, version: str, plural: str) -> bool:
        with self._types_lock:
            return (group, version, plural) in self._types

    def resource(self, route: routing.Route) -> resources.ResourceType:
        """The resource a route names; 404 for unknown resources or a wrong scope."""
        with self._types_lock:
            rt = self._types.get((route.group, route.version, route.plural))
        if rt is None:
            raise errors.ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource "
                f"({route.group or 'core'}/{route.version}, {route.plural})",
            )
        if route.namespace is not None and not rt.namespaced:
            raise errors.ApiError(404, "NotFound", f"{rt.plural} is not namespaced")
        if route.namespace is None and route.name is not None and rt.namespaced:
            raise errors.ApiError(404, "NotFound", f"{rt.plural} needs a namespace")
        return rt

    def types(self) -> list[resources.ResourceType]:
        with self._types_lock:
            return list(self._types.values())

    @staticmethod
    def present(rt: resources.ResourceType, obj: Obj) -> Obj:
        """An object as served at this version (CRD versions share storage)."""
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        return obj

    # --- validation ---------------------------------------------------------------------------

    def _validate(
        self, rt: resources.ResourceType, new: Obj, old: Obj | None, *, strict: bool
    ) -> None:
        causes = self.validator.causes(rt, new, strict=strict)
        unknown = sorted(path for path, message in causes if message.startswith("unknown field"))
        if unknown:
            # fieldValidation=Strict: the decoder refuses the object before validation runs.
            raise errors.unknown_fields(kind=rt.kind, version=rt.version, paths=unknown)
        causes.extend(semanticchecks.check(rt, new, old))
        if rt.group == _CRD_GROUP:
            causes.extend(self._crd_causes(new))
        causes = list(dict.fromkeys(causes))  # a schema and a rule may say the same
        if causes:
            name = str((new.get("metadata") or {}).get("name") or "")
            raise errors.invalid(kind=rt.kind, group=rt.group, name=name, causes=causes)

    def _validate_strict(self, rt: resources.ResourceType, new: Obj, old: Obj | None) -> None:
        self._validate(rt, new, old, strict=True)

    def _validate_lax(self, rt: resources.ResourceType, new: Obj, old: Obj | None) -> None:
        self._validate(rt, new, old, strict=False)

    def _prepare(self, rt: resources.ResourceType, obj: Obj, query: Mapping[str, str]) -> Obj:
        """Defaults, and with fieldValidation=Ignore|Warn no unknown fields; in place."""
        self.validator.default(rt, obj)
        if self._lax(query):
            dropped = self.validator.prune(rt, obj)
            if dropped:
                log.debug("dropped unknown fields of %s: %s", rt.kind, ", ".join(dropped))
        return obj

    @staticmethod
    def _dry_run(query: Mapping[str, str]) -> bool:
        value = query.get("dryRun")
        if value not in (None, "", "All"):
            raise errors.bad_request(f"invalid dryRun value {value!r}: only 'All' is supported")
        return value == "All"

    @staticmethod
    def _lax(query: Mapping[str, str]) -> bool:
        # fieldValidation=Ignore|Warn drops unknown fields, as upstream; the default is Strict.
        return query.get("fieldValidation", "Strict") in ("Ignore", "Warn")

    def _validator_for(self, query: Mapping[str, str]) -> storage.ValidateFn:
        return self._validate_lax if self._lax(query) else self._validate_strict

    @staticmethod
    def _crd_causes(crd: Obj) -> list[tuple[str, str]]:
        spec = crd.get("spec") or {}
        expected = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        name = (crd.get("metadata") or {}).get("name")
        if name != expected:
            return [
                (
                    "metadata.name",
                    f'{name!r}: must be spec.names.plural+"."+spec.group ({expected!r})',
                )
            ]
        return []

    def _body(self, rt: resources.ResourceType, route: routing.Route, body: Any) -> Obj:
        """Check a request body against the URL; fill apiVersion/kind as the server defaults."""
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if rt.custom and not body.get("kind"):
            # Built-in kinds default apiVersion and kind; custom resources must carry them.
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): "
                f"Object 'Kind' is missing"
            )
        if rt.custom and not body.get("apiVersion"):
            raise errors.bad_request(
                f"the API version in the data () does not match the expected API version "
                f"({rt.api_version})"
            )
        if (
            body.setdefault("apiVersion", rt.api_version) != rt.api_version
            or body.setdefault("kind", rt.kind) != rt.kind
        ):
            raise errors.bad_request(
                f"{body['apiVersion']}, Kind={body['kind']} does not match the resource "
                f"{rt.api_version}, Kind={rt.kind}"
            )
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.invalid(
                kind=rt.kind, group=rt.group, name="", causes=[("metadata", "must be an object")]
            )
        if rt.namespaced and meta.get("namespace") not in (None, "", route.namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        if route.name is not None and meta.get("name") not in (None, route.name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({route.name})"
            )
        if route.name is not None:
            meta["name"] = route.name
        return body

    # --- verbs --------------------------------------------------------------------------------

    def create(
        self, route: routing.Route, body: Any, query: Mapping[str, str] | None = None
    ) -> Obj:
        rt = self.resource(route)
        if route.name is not None:
            raise errors.ApiError(405, "MethodNotAllowed", "POST is for collections")
        obj = self._body(rt, route, body)
        if rt.has_status and rt.kind not in _KEEP_STATUS_ON_CREATE:
            obj.pop("status", None)
        if rt.kind in _INITIAL_STATUS and rt.group == "":
            obj["status"] = copy.deepcopy(_INITIAL_STATUS[rt.kind])
        self._prepare(rt, obj, query or {})
        for admit in self.admission:
            admit(rt, obj)
        created = self.store.create(
            rt,
            route.namespace or "",
            obj,
            validate=self._validator_for(query or {}),
            dry_run=self._dry_run(query or {}),
        )
        if rt.group == _CRD_GROUP and not self._dry_run(query or {}):
            created = self._register_crd(created)
        return self.present(rt, created)

    def get(self, route: routing.Route) -> Obj:
        rt = self.resource(route)
        return self.present(rt, self.store.get(rt, route.namespace or "", str(route.name)))

    def list_objects(self, route: routing.Route, query: Mapping[str, str]) -> Obj:
        rt = self.resource(route)
        labels, fields = self.selectors(rt, query)
        items, rv = self.store.list_objects(rt, route.namespace)
        self._check_list_version(query, int(rv))
        chosen = [
            self._list_item(rt, obj)
            for obj in items
            if labelselectors.matches(obj, labels=labels, fields=fields)
        ]
        page, metadata = paging.page(chosen, query)
        return {
            "apiVersion": rt.api_version,
            "kind": rt.list_kind,
            "metadata": {"resourceVersion": rv, **metadata},
            "items": page,
        }

    def _list_item(self, rt: resources.ResourceType, obj: Obj) -> Obj:
        """A list item: custom resources carry apiVersion and kind, built-in kinds' items do not
        (the real server encodes them as typed lists)."""
        if rt.custom:
            return self.present(rt, obj)
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        return obj

    @staticmethod
    def _check_list_version(query: Mapping[str, str], current: int) -> None:
        """resourceVersion and resourceVersionMatch of a list. Only the current state is kept:
        an exact older version is 410 Expired, as the real server answers once etcd compacted
        it; a version from the future is 504, as the real server answers after waiting."""
        wanted, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch", "")
        if match and not wanted:
            raise errors.invalid(
                kind="ListOptions",
                group="meta.k8s.io",
                name="",
                causes=[
                    (
                        "resourceVersionMatch",
                        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion "
                        "is provided",
                    )
                ],
            )
        if not wanted:
            return
        try:
            version = int(wanted)
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {wanted!r}") from None
        if version > current and (match or version != 0):
            raise errors.ApiError(
                504,
                "Timeout",
                f"Timeout: Too large resource version: {version}, current: {current}",
            )
        if match == "Exact" and version < current:
            raise errors.gone("The resourceVersion for the provided list is too old.")

    @staticmethod
    def selectors(
        rt: resources.ResourceType, query: Mapping[str, str]
    ) -> tuple[list[labelselectors.Requirement], list[labelselectors.Requirement]]:
        labels = labelselectors.parse_labels(query.get("labelSelector"))
        fields = labelselectors.parse_fields(
            query.get("fieldSelector"), supported=rt.field_selectors
        )
        return labels, fields

    def _maybe_conflict(self, rt: resources.ResourceType, route: routing.Route) -> None:
        namespace, name = route.namespace or "", str(route.name)
        current = self.store.get(rt, namespace, name)
        key = (rt.store_key, namespace, name)
        if self.faults.should_conflict(rt.plural, key, current["metadata"]["resourceVersion"]):
            raise errors.conflict(plural=rt.plural, group=rt.group, name=name)

    def _check_subresource(self, rt: resources.ResourceType, route: routing.Route) -> None:
        if route.subresource is None:
            return
        if route.subresource != "status" or not rt.has_status:
            raise errors.ApiError(
                404, "NotFound", f"{rt.plural} has no subresource {route.subresource!r}"
            )

    def replace(
        self, route: routing.Route, body: Any, query: Mapping[str, str] | None = None
    ) -> Obj:
        rt = self.resource(route)
        self._check_subresource(rt, route)
        obj = self._body(rt, route, body)
        return self._update(rt, route, lambda _current: self._prepare(rt, obj, query or {}), query)

    def patch(
        self,
        route: routing.Route,
        body: Any,
        content_type: str,
        query: Mapping[str, str] | None = None,
    ) -> Obj:
        rt = self.resource(route)
        self._check_subresource(rt, route)
        kind = content_type.split(";")[0].strip().lower()
        if kind == "application/json-patch+json":

            def change(current: Obj) -> Obj:
                patched = patching.json_patch(current, body)
                if not isinstance(patched, dict):
                    raise errors.bad_request("a patch must leave an object")
                return self._prepare(rt, patched, query or {})

        elif kind == "application/strategic-merge-patch+json" and not rt.custom:
            if not isinstance(body, dict):
                raise errors.bad_request("a strategic merge patch must be a JSON object")
            keys = patching.strategic_keys(rt.api_version, rt.kind)

            def change(current: Obj) -> Obj:
                return self._prepare(rt, patching.strategic_merge(current, body, keys), query or {})

        elif kind == "application/merge-patch+json":
            if not isinstance(body, dict):
                raise errors.bad_request("a merge patch must be a JSON object")

            def change(current: Obj) -> Obj:
                return self._prepare(rt, patching.merge(current, body), query or {})

        else:
            raise errors.ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format "
                f"- accepted media types include: application/json-patch+json, "
                f"application/merge-patch+json (got {content_type!r})",
            )
        return self._update(rt, route, change, query)

    def _update(
        self,
        rt: resources.ResourceType,
        route: routing.Route,
        change: Callable[[Obj], Obj],
        query: Mapping[str, str] | None,
    ) -> Obj:
        """The write shared by PUT and PATCH: conflict faults, the store's update, the answer."""
        self._maybe_conflict(rt, route)
        updated = self.store.update(
            rt,
            route.namespace or "",
            str(route.name),
            change,
            subresource=route.subresource,
            validate=self._validator_for(query or {}),
            dry_run=self._dry_run(query or {}),
        )
        return (
            self.present(rt, updated)
            if self._dry_run(query or {})
            else self._after_write(rt, updated)
        )

    def delete(
        self, route: routing.Route, body: Any, query: Mapping[str, str] | None = None
    ) -> Obj:
        """DELETE: the object while it is only marked (finalizers, a grace period); once gone,
        the object or a Status, as the kind's registry answers."""
        rt = self.resource(route)
        deleted = self._delete(rt, route, body, query)
        meta = deleted["metadata"]
        kept = bool(meta.get("finalizers")) or bool(meta.get("deletionGracePeriodSeconds"))
        if (kept and meta.get("deletionTimestamp")) or rt.delete_returns_object:
            return deleted
        details = {"name": meta.get("name", ""), "kind": rt.plural, "uid": meta.get("uid", "")}
        if rt.group:
            details = {"name": details["name"], "group": rt.group, **details}
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _delete(
        self,
        rt: resources.ResourceType,
        route: routing.Route,
        body: Any,
        query: Mapping[str, str] | None,
    ) -> Obj:
        options = body if isinstance(body, dict) else {}
        dry_run = self._dry_run(query or {}) or options.get("dryRun") == ["All"]
        deleted = self.store.delete(
            rt,
            route.namespace or "",
            str(route.name),
            preconditions=options.get("preconditions"),
            dry_run=dry_run,
            grace_seconds=self._grace(rt, route, {**options, **(query or {})}),
        )
        if rt.group == _CRD_GROUP and not dry_run:
            self._unregister_crd(deleted)
        return self.present(rt, deleted)

    def _grace(
        self, rt: resources.ResourceType, route: routing.Route, options: Mapping[str, Any]
    ) -> int:
        """The grace period of a delete: DeleteOptions or the gracePeriodSeconds parameter."""
        if not self.graceful_pod_deletion or (rt.group, rt.plural) != ("", "pods"):
            return 0
        pod = self.store.get(rt, route.namespace or "", str(route.name))
        if not pod["spec"].get("nodeName"):
            return 0  # never started: nothing to wait for
        grace = options.get("gracePeriodSeconds")
        if grace in (None, ""):
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        try:
            return max(int(grace), 0)
        except (TypeError, ValueError):
            raise errors.bad_request(f"invalid gracePeriodSeconds {grace!r}") from None

    def delete_collection(self, route: routing.Route, query: Mapping[str, str]) -> Obj:
        rt = self.resource(route)
        listed = self.list_objects(route, query)
        deleted = []
        for obj in listed["items"]:
            meta = obj["metadata"]
            item = routing.Route(
                route.group, route.version, route.plural, meta.get("namespace"), meta["name"]
            )
            try:
                deleted.append(self._list_item(rt, self._delete(rt, item, None, None)))
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
        listed["items"] = deleted
        return listed

    def bind(self, route: routing.Route, body: Any) -> Obj:
        """POST pods/{name}/binding: set spec.nodeName once, as the scheduler does."""
        if not isinstance(body, dict) or not (body.get("target") or {}).get("name"):
            raise errors.invalid(
                kind="Binding",
                group="",
                name=str(route.name),
                causes=[("target.name", "Required value")],
            )
        node = body["target"]["name"]
        pods = self.resource(routing.Route("", "v1", "pods", route.namespace, route.name))

        def assign(current: Obj) -> Obj:
            if current["spec"].get("nodeName"):
                raise errors.ApiError(
                    409,
                    "Conflict",
                    f"pod {route.name} is already assigned to node {current['spec']['nodeName']!r}",
                )
            if current["spec"].get("schedulingGates"):
                # As kube-apiserver: a pod that is not ready for scheduling is never bound.
                raise errors.ApiError(
                    409, "Conflict", f"pod {route.name} has non-empty .spec.schedulingGates"
                )
            current["spec"]["nodeName"] = node
            return current

        # Binding bypasses the pod update rules (spec.nodeName is otherwise immutable).
        self.store.update(
            pods,
            route.namespace or "",
            str(route.name),
            assign,
            validate=lambda rt, new, old: self.validator.check(rt, new),
        )
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _after_write(self, rt: resources.ResourceType, obj: Obj) -> Obj:
        if rt.group == _CRD_GROUP:
            if obj["metadata"].get("deletionTimestamp") is None:
                obj = self._register_crd(obj)
            else:
                self._unregister_crd(obj)
        return self.present(rt, obj)

    # --- CRDs ---------------------------------------------------------------------------------

    def _register_crd(self, crd: Obj) -> Obj:
        served = resources.from_crd(crd)
        for rt in served:
            self.validator.register_crd_version(rt, resources.crd_schema(crd, rt.version))
        with self._types_lock:
            for rt in served:
                self._types[(rt.group, rt.version, rt.plural)] = rt
        versions = crd["spec"].get("versions", [])
        stored = [v["name"] for v in versions if v.get("storage")] or [versions[0]["name"]]
        status = {
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": stored,
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": "",
                    "lastTransitionTime": crd["metadata"]["creationTimestamp"],
                }
                for kind, reason in (
                    ("NamesAccepted", "NoConflicts"),
                    ("Established", "InitialNamesAccepted"),
                )
            ],
        }
        if crd.get("status") == status:
            return crd
        crds = self._types[(_CRD_GROUP, "v1", "customresourcedefinitions")]

        def set_status(current: Obj) -> Obj:
            current["status"] = status
            return current

        return self.store.update(
            crds, "", crd["metadata"]["name"], set_status, subresource="status"
        )

    def _unregister_crd(self, crd: Obj) -> None:
        crds = self._types[(_CRD_GROUP, "v1", "customresourcedefinitions")]
        try:
            self.store.get(crds, "", crd["metadata"]["name"])
            return  # still there (finalizers): keep serving
        except errors.ApiError:
            pass
        removed = resources.from_crd(crd)
        if removed:
            self.store.drop_all(removed[0])
        with self._types_lock:
            for rt in removed:
                self._types.pop((rt.group, rt.version, rt.plural), None)

    # --- discovery ----------------------------------------------------------------------------

    def discovery(self, request: routing.Discovery) -> Obj:
        return discovery.answer(request, self.types())


def decode(raw: bytes) -> Any:
    """A request body as JSON; 400 BadRequest when it is not."""
    if not raw:
        return None
    try:
        return json.loads(raw, parse_int=_int64)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the request body is not valid JSON: {exc}") from None


_INT64 = range(-(2**63), 2**63)


def _int64(text: str) -> int | float:
    """A JSON integer as Go decodes it into an unstructured object: one beyond int64 becomes a
    float, so a schema's `integer` refuses it (as the real server does)."""
    value = int(text)
    return value if value in _INT64 else float(value)
