"""Compile `-f` manifests into the solver's pods and claims.

Follows each pod's claims to their ResourceClaim (or makes one from its template, named
`<pod>-<podClaimName>` as the classic DRA controller did), the claim to its ResourceClass and
parameters, and the class to its DeviceClassParameters. Claims of other drivers' classes are listed
as ignored; broken references are InputErrors naming the document and field that holds them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from drasat import loading
from drasat.api import groups
from drasat.api.base import ObjectMeta
from drasat.api.claims import (
    DeviceClassParameters,
    GpuClaimParameters,
    GpuClaimParametersSpec,
    MigDeviceClaimParameters,
    MigDeviceClaimParametersSpec,
)
from drasat.api.inputerrors import InputError
from drasat.classic.params import gpu_demand, mig_demand
from drasat.solver.problem import ClaimRequest, PodRequest
from drasat.whatif import kinds, manifestindex, workloads
from drasat.whatif.manifestindex import Ignored
from drasat.whatif.workloads import FINISHED_PHASES, priority_of, resource_requests

#: Classes installed by the drasat Helm chart and by NVIDIA's, usable without a ResourceClass in
#: the manifests (their users rarely apply them by hand): class name -> driver name.
INSTALLED_CLASSES = {
    groups.DRIVER_NAME: groups.DRIVER_NAME,
    "gpu.nvidia.com": groups.NVIDIA_DRIVER_NAME,
    "mig.nvidia.com": groups.NVIDIA_DRIVER_NAME,
}


@dataclass(frozen=True)
class Claim:
    """A ResourceClaim of ours, resolved: the solver's request plus what output needs."""

    request: ClaimRequest
    class_name: str
    spec: kinds.ResourceClaimSpec
    metadata: ObjectMeta
    #: Name of the ResourceClaimTemplate it was made from, or None for a ResourceClaim.
    template: str | None = None
    #: Where its parameters (or, without parameters, the claim itself) were written.
    parameters_where: str = ""
    #: The pod a template claim belongs to (ownerReference), as `namespace/name`.
    owner_pod: str | None = None
    owner_pod_uid: str | None = None

    @property
    def key(self) -> str:
        return f"{self.request.namespace}/{self.request.name}"


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's spec.resourceClaims, resolved."""

    name: str
    claim: Claim


@dataclass(frozen=True)
class CompiledPod:
    pod: workloads.PodInstance
    claims: tuple[PodClaim, ...]
    priority: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    #: Why the pod cannot be placed whatever the solver does (e.g. a claim reserved by another
    #: pod that is not shareable); None: it goes to the solver.
    blocked: str | None = None
    #: Nodes its nodeName/nodeSelector allow; None: every node.
    candidate_nodes: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        return self.pod.key

    def request(self) -> PodRequest:
        return PodRequest(
            key=self.pod.key,
            namespace=self.pod.namespace,
            claims=tuple(c.claim.request for c in self.claims),
            priority=self.priority,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            candidate_nodes=self.candidate_nodes,
        )


@dataclass(frozen=True)
class Workload:
    pods: tuple[CompiledPod, ...]
    #: Every claim of ours used by some pod, once, in order of first use.
    claims: tuple[Claim, ...]
    ignored: tuple[Ignored, ...]

    def requests(self) -> tuple[PodRequest, ...]:
        """The pods the solver places (blocked pods are left out)."""
        return tuple(p.request() for p in self.pods if p.blocked is None)

    def users_of(self, claim: Claim) -> list[CompiledPod]:
        """The pods that use the claim, in input order."""
        return self._users.get(claim.key, [])

    @functools.cached_property
    def _users(self) -> dict[str, list[CompiledPod]]:
        users: dict[str, list[CompiledPod]] = {}
        for pod in self.pods:
            for key in dict.fromkeys(c.claim.key for c in pod.claims):
                users.setdefault(key, []).append(pod)
        return users


def compile_manifests(
    documents: Sequence[loading.Document],
    *,
    offered_profiles: frozenset[str] | None = None,
    existing_uids: Mapping[tuple[str, str], str] | None = None,
) -> Workload:
    """Pods and claims of the manifests, for the solver.

    offered_profiles: MIG profiles some GPU of the cluster offers; a MigDeviceClaimParameters
    asking for another one is an error (None: not checked). existing_uids: (namespace, name) ->
    uid of claims the cluster's NodeAllocationStates already hold, so a manifest without
    metadata.uid finds its allocation.
    """
    inv = manifestindex.build(documents)
    if offered_profiles is not None:
        _check_profiles(inv, offered_profiles)
    return _Compiler(inv, dict(existing_uids or {})).run()


def _check_profiles(inv: manifestindex.Inventory, offered: frozenset[str]) -> None:
    for entry in inv.parameters.values():
        obj = entry.obj
        profile = obj.spec.profile if isinstance(obj, MigDeviceClaimParameters) else None
        if profile is not None and profile not in offered:
            listed = ", ".join(sorted(offered)) or "none: no MIG-capable GPU in the cluster"
            raise InputError(
                f"spec.profile: no GPU in the cluster offers MIG profile {profile!r} "
                f"(offered: {listed})",
                where=entry.where(),
            )


@dataclass
class _Compiler:
    inv: manifestindex.Inventory
    existing_uids: dict[tuple[str, str], str]
    claims: dict[tuple[str, str], Claim | Ignored] = field(default_factory=dict)
    #: Non-shareable claim key -> the pod that holds it.
    reserved_by: dict[str, str] = field(default_factory=dict)
    ignored: list[Ignored] = field(default_factory=list)

    def run(self) -> Workload:
        self.ignored.extend(self.inv.ignored)
        for index, child in workloads.with_children(self.inv.workloads).items():
            parent = self.inv.workloads[index]
            what = manifestindex.located(parent.document, parent.namespace)
            self.ignored.append(
                Ignored(
                    parent.document.where,
                    what.removeprefix(f"{parent.document.where}: "),
                    f"its {child} is in the input and stands for its pods",
                )
            )
        for workload in self.inv.workloads:
            if isinstance(workload.obj, kinds.DaemonSet):
                document = workload.document
                what = manifestindex.located(document, workload.namespace)
                self.ignored.append(
                    Ignored(document.where, what.removeprefix(f"{document.where}: "),
                            "a DaemonSet's pods (one per node) are placed in v1 runs only")
                )  # fmt: skip
        pods = [self._pod(p) for p in workloads.expand(self.inv.workloads)]
        compiled = [p for p in pods if p is not None]
        used: dict[str, Claim] = {}
        for pod in compiled:
            for pod_claim in pod.claims:
                used.setdefault(pod_claim.claim.key, pod_claim.claim)
        for (namespace, name), entry in self.inv.claims.items():
            if (namespace, name) not in self.claims:
                reason = "used by no pod in the manifests"
                if entry.obj.spec.allocationMode is kinds.AllocationMode.Immediate:
                    reason += " (allocationMode Immediate: the what-if places the claims of pods)"
                self.ignored.append(
                    Ignored(entry.document.where, f"ResourceClaim {namespace}/{name}", reason)
                )
        return Workload(tuple(compiled), tuple(used.values()), tuple(self.ignored))

    # --- pods -------------------------------------------------------------------------------

    def _pod(self, pod: workloads.PodInstance) -> CompiledPod | None:
        if pod.phase in FINISHED_PHASES:
            self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", f"finished ({pod.phase})"))
            return None
        resolved: list[PodClaim] = []
        for index, entry in enumerate(pod.spec.resourceClaims):
            path = f"{pod.spec_path}.resourceClaims[{index}]"
            claim = self._pod_claim(pod, entry, path)
            if isinstance(claim, Ignored):
                self.ignored.append(
                    Ignored(pod.where, f"Pod {pod.key} claim {entry.name}", claim.reason)
                )
            else:
                resolved.append(PodClaim(entry.name, claim))
        if not resolved:
            self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", "uses no drasat GPU claim"))
            return None
        resolved = self._pair_mig_claims(pod, resolved)
        cpu, memory = resource_requests(pod)
        return CompiledPod(
            pod,
            tuple(resolved),
            priority=self._priority(pod),
            cpu_milli=cpu,
            memory_mib=memory,
            blocked=self._reserve(pod, resolved),
        )

    def _pod_claim(
        self, pod: workloads.PodInstance, entry: kinds.PodResourceClaim, path: str
    ) -> Claim | Ignored:
        ref_path, name = entry.reference()
        if not entry.from_template:
            key = (pod.namespace, name)
            if key not in self.claims:
                found = self.inv.claims.get(key)
                if found is None:
                    raise InputError(
                        f"{path}.{ref_path}: ResourceClaim {pod.namespace}/{name} is not in the "
                        "manifests",
                        where=pod.where,
                    )
                self.claims[key] = self._claim(found)
            return self.claims[key]
        template = self.inv.templates.get((pod.namespace, name))
        if template is None:
            raise InputError(
                f"{path}.{ref_path}: ResourceClaimTemplate {pod.namespace}/{name} is not in the "
                "manifests",
                where=pod.where,
            )
        return self._from_template(pod, entry.name, template)

    def _reserve(self, pod: workloads.PodInstance, claims: list[PodClaim]) -> str | None:
        for pod_claim in claims:
            claim = pod_claim.claim
            if claim.request.shareable:
                continue
            holder = self.reserved_by.setdefault(claim.key, pod.key)
            if holder != pod.key:
                return (
                    f"claim {claim.key} is not shareable (class {claim.class_name}) and is "
                    f"reserved for pod {holder}"
                )
        return None

    def _priority(self, pod: workloads.PodInstance) -> int:
        return priority_of(pod, self.inv.priority_classes)

    def _pair_mig_claims(
        self, pod: workloads.PodInstance, claims: list[PodClaim]
    ) -> list[PodClaim]:
        """Point each MIG claim's gpuClaimName at the ResourceClaim name of the pod's GPU claim.

        Users write the pod's claim name (`gpu`); the claim made from a template is `<pod>-gpu`,
        and the solver pairs claims by their ResourceClaim names.
        """
        # The pod's own claim names win over ResourceClaim names that happen to be equal.
        by_name: dict[str, Claim] = {c.claim.request.name: c.claim for c in claims}
        by_name.update({c.name: c.claim for c in claims})
        out: list[PodClaim] = []
        for pod_claim in claims:
            mig = pod_claim.claim.request.mig
            if mig is None or mig.gpu_claim_name is None:
                out.append(pod_claim)
                continue
            target = by_name.get(mig.gpu_claim_name)
            if target is None or target.request.gpu is None:
                raise InputError(
                    f"spec.gpuClaimName: pod {pod.key} has no GPU claim named "
                    f"{mig.gpu_claim_name!r} (its GPU claims: "
                    f"{', '.join(c.name for c in claims if c.claim.request.gpu) or 'none'})",
                    where=pod_claim.claim.parameters_where,
                )
            paired = replace(mig, gpu_claim_name=target.request.name)
            request = replace(pod_claim.claim.request, mig=paired)
            out.append(PodClaim(pod_claim.name, replace(pod_claim.claim, request=request)))
        return out

    # --- claims -----------------------------------------------------------------------------

    def _claim(self, entry: manifestindex.Entry[kinds.ResourceClaim]) -> Claim | Ignored:
        obj = entry.obj
        uid = obj.metadata.uid or self.existing_uids.get((entry.namespace, obj.metadata.name))
        return self._resolve(
            obj.spec,
            namespace=entry.namespace,
            name=obj.metadata.name,
            uid=workloads.object_uid("ResourceClaim", entry.namespace, obj.metadata.name, uid),
            metadata=obj.metadata,
            where=entry.where(),
            path="spec",
        )

    def _from_template(
        self,
        pod: workloads.PodInstance,
        pod_claim_name: str,
        template: manifestindex.Entry[kinds.ResourceClaimTemplate],
    ) -> Claim | Ignored:
        name = f"{pod.name}-{pod_claim_name}"
        given = template.obj.spec.metadata or ObjectMeta()
        metadata = given.model_copy(update={"name": name, "namespace": pod.namespace})
        uid = self.existing_uids.get((pod.namespace, name))
        resolved = self._resolve(
            template.obj.spec.spec,
            namespace=pod.namespace,
            name=name,
            uid=workloads.object_uid("ResourceClaim", pod.namespace, name, uid),
            metadata=metadata,
            where=template.where(),
            path="spec.spec",
        )
        if isinstance(resolved, Ignored):
            return resolved
        return replace(
            resolved, template=template.obj.metadata.name, owner_pod=pod.key, owner_pod_uid=pod.uid
        )

    def _resolve(
        self,
        spec: kinds.ResourceClaimSpec,
        *,
        namespace: str,
        name: str,
        uid: str,
        metadata: ObjectMeta,
        where: str,
        path: str,
    ) -> Claim | Ignored:
        class_name = spec.resourceClassName
        shareable = self._class_shareable(class_name, where=where, path=path)
        if isinstance(shareable, Ignored):
            return shareable
        gpu, mig, parameters_where = self._parameters(spec, namespace, where=where, path=path)
        request = ClaimRequest(
            uid=uid,
            namespace=namespace,
            name=name,
            gpu=gpu_demand(gpu) if gpu is not None else None,
            mig=mig_demand(mig) if mig is not None else None,
            shareable=shareable,
        )
        metadata = metadata.model_copy(update={"uid": uid, "namespace": namespace})
        return Claim(request, class_name, spec, metadata, parameters_where=parameters_where)

    def _class_shareable(self, class_name: str, *, where: str, path: str) -> bool | Ignored:
        entry = self.inv.classes.get(class_name)
        if entry is None:
            if class_name in INSTALLED_CLASSES:
                return True
            raise InputError(
                f"{path}.resourceClassName: ResourceClass {class_name!r} is not in the manifests",
                where=where,
            )
        rc = entry.obj
        if rc.driverName not in groups.DRIVER_NAMES:
            return Ignored(
                entry.document.where,
                f"ResourceClass {class_name}",
                f"class {class_name} is for driver {rc.driverName}, not drasat or NVIDIA's",
            )
        ref = rc.parametersRef
        if ref is None:
            return True
        found = self.inv.parameters.get((ref.apiGroup or "", ref.kind, "", ref.name))
        if ref.kind != groups.DEVICE_CLASS_PARAMETERS or found is None:
            raise InputError(
                f"parametersRef: {ref.kind} {ref.name} ({ref.apiGroup or 'core group'}) is not in "
                f"the manifests (a ResourceClass of ours refers to a "
                f"{groups.DEVICE_CLASS_PARAMETERS} of {' or '.join(groups.PARAMS_GROUPS)})",
                where=entry.where(),
            )
        assert isinstance(found.obj, DeviceClassParameters)
        return found.obj.spec.sharable

    def _parameters(
        self, spec: kinds.ResourceClaimSpec, namespace: str, *, where: str, path: str
    ) -> tuple[GpuClaimParametersSpec | None, MigDeviceClaimParametersSpec | None, str]:
        ref = spec.parametersRef
        if ref is None:
            return GpuClaimParametersSpec(), None, where  # no parameters: one whole GPU
        group = ref.apiGroup or ""
        claim_kinds = (groups.GPU_CLAIM_PARAMETERS, groups.MIG_DEVICE_CLAIM_PARAMETERS)
        if group not in groups.PARAMS_GROUPS or ref.kind not in claim_kinds:
            raise InputError(
                f"{path}.parametersRef: {ref.kind} of {group or 'the core group'} is not claim "
                f"parameters of ours (expected {' or '.join(claim_kinds)} of "
                f"{' or '.join(groups.PARAMS_GROUPS)})",
                where=where,
            )
        found = self.inv.parameters.get((group, ref.kind, namespace, ref.name))
        if found is None:
            raise InputError(
                f"{path}.parametersRef: {ref.kind} {namespace}/{ref.name} ({group}) is not in "
                "the manifests",
                where=where,
            )
        if isinstance(found.obj, GpuClaimParameters):
            return found.obj.spec, None, found.where()
        assert isinstance(found.obj, MigDeviceClaimParameters)
        return None, found.obj.spec, found.where()
