"""The commands of the docs: every command line of the ```console blocks of README.md and docs/,
and what the docs check (tests/test_docs_commands.py, tests/e2e/test_e2e_docs_commands.py) does
with each: run it here, render it with helm, send it to the real API server as a server-side dry
run, or leave it out for a reason said here. A command no rule covers fails the check, so a new
command in the docs gets a test or a reason."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

RUN = "run"  # drasat offline, in this process
HELM = "helm"  # helm install/upgrade rendered with `helm template`
DRY_RUN = "dry-run"  # kubectl apply --dry-run=server against the real 1.37 API server
FLAGS = "flags"  # a benchmark, reduced to parsing its flags with its own parser


@dataclass(frozen=True)
class Command:
    doc: str  # README.md, docs/WHATIF.md
    line: int
    text: str  # one command, continuation lines joined, comment left out
    output: str  # what the docs show after it (blocks with `$ ` prompts), else ""

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


#: (pattern, what to do): the first rule whose pattern matches the command decides. A reason
#: instead of RUN, HELM or DRY_RUN says why the command cannot run here.
RULES: list[tuple[str, str]] = [
    (
        r"^make ",
        "make builds the virtual environment and runs the whole suite or the demo; "
        "the commands its targets call are checked here one by one",
    ),
    (r"^docker ", "needs a container engine and a registry"),
    (
        r"^drasat demo",
        "starts a whole cluster for seconds to minutes: tests/test_demo.py and "
        "tests/e2e/test_e2e_demo.py run it",
    ),
    (
        r"^drasat (controller|nodeplugin)",
        "a server that runs until stopped, against a cluster "
        "or a kubelet: tests/controller and tests/nodeplugin start it",
    ),
    (r"^drasat explain", "reads a live cluster's pod: tests/controller/test_explain_cli.py"),
    (
        r"^drasat whatif --from-cluster",
        "reads a live cluster (kubeconfig): tests/whatif/test_whatif_v1_live.py",
    ),
    (r"^drasat cdi-spec --from-nvml", "needs an NVIDIA GPU: make gpu-check"),
    (r"^drasat ", RUN),
    (r"^helm (install|upgrade) ", HELM),
    (r"^helm uninstall", "removes an installed release"),
    (r"^kubectl apply -f deploy/", DRY_RUN),
    (r"^kubectl get nas .*\| drasat whatif", "reads a live cluster's NodeAllocationStates"),
    (r"^kubectl ", "reads or changes a cluster where drasat runs on GPU nodes"),
    (
        r"^(scripts/kube-cluster|export KUBECONFIG)",
        "starts, reads or stops a control plane by "
        "hand; tests/kubecluster.py starts the same for the tests",
    ),
    # Benchmarks take minutes to hours (traces from ../shared/traces): their flags are parsed by
    # their own parser here, and tests/bench runs small ones.
    (r"^\.venv/bin/python -m bench\.", FLAGS),
    (
        r"^/usr/bin/time -v \.venv/bin/python -m drasat whatif --cluster big/",
        "times the what-if on the inputs the benchmark before it wrote (minutes); "
        "tests/whatif/test_whatif_api_refusals.py holds the limit on pods",
    ),
    (
        r"^python3 -m pip (wheel|install) ",
        "builds or installs the wheel: tests/test_packaging.py builds it with pip wheel and "
        "installs it with its demo extra in a fresh venv",
    ),
    (r"^scripts/kube-build", "a Go build of minutes: make test and make e2e-versions run it"),
    (
        r"^DRASAT_APISERVER_EXAMPLES=\d+ \.venv/bin/pytest ",
        "the long run of a test make test runs with 100 examples: "
        "tests/whatif/test_whatif_apiserver_oracle.py",
    ),
]


def what_to_do(command: Command) -> str | None:
    for pattern, verdict in RULES:
        if re.search(pattern, command.text):
            return verdict
    return None


def _strip_comment(line: str) -> str:
    """The command without its trailing `# ...` (shlex knows quotes; the text keeps its
    spelling)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    if not tokens:
        return ""
    # Cut the raw line after the last token's end: find the comment start outside quotes.
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands() -> list[Command]:
    """Every command line of every console block, in order."""
    found: list[Command] = []
    for doc in DOCS:
        text = doc.read_text()
        name = str(doc.relative_to(ROOT))
        for block in re.finditer(r"^```console\n(.*?)^```", text, re.S | re.M):
            first = text[: block.start()].count("\n") + 2
            lines = block.group(1).splitlines()
            prompted = any(line.startswith("$ ") for line in lines)
            i = 0
            while i < len(lines):
                line = lines[i]
                start = i
                if prompted and not line.startswith("$ "):
                    i += 1
                    continue
                joined = line.removeprefix("$ ")
                while joined.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    joined = joined[:-1].rstrip() + " " + lines[i].strip()
                i += 1
                output = []
                while prompted and i < len(lines) and not lines[i].startswith("$ "):
                    output.append(lines[i])
                    i += 1
                command = _strip_comment(joined)
                if command:
                    found.append(Command(name, first + start, command, "\n".join(output)))
    return found
