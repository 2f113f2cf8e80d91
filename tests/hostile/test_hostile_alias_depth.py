"""Hostile review of the YAML bounds: aliases must not carry nesting past the depth bound.

Each anchored list below is 95 levels deep around the alias of the one before, so three of them
reach about 300 levels although no node in the text is nested deeper than 97, with a dozen
aliases. The what-if crashed with pydantic's "Maximum serialization depth exceeded" traceback on
such a pod; the bound on depth (`DRASAT_MAX_YAML_DEPTH`) must hold for what aliases expand to,
in the fast reading and the bounded one alike."""

from __future__ import annotations

import pathlib

import pytest

from drasat import loading
from drasat.api.inputerrors import InputError
from drasat.cli import main as cli_main


def _deep(anchors: int, levels: int = 95) -> str:
    parts = ["&a0 " + "[" * levels + "x" + "]" * levels]
    for k in range(1, anchors):
        parts.append(f"&a{k} " + "[" * levels + f"*a{k - 1}" + "]" * levels)
    return "[" + ", ".join(parts) + f", *a{anchors - 1}]"


def _pod(args: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    args: {args}
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


def test_nesting_deepened_by_aliases_is_refused_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(_pod(_deep(3)))
    code = cli_main.main(["whatif", "-f", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "nested deeper than 100 levels" in err, err


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("a: &x [[1]]\nb: [[*x]]\n", False),  # 4 levels through the alias: within 5
        ("a: &x [[1]]\nb: [[[*x]]]\n", True),  # 5 levels: the fifth is over
        ("a: &x [[1]]\nb: &y [*x]\nc: [[*y]]\n", True),  # through two aliases
        ("a: &x 1\nb: [[[[*x]]]]\n", False),  # a scalar adds no level
    ],
)
def test_fast_and_bounded_readings_bound_depth_through_aliases_alike(
    text: str, refused: bool
) -> None:
    limits = loading.Limits(max_depth=5)
    fast = loading._read_plain(text, limits)
    try:
        bounded = loading._read_bounded(text, "f", limits)
    except InputError as error:
        assert refused and "nested deeper than 5 levels" in str(error)
        assert fast is None
        return
    assert not refused, bounded
    assert fast is None or fast == bounded
