"""AllocationPolicy files: from a path, from text (a ConfigMap key), or shipped ones by name.

Parsing and field-path errors come from `drasat.loading`; this module adds what a policy file
needs beyond its model: the one accepted apiVersion, and the policies shipped in the package
(`drasat/policies/*.yaml`, read with importlib.resources so an installed wheel finds them too).
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

from drasat import loading
from drasat.api import groups
from drasat.api.errors import InputError
from drasat.api.policy import AllocationPolicy

KIND = groups.ALLOCATION_POLICY


def load(path: str | Path) -> AllocationPolicy:
    """The one AllocationPolicy in a YAML file; InputError names the file and key path."""
    policy = loading.load_one(AllocationPolicy, path, kind=KIND)
    _check_version(policy, where=str(path))
    return policy


def from_text(text: str, *, source: str) -> AllocationPolicy:
    """The one AllocationPolicy in YAML text (e.g. a ConfigMap value), named `source` in errors."""
    documents = loading.parse_documents(text, source)
    if len(documents) != 1 or documents[0].data.get("kind") != KIND:
        kinds = ", ".join(str(d.data.get("kind", "?")) for d in documents) or "nothing"
        raise InputError(f"expected exactly one {KIND}, found {kinds}", where=source)
    policy = loading.validate(AllocationPolicy, documents[0])
    _check_version(policy, where=source)
    return policy


def _check_version(policy: AllocationPolicy, *, where: str) -> None:
    if policy.apiVersion != groups.POLICY_API_VERSION:
        raise InputError(
            f"apiVersion: expected {groups.POLICY_API_VERSION}, got {policy.apiVersion!r}",
            where=f"{where}: {KIND} {policy.metadata.name or '?'}",
        )


def _shipped_dir() -> Traversable:
    return importlib.resources.files("drasat") / "policies"


def shipped_names() -> list[str]:
    """Names of the policies shipped with drasat (`default`, `binpack`, ...), sorted."""
    entries = _shipped_dir().iterdir()
    return sorted(e.name.removesuffix(".yaml") for e in entries if e.name.endswith(".yaml"))


def shipped_text(name: str) -> str:
    """The YAML text of a shipped policy, comments included."""
    if name not in shipped_names():
        known = ", ".join(shipped_names())
        raise InputError(f"no shipped policy {name!r} (known: {known})")
    return (_shipped_dir() / f"{name}.yaml").read_text(encoding="utf-8")


def shipped(name: str) -> AllocationPolicy:
    """A policy shipped with drasat, by name (`default` is what drasat uses without one)."""
    return from_text(shipped_text(name), source=f"<embedded>/policies/{name}.yaml")


def summary(policy: AllocationPolicy) -> str:
    """`policy NAME: N objective terms, M rules` (rules: reservations, limits, allowed products)."""
    rules = policy.spec.rules
    count = len(rules.reservations) + len(rules.namespaceLimits) + len(rules.allowedProducts)
    terms = len(policy.spec.objective)
    return (
        f"policy {policy.metadata.name or '?'}: {terms} objective term{'s' * (terms != 1)}, "
        f"{count} rule{'s' * (count != 1)}"
    )
