"""One fit across a cluster, measured (issue 18): ``blocks=cluster`` at scale, beside the same
fit in one process, and its speed-up from 1 to 2 workers.

Runs the experiment ``bench_cluster_blocks`` as separate command-line processes, each on a
fresh sweep directory:

- **spread**: SGMA to t = 300 on n = 2 000 000 rows (gaussian_bumps, d = 10) with its rows and
  [y, K_{:S}] on a LocalCluster of 2 workers limited to 4 GB each: per-worker peak resident
  memory (each worker's own high-water mark), seconds per step, bytes returned per step;
- **one process**: the same fit with ``blocks=memory`` on one worker without that limit,
  with the fit's peak memory (``profile_memory``): what a single process needs;
- **speed-up**: ``blocks=cluster`` at n = 200 000 on 1 and on 2 workers, seconds per step.

    python -m pipeline.bench.cluster_blocks              # the sizes above (~15 min here)
    python -m pipeline.bench.cluster_blocks size=small   # n = 30 000, t = 30; 6000 (~1 min)

Writes ``outputs/bench_cluster_blocks[_small]/figures.json`` and ``cluster_blocks.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pipeline.atomic import write_text  # noqa: E402
from pipeline.bench.sweep_overhead import save_figure, size_argument
from pipeline.results.consolidate import load

EXPERIMENT = "bench_cluster_blocks"
SPEEDUP_N = {"full": 200_000, "small": 6_000}
SPEEDUP_GOAL = 1.6
GIB = 2**30


def _run(args: list[str], cwd: Path) -> float:
    """Wall seconds of ``python -m pipeline <args>`` (a failure stops the benchmark)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                          capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: python -m pipeline {' '.join(args)} failed "
                         f"(exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def measure(name: str, size: str, cwd: Path, *overrides: str) -> dict:
    """One run of the experiment (its ``size`` variant) with ``overrides`` into the sweep
    directory ``name``: per-step seconds (median and mean over the steps), its summary."""
    sweep_dir = cwd / "outputs" / name
    shutil.rmtree(sweep_dir, ignore_errors=True)  # this benchmark's own output: a fresh run
    wall = _run([f"experiment={EXPERIMENT}", f"size={size}", f"sweep={name}",
                 "cluster.dashboard_address=null", *overrides], cwd)
    ds = load(sweep_dir / "results.zarr")
    if str(ds["status"].values.ravel()[0]) != "ok":
        raise SystemExit(f"error: {name}: {ds['error'].values.ravel()[0]}")
    seconds = ds["seconds"].values.ravel()
    seconds = seconds[np.isfinite(seconds)]
    steps = np.diff(np.concatenate([[0.0], seconds]))
    summary = {k.removeprefix("final_"): float(ds[k].values.ravel()[0]) for k in ds.data_vars
               if k.startswith("final_") and ds[k].dtype.kind == "f"
               and np.isfinite(ds[k].values.ravel()[0])}
    return {"name": name, "n": int(ds.sgp.attrs["config"]["dataset"]["n_train"]),
            "overrides": list(overrides), "wall_seconds": wall, "steps": int(len(steps)),
            "step_seconds": steps.tolist(), "step_seconds_median": float(np.median(steps)),
            "step_seconds_mean": float(np.mean(steps)), "fit_seconds": float(seconds[-1]),
            "job_seconds": float(np.nanmax(ds["job_seconds"].values)), "summary": summary}


def figure(runs: dict, path: Path) -> None:
    """Seconds per step against t for every run; memory of the spread fit's workers against
    their limit and the single process's need."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8), width_ratios=(1.6, 1))
    for key, label in (("spread", "n = {n}: 2 workers, blocks=cluster"),
                       ("one_process", "n = {n}: one process, blocks=memory"),
                       ("workers_1", "n = {n}: 1 worker, blocks=cluster"),
                       ("workers_2", "n = {n}: 2 workers, blocks=cluster")):
        r = runs[key]
        t = np.arange(1, r["steps"] + 1)
        ax.plot(t, r["step_seconds"], lw=1, label=label.format(n=f"{r['n']:,}"))
    ax.set_xlabel("step t (basis size)")
    ax.set_ylabel("seconds per step (primal and dual)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    goal = f" (goal {SPEEDUP_GOAL}×)" if runs["memory_limit_bytes"] else ""
    ax.set_title(f"1 → 2 workers at n = {runs['workers_1']['n']:,}: "
                 f"{runs['speedup']:.2f}× per step{goal}", fontsize=10)
    spread, one = runs["spread"]["summary"], runs["one_process"]["summary"]
    names = ["one process:\nfit's peak\nallocation", "each worker:\nrows + columns\nheld (max)",
             "worker A:\npeak RSS\n(process)", "worker B:\npeak RSS\n(process)"]
    values = [one["fit_peak_bytes"] / GIB, spread["cluster_shard_bytes_max"] / GIB,
              spread["cluster_worker_peak_rss_max"] / GIB,
              spread["cluster_worker_peak_rss_min"] / GIB]
    bx.bar(names, values, color=["tab:orange", "tab:blue", "tab:cyan", "tab:cyan"])
    limit = runs["memory_limit_bytes"]
    if limit:
        bx.axhline(limit / GIB, color="k", ls="--", label="each worker's memory_limit")
        bx.legend(fontsize=8, loc="upper right")
    for i, v in enumerate(values):
        bx.text(i, v, f"{v:.2f}", ha="center", va="bottom")
    bx.set_ylabel("GiB")
    bx.tick_params(axis="x", labelsize=8)
    bx.set_title(f"memory at n = {runs['spread']['n']:,}, t = {runs['spread']['steps']}",
                 fontsize=10)
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    size = size_argument(argv)
    if size is None:
        return 2
    cwd = Path(os.getcwd())
    base = EXPERIMENT if size == "full" else f"{EXPERIMENT}_{size}"
    n_speed = SPEEDUP_N[size]
    runs = {
        "spread": measure(base, size, cwd),
        "one_process": measure(f"{base}_one_process", size, cwd, "blocks=memory",
                               "cluster.n_workers=1", "cluster.memory_limit=auto",
                               "profile_memory=true"),
        # shard tasks compute on their worker's threads (cluster.threads_per_worker=1) and
        # threads=1 keeps the job's own work (small blocks, predictions) on one core too:
        # with threads=auto the lone worker's job would use both and the ratio would not be
        # one of workers
        "workers_1": measure(f"{base}_workers_1", size, cwd, f"dataset.n_train={n_speed}",
                             "cluster.n_workers=1", "cluster.memory_limit=auto", "threads=1"),
        "workers_2": measure(f"{base}_workers_2", size, cwd, f"dataset.n_train={n_speed}",
                             "cluster.n_workers=2", "cluster.memory_limit=auto", "threads=1"),
    }
    runs["speedup"] = (runs["workers_1"]["step_seconds_median"]
                       / runs["workers_2"]["step_seconds_median"])
    runs["speedup_goal"] = SPEEDUP_GOAL
    runs["memory_limit_bytes"] = 4 * 10**9 if size == "full" else None
    spread = runs["spread"]
    spread["bytes_moved_per_step"] = spread["summary"]["cluster_bytes_moved"] / spread["steps"]
    out_dir = cwd / "outputs" / base
    write_text(out_dir / "figures.json", json.dumps(runs, indent=2))
    figure(runs, out_dir / "cluster_blocks.png")
    s, one = spread["summary"], runs["one_process"]["summary"]
    print(f"{base}: n = {spread['n']:,}, t = {spread['steps']} on 2 workers: "
          f"{spread['step_seconds_median']:.3f} s per step (median; mean "
          f"{spread['step_seconds_mean']:.3f}), {spread['bytes_moved_per_step'] / 1e3:.0f} kB "
          f"returned per step, worker peak memory {s['cluster_worker_peak_rss_max'] / GIB:.2f} "
          f"and {s['cluster_worker_peak_rss_min'] / GIB:.2f} GiB; one process: "
          f"{runs['one_process']['step_seconds_median']:.3f} s per step, fit peak "
          f"{one['fit_peak_bytes'] / GIB:.2f} GiB")
    print(f"1 → 2 workers at n = {n_speed:,}: {runs['workers_1']['step_seconds_median']:.3f} → "
          f"{runs['workers_2']['step_seconds_median']:.3f} s per step ({runs['speedup']:.2f}×)")
    print(f"figures: {out_dir / 'figures.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
