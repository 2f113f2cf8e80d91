"""`python -m drasat` is the `drasat` command."""

import sys

from drasat.cli import main

sys.exit(main.main())
