"""What the API server cannot decode, the what-if refuses in the server's words (exit 2, one
line): `cannot unmarshal string into Go struct field ExactDeviceRequest.spec.devices.requests.
exactly.count of type int64` where pydantic would say "Input should be a valid integer"
(`drasat.api.godecoding`). The words are kube-apiserver v1.37.2's (tests/whatif/decodingcases.py);
tests/whatif/test_whatif_apiserver_oracle.py asks the real server for them again."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

import decodingcases
import pytest
import yaml

from drasat import loading
from drasat.api import cluster
from drasat.api.inputerrors import InputError

if TYPE_CHECKING:
    from conftest import RunCli


@pytest.mark.parametrize("case", sorted(decodingcases.CASES))
def test_a_decoding_error_is_worded_as_the_api_server_words_it(
    case: str, run_cli: RunCli, tmp_path: pathlib.Path
) -> None:
    obj, words = decodingcases.CASES[case]
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    result = run_cli("-f", str(path))
    assert result.code == 2, result.out + result.err
    (line,) = result.err.splitlines()
    assert line.startswith(f"error: {path}: document 1: {obj['kind']} "), line
    assert line.endswith(f": {words}"), line


def test_drasats_own_kinds_keep_their_words() -> None:
    """Only Kubernetes' kinds are decoded by the API server: a compact Cluster (a file of the
    what-if's) still says what pydantic says."""
    document = loading.Document("c.yaml", 1, {
        "apiVersion": cluster.CLUSTER_API_VERSION, "kind": "Cluster", "metadata": {"name": "c"},
        "spec": {"nodes": [{"name": "n", "count": "two"}]},
    })  # fmt: skip
    with pytest.raises(InputError, match=r"spec\.nodes\[0\]\.count: Input should be a valid"):
        loading.validate(cluster.Cluster, document)


def test_fields_of_the_full_pod_spec_the_whatif_does_not_read_are_accepted(
    run_cli: RunCli, tmp_path: pathlib.Path
) -> None:
    """Only what the API server's structs lack is refused: a Deployment whose template uses
    fields the what-if's models do not read (probes, env, volumes, a security context, status)
    is placed as one without them."""
    container = {
        "name": "c", "image": "x", "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "livenessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 5},
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "securityContext": {"capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True},
        "volumeMounts": [{"name": "v", "mountPath": "/v"}],
    }  # fmt: skip
    spec = {
        "containers": [container], "restartPolicy": "Always",
        "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
    }  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "annotations": {"a": "b"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": spec}},
        "status": {"replicas": 0},
    }  # fmt: skip
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(deployment), encoding="utf-8")
    result = run_cli("-f", str(path))
    assert result.code == 0, result.out + result.err
