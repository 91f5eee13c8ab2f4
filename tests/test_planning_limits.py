"""Planning never works silently on an unbounded grid (issue 51, class 4): a sweep of more than
``hydra.sweeper.max_points`` points is refused in one line, counted from the lengths of the
swept values before any point is made; below the limit, planning says how far it is."""

from __future__ import annotations

import time

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import HydraContext, RunMode

from algorithms.errors import InputError
from hydra_plugins.sgp_dask_launcher import grouped_sweeper
from hydra_plugins.sgp_dask_launcher.grouped_sweeper import MAX_POINTS, GroupedSweeper
from pipeline.config import CONF_DIR
from pipeline.sweep import plan


class Launcher:
    def __init__(self) -> None:
        self.batches: list[list[list[str]]] = []

    def launch(self, job_overrides, initial_job_idx):
        self.batches.append([list(o) for o in job_overrides])
        return []


@pytest.fixture
def sweeper(tmp_path):
    """``sweeper(**kwargs)``: a GroupedSweeper on this project's conf/ with a recording launcher,
    its sweep directory under ``tmp_path``."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="t"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(
            "config", [f"hydra.sweep.dir={tmp_path / 'sweep'}", "allow_outside_outputs=true"],
            RunMode.MULTIRUN)

        def make(**kwargs) -> GroupedSweeper:
            made = GroupedSweeper(**kwargs)
            made.hydra_context = HydraContext(config_loader=loader, callbacks=Callback())
            made.config, made.launcher = master, Launcher()
            return made
        yield make


def test_a_sweep_above_the_limit_is_refused_before_any_point_is_made(sweeper, tmp_path,
                                                                    monkeypatch):
    made = sweeper()
    assert made.max_points == MAX_POINTS == 100_000

    def no_values(*args, **kwargs):
        raise AssertionError("a point was made")

    monkeypatch.setattr(GroupedSweeper, "_override_values", no_values)
    start = time.perf_counter()
    with pytest.raises(InputError) as refused:
        made.sweep(["seed=range(0,1000000)", "kappa=1,2", "lam=0.1"])
    assert time.perf_counter() - start < 5
    assert str(refused.value) == (
        "this sweep has 2,000,000 points, more than hydra.sweeper.max_points=100000 (planning "
        "holds every point in memory); split it into smaller sweeps, or pass "
        "hydra.sweeper.max_points=2000000 to plan it anyway")
    assert made.launcher.batches == [] and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("arguments, points", [
    (["seed=range(0,10)", "kappa=choice(1,2,3)"], 30),
    (["seed=range(10,0,-3)"], 4),                      # 10, 7, 4, 1
    (["lam=range(0.1,1.0,0.2)"], 5),                   # a float range
    (["algorithm=glob(sklearn_*)", "seed=0,1"], 6),
    (["seed=0", "lam=0.1,0.2"], 2),
])
def test_the_count_is_the_number_of_points(sweeper, arguments, points):
    at_limit = sweeper(max_points=points)
    at_limit.sweep(arguments)
    assert len(at_limit.launcher.batches[0]) == points
    with pytest.raises(InputError, match=f"has {points} points, more than "
                                         f"hydra.sweeper.max_points={points - 1} "):
        sweeper(max_points=points - 1).sweep(arguments)


def test_grids_are_counted_together(sweeper):
    grids = [{}, {"algorithm": "exact", "seed": "0,1,2"}]
    with pytest.raises(InputError, match="has 6 points, more than hydra.sweeper.max_points=5"):
        sweeper(grids=grids, max_points=5).sweep(["seed=0,1,2"])


def test_no_limit_and_bad_limits(sweeper):
    made = sweeper(max_points=None)
    made.sweep(["seed=range(0,200)"])
    assert len(made.launcher.batches[0]) == 200
    for bad in (0, -1, 2.5, True, "many"):
        with pytest.raises(HydraException, match="hydra.sweeper.max_points"):
            GroupedSweeper(max_points=bad)


def test_the_command_line_refuses_a_million_point_dry_run_in_one_line(tmp_path, run_cli):
    start = time.perf_counter()
    ran = run_cli(tmp_path, "-m", "dry_run=true", "seed=range(0,1000)", "kappa=range(1,1001)")
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "error: this sweep has 1,000,000 points, more than hydra.sweeper.max_points=100000 "
        "(planning holds every point in memory); split it into smaller sweeps, or pass "
        "hydra.sweeper.max_points=1000000 to plan it anyway"]
    assert time.perf_counter() - start < 60  # Hydra's start; before: minutes, memory growing
    assert not (tmp_path / "outputs").exists()


def test_planning_says_how_far_it_is(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(plan, "PLAN_PROGRESS_SECONDS", 0.0)
    ran = run_cli(tmp_path, "-m", "dry_run=true", "dataset=sine1d", "algorithm=exact",
                  "seed=range(0,3)", "hydra.sweeper.max_points=3")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    said = [line for line in lines if line.startswith("planning: ")]
    assert said[-1].startswith("planning: 3 of 3 points composed, checked and named ("), lines
    assert lines[-1].startswith("dry run: 3 sweep points"), lines


def test_progress_is_quiet_for_a_quick_plan(capsys):
    progress = plan.PlanProgress(1000)
    for _ in range(2000):
        progress()
    assert capsys.readouterr().out == ""
    assert grouped_sweeper.MAX_POINTS == 100_000
