"""``python -m pipeline key=value ...``: run one job, or a sweep with ``-m`` (see pipeline.cli).
The program runs in a child process that :func:`pipeline.watch.watched` waits for, so a death by
a signal (a crash in the BLAS library, the out-of-memory killer) still ends with one line."""

import sys

if __name__ == "__main__":
    from pipeline.watch import watched

    def program() -> int:
        from pipeline.cluster.prestart import prestart

        prestart(sys.argv[1:])  # a local sweep's workers import while this process does

        from pipeline.cli import exit_now, main

        exit_now(main(sys.argv[1:]))

    watched(program)
