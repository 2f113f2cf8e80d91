"""`-o html`: a self-contained report page (inline CSS, no external assets) from a jinja2 template.

Each node's GPUs are drawn as bars: a MIG GPU's bar has one cell per memory slice and its MIG
devices sit at their placements; a whole GPU is one bar that its claim fills, or that share claims
fill by their compute (or memory) fraction. A claim has the same colour everywhere.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

import jinja2

TEMPLATE = "report.html.j2"


def render_page(
    result: Any, *, title: str = "drasat what-if", solver_note: str | None = None
) -> str:
    """The page of anything shaped as the classic `Report` (the v1 what-if's page is one):
    `solver_note`, when given, replaces the solver card's mode, meaning and bound."""
    source = (importlib.resources.files("drasat.whatif") / TEMPLATE).read_text(encoding="utf-8")
    environment = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    template = environment.from_string(source)
    return template.render(
        title=title,
        report=result,
        summary=result.summary,
        solver_note=solver_note,
        percent=_percent,
    )


def _percent(part: int, whole: int) -> str:
    """CSS percentage of a bar, e.g. `37.5%`."""
    return f"{100 * part / whole:.4g}%" if whole else "0%"
