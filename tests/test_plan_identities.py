"""Every job keeps its name through a refactor: each experiment's dry-run plan at
``size=small`` is made in this process, every planned job's settings hashed
(:func:`pipeline.job.identity.setting_hash`: its identity without the data's and the code's
versions, which name what a change of data or code recomputes), and the sorted hashes' digest
compared with the one recorded in ``tests/data/plan_identities.json``.

A change that renames a job (a new identity key, a default that moves) fails here with the new
entry to record, so that renaming every cached result of an experiment is a decision, not an
accident. The record was made from main at 5aecd92, before JobSpec became the jobs' only form
(the points' counts added at cab399b, the names unchanged). The docs' run-time table states
its ``size=small`` counts from this record (tests/test_readme_run_counts.py), so each plan is
made once."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from pipeline.config import read_yaml
from pipeline.job.identity import setting_hash

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "data" / "plan_identities.json"
# the experiments that plan jobs (a benchmark's module runs it: ``benchmark: <module>``)
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")
                     if not read_yaml(p).get("benchmark"))


def planned_settings(name: str, run_cli, tmp_path, monkeypatch) -> dict:
    """``{"points": sweep points, "jobs": distinct jobs, "settings": digest of their sorted
    setting hashes}`` of ``experiment=name size=small``'s dry-run plan."""
    hashes: set[str] = set()

    def named(config, write_data=True):
        hashes.add(setting_hash(config))
        return setting_hash(config)

    monkeypatch.setattr("pipeline.job.spec.config_hash", named)
    ran = run_cli(tmp_path, "-m", f"experiment={name}", "size=small", "dry_run=true")
    assert ran.returncode == 0, ran.stderr[-2000:]
    planned = re.search(r"dry run: (\d+) sweep points, (\d+) distinct jobs", ran.stdout)
    assert planned and int(planned[2]) == len(hashes), ran.stdout[-2000:]
    digest = hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()[:16]
    return {"points": int(planned[1]), "jobs": len(hashes), "settings": digest}


def recorded(name: str) -> dict:
    """The record of ``experiment=name size=small``'s plan (its points, jobs and names)."""
    return json.loads(RECORD.read_text())[name]


def test_every_experiment_has_a_record():
    assert sorted(json.loads(RECORD.read_text())) == EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_jobs_an_experiment_plans_keep_their_names(name, run_cli, tmp_path, monkeypatch):
    planned = planned_settings(name, run_cli, tmp_path, monkeypatch)
    assert planned == json.loads(RECORD.read_text()).get(name), (
        f"{name}'s jobs are named differently from the record (a cached result would run "
        f"again); if that is meant, record {json.dumps({name: planned})} in {RECORD.name}")
