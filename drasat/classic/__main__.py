"""`python -m drasat.classic`: `python -m drasat.testbed.sim` with the simulated classic DRA
scheduler (`--scheduler`) for manual runs of the classic controller."""

from __future__ import annotations

import sys

from drasat.classic.scheduler import Scheduler
from drasat.testbed.sim.__main__ import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m drasat.classic", classic_scheduler=Scheduler))
