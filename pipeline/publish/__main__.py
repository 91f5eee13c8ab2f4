"""``python -m pipeline.publish …`` (:mod:`pipeline.publish.cli`)."""

import sys

from pipeline.publish.cli import main

sys.exit(main())
