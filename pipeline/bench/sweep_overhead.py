"""Sweep overhead, measured from outside the process (issues 17 and 33).

Runs the benchmark experiments as separate command-line processes and times each from its
start to its exit:

- ``bench_sweep_overhead`` (200 SGMA jobs of ~70 ms) and ``bench_sweep_overhead_1000``
  (1000 of them) on a fresh sweep directory: whole-process wall against the ideal, the sum of
  the jobs' own seconds (``job_seconds`` of the results) divided by the workers; the phases
  (start-up, planning, cluster start, jobs, the rest: cluster shutdown, consolidation, exit)
  from the sweep's recorded timings;
- ``bench_sweep_overhead`` again on a running cluster whose workers have run it before
  (``cluster=address``: no cluster start, no imports on the workers);
- ``bench_sweep_plan`` (a 10 000-point ``dry_run=true``): wall and the process's peak memory.

    python -m pipeline.bench.sweep_overhead              # 200 and 1000 jobs, a 10 000-point plan
    python -m pipeline.bench.sweep_overhead size=small   # their small variants (10, 20, 1000)

Prints each sweep's fixed seconds (everything but its jobs' phase) and milliseconds a job, and the
overhead of the two cold sweeps (whole process less the ideal) as a line in their job counts:
fixed seconds (its intercept) + milliseconds a job (its slope, consolidation's reading included).

Writes ``outputs/bench_sweeps[_small]/figures.json`` and ``sweep_overhead.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pipeline import atomic
from pipeline.atomic import write_text
from pipeline.results.consolidate import load

SWEEPS = ("bench_sweep_overhead", "bench_sweep_overhead_1000")
PLAN = "bench_sweep_plan"
# the budgets (issue 52; issue 33's ratios to the ideal are withdrawn: a ratio to ever-shorter
# jobs kept moving): the fixed seconds of a sweep (everything but its jobs' phase), the jobs'
# phase beyond the ideal per job at 1000 jobs, and the 10 000-point dry run's whole process
FIXED_BUDGET_SECONDS = 2.5
PER_JOB_BUDGET_MS = 8.0
PLAN_GOAL_SECONDS = 5.0
PHASES = (("startup_seconds", "start-up (imports, Hydra)"),
          ("compose_seconds", "planning (compose, name, check)"),
          ("cluster_start_seconds", "cluster start (workers import the code)"),
          ("jobs_seconds", "jobs"))


def _run(args: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB, stdout) of ``python -m pipeline <args>``."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"error: python -m pipeline {' '.join(args)} failed "
                         f"(exit {proc.returncode}): {err.strip().splitlines()[-1:]}")
    peak = _child_peak_mib()
    return wall, peak, out


def _child_peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def measure_sweep(experiment: str, size: str, cwd: Path, scheduler: str | None = None,
                  extra: tuple[str, ...] = ()) -> dict:
    """One sweep run from a fresh directory, timed from outside: on its own local cluster, or
    on the workers of the running ``scheduler`` (which have run a sweep before: warm);
    ``extra``: more overrides."""
    name = experiment if size == "full" else f"{experiment}_{size}"
    where = ["cluster.n_workers=2", "cluster.dashboard_address=:0"]
    if scheduler is not None:
        name += "_warm"
        where = ["cluster=address", f"scheduler={scheduler}", f"sweep={name}"]
    sweep_dir = cwd / "outputs" / name
    shutil.rmtree(sweep_dir, ignore_errors=True)  # this benchmark's own output: a fresh run
    wall, _, _ = _run([f"experiment={experiment}", f"size={size}", *where, *extra], cwd)
    ds = load(sweep_dir / "results.zarr")
    timings = ds.sgp.attrs["timings"]
    workers = int(ds.attrs["n_workers"])
    _, first = np.unique(ds["job_hash"].values.ravel(), return_index=True)
    seconds = ds["job_seconds"].values.ravel()[first]
    ideal = float(np.nansum(seconds)) / workers
    phases = {key: float(timings.get(key, 0.0)) for key, _ in PHASES}
    phases["rest_seconds"] = wall - sum(phases.values())
    return {"experiment": name, "jobs": int(len(first)), "workers": workers,
            "warm_workers": scheduler is not None,
            "job_seconds_sum": float(np.nansum(seconds)),
            "job_seconds_median": float(np.nanmedian(seconds)),
            "ideal_seconds": ideal, "whole_process_seconds": wall, "ratio": wall / ideal,
            "fixed_seconds": wall - phases["jobs_seconds"],
            "per_job_ms": 1e3 * (phases["jobs_seconds"] - ideal) / max(1, len(first)),
            "phases": phases}


def measure_warm(experiment: str, size: str, cwd: Path) -> dict:
    """The sweep again on a cluster that is already up, with workers that have run it before
    (``cluster=address``: a researcher's long-lived scheduler): no cluster start, no imports."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:  # not measured
        # warms the workers: two of the same jobs each (imports, compiled code, the data)
        measure_sweep(experiment, size, cwd, cluster.scheduler_address,
                      extra=("hydra.sweeper.params.seed='range(0,4)'",))
        return measure_sweep(experiment, size, cwd, cluster.scheduler_address)


def measure_plan(size: str, cwd: Path) -> dict:
    """The dry run of ``bench_sweep_plan``: wall, and peak memory from the process's report."""
    wall, peak, out = _run([f"experiment={PLAN}", f"size={size}"], cwd)
    line = next(x for x in out.splitlines() if x.startswith("dry run:"))
    return {"experiment": PLAN if size == "full" else f"{PLAN}_{size}",
            "points": int(line.split()[2]), "whole_process_seconds": wall,
            "goal_seconds": PLAN_GOAL_SECONDS, "peak_memory_mib": peak, "printed": line}


def fitted(sweeps: list[dict]) -> dict:
    """The overhead (whole process less the ideal) of the two cold sweeps as a line in their job
    counts: its intercept, the fixed seconds that do not grow with the jobs, and its slope, the
    milliseconds each job adds wherever they are spent (the jobs' phase, and consolidation,
    which reads every job's file: in the phases' split it counts as fixed)."""
    small, large = sweeps[0], sweeps[1]
    over = [s["whole_process_seconds"] - s["ideal_seconds"] for s in (small, large)]
    slope = (over[1] - over[0]) / max(1, large["jobs"] - small["jobs"])
    return {"fixed_seconds": over[0] - slope * small["jobs"], "per_job_ms": 1e3 * slope,
            "jobs": [small["jobs"], large["jobs"]]}


def figure(sweeps: list[dict], plan: dict, path: Path) -> None:
    """Each sweep's whole process by phase, in units of its ideal (Σ job seconds / workers),
    with its fixed seconds and milliseconds a job against their budgets."""
    fig, ax = plt.subplots(figsize=(9.5, 5))
    colors = plt.get_cmap("tab10").colors
    labels = [f"{s['jobs']} jobs of {1e3 * s['job_seconds_median']:.0f} ms"
              + (", warm workers" if s["warm_workers"] else "")
              + f"\n(ideal {s['ideal_seconds']:.1f} s)" for s in sweeps]
    y = np.arange(len(sweeps))
    left = np.zeros(len(sweeps))
    for i, (key, label) in enumerate((*PHASES, ("rest_seconds",
                                               "rest (cluster shutdown, consolidation, exit)"))):
        widths = np.array([s["phases"][key] / s["ideal_seconds"] for s in sweeps])
        ax.barh(y, widths, left=left, color=colors[i], label=label, height=0.5)
        left += widths
    ax.axvline(1.0, color="k", lw=2, label="ideal: Σ job seconds / workers")
    for i, s in enumerate(sweeps):
        ax.text(left[i], i, f"  {s['ratio']:.2f}× ({s['whole_process_seconds']:.1f} s):\n"
                f"  fixed {s['fixed_seconds']:.1f} s (budget {FIXED_BUDGET_SECONDS:g}),\n"
                f"  {s['per_job_ms']:.1f} ms a job (budget {PER_JOB_BUDGET_MS:g})",
                va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_xlabel("whole process, start to exit, in units of the ideal (2 workers)")
    ax.set_xlim(0, max(2.0, 1.6 * left.max()))
    ax.set_title(f"Sweep overhead by phase; a {plan['points']}-point dry run: "
                 f"{plan['whole_process_seconds']:.1f} s (budget {PLAN_GOAL_SECONDS:g} s), "
                 f"{plan['peak_memory_mib']:.0f} MiB", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.45, -0.14), ncol=2)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """Lay out, write (100 dpi) and close a benchmark's figure."""
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)


def size_argument(argv: list[str]) -> str | None:
    """The benchmark size from ``size=full|small`` (default full); None after printing the
    one-line error for any other argument."""
    size = "full"
    for arg in argv:
        if arg.startswith("size=") and arg.partition("=")[2] in ("full", "small"):
            size = arg.partition("=")[2]
        else:
            print(f"error: unknown argument {arg!r}; pass size=full or size=small (a "
                  "single-run benchmark also takes key=value for its config's keys)",
                  file=sys.stderr)
            return None
    return size


def single_run_setup(name: str, argv: list[str]) -> tuple[dict, Path] | None:
    """A single-run benchmark's config, ``conf/experiment/<name>.yaml`` under
    ``conf/reduced/<name>_small.yaml`` for ``size=small``, under ``key=value`` overrides of
    its own top-level keys (``sizes=[16000] devices=[cuda]``; resolved, plain), and its
    output directory ``outputs/<sweep>/`` (made); None after the one-line error of a bad
    argument."""
    from omegaconf import OmegaConf

    from pipeline.config import CONF_DIR

    cfg = OmegaConf.load(CONF_DIR / "experiment" / f"{name}.yaml")
    overrides = [a for a in argv if not a.startswith("size=")
                 and a.partition("=")[0] in cfg and a.partition("=")[0] != "sweep"]
    size = size_argument([a for a in argv if a not in overrides])
    if size is None:
        return None
    if size == "small":
        cfg = OmegaConf.merge(cfg, OmegaConf.load(CONF_DIR / "reduced" / f"{name}_small.yaml"))
    try:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    except Exception as err:  # noqa: BLE001 - omegaconf's grammar and merge errors
        print(f"error: {' '.join(str(err).split())[:200]}; pass key=value with a value of "
              "the key's type", file=sys.stderr)
        return None
    cfg = OmegaConf.to_container(cfg, resolve=True)
    out_dir = Path(os.getcwd()) / "outputs" / cfg["sweep"]
    out_dir.mkdir(parents=True, exist_ok=True)
    return cfg, out_dir


def single_run_finish(out_dir: Path, figures: dict, draw: Callable[[Path], None],
                      png: str) -> int:
    """A single-run benchmark's end: ``figures`` as ``out_dir/figures.json``, ``draw`` its
    figure to ``out_dir/png``, the path printed; returns exit code 0."""
    write_text(out_dir / "figures.json", json.dumps(figures, indent=2))
    draw(out_dir / png)
    print(f"figures: {out_dir / 'figures.json'}")
    return 0


def main(argv: list[str]) -> int:
    size = size_argument(argv)
    if size is None:
        return 2
    cwd = Path(os.getcwd())
    plan = measure_plan(size, cwd)  # first: RUSAGE_CHILDREN's peak is then the plan's own
    sweeps = [measure_sweep(name, size, cwd) for name in SWEEPS]
    sweeps.append(measure_warm(SWEEPS[0], size, cwd))
    out_dir = cwd / "outputs" / ("bench_sweeps" if size == "full" else f"bench_sweeps_{size}")
    out_dir.mkdir(parents=True, exist_ok=True)
    line = fitted(sweeps)
    write_text(out_dir / "figures.json", json.dumps({"sweeps": sweeps, "plan": plan,
                                                      "fitted": line}, indent=2))
    figure(sweeps, plan, out_dir / "sweep_overhead.png")
    for s in sweeps:
        print(f"{s['experiment']}: {s['jobs']} jobs"
              f"{' on warm workers' if s['warm_workers'] else ''}, whole process "
              f"{s['whole_process_seconds']:.1f} s, ideal {s['ideal_seconds']:.1f} s "
              f"(Σ job seconds {s['job_seconds_sum']:.1f} / {s['workers']} workers): "
              f"{s['ratio']:.2f}×; fixed {s['fixed_seconds']:.1f} s (budget "
              f"{FIXED_BUDGET_SECONDS:g} s), {s['per_job_ms']:.1f} ms a job beyond the ideal "
              f"(budget {PER_JOB_BUDGET_MS:g} ms at 1000 jobs)")
    print(f"overhead beyond the ideal as a line through the {line['jobs'][0]}- and "
          f"{line['jobs'][1]}-job sweeps: fixed {line['fixed_seconds']:.1f} s (budget "
          f"{FIXED_BUDGET_SECONDS:g} s) + {line['per_job_ms']:.1f} ms a job (budget "
          f"{PER_JOB_BUDGET_MS:g} ms)")
    print(f"{plan['experiment']}: {plan['points']} points planned, whole process "
          f"{plan['whole_process_seconds']:.1f} s (budget {PLAN_GOAL_SECONDS:g} s), peak memory "
          f"{plan['peak_memory_mib']:.0f} MiB")
    print(f"figures: {out_dir / 'figures.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
