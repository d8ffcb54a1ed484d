"""``python -m coursekit ...`` = the ``coursekit`` command (see coursekit/cli.py)."""

import sys

from coursekit.cli import main

sys.exit(main())
