import sys

from viz.export.site import export_main

sys.exit(export_main())
