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

import json
import sys
import time
from pathlib import Path

import hydra
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

import algorithms  # noqa: E402
from algorithms import InputError, Kernel  # noqa: E402
from pipeline.blocks import open_blocks  # noqa: E402
from pipeline.datasets import ingest, load_arrays  # noqa: E402
from pipeline.job import CONF_DIR  # noqa: E402


def gemm_flops(m: int, k: int, n: int, repeats: int, rng: np.random.Generator) -> float:
    """Best achieved FLOP/s of an (m×k)·(k×n) float64 product over ``repeats`` runs."""
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    A @ B  # warm-up (thread pool start, page faults)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * k * n / best


def run(cfg: dict, out_dir: Path) -> dict:
    rng = np.random.default_rng(cfg["seed"])
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
    figures = {
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
    (out_dir / "figures.json").write_text(json.dumps(figures, indent=2))

    t = fit.trace["n_basis"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(t, seconds * 1e3)
    ax1.set(xlabel="basis size t", ylabel="ms per step",
            title=f"{name} step time (n={cfg['n']}, κ={cfg['kappa']})")
    ax2.plot(t, flops / seconds / 1e9, label=name)
    ax2.axhline(peak / 1e9, color="k", ls="--", label=f"GEMM {cfg['gemm_size']}³")
    ax2.axhline(hot / 1e9, color="gray", ls=":", label="GEMM (t_max×n)·(n×κ)")
    ax2.set(xlabel="basis size t", ylabel="GFLOP/s", title="achieved vs GEMM")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out_dir / f"{name}_flops.png", dpi=100)
    plt.close(fig)
    return figures


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
        print(f"{key:32s} {value:.4g}" if isinstance(value, float) else f"{key:32s} {value}")
    print(f"figures: {out_dir / 'figures.json'}")


if __name__ == "__main__":
    main()
