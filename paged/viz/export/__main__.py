import sys

from paged.viz.export.site import export_main

sys.exit(export_main())
