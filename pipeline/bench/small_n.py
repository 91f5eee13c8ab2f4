"""Benchmark: small problems (issue 33). Each sparse method's fit seconds ÷ the exact GP's.

    python -m pipeline.bench.small_n              # conf/experiment/bench_small_n.yaml
    python -m pipeline.bench.small_n size=small   # its reduced variant

At every n of ``sizes`` one abalone-like training set (the config's comment) is fitted by the
exact GP and by every method of ``methods``, ``repeats`` times each in this process, on every
core as a job runs (BLAS and kernel tiles; no test set: the fit alone, as
:func:`algorithms.run` times it); the best wall time is kept. The ratio is a method's best ÷
the exact GP's best at the same n. Writes ``outputs/<sweep>/figures.json`` and
``small_n_ratio.png`` and prints a table.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from algorithms import ArrayKernelBlocks, Kernel, run  # noqa: E402
from algorithms.kernel_threads import use_kernel_threads
from algorithms.kernels import fit_tails
from algorithms.registry import discover  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    save_figure,
    single_run_finish,
    single_run_setup,
)
from pipeline.datasets.sources import load_abalone  # noqa: E402


def abalone_like(n: int, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """n rows drawn with replacement from abalone (inputs standardised, targets the raw Rings
    as in the default job), each row's inputs moved by Gaussian noise of ``jitter`` standard
    deviations."""
    X, y = load_abalone()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    rng = np.random.default_rng(cfg["seed"])
    rows = rng.integers(0, len(y), size=n)
    return X[rows] + cfg["jitter"] * rng.standard_normal((n, X.shape[1])), y[rows].copy()


def best_fit_seconds(method: dict, blocks: ArrayKernelBlocks, y: np.ndarray, cfg: dict
                     ) -> tuple[float, int]:
    """The best of ``repeats`` fit wall times, and the basis size of the last fit."""
    best, n_basis = np.inf, 0
    for _ in range(cfg["repeats"]):
        t0 = time.perf_counter()
        fit = run(method["algorithm"], blocks, y, lam=cfg["lam"], kappa=cfg["kappa"], rng=0,
                  **method["options"])
        best = min(best, time.perf_counter() - t0)
        n_basis = len(fit.coef)
    return best, n_basis


def warm_up(cfg: dict) -> None:
    """One untimed fit of every method at n = 500: compiled kernels and lazy imports load
    before the first timed fit."""
    measure(500, {**cfg, "repeats": 1})


def measure(n: int, cfg: dict) -> dict:
    X, y = abalone_like(n, cfg)
    kernel_cfg = dict(cfg["kernel"])
    blocks = ArrayKernelBlocks(X, Kernel(kernel_cfg.pop("name"), kernel_cfg))
    row: dict = {"n": n, "seconds": {}, "n_basis": {}, "ratio": {}}
    for label, method in cfg["methods"].items():
        with fit_tails(blocks.kernel.name, n):  # as a job's fit
            seconds, n_basis = best_fit_seconds(method, blocks, y, cfg)
        row["seconds"][label], row["n_basis"][label] = seconds, n_basis
    reference = row["seconds"][cfg["reference"]]
    row["ratio"] = {label: s / reference for label, s in row["seconds"].items()
                    if label != cfg["reference"]}
    return row


def figure(rows: list[dict], cfg: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    n = [r["n"] for r in rows]
    methods = [(k, v) for k, v in cfg["methods"].items() if k != cfg["reference"]]
    for i, (label, method) in enumerate(methods):
        color = f"C{i}"
        goal = (f" (goal ≤ {method['goal']:g} at n = {method['goal_n']})" if "goal" in method
                else "")
        ax.plot(n, [r["ratio"][label] for r in rows], "o-", color=color, label=label + goal)
        if "goal" in method:  # a hollow triangle at the goal, each method's a little apart
            ax.plot([method["goal_n"] * (1 + 0.04 * (i - len(methods) / 2))], [method["goal"]],
                    marker="v", ms=10, mfc="none", mew=2, color=color, ls="none")
    reference = cfg["reference"]
    ax.axhline(1.0, color="k", lw=1, label=reference)
    ax.plot([], [], marker="v", ms=8, mfc="none", mew=2, color="0.4", ls="none",
            label="a goal (▽ in the method's colour)")
    ax.set(xscale="log", yscale="log", xlabel="n (training points)",
           ylabel=f"fit seconds ÷ {reference} fit seconds",
           title=f"Sparse fits against the {reference} on abalone-like data, "
                 f"{os.cpu_count()} cores (best of {cfg['repeats']})")
    ax.set_xticks(n, [str(v) for v in n])
    ax.minorticks_off()
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_small_n", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    discover()
    with use_kernel_threads(None):
        return _measure_all(cfg, out_dir)


def _measure_all(cfg: dict, out_dir: Path) -> int:
    warm_up(cfg)
    rows = []
    labels = [k for k in cfg["methods"] if k != cfg["reference"]]
    print(f"n, {cfg['reference']} fit seconds; then per method: the ratio to it (seconds, basis "
          "size)")
    for n in cfg["sizes"]:
        row = measure(n, cfg)
        rows.append(row)
        print(f"n = {n}: {cfg['reference']} {row['seconds'][cfg['reference']]:.3f} s", flush=True)
        for k in labels:
            print(f"    {k:28s} {row['ratio'][k]:7.3f}  ({row['seconds'][k]:.3f} s, "
                  f"{row['n_basis'][k]} basis)", flush=True)
    return single_run_finish(out_dir, {"cores": os.cpu_count(), "rows": rows, "config": cfg},
                             lambda path: figure(rows, cfg, path), "small_n_ratio.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
