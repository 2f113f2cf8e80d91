"""Run cases of a target in-process, each under a time limit, and count the outcome classes."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import random
import resource
import signal
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .targets import Failure, Target

#: Outcome classes that are failures: the promise is that none of them ever happens.
FAILURES = ("traceback", "hang", "message", "internal error", "lost claim", "harness error")


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` of the code swallows it."""


@dataclass
class Found:
    target: str
    kind: str
    detail: str
    case: Any
    seed: str


@dataclass
class Stats:
    target: str
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    found: list[Found] = field(default_factory=list)
    seconds: float = 0.0
    slowest: float = 0.0
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0

    @property
    def failures(self) -> int:
        return sum(self.outcomes[k] for k in FAILURES)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise _Hang

    # pytest-timeout may have an alarm of its own running: it is put back, less the time spent.
    began = time.monotonic()
    previous = signal.signal(signal.SIGALRM, alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer - (time.monotonic() - began)))


def run_case(target: Target, case: Any, workdir: Path, time_limit: float) -> tuple[str, str]:
    """(outcome class, detail) of one case."""
    try:
        with _time_limit(time_limit):
            return target.run(case, workdir), ""
    except _Hang:
        return "hang", f"no answer in {time_limit:g} s"
    except Failure as failure:
        return failure.kind, failure.detail
    except Exception as error:  # the promise is broken: this is what the fuzzer looks for
        frames = traceback.extract_tb(error.__traceback__)
        where = ", ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[-3:])
        return "traceback", f"{type(error).__name__}: {str(error)[:300]} (at {where})"


def run_target(target: Target, cases: int, *, seed: int = 0, time_limit: float = 10.0) -> Stats:
    stats = Stats(target.name, rss_before_mib=rss_mib())
    logging.disable(logging.CRITICAL)  # the node plugin logs every refused claim
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="drasat-fuzz-") as tmp:
            workdir = Path(tmp)
            for index in range(cases):
                case_seed = f"{seed}/{target.name}/{index}"
                try:
                    case = target.case(random.Random(case_seed))
                except Exception as error:  # a bug of the fuzzer itself: counted, not fatal
                    stats.cases += 1
                    stats.outcomes["harness error"] += 1
                    stats.found.append(
                        Found(target.name, "harness error", repr(error), None, case_seed)
                    )
                    continue
                began = time.monotonic()
                kind, detail = run_case(target, case, workdir, time_limit)
                stats.slowest = max(stats.slowest, time.monotonic() - began)
                stats.cases += 1
                stats.outcomes[kind] += 1
                if kind in FAILURES:
                    stats.found.append(Found(target.name, kind, detail, case, case_seed))
    finally:
        logging.disable(logging.NOTSET)
    stats.seconds = time.monotonic() - started
    stats.rss_after_mib = rss_mib()
    return stats


def save(found: Found, folder: Path) -> Path:
    """A reproducer as tests/fuzz_regressions/objects/<target>-<hash>.json."""
    data: Any = found.case
    record: dict[str, Any] = {"target": found.target, "found": f"{found.kind}: {found.detail}"}
    if isinstance(data, bytes):
        try:
            record["input"] = data.decode("utf-8")
        except UnicodeDecodeError:
            record["input"], record["encoding"] = base64.b64encode(data).decode(), "base64"
    else:
        record["input"] = data
    text = json.dumps(record, indent=1, ensure_ascii=True, default=str) + "\n"
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{found.target}-{digest}.json"
    path.write_text(text, encoding="utf-8")
    return path


def load_saved(path: Path) -> tuple[str, Any]:
    record = json.loads(path.read_text(encoding="utf-8"))
    data = record["input"]
    if record.get("encoding") == "base64":
        return record["target"], base64.b64decode(data)
    if isinstance(data, str):
        return record["target"], data.encode("utf-8", "surrogatepass")
    return record["target"], data
