"""drasat's Helm chart on the real control plane: `helm template` of it for a Kubernetes version,
and `kubectl apply` of the objects (the helm and kubectl of the helm/kubectl wheel)."""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Sequence
from typing import Any

import yaml
from helm_binary import helm_path, kubectl_path
from kubecluster import kubectl_env

from drasat.testbed.controlplane import realcluster

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "drasat"
VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"  # served from 1.30
Manifest = dict[str, Any]


def render(
    namespace: str,
    kube_version: str,
    values: Manifest | None = None,
    tmp: pathlib.Path | None = None,
    api_versions: Sequence[str] = (VAP,),
) -> list[Manifest]:
    """`helm template` of the chart (release `drasat`) for a cluster of `kube_version` that
    serves `api_versions` (by default ValidatingAdmissionPolicy, GA since 1.30: helm's own
    list names group/versions only, not kinds), with `values` (written into `tmp`) if given."""
    command = [
        str(helm_path()), "template", "drasat", str(CHART), "--namespace", namespace,
        "--kube-version", kube_version,
    ]  # fmt: skip
    for api in api_versions:
        command += ["--api-versions", api]
    if values is not None:
        assert tmp is not None, "values need a tmp dir"
        values_file = tmp / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        command += ["--values", str(values_file)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def kubectl_apply(
    kube_cluster: realcluster.Cluster,
    namespace: str,
    manifests: list[Manifest],
    cache: pathlib.Path,
    *flags: str,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`kubectl apply <flags> -n <namespace> -f -` of `manifests` in one go, as the cluster
    administrator, with kubectl's discovery cache in `cache`."""
    return subprocess.run(
        [str(kubectl_path()), "apply", *flags, "-n", namespace, "-f", "-"],
        input="\n---\n".join(json.dumps(m) for m in manifests),
        env={**kubectl_env(kube_cluster), "KUBECACHEDIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def discovered_api_versions(kube_cluster: realcluster.Cluster, cache: pathlib.Path) -> list[str]:
    """What helm's Capabilities.APIVersions holds for this cluster on `helm install`: every
    served group/version, and every group/version/Kind of its top-level resources."""
    env = {**kubectl_env(kube_cluster), "KUBECACHEDIR": str(cache)}
    kubectl = str(kubectl_path())
    versions = subprocess.run(
        [kubectl, "api-versions"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    out = list(versions)
    for group_version in versions:
        path = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
        listed = subprocess.run(
            [kubectl, "get", "--raw", path],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        for resource in json.loads(listed)["resources"]:
            if "/" not in resource["name"]:  # subresources are not kinds of their own
                out.append(f"{group_version}/{resource['kind']}")
    return sorted(set(out))


def account_kubeconfig(
    kube_cluster: realcluster.Cluster, token: str, path: pathlib.Path
) -> pathlib.Path:
    """A kubeconfig at `path` for the cluster's server and CA that authenticates with `token` (a
    ServiceAccount's): a drasat process started with it has exactly the RBAC that account has."""
    admin = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    context = {"cluster": admin["clusters"][0]["name"], "user": "account"}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": admin["clusters"][:1],
                "users": [{"name": "account", "user": {"token": token}}],
                "contexts": [{"name": "account", "context": context}],
                "current-context": "account",
            }
        )
    )
    return path
