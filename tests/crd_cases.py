"""What drasat's CRDs must accept and reject: one table for every backend that checks them.

`tests/test_crds.py` checks these cases against the generated schemas with a JSON-schema validator
and cel-python; `tests/e2e/test_e2e_crds.py` sends the same objects to the simulated API server
and to the real kube-apiserver v1.37. A case added here is checked everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from drasat.api.claims import GpuClaimParametersSpec, MigDeviceClaimParametersSpec
from drasat.api.sharing import GpuShare, GpuSharing, TimeSlicingConfig

Schema = dict[str, Any]

GROUP_VERSION = "gpu.drasat.io/v1alpha1"
NAS_GROUP_VERSION = "nas.gpu.drasat.io/v1alpha1"

#: kind -> (API group, version, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, str, bool]] = {
    "GpuClaimParameters": ("gpu.drasat.io", "v1alpha1", "gpuclaimparameters", True),
    "MigDeviceClaimParameters": ("gpu.drasat.io", "v1alpha1", "migdeviceclaimparameters", True),
    "DeviceClassParameters": ("gpu.drasat.io", "v1alpha1", "deviceclassparameters", False),
    "NodeAllocationState": ("nas.gpu.drasat.io", "v1alpha1", "nodeallocationstates", True),
}

# --- objects every backend accepts -----------------------------------------------------------

GPU_CLAIM: Schema = {
    "apiVersion": GROUP_VERSION,
    "kind": "GpuClaimParameters",
    "metadata": {"name": "training", "namespace": "ml"},
    "spec": {
        "count": 2,
        "selector": {
            "andExpression": [
                {"productName": "*a100*"},
                {
                    "orExpression": [
                        {"memory": {"value": "40Gi", "operator": "GreaterThanOrEqualTo"}},
                        {"cudaComputeCapability": {"value": "9.0"}},
                    ]
                },
            ]
        },
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
        "topology": {"sameNVLinkDomain": "Required"},
    },
}

SAMPLES: list[Schema] = [
    GPU_CLAIM,
    {
        "apiVersion": GROUP_VERSION,
        "kind": "GpuClaimParameters",
        "metadata": {"name": "half"},
        "spec": {"share": {"compute": 50, "memory": "8Gi"}, "optional": True},
    },
    {
        "apiVersion": GROUP_VERSION,
        "kind": "MigDeviceClaimParameters",
        "metadata": {"name": "small"},
        "spec": {"profile": "1g.5gb", "gpuClaimName": "parent"},
    },
    {
        "apiVersion": GROUP_VERSION,
        "kind": "MigDeviceClaimParameters",
        "metadata": {"name": "by-needs"},
        "spec": {"memory": 10737418240, "computeSlices": 2},
    },
    {
        "apiVersion": GROUP_VERSION,
        "kind": "DeviceClassParameters",
        "metadata": {"name": "gpu.drasat.io"},
        "spec": {"sharable": False},
    },
]

# --- objects every backend rejects, naming the field ---------------------------------------------

_NAS_GPU: Schema = {"gpu": {"index": 0, "uuid": "GPU-0", "memoryBytes": 1, "productName": "T4"}}


@dataclass(frozen=True)
class BadObject:
    """An object the CRD schema rejects. `body` holds its fields besides apiVersion, kind and
    metadata; `field` is the path the API server names (`spec.devices[0]`); `schema_error` is the
    start of the JSON-schema validator's message about that field."""

    id: str
    kind: str
    body: Schema
    field: str
    schema_error: str

    def object(self, name: str = "bad", namespace: str | None = None) -> Schema:
        group, version, _, _ = RESOURCES[self.kind]
        metadata: Schema = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        head = {"apiVersion": f"{group}/{version}", "kind": self.kind, "metadata": metadata}
        return head | self.body

    @property
    def dotted_field(self) -> str:
        """`field` as the JSON-schema validator's path joined by dots (`spec.devices.0`)."""
        return re.sub(r"\[(\d+)\]", r".\1", self.field)


# Each case guards one structural rule the API server enforces for us.
BAD_OBJECTS: list[BadObject] = [
    BadObject(
        "count-string",
        "GpuClaimParameters",
        {"spec": {"count": "two"}},
        "spec.count",
        "'two' is not of type 'integer'",
    ),
    BadObject(
        "count-zero",
        "GpuClaimParameters",
        {"spec": {"count": 0}},
        "spec.count",
        "0 is less than the minimum of 1",
    ),
    BadObject(
        "unknown-strategy",
        "GpuClaimParameters",
        {"spec": {"sharing": {"strategy": "Fair"}}},
        "spec.sharing.strategy",
        "'Fair'",
    ),
    BadObject(
        "fractional-memory",
        "GpuClaimParameters",
        {"spec": {"share": {"memory": 1.5}}},
        "spec.share.memory",
        "1.5",
    ),
    BadObject(
        "selector-two-properties",
        "GpuClaimParameters",
        {"spec": {"selector": {"productName": "*", "index": 0}}},
        "spec.selector",
        "{'productName': '*', 'index': 0} has too many properties",
    ),
    BadObject(
        "compute-slices-8",
        "MigDeviceClaimParameters",
        {"spec": {"computeSlices": 8}},
        "spec.computeSlices",
        "8 is greater",
    ),
    BadObject(
        "sharable-string",
        "DeviceClassParameters",
        {"spec": {"sharable": "yes"}},
        "spec.sharable",
        "'yes' is not of type",
    ),
    BadObject(
        "nas-status-object",
        "NodeAllocationState",
        {"status": {"phase": "Ready"}},
        "status",
        "{'phase': 'Ready'} is not of type 'string'",
    ),
    BadObject(
        "nas-device-gpu-and-mig",
        "NodeAllocationState",
        {
            "spec": {
                "allocatableDevices": [
                    _NAS_GPU
                    | {"mig": {"profile": "1g.5gb", "parentProductName": "x", "placements": []}}
                ]
            }
        },
        "spec.allocatableDevices[0]",
        "{'gpu': ",
    ),
]

#: NodeAllocationStates the schema accepts (the good sides of the NAS cases above).
NAS_SAMPLES: list[Schema] = [
    {"apiVersion": NAS_GROUP_VERSION, "kind": "NodeAllocationState", "status": "NotReady"},
    {
        "apiVersion": NAS_GROUP_VERSION,
        "kind": "NodeAllocationState",
        "spec": {"allocatableDevices": [_NAS_GPU]},
    },
]

# --- CEL rules (x-kubernetes-validations) ---------------------------------------------------------

RULE_MODELS: dict[str, type[BaseModel]] = {
    "GpuClaimParametersSpec": GpuClaimParametersSpec,
    "GpuShare": GpuShare,
    "MigDeviceClaimParametersSpec": MigDeviceClaimParametersSpec,
    "GpuSharing": GpuSharing,
    "TimeSlicingConfig": TimeSlicingConfig,
}

#: Where each rule's model sits in an object: (kind, path below the object's root).
RULE_SITES: dict[str, tuple[str, tuple[str, ...]]] = {
    "GpuClaimParametersSpec": ("GpuClaimParameters", ("spec",)),
    "GpuShare": ("GpuClaimParameters", ("spec", "share")),
    "MigDeviceClaimParametersSpec": ("MigDeviceClaimParameters", ("spec",)),
    "GpuSharing": ("GpuClaimParameters", ("spec", "sharing")),
    "TimeSlicingConfig": ("GpuClaimParameters", ("spec", "sharing", "timeSlicingConfig")),
}

#: Objects on both sides of each rule; pydantic decides which side.
RULE_SAMPLES: dict[str, list[Schema]] = {
    "GpuClaimParametersSpec": [
        {"count": 2, "share": {"compute": 50}},
        {"share": {"compute": 50}},
        {"count": 1, "share": {"memory": "1Gi"}},
        {"count": 3},
    ],
    "GpuShare": [{}, {"compute": 5}, {"memory": "1Gi"}, {"compute": 5, "memory": 1}],
    "MigDeviceClaimParametersSpec": [
        {},
        {"profile": "1g.5gb"},
        {"memory": "5Gi"},
        {"computeSlices": 1},
        {"profile": "1g.5gb", "memory": "5Gi"},
        {"profile": "1g.5gb", "computeSlices": 2},
        {"gpuClaimName": "parent"},
    ],
    "GpuSharing": [
        {},
        {"mpsConfig": {}},
        {"strategy": "MPS", "mpsConfig": {}},
        {"strategy": "MPS", "timeSlicingConfig": {}},
        {"timeSlicingConfig": {"timeSlice": "Long"}},
        {"strategy": "TimeSlicing", "mpsConfig": {}},
        {"strategy": "MPS"},
    ],
    "TimeSlicingConfig": [
        {},
        {"timeSlice": "Short", "interval": "Long"},
        {"timeSlice": "Short", "interval": "Short"},
        {"interval": "Medium"},
    ],
}


@dataclass(frozen=True)
class RuleCase:
    """One RULE_SAMPLES entry placed in a whole object; `message` is the model's complaint, or
    None when the model accepts it (then the CRD must too)."""

    id: str
    model: str
    sample: Schema
    kind: str
    field: str
    message: str | None

    def object(self, name: str = "rule", namespace: str | None = None) -> Schema:
        group, version, _, _ = RESOURCES[self.kind]
        _, path = RULE_SITES[self.model]
        value: Any = self.sample
        for step in reversed(path[1:]):
            value = {step: value}
        metadata: Schema = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        return {
            "apiVersion": f"{group}/{version}",
            "kind": self.kind,
            "metadata": metadata,
            path[0]: value,
        }


def rule_cases() -> list[RuleCase]:
    """Every RULE_SAMPLES entry with the model's verdict (its first error's message)."""
    from pydantic import ValidationError

    cases = []
    for model, samples in RULE_SAMPLES.items():
        kind, path = RULE_SITES[model]
        for number, sample in enumerate(samples):
            try:
                RULE_MODELS[model].model_validate(sample)
            except ValidationError as error:
                message: str | None = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
            else:
                message = None
            cases.append(
                RuleCase(f"{model}-{number}", model, sample, kind, ".".join(path), message)
            )
    return cases
