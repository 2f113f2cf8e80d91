"""Creating manifests on the simulated API server, as `kubectl apply` does for new objects.

Kinds are found by `apiVersion` and `kind` among the built-in resources the server serves and
the CRDs given (drasat's own by default), so no hand-kept kind map goes stale. Namespaces are
created first and pods last, whatever the order of the documents, so a pod never waits for a
claim or template that is still to come. An object that already exists is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat import loading
from drasat.api.inputerrors import InputError
from drasat.testbed.sim import errors, kubeclient, resources

Obj = dict[str, Any]

#: Position of a kind in the order of creation (others: 1).
_ORDER = {"Namespace": 0, "Pod": 2}


@dataclass(frozen=True)
class Applied:
    document: loading.Document
    object: Obj
    created: bool  # False: it existed already (unchanged)

    @property
    def ref(self) -> str:
        return self.document.describe()


def kinds(crds: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], resources.ResourceType]:
    """(apiVersion, kind) -> the resource that serves it: built-ins and the CRDs' versions."""
    served = [*resources.BUILTINS, *(t for crd in crds for t in resources.from_crd(crd))]
    return {(t.api_version, t.kind): t for t in served}


def url(rt: resources.ResourceType, namespace: str | None, name: str | None = None) -> str:
    """REST path of a collection or an object of `rt`."""
    return kubeclient.path(
        rt.group, rt.version, rt.plural, namespace=namespace if rt.namespaced else None, name=name
    )


def apply(
    client: kubeclient.KubeClient,
    documents: Sequence[loading.Document],
    *,
    known: Mapping[tuple[str, str], resources.ResourceType],
    default_namespace: str = "default",
) -> list[Applied]:
    """Create every document's object; InputError (naming the document) for an unknown kind or
    an object the server refuses (e.g. a schema violation)."""
    order = sorted(documents, key=lambda d: _ORDER.get(str(d.data.get("kind")), 1))
    for document in order:  # every kind is checked before anything is written
        _resource(document, known)
    done = []
    for document in order:
        rt = _resource(document, known)
        body = document.data
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or default_namespace) if rt.namespaced else None
        try:
            created = client.create(url(rt, namespace), body)
            done.append(Applied(document, created, True))
        except errors.ApiError as error:
            if error.code != 409 or error.reason != "AlreadyExists":
                raise InputError(
                    f"the API server refused it: {error.message}",
                    where=f"{document.where}: {document.describe()}",
                ) from None
            existing = client.get(url(rt, namespace, str(meta.get("name"))))
            done.append(Applied(document, existing, False))
    return done


def _resource(
    document: loading.Document, known: Mapping[tuple[str, str], resources.ResourceType]
) -> resources.ResourceType:
    key = (str(document.data.get("apiVersion")), str(document.data.get("kind")))
    rt = known.get(key)
    if rt is None:
        raise InputError(
            f"the API server does not serve {key[1]} of {key[0]}",
            where=f"{document.where}: {document.describe()}",
        )
    return rt
