"""`drasat explain POD -n NS` (`-n`/`--namespace`: the pod's, as in kubectl): drasat's
controller's own decision on a pod (current Kubernetes, resource.k8s.io/v1), or exactly why there
is none, and, labelled apart, what its allocation would do now. Reads the cluster, writes nothing.
Exit 1 when the pod does not exist or the cluster cannot be read."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from drasat.cli import colour
from drasat.cli.envflags import env as _env
from drasat.cli.envflags import flag, kubeconfig_flag

HELP = "show drasat's controller's decision on a pod, or why there is none (v1)"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help=HELP,
        description="Print the decision drasat's controller recorded for a pending pod (its "
        "NotAllocatable event: the text, the cycle, its age, the policy and mode) and whether "
        "what it was decided from changed since; for a bound pod where its claims are and who "
        "allocated them. When no decision is recorded, or it is stale, a second part, labelled "
        "as a what-if, runs the controller's allocation against the live cluster, read-only. "
        "The policy and mode flags read the same DRASAT_* variables as `drasat controller`.",
    )
    p.add_argument("pod", help="the pod's name")
    # -n/--namespace is the pod's, as in kubectl; drasat's own namespace has its own flag.
    p.add_argument(
        "-n",
        "--namespace",
        help="the pod's namespace (default, as kubectl: the kubeconfig context's, else default)",
    )
    kubeconfig_flag(p)
    p.add_argument(
        "--drasat-namespace",
        default=_env("NAMESPACE", "drasat"),
        help="drasat's namespace (its NodeAllocationStates, Lease, policy; default drasat)",
    )
    source = p.add_mutually_exclusive_group()
    flag(
        source,
        "--policy-file",
        None,
        "the controller's AllocationPolicy file, for the what-if (default: the ConfigMap "
        "its decision names, else the default policy)",
    )
    flag(
        source,
        "--policy-configmap",
        None,
        "ConfigMap (in --drasat-namespace) holding the controller's policy, for the what-if",
    )
    flag(
        p,
        "--policy-key",
        "policy.yaml",
        "key of the policy in the ConfigMap (default policy.yaml)",
    )
    flag(
        p,
        "--cycle-mode",
        None,
        "solver mode of the what-if (default: the recorded decision's, else online)",
        choices=["online", "batch"],
    )
    flag(
        p,
        "--leader-election-lease",
        "drasat-controller",
        "the controller's Lease, to tell whether one runs (default drasat-controller)",
    )
    flag(
        p,
        "--batch-max",
        64,
        "most pending pods the what-if places together, as the controller (default 64)",
        type=int,
    )
    flag(
        p,
        "--driver",
        "gpu.drasat.io",
        "the drivers whose classes the controller allocates, as its own --driver "
        "(gpu.drasat.io, gpu.nvidia.com, or both comma-separated; default gpu.drasat.io)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from drasat.controller import drivers, explain
    from drasat.kube import errors
    from drasat.kube.client import KubeClient, default_namespace, load_configuration

    api = KubeClient(load_configuration(args.kubeconfig))
    options = explain.Options(
        namespace=args.drasat_namespace,
        policy_file=args.policy_file,
        policy_configmap=args.policy_configmap,
        policy_key=args.policy_key,
        mode=args.cycle_mode,
        lease=args.leader_election_lease,
        batch_max=args.batch_max,
        drivers=drivers.parse([args.driver]),
    )
    error_label = colour.paint("error:", "error", sys.stderr)
    try:
        namespace = args.namespace or default_namespace(args.kubeconfig)
        verdict, *rest = explain.explain(api, namespace, args.pod, options=options).split("\n")
        print("\n".join([colour.paint(verdict, "bold", sys.stdout), *rest]))
    except explain.PodNotFound as error:
        print(f"{error_label} {error}", file=sys.stderr)
        return 1
    except errors.KubeError as error:
        print(f"{error_label} cannot read the cluster: {error}", file=sys.stderr)
        return 1
    finally:
        api.close()
    return 0
