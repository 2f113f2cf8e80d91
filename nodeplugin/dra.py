"""The kubelet DRA gRPC services: a thin surface that loops over claims and delegates.

`v1alpha3.Node` serves classic-DRA kubelets (1.27-1.31); `v1beta1.DRAPlugin` and `v1.DRAPlugin`
serve current ones. All three call the same `Preparer` (drasat.nodeplugin.state.DeviceState);
only the response shapes differ. Per-claim failures go in the claim's `error`, never as a
whole-call gRPC error, and every claim of a request gets an entry in the response.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from drasat.nodeplugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1alpha3_pb2,
    dra_v1alpha3_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from drasat.nodeplugin.state import ClaimError, ClaimRef

log = logging.getLogger(__name__)


class Preparer(Protocol):
    def prepare(self, claim: ClaimRef) -> list[str]: ...

    def unprepare(self, claim: ClaimRef) -> None: ...


def prepare_claims(
    preparer: Preparer, claims: Iterable[ClaimRef]
) -> dict[str, tuple[list[str], str]]:
    """uid -> (CDI device ids, error) for every claim; errors never escape."""
    results: dict[str, tuple[list[str], str]] = {}
    for claim in claims:
        if claim.uid in results:
            continue
        try:
            results[claim.uid] = (preparer.prepare(claim), "")
        except ClaimError as error:
            log.warning("prepare %s failed: %s", claim, error)
            results[claim.uid] = ([], str(error))
        except Exception as error:  # a bug must not fail the other claims of the call
            log.exception("prepare %s: internal error", claim)
            results[claim.uid] = ([], f"internal error preparing {claim}: {error!r}")
    return results


def unprepare_claims(preparer: Preparer, claims: Iterable[ClaimRef]) -> dict[str, str]:
    """uid -> error ("" when done) for every claim."""
    results: dict[str, str] = {}
    for claim in claims:
        if claim.uid in results:
            continue
        try:
            preparer.unprepare(claim)
            results[claim.uid] = ""
        except ClaimError as error:
            log.warning("unprepare %s failed: %s", claim, error)
            results[claim.uid] = str(error)
        except Exception as error:
            log.exception("unprepare %s: internal error", claim)
            results[claim.uid] = f"internal error unpreparing {claim}: {error!r}"
    return results


def _refs(claims: Iterable[Any]) -> list[ClaimRef]:
    return [
        ClaimRef(
            uid=c.uid,
            namespace=c.namespace,
            name=c.name,
            resource_handle=getattr(c, "resource_handle", ""),
        )
        for c in claims
    ]


class NodeV1alpha3(dra_v1alpha3_pb2_grpc.NodeServicer):
    """`v1alpha3.Node` for classic DRA: CDI device names per claim."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(
        self, request: dra_v1alpha3_pb2.NodePrepareResourcesRequest, context: Any
    ) -> dra_v1alpha3_pb2.NodePrepareResourcesResponse:
        response = dra_v1alpha3_pb2.NodePrepareResourcesResponse()
        for uid, (ids, error) in prepare_claims(self.preparer, _refs(request.claims)).items():
            response.claims[uid].cdi_devices.extend(ids)
            response.claims[uid].error = error
        return response

    def NodeUnprepareResources(
        self, request: dra_v1alpha3_pb2.NodeUnprepareResourcesRequest, context: Any
    ) -> dra_v1alpha3_pb2.NodeUnprepareResourcesResponse:
        response = dra_v1alpha3_pb2.NodeUnprepareResourcesResponse()
        for uid, error in unprepare_claims(self.preparer, _refs(request.claims)).items():
            response.claims[uid].error = error
        return response


class _DraPlugin:
    """`DRAPlugin` (v1beta1 and v1 share the shape): one Device per claim, in this node's pool."""

    pb2: Any

    def __init__(self, preparer: Preparer, *, pool: str) -> None:
        self.preparer = preparer
        self.pool = pool

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = self.pb2.NodePrepareResourcesResponse()
        for uid, (ids, error) in prepare_claims(self.preparer, _refs(request.claims)).items():
            entry = response.claims[uid]
            entry.error = error
            if not error:
                entry.devices.add(pool_name=self.pool, device_name=uid, cdi_device_ids=ids)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = self.pb2.NodeUnprepareResourcesResponse()
        for uid, error in unprepare_claims(self.preparer, _refs(request.claims)).items():
            response.claims[uid].error = error
        return response


class DraPluginV1beta1(_DraPlugin, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    pb2 = dra_v1beta1_pb2


class DraPluginV1(_DraPlugin, dra_v1_pb2_grpc.DRAPluginServicer):
    pb2 = dra_v1_pb2


def add_services(server: Any, preparer: Preparer, *, pool: str) -> None:
    """Serve all three DRA service versions on one gRPC server (the kubelet picks one)."""
    add_v1alpha3: Any = dra_v1alpha3_pb2_grpc.add_NodeServicer_to_server
    add_v1beta1: Any = dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server
    add_v1: Any = dra_v1_pb2_grpc.add_DRAPluginServicer_to_server
    add_v1alpha3(NodeV1alpha3(preparer), server)
    add_v1beta1(DraPluginV1beta1(preparer, pool=pool), server)
    add_v1(DraPluginV1(preparer, pool=pool), server)
