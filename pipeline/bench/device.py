"""Benchmark: the dominant numerics on the CPU and on a torch device (issue 57).

    python -m pipeline.bench.device              # conf/experiment/bench_device.yaml
    python -m pipeline.bench.device size=small   # its reduced variant (CI: cpu and torch:cpu)

For every device (``cpu``: numpy; ``torch:cpu``; ``cuda`` where torch sees a GPU), precision
(float64; float32 on a torch device) and n of ``sizes`` (and ``gpu_sizes`` on a GPU), on n
Gaussian training points in d dimensions: one product K·v without forming K, and the fits of
the config's ``methods`` (the exact GP to its ``max_n`` on the CPU, PCG, the Nyström method and
SGMA at m = ``basis``, and GPyTorch's SGPR at the same m, untrained at the same kernel: its fit
alone) on the same device; a method
that computes in float64 only (``AlgorithmSpec.float64_only``) is left out of
the float32 rows. Each is the best
of ``repeats`` wall times, after an untimed fit of every method at n = 200 (a GPU
synchronised before the clock stops), with its test RMSE; K·v and the exact GP also as a
fraction of the device's own GEMM rate in that precision (``gemm_size``³, measured in the
same run): K·v as n²(2(d + 2) + 2) flops, the exact GP as its Cholesky's n³/3. Writes
``outputs/<sweep>/figures.json`` and ``device_seconds.png`` and prints a table.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from algorithms import REGISTRY, ArrayKernelBlocks, Kernel, run  # noqa: E402
from algorithms.errors import InputError  # noqa: E402
from pipeline.atomic import write_text  # noqa: E402
from pipeline.bench.sweep_overhead import (  # noqa: E402
    save_figure,
    single_run_finish,
    single_run_setup,
)

REFERENCE = "K·v"  # the product every row has, beside the config's methods
WARM_UP_N = 200  # each method fitted once at this n first, untimed (imports, compiled code)


def devices(cfg: dict) -> list[str]:
    """The devices to measure: the config's list, or (``auto``) cuda then cpu where torch sees
    a GPU (the GPU's rows first: a run cut short keeps them), else cpu and torch:cpu (the
    device back end, tested without a GPU)."""
    if cfg["devices"] != "auto":
        return list(cfg["devices"])
    import torch

    return ["cuda", "cpu"] if torch.cuda.is_available() else ["cpu", "torch:cpu"]


def on_gpu(device: str) -> bool:
    """Whether ``device`` is a CUDA GPU (``cuda``, ``cuda:N``)."""
    return device.startswith("cuda")


def sizes_for(device: str, cfg: dict) -> list[int]:
    """The n a device is measured at: ``sizes``, and on a GPU ``gpu_sizes`` after them (to
    the device's memory: there a method's ``max_n``, the CPU's limit, does not apply, and the
    exact GP's matrix past the device's free memory is its one-line refusal, kept in the row's
    ``failed``)."""
    return list(cfg["sizes"]) + (list(cfg.get("gpu_sizes") or []) if on_gpu(device) else [])


def problem(n: int, cfg: dict) -> tuple[np.ndarray, ...]:
    """n training and ``n_test`` test points in d dimensions, y = Σ sin(x_j) + noise."""
    rng = np.random.default_rng(cfg["seed"])
    X = rng.standard_normal((n + cfg["n_test"], cfg["d"]))
    y = np.sin(X).sum(axis=1) + np.sqrt(cfg["lam"]) * rng.standard_normal(len(X))
    return X[:n], y[:n], X[n:], y[n:]


def _synchronise(device: str) -> Callable[[], None]:
    if on_gpu(device):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def best_seconds(work: Callable[[], object], repeats: int, device: str) -> tuple[float, object]:
    """The best wall time of ``repeats`` calls of ``work`` and the last call's result."""
    sync, best, out = _synchronise(device), np.inf, None
    for _ in range(repeats):
        out = None  # the last call's fit (its device matrices) freed before the next
        sync()
        t0 = time.perf_counter()
        out = work()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _out_of_memory(device: str) -> tuple[type[BaseException], ...]:
    """The exception a torch device raises when its memory runs out (none on ``cpu``)."""
    if device == "cpu":
        return ()
    import torch

    return (torch.OutOfMemoryError,)


def gemm_gflops(device: str, precision: str, size: int, repeats: int) -> float:
    """The device's square GEMM rate (2·size³ flops) in ``precision``."""
    if device == "cpu":
        rng = np.random.default_rng(0)
        A, B = rng.standard_normal((size, size)), rng.standard_normal((size, size))
        seconds, _ = best_seconds(lambda: A @ B, repeats + 1, device)
    else:
        import torch

        from algorithms.device import torch_device, torch_dtype

        where, dtype = torch_device(device), torch_dtype(precision)
        A = torch.randn((size, size), dtype=dtype, device=where)
        B = torch.randn((size, size), dtype=dtype, device=where)
        seconds, _ = best_seconds(lambda: A @ B, repeats + 1, device)
    return 2.0 * size**3 / seconds / 1e9


def blocks_for(device: str, precision: str, X: np.ndarray, kernel: Kernel):
    """The kernel blocks a job on ``device`` fits with."""
    if device == "cpu":
        return ArrayKernelBlocks(X, kernel)
    from algorithms.device import torch_device, torch_dtype
    from algorithms.torch_blocks import TorchKernelBlocks

    return TorchKernelBlocks(X, kernel, torch_device(device), torch_dtype(precision))


def measure(device: str, precision: str, n: int, cfg: dict, gemm: float) -> dict:
    """One row: K·v and every method's best seconds and test RMSE at n on ``device``."""
    gc.collect()  # the last row's fits (reference cycles) and their device matrices, freed
    X, y, X_test, y_test = problem(n, cfg)
    kernel = Kernel("rbf", {"width": cfg["width"]})
    blocks = blocks_for(device, precision, X, kernel)
    row: dict = {"device": device, "precision": precision, "n": n, "seconds": {}, "rmse": {},
                 "failed": {}}
    v = np.random.default_rng(1).standard_normal(n)
    seconds, _ = best_seconds(lambda: blocks.matmul(v), cfg["repeats"], device)
    row["seconds"][REFERENCE] = seconds
    row["matvec_vs_gemm"] = n * n * (2 * (cfg["d"] + 2) + 2) / seconds / 1e9 / gemm
    for label, method in cfg["methods"].items():
        algorithm, options = method["algorithm"], dict(method["options"])
        if ("max_n" in method and n > method["max_n"] and not on_gpu(device)) or (
                precision != "float64" and REGISTRY[algorithm].float64_only):
            continue
        if "basis" in method and method["basis"]:
            options["max_basis"] = cfg["basis"]
        try:
            seconds, fit = best_seconds(
                lambda a=algorithm, o=options: run(a, blocks, y, lam=cfg["lam"],
                                                   kappa=cfg["kappa"], rng=0,
                                                   test=(X_test, y_test), **o),
                cfg["repeats"], device)
        except (InputError, FloatingPointError, *_out_of_memory(device)) as err:
            # a breakdown (float32), a refusal or the device's memory: the row says which
            row["failed"][label] = " ".join(str(err).split())[:300]
            continue
        row["seconds"][label] = seconds
        row["rmse"][label] = float(fit.summary["test_rmse"])
        del fit  # its device matrices, freed before the next method is measured
    cholesky = cfg["cholesky_method"]
    if cholesky in row["seconds"]:  # its Cholesky's n³/3 flops
        row["exact_vs_gemm"] = n**3 / 3.0 / row["seconds"][cholesky] / 1e9 / gemm
    return row


def _float32_differences(rows: list[dict]) -> None:
    """Each float32 row's test RMSE relative to its device's float64 row at the same n."""
    by_key = {(r["device"], r["n"]): r for r in rows if r["precision"] == "float64"}
    for row in rows:
        if row["precision"] == "float32" and (row["device"], row["n"]) in by_key:
            ref = by_key[(row["device"], row["n"])]["rmse"]
            row["rmse_rel_diff_vs_float64"] = {k: abs(v - ref[k]) / abs(ref[k])
                                               for k, v in row["rmse"].items() if k in ref}


def figure(rows: list[dict], methods: list[str], path: Path,
           described: dict | None = None) -> None:
    """Seconds against n, one panel per method, a line per device and precision; the title
    names each torch device's model (``described``: :func:`algorithms.device.describe`)."""
    labels = [REFERENCE, *methods]
    fig, axes = plt.subplots(2, (len(labels) + 1) // 2, figsize=(12, 6.4), sharex=True)
    series = sorted({(r["device"], r["precision"]) for r in rows})
    for ax, label in zip(axes.flat, labels, strict=False):
        for i, (device, precision) in enumerate(series):
            got = [r for r in rows if (r["device"], r["precision"]) == (device, precision)
                   and label in r["seconds"]]
            if got:
                ax.loglog([r["n"] for r in got], [r["seconds"][label] for r in got],
                          "o-" if precision == "float64" else "s--", color=f"C{i}",
                          label=f"{device}, {precision}")
        ax.set_xticks(sorted({r["n"] for r in rows}), [str(n) for n in sorted(
            {r["n"] for r in rows})], rotation=40, fontsize=8)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set(title=label, xlabel="n (training rows)", ylabel="seconds (best)")
        ax.grid(alpha=0.3, which="both")
    axes.flat[0].legend(fontsize=8)
    models = "; ".join(f"{name} = {about['device_model']}"
                       for name, about in (described or {}).items() if name != "torch:cpu")
    fig.suptitle("The dominant numerics on each device (bench_device)"
                 + (f": {models}" if models else ""))
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    setup = single_run_setup("bench_device", argv)
    if setup is None:
        return 2
    cfg, out_dir = setup
    from algorithms.device import describe, torch_device

    try:  # every device named can be used here, before any is measured
        described = {d: describe(torch_device(d)) for d in devices(cfg) if d != "cpu"}
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows, gemms = [], {}
    figures = {"gemm_gflops": gemms, "devices": described, "rows": rows, "config": cfg,
               "complete": False}
    for device in devices(cfg):
        for precision in (["float64"] if device == "cpu" else cfg["precisions"]):
            gemm = gemm_gflops(device, precision, cfg["gemm_size"], cfg["repeats"])
            gemms[f"{device} {precision}"] = gemm
            print(f"{device} {precision}: GEMM {cfg['gemm_size']}³ {gemm:.1f} GFLOP/s",
                  flush=True)
            measure(device, precision, WARM_UP_N, {**cfg, "repeats": 1}, gemm)  # untimed
            for n in sizes_for(device, cfg):
                row = measure(device, precision, n, cfg, gemm)
                rows.append(row)
                print(f"  n={n:6d}: " + ", ".join(
                    f"{k} {s:.3g} s" for k, s in row["seconds"].items()) + "".join(
                    f"; {k} failed: {why}" for k, why in row["failed"].items()), flush=True)
                # the rows so far: a run cut short (a GPU's time limit) keeps them
                write_text(out_dir / "figures.json", json.dumps(figures, indent=2))
    _float32_differences(rows)
    figures["complete"] = True
    return single_run_finish(out_dir, figures,
                             lambda path: figure(rows, list(cfg["methods"]), path,
                                                 described),
                             "device_seconds.png")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
