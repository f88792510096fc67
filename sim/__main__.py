"""`python -m shoal ...`: the `shoal` command line (for a child process of this Python)."""

from shoal.cli.main import main

raise SystemExit(main())
