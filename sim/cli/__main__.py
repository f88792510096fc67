"""`python -m sim.cli ...`: the same as the `shoal` command."""

import sys

from sim.cli.main import main

sys.exit(main())
