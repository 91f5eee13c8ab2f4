"""``python -m pipeline key=value ...``: run one job, or a sweep with ``-m`` (see pipeline.app)."""

import sys

from pipeline import sweep
from pipeline.app import main
from pipeline.cli import check_group_choices


def run() -> int:
    error = check_group_choices(sys.argv[1:])
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    main()
    outcome = sweep.LAST_SWEEP
    if outcome is None:  # a single job: main() printed its summary
        return 0
    print(f"{outcome.n_points} sweep points, {outcome.n_jobs} distinct jobs: "
          f"{outcome.n_cached} already finished, {outcome.n_run} run, "
          f"{len(outcome.failed)} failed")
    for overrides, error in outcome.failed:
        print(f"failed: {overrides}: {error}")
    print(f"results: {outcome.results_path}")
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(run())
