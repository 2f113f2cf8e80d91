"""`drasat` entry point: one subcommand per module of this package.

Exit codes: 0 ran, 1 ran but the job failed (e.g. --fail-on-unplaced), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Protocol

from drasat import __version__
from drasat.api.errors import InputError

#: Subcommand modules; each has `register(subparsers)` which sets `func` on its parser.
SUBCOMMANDS: tuple[str, ...] = ("controller", "crds", "demo", "nodeplugin", "policy", "whatif")


class _Handler(Protocol):
    def __call__(self, args: argparse.Namespace) -> int: ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drasat",
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"drasat.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    handler: _Handler | None = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
