"""A published row is enough to fit its job again (issue 85, item 5): a finished sweep is
published (``python -m pipeline.publish … --out DIR``), and each deterministic job of the CSV
is refitted from that row's text alone — data set, split, seed, algorithm, basis size and the
published hyperparameters, under ``hyper=fixed`` — to its published test RMSE."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.job.run import run_job

CLUSTER = ("cluster.n_workers=1", "cluster.dashboard_address=:0", "seed=0")


def _publish(tmp_path: Path, run_cli, in_process, sweep: str, *grid: str
             ) -> tuple[list[dict[str, str]], dict]:
    """Run ``grid`` as sweep ``sweep``, publish it, and return the published CSV's rows as
    text (the csv module, not pandas: what a reader of the file gets) and the run record."""
    ran = run_cli(tmp_path, "-m", *grid, f"sweep={sweep}", *CLUSTER)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = tmp_path / "outputs" / "published"
    published = in_process(tmp_path, "pipeline.publish", f"outputs/{sweep}/results.zarr",
                           "--reference", "exact", "--out", str(out))
    assert published.returncode == 0, published.stderr[-3000:]
    with open(out / f"{sweep}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, yaml.safe_load((out / f"{sweep}.run.yaml").read_text())


def _dataset_options(run: dict) -> dict:
    """The dataset options the run's command set (``[++]dataset.<option>=<value>``)."""
    pairs = (word.split("=", 1) for word in run["command"].split() if "=" in word)
    return {key.lstrip("+").removeprefix("dataset."): yaml.safe_load(value)
            for key, value in pairs if key.lstrip("+").startswith("dataset.")}


def _lengthscales(cell: str, d: int) -> list[float]:
    """The ``lengthscales`` column read back: one per input, or one for every input."""
    scales = [float(v) for v in cell.split(";")]
    return scales * d if len(scales) == 1 else scales


def test_a_published_row_refits_its_job_to_the_published_test_rmse(tmp_path, run_cli,
                                                                      in_process):
    """The exact GP and Nyström at a learned ARD kernel (32 length scales) on pumadyn32nm's
    standardised targets: refitted under hyper=fixed from the CSV's text, each reproduces its
    published test RMSE to 1e-6 relative. hyper=fixed centres nothing; the published offset
    is the standardised targets' mean, 0 to round-off, so the refit needs none."""
    from pipeline.datasets import train_shape

    rows, run = _publish(tmp_path, run_cli, in_process, "refit", "algorithm=exact,nystrom",
                         "dataset=pumadyn32nm", "dataset.n_train=300", "hyper=ml",
                         "hyper.subset=300", "hyper.ard=true", "hyper.restarts=0",
                         "algorithm.max_basis=32")
    options = _dataset_options(run)
    assert options == {"n_train": 300}
    assert {row["algorithm"] for row in rows} == {"exact", "nystrom"}
    for row in rows:
        assert row["status"] == "ok" and row["hyper_from"] == "shared"
        assert row["kernel"] == "rbf" and len(row["lengthscales"].split(";")) == 32
        if row["learning_stop_reason"]:  # the learning's record (hyper_stop_reason)
            assert row["learning_converged"] == str(row["learning_stop_reason"] == "converged")
        assert abs(float(row["y_offset"])) < 1e-12
        dataset = {"name": row["dataset"], "split": int(row["split"]), **options}
        d = train_shape(dataset)[1]
        algorithm = {"name": row["algorithm"]}
        if row["basis_size"]:
            algorithm["max_basis"] = int(row["basis_size"])
        config = {"algorithm": algorithm, "dataset": dataset, "hyper": {"name": "fixed"},
                  "kernel": {"name": row["kernel"], "variance": float(row["signal_variance"]),
                             "lengthscales": _lengthscales(row["lengthscales"], d)},
                  "lam": float(row["noise_variance"]), "seed": int(row["seed"] or 0),
                  "store_root": str(tmp_path / "outputs" / "stores")}
        refit = run_job(config, tmp_path / "refit" / row["algorithm"] / "result.nc")
        assert refit.result.summary["test_rmse"] == pytest.approx(float(row["test_rmse"]),
                                                                  rel=1e-6), row["algorithm"]
        # the length scales matter: in reverse order they fit another model
        config["kernel"]["lengthscales"] = config["kernel"]["lengthscales"][::-1]
        other = run_job(config, tmp_path / "other" / row["algorithm"] / "result.nc")
        assert other.result.summary["test_rmse"] != pytest.approx(float(row["test_rmse"]),
                                                                  rel=1e-3)


def test_the_published_offset_is_the_prior_mean_the_fit_used(tmp_path, run_cli, in_process):
    """Abalone's raw targets (rings, mean ≈ 10) with an isotropic learned kernel: the exact
    GP's published test RMSE is reproduced from the row alone by the GP posterior mean
    written out in numpy — y_offset + k*ᵀ(K + σ²I)⁻¹(y − y_offset) at the published ℓ,
    signal variance and σ² — and without the offset it is not."""
    from algorithms.kernels import Kernel
    from pipeline.datasets import build

    rows, run = _publish(tmp_path, run_cli, in_process, "offset", "algorithm=exact",
                         "dataset=abalone", "dataset.n_train=300", "hyper=ml",
                         "hyper.subset=300", "hyper.restarts=0")
    (row,) = rows
    assert row["hyper_from"] == "shared" and len(row["lengthscales"].split(";")) == 1
    offset = float(row["y_offset"])
    assert offset > 5
    arrays, attrs = build({"name": row["dataset"], **_dataset_options(run)})
    kernel = Kernel(row["kernel"], {"variance": float(row["signal_variance"]),
                                    "lengthscales": _lengthscales(row["lengthscales"],
                                                                  attrs["d"])})
    X, y, X_test, y_test = (arrays[k] for k in ("X_train", "y_train", "X_test", "y_test"))
    K = kernel(X, X) + float(row["noise_variance"]) * np.eye(len(y))

    def rmse(prior_mean: float) -> float:
        mean = prior_mean + kernel(X_test, X) @ np.linalg.solve(K, y - prior_mean)
        return float(np.sqrt(np.mean((mean - y_test) ** 2)))

    assert rmse(offset) == pytest.approx(float(row["test_rmse"]), rel=1e-6)
    assert rmse(0.0) != pytest.approx(float(row["test_rmse"]), rel=1e-3)
