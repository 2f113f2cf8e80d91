"""`drasat cdi-spec`: the CDI spec the node plugin writes for a claim of one device, without a
kubelet or a cluster (`drasat.nodeplugin.cdispec`: the plugin's own prepare, in a throw-away
folder).

On a GPU host (`--from-nvml`) only whole GPUs: preparing a MIG device would create one, and this
command changes nothing on real GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from drasat.api.inputerrors import InputError
from drasat.cli import colour
from drasat.cli.envflags import flag

HELP = "print the CDI spec the node plugin would write for a claim of one device"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cdi-spec",
        help=HELP,
        description="Prepare a claim of one device as the node plugin does (same code) and print "
        "the CDI spec it writes: the device's nodes and environment, and the driver's control "
        "nodes, libraries, binaries, firmware and hooks found under --driver-root.",
    )
    add = p.add_argument
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--simulate-gpus", metavar="SPEC", default="", help="a simulated fleet, e.g. '2xA100-40GB'"
    )
    source.add_argument(
        "--from-nvml", action="store_true", help="this host's GPUs through NVML (read-only)"
    )
    add(
        "--device",
        default="gpu-0",
        help="the device, as the ResourceSlices name it: gpu-<minor> or "
        "gpu-<minor>-mig-<profile>-<id>-<start> (simulated only; default gpu-0)",
    )
    flag(
        p,
        "--driver-root",
        "",
        "the driver's root (default: / with --from-nvml; with --simulate-gpus none, the "
        "spec carries device nodes and environment only, as the node plugin's)",
    )
    add("--dev-root", default="", help="the root of the dev/ nodes (default: the driver root)")
    add(
        "--proc-root",
        default="/proc",
        help="where driver/nvidia-caps/mig-minors is read (default /proc)",
    )
    add("--cdi-hook-path", default=None, help="nvidia-cdi-hook on the host ('': no hooks)")
    add("--cdi-mode", choices=["drasat", "toolkit"], default="drasat", help="(default drasat)")
    add("-o", "--output", choices=["json", "yaml"], default="json", help="format (default json)")
    p.set_defaults(func=run)


def _driver_root(args: argparse.Namespace) -> str:
    """The host install on a GPU host; none for a simulated fleet unless given (as the node
    plugin: the spec then carries the device nodes and environment only)."""
    return str(args.driver_root or ("/" if args.from_nvml else ""))


def spec(args: argparse.Namespace) -> dict[str, Any]:
    """The spec; InputError for bad input, DeviceError when NVML cannot be read."""
    from pathlib import Path

    from drasat.nodeplugin import cdi, cdispec, nvml, plugin, state
    from drasat.testbed import simnvml

    if not args.simulate_gpus and not args.from_nvml:
        raise InputError("give --simulate-gpus SPEC or, on a GPU host, --from-nvml")
    if args.from_nvml and cdispec.is_mig(args.device):
        raise InputError(
            f"--device {args.device}: preparing a MIG device would create it; with --from-nvml "
            "only whole GPUs (gpu-<minor>)"
        )
    for name, value in (("--driver-root", args.driver_root), ("--dev-root", args.dev_root)):
        if value and not Path(value).is_dir():
            raise InputError(f"{name} {value}: no such directory")
    if args.simulate_gpus:
        fleet = simnvml.SimulatedNvml(args.simulate_gpus)
        lib = nvml.NvmlDeviceLib(fleet, run=fleet.run)
    else:
        lib = nvml.NvmlDeviceLib()
    config = plugin.Config(
        node_name=cdispec.NODE,
        driver_root=_driver_root(args),
        dev_root=args.dev_root,
        proc_root=Path(args.proc_root),
        cdi_mode=cdi.CdiMode(args.cdi_mode),
        cdi_hook_path=cdi.HOOK_PATH if args.cdi_hook_path is None else args.cdi_hook_path,
    )
    try:
        return cdispec.prepare(args.device, lib=lib, config=config).spec
    except state.ClaimError as error:
        # "prepare <claim>: ..." or "claim <claim>: ...": the claim is this command's own
        message = str(error)
        for prefix in (f"prepare {cdispec.CLAIM}: ", f"claim {cdispec.CLAIM}: "):
            message = message.removeprefix(prefix)
        raise InputError(message) from None
    finally:
        lib.shutdown()


def run(args: argparse.Namespace) -> int:
    from drasat.nodeplugin.devicelib import DeviceError

    try:
        found = spec(args)
    except DeviceError as error:
        message = f"error: cannot read the GPUs through NVML ({error}); without GPUs, try "
        print(message + "--simulate-gpus", file=sys.stderr)
        return 1
    if not _driver_root(args) and args.cdi_mode == "drasat":
        from drasat.nodeplugin import cdi

        warning = colour.paint("warning:", "warning", sys.stderr)
        print(f"{warning} {cdi.undiscovered_driver_note(args.proc_root)}", file=sys.stderr)
    if args.output == "yaml":
        print(yaml.safe_dump(found, sort_keys=False, width=100), end="")
    else:
        print(json.dumps(found, indent=2))
    return 0
