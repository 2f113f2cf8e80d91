"""`drasat policy`: validate AllocationPolicy files, print their JSON schema, show shipped ones,
print one as the Helm chart's values.

`validate` checks every file it is given and reports each one (ok with a summary, or the one-line
error naming the file and key path); it exits 2 when any file is bad, so CI can gate on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from drasat import loading, policyfiles
from drasat.api import schemas
from drasat.api.inputerrors import InputError
from drasat.cli import colour


def schema_text() -> str:
    """The AllocationPolicy JSON schema as the checked-in file spells it. Pure."""
    return json.dumps(schemas.allocation_policy(), indent=2) + "\n"


def _validate(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        try:
            policy = policyfiles.load(path)
        except InputError as error:
            print(f"{colour.paint('error:', 'error', sys.stderr)} {error}", file=sys.stderr)
            failed = True
        else:
            ok = colour.paint("ok", "ok", sys.stdout)
            print(f"{path}: {ok} ({policyfiles.summary(policy)})")
    return 2 if failed else 0


def _schema(args: argparse.Namespace) -> int:
    print(schema_text(), end="")
    return 0


def _list(args: argparse.Namespace) -> int:
    for name in policyfiles.shipped_names():
        print(f"{name}: {policyfiles.summary(policyfiles.shipped(name))}")
    return 0


def _show(args: argparse.Namespace) -> int:
    print(policyfiles.shipped_text(args.name), end="")
    return 0


def values_text(source: str) -> str:
    """A Helm values file that installs the policy in `source` (a file, '-' for stdin, or a
    shipped name) with the chart: `policy: {spec: ...}`, the spec as the file spells it."""
    if source == "-":
        text, where = sys.stdin.read(), "<stdin>"
    elif Path(source).is_file():
        text, where = Path(source).read_text(encoding="utf-8"), source
    elif "/" in source or source.endswith((".yaml", ".yml")):
        raise InputError(f"{source}: no such file")
    else:
        text, where = policyfiles.shipped_text(source), f"<embedded>/policies/{source}.yaml"
    policy = policyfiles.from_text(text, source=where)  # refuses what the controller would
    (document,) = loading.parse_documents(text, where)
    header = (
        f"# Helm values: the AllocationPolicy {policy.metadata.name!r} ({where}) for the chart:\n"
        "#   helm upgrade drasat deploy/helm/drasat -n drasat --reuse-values -f THIS-FILE\n"
    )
    body = {"policy": {"spec": document.data.get("spec") or {}}}
    return header + yaml.safe_dump(body, sort_keys=False, width=100)


def _values(args: argparse.Namespace) -> int:
    print(values_text(args.policy), end="")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "policy",
        help="validate allocation policies, print their schema, show the shipped ones",
        description="Work with AllocationPolicy files (policy.drasat.io/v1alpha1).",
    )
    parser.set_defaults(func=lambda _: _usage(parser))
    actions = parser.add_subparsers(dest="action", metavar="ACTION")

    validate = actions.add_parser(
        "validate",
        help="check policy files; exit 2 if any is bad",
        description="Load and validate each file; print `FILE: ok (...)` or the error naming "
        "the file and key path. Exit 2 if any file is bad.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="policy YAML file ('-': stdin)")
    validate.set_defaults(func=_validate)

    schema = actions.add_parser("schema", help="print the AllocationPolicy JSON schema")
    schema.set_defaults(func=_schema)

    listing = actions.add_parser("list", help="list the policies shipped with drasat")
    listing.set_defaults(func=_list)

    values = actions.add_parser(
        "values",
        help="print a policy as Helm values for the chart (policy: {spec: ...})",
        description="Validate the policy and print it as a values file of the Helm chart "
        "(`policy: {spec: ...}`), to install with `helm install/upgrade ... -f FILE`.",
    )
    values.add_argument(
        "policy", metavar="FILE|NAME", help="a policy file ('-': stdin) or a shipped name"
    )
    values.set_defaults(func=_values)

    show = actions.add_parser("show", help="print a shipped policy (e.g. to start your own)")
    show.add_argument("name", metavar="NAME", help="a name from `drasat policy list`")
    show.set_defaults(func=_show)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
