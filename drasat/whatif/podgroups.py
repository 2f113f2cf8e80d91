"""The Workload API's PodGroups (`scheduling.k8s.io/v1beta1`) in `-f` manifests: the gangs pods
name with `spec.schedulingGroup.podGroupName` (`drasat.v1.gangs.member_of` reads them, as the
controller does).

A PodGroup's `spec.schedulingPolicy` holds exactly one of `gang` (with `minCount`, a positive
integer: how many of its pods are placed together) and `basic` (no gang), as the API server
requires; any other mistake is refused with the file, object and field. A field the API server's
PodGroup lacks is refused in its words (`knownfields`); the what-if reads no other field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from drasat import loading
from drasat.api.base import Object
from drasat.api.inputerrors import InputError
from drasat.whatif import apivalidation, knownfields
from drasat.whatif.manifestindex import DEFAULT_NAMESPACE, located

API_VERSION = "scheduling.k8s.io/v1beta1"
KIND = "PodGroup"

Obj = dict[str, Any]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class GangPolicy(_Open):
    minCount: StrictInt = Field(ge=1, description="How many of the group's pods go together.")


class SchedulingPolicy(_Open):
    gang: GangPolicy | None = None
    basic: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_policy(self) -> SchedulingPolicy:
        if (self.gang is None) == (self.basic is None):
            raise ValueError("exactly one of gang and basic must be set")
        return self


class PodGroupSpec(_Open):
    schedulingPolicy: SchedulingPolicy


class PodGroup(Object):
    spec: PodGroupSpec
    status: dict[str, Any] | None = None


@dataclass(frozen=True)
class Entry:
    """A checked PodGroup and where it was written."""

    document: loading.Document
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def is_pod_group(data: Obj) -> bool:
    return data.get("apiVersion") == API_VERSION and data.get("kind") == KIND


def checked(document: loading.Document) -> Entry:
    """The document's PodGroup. Raises InputError naming the file, object and field."""
    data = document.data
    metadata = data.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise InputError("metadata.name: missing", where=located(document, None))
    namespace = str(metadata.get("namespace") or DEFAULT_NAMESPACE)
    where = located(document, namespace)
    unknown = knownfields.unknown_fields(data)
    try:
        found = loading.validate(PodGroup, document)
    except InputError as error:
        # The API server decodes first: a value of the wrong type is its answer; an unknown
        # field comes before anything its validation would say.
        if not unknown or "cannot unmarshal" in error.detail:
            raise InputError(error.detail, where=where) from None
    if unknown:
        raise InputError(f"{unknown[0]}: {knownfields.message(unknown)}", where=where)
    problem = apivalidation.object_name_problem(data)
    if problem:
        raise InputError(problem, where=where)
    return Entry(document, namespace, found.metadata.name)
