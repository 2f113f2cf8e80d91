"""AllocationPolicy files: from a path, from text (a ConfigMap key), or shipped ones by name.

Parsing and field-path errors come from `drasat.loading`; this module adds what a policy file
needs beyond its model: the one accepted apiVersion, unique reservation names, lifecycle values
the node plugin can apply, and the policies shipped in the package (`policies/*.yaml`, installed
as `drasat.policies`,
read with importlib.resources so an installed wheel finds them too).
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

from drasat import loading
from drasat.api import groups
from drasat.api.inputerrors import InputError
from drasat.api.policy import AllocationPolicy, LifecycleActionName
from drasat.api.sharing import TimeSlice

KIND = groups.ALLOCATION_POLICY


def load(path: str | Path) -> AllocationPolicy:
    """The one AllocationPolicy in a YAML file; InputError names the file and key path."""
    return _policy(loading.read_documents(path), source=str(path))


def from_text(text: str, *, source: str) -> AllocationPolicy:
    """The one AllocationPolicy in YAML text (e.g. a ConfigMap value), named `source` in errors."""
    return _policy(loading.parse_documents(text, source), source=source)


def _policy(documents: list[loading.Document], *, source: str) -> AllocationPolicy:
    if len(documents) != 1 or documents[0].data.get("kind") != KIND:
        kinds = ", ".join(d.kind_text() for d in documents[:10]) or "nothing"
        raise InputError(f"expected exactly one {KIND}, found {kinds}", where=source)
    document = documents[0]
    policy = loading.validate(AllocationPolicy, document)
    problem = _problem(policy)
    if problem:
        raise InputError(problem, where=f"{document.where}: {document.describe()}")
    return policy


# What the node plugin accepts for each lifecycle action (None: a positive integer).
_ACTION_VALUES: dict[LifecycleActionName, tuple[str, ...] | None] = {
    LifecycleActionName.setComputeMode: ("Default", "ExclusiveProcess", "Prohibited"),
    LifecycleActionName.setTimeSlice: tuple(t.value for t in TimeSlice),
    LifecycleActionName.setPersistenceMode: ("Enabled", "Disabled"),
    LifecycleActionName.setPowerLimitWatts: None,
    LifecycleActionName.lockGpuClocksMHz: None,
}


def _problem(policy: AllocationPolicy) -> str | None:
    """What the model cannot check alone, as `key.path: message`; None when all is well."""
    if policy.apiVersion != groups.POLICY_API_VERSION:
        return f"apiVersion: expected {groups.POLICY_API_VERSION}, got {policy.apiVersion!r}"
    seen: dict[str, int] = {}
    for index, reservation in enumerate(policy.spec.rules.reservations):
        if reservation.name in seen:
            # Explanations name the reservation that blocks a claim; two of one name are ambiguous.
            return (
                f"spec.rules.reservations[{index}].name: {reservation.name!r} is already the "
                f"name of reservations[{seen[reservation.name]}]"
            )
        seen[reservation.name] = index
    for phase in ("init", "cleanup"):
        for index, step in enumerate(getattr(policy.spec.lifecycle, phase)):
            problem = _bad_value(step.action, step.value)
            if problem:
                return f"spec.lifecycle.{phase}[{index}].value: {problem}"
    return None


def _bad_value(action: LifecycleActionName, value: str | int) -> str | None:
    allowed = _ACTION_VALUES[action]
    if allowed is None:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return None
        return f"{action.value} takes a positive integer, not {value!r}"
    if value in allowed:
        return None
    return f"{action.value} takes {', '.join(allowed[:-1])} or {allowed[-1]}, not {value!r}"


def _shipped_dir() -> Traversable:
    return importlib.resources.files("drasat.policies")


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
