"""Flag defaults from the environment: every daemon flag `--some-flag` reads DRASAT_SOME_FLAG.

`flag` is the one way a subcommand adds such a flag, so the variable's name always follows the
flag's. The value stays a string, so argparse converts it with the flag's own `type` and a bad
value is a usage error naming the flag (exit 2), not a traceback while the parser is built.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TypeVar

T = TypeVar("T")

_SWITCHES = ("store_true", argparse.BooleanOptionalAction)


def env(name: str, default: T) -> str | T:
    """$DRASAT_<name> when set, else `default`."""
    return os.environ.get(f"DRASAT_{name}", default)


def env_flag(name: str, default: bool = False) -> bool:
    """The default of an on/off flag: off when $DRASAT_<name> is empty, "0" or "false", on when
    it is anything else, `default` when it is not set."""
    return env(name, "1" if default else "") not in ("", "0", "false")


def variable(flag: str) -> str:
    """The environment variable of a flag, without DRASAT_: `--kube-api-qps` -> KUBE_API_QPS."""
    return flag.removeprefix("--").replace("-", "_").upper()


def flag(
    parser: argparse.ArgumentParser | Any,
    name: str,
    default: Any,
    help: str,
    *,
    fallback: str | None = None,
    **kwargs: Any,
) -> None:
    """Add `--name` whose default is $DRASAT_<NAME>, else $<fallback> (a variable Kubernetes or
    kubectl sets, such as POD_NAMESPACE), else `default`. A switch (store_true or --x/--no-x)
    is on or off as `env_flag` reads the variable; any other value argparse converts."""
    if fallback is not None:
        default = os.environ.get(fallback, default)
    if kwargs.get("action") in _SWITCHES:
        value: Any = env_flag(variable(name), bool(default))
    else:
        value = env(variable(name), default)
    parser.add_argument(name, default=value, help=help, **kwargs)


#: What `--kubeconfig` says where no subcommand says more.
KUBECONFIG_HELP = "kubeconfig file (default: in-cluster config, else ~/.kube/config)"


def kubeconfig_flag(
    parser: argparse.ArgumentParser | Any, help: str = KUBECONFIG_HELP, **kwargs: Any
) -> None:
    """`--kubeconfig` of every subcommand that talks to a cluster: $DRASAT_KUBECONFIG, else
    $KUBECONFIG (as kubectl reads it), else none, which `drasat.kube.client.load_configuration`
    takes as the in-cluster config, else ~/.kube/config."""
    flag(parser, "--kubeconfig", None, help, fallback="KUBECONFIG", **kwargs)
