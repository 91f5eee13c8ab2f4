"""Benchmark: our preconditioned CG against GPyTorch's CG at equal tolerance (issue 52, goal 2).

    python -m pipeline.bench.cg_peer              # conf/experiment/bench_cg_peer.yaml
    python -m pipeline.bench.cg_peer size=small   # its reduced variant

For each n of ``sizes`` (the first n training rows of ``dataset``), the GP mean's solve
(K + σ²I)α = y to a relative residual ``tol`` is run

- by ours: ``algorithm=cg`` with its defaults (the pivoted-Cholesky preconditioner, its rank
  grown until tr(K − FFᵀ) ≤ 2·n·σ², K held where it fits and formed by the first product,
  ``hold_kernel=auto``), then the test mean k(X*, X)α;
- by GPyTorch as its users run it: an ``ExactGP`` (zero mean, the same RBF kernel and noise
  σ², float64) in eval mode; ``model(X*).mean`` solves by its CG (``max_cholesky_size`` 800 <
  n) with its default pivoted-Cholesky preconditioner (rank
  ``settings.max_preconditioner_size``, 15), its ``cg_tolerance`` and ``eval_cg_tolerance`` set
  to ``tol`` and at most ``max_iter`` iterations;

both on ``threads`` threads (null: every core; ours: BLAS and the kernel tiles, GPyTorch:
``torch.set_num_threads``), each timed from the arrays to the test mean (best of ``repeats``,
after one untimed run of each on 500 rows: :func:`warm_up`), beside the largest difference of
the two means relative to their scale (both solve the same system). Writes
``outputs/<sweep>/figures.json`` and ``cg_peer.png``; the goal is ours ÷ GPyTorch's ≤ 0.25.
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
from threadpoolctl import threadpool_limits  # noqa: E402

import algorithms  # noqa: E402
from algorithms.kernel_blocks import ArrayKernelBlocks  # noqa: E402
from algorithms.kernel_threads import kernel_threads, use_kernel_threads  # noqa: E402
from algorithms.kernels import Kernel  # noqa: E402
from algorithms.peers import library_warnings, torch_threads  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    save_figure,
    single_run_finish,
    single_run_setup,
)
from pipeline.datasets import ingest, load_arrays  # noqa: E402
from pipeline.job.run import load_average  # noqa: E402

GOAL = 0.25  # our seconds over GPyTorch's, at equal tolerance


def ours(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, cfg: dict) -> tuple[float, np.ndarray,
                                                                             dict]:
    """(seconds, test mean, summary) of our PCG from the arrays to the test mean."""
    kernel = Kernel("rbf", {"width": cfg["width"]})
    start = time.perf_counter()
    fit = algorithms.run(cfg["algorithm"], ArrayKernelBlocks(X, kernel), y, lam=cfg["lam"], rng=0,
                         tol=cfg["tol"], max_iter=cfg["max_iter"], error_bars=False)
    mean = fit.solution.mean(X_test)
    seconds = time.perf_counter() - start
    summary = fit.summary
    return seconds, mean, {"iterations": int(summary["iterations"]),
                           "precond_rank": int(summary["precond_rank"]),
                           "precond_seconds": float(summary["precond_seconds"]),
                           "residual_true": float(summary["residual_true"])}


def gpytorch_cg(X: np.ndarray, y: np.ndarray, X_test: np.ndarray,
                cfg: dict) -> tuple[float, np.ndarray, list[str], int]:
    """(seconds, test mean, GPyTorch's warnings, its products with K) of GPyTorch's exact-GP
    mean by its CG."""
    import gpytorch
    import linear_operator.utils as operator_utils
    import torch

    products = [0]
    linear_cg = operator_utils.linear_cg

    def counted_cg(matmul_closure, rhs, *args, **kwargs):
        """linear_operator's CG as it is, its products with K counted (one per iteration and
        the initial residual's)."""
        def matmul(v):
            products[0] += 1
            return matmul_closure(v)
        return linear_cg(matmul, rhs, *args, **kwargs)

    class Exact(gpytorch.models.ExactGP):
        def __init__(self, tX, ty, likelihood) -> None:
            super().__init__(tX, ty, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.RBFKernel()

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    caught: list[str] = []
    with torch_threads(torch):  # our kernel-thread count, as a GPyTorch peer in a job
        start = time.perf_counter()
        tX, ty, tT = (torch.from_numpy(np.ascontiguousarray(a)) for a in (X, y, X_test))
        likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
        model = Exact(tX, ty, likelihood).double()
        # exp(−‖x − x'‖²/(2ℓ²)) = exp(−‖x − x'‖²/width): ℓ² = width/2
        model.covar_module.lengthscale = float(np.sqrt(cfg["width"] / 2.0))
        likelihood.noise = cfg["lam"]
        model.eval()
        likelihood.eval()
        operator_utils.linear_cg = counted_cg  # LinearOperator._solve looks it up at each call
        try:
            with library_warnings(caught), torch.no_grad(), \
                    gpytorch.settings.cg_tolerance(cfg["tol"]), \
                    gpytorch.settings.eval_cg_tolerance(cfg["tol"]), \
                    gpytorch.settings.max_cg_iterations(cfg["max_iter"]), \
                    gpytorch.settings.skip_posterior_variances(True):
                mean = model(tT).mean.numpy()
        finally:
            operator_utils.linear_cg = linear_cg
        seconds = time.perf_counter() - start
    return seconds, mean, sorted(set(caught)), products[0]


def warm_up(arrays: tuple[np.ndarray, ...], cfg: dict) -> None:
    """Each solver once, untimed, on the first 500 rows: what a process pays once (loading
    numba's compiled kernel tiles, ~0.4 s; importing and initialising torch and GPyTorch) is
    not in the first size's best of ``repeats``."""
    X, y, X_test = arrays[0][:500], arrays[1][:500], arrays[2][:100]
    ours(X, y, X_test, cfg)
    gpytorch_cg(X, y, X_test, cfg)


def measure(n: int, arrays: tuple[np.ndarray, ...], cfg: dict) -> dict:
    X, y, X_test = arrays[0][:n], arrays[1][:n], arrays[2]
    row: dict = {"n": n, "load_before": load_average(), "threads": kernel_threads()}
    ours_runs = [ours(X, y, X_test, cfg) for _ in range(cfg["repeats"])]
    peer_runs = [gpytorch_cg(X, y, X_test, cfg) for _ in range(cfg["repeats"])]
    row["ours_seconds"] = [r[0] for r in ours_runs]
    row["gpytorch_seconds"] = [r[0] for r in peer_runs]
    row.update(ours_runs[-1][2])
    row["gpytorch_warnings"] = peer_runs[-1][2]
    row["gpytorch_products"] = peer_runs[-1][3]
    a, b = ours_runs[-1][1], peer_runs[-1][1]
    row["mean_difference"] = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
    row["ratio"] = min(row["ours_seconds"]) / min(row["gpytorch_seconds"])
    return row


def figure(rows: list[dict], cfg: dict, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4))
    ns = [r["n"] for r in rows]
    left.plot(ns, [min(r["ours_seconds"]) for r in rows], "o-",
              label=f"ours: PCG (algorithm={cfg['algorithm']})")
    left.plot(ns, [min(r["gpytorch_seconds"]) for r in rows], "s--",
              label="GPyTorch: ExactGP mean by its CG")
    left.set(xlabel="n (training rows)", ylabel="seconds to the test mean (best of "
             f"{cfg['repeats']})", xscale="log", yscale="log",
             title=f"{cfg['dataset']['name']}, RBF 2ω² = {cfg['width']}, σ² = {cfg['lam']}, "
                   f"tol {cfg['tol']:g}")
    left.set_xticks(ns, [str(n) for n in ns])
    left.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    right.bar([str(n) for n in ns], [r["ratio"] for r in rows], color="tab:blue")
    right.axhline(GOAL, color="k", ls="--", lw=1, label=f"goal ≤ {GOAL}")
    right.set(xlabel="n (training rows)", ylabel="ours ÷ GPyTorch (seconds)",
              title=f"same machine and run, {rows[0]['threads']} threads each")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_cg_peer", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    X, y, X_test, _ = load_arrays(ingest(cfg["dataset"], cfg["store_root"]))
    arrays = (np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64),
              np.asarray(X_test, dtype=np.float64)[: cfg["n_test"]])
    threads = int(cfg["threads"] or os.cpu_count() or 1)
    with threadpool_limits(limits=threads, user_api="blas"), use_kernel_threads(threads):
        warm_up(arrays, cfg)
    rows = []
    for n in cfg["sizes"]:
        with threadpool_limits(limits=threads, user_api="blas"), use_kernel_threads(threads):
            row = measure(int(n), arrays, cfg)
        rows.append(row)
        print(f"n={n:6d}: ours {min(row['ours_seconds']):.2f} s ({row['iterations']} "
              f"iterations, rank {row['precond_rank']}), GPyTorch "
              f"{min(row['gpytorch_seconds']):.2f} s ({row['gpytorch_products']} products with "
              f"K): ratio {row['ratio']:.3f} (goal ≤ {GOAL}); "
              f"means differ by {row['mean_difference']:.1e}"
              + (f"; GPyTorch warned: {row['gpytorch_warnings']}"
                 if row["gpytorch_warnings"] else ""), flush=True)
    return single_run_finish(out_dir, {"rows": rows, "goal": GOAL, "config": cfg},
                             lambda path: figure(rows, cfg, path), "cg_peer.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
