"""``python -m pipeline.report <results.zarr> [--out DIR] [--select DIM=VALUE ...]``
(:mod:`pipeline.report.build`)."""

import sys

from pipeline.report.build import main

sys.exit(main())
