"""``python -m kvsim``: the command line (see :mod:`kvsim.cli`)."""

import sys

from .cli import main

sys.exit(main())
