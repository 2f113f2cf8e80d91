"""Shared pydantic bases: strict specs (unknown fields rejected) and Kubernetes object metadata."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from drasat.api import limits


class Spec(BaseModel):
    """Base of every spec we own: unknown or mistyped fields are errors, not silently dropped."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, str_max_length=limits.MAX_STRING
    )

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict with the wire names, leaving out unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ObjectMeta(BaseModel):
    """The part of Kubernetes ObjectMeta drasat uses; other metadata fields are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str = Field("", max_length=limits.MAX_NAME, description="Object name.")
    namespace: str | None = Field(
        None, max_length=limits.MAX_NAMESPACE, description="Namespace of a namespaced object."
    )
    uid: str | None = Field(None, description="Unique id the API server assigned.")
    resourceVersion: str | None = Field(None, description="Optimistic-concurrency version.")
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    ownerReferences: list[dict[str, Any]] | None = None
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None


class Object(BaseModel):
    """Envelope of a Kubernetes object: apiVersion, kind, metadata."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    apiVersion: str = Field(description="Group/version, ours or NVIDIA's classic driver's.")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
