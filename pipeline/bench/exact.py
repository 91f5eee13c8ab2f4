"""Benchmark: the exact GP's Cholesky factorisation, GFLOP/s against n (issue 31).

    python -m pipeline.bench.exact              # conf/experiment/bench_exact.yaml
    python -m pipeline.bench.exact size=small   # its reduced variant

For each n of ``sizes``, one SPD matrix (an RBF kernel matrix plus lam·I, as the exact GP
factors) is factored by

- the blocked in-place factorisation the exact GP uses (:mod:`algorithms.cholesky`), on every
  core;
- scipy's ``cho_factor`` on one thread (up to ``one_thread_max_n``) and on every core (up to
  ``crash_free_n``: OpenBLAS's multithreaded potrf crashes at 16 000 and above on these hosts);

each as n³/3 flops over its best time, beside the best square GEMM (2N³ flops, ``gemm_size``)
of the same run, and the factor's largest difference from scipy's where both ran. Writes
``outputs/<sweep>/figures.json`` and ``cholesky_gflops.png`` and prints a table.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg as sla  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from algorithms import Kernel  # noqa: E402
from algorithms.cholesky import cholesky_in_place  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    save_figure,
    single_run_finish,
    single_run_setup,
)


def spd_matrix(n: int, cfg: dict) -> np.ndarray:
    """K + lam·I for n Gaussian points in ``d`` dimensions (RBF, 2ω² = ``width``) as a
    Fortran-ordered array (the transpose of the symmetric C-ordered kernel matrix: no copy)."""
    X = np.random.default_rng(cfg["seed"]).standard_normal((n, cfg["d"]))
    A = Kernel("rbf", {"width": cfg["width"]})(X, X).T
    A.flat[:: n + 1] += cfg["lam"]
    return A


def timed_factor(factor: Callable[[np.ndarray], object], n: int,
                 cfg: dict) -> tuple[float, np.ndarray]:
    """The best of ``repeats`` factorisations of a fresh matrix (built untimed) and the last
    factored array (one n×n array alive at a time)."""
    best, A = np.inf, None
    for _ in range(cfg["repeats"]):
        A = None
        A = spd_matrix(n, cfg)
        t0 = time.perf_counter()
        factor(A)
        best = min(best, time.perf_counter() - t0)
    return best, A


def gemm_gflops(size: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best / 1e9


def measure(n: int, cfg: dict) -> dict:
    """Seconds and GFLOP/s of each method at n, and the blocked factor's largest difference
    from scipy's (relative to the factor's largest entry) where scipy ran."""
    flops = n**3 / 3.0
    row: dict = {"n": n}
    seconds, A = timed_factor(lambda A: cholesky_in_place(A, block=cfg["block"]), n, cfg)
    row["blocked_seconds"], row["blocked_gflops"] = seconds, flops / seconds / 1e9
    compared = n <= max(cfg["crash_free_n"], cfg["one_thread_max_n"])
    ours = np.tril(A) if compared else None
    A = None

    def scipy_factor(A: np.ndarray) -> None:
        sla.cho_factor(A, lower=True, overwrite_a=True, check_finite=False)

    if n <= cfg["one_thread_max_n"]:
        with threadpool_limits(limits=1, user_api="blas"):
            seconds, A = timed_factor(scipy_factor, n, cfg)
        row["scipy_1_thread_seconds"] = seconds
        row["scipy_1_thread_gflops"] = flops / seconds / 1e9
    if n <= cfg["crash_free_n"]:
        A = None
        seconds, A = timed_factor(scipy_factor, n, cfg)
        row["scipy_seconds"], row["scipy_gflops"] = seconds, flops / seconds / 1e9
    if ours is not None and A is not None:
        reference = np.tril(A)
        row["max_rel_diff_vs_scipy"] = float(np.abs(ours - reference).max()
                                             / np.abs(reference).max())
    return row


def figure(rows: list[dict], gemm: float, cfg: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.6))
    n = np.array([r["n"] for r in rows])
    series = (("blocked_gflops", "blocked in place (ours), every core", "C0", "o-"),
              ("scipy_gflops", "scipy cho_factor, every core", "C1", "s--"),
              ("scipy_1_thread_gflops", "scipy cho_factor, 1 thread", "C2", "^:"))
    for key, label, color, style in series:
        have = [i for i, r in enumerate(rows) if key in r]
        if have:
            ax.plot(n[have], [rows[i][key] for i in have], style, color=color, label=label)
    ax.axhline(gemm, color="k", lw=1.5, label=f"GEMM {cfg['gemm_size']}³, every core")
    ax.axhline(0.7 * gemm, color="k", lw=1, ls="--", label="0.7 × GEMM (the goal)")
    if n.max() >= 12000:  # the crash sizes in view
        ax.axvline(16000, color="C3", lw=1, ls="-.",
                   label="from n = 16 000 scipy's threaded potrf crashes")
    ax.set(xlabel="n (matrix rows)", ylabel="GFLOP/s (n³/3 flops)",
           title=f"Cholesky of K + σ²I on {os.cpu_count()} cores: "
                 f"ours at the largest n = {rows[-1]['n']}: "
                 f"{rows[-1]['blocked_gflops'] / gemm:.2f} × GEMM")
    ax.set_ylim(0, 1.15 * max(gemm, max(r["blocked_gflops"] for r in rows)))
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_exact", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    gemm = gemm_gflops(cfg["gemm_size"], cfg["gemm_repeats"])
    print(f"GEMM {cfg['gemm_size']}³: {gemm:.1f} GFLOP/s", flush=True)
    rows = []
    for n in cfg["sizes"]:
        row = measure(n, cfg)
        row["blocked_vs_gemm"] = row["blocked_gflops"] / gemm
        rows.append(row)
        print(f"n={n:6d}: blocked {row['blocked_seconds']:8.2f} s "
              f"{row['blocked_gflops']:6.1f} GFLOP/s ({row['blocked_vs_gemm']:.2f} × GEMM)"
              + (f"; scipy 1 thread {row['scipy_1_thread_gflops']:6.1f}"
                 if "scipy_1_thread_gflops" in row else "")
              + (f"; scipy {row['scipy_gflops']:6.1f}" if "scipy_gflops" in row else "")
              + (f"; max rel diff {row['max_rel_diff_vs_scipy']:.1e}"
                 if "max_rel_diff_vs_scipy" in row else ""), flush=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures = {"gemm_gflops": gemm, "cores": os.cpu_count(), "rows": rows,
               "peak_rss_mib": peak_mib, "config": cfg}
    return single_run_finish(out_dir, figures, lambda path: figure(rows, gemm, cfg, path),
                             "cholesky_gflops.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
