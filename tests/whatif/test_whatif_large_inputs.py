"""What keeps the what-if's time linear at large inputs (issue 38, "bounded at any size"). No
timing here: the sizes are measured by bench.whatif_scale (docs/PERFORMANCE.md, "The batch solve
at large sizes"); these tests hold the mechanisms that the measurements rely on."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from drasat import loading
from drasat.cli import whatif as whatif_cli
from drasat.v1 import extended
from drasat.whatif import v1manifests

if TYPE_CHECKING:
    from conftest import RunCli


@pytest.fixture
def gc_threshold() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


@pytest.mark.usefixtures("gc_threshold")
def test_a_run_collects_young_and_middle_garbage_less_often_and_old_as_before(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    during: list[tuple[int, int, int]] = []
    run = whatif_cli._main

    def spied(*args: Any) -> int:
        during.append(gc.get_threshold())
        return run(*args)

    monkeypatch.setattr(whatif_cli, "_main", spied)
    result = run_cli("-o", "table")
    assert result.code == 0, result.err
    assert during == [(whatif_cli.YOUNG_COLLECTION_EVERY, whatif_cli.MIDDLE_COLLECTION_EVERY, 10)]
    assert whatif_cli.MIDDLE_COLLECTION_EVERY > 10
    # The process's own thresholds again once the run ends.
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.isenabled()


@pytest.mark.usefixtures("gc_threshold")
def test_a_failing_run_restores_the_collectors_thresholds(run_cli: RunCli) -> None:
    result = run_cli("-f", "no-such-file.yaml")
    assert result.code != 0
    assert gc.get_threshold() == (700, 10, 10)


def test_a_workloads_template_is_converted_once_for_all_its_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Replicas share their template's spec: converting `nvidia.com/gpu` once gives each the
    # same spec, and each still gets claims of its own.
    calls: list[str] = []
    convert = extended.convert

    def counted(spec: Any, *args: Any, **kwargs: Any) -> extended.Converted:
        calls.append(str(kwargs.get("where")))
        return convert(spec, *args, **kwargs)

    monkeypatch.setattr(extended, "convert", counted)
    documents = loading.parse_documents(DEPLOYMENT + "---" + POD, "app.yaml")
    workload = v1manifests.compile_v1(documents)
    # Only the template asks for `nvidia.com/gpu`: the pod, which does not, is not converted.
    assert calls == ["spec.template.spec"]
    assert len(workload.pods) == 4
    specs = {id(pod.instance.spec) for pod in workload.pods[:3]}
    assert len(specs) == 1
    claims = {claim.key for pod in workload.pods for _, claim in pod.claims}
    assert len(claims) == 4
    assert workload.pods[0].instance.spec.resourceClaims  # converted into a claim


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {namespace: ml, name: trainer}
spec:
  replicas: 3
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - {name: train, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
"""

POD = """
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: solo}
spec:
  containers: [{name: c, image: x, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: drasat-nvidia-com-gpu-1}]
"""
