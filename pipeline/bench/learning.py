"""Benchmark: one evaluation of the dense log marginal likelihood with its gradient, the unit of
hyperparameter learning (``hyper=ml``), against its arithmetic at the same run's GEMM rate
(issue 52, goal 4: ≤ 1.5×).

    python -m pipeline.bench.learning              # conf/experiment/bench_learning.yaml
    python -m pipeline.bench.learning size=small   # its reduced variant

For each thread count of ``threads`` (null: every usable core; BLAS and the kernel tiles both),
each input dimension d of ``dims`` and each form of ``ard`` (one length scale or d), on n
Gaussian points with a smooth target, at the median-heuristic start of :func:`algorithms.hyper.
learn`: the best of ``repeats`` timings of

- the whole evaluation (:func:`algorithms.marginal_likelihood.log_marginal_likelihood`);
- its parts: the kernel matrix, the Cholesky with the inverse (:func:`algorithms.cholesky.
  factor_and_invert`), the gradient's elementwise pass and its one product;
- LAPACK's potrf and potri of the whole matrix (scipy), as the evaluation factored and
  inverted before (a reference, not part of the evaluation);
- a square n × n × n GEMM (2n³ flops) on the same threads, for the rate.

The arithmetic of an evaluation, spelled out in ``figures.json``: the Cholesky n³/3, the
triangular inverse n³/3 and K⁻¹ = L⁻ᵀL⁻¹ n³/3; the kernel's GEMM of augmented inputs
2n²(d + 2); the gradient's product P·[S, 1] 2n²(d + 1) (the d length-scale traces and the
variance's in one product). Its time at the GEMM rate is the unit of the figure. Writes
``outputs/<sweep>/figures.json`` and ``learning.png`` and prints a table.
"""

from __future__ import annotations

import math
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

from algorithms import blas_inplace  # noqa: E402
from algorithms.cholesky import factor_and_invert  # noqa: E402
from algorithms.hyper import median_theta  # noqa: E402
from algorithms.kernel_threads import use_kernel_threads
from algorithms.marginal_likelihood import (  # noqa: E402
    Parameters,
    kernel_into,
    log_marginal_likelihood,
    slope_traces,
)
from pipeline import atomic  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    single_run_finish,
    single_run_setup,
)
from pipeline.cluster.threads import usable_cores  # noqa: E402
from pipeline.job.run import load_average  # noqa: E402

GOAL = 1.5  # seconds per evaluation over its arithmetic at the same run's GEMM rate


def arithmetic(n: int, d: int) -> dict[str, float]:
    """Flops of one evaluation, by part (module docstring)."""
    return {"cholesky": n**3 / 3, "triangular_inverse": n**3 / 3, "inverse_product": n**3 / 3,
            "kernel_gemm": 2.0 * n * n * (d + 2), "gradient_product": 2.0 * n * n * (d + 1)}


def best_of(repeats: int, work: Callable[[], object], setup: Callable[[], object] | None = None
            ) -> float:
    """The least of ``repeats`` wall times of ``work`` (``setup`` run untimed before each)."""
    best = math.inf
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def problem(n: int, d: int, ard: bool, seed: int) -> tuple[np.ndarray, np.ndarray, Parameters,
                                                         np.ndarray]:
    """n Gaussian points in d dimensions, a smooth target with noise, the RBF parameters and
    the median-heuristic start (σ² = 0.01)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, : min(d, 4)].sum(1)) + 0.1 * rng.standard_normal(n)
    y -= y.mean()
    params = Parameters("rbf", d if ard else 1)
    return X, y, params, median_theta(params, X, y, 0.01, rng)


def gemm_seconds(n: int, repeats: int) -> float:
    """The best n × n × n GEMM (scipy's BLAS, the one the factorisation runs on)."""
    rng = np.random.default_rng(0)
    A, B = (np.asfortranarray(rng.standard_normal((n, n))) for _ in range(2))
    C = np.empty((n, n), order="F")
    blas_inplace.gemm(1.0, A, B, 0.0, C)  # threads started
    return best_of(repeats, lambda: blas_inplace.gemm(1.0, A, B, 0.0, C))


def measure(n: int, d: int, ard: bool, gemm: float, cfg: dict) -> dict:
    """Seconds of one evaluation and of its parts (module docstring), and their ratios."""
    X, y, params, theta = problem(n, d, ard, cfg["seed"])
    repeats = cfg["repeats"]
    log_marginal_likelihood(X, y, params, theta)  # the kernel tiles' code loaded
    whole = best_of(repeats, lambda: log_marginal_likelihood(X, y, params, theta))
    v, lam = math.exp(theta[0]), math.exp(theta[-1])
    S = X / np.exp(theta[1:-1])
    A = np.empty((n, n), order="F")
    kernel = best_of(repeats, lambda: kernel_into(A, "rbf", S, v))
    A.flat[:: n + 1] += lam
    Ky = A.copy(order="F")
    alpha = np.empty(n)

    def restore() -> None:
        A[...] = Ky

    def factor() -> None:
        alpha[:] = factor_and_invert(A, y)[1]

    inverse = best_of(repeats, factor, restore)
    gradient = best_of(repeats, lambda: slope_traces(A, alpha, None, v, S), restore)

    def lapack() -> None:
        L = sla.cholesky(A, lower=True, overwrite_a=True, check_finite=False)
        sla.lapack.dpotri(L, lower=1, overwrite_c=1)

    reference = best_of(repeats, lapack, restore)
    flops = arithmetic(n, d)
    unit = sum(flops.values()) / (2.0 * n**3 / gemm)  # the arithmetic at the GEMM rate
    return {"d": d, "ard": ard, "seconds": whole, "kernel_seconds": kernel,
            "factor_and_invert_seconds": inverse, "gradient_pass_seconds": gradient,
            "lapack_potrf_potri_seconds": reference, "arithmetic_flops": flops,
            "arithmetic_seconds_at_gemm_rate": unit, "over_arithmetic": whole / unit,
            "over_gemm": whole / gemm,
            "factor_and_invert_gemm_fraction": (n**3 / (2.0 * n**3 / gemm)) / inverse}


def figure(runs: list[dict], cfg: dict, path: Path) -> None:
    """Per thread count, one stacked bar per setting: its parts in units of its arithmetic at
    the GEMM rate, the LAPACK reference beside it, the goal as a line."""
    fig, axes = plt.subplots(1, len(runs), figsize=(5.6 * len(runs), 6.2), squeeze=False,
                             sharey=True)
    parts = (("kernel_seconds", "kernel matrix", "C0"),
             ("factor_and_invert_seconds", "Cholesky + inverse (blocked)", "C1"),
             ("gradient_pass_seconds", "gradient: M∘K pass + one product", "C2"))
    top = 0.0
    for ax, run in zip(axes[0], runs, strict=True):
        rows = run["rows"]
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for key, label, color in parts:
            height = np.array([r[key] / r["arithmetic_seconds_at_gemm_rate"] for r in rows])
            ax.bar(x - 0.2, height, 0.38, bottom=bottom, color=color, label=label)
            bottom += height
        whole = np.array([r["over_arithmetic"] for r in rows])
        rest = np.maximum(whole - bottom, 0.0)
        ax.bar(x - 0.2, rest, 0.38, bottom=bottom, color="0.75",
               label="rest: whole − parts (solve, sums; timing noise)")
        lapack = np.array([r["lapack_potrf_potri_seconds"] / r["arithmetic_seconds_at_gemm_rate"]
                           for r in rows])
        ax.bar(x + 0.2, lapack, 0.38, color="none", edgecolor="C3", hatch="//",
               label="LAPACK potrf + potri alone (before)")
        for xi, r in zip(x, rows, strict=True):  # above the bar and its parts
            ax.text(xi - 0.2, max(r["over_arithmetic"], bottom[xi]) + 0.03,
                    f"{r['over_arithmetic']:.2f}×\n{1e3 * r['seconds']:.0f} ms",
                    ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="k", lw=1, label="arithmetic at the GEMM rate")
        ax.axhline(GOAL, color="k", lw=1, ls="--", label=f"goal: ≤ {GOAL}×")
        ax.set_xticks(x, [f"d = {r['d']}\n{'ARD' if r['ard'] else 'isotropic'}" for r in rows])
        ax.set_title(f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}: GEMM "
                     f"{run['gemm_gflops']:.0f} GFLOP/s, load {run['load_before']:.1f}",
                     fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        top = max(top, float(whole.max()), float(lapack.max()))
    axes[0][0].set_ylabel("seconds / (arithmetic at the same run's GEMM rate)")
    axes[0][0].set_ylim(0, 1.2 * max(top, GOAL))
    fig.suptitle(f"One log marginal likelihood + gradient (RBF) at n = {cfg['n']}", fontsize=11)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=4)  # below both panels
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_learning", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    n, runs = cfg["n"], []
    for threads in cfg["threads"]:
        threads = usable_cores() if threads is None else int(threads)
        with threadpool_limits(limits=threads, user_api="blas"), use_kernel_threads(threads):
            run = {"threads": threads, "load_before": load_average()}
            gemm = gemm_seconds(n, cfg["gemm_repeats"])
            run.update(gemm_seconds=gemm, gemm_gflops=2.0 * n**3 / gemm / 1e9, rows=[])
            print(f"{threads} thread(s): GEMM {n}³ {1e3 * gemm:.1f} ms "
                  f"({run['gemm_gflops']:.1f} GFLOP/s), load {run['load_before']:.2f}", flush=True)
            for d in cfg["dims"]:
                for ard in cfg["ard"]:
                    row = measure(n, d, ard, gemm, cfg)
                    run["rows"].append(row)
                    print(f"  d={d:3d} {'ARD' if ard else 'iso'}: {1e3 * row['seconds']:7.1f} ms "
                          f"= {row['over_arithmetic']:.2f} × arithmetic "
                          f"({row['over_gemm']:.2f} × GEMM); kernel "
                          f"{1e3 * row['kernel_seconds']:.1f}, factor+inverse "
                          f"{1e3 * row['factor_and_invert_seconds']:.1f} "
                          f"({row['factor_and_invert_gemm_fraction']:.2f} of GEMM's rate), "
                          f"gradient pass {1e3 * row['gradient_pass_seconds']:.1f}; LAPACK "
                          f"potrf+potri {1e3 * row['lapack_potrf_potri_seconds']:.1f} ms",
                          flush=True)
            run["load_after"] = load_average()
        runs.append(run)
    return single_run_finish(out_dir, {"goal": GOAL, "runs": runs, "config": cfg},
                             lambda path: figure(runs, cfg, path), "learning.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
