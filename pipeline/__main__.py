"""``python -m pipeline key=value ...``: run one job, or a sweep with ``-m`` (see pipeline.cli)."""

import sys

from pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
