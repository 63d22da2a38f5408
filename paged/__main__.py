"""``python -m paged``: the installed ``paged`` command, run from a checkout."""

import sys

from paged.viz.cli import main

sys.exit(main())
