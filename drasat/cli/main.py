"""`drasat` entry point: one subcommand per module of this package.

Exit codes: 0 ran, 1 ran but the job failed (e.g. --fail-on-unplaced), 2 bad input or usage.

A subcommand's module is imported only when that subcommand runs: `drasat --help` and
`drasat policy ...` do not load the controller, the solver (OR-Tools), the Kubernetes client or
the simulators. The top-level help shows each subcommand's one-liner from `SUBCOMMANDS`, which a
test keeps equal to the help the module registers.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from drasat import __version__
from drasat.api.inputerrors import InputError
from drasat.cli import colour, started

#: Subcommand modules of drasat.cli -> their one-line help. Each module has
#: `register(subparsers)`, which adds its parser (with this help) and sets `func` on it.
SUBCOMMANDS: dict[str, str] = {
    "cdi-spec": "print the CDI spec the node plugin would write for a claim of one device",
    "completion": "print the shell completion script (bash, zsh or fish), made from the parser",
    "controller": "run the central controller (v1 or classic DRA)",
    "explain": "show drasat's controller's decision on a pod, or why there is none (v1)",
    "crds": "print the CustomResourceDefinitions (generated from the API models)",
    "demo": "run the whole system in one process on an example and watch it work",
    "mps-host": "run this node's MPS control daemons for the node plugin",
    "nodeplugin": "run the kubelet DRA plugin of this node",
    "policy": "validate allocation policies, print their schema, show the shipped ones",
    "resourceslices": "print the ResourceSlices the node plugin would publish (resource.k8s.io/v1)",
    "whatif": "place manifests on a cluster offline and show the result",
}


#: Subcommands whose process ends as soon as their output is written (command line only).
ENDS_WHEN_WRITTEN = frozenset({"whatif"})


class _Handler(Protocol):
    def __call__(self, args: argparse.Namespace) -> int: ...


def program_name(argv0: str) -> str:
    """How the usage lines name the command: `kubectl drasat` when kubectl runs this as its
    plugin (the executable `kubectl-drasat`), else `drasat`."""
    return "kubectl drasat" if Path(argv0).name.startswith("kubectl-drasat") else "drasat"


def build_parser(only: str | None = None, prog: str = "drasat") -> argparse.ArgumentParser:
    """The parser with every subcommand's full parser, or (`only`) with that one's full parser
    and a placeholder for the others (their modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="drasat: a Kubernetes DRA driver for NVIDIA GPUs whose allocator is a "
        "CP-SAT constraint solver.",
    )
    parser.add_argument("--version", action="version", version=f"drasat {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity (default: WARNING)",
    )
    parser.add_argument(
        "--color",
        default="auto",
        choices=["auto", "always", "never"],
        help="colour the output: auto (default) on a terminal unless NO_COLOR is set",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in SUBCOMMANDS.items():
        if only is None or name == only:
            module = importlib.import_module(f"drasat.cli.{name.replace('-', '')}")
            module.register(subparsers)
        else:
            subparsers.add_parser(name, help=text)
    return parser


#: The top-level options that take a value (in the next word unless given as --flag=value).
_VALUED = ("--log-level", "--color")


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv (the first word that is not an option or its value)."""
    words = iter(argv)
    for word in words:
        if any(len(word) > 3 and flag.startswith(word) for flag in _VALUED):  # prefixes too
            next(words, None)
        elif not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    # A command line's run counts from the process's start (Python's own start and the imports
    # included: `drasat whatif`'s time limit holds for all of it); a call from Python from here.
    started_at = started.process_started() if argv is None else time.monotonic()
    argv_given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    # Without a subcommand (--help, --version, usage errors) no subcommand module is needed.
    parser = build_parser(only=command or "", prog=program_name(sys.argv[0]))
    args = parser.parse_args(argv)
    args.started = started_at
    # Not under a profiler or tracer (cProfile, coverage): they write their results at exit.
    args.ends_when_written = (
        argv_given is None
        and command in ENDS_WHEN_WRITTEN
        and sys.getprofile() is None
        and sys.gettrace() is None
    )
    colour.choose(args.color)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    handler: _Handler | None = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = handler(args)
    except InputError as error:
        print(f"{colour.paint('error:', 'error', sys.stderr)} {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.ends_when_written:
        # Its output is written and nothing runs after it: the process ends now rather than
        # free the run's millions of objects one by one (its time limit holds to the end).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
