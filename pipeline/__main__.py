"""``python -m pipeline key=value ...``: run one job, or a sweep with ``-m`` (see pipeline.cli)."""

import sys

if __name__ == "__main__":
    from pipeline.cluster.prestart import prestart

    prestart(sys.argv[1:])  # a local sweep's workers import while this process does

    from pipeline.cli import exit_now, main

    exit_now(main(sys.argv[1:]))
