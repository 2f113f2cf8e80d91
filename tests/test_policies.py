"""Allocation policies: the shipped examples, `drasat policy`, and one-line errors for bad files."""

from __future__ import annotations

import io
import json
import pathlib

import jsonschema
import pytest
import yaml

from drasat import policyfiles
from drasat.api.inputerrors import InputError
from drasat.api.policy import AllocationPolicySpec
from drasat.cli import main
from drasat.cli import policy as policy_cli

REPO = pathlib.Path(__file__).resolve().parent.parent
POLICIES = REPO / "policies"
SHIPPED = ["binpack", "default", "fragmentation-aware", "reservations-and-limits", "spread"]

_GOOD = """\
apiVersion: policy.drasat.io/v1alpha1
kind: AllocationPolicy
metadata: {name: mine}
spec:
  objective: [{term: spread, weight: 3}]
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main.main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- shipped policies -------------------------------------------------------------------------


def test_every_shipped_policy_loads() -> None:
    assert policyfiles.shipped_names() == SHIPPED
    for name in SHIPPED:
        assert policyfiles.shipped(name).metadata.name == name


def test_default_policy_file_is_the_built_in_default() -> None:
    # The file documents the defaults; it must not drift from what drasat does without a policy.
    assert policyfiles.shipped("default").spec == AllocationPolicySpec()


def test_reservations_example_uses_every_kind_of_rule() -> None:
    spec = policyfiles.shipped("reservations-and-limits").spec
    assert [r.name for r in spec.rules.reservations] == ["reserve-team-a", "inference-l4"]
    assert spec.rules.namespaceLimits and spec.rules.allowedProducts
    assert spec.namespacePriorities and spec.lifecycle.init


def test_shipped_policies_are_commented() -> None:
    for name in SHIPPED:
        comments = [line for line in policyfiles.shipped_text(name).splitlines() if "#" in line]
        assert len(comments) >= 5, name


def test_unknown_shipped_policy_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"no shipped policy 'nope' \(known: binpack, default"):
        policyfiles.shipped("nope")


# --- the JSON schema ------------------------------------------------------------------------------


def test_checked_in_schema_is_fresh() -> None:
    checked_in = (POLICIES / "allocationpolicy.schema.json").read_text()
    assert checked_in == policy_cli.schema_text(), "stale: run `make generate`"


def test_shipped_policies_match_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(policy_cli.schema_text()))
    for path in sorted(POLICIES.glob("*.yaml")):
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], path.name


def test_schema_rejects_what_the_loader_rejects() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(policy_cli.schema_text()))
    good = yaml.safe_load(_GOOD)
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "apiVersion": "policy.drasat.io/v1"})
    assert not validator.is_valid({**good, "spec": {"objectve": []}})


def test_schema_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "schema")
    assert code == 0
    assert json.loads(out)["properties"]["kind"]["const"] == "AllocationPolicy"


# --- drasat policy validate -----------------------------------------------------------------------


def test_validate_reports_each_good_file(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(POLICIES / f"{name}.yaml") for name in ("default", "reservations-and-limits")]
    code, out, err = _run(capsys, "validate", *paths)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{paths[0]}: ok (policy default: 3 objective terms, 0 rules)",
        f"{paths[1]}: ok (policy reservations-and-limits: 4 objective terms, 6 rules)",
    ]


_BAD = [
    # (what is wrong, spec lines, the message after "error: FILE: ")
    (
        "typo in a field name",
        "  objectve: []\n",
        "document 1: AllocationPolicy p: spec.objectve: unknown field",
    ),
    (
        "weight above the maximum",
        "  objective: [{term: binpack, weight: 5000}]\n",
        "document 1: AllocationPolicy p: spec.objective[0].weight: "
        "Input should be less than or equal to 1000",
    ),
    (
        "negative weight",
        "  objective: [{term: binpack, weight: -1}]\n",
        "document 1: AllocationPolicy p: spec.objective[0].weight: "
        "Input should be greater than or equal to 0",
    ),
    (
        "unknown objective term",
        "  objective: [{term: pack}]\n",
        "document 1: AllocationPolicy p: spec.objective[0].term: Input should be 'binpack', "
        "'spread', 'fragmentation', 'preferNode', 'preferProduct' or 'minimizeMigWaste'",
    ),
    (
        "preferNode without nodes",
        "  objective: [{term: preferNode, weight: 2}]\n",
        "document 1: AllocationPolicy p: spec.objective[0]: "
        "preferNode needs nodes (a list of node name globs)",
    ),
    (
        "a limit that limits nothing",
        "  rules: {namespaceLimits: [{namespace: dev}]}\n",
        "document 1: AllocationPolicy p: spec.rules.namespaceLimits[0]: "
        "a namespace limit needs maxGpus and/or maxMigSlices",
    ),
    (
        "a lifecycle action outside the vocabulary",
        "  lifecycle: {init: [{action: runCommand, value: reboot}]}\n",
        "document 1: AllocationPolicy p: spec.lifecycle.init[0].action: Input should be "
        "'setComputeMode', 'setTimeSlice', 'setPowerLimitWatts', 'lockGpuClocksMHz' or "
        "'setPersistenceMode'",
    ),
    (
        "a lifecycle value the node plugin cannot apply",
        "  lifecycle: {init: [{action: setComputeMode, value: Exclusive}]}\n",
        "document 1: AllocationPolicy p: spec.lifecycle.init[0].value: setComputeMode takes "
        "Default, ExclusiveProcess or Prohibited, not 'Exclusive'",
    ),
    (
        "a power limit with a unit",
        "  lifecycle: {cleanup: [{action: setPowerLimitWatts, value: 500W}]}\n",
        "document 1: AllocationPolicy p: spec.lifecycle.cleanup[0].value: setPowerLimitWatts "
        "takes a positive integer, not '500W'",
    ),
    (
        "two reservations of one name",
        "  rules:\n    reservations:\n    - {name: r, namespaces: [a]}\n"
        "    - {name: r, namespaces: [b]}\n",
        "document 1: AllocationPolicy p: spec.rules.reservations[1].name: 'r' is already the "
        "name of reservations[0]",
    ),
]


@pytest.mark.parametrize(("case", "spec", "message"), _BAD, ids=[b[0] for b in _BAD])
def test_bad_policy_is_one_line_naming_file_and_key_path(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], case: str, spec: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    header = "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\n"
    path.write_text(f"{header}metadata: {{name: p}}\nspec:\n{spec}")
    code, out, err = _run(capsys, "validate", str(path))
    assert (code, out) == (2, "")
    assert err == f"error: {path}: {message}\n"


def test_wrong_api_version_is_rejected(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(_GOOD.replace("policy.drasat.io/v1alpha1", "policy.drasat.io/v1beta1"))
    code, _, err = _run(capsys, "validate", str(path))
    assert code == 2
    assert err == (
        f"error: {path}: document 1: AllocationPolicy mine: apiVersion: "
        "expected policy.drasat.io/v1alpha1, got 'policy.drasat.io/v1beta1'\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("spec: [unclosed\n", "malformed YAML"),
        (
            "apiVersion: v1\nkind: ConfigMap\n",
            "expected exactly one AllocationPolicy, found ConfigMap",
        ),
        (_GOOD + "---\n" + _GOOD, "expected exactly one AllocationPolicy, found AllocationPolicy,"),
    ],
    ids=["malformed", "other-kind", "two-policies"],
)
def test_not_a_policy_file(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    code, _, err = _run(capsys, "validate", str(path))
    assert code == 2
    assert err.startswith(f"error: {path}") and message in err and err.count("\n") == 1


def test_every_file_is_checked_and_any_bad_one_fails(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(_GOOD)
    missing = tmp_path / "missing.yaml"
    code, out, err = _run(capsys, "validate", str(missing), str(good))
    assert code == 2
    assert out == f"{good}: ok (policy mine: 1 objective term, 0 rules)\n"
    assert err == f"error: {missing}: no such file\n"


def test_policy_without_an_action_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys)
    assert code == 2 and "validate" in err


def test_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "list")
    assert code == 0 and [line.split(":")[0] for line in out.splitlines()] == SHIPPED
    code, out, _ = _run(capsys, "show", "spread")
    assert code == 0 and out == (POLICIES / "spread.yaml").read_text()
    code, _, err = _run(capsys, "show", "nope")
    assert code == 2 and err.startswith("error: no shipped policy 'nope'")


# --- from text (a ConfigMap value) ---------------------------------------------------------------


def test_policy_from_text_names_its_source() -> None:
    assert policyfiles.from_text(_GOOD, source="configmap drasat/policy").metadata.name == "mine"
    with pytest.raises(InputError) as info:
        policyfiles.from_text(_GOOD.replace("weight: 3", "weight: x"), source="cm drasat/p")
    assert str(info.value).startswith("cm drasat/p: document 1: AllocationPolicy mine: spec.")
    with pytest.raises(
        InputError, match=r"^cm: expected exactly one AllocationPolicy, found nothing"
    ):
        policyfiles.from_text("", source="cm")


def test_validate_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(_GOOD))
    code, out, _ = _run(capsys, "validate", "-")
    assert (code, out) == (0, "-: ok (policy mine: 1 objective term, 0 rules)\n")
