"""Mutations of valid seeds: structural (on the parsed objects), YAML text and byte-level damage.

Every choice comes from one `random.Random`, so a case is reproduced by its seed alone.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import yaml

Path_ = tuple[Any, ...]

#: Values a mutation may put anywhere: edges of every type, the names our objects use, strings
#: that break messages, and big ones (lists, nesting, lengths).
SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    3,
    7,
    8,
    16,
    20,
    32,
    33,
    63,
    64,
    65,
    100,
    101,
    128,
    129,
    1000,
    5000,
    5001,
    2**31,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    0.5,
    1.5,
    -0.0,
    1e308,
    float("inf"),
    float("nan"),
    "",
    " ",
    "x",
    "?",
    "*",
    "-",
    "0",
    "1",
    "-1",
    "0x10",
    "1e999999",
    "1e999999999Ei",
    "-1Gi",
    "8Gi",
    "16Gi",
    "500m",
    "64",
    "TimeSlicing",
    "MPS",
    "Default",
    "Long",
    "Immediate",
    "WaitForFirstConsumer",
    "Preferred",
    "Required",
    "Equals",
    "GreaterThan",
    "gpu.drasat.io",
    "gpu.resource.nvidia.com",
    "nas.gpu.drasat.io/v1alpha1",
    "gpu.drasat.io/v1alpha1",
    "resource.k8s.io/v1alpha2",
    "policy.drasat.io/v1alpha1",
    "whatif.drasat.io/v1alpha1",
    "GpuClaimParameters",
    "MigDeviceClaimParameters",
    "DeviceClassParameters",
    "NodeAllocationState",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceClass",
    "Pod",
    "Deployment",
    "Job",
    "List",
    "Cluster",
    "AllocationPolicy",
    "1g.5gb",
    "1g.10gb",
    "3g.40gb",
    "7g.80gb",
    "9g.99gb",
    "1g.5gb+me",
    "T4",
    "A100-40GB",
    "H100-80GB",
    "GPU-00000000-0000-0000-0000-000000000000",
    "MIG-x",
    "*A100*",
    "[",
    "{a",
    "line\nbreak",
    "sep\u2028arator",
    "tab\there",
    "nul\x00",
    "é✓漢",
    "\ufeffbom",
    "'\"",
    "x" * 2000,
    "y" * 70_000,
]
KEYS = [
    "name",
    "count",
    "bogus",
    "kind",
    "apiVersion",
    "metadata",
    "spec",
    "items",
    "uid",
    "namespace",
    "selector",
    "andExpression",
    "orExpression",
    "profile",
    "share",
    "sharing",
    "devices",
    "gpu",
    "mig",
    "placement",
    "start",
    "size",
    "",
    "0",
    "line\nbreak",
]
YAML_SNIPPETS = [
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!null ",
    "!!str ",
    "!!timestamp ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!!python/object:os.system ",
    "!foo ",
    "!<tag:x> ",
    "&a ",
    "*a ",
    "<<: *a\n",
    "? ",
    "- ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    '"',
    "|",
    ">",
    "#",
    "\t",
    "%YAML 1.1\n",
    "%TAG ! tag:x\n",
    "---\n",
    "...\n",
    "\r",
    "\r\n",
    "\x00",
    "\x85",
    "\u2028",
    "\ufeff",
    "@",
    "`",
    "\\",
    "=",
    "~",
    "0o17",
    "0b101",
    "1_000",
    "190:20:30",
    ".inf",
    ".nan",
    "2001-12-14",
    "0x_",
    "0b_",
    "._",
    "9" * 30,
    "9" * 5000,
]


def deep(depth: int, leaf: Any = 1) -> Any:
    node = leaf
    for i in range(depth):
        node = [node] if i % 2 else {"a": node}
    return node


def big_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            lambda: [rng.choice(SCALARS[:40]) for _ in range(rng.choice([100, 1000, 20_000]))],
            lambda: {f"k{i}": i for i in range(rng.choice([100, 5000]))},
            lambda: deep(rng.choice([20, 60, 101, 150])),
            lambda: "z" * rng.choice([1025, 300_000]),
        ]
    )()


def alias_bomb(levels: int, width: int) -> str:
    lines = [f"b0: &b0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]")
    return "\n".join(lines)


def paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node[:50]):
            found.extend(paths(value, (*prefix, index)))
    return found


def _get(root: Any, path: Path_) -> Any:
    for part in path:
        root = root[part]
    return root


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    # --- structural ---------------------------------------------------------------------

    def value(self) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < 0.8:
            return copy.deepcopy(rng.choice(SCALARS))
        if roll < 0.9:
            return {rng.choice(KEYS): rng.choice(SCALARS[:60]) for _ in range(rng.randint(0, 3))}
        return big_value(rng)

    def structural(self, data: Any, *, keep: tuple[str, ...] = ()) -> Any:
        """1-4 mutations of a deep copy of `data` (paths starting with `keep` keys stay)."""
        data = copy.deepcopy(data)
        for _ in range(self.rng.choice([1, 1, 1, 2, 2, 3, 4])):
            data = self._once(data, keep)
        return data

    def _once(self, data: Any, keep: tuple[str, ...]) -> Any:
        rng = self.rng
        candidates = [p for p in paths(data) if not (p and p[0] in keep)]
        if not candidates:
            return data
        path = rng.choice(candidates)
        if not path:
            return self.value() if rng.random() < 0.05 else data
        parent = _get(data, path[:-1])
        key = path[-1]
        current = parent[key]
        op = rng.random()
        if op < 0.35:
            parent[key] = self.value()
        elif op < 0.5:
            del parent[key]
        elif op < 0.6 and isinstance(current, dict):
            current[rng.choice(KEYS)] = self.value()
        elif op < 0.7 and isinstance(current, list) and current:
            item = rng.choice(current)
            current.extend(copy.deepcopy(item) for _ in range(rng.choice([1, 2, 10, 200])))
        elif op < 0.78:
            other = _get(data, rng.choice(paths(data)))
            if other is not current and not _contains(current, other):
                parent[key] = copy.deepcopy(other)
        elif op < 0.88 and isinstance(current, str):
            parent[key] = rng.choice(
                [
                    current + rng.choice(["x", "\n", "*", " "]),
                    current.upper(),
                    current[:-1],
                    current * 2,
                    current + "\u2028" + current,
                    "",
                ]
            )
        elif op < 0.95 and isinstance(current, int) and not isinstance(current, bool):
            parent[key] = rng.choice(
                [current + 1, current - 1, -current, current * 1000, current * 2**40, str(current)]
            )
        else:
            parent[key] = [current] if rng.random() < 0.5 else {"x": current}
        return data

    # --- text and bytes -----------------------------------------------------------------

    def dump(self, documents: list[Any]) -> str:
        try:
            return yaml.safe_dump_all(
                documents,
                sort_keys=False,
                allow_unicode=self.rng.random() < 0.5,
                default_flow_style=self.rng.choice([False, None, True]),
                width=10_000,
            )
        except (yaml.YAMLError, RecursionError, ValueError):
            return "{}\n"

    def text(self, text: str) -> str:
        """YAML-level damage: tags, anchors, aliases, flow characters, lines moved."""
        rng = self.rng
        lines = text.split("\n")
        for _ in range(rng.choice([1, 1, 2, 3])):
            if not lines:
                lines = [""]
            roll = rng.random()
            index = rng.randrange(len(lines))
            line = lines[index]
            if roll < 0.45:
                column = rng.randint(0, len(line))
                if ": " in line and rng.random() < 0.6:
                    column = line.index(": ") + 2
                lines[index] = line[:column] + rng.choice(YAML_SNIPPETS) + line[column:]
            elif roll < 0.55:
                del lines[index]
            elif roll < 0.65:
                lines.insert(index, line)
            elif roll < 0.7:
                lines[index] = " " + line
            elif roll < 0.75:
                lines.insert(index, alias_bomb(rng.randint(3, 9), rng.randint(3, 9)))
            elif roll < 0.8:
                depth = rng.choice([50, 99, 101, 500, 5000])
                lines[index] = line + " " + "[" * depth + "]" * depth
            elif roll < 0.85 and ": " in line:
                lines[index] = line.replace(": ", ": &x ", 1)
                other = rng.randrange(len(lines))
                lines[other] = (
                    lines[other].split(": ")[0] + ": *x" if ": " in lines[other] else "*x"
                )
            elif roll < 0.9:
                lines = lines[: rng.randrange(len(lines)) + 1]
            else:
                other = rng.randrange(len(lines))
                lines[index], lines[other] = lines[other], lines[index]
        return "\n".join(lines)

    def bytes_(self, raw: bytes) -> bytes:
        """Byte-level damage: flipped bits, bad UTF-8, truncation, repeated chunks."""
        rng = self.rng
        data = bytearray(raw)
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            if not data:
                data.extend(b"\xff")
            at = rng.randrange(len(data))
            roll = rng.random()
            if roll < 0.3:
                data[at] ^= 1 << rng.randrange(8)
            elif roll < 0.5:
                data[at:at] = rng.choice(
                    [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\r", b"\x1b[0m"]
                )
            elif roll < 0.65:
                del data[at : at + rng.randint(1, 64)]
            elif roll < 0.75:
                del data[at:]
            elif roll < 0.9:
                chunk = data[at : at + rng.randint(1, 200)]
                data[at:at] = chunk * rng.choice([2, 10, 100])
            else:
                data[at] = rng.randrange(256)
        return bytes(data)


def _contains(node: Any, other: Any) -> bool:
    if node is other:
        return True
    if isinstance(node, dict):
        return any(_contains(v, other) for v in node.values())
    if isinstance(node, list):
        return any(_contains(v, other) for v in node)
    return False
