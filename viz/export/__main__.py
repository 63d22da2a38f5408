import sys

from viz.export.lecture import main

sys.exit(main())
