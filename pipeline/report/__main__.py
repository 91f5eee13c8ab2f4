"""``python -m pipeline.report <results.zarr> [--out DIR] [--select DIM=VALUE ...]``."""

import sys

from pipeline.report import main

sys.exit(main())
