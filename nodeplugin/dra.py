"""The kubelet DRA gRPC services: a thin surface that loops over claims and delegates.

`v1alpha3.Node` serves classic-DRA kubelets (1.27-1.31): the claim's allocation is in the NAS
(or its resource handle). `v1beta1.DRAPlugin` and `v1.DRAPlugin` serve current ones: the request
only names the claim, so its allocation results are read from the ResourceClaim and translated
(`v1claims.ClaimAllocations`), and the answer lists one Device per result, each with its own
CDI device (`<claim uid>-<device name>`, cdi.py); classic DRA answers the claim-wide one. All
three call the same `Preparer` (drasat.nodeplugin.state.DeviceState). Per-claim failures go in
the claim's `error`, never as a whole-call gRPC error, and every claim of a request gets an entry
in the response.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from drasat.nodeplugin.checkpoint import ClaimRecord
from drasat.nodeplugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1alpha3_pb2,
    dra_v1alpha3_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from drasat.nodeplugin.plan import DevicePlan
from drasat.nodeplugin.state import ClaimError, ClaimRef, check_ref
from drasat.nodeplugin.v1claims import ClaimAllocations, Result

log = logging.getLogger(__name__)

T = TypeVar("T")


class Preparer(Protocol):
    def prepare(
        self,
        claim: ClaimRef,
        plan: DevicePlan | None = None,
        devices: Mapping[str, Any] | None = None,
    ) -> list[str]: ...

    def prepared(self, uid: str) -> ClaimRecord | None: ...

    def unprepare(self, claim: ClaimRef) -> None: ...


def _per_claim(
    claims: Iterable[ClaimRef], verb: str, action: Callable[[ClaimRef], T]
) -> dict[str, tuple[T | None, str]]:
    """uid -> (what `action` returned, "") or (None, error) for every claim, each once; errors
    never escape (a bug in one claim must not fail the other claims of the call)."""
    results: dict[str, tuple[T | None, str]] = {}
    for claim in claims:
        if claim.uid in results:
            continue
        try:
            results[claim.uid] = (action(claim), "")
        except ClaimError as error:
            log.warning("%s %s failed: %s", verb, claim, error)
            results[claim.uid] = (None, str(error))
        except Exception as error:
            log.exception("%s %s: internal error", verb, claim)
            results[claim.uid] = (None, f"internal error {verb[:-1]}ing {claim}: {error!r}")
    return results


def prepare_claims(
    preparer: Preparer, claims: Iterable[ClaimRef]
) -> dict[str, tuple[list[str], str]]:
    """uid -> (CDI device ids, error) for every claim; errors never escape."""
    done = _per_claim(claims, "prepare", preparer.prepare)
    return {uid: (ids or [], error) for uid, (ids, error) in done.items()}


def prepare_v1_claims(
    preparer: Preparer, allocations: ClaimAllocations, claims: Iterable[ClaimRef]
) -> dict[str, tuple[list[tuple[Result, list[str]]], str]]:
    """uid -> ((result, CDI device ids) per allocation result of ours, error) for every claim
    of a v1/v1beta1 request: the allocation read from the ResourceClaim, then prepared."""

    def prepare(claim: ClaimRef) -> list[tuple[Result, list[str]]]:
        check_ref(claim)  # before its name goes into an API request
        try:
            resolved = allocations.resolve(claim)
        except ClaimError as error:
            # A claim prepared here is answered from the checkpoint when its ResourceClaim
            # cannot be read (an API outage while the kubelet re-prepares after a restart).
            record = preparer.prepared(claim.uid)
            if record is None or not record.results():
                raise
            log.warning("prepare %s: %s; answered from the checkpoint", claim, error)
            results = [Result.of(r) for r in record.results()]
            return [(r, _ids_of(record, r, record.cdi_devices)) for r in results]
        ids = preparer.prepare(claim, resolved.plan, resolved.devices)
        prepared = preparer.prepared(claim.uid)
        return [(r, _ids_of(prepared, r, ids)) for r in resolved.results]

    done = _per_claim(claims, "prepare", prepare)
    return {uid: (devices or [], error) for uid, (devices, error) in done.items()}


def _ids_of(record: ClaimRecord | None, result: Result, claim_ids: list[str]) -> list[str]:
    """A result's CDI ids: its device's own (the kubelet gives a container the ids of the devices
    of the requests it names, and keys device health by each device's first id), else the
    claim's (a record from before devices had their own)."""
    own = record.device_cdi.get(result.device) if record is not None else None
    return list(own or claim_ids)


def unprepare_claims(preparer: Preparer, claims: Iterable[ClaimRef]) -> dict[str, str]:
    """uid -> error ("" when done) for every claim."""
    return {
        uid: error
        for uid, (_, error) in _per_claim(claims, "unprepare", preparer.unprepare).items()
    }


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
    """`DRAPlugin` (v1beta1 and v1 share the shape): the allocation from the ResourceClaim, one
    Device per allocation result of ours (request, pool, device, the device's own CDI ids)."""

    pb2: Any

    def __init__(self, preparer: Preparer, allocations: ClaimAllocations) -> None:
        self.preparer = preparer
        self.allocations = allocations

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = self.pb2.NodePrepareResourcesResponse()
        answers = prepare_v1_claims(self.preparer, self.allocations, _refs(request.claims))
        for uid, (devices, error) in answers.items():
            entry = response.claims[uid]
            entry.error = error
            for result, ids in devices:
                device = entry.devices.add(
                    # The base request, as the kubelet compares it with a container's
                    # `resources.claims[].request` (kubeletplugin's stripSubrequestNames).
                    request_names=[result.request.partition("/")[0]],
                    pool_name=result.pool,
                    device_name=result.device,
                    cdi_device_ids=ids,
                )
                if result.share_id and "share_id" in device.DESCRIPTOR.fields_by_name:
                    device.share_id = result.share_id  # v1 only: v1beta1's Device has none
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


def add_services(server: Any, preparer: Preparer, allocations: ClaimAllocations) -> None:
    """Serve all three DRA service versions on one gRPC server (the kubelet picks one)."""
    add_v1alpha3: Any = dra_v1alpha3_pb2_grpc.add_NodeServicer_to_server
    add_v1beta1: Any = dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server
    add_v1: Any = dra_v1_pb2_grpc.add_DRAPluginServicer_to_server
    add_v1alpha3(NodeV1alpha3(preparer), server)
    add_v1beta1(DraPluginV1beta1(preparer, allocations), server)
    add_v1(DraPluginV1(preparer, allocations), server)
