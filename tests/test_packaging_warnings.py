"""`make`'s first install prints no wall of setuptools warnings (issue 26 item 7): setuptools
reads pyproject.toml without a deprecation (the license as a TOML table was warned three times
per install), and the one note every editable install adds is filtered in the Makefile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from setuptools.config import pyprojecttoml
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[1]


def test_setuptools_reads_the_project_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # package-dir and readme are relative to the project
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyprojecttoml.apply_configuration(Distribution(), os.fspath(ROOT / "pyproject.toml"))
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


def test_the_makefile_filters_the_editable_install_note() -> None:
    """The Makefile's PYTHONWARNINGS filter silences the note setuptools' editable install emits
    (its own InformationOnly warning, as its editable_wheel command emits it), and only with it."""
    # One filter, however many pip installs the Makefile runs (make test's, make demo's).
    (spec,) = set(re.findall(r"PYTHONWARNINGS='([^']+)'", (ROOT / "Makefile").read_text()))
    note = (
        "from setuptools.warnings import InformationOnly\n"
        "InformationOnly.emit('Editable installation.', 'Please be careful with folders')\n"
    )

    def stderr(env: dict[str, str]) -> str:
        run = subprocess.run([sys.executable, "-c", note], env=env, capture_output=True, text=True)
        return run.stderr

    plain = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    assert "Editable installation" in stderr(plain)
    assert stderr({**plain, "PYTHONWARNINGS": spec}) == ""
