"""README's run-time table states how many jobs each experiment runs at ``size=small``: every
such count is checked against the sweep's own dry-run plan (``dry_run=true``), so the table
cannot drift from the configs (it said 18 jobs for ``smola2000_convergence``, which runs 12).

The plan is made in this process with the job's data left out of its hash (the settings'
hash, :func:`pipeline.job.identity.setting_hash`): jobs with equal settings read equal data,
so the distinct jobs are the same, and no dataset is built to be hashed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.job.identity import setting_hash

ROOT = Path(__file__).resolve().parent.parent
# | `name` | full size: sweep points | full-size run time | `size=small`: jobs, wall time |
ROW = re.compile(r"^\| `(\w+)` \| [^|]+ \| [^|]+ \| (\d+) (jobs?|points)\b", re.M)
PLAN = re.compile(r"dry run: (\d+) sweep points, (\d+) distinct jobs")


def stated_counts() -> list[tuple[str, int, str]]:
    """(experiment, count, "jobs" or "points") of every row of README's run-time table whose
    ``size=small`` cell starts with a count."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("### Run times"):]
    table = table[:table.index("\n### ", 1)]
    return [(name, int(n), "points" if unit == "points" else "jobs")
            for name, n, unit in ROW.findall(table)]


def test_the_run_time_table_is_read():
    rows = {name: (n, unit) for name, n, unit in stated_counts()}
    assert len(rows) >= 20 and rows["zhang2001"] == (7, "jobs"), rows
    assert rows["bench_sweep_plan"][1] == "points"


@pytest.mark.parametrize("name,count,unit", stated_counts(), ids=lambda v: str(v))
def test_the_readme_states_the_small_runs_planned_jobs(name, count, unit, tmp_path, run_cli,
                                                       monkeypatch):
    monkeypatch.setattr("pipeline.sweep.plan.config_hash",
                        lambda config, write_data=True: setting_hash(config))
    ran = run_cli(tmp_path, f"experiment={name}", "size=small", "dry_run=true")
    assert ran.returncode == 0, ran.stderr[-2000:]
    planned = PLAN.search(ran.stdout)
    assert planned, ran.stdout[-2000:]
    points, jobs = int(planned[1]), int(planned[2])
    assert (points if unit == "points" else jobs) == count, (
        f"README says {name} at size=small runs {count} {unit}; its plan: {points} sweep "
        f"points, {jobs} distinct jobs")
