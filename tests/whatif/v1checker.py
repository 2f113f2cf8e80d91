"""An independent checker of `resource.k8s.io/v1` claim allocations: what the what-if prints
with `-o yaml` is checked against the ResourceSlices and DeviceClasses it was given.

Written from the Kubernetes DRA API (structured parameters, KEP 4381; partitionable devices,
KEP 4815; consumable capacity, KEP 5075) and nothing of drasat: it imports neither
`drasat.v1` nor the solver, parses quantities and evaluates CEL (cel-python, with the few
Kubernetes library functions selectors use) itself. `violations` lists what is wrong, in words
that name the claim, the result and the rule; an empty list means the allocations hold:

- every result's device exists in a slice of the named driver and pool, on the node the
  allocation's nodeSelector names (one node per claim);
- the DeviceClass's and the request's CEL selectors are true on it (an error is a failure);
- a request's results are as many as it asks for (ExactCount, All), from one firstAvailable
  entry, and every request has results;
- matchAttribute / distinctAttribute constraints hold over the results they name;
- no device without allowMultipleAllocations is in two results (of any claims);
- a shareable device's consumedCapacity covers what the request asks for, and the sum over its
  results stays within its capacity; each share has its own shareID;
- counters: the devices in use (each once) consume no more of a counter set than the pool's
  sharedCounters hold.

Run it on files too: `python tests/whatif/v1checker.py CLUSTER.yaml CLASSES.yaml CLAIMS.yaml`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import celpy
import yaml
from celpy import celtypes
from celpy.evaluation import CELEvalError

Obj = dict[str, Any]

_SUFFIX = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?)$")


def quantity(text: Any) -> Fraction:
    """A Kubernetes resource.Quantity as an exact number."""
    found = _QUANTITY.match(str(text).strip())
    if found is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, exponent, suffix = found.groups()
    value = Fraction(number)
    if exponent is not None:
        return value * Fraction(10) ** int(exponent)
    return value * _SUFFIX[suffix or ""]


def documents(texts: Iterable[str]) -> list[Obj]:
    """Every object of YAML texts, `List`s unpacked."""
    out: list[Obj] = []
    for text in texts:
        for document in yaml.safe_load_all(text):
            if not isinstance(document, dict):
                continue
            if document.get("kind", "").endswith("List"):
                out.extend(i for i in document.get("items") or [] if isinstance(i, dict))
            else:
                out.append(document)
    return out


# --- CEL: the device as Kubernetes shows it to a selector -------------------------------------


@dataclass(frozen=True, order=True)
class _Semver:
    parts: tuple[int, int, int]


class _Quantity(celtypes.StringType):
    """A quantity in CEL: compareTo/isGreaterThan/isLessThan/asInteger."""

    number: Fraction

    def __new__(cls, text: str) -> _Quantity:
        made = super().__new__(cls, text)
        made.number = quantity(text)
        return made


def _semver(text: Any) -> _Semver:
    parts = [int(p) for p in re.split(r"[.+-]", str(text))[:3] if p.isdigit()]
    return _Semver(tuple([*parts, 0, 0, 0][:3]))  # type: ignore[arg-type]


def _key(value: Any) -> Any:
    if isinstance(value, _Quantity):
        return value.number
    if isinstance(value, _Semver):
        return value.parts
    raise CELEvalError(f"cannot compare {value!r}")


def _compare(a: Any, b: Any) -> celtypes.IntType:
    x, y = _key(a), _key(b)
    return celtypes.IntType((x > y) - (x < y))


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise CELEvalError(f"not a string: {value!r}")
    return value


_FUNCTIONS: dict[str, Any] = {
    "lowerAscii": lambda s: celtypes.StringType(_string(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(_string(s).upper()),
    "quantity": lambda s: _Quantity(_string(s)),
    "semver": lambda s: _semver(_string(s)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(_compare(a, b)) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(int(_compare(a, b)) < 0),
    "asInteger": lambda q: celtypes.IntType(int(_key(q))),
}
_ENV = celpy.Environment()


def _attribute_value(value: Obj) -> Any:
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "version" in value:
        return _semver(value["version"])
    raise ValueError(f"attribute value of no known type: {value!r}")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name; unqualified names are the driver's."""
    domain, _, short = name.rpartition("/")
    return (domain or driver, short)


def _by_domain(entries: Mapping[str, Any], driver: str, convert: Any) -> celtypes.MapType:
    grouped: dict[str, dict[celtypes.StringType, Any]] = {}
    for name, value in entries.items():
        domain, short = _qualified(name, driver)
        grouped.setdefault(domain, {})[celtypes.StringType(short)] = convert(value)
    return celtypes.MapType(
        {celtypes.StringType(d): celtypes.MapType(v) for d, v in grouped.items()}
    )


def _activation(driver: str, device: Obj) -> dict[str, Any]:
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _by_domain(
                    device.get("attributes") or {}, driver, _attribute_value
                ),
                celtypes.StringType("capacity"): _by_domain(
                    device.get("capacity") or {}, driver, lambda c: _Quantity(str(c["value"]))
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    bool(device.get("allowMultipleAllocations"))
                ),
            }
        )
    }


_PROGRAMS: dict[str, Any] = {}


def selector_holds(expression: str, driver: str, device: Obj) -> str | None:
    """None when the CEL expression is true on the device, else what happened."""
    program = _PROGRAMS.get(expression)
    if program is None:
        try:
            program = _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)
        except Exception as error:  # the parser's own exception types
            return f"does not compile: {error}"
        _PROGRAMS[expression] = program
    try:
        result = program.evaluate(_activation(driver, device))
    except Exception as error:  # an evaluation error is a selector that does not hold
        return f"failed: {str(error).splitlines()[0][:120]}"
    if isinstance(result, CELEvalError):
        return f"failed: {str(result).splitlines()[0][:120]}"
    if result is not True and result != celtypes.BoolType(True):
        return f"is {result!r}"
    return None


# --- the cluster --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    node: str | None  # None: a slice for all nodes or a node selector
    spec: Obj


@dataclass
class Inventory:
    devices: dict[tuple[str, str, str], Device] = field(default_factory=dict)
    #: (driver, pool, counter set) -> counter -> value.
    counters: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    classes: dict[str, Obj] = field(default_factory=dict)


def inventory(objects: Sequence[Obj]) -> Inventory:
    """The devices and counter sets of the ResourceSlices, and the DeviceClasses."""
    found = Inventory()
    for obj in objects:
        kind = obj.get("kind")
        if kind == "DeviceClass":
            found.classes[obj["metadata"]["name"]] = obj.get("spec") or {}
        if kind != "ResourceSlice":
            continue
        spec = obj.get("spec") or {}
        driver, pool = spec["driver"], spec["pool"]["name"]
        for counter_set in spec.get("sharedCounters") or []:
            found.counters[(driver, pool, counter_set["name"])] = {
                name: quantity(c["value"])
                for name, c in (counter_set.get("counters") or {}).items()
            }
        for device in spec.get("devices") or []:
            key = (driver, pool, device["name"])
            found.devices[key] = Device(driver, pool, spec.get("nodeName"), device)
    return found


# --- the claims ----------------------------------------------------------------------------------


def _request_of(claim: Obj, result_request: str) -> tuple[Obj, Obj] | None:
    """(the claim's request, the exactly/firstAvailable entry) a result names."""
    top, _, sub = result_request.partition("/")
    for request in claim["spec"]["devices"].get("requests") or []:
        if request.get("name") != top:
            continue
        if not sub:
            return (request, request.get("exactly") or {}) if request.get("exactly") else None
        for entry in request.get("firstAvailable") or []:
            if entry.get("name") == sub:
                return request, entry
    return None


def _selected_node(allocation: Obj) -> str | None:
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    names = {
        value
        for term in terms
        for field_ in term.get("matchFields") or []
        if field_.get("key") == "metadata.name" and field_.get("operator") == "In"
        for value in field_.get("values") or []
    }
    return next(iter(names)) if len(names) == 1 else None


def _attribute(device: Device, qualified: str) -> Any:
    domain, name = _qualified(qualified, device.driver)
    for key, value in (device.spec.get("attributes") or {}).items():
        if _qualified(key, device.driver) == (domain, name):
            return tuple(sorted(value.items()))
    return None


def _matching(inv: Inventory, entry: Obj, node: str | None) -> list[Device]:
    """Every device of the node that the entry's class and selectors select (for `All`)."""
    out = []
    for device in inv.devices.values():
        if device.node not in (None, node):
            continue
        if not _selectors_errors(inv, entry, device):
            out.append(device)
    return out


def _selectors_errors(inv: Inventory, entry: Obj, device: Device) -> list[str]:
    errors = []
    name = entry.get("deviceClassName")
    if name not in inv.classes:
        return [f"DeviceClass {name!r} is not among the classes given"]
    origins = [("class " + str(name), s) for s in inv.classes[name].get("selectors") or []]
    origins += [("request", s) for s in entry.get("selectors") or []]
    for origin, selector in origins:
        expression = (selector.get("cel") or {}).get("expression")
        if expression is None:
            continue
        why = selector_holds(expression, device.driver, device.spec)
        if why is not None:
            errors.append(f"{origin} selector {expression!r} {why}")
    return errors


def violations(objects: Sequence[Obj], claims: Sequence[Obj]) -> list[str]:
    """What is wrong with the claims' allocations on the slices and classes of `objects`."""
    inv = inventory(objects)
    wrong: list[str] = []
    exclusive: dict[tuple[str, str, str], str] = {}
    consumed: dict[tuple[str, str, str], dict[str, Fraction]] = {}
    share_ids: dict[tuple[str, str, str], set[str]] = {}
    in_use: set[tuple[str, str, str]] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        meta = claim.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        node = _selected_node(allocation)
        results = (allocation.get("devices") or {}).get("results") or []
        by_request: dict[str, list[tuple[str, Device]]] = {}
        for i, result in enumerate(results):
            where = f"claim {name} results[{i}] ({result.get('request')}: {result.get('device')})"
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            device = inv.devices.get(key)
            if device is None:
                wrong.append(f"{where}: no device {key[2]} in pool {key[1]} of driver {key[0]}")
                continue
            if device.node is not None and device.node != node:
                wrong.append(f"{where}: the device is on node {device.node}, the claim on {node}")
            found = _request_of(claim, str(result.get("request")))
            if found is None:
                wrong.append(f"{where}: the claim has no request {result.get('request')!r}")
                continue
            request, entry = found
            wrong.extend(f"{where}: {e}" for e in _selectors_errors(inv, entry, device))
            by_request.setdefault(str(result["request"]), []).append((str(request["name"]), device))
            in_use.add(key)
            if device.spec.get("allowMultipleAllocations"):
                wrong.extend(
                    f"{where}: {e}"
                    for e in _consume(device, entry, result, consumed.setdefault(key, {}))
                )
                share = result.get("shareID")
                if not share or share in share_ids.setdefault(key, set()):
                    wrong.append(f"{where}: shareID {share!r} missing or used twice")
                share_ids[key].add(str(share))
            elif key in exclusive:
                wrong.append(f"{where}: the device is already allocated to {exclusive[key]}")
            else:
                exclusive[key] = f"claim {name}"
        wrong.extend(_counts(inv, claim, name, node, by_request))
        wrong.extend(_constraints(claim, name, by_request))
    for key, totals in consumed.items():
        capacity = inv.devices[key].spec.get("capacity") or {}
        for capacity_name, total in totals.items():
            have = quantity(capacity[capacity_name]["value"])
            if total > have:
                wrong.append(
                    f"device {key[2]} (pool {key[1]}): {capacity_name} consumed {total} > {have}"
                )
    wrong.extend(_counter_use(inv, in_use))
    return wrong


def _consume(device: Device, entry: Obj, result: Obj, totals: dict[str, Fraction]) -> list[str]:
    wrong = []
    capacity = device.spec.get("capacity") or {}
    taken = result.get("consumedCapacity") or {}
    asked = (entry.get("capacity") or {}).get("requests") or {}
    for capacity_name, amount in asked.items():
        if capacity_name not in taken or quantity(taken[capacity_name]) < quantity(amount):
            wrong.append(f"consumedCapacity {taken} does not cover the request's {asked}")
    for capacity_name, amount in taken.items():
        if capacity_name not in capacity:
            wrong.append(f"consumedCapacity names {capacity_name!r}, which the device lacks")
            continue
        totals[capacity_name] = totals.get(capacity_name, Fraction(0)) + quantity(amount)
    return wrong


def _counts(
    inv: Inventory,
    claim: Obj,
    name: str,
    node: str | None,
    by_request: Mapping[str, list[tuple[str, Device]]],
) -> list[str]:
    wrong = []
    for request in claim["spec"]["devices"].get("requests") or []:
        top = request["name"]
        used = sorted({r for r in by_request if r.partition("/")[0] == top})
        if not used:
            wrong.append(f"claim {name}: request {top} has no result")
            continue
        if len(used) > 1:
            wrong.append(f"claim {name}: request {top} has results of {used}")
            continue
        found = _request_of(claim, used[0])
        assert found is not None
        entry = found[1]
        got = len(by_request[used[0]])
        if entry.get("allocationMode", "ExactCount") == "All":
            want = len(_matching(inv, entry, node))
        else:
            want = int(entry.get("count", 1))
        if got != want:
            wrong.append(f"claim {name}: request {used[0]} has {got} results, asks for {want}")
    return wrong


def _constraints(
    claim: Obj, name: str, by_request: Mapping[str, list[tuple[str, Device]]]
) -> list[str]:
    wrong = []
    for i, constraint in enumerate(claim["spec"]["devices"].get("constraints") or []):
        names = set(constraint.get("requests") or [])
        devices = [
            d
            for result, entries in by_request.items()
            for top, d in entries
            if not names or top in names or result in names
        ]
        same = constraint.get("matchAttribute")
        if same:
            values = {_attribute(d, same) for d in devices}
            if None in values or len(values) > 1:
                wrong.append(f"claim {name}: constraints[{i}] matchAttribute {same}: {values}")
        distinct = constraint.get("distinctAttribute")
        if distinct:
            values_list = [_attribute(d, distinct) for d in devices]
            if None in values_list or len(set(values_list)) != len(values_list):
                wrong.append(f"claim {name}: constraints[{i}] distinctAttribute {distinct}")
    return wrong


def _counter_use(inv: Inventory, in_use: set[tuple[str, str, str]]) -> list[str]:
    totals: dict[tuple[str, str, str], dict[str, Fraction]] = {}
    wrong = []
    for key in sorted(in_use):
        device = inv.devices[key]
        for use in device.spec.get("consumesCounters") or []:
            counter_set = (device.driver, device.pool, use["counterSet"])
            if counter_set not in inv.counters:
                wrong.append(f"device {key[2]}: no counter set {use['counterSet']} in its pool")
                continue
            sums = totals.setdefault(counter_set, {})
            for counter, amount in (use.get("counters") or {}).items():
                sums[counter] = sums.get(counter, Fraction(0)) + quantity(amount["value"])
    for counter_set, sums in totals.items():
        for counter, total in sums.items():
            have = inv.counters[counter_set].get(counter)
            if have is None or total > have:
                wrong.append(
                    f"counter set {counter_set[2]} (pool {counter_set[1]}): {counter} "
                    f"consumed {total} > {have}"
                )
    return wrong


def allocated(claims: Sequence[Obj]) -> list[Obj]:
    """The claims that hold an allocation."""
    return [c for c in claims if (c.get("status") or {}).get("allocation")]


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def main(argv: Sequence[str]) -> int:
    *inputs, output = argv
    objects = documents(_read(p) for p in inputs)
    claims = [o for o in documents([_read(output)]) if o.get("kind") == "ResourceClaim"]
    found = violations(objects, claims)
    print("\n".join(found) or f"ok: {len(allocated(claims))} allocated claims hold")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
