"""docs/OBJECTS.md lists exactly the fields of the api/ models; the deploy docs are linked."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml
from pydantic import BaseModel

from drasat.api import claims, cluster, deviceconfig, nas, policy, selectors, sharing

REPO = pathlib.Path(__file__).resolve().parents[2]
OBJECTS = REPO / "docs" / "OBJECTS.md"

#: Every model OBJECTS.md documents, by the heading of its table.
DOCUMENTED: tuple[type[BaseModel], ...] = (
    claims.GpuClaimParametersSpec,
    sharing.GpuShare,
    claims.Topology,
    selectors.GpuSelector,
    selectors.QuantityComparator,
    selectors.VersionComparator,
    sharing.GpuSharing,
    sharing.TimeSlicingConfig,
    sharing.MpsConfig,
    claims.MigDeviceClaimParametersSpec,
    claims.DeviceClassParametersSpec,
    nas.NodeAllocationStateSpec,
    nas.AllocatableDevice,
    nas.GpuInfo,
    nas.MigInfo,
    nas.MigPlacement,
    nas.AllocatedDevices,
    nas.ClaimInfo,
    nas.AllocatedGpus,
    nas.AllocatedMigDevices,
    nas.AllocatedMigDevice,
    nas.LifecycleStep,
    nas.PreparedDevices,
    nas.PreparedGpus,
    nas.PreparedMigDevices,
    nas.PreparedMigDevice,
    nas.OrphanMigDevice,
    policy.AllocationPolicySpec,
    policy.ObjectiveTerm,
    policy.WorkloadShape,
    policy.Rules,
    policy.Reservation,
    policy.NamespaceLimit,
    policy.AllowedProducts,
    policy.SolverBudget,
    policy.Lifecycle,
    policy.LifecycleAction,
    policy.Gangs,
    policy.Preemption,
    cluster.ClusterSpec,
    cluster.ClusterNode,
    cluster.ClusterGpus,
    deviceconfig.GpuConfig,
)


def documented_fields() -> dict[str, list[str]]:
    """`### Heading` -> the backticked names in the first column of the table under it."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in OBJECTS.read_text().splitlines():
        heading = re.match(r"^### (\w+)$", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
            continue
        row = re.match(r"^\| `(\w+)` \|", line)
        if row and current is not None:
            current.append(row.group(1))
    return sections


def _fields(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


@pytest.mark.parametrize("model", DOCUMENTED, ids=lambda m: m.__name__)
def test_objects_doc_lists_exactly_the_models_fields(model: type[BaseModel]) -> None:
    sections = documented_fields()
    assert model.__name__ in sections, f"docs/OBJECTS.md has no ### {model.__name__} table"
    assert sections[model.__name__] == _fields(model), (
        f"docs/OBJECTS.md ### {model.__name__} is out of date with the model"
    )


def test_objects_doc_documents_no_model_that_is_gone() -> None:
    assert set(documented_fields()) == {m.__name__ for m in DOCUMENTED}


@pytest.mark.parametrize("name", ["INSTALL.md", "OBJECTS.md", "TROUBLESHOOTING.md"])
def test_deploy_docs_exist_and_are_linked_from_the_readme(name: str) -> None:
    assert (REPO / "docs" / name).is_file()
    assert f"docs/{name}" in (REPO / "README.md").read_text()


def test_install_doc_uses_the_charts_real_values() -> None:
    # Every `--set key=...` the install guide shows is a key of values.yaml.
    values = yaml.safe_load((REPO / "deploy" / "helm" / "drasat" / "values.yaml").read_text())
    text = (REPO / "docs" / "INSTALL.md").read_text()
    keys = re.findall(r"--set(?:-string|-json|-file)? \"?([\w.]+)=", text)
    assert keys, "INSTALL.md shows no --set"
    for key in keys:
        if key.startswith("policy.spec."):
            # the AllocationPolicy's own spec (values.schema.json embeds its schema)
            model: type[BaseModel] = policy.AllocationPolicySpec
            *path, last = key.removeprefix("policy.spec.").split(".")
            for part in path:
                assert part in model.model_fields, f"INSTALL.md: --set {key}: no such field"
                model = model.model_fields[part].annotation  # type: ignore[assignment]
            assert last in model.model_fields, f"INSTALL.md: --set {key}: no such field"
            continue
        node = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, (
                f"INSTALL.md: --set {key}: no such value"
            )
            node = node[part]
