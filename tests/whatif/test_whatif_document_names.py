"""A document that is not a manifest is named by what it holds, not `? ?`."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param(
            "foo: 1\nbar: [1, 2]\n",
            "a mapping without kind or metadata.name (keys: foo, bar)",
            id="no-kind-no-name",
        ),
        pytest.param(
            "metadata: {name: x, namespace: ns}\n", "an object ns/x without kind", id="no-kind"
        ),
        pytest.param("apiVersion: v1\nkind: Pod\n", "Pod without metadata.name", id="no-name"),
    ],
)
def test_a_document_that_is_no_manifest_is_named_by_what_it_holds(
    run_cli: Any, write_yaml: Any, text: str, named: str
) -> None:
    result = run_cli("-f", write_yaml("m.yaml", text))
    assert result.code == 2
    assert f"document 1: {named}: " in result.err
    assert "? ?" not in result.err and ": ?:" not in result.err


def test_a_policy_file_that_is_no_manifest_is_named_by_what_it_holds(
    write_yaml: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from drasat.cli import main

    path = write_yaml("p.yaml", "foo: 1\nbar: [1, 2]\n")
    assert main.main(["policy", "validate", path]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "expected exactly one AllocationPolicy, found a mapping without kind or metadata.name "
        "(keys: foo, bar)\n"
    )


def test_describe_names_what_a_document_holds() -> None:
    from drasat import loading

    (plain, named, kinded, full) = loading.parse_documents(
        "foo: 1\n---\nmetadata: {name: x}\n---\nkind: Pod\n---\n"
        "kind: Pod\nmetadata: {name: p, namespace: ns}\n",
        "f.yaml",
    )
    assert plain.describe() == "a mapping without kind or metadata.name (keys: foo)"
    assert named.describe() == "an object x without kind"
    assert kinded.describe() == "Pod without metadata.name"
    assert full.describe() == "Pod ns/p" and full.describe("") == "Pod p"
    assert plain.kind_text() == plain.describe() and full.kind_text() == "Pod"
