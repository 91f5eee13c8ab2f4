"""Benchmark: an algorithm's achieved FLOP/s against numpy GEMM on this machine.

    python -m pipeline.bench [key=value ...]     (config: conf/experiment/bench_sgma_flops.yaml;
                                                 size=small: its reduced variant)

Measures, in one run, (1) the best of ``gemm_repeats`` square GEMMs of size ``gemm_size``
(2N³ FLOPs each) and a GEMM of the greedy hot shape (t_max × n)·(n × κ); (2) the configured
``algorithm``'s time per step and achieved FLOP/s for t = 1..t_max, from the ``flops`` its trace
reports (the BLAS work it counts; exp and elementwise work are not counted, so the ratio is
conservative). Writes ``figures.json`` and ``<algorithm>_flops.png`` into the run directory and
prints the headline numbers.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hydra
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from scipy.spatial.distance import cdist  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import algorithms  # noqa: E402
from algorithms import InputError, Kernel  # noqa: E402
from algorithms.kernel_threads import use_kernel_threads
from pipeline.atomic import save_figure, write_text
from pipeline.blocks.store import open_blocks
from pipeline.cluster.threads import blas_threads
from pipeline.config import CONF_DIR
from pipeline.datasets import ingest, load_arrays  # noqa: E402

# the trace's clocks since the fit's start (the evaluator's), not parts of a step
CLOCKS = ("seconds", "cpu_seconds")


def gemm_flops(m: int, k: int, n: int, repeats: int, rng: np.random.Generator) -> float:
    """Best achieved FLOP/s of an (m×k)·(k×n) float64 product over ``repeats`` runs."""
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return 2.0 * m * k * n / _best(functools.partial(np.matmul, A, B), repeats)


def _naive(name: str, A: np.ndarray, B: np.ndarray, scale: float) -> np.ndarray:
    """The textbook numpy form of a kernel block, with its n×m temporaries (the pre-tiling
    implementation): the reference the fused blocks are timed against."""
    if name == "rbf":
        D = A @ (B.T * (2.0 / scale))
        D -= (np.einsum("ij,ij->i", A, A) / scale)[:, None]
        D -= (np.einsum("ij,ij->i", B, B) / scale)[None, :]
        np.minimum(D, 0.0, out=D)
        K = np.exp(D, out=D)
    else:
        D = cdist(A, B) / scale
        K = np.exp(-D) if name == "laplacian" else (1.0 + D) * np.exp(-D)
    np.isfinite(K).all()
    return K


def _write_block(n: int, m: int, threads: int) -> np.ndarray:
    """Only what every kernel block must do: a fresh (n × m) float64 array written once (a
    broadcast ufunc per row run, on ``threads`` threads): the memory-bandwidth floor of a
    block, however its values are computed."""
    K = np.empty((n, m))
    row = np.ones(m)
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def fill(i: int) -> None:
        np.multiply(row, 1.0, out=K[bounds[i]:bounds[i + 1]])

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(fill, range(threads)))
    return K


def kernel_entry_times(n: int, m: int, dims: list[int], threads: list[int], repeats: int,
                       rng: np.random.Generator) -> list[dict]:
    """Seconds per kernel entry of an (n × m) block, naive numpy form (:func:`_naive`, BLAS on
    the same thread count) vs the tiled, threaded :class:`~algorithms.Kernel`, per kernel,
    input dimension d and thread count; best of ``repeats``."""
    scales = {"rbf": ("width", 10.0), "laplacian": ("omega", 2.0), "matern32": ("mu", 2.0)}
    rows = []
    for name, (param, scale) in scales.items():
        for d in dims:
            A, B = rng.standard_normal((n, d)), rng.standard_normal((m, d))
            kernel = Kernel(name, {param: scale})
            ref = _naive(name, A, B, scale)
            for t in threads:
                with threadpool_limits(limits=t, user_api="blas"), use_kernel_threads(t):
                    naive = _best(functools.partial(_naive, name, A, B, scale), repeats)
                    fused = _best(functools.partial(kernel, A, B), repeats)
                    write = _best(functools.partial(_write_block, n, m, t), repeats)
                err = float(np.max(np.abs(kernel(A, B) - ref) / np.abs(ref).max()))
                rows.append({"kernel": name, "d": d, "threads": t,
                             "naive_ns_per_entry": naive / (n * m) * 1e9,
                             "fused_ns_per_entry": fused / (n * m) * 1e9,
                             "write_ns_per_entry": write / (n * m) * 1e9,
                             "speedup": naive / fused, "max_rel_diff": err})
    return rows


def _best(f, repeats: int) -> float:
    f()  # warm-up
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def run(cfg: dict, out_dir: Path) -> dict:
    threads = int(cfg.get("threads") or os.cpu_count() or 1)
    with threadpool_limits(limits=threads, user_api="blas"), use_kernel_threads(threads):
        return _run(cfg, out_dir, threads)


def _run(cfg: dict, out_dir: Path, threads: int) -> dict:
    rng = np.random.default_rng(cfg["seed"])
    kcfg = cfg["kernel_bench"]
    entries = kernel_entry_times(kcfg["n"], kcfg["m"], list(kcfg["d"]),
                                 sorted({1, threads}), kcfg["repeats"], rng)
    peak = gemm_flops(cfg["gemm_size"], cfg["gemm_size"], cfg["gemm_size"], cfg["gemm_repeats"],
                      rng)
    t_max = int(cfg["t_max"])
    hot = gemm_flops(t_max, cfg["n"], cfg["kappa"], cfg["gemm_repeats"], rng)

    store = ingest(cfg["dataset"], cfg["store_root"])
    _, y, _, _ = load_arrays(store)
    blocks = open_blocks(store, Kernel("rbf", {"width": cfg["width"]}))
    _ = blocks.X  # read the inputs before timing starts
    name = cfg["algorithm"]
    fit = algorithms.run(name, blocks, y, lam=cfg["lam"], kappa=cfg["kappa"], rng=rng,
              **{**cfg["options"], "max_basis": t_max})
    if "flops" not in fit.trace:
        raise InputError(f"algorithm={name} traces no flops; benchmark one that does")
    seconds = np.diff(np.concatenate([[0.0], fit.trace["seconds"]]))
    flops = fit.trace["flops"]
    tail = slice(-min(int(cfg["tail_steps"]), len(seconds)), None)
    # each step's parts (``<part>_seconds``); the recorder's clocks since the start are not
    parts = {k.removesuffix("_seconds"): np.asarray(v) for k, v in fit.trace.items()
             if k.endswith("_seconds") and k not in CLOCKS}
    if parts:  # the rest of each step: bookkeeping, sampling, the evaluator
        parts["bookkeeping"] = seconds - sum(parts.values())
    figures = {
        "threads": threads, "blas_threads_seen": blas_threads(),
        "n": cfg["n"], "d": cfg["d"], "kappa": cfg["kappa"], "t_max": t_max,
        "steps_run": int(len(seconds)),
        "gemm_flops_per_s": peak,
        "gemm_hot_shape_flops_per_s": hot,
        "algorithm": name,
        "total_seconds": float(fit.trace["seconds"][-1]),
        "mean_step_seconds": float(seconds.mean()),
        "step_seconds_at_t_max": float(seconds[tail].mean()),
        "flops_per_s": float(flops.sum() / seconds.sum()),
        "flops_per_s_at_t_max": float(flops[tail].sum() / seconds[tail].sum()),
    }
    figures["ratio_to_gemm"] = figures["flops_per_s"] / peak
    figures["ratio_to_gemm_at_t_max"] = figures["flops_per_s_at_t_max"] / peak
    figures["step_breakdown_fraction"] = {k: float(v.sum() / seconds.sum())
                                          for k, v in parts.items()}
    figures["step_breakdown_fraction_at_t_max"] = {
        k: float(v[tail].sum() / seconds[tail].sum()) for k, v in parts.items()}
    figures["kernel_entries"] = entries
    write_text(out_dir / "figures.json", json.dumps(figures, indent=2))
    _kernel_figure(entries, kcfg, out_dir / "kernel_ns_per_entry.png")

    t = fit.trace["n_basis"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    if parts:
        ax1.stackplot(t, *(v * 1e3 for v in parts.values()), labels=list(parts), alpha=0.8)
        ax1.legend(fontsize=7, loc="upper left")
    else:
        ax1.plot(t, seconds * 1e3)
    ax1.set(xlabel="basis size t", ylabel="ms per step",
            title=f"{name} step time (n={cfg['n']}, κ={cfg['kappa']}, {threads} threads)")
    ax2.plot(t, flops / seconds / 1e9, label=name)
    ax2.axhline(peak / 1e9, color="k", ls="--", label=f"GEMM {cfg['gemm_size']}³")
    ax2.axhline(hot / 1e9, color="gray", ls=":", label="GEMM (t_max×n)·(n×κ)")
    ax2.set(xlabel="basis size t", ylabel="GFLOP/s", title="achieved vs GEMM")
    ax2.legend()
    fig.tight_layout()
    save_figure(fig, out_dir / f"{name}_flops.png", dpi=100)
    plt.close(fig)
    return figures


def _kernel_figure(entries: list[dict], kcfg: dict, path: Path) -> None:
    """ns per entry, naive vs fused, per kernel, against d, one line per thread count."""
    kernels = list(dict.fromkeys(r["kernel"] for r in entries))
    fig, axes = plt.subplots(1, len(kernels), figsize=(4.2 * len(kernels), 4.4), squeeze=False)
    for ax, name in zip(axes[0], kernels, strict=True):
        speedups = []
        for t in sorted({r["threads"] for r in entries}):
            rows = [r for r in entries if r["kernel"] == name and r["threads"] == t]
            d = [r["d"] for r in rows]
            ax.plot(d, [r["naive_ns_per_entry"] for r in rows], "o--",
                    label=f"naive numpy, {t} thread{'s' * (t > 1)}")
            line, = ax.plot(d, [r["fused_ns_per_entry"] for r in rows], "s-",
                            label=f"fused tiles, {t} thread{'s' * (t > 1)}")
            speedups.append(f"{t} thread{'s' * (t > 1)}: "
                            + ", ".join(f"{r['speedup']:.1f}×" for r in rows))
            ax.plot(d, [r["write_ns_per_entry"] for r in rows], ":", color=line.get_color(),
                    label=f"writing the block alone, {t} thread{'s' * (t > 1)}")
        ax.set(xlabel="input dimension d", ylabel="ns per kernel entry", xticks=d,
               title=f"{name}: ({kcfg['n']} × {kcfg['m']}) block\nnaive / fused at d = "
                     f"{', '.join(map(str, d))}\n" + "\n".join(speedups))
        ax.title.set_fontsize(9)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    save_figure(fig, path, dpi=100)
    plt.close(fig)


@hydra.main(version_base=None, config_path=str(CONF_DIR),
             config_name="bench")
def main(cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    try:
        figures = run(config, out_dir)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    for key, value in figures.items():
        if key == "kernel_entries":
            for row in value:
                print(f"  kernel {row['kernel']:9s} d={row['d']:<3d} threads={row['threads']}: "
                      f"naive {row['naive_ns_per_entry']:.2f} ns, fused "
                      f"{row['fused_ns_per_entry']:.2f} ns per entry ({row['speedup']:.2f}×; "
                      f"writing the block alone {row['write_ns_per_entry']:.2f} ns)")
        elif isinstance(value, dict):
            print(f"{key:32s} " + ", ".join(f"{k} {v:.3f}" for k, v in value.items()))
        else:
            print(f"{key:32s} {value:.4g}" if isinstance(value, float) else f"{key:32s} {value}")
    print(f"figures: {out_dir / 'figures.json'}")


