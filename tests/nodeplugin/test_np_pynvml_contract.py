"""The production NVML path checked against the installed pynvml (nvidia-ml-py), without a GPU.

Every test of the node plugin runs `NvmlDeviceLib` over the simulated fleet, so a typo in a pynvml
name, a wrong argument count or a call a new nvidia-ml-py removed would only show on a real GPU.
Here the node plugin's source is read with `ast`: every pynvml attribute it names (functions,
constants, ctypes structs, `NVMLError`) must exist in `pynvml`, and every call must bind to the
pynvml function's signature with the number of positional arguments the call site passes. The
simulator must implement only functions pynvml has, with signatures pynvml accepts, and refuse
names pynvml does not have.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from drasat import nodeplugin
from drasat.nodeplugin import nvml
from drasat.testbed import simnvml

SOURCE = Path(nodeplugin.__file__).parent
MODULES = sorted(SOURCE.glob("*.py"))

#: Expressions, as `ast.unparse` writes them, whose attributes are pynvml's.
RECEIVERS = frozenset({"pynvml", "NVML", "nvml.NVML", "N", "self._nvml"})
#: `NvmlDeviceLib` methods that call the pynvml function named by their first argument.
CALLERS = frozenset({"_call", "_optional"})
FUNCTION_NAME = re.compile(r"nvml[A-Z]\w*")


@dataclass(frozen=True)
class Use:
    """One pynvml name in the node plugin's source; `positional` is set where it is called."""

    where: str
    name: str
    positional: int | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.name}" + (
            "" if self.positional is None else f" with {self.positional} positional argument(s)"
        )


def _positional(args: list[ast.expr]) -> int | None:
    return None if any(isinstance(a, ast.Starred) for a in args) else len(args)


def uses(path: Path) -> list[Use]:
    """The pynvml names a module uses: attributes of a receiver, `self._call("nvml...", ...)`."""
    tree = ast.parse(path.read_text(), filename=path.name)
    found: list[Use] = []
    called: set[int] = set()
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        if ast.unparse(func.value) in RECEIVERS:
            found.append(Use(where, func.attr, _positional(node.args)))
            called.add(id(func))
        elif (
            func.attr in CALLERS
            and ast.unparse(func.value) == "self"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            count = _positional(node.args[1:])
            found.append(Use(where, node.args[0].value, count))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and id(node) not in called
            and ast.unparse(node.value) in RECEIVERS
        ):
            found.append(Use(f"{path.name}:{node.lineno}", node.attr))
    return found


def all_uses() -> list[Use]:
    return [use for path in MODULES for use in uses(path)]


def accepts(function: Any, positional: int) -> bool:
    try:
        inspect.signature(function).bind(*[None] * positional)
    except TypeError:
        return False
    return True


def positional_range(function: Any, *, skip_self: bool) -> tuple[int, float]:
    """The fewest and most positional arguments a function takes (`self` left out if asked)."""
    params = list(inspect.signature(function).parameters.values())[1 if skip_self else 0 :]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    fewest = sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in params)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return fewest, math.inf
    return fewest, sum(p.kind in kinds for p in params)


def simulated_functions() -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(simnvml.SimulatedNvml).items()
        if name.startswith("nvml") and callable(value)
    }


# -- the production code ---------------------------------------------------------------------


def test_the_receivers_are_pynvml() -> None:
    assert nvml.NVML is pynvml
    assert simnvml.N is pynvml


def test_the_scan_finds_the_calls_and_constants() -> None:
    found = {(u.name, u.positional) for u in all_uses()}
    assert ("nvmlDeviceGetCount", 0) in found  # self._call("nvmlDeviceGetCount")
    assert ("nvmlDeviceCreateGpuInstanceWithPlacement", 3) in found
    assert ("nvmlDeviceGetGpuInstanceById", 2) in found  # self._nvml.nvmlDeviceGetGpuInstanceById
    assert ("NVML_ERROR_NOT_FOUND", None) in found
    assert ("c_nvmlGpuInstancePlacement_t", 0) in found
    assert len({u.name for u in all_uses() if u.positional is not None}) >= 40


def test_every_pynvml_name_the_plugin_uses_exists() -> None:
    missing = [str(u) for u in all_uses() if not hasattr(pynvml, u.name)]
    assert missing == [], f"not in pynvml {pynvml.__name__}: {missing}"


def test_every_call_binds_to_the_pynvml_signature() -> None:
    wrong = [
        str(u)
        for u in all_uses()
        if u.positional is not None
        and inspect.isfunction(getattr(pynvml, u.name, None))  # ctypes structs have no signature
        and not accepts(getattr(pynvml, u.name), u.positional)
    ]
    assert wrong == []


def test_every_nvml_name_written_as_a_string_in_the_production_module_exists() -> None:
    """Names passed as text (to `_call`, `_optional` or elsewhere) in nvml.py are pynvml's."""
    tree = ast.parse(Path(nvml.__file__).read_text())
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and FUNCTION_NAME.fullmatch(node.value)
    }
    assert "nvmlInit" in names
    assert sorted(n for n in names if not callable(getattr(pynvml, n, None))) == []


def test_the_simulator_implements_every_function_the_plugin_calls() -> None:
    """Else the production call never runs in CI; with the same argument count it accepts."""
    simulated = simulated_functions()
    calls = [
        u
        for u in all_uses()
        if u.positional is not None
        and u.name.startswith("nvml")
        and not inspect.isclass(getattr(pynvml, u.name, None))  # a ctypes struct, built as is
    ]
    absent = sorted({u.name for u in calls if u.name not in simulated})
    assert absent == []
    wrong = [
        str(u)
        for u in calls
        if u.positional is not None and not accepts(simulated[u.name], u.positional + 1)  # self
    ]
    assert wrong == []


# -- the simulator ---------------------------------------------------------------------------


def test_every_simulated_function_exists_in_pynvml_with_a_compatible_signature() -> None:
    """Whatever argument count the simulator takes, pynvml's function takes too."""
    problems = []
    for name, function in sorted(simulated_functions().items()):
        real = getattr(pynvml, name, None)
        if not callable(real):
            problems.append(f"{name}: not a pynvml function")
            continue
        fewest, most = positional_range(function, skip_self=True)
        top = int(min(most, fewest + 8))
        for count in range(fewest, top + 1):
            if not accepts(real, count):
                problems.append(f"{name}: simulator takes {count} argument(s), pynvml does not")
    assert problems == []
    assert len(simulated_functions()) >= 40


def test_the_simulators_call_lists_name_pynvml_functions() -> None:
    functions = [n for n in dir(pynvml) if n.startswith("nvml") and callable(getattr(pynvml, n))]
    assert sorted(n for n in simnvml._BLOCKING if n not in functions) == []
    assert [p for p in simnvml._MUTATING if not any(f.startswith(p) for f in functions)] == []


@pytest.mark.parametrize(
    "name",
    [
        "nvmlDeviceGetCont",  # a typo
        "nvmlDeviceGetGpuInstancePlacements",  # a function pynvml does not have
        "NVML_FEATURE_ENABLD",  # a constant typo
    ],
)
def test_the_simulator_refuses_names_pynvml_does_not_have(name: str) -> None:
    assert not hasattr(pynvml, name)
    sim = simnvml.SimulatedNvml("T4")
    with pytest.raises(AttributeError, match=f"{name}: pynvml has no"):
        getattr(sim, name)


def test_the_simulator_refuses_a_function_it_has_but_pynvml_does_not() -> None:
    class Extended(simnvml.SimulatedNvml):
        def nvmlDeviceGetMadeUp(self, device: Any) -> int:
            return 0

    sim = Extended("T4")
    sim.nvmlInit()
    with pytest.raises(AttributeError, match="nvmlDeviceGetMadeUp: pynvml has no"):
        sim.nvmlDeviceGetMadeUp(sim.nvmlDeviceGetHandleByIndex(0))


def test_the_simulator_still_answers_real_names() -> None:
    sim = simnvml.SimulatedNvml("T4")
    sim.nvmlInit()
    assert sim.nvmlDeviceGetCount() == 1
    assert sim.spec.gpus  # plain attributes are untouched
    with pytest.raises(AttributeError):
        sim.nvmlDeviceGetBAR1MemoryInfo  # noqa: B018  (pynvml has it, the simulator does not)
