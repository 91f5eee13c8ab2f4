"""Sweep planning and batching (issue 17): shared compositions equal Hydra's own, job files
read for consolidation equal xarray's reading, batches sized to the measured job time, a dry
run that writes nothing."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from pipeline.config import CONF_DIR
from pipeline.job.identity import job_config
from pipeline.report.build import render
from pipeline.results.consolidate import load
from pipeline.results.job_file import _open_job, read_job
from pipeline.sweep.compose import compose_jobs
from pipeline.sweep.schedule import Batches

POINTS = [
    ["experiment=bench_sweep_overhead", "seed=3"],
    ["experiment=bench_sweep_overhead", "seed=4", "kernel.width=0.5"],
    ["experiment=bench_sweep_overhead", "size=small", "seed=5"],
    # interpolations resolved per point: the split follows the seed
    ["experiment=smola2001_classification", "dataset=abalone_binary", "seed=2",
     "algorithm=gp_laplace"],
    ["algorithm=sgma", "dataset=abalone", "lam=0.01", "algorithm.eps=0.1"],
    ["algorithm=exact", "dataset=sine1d", "+algorithm.extra=1"],  # not a leaf: composed whole
    # cluster.address is ${scheduler}: a leaf it refers to is resolved per point, others not
    ["cluster=address", "scheduler=tcp://10.0.0.1:8786", "seed=1"],
    ["cluster=address", "scheduler=tcp://10.0.0.2:8786", "seed=2"],
]


def test_shared_compositions_equal_hydras_composition_of_each_point():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="t"):
        loader = GlobalHydra.instance().hydra.config_loader
        master = loader.load_configuration("config", [], RunMode.MULTIRUN)
        points = compose_jobs(master, loader, POINTS)
        for overrides, point in zip(POINTS, points, strict=True):
            hydra_own = loader.load_sweep_config(master, overrides)
            assert point.config() == job_config(hydra_own), overrides
            assert job_config(point.hydra_config()) == job_config(hydra_own), overrides
        # points that differ in leaf values share one composition
        assert points[0].base is points[1].base and points[0].base is not points[2].base
        assert points[-1].base is points[-2].base
        assert points[-1].config()["cluster"]["address"] == "tcp://10.0.0.2:8786"
        seeds = compose_jobs(master, loader, [["dataset=sine1d", f"seed={s}"] for s in range(3)])
        assert len({id(p.base) for p in seeds}) == 1


def test_hydra_records_load_equal_to_the_files_of_hydras_run_job(tmp_path):
    """A job whose Hydra settings ask only for its .hydra/ files gets them from
    pipeline.sweep.job_files, with the values Hydra's own run_job writes; a job with
    hydra.job.env_set (or a callback) still needs run_job."""
    import yaml
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    from pipeline.job.spec import JobSpec
    from pipeline.job.validate import drop_inapplicable_options
    from pipeline.sweep.compose import PlannedJob
    from pipeline.sweep.execute import _hydra_job_config
    from pipeline.sweep.job_files import HydraRecords, writes_only_files

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="t"):
        hydra = GlobalHydra.instance().hydra
        master = hydra.config_loader.load_configuration("config", [], RunMode.MULTIRUN)
        context = HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(master))
        points = [*POINTS, ["algorithm=exact", "+hydra.job.env_set.MARK=1"]]
        composed = compose_jobs(master, hydra.config_loader, points)
        records = HydraRecords()
        for num, (overrides, point) in enumerate(zip(points, composed, strict=True)):
            config = point.config()
            drop_inapplicable_options(config)  # as the sweep drops an unused option
            job = PlannedJob(overrides, point, JobSpec.from_config(config), f"h{num}", {}, "",
                             num)
            if not writes_only_files(context, job):
                assert "env_set" in overrides[-1]
                continue
            records.write(job, tmp_path / "lean")
            run_job(hydra_context=context, task_function=lambda cfg: None,
                    config=_hydra_job_config(job, tmp_path / "hydra"),
                    job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
                    configure_logging=False)
            for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
                lean, own = (yaml.safe_load((tmp_path / where / "jobs" / f"h{num}" / ".hydra"
                                             / name).read_text())
                             for where in ("lean", "hydra"))
                if name == "hydra.yaml":  # each names its own sweep directory
                    for node in (lean, own):
                        node["hydra"]["sweep"].pop("dir")
                        node["hydra"]["runtime"].pop("output_dir")
                assert lean == own, (overrides, name)
        assert num == len(POINTS)


def test_job_files_read_for_consolidation_equal_xarrays_reading(tmp_path):
    from pipeline.job.run import run_job

    config = {"algorithm": {"name": "sgma", "max_basis": 10}, "dataset": {"name": "sine1d"},
              "kernel": {"name": "rbf", "width": 0.1}, "lam": 0.1, "kappa": 5, "seed": 0,
              "store_root": str(tmp_path / "stores"),
              "certificate": {"enabled": True, "tol": 1e-3, "max_dual": 50, "kappa": 10}}
    path = run_job(config, tmp_path / "result.nc").result_path
    fast, full = read_job(path), _open_job(path)
    assert fast.attrs.keys() == full.attrs.keys()
    assert all(fast.attrs[k] == full.attrs[k] for k in full.attrs)
    assert set(fast.data_vars) == set(full.data_vars) and fast.sizes == dict(full.sizes)
    for name in full.data_vars:
        a, b = full[name].values, fast[name].values
        assert a.dtype == b.dtype and full[name].dims == fast[name].dims
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name


class _Job:
    def __init__(self, h):
        self.hash = h


def test_batches_follow_the_measured_job_time_and_shrink_towards_the_end():
    store, other = object(), object()
    jobs = [_Job(str(i)) for i in range(100)]
    needs = {j.hash: (store if int(j.hash) < 90 else other) for j in jobs}
    batches = Batches(jobs, needs)
    assert len(batches.take(workers=2)) == 1  # no job time known yet: one job
    for _ in range(10):
        batches.measured(0.05)  # 50 ms a job: 0.5 s of jobs is 10 of them
    sizes = []
    taken = []
    while batches:
        batch = batches.take(workers=2)
        assert len({id(needs[j.hash]) for j in batch}) == 1  # one ingest per batch
        sizes.append(len(batch))
        taken += [j.hash for j in batch]
    assert taken == [str(i) for i in range(1, 100)]  # every job once, in sweep order
    assert max(sizes) == 10  # 0.5 s of 50 ms jobs
    assert sizes[-1] == 1 and max(sizes[-3:]) <= 2  # the last share of the jobs left is small


@pytest.mark.slow
def test_a_dry_run_plans_the_sweep_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "experiment=bench_sweep_plan",
                           "size=small"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("dry run: 1000 sweep points, 1000 distinct jobs: 0 already "
                           "finished, 1000 would run; planned in "), line
    assert "client peak memory" in line and line.endswith("nothing submitted")
    assert not (tmp_path / "outputs" / "bench_sweep_plan_small").exists()
    single = subprocess.run([sys.executable, "-m", "pipeline", "dataset=sine1d", "dry_run=true"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert single.returncode == 2 and single.stderr.startswith("error: dry_run=true plans a "
                                                               "sweep"), single.stderr
    assert not Path(tmp_path / "outputs" / "runs").exists() or not any(
        Path(tmp_path / "outputs" / "runs").rglob("result.nc"))


@pytest.mark.slow
def test_the_sweep_overhead_benchmark_writes_its_figures(tmp_path, in_process):
    """python -m pipeline.bench.sweep_overhead size=small: the small variants of the three benchmark
    experiments, timed from outside; phases add up to the whole process."""
    import json

    proc = subprocess.run([sys.executable, "-m", "pipeline.bench.sweep_overhead", "size=small"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs" / "bench_sweeps_small"
    figures = json.loads((out / "figures.json").read_text())
    assert [s["jobs"] for s in figures["sweeps"]] == [10, 20, 10]
    assert [s["warm_workers"] for s in figures["sweeps"]] == [False, False, True]
    for s in figures["sweeps"]:
        assert s["workers"] == 2 and s["ideal_seconds"] == pytest.approx(
            s["job_seconds_sum"] / 2)
        assert sum(s["phases"].values()) == pytest.approx(s["whole_process_seconds"])
        assert s["ratio"] == pytest.approx(s["whole_process_seconds"] / s["ideal_seconds"])
        # the budgets' two numbers: everything but the jobs' phase, and that phase beyond the
        # ideal per job
        assert s["fixed_seconds"] == pytest.approx(
            s["whole_process_seconds"] - s["phases"]["jobs_seconds"])
        assert s["per_job_ms"] == pytest.approx(
            1e3 * (s["phases"]["jobs_seconds"] - s["ideal_seconds"]) / s["jobs"])
    # the line through the two cold sweeps' overheads (whole process less the ideal)
    line, (small, large) = figures["fitted"], figures["sweeps"][:2]
    assert line["jobs"] == [10, 20]
    for s in (small, large):
        assert line["fixed_seconds"] + 1e-3 * line["per_job_ms"] * s["jobs"] == pytest.approx(
            s["whole_process_seconds"] - s["ideal_seconds"])
    assert "overhead beyond the ideal as a line through the 10- and 20-job" in proc.stdout
    assert figures["plan"]["points"] == 1000 and figures["plan"]["peak_memory_mib"] > 0
    assert (out / "sweep_overhead.png").stat().st_size > 10000
    # the experiment's own results and report (experiment=bench_sweep_overhead size=small)
    ds = load(tmp_path / "outputs" / "bench_sweep_overhead_small" / "results.zarr").load()
    assert ds.attrs["sweep"] == "bench_sweep_overhead_small" and ds.sizes["seed"] == 10
    assert set(np.unique(ds["status"].values)) == {"ok"}
    report = render(tmp_path / "outputs" / "bench_sweep_overhead_small" / "results.zarr")
    assert "overhead:" in report.read_text()
    drawn = sorted(report.parent.glob("fig*.png"))
    assert len(drawn) == 1 and drawn[0].stat().st_size > 5000
    bad = in_process(tmp_path, "pipeline.bench.sweep_overhead", "size=huge")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown argument 'size=huge'")


@pytest.mark.slow
def test_every_job_has_its_hydra_record_with_or_without_run_job(tmp_path):
    """A job gets its .hydra/ record from pipeline.sweep.job_files, or, when its Hydra
    settings need more (hydra.job.env_set's environment), from Hydra's own run_job; the Hydra
    settings of a sweep are not part of a job's identity: the same jobs with or without them."""
    args = [sys.executable, "-m", "pipeline", "-m", "algorithm=sgma", "dataset=sine1d",
            "dataset.n_train=60", "seed=0,1", "cluster.n_workers=1",
            "cluster.dashboard_address=null"]
    direct = subprocess.run([*args, "sweep=direct"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    hydra = subprocess.run([*args, "sweep=hydra", "+hydra.job.env_set.SGP_MARK=1"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0 and hydra.returncode == 0, direct.stderr + hydra.stderr
    out = tmp_path / "outputs"
    runs = {name: sorted(p.parent.name for p in (out / name / "jobs").glob("*/result.nc"))
            for name in ("direct", "hydra")}
    assert len(runs["direct"]) == 2 and runs["direct"] == runs["hydra"]  # the same jobs
    for name in ("direct", "hydra"):
        for h in runs[name]:
            overrides = (out / name / "jobs" / h / ".hydra" / "overrides.yaml").read_text()
            assert "dataset=sine1d" in overrides


def test_an_integer_for_a_declared_float_is_the_same_job_and_point(tmp_path, run_cli):
    """kernel.width=10 and 10.0, lam=1 and 1.0: one job, one coordinate value (issue 53: two
    jobs whose coordinates compared equal, one result filed over the other)."""
    from pipeline.job.identity import config_hash
    from pipeline.job.numbers import declared_floats

    ran = run_cli(tmp_path, "-m", "algorithm=exact", "dataset=sine1d", "dataset.n_train=50",
                  "kernel.width=10,10.0", "lam=1,1.0", "certificate.tol=1,0.001",
                  "dry_run=true")
    assert ran.returncode == 0, ran.stderr
    assert "dry run: 8 sweep points, 2 distinct jobs" in ran.stdout, ran.stdout
    config = {"algorithm": {"name": "sgma", "eps": 1, "max_basis": 5},
              "kernel": {"name": "rbf", "width": 2}, "lam": 1, "seed": 3,
              "dataset": {"name": "sine1d", "n_train": 50}}
    floats = declared_floats(config)
    assert floats["lam"] == 1.0 and isinstance(floats["lam"], float)
    assert isinstance(floats["kernel"]["width"], float)
    assert isinstance(floats["algorithm"]["eps"], float)
    assert isinstance(floats["algorithm"]["max_basis"], int)  # an int option stays an int
    assert isinstance(floats["seed"], int)
    assert config["lam"] == 1 and isinstance(config["lam"], int)  # the input is not modified
    assert config_hash(config, write_data=False) == config_hash(floats, write_data=False)


def test_a_sweeps_returns_take_consolidations_statuses_and_read_what_it_did_not(tmp_path):
    """The sweep's per-point report uses the statuses consolidation read and verified (no
    second read of every file); a job consolidation left out (no file, or a damaged one) that
    its worker reported ok is reported failed, and a job consolidation did not read is read."""
    from types import SimpleNamespace

    from pipeline.results.job_file import job_path
    from pipeline.sweep.launch import _returns

    master = SimpleNamespace(hydra=SimpleNamespace(job=SimpleNamespace(name="t")))
    jobs = [SimpleNamespace(hash=h, overrides=[f"seed={i}"]) for i, h in
            enumerate(["a" * 16, "b" * 16, "c" * 16, "d" * 16])]
    records = {h: {"status": "ok", "error": ""} for h in ("a" * 16, "b" * 16, "d" * 16)}
    statuses = {"a" * 16: "ok", "b" * 16: None, "c" * 16: "ok"}  # d: not read
    returns = _returns(master, jobs, {"c" * 16}, records, tmp_path, tmp_path / "results.zarr",
                       statuses)
    got = {r.return_value["config_hash"]: (r.return_value["status"], r.return_value["error"])
           for r in returns}
    assert got == {"a" * 16: ("ok", ""), "b" * 16: ("failed", "no result file"),
                   "c" * 16: ("cached", ""), "d" * 16: ("failed", "no result file")}
    assert not job_path(tmp_path, "d" * 16).exists()
