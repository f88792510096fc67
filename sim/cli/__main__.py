"""`python -m shoal.cli ...`: the same as the `shoal` command."""

import sys

from shoal.cli.main import main

sys.exit(main())
