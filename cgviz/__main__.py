"""`python -m cgviz ...`: the `cgviz` command (cgviz/cli.py)."""

import sys

from cgviz.cli import main

sys.exit(main())
