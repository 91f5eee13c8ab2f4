"""``python -m pipeline key=value ...``: run one job, or a sweep with ``-m`` (see pipeline.cli)."""

import sys

from pipeline.cli import exit_now, main

if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
