"""`drasat explain POD -n NS`: why drasat's controller places a pod where it does, or nowhere
(current Kubernetes, resource.k8s.io/v1). Reads the cluster, writes nothing."""

from __future__ import annotations

import argparse
import os
from typing import Any

from drasat.cli.envflags import env as _env

HELP = "explain where drasat would place a pending pod's claims, or why nowhere (v1)"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help=HELP,
        description="Run drasat's allocation for one pending pod against the live cluster, "
        "read-only, and print where its claims would go or, naming requests, selectors and "
        "nodes, why they fit nowhere: the text of the controller's Warning event.",
    )
    p.add_argument("pod", help="the pod's name")
    p.add_argument("-n", "--pod-namespace", default="default", help="the pod's namespace")
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")),
        help="kubeconfig file (default: in-cluster config, else ~/.kube/config)",
    )
    p.add_argument(
        "--namespace",
        default=_env("NAMESPACE", "drasat"),
        help="drasat's namespace (its NodeAllocationStates; default drasat)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from drasat.controller import explain
    from drasat.kube.client import KubeClient, load_configuration

    api = KubeClient(load_configuration(args.kubeconfig))
    print(explain.explain(api, args.pod_namespace, args.pod, namespace=args.namespace))
    return 0
