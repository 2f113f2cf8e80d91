"""docs/SECURITY.md names a test for each control: every test it names exists, so a renamed or
deleted test cannot leave the security model citing nothing (issue 29)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "SECURITY.md"


def cited() -> list[tuple[str, str]]:
    """(test file, test name) of every `tests/...py::name` in the doc, and of every `::name`
    or `file.py::name` after it (a short form naming the last file cited, or a file by its name
    in the folder of the last one)."""
    out: list[tuple[str, str]] = []
    last = ""
    for match in re.finditer(r"`((?:[\w/]+\.py)?)(?:::(\w+))?(?:\[[\w-]+\])?`", DOC.read_text()):
        path, name = match.groups()
        if path:
            if not path.startswith("tests/"):
                found = [p for p in (ROOT / Path(last).parent).glob(path)] if last else []
                if not found:
                    continue  # a source file (controller/admission.py), not a test
                path = str(found[0].relative_to(ROOT))
            last = path
        if name and last:
            out.append((last, name))
    return out


def test_every_test_the_security_model_names_exists() -> None:
    names = cited()
    assert len(names) > 40
    missing = [
        f"{path}::{name}"
        for path, name in names
        if not (ROOT / path).exists()
        or not re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.MULTILINE)
    ]
    assert missing == []
