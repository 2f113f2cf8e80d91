"""The parts of built-in Kubernetes objects the what-if reads, as strict pydantic models.

Classic DRA objects (`resource.k8s.io/v1alpha2`) are modelled completely, so a mistyped field is
reported as `kubectl apply` would; pods and workloads only where claims and replicas live, other
fields (containers' images, volumes, …) pass through unchecked.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from drasat.api import limits
from drasat.api.base import Object, ObjectMeta, Spec


class Open(BaseModel):
    """A Kubernetes struct of which only some fields matter here; the rest are kept unchecked."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ParametersRef(Spec):
    apiGroup: str | None = Field(None, description="Group of the parameters object.")
    kind: str
    name: str
    namespace: str | None = Field(None, description="ResourceClass parameters only.")


class ResourceClass(Object):
    driverName: str
    parametersRef: ParametersRef | None = None
    suitableNodes: dict[str, Any] | None = None
    structuredParameters: bool | None = None


class AllocationMode(StrEnum):
    WaitForFirstConsumer = "WaitForFirstConsumer"
    Immediate = "Immediate"


class ResourceClaimSpec(Spec):
    resourceClassName: str
    parametersRef: ParametersRef | None = None
    allocationMode: AllocationMode = AllocationMode.WaitForFirstConsumer


class ResourceClaim(Object):
    spec: ResourceClaimSpec
    status: dict[str, Any] | None = None


class ResourceClaimTemplateSpec(Spec):
    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(Object):
    spec: ResourceClaimTemplateSpec


class ClaimSource(Spec):
    resourceClaimName: str | None = None
    resourceClaimTemplateName: str | None = None


class PodResourceClaim(Spec):
    """A pod's claim entry: the pre-1.31 `source` form or the flat 1.31+ form."""

    name: str
    source: ClaimSource | None = None
    resourceClaimName: str | None = None
    resourceClaimTemplateName: str | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> PodResourceClaim:
        given = [v for v in self.references() if v[1] is not None]
        if len(given) != 1:
            raise ValueError(
                "a pod claim names exactly one of resourceClaimName or resourceClaimTemplateName "
                "(directly or under source)"
            )
        return self

    def references(self) -> list[tuple[str, str | None]]:
        """(field path under this entry, value) of every way to name the claim."""
        source = self.source or ClaimSource()
        return [
            ("source.resourceClaimName", source.resourceClaimName),
            ("source.resourceClaimTemplateName", source.resourceClaimTemplateName),
            ("resourceClaimName", self.resourceClaimName),
            ("resourceClaimTemplateName", self.resourceClaimTemplateName),
        ]

    def reference(self) -> tuple[str, str]:
        """The one (field path, name) given; the path ends in Name or TemplateName."""
        path, value = next(v for v in self.references() if v[1] is not None)
        assert value is not None
        return path, value

    @property
    def from_template(self) -> bool:
        return self.reference()[0].endswith("TemplateName")


class ContainerClaim(Open):
    """One entry of a container's `resources.claims` (checked by `apivalidation`)."""

    go_struct: ClassVar[str] = "ResourceClaim"
    name: str | None = None
    request: str | None = None


class Resources(Open):
    go_struct: ClassVar[str] = "ResourceRequirements"
    #: Quantities as written: a number too (`cpu: 1.5`), as the server's decoder takes it.
    requests: dict[str, int | float | str] | None = None
    limits: dict[str, int | float | str] | None = None
    claims: list[ContainerClaim] | None = None


class Container(Open):
    name: str
    resources: Resources | None = None


class Toleration(Open):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    tolerationSeconds: int | None = None


class NodeSelectorRequirement(Open):
    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(Open):
    matchExpressions: list[NodeSelectorRequirement] | None = None
    matchFields: list[NodeSelectorRequirement] | None = None


class NodeSelector(Open):
    nodeSelectorTerms: list[NodeSelectorTerm] = Field(default_factory=list)


class NodeAffinity(Open):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(Open):
    """Only node affinity is read (the scheduler's filters, `drasat.api.nodefit`)."""

    nodeAffinity: NodeAffinity | None = None


class PodSpec(Open):
    go_ints: ClassVar[dict[str, str]] = {"priority": "int32"}
    containers: list[Container] = Field(default_factory=list)
    initContainers: list[Container] = Field(default_factory=list)
    resourceClaims: list[PodResourceClaim] = Field(
        default_factory=list, max_length=limits.MAX_CLAIMS_PER_POD
    )
    priority: StrictInt | None = None
    priorityClassName: str | None = None
    nodeName: str | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: Affinity | None = None


class Pod(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: PodSpec
    status: dict[str, Any] | None = None


class PodTemplate(Open):
    go_struct: ClassVar[str] = "PodTemplateSpec"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec


class ReplicatedSpec(Open):
    go_struct: ClassVar[str] = "{kind}Spec"  # DeploymentSpec, ReplicaSetSpec, StatefulSetSpec
    go_ints: ClassVar[dict[str, str]] = {"replicas": "int32"}
    """Deployment, ReplicaSet and StatefulSet: `replicas` copies of the template."""

    replicas: StrictInt = Field(1, ge=0, le=limits.MAX_PODS)
    template: PodTemplate


class JobSpec(Open):
    go_ints: ClassVar[dict[str, str]] = {"parallelism": "int32", "completions": "int32"}
    """Job: `parallelism` pods at once, never more than `completions`."""

    parallelism: StrictInt = Field(1, ge=0, le=limits.MAX_PODS)
    completions: StrictInt | None = Field(None, ge=0, le=limits.MAX_PODS)
    template: PodTemplate


class ReplicatedWorkload(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: ReplicatedSpec
    status: dict[str, Any] | None = None


class Job(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: JobSpec
    status: dict[str, Any] | None = None


class DaemonSetSpec(Open):
    """DaemonSet: one pod of the template on each node it matches (`workloads`)."""

    template: PodTemplate


class DaemonSet(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: DaemonSetSpec
    status: dict[str, Any] | None = None


class PriorityClass(Object):
    value: StrictInt
    globalDefault: bool | None = None
    description: str | None = None
    preemptionPolicy: str | None = None
