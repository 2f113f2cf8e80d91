"""`drasat resourceslices`: the ResourceSlices the node plugin would publish for this node, and
the DeviceClasses drasat ships, printed without a cluster.

Same code path as the plugin (`drasat.nodeplugin.slicepublisher`): the GPUs come from NVML on a GPU
host, or from a simulated fleet (`--simulate-gpus`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import yaml

from drasat.api.devicemodel import classes
from drasat.api.inputerrors import InputError
from drasat.cli.envflags import env as _env
from drasat.cli.envflags import env_flag as _env_flag

HELP = "print the ResourceSlices the node plugin would publish (resource.k8s.io/v1)"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "resourceslices",
        help=HELP,
        description="Print exactly the ResourceSlices the node plugin publishes for this node "
        "(resource.k8s.io/v1: whole GPUs, dynamic MIG placements with their counter sets, "
        "shares, the cpu-fallback device), from NVML or a simulated fleet, without a cluster.",
    )
    add = p.add_argument
    add(
        "--node-name",
        default=_env("NODE_NAME", os.environ.get("NODE_NAME", "")),
        help="the node (and pool) name (default: $NODE_NAME)",
    )
    add(
        "--simulate-gpus",
        default=_env("SIMULATE_GPUS", ""),
        metavar="SPEC",
        help="a simulated fleet instead of NVML, e.g. '2xA100-40GB,1xT4,mig=0+1'",
    )
    add("-o", "--output", choices=["yaml", "json"], default="yaml", help="format (default yaml)")
    add(
        "--shares",
        action=argparse.BooleanOptionalAction,
        default=_env_flag("SHARES", default=True),
        help="non-MIG GPUs as shareable devices (consumable capacity: memory, compute %%), as "
        "the plugin publishes them by default (--no-shares: whole GPUs only)",
    )
    add("--no-fallback", action="store_true", help="leave out the cpu-fallback device")
    add(
        "--with-classes",
        action="store_true",
        help="also print the DeviceClasses drasat ships (gpu, mig, cpu-fallback)",
    )
    p.set_defaults(func=run)


def objects(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The slices (and classes) to print; DeviceError when NVML cannot be read."""
    from drasat.nodeplugin import nvml, slicepublisher
    from drasat.testbed import simnvml

    if not args.node_name:
        raise InputError("--node-name (or $NODE_NAME) is required")
    if args.simulate_gpus:
        fleet = simnvml.SimulatedNvml(args.simulate_gpus)
        lib = nvml.NvmlDeviceLib(fleet, run=fleet.run)
    else:
        lib = nvml.NvmlDeviceLib()
    try:
        wanted = slicepublisher.inventory(lib, shares=args.shares, fallback=not args.no_fallback)
    finally:
        lib.shutdown()
    out = slicepublisher.desired(args.node_name, wanted)
    if args.with_classes:
        out = classes.device_classes() + out
    return out


def run(args: argparse.Namespace) -> int:
    from drasat.nodeplugin.devicelib import DeviceError

    try:
        found = objects(args)
    except DeviceError as error:
        print(
            f"error: cannot read the GPUs through NVML ({error}); without GPUs, try "
            "--simulate-gpus",
            file=sys.stderr,
        )
        return 1
    if args.output == "json":
        body = found[0] if len(found) == 1 else {"apiVersion": "v1", "kind": "List", "items": found}
        print(json.dumps(body, indent=2))
    else:
        print(
            yaml.safe_dump_all(found, sort_keys=False, default_flow_style=False, width=100), end=""
        )
    return 0
