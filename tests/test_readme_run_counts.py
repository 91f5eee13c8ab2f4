"""The run-time table of the docs' paper-experiments page states how many sweep points and
jobs each experiment has at full size and how many jobs it runs at ``size=small``: every such
count is checked against the sweep's own dry-run plan (``dry_run=true``), so the table cannot
drift from the configs (it said 18 jobs for ``smola2000_convergence``, which runs 12, and 1608
points for ``uci_frontier`` after its grid had grown to 4968).

The plan is made in this process with the job's data left out of its hash (the settings'
hash, :func:`pipeline.job.identity.setting_hash`): jobs with equal settings read equal data,
so the distinct jobs are the same, and no dataset is built to be hashed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.job.identity import setting_hash
from tests.test_plan_identities import recorded

ROOT = Path(__file__).resolve().parent.parent
# | `name` | full size: sweep points | full-size run time | `size=small`: jobs, wall time |
ROW = re.compile(r"^\| `(\w+)` \| [^|]+ \| [^|]+ \| (\d+) (jobs?|points)\b", re.M)
# the full-size cells: sweep points (e.g. "10 000 (dry run)"), then "<n> jobs" where stated
FULL = re.compile(r"^\| `(\w+)` \| ([\d\u202f\u2009 ]+)(?: \(dry run\))? \| (?:(\d+) jobs\b)?",
                  re.M)
PLAN = re.compile(r"dry run: (\d+) sweep points, (\d+) distinct jobs")


def stated_counts() -> list[tuple[str, int, str]]:
    """(experiment, count, "jobs" or "points") of every row of README's run-time table whose
    ``size=small`` cell starts with a count."""
    return [(name, int(n), "points" if unit == "points" else "jobs")
            for name, n, unit in ROW.findall(_table())]


def _table() -> str:
    text = (ROOT / "docs" / "how-to" / "paper-experiments.md").read_text()
    table = text[text.index("## Run times"):]
    return table[:table.index("\n## ", 1)]


def stated_full_counts() -> list[tuple[str, int, int | None]]:
    """(experiment, sweep points, distinct jobs or None) of every row of README's run-time
    table whose full-size cells start with counts."""
    return [(name, int(re.sub(r"\D", "", points)), int(jobs) if jobs else None)
            for name, points, jobs in FULL.findall(_table())]


def _plan(name: str, run_cli, tmp_path, monkeypatch, *args: str) -> tuple[int, int]:
    monkeypatch.setattr("pipeline.job.spec.config_hash",
                        lambda config, write_data=True: setting_hash(config))
    ran = run_cli(tmp_path, f"experiment={name}", *args, "dry_run=true")
    assert ran.returncode == 0, ran.stderr[-2000:]
    planned = PLAN.search(ran.stdout)
    assert planned, ran.stdout[-2000:]
    return int(planned[1]), int(planned[2])


def test_the_run_time_table_is_read():
    rows = {name: (n, unit) for name, n, unit in stated_counts()}
    assert len(rows) >= 20 and rows["zhang2001"] == (7, "jobs"), rows
    assert rows["bench_sweep_plan"][1] == "points"
    full = {name: (points, jobs) for name, points, jobs in stated_full_counts()}
    assert len(full) >= 20 and full["zhang2001"] == (15, 11), full
    assert full["bench_sweep_plan"] == (10_000, None)


@pytest.mark.parametrize("name,count,unit", stated_counts(), ids=lambda v: str(v))
def test_the_readme_states_the_small_runs_planned_jobs(name, count, unit):
    """Read from the record of every experiment's ``size=small`` plan, which
    tests/test_plan_identities.py holds equal to the plan itself (each plan made once)."""
    plan = recorded(name)
    assert plan[unit] == count, (
        f"README says {name} at size=small runs {count} {unit}; its plan: {plan['points']} "
        f"sweep points, {plan['jobs']} distinct jobs")


@pytest.mark.slow
@pytest.mark.parametrize("name,points,jobs", stated_full_counts(), ids=lambda v: str(v))
def test_the_readme_states_the_full_runs_planned_points_and_jobs(name, points, jobs, tmp_path,
                                                                 run_cli, monkeypatch):
    planned_points, planned_jobs = _plan(name, run_cli, tmp_path, monkeypatch)
    assert (planned_points, planned_jobs if jobs is not None else None) == (points, jobs), (
        f"README says {name} at full size has {points} sweep points"
        + (f" and {jobs} jobs" if jobs is not None else "")
        + f"; its plan: {planned_points} sweep points, {planned_jobs} distinct jobs")
