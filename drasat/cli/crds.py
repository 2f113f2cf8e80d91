"""`drasat crds`: the CustomResourceDefinitions generated from the API models, as YAML.

Prints them as one multi-document YAML stream, or with `--out DIR` writes one file per CRD (the
checked-in `deploy/crds/` and the Helm chart's `crds/` are written this way).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from drasat.api import crds
from drasat.api.inputerrors import InputError

HEADER = (
    "# Generated from the drasat.api models by `drasat crds`; do not edit by hand.\n"
    "# Regenerate with `make generate`.\n"
)


def render(crd: dict[str, Any]) -> str:
    """One CRD as a YAML document with the generated-file header. Pure."""
    body = yaml.safe_dump(crd, sort_keys=False, default_flow_style=False, width=100)
    return HEADER + body


def rendered_files() -> dict[str, str]:
    """File name -> YAML text of every CRD, as `--out` writes them. Pure."""
    return {crds.file_name(crd): render(crd) for crd in crds.all_crds()}


def write(directory: Path) -> list[Path]:
    """Write every CRD into `directory` (created if missing); returns the paths written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in rendered_files().items():
            path = directory / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", where=str(directory)) from None
    return written


def _run(args: argparse.Namespace) -> int:
    if args.out is None:
        print("---\n".join(rendered_files().values()), end="")
        return 0
    for path in write(Path(args.out)):
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "crds",
        help="print the CustomResourceDefinitions (generated from the API models)",
        description="Print drasat's CustomResourceDefinitions as multi-document YAML, or write "
        "one file per CRD into a directory.",
    )
    parser.add_argument(
        "--out", metavar="DIR", help="write <group>_<plural>.yaml files into DIR instead"
    )
    parser.set_defaults(func=_run)
