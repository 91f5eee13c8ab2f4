"""Benchmark: the exact GP's Cholesky when other processes compete for the cores (issue 52).

    python -m pipeline.bench.contention              # conf/experiment/bench_contention.yaml
    python -m pipeline.bench.contention size=small   # its reduced variant

For each n of ``sizes``, the blocked in-place factorisation the exact GP runs
(:mod:`algorithms.cholesky`) is timed quiet on one thread and on every core, then while
``competitors`` busy processes run: on one thread, on every core, and on ``threads=auto``
(:func:`pipeline.cluster.threads.free_threads`, resolved while they run). Two BLAS threads on
two cores of which one is taken wait on each other; auto should take the free cores only.
Writes ``outputs/<sweep>/figures.json`` and ``contention.png`` and prints a table; the goal is
auto ≤ 1.15 × one thread under contention.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from algorithms.cholesky import cholesky_in_place  # noqa: E402
from pipeline.bench.exact import timed_factor  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    save_figure,
    single_run_finish,
    single_run_setup,
)
from pipeline.cluster.threads import free_threads, usable_cores  # noqa: E402
from pipeline.job.run import load_average  # noqa: E402

GOAL = 1.15  # auto's seconds over one thread's, under contention


def _seconds(n: int, threads: int, cfg: dict) -> float:
    with threadpool_limits(limits=threads, user_api="blas"):
        return timed_factor(lambda A: cholesky_in_place(A, block=cfg["block"]), n, cfg)[0]


class Competitors:
    """``count`` busy processes (a Python loop each) for the length of a ``with`` block."""

    def __init__(self, count: int) -> None:
        self.count, self.procs = count, []

    def __enter__(self) -> Competitors:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(self.count)]
        time.sleep(1.0)  # running before anything is timed or resolved
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def measure(n: int, cfg: dict) -> dict:
    cores = usable_cores()
    row = {"n": n, "cores": cores, "load_before": load_average(),
           "quiet_1": _seconds(n, 1, cfg), f"quiet_{cores}": _seconds(n, cores, cfg)}
    with Competitors(cfg["competitors"]):
        auto = free_threads("auto")
        row.update({"auto_threads": auto, "busy_1": _seconds(n, 1, cfg),
                    f"busy_{cores}": _seconds(n, cores, cfg), "busy_auto": _seconds(n, auto, cfg)})
    row["auto_over_one"] = row["busy_auto"] / row["busy_1"]
    row["all_over_one"] = row[f"busy_{cores}"] / row["busy_1"]
    return row


def figure(rows: list[dict], cfg: dict, path: Path) -> None:
    cores = rows[0]["cores"]
    legs = (("quiet_1", "quiet, 1 thread"), (f"quiet_{cores}", f"quiet, {cores} threads"),
            ("busy_1", "contended, 1 thread"), (f"busy_{cores}", f"contended, {cores} threads"),
            ("busy_auto", "contended, threads=auto"))
    fig, ax = plt.subplots(figsize=(8, 5.2))
    width = 0.8 / len(legs)
    for k, (key, label) in enumerate(legs):
        ax.bar(np.arange(len(rows)) + k * width, [r[key] / r["busy_1"] for r in rows], width,
               label=label)
    ax.axhline(GOAL, color="k", ls="--", lw=1, label=f"goal: auto ≤ {GOAL} × 1 thread")
    ax.set_xticks(np.arange(len(rows)) + (len(legs) - 1) * width / 2,
                  [f"n = {r['n']}" for r in rows])
    busy = cfg["competitors"]
    took = ", ".join(f"{r['auto_threads']} at n = {r['n']}" for r in rows)
    ax.set(ylabel="seconds / contended 1-thread seconds",
           title=f"Cholesky of K + σ²I on {cores} cores beside {busy} busy "
                 f"process{'es' if busy != 1 else ''}\nthreads used by threads=auto: {took}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_contention", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    rows = []
    for n in cfg["sizes"]:
        row = measure(n, cfg)
        rows.append(row)
        cores = row["cores"]
        print(f"n={n:6d}: quiet 1 thread {row['quiet_1']:.2f} s, {cores} "
              f"{row[f'quiet_{cores}']:.2f} s; contended 1 thread {row['busy_1']:.2f} s, "
              f"{cores} {row[f'busy_{cores}']:.2f} s"
              f", auto ({row['auto_threads']}) {row['busy_auto']:.2f} s = "
              f"{row['auto_over_one']:.2f} × 1 thread", flush=True)
    return single_run_finish(out_dir, {"rows": rows, "goal": GOAL, "config": cfg},
                             lambda path: figure(rows, cfg, path), "contention.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
