"""Paper experiments at reduced size (``size=small``): the sweep runs and the report renders
its figures."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from pipeline.config import CONF_DIR
from pipeline.report.build import render
from pipeline.report.tables import paired_tests
from pipeline.results.consolidate import load

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def run_experiment(run_cli, cwd, *args, workers: int = 1):
    """The sweep of ``args`` on ``workers`` local workers (one: the test's own process and
    xdist's other worker hold the rest of a 2-core machine), run in this process as
    ``python -m pipeline -m …`` would run it (``run_cli``: the same ``main``, its process state
    put back after; a subprocess would add ~2 s of interpreter start-up and imports a sweep;
    the command line as a subprocess is tested by test_zhang2001_reduced)."""
    proc = run_cli(cwd, "-m", *args, f"cluster.n_workers={workers}",
                   "cluster.dashboard_address=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1].removeprefix("results: ")


def test_zhang2001_reduced(tmp_path):
    """Run without -m: experiment files set Hydra's hydra.mode: MULTIRUN (it used to run one
    job silently); every experiment but the single-run benchmarks declares it."""
    proc = subprocess.run([sys.executable, "-m", "pipeline", "experiment=zhang2001", "size=small",
                           "cluster.n_workers=1", "cluster.dashboard_address=null"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "9 sweep points, 7 distinct jobs" in proc.stdout
    path = proc.stdout.strip().splitlines()[-1].removeprefix("results: ")
    ds = load(path).load()
    assert ds.sizes["seed"] == 3
    assert ds.attrs["sweep"] == "zhang2001_small"
    assert ds["algorithm"].values.tolist() == ["zhang_greedy", "zhang_kappa_greedy",
                                               "zhang_random"]
    assert set(ds["status"].values.ravel()) == {"ok"}
    delta = ds["delta_R"].isel(dataset=0, kappa=0)
    assert (delta <= ds["bound"].isel(dataset=0, kappa=0) + 1e-12).where(
        np.isfinite(delta), True).all()
    at10 = delta.sel(step=10).mean("seed").values
    assert at10[0] <= at10[1] + 1e-9 and at10[0] < at10[2]  # greedy best, random worst at k=10
    r_hat = ds["final_R_hat"].values.ravel()
    assert np.allclose(r_hat, r_hat[0])  # one reference solution for all algorithms
    report = render(path)
    text = report.read_text()
    assert "Zhang's R(ŵ) of the exact solution [target units²]" in text  # readable headers
    assert "R(w^k) − R(ŵ) [target units²] at step 10" in text and "R(ŵ) ≈ 3.03" in text
    # the paper's numbers are for the full size, and the reduced run says so beside them
    assert text.index("R(ŵ) ≈ 3.03") < text.index("The paper's numbers above are for the full "
                                                  "size")
    assert "| zhang_sparse_linear | zhang_greedy | 1 |" in text  # deterministic: one job
    assert "final_R_hat" not in text and " ± 0 " not in text and "| -" not in text
    for i in (1, 2, 3):
        assert next(report.parent.glob(f"fig{i}_*.png")).stat().st_size > 5000
    # Figs. 1 and 2 drawn as one: the bound dashed, the seeds' band, on a log axis, each line
    # captioned under its figure line
    assert "![fig1_delta_R](fig1_delta_R.png)\n\nLines: mean over the 3 runs (seeds)" in text
    assert "band: min–max over the runs; dashed black: Zhang's Theorem 3.1 bound" in text
    assert "one run of zhang_greedy" in text and "fig4" not in text


def test_csato2002_experiments_reduced(tmp_path, run_cli):
    path = run_experiment(run_cli, tmp_path, "experiment=csato2002_kl", "size=small")
    ds = load(path).load()
    assert ds.sizes["step"] == 120
    kl = ds["kl_forward"].squeeze()
    assert (kl >= -1e-9).all() and np.isfinite(kl).all()
    assert int(ds["n_basis"].max()) == 15
    report = render(path)
    assert next(report.parent.glob("fig1_kl_forward.png")).stat().st_size > 5000

    path = run_experiment(run_cli, tmp_path, "experiment=csato2002_omission", "size=small")
    ds = load(path).load()
    rate = ds["final_omission_rate"].squeeze()
    assert np.isnan(rate.sel({"algorithm.max_basis": "none"})).all()  # no removals
    assert ((rate.sel({"algorithm.max_basis": "10"}) >= 0)
            & (rate.sel({"algorithm.max_basis": "10"}) <= 1)).all()
    end = ds["final_end_omission"].squeeze()
    assert set(np.unique(end.values)) <= {0.0, 1.0}
    text = render(path).read_text()
    assert "| omission rate |" in text
    assert next((tmp_path / "outputs" / "csato2002_omission_small" / "report").glob(
        "fig1_*.png")).stat().st_size > 5000


def test_csato2002_comparison_reduced_drops_options_an_algorithm_does_not_take(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "-m",
                           "experiment=csato2002_comparison", "size=small", "cluster.n_workers=1",
                           "cluster.dashboard_address=null"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "note: exact takes no option eps, max_basis" in proc.stdout
    assert "18 sweep points, 14 distinct jobs" in proc.stdout  # exact: one job per dataset
    ds = load(proc.stdout.strip().splitlines()[-1].removeprefix("results: ")).load()
    rmse = ds["final_test_rmse"].squeeze()
    exact = rmse.sel(algorithm="exact")
    assert (exact.sel({"algorithm.max_basis": 10}) == exact.sel({"algorithm.max_basis": 20})).all()
    assert (ds["final_n_basis"].sel(algorithm="sparse_online").squeeze().values
            == np.array([[10, 20, 40], [10, 20, 40]])).all()
    assert render(proc.stdout.strip().splitlines()[-1].removeprefix("results: ")).exists()


def test_ferrari1999_learning_curves_reduced(tmp_path, run_cli):
    path = run_experiment(run_cli, tmp_path, "experiment=ferrari1999_learning_curves", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    err = ds["xbar_error"].squeeze()
    exact = err.sel(algorithm="exact")
    assert (exact == exact.isel({"algorithm.m": 0})).all()  # one exact job, repeated along m
    h = err.sel(algorithm="finite_optimal")
    assert (h >= exact - 1e-10).all()  # the same x̄ for both (same seed)
    assert (err.sel(algorithm="pbr") >= h - 1e-10).all()  # h° is optimal among FΦᵀt
    assert ds["n_train"].squeeze().sel(algorithm="exact").isel({"algorithm.m": 0}).values.tolist() \
        == [1, 5, 20, 40]
    plateau = ds["final_plateau"].squeeze().sel(algorithm="finite_optimal").values
    np.testing.assert_allclose(plateau, [1.2344274, 1.0893320, 1.0275887], atol=1e-6)
    n_bar = ds["final_detaching_point"].squeeze().sel(algorithm="finite_optimal").values
    np.testing.assert_allclose(n_bar, [6.33513, 18.85309, 84.71499], rtol=1e-5)
    report = render(path)
    text = report.read_text()
    assert "mean over draws of x̄ [target units²] at n = 20" in text
    assert "| matern1d | exact | 1 |" in text
    for fig in ("fig1_xbar_error.png", "fig2_xbar_error.png"):
        assert (report.parent / fig).stat().st_size > 5000


def test_ferrari1999_pbr_gap_reduced_pairs_across_jobs(tmp_path, run_cli):
    path = run_experiment(run_cli, tmp_path, "experiment=ferrari1999_pbr_gap", "size=small")
    ds = load(path).load()
    err, gap = ds["xbar_error"].squeeze(), ds["xbar_error_minus_baseline"].squeeze()
    # the pbr job's paired difference is the difference of the two jobs' curves: same x̄
    np.testing.assert_allclose(gap.sel(algorithm="pbr"),
                               err.sel(algorithm="pbr") - err.sel(algorithm="finite_optimal"),
                               rtol=1e-9, atol=1e-13)
    assert (gap.sel(algorithm="pbr") > 0).all()
    assert (gap.sel(algorithm="finite_optimal") == 0).all()
    report = render(path)
    assert "paired over the same x̄ [target units²] at n = 5" in report.read_text()


def test_ferrari1999_real_data_reduced(tmp_path, run_cli):
    path = run_experiment(run_cli, tmp_path, "experiment=ferrari1999_real_data", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    assert set(ds["algorithm"].values) == {"exact", "sgma", "pbr", "finite_optimal",
                                           "finite_full", "finite_diagonal"}
    n_basis = ds["final_n_basis"].squeeze()
    assert n_basis.sel(algorithm="sgma").values.tolist() == [5, 20, 50]  # max_basis = m
    assert n_basis.sel(algorithm="finite_optimal").values.tolist() == [5, 20, 50]
    rmse = ds["final_test_rmse"].squeeze()
    assert np.isfinite(rmse).all()
    xbar = ds["final_xbar_error"].squeeze()  # one Nyström basis per seed: ordered exactly
    assert (xbar.sel(algorithm="finite_full") <= xbar.sel(algorithm="finite_optimal") + 1e-9).all()
    assert (xbar.sel(algorithm="finite_optimal") <= xbar.sel(algorithm="pbr") + 1e-9).all()
    report = render(path)
    assert (report.parent / "fig1_final_test_rmse.png").stat().st_size > 5000


def test_smola2001_table1_reduced(tmp_path, run_cli):
    """Table 1 at reduced size: every method's costs are recorded, the report fits slopes next
    to the paper's exponents, and exact/CG above algorithm.max_n fail with their reason."""
    path = run_experiment(run_cli, tmp_path, "experiment=smola2001_table1", "size=small")
    ds = load(path).load()
    ok = ds["status"] == "ok"
    for algorithm in ("incomplete_cholesky", "nystrom", "sgma"):
        assert bool(ok.sel(algorithm=algorithm).all()), algorithm
    for algorithm in ("exact", "cg"):
        status = ds["status"].sel(algorithm=algorithm)
        assert bool((status.sel({"dataset.n_train": [500, 1000]}) == "ok").all())
        assert bool((status.sel({"dataset.n_train": 2000}) == "failed").all())
        assert "exceeds algorithm.max_n=1000" in str(
            ds["error"].sel(algorithm=algorithm, **{"dataset.n_train": 2000}).values.ravel()[0])
    for key in ("final_seconds", "final_fit_peak_bytes", "final_predict_mean_seconds",
                "final_predict_var_seconds"):
        assert bool((ds[key].where(ok) > 0).where(ok, True).all()), key
    # low-rank memory grows with m, never like n²: far below one n×n matrix at n = 2000
    peak = ds["final_fit_peak_bytes"].sel(algorithm="nystrom", **{"dataset.n_train": 2000})
    assert float(peak.max()) < 2000**2 * 8 / 4
    report = render(path)
    text = report.read_text()
    assert "slope vs dataset.n_train" in text and "Failed jobs:" in text
    assert "exceeds algorithm.max_n=1000" in text
    assert next(report.parent.glob("fig*_scaling.png")).stat().st_size > 20000


def test_toolbox_accuracy_reduced(tmp_path, run_cli):
    path = run_experiment(run_cli, tmp_path, "experiment=toolbox_accuracy", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    width = ds.sgp.attrs["config"]["toolbox_width"]
    assert width == {"abalone": 16.0, "kin40k": 4.0, "pumadyn32nm": 32.0}
    objective = ds["final_objective"]  # a larger basis never fits the training data worse
    for algorithm in ("nystrom", "incomplete_cholesky", "sgma"):
        larger = objective.sel(algorithm=algorithm, **{"algorithm.max_basis": 32})
        smaller = objective.sel(algorithm=algorithm, **{"algorithm.max_basis": 8})
        assert bool((larger < smaller).all()), algorithm
    nlpd = ds["final_test_nlpd"]
    # Zhang's rescaled mean has no variance (algorithms/zhang.py): NLPD not applicable
    assert np.isfinite(nlpd.drop_sel(algorithm="zhang_kappa_greedy")).all()
    assert np.isnan(nlpd.sel(algorithm="zhang_kappa_greedy")).all()
    report = render(path)
    text = report.read_text()
    assert "test negative log predictive density [nats]" in text
    for i in (1, 2, 3):
        assert next(report.parent.glob(f"fig{i}_*.png")).stat().st_size > 10000


def test_uci_frontier_reduced(tmp_path, run_cli):
    """The third edition's design at small size: both modes; under the own protocol every
    method that learns learns from the run's data-independent start (hyper.init=standard) and
    never from the exact GP's kernel, within one budget; the peers' starts evaluated, not
    learned; our low-rank methods by Titsias' bound at their own m; SGPR in both predictive
    forms, at the fixed kernel with the greedy-variance rule (so its DTC form is incomplete
    Cholesky's predictor); the published table with each row's hyperparameters, ranks with
    the exact GP and PCG as one entry."""
    path = run_experiment(run_cli, tmp_path, "experiment=uci_frontier", "size=small", workers=2)
    ds = load(path).load()
    assert set(ds["algorithm"].values) == {"exact", "cg", "nystrom", "incomplete_cholesky", "sgma",
                                           "zhang_kappa_greedy", "sparse_online",
                                           "sklearn_nystroem", "gpytorch_sgpr", "gpytorch_svgp",
                                           "sklearn_gpr"}
    assert (ds["status"] != "failed").all()
    shared, own = (ds.sel(protocol=p) for p in ("shared", "own"))
    form = "algorithm.diagonal_correction"  # SGPR's two forms: swept for it alone
    plain_shared, plain_own = (mode.sel({form: "True"}) for mode in (shared, own))
    # learnings: the exact GP's per data set (the fixed kernel), the peers' start evaluated
    # per data set, and Titsias' bound per data set and basis size
    assert len(list((tmp_path / "outputs" / "stores" / "hyper").glob("*.json"))) == 2 + 2 + 2 * 2
    ran = ds["status"] == "ok"
    assert (ds["final_blas_threads"] == 1).where(ran, True).all()  # one BLAS thread a job
    for name in ("final_hyper_seconds", "final_seconds"):
        assert np.isfinite(ds[name]).where(ran, True).all(), name
    # the methods that learn nothing themselves: their own-protocol jobs are the shared ones
    same = ["exact", "cg", "sparse_online", "sklearn_nystroem"]
    assert (plain_shared["job_hash"].sel(algorithm=same)
            == plain_own["job_hash"].sel(algorithm=same)).all()
    # the peers train from the standard start: evaluated (max_iter 0), σ² = lam, one start
    for peers in (own.sel(algorithm="gpytorch_sgpr"),
                  plain_own.sel(algorithm=["gpytorch_svgp", "sklearn_gpr"])):
        done = peers["status"] == "ok"
        assert int(done.sum()) >= 4
        assert (peers["final_hyper_stop_reason"] == "start").where(done, True).all()
        assert (abs(peers["final_hyper_lam"] - 0.1) < 1e-12).where(done, True).all()
        assert (peers["final_own_starts"] == 1).where(done, True).all()
    # our low-rank methods learn by Titsias' bound at their own basis size, from no other
    # learning (no start, and no seconds, from the exact GP's kernel)
    lowrank = ["nystrom", "incomplete_cholesky", "sgma", "zhang_kappa_greedy"]
    mine = plain_own.sel(algorithm=lowrank, **{"algorithm.max_basis": [16, 64]})
    assert (mine["final_hyper_method"] == "lowrank").all()
    basis = mine["final_hyper_n_basis"]
    assert (basis == basis["algorithm.max_basis"]).all()
    assert "final_hyper_start_seconds" not in ds or bool(
        mine["final_hyper_start_seconds"].isnull().all())
    # the caps of `own`: 10 L-BFGS iterations of SGPR, 10 epochs of SVGP; untrained when shared
    assert (own["final_steps_run"].sel(algorithm="gpytorch_sgpr") <= 10).where(
        own["status"].sel(algorithm="gpytorch_sgpr") == "ok", True).all()
    assert (shared["final_steps_run"].sel(algorithm="gpytorch_sgpr") == 0).where(
        shared["status"].sel(algorithm="gpytorch_sgpr") == "ok", True).all()
    # at the fixed kernel, SGPR's DTC form on greedy-variance inducing inputs is incomplete
    # Cholesky's predictor (the same pivots, the same posterior mean and variance)
    rmse = shared["final_test_rmse"]
    dtc = rmse.sel(algorithm="gpytorch_sgpr", **{form: "False"})
    ichol = rmse.sel(algorithm="incomplete_cholesky", **{form: "True"})
    both = dtc.notnull() & ichol.notnull()
    assert int(both.sum()) == 4
    assert float(abs(dtc / ichol - 1).where(both, 0).max()) <= 1e-8
    # preconditioned CG, stopped by its residual within its 100 iterations, is the exact GP
    cg = rmse.sel(algorithm="cg", **{form: "True"})
    exact = rmse.sel(algorithm="exact", **{form: "True"})
    assert float(abs(cg / exact - 1).max(skipna=True)) <= 1e-3
    gpr = rmse.sel(algorithm="sklearn_gpr", **{form: "True"})
    assert float(abs(gpr / exact - 1).max(skipna=True)) <= 1e-6  # scikit-learn's exact GP
    report = render(path)
    text = report.read_text()
    assert "| abalone |" in text and "| pol |" in text and "≤ 600 s" in text
    assert "**own protocol: each method learns its kernel itself" in text
    # the published folder (pipeline.publish): the table, the figures (≤ 300 KB), the README
    from pipeline.publish.folder import publish
    from pipeline.publish.job_table import COLUMNS
    from pipeline.publish.render import MAX_FIGURE_BYTES

    out = tmp_path / "docs" / "results"
    notes = tmp_path / "notes.md"
    notes.write_text("## How this run was sized\n\nBy hand.\n")
    text = publish(path, out, "exact,cg", notes=notes).read_text()
    assert text.index("## Figures") < text.index("## How this run was sized") < text.index(
        "## The grid")
    grid = text[text.index("## The grid"):text.index("## The table")]
    assert "- algorithm: gpytorch_sgpr\n  algorithm.diagonal_correction: true,false" in grid
    table = pd.read_csv(out / "uci_frontier_small.csv")
    assert table.columns.tolist() == list(COLUMNS)
    # per set and mode: 5 methods at 2 basis sizes, the online GP, exact, cg, scikit-learn's
    # GPR, SGPR in 2 forms at 2 sizes; SVGP at 2 sizes in the own mode only
    assert len(table) == 2 * (2 * (5 * 2 + 4 + 2 * 2) + 2)
    assert set(table["algorithm"]) == {
        *(set(ds["algorithm"].values.tolist()) - {"gpytorch_sgpr"}),
        "gpytorch_sgpr[diagonal_correction=true]", "gpytorch_sgpr[diagonal_correction=false]"}
    assert set(table["status"]) == {"ok"} and set(table["split"]) == {0}
    for column in ("test_rmse", "fit_seconds", "learning_seconds", "threads", "cpu_model",
                   "kernel", "lengthscales", "signal_variance", "noise_variance",
                   "learning_stop_reason"):
        assert table[column].notna().all(), column
    assert set(table["basis_size"].dropna()) == {16, 64, 128} and set(table["threads"]) == {1}
    mine = table[table["mode"] == "own"].set_index(["dataset", "algorithm", "basis_size"])
    assert (mine.loc[("pol", "nystrom", 16), "hyper_from"] == "own")
    published = [f"fig{i}_frontier_final_test_{metric}_{mode}_{cost}.png"
                 for i, (mode, cost, metric) in enumerate(
                     ((m, c, k) for m in ("own", "shared") for c in ("fit", "cost")
                      for k in ("rmse", "nlpd")), 1)]
    for name in published:  # drawn from the table: fit-only and learning + fit seconds
        assert 20000 < (out / name).stat().st_size <= MAX_FIGURE_BYTES, name
        assert f"![{name}]({name})" in text
    assert text.index("**own**") < text.index("**shared**")
    assert "| exact [or cg] |" in text  # the exact GP's two solvers: one ranked entry
    # the reference: the same jobs in both modes, one row for the two
    assert "| own, shared | abalone | cg |" in text and "--reference exact,cg --out" in text
    # the same run kept as legs (one record per data set and split) publishes the same table
    from pipeline.publish.legs import save_legs

    legs = tmp_path / "legs"
    assert save_legs(path, legs) == ([("abalone", 0), ("pol", 0)], [], [], [])
    assert save_legs(path, legs) == ([], [("abalone", 0), ("pol", 0)], [], [])  # kept
    text = publish(legs, tmp_path / "from_legs", "exact,cg", notes=notes).read_text()
    again = pd.read_csv(tmp_path / "from_legs" / "uci_frontier_small.csv")
    pd.testing.assert_frame_equal(again, table)
    assert f"python -m pipeline.publish {legs} --reference exact,cg" in text


def test_pcg_exact_reduced(tmp_path, run_cli):
    """PCG with its defaults against the exact GP at the learned kernels: the same test RMSE
    to 0.1 %, well within 100 iterations, the preconditioner's rank and trace reported."""
    path = run_experiment(run_cli, tmp_path, "experiment=pcg_exact", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    rmse = ds["final_test_rmse"]
    assert float(abs(rmse.sel(algorithm="cg") / rmse.sel(algorithm="exact") - 1).max()) <= 1e-3
    cg = ds.sel(algorithm="cg")
    assert float(cg["final_iterations"].max()) < 100
    assert (cg["final_precond_trace"] <= 2.0).all() and (cg["final_precond_rank"] > 0).all()
    text = render(path).read_text()
    assert "rank of the pivoted-Cholesky preconditioner" in text and "| pol |" in text


def test_reference_kernel_reduced(tmp_path, run_cli):
    """The exact GP with its kernel learned on a subset or on every training row: each job
    learned on the rows it says, the fit on every row, and the report tabulates both."""
    path = run_experiment(run_cli, tmp_path, "experiment=reference_kernel", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    rows = ds["final_hyper_n_subset"]
    assert set(np.unique(rows.sel({"hyper.subset": 150}).values)) == {150}
    assert set(np.unique(rows.sel({"hyper.subset": 600}).values)) == {600}
    # every row's learning is one run: the 150-row optimum refined (hyper.init=shared)
    assert set(np.unique(ds["final_hyper_runs"].sel({"hyper.subset": 600}).values)) == {1}
    assert bool(np.isfinite(ds["final_test_nlpd"]).all())
    text = render(path).read_text()
    assert "training rows the marginal likelihood was learned on" in text and "| pol |" in text


def test_own_pilot_reduced(tmp_path, run_cli):
    """The split-0 pilot of the own protocols at small size (two sets, 300 rows, m = 16, the
    peers capped short): every job finishes, each method's own learning records whether it
    converged, and publish counts the caps it hit in its table's `converged` column."""
    from pipeline.publish.folder import publish

    path = run_experiment(run_cli, tmp_path, "experiment=own_pilot", "size=small")
    ds = load(path).load()
    assert set(ds["status"].values.ravel()) == {"ok"}
    peers = ds.sel(algorithm=["gpytorch_sgpr", "gpytorch_svgp"])
    assert set(np.unique(peers["final_own_converged"].values)) <= {0.0, 1.0}  # yes/no as 1/0
    table = pd.read_csv(publish(path, tmp_path / "published", "nystrom").with_name(
        "own_pilot_small.csv"))
    # protocol=own, the grid's one value: the store's config and so the table's mode say so
    assert len(table) == 6 and (table["mode"] == "own").all()
    assert table["converged"].notna().all()  # ours: its lowrank learning
    capped = table[table["algorithm"].isin(["gpytorch_sgpr", "gpytorch_svgp"])]
    assert (~capped["converged"].astype(bool)).sum() >= 1  # the short caps are hit


def test_smola2001_classification_reduced(tmp_path, run_cli):
    """Full and low-rank Laplace, RVM classification and scikit-learn's GPC on breast_cancer
    (2 seeds = 2 splits, m = 8, 64): one Dataset, the error against basis size figures and
    the best method per basis-size budget."""
    path = run_experiment(run_cli, tmp_path, "experiment=smola2001_classification", "size=small")
    ds = load(path).load()
    assert set(np.unique(ds["status"].values)) == {"ok"}
    err = ds["final_test_error_rate"].squeeze("dataset", drop=True)
    m, subset = "algorithm.m", "algorithm.subset"
    full = err.sel(algorithm="gp_laplace").sel({m: "null"}).isel({subset: 0})
    peer = err.sel(algorithm="sklearn_gpc").isel({m: 0, subset: 0})
    assert np.allclose(full.values, peer.values)  # the same Laplace approximation
    assert float(full.mean()) < 0.06
    small = err.sel(algorithm="gp_laplace").sel({m: "8"})
    assert float(small.mean()) > float(full.mean())  # 8 basis functions lose accuracy
    rvm = ds["final_n_basis"].sel(algorithm="rvm_classifier").values
    assert np.all(rvm < 400)
    assert float(err.sel(algorithm="rvm_classifier").isel({m: 0, subset: 0}).mean()) < 0.1
    report = render(path)
    text = report.read_text()
    assert "Best test error rate within a budget (basis size, means" in text
    assert "relative duality gap" not in text  # no classifier has one: no empty column
    assert "≤ 64 basis functions" in text
    for i, metric in enumerate(("final_test_error_rate", "final_test_log_loss"), start=1):
        assert (report.parent / f"fig{i}_frontier_{metric}.png").stat().st_size > 20000


def test_smola2001_sparsity_reduced(tmp_path, run_cli):
    """RVM, Laplacian process, SGMA and the exact GP on abalone (300 training rows, 2
    splits): the sparse methods end with fewer basis functions than n at comparable RMSE."""
    path = run_experiment(run_cli, tmp_path, "experiment=smola2001_sparsity", "size=small")
    ds = load(path).load()
    assert set(np.unique(ds["status"].values)) == {"ok"}
    basis = ds["final_n_basis"].mean("dataset.split").squeeze()
    rmse = ds["final_test_rmse"].mean("dataset.split").squeeze()
    assert float(basis.sel(algorithm="exact")) == 300
    for sparse in ("sgma", "rvm", "laplacian_process"):
        assert float(basis.sel(algorithm=sparse)) < 300, sparse
        assert float(rmse.sel(algorithm=sparse)) < 1.2 * float(rmse.sel(algorithm="exact"))
    report = render(path)
    assert ("Best test root mean squared error [standardised target units] within a budget "
            "(basis size, means") in report.read_text()


def test_only_the_single_run_benchmarks_declare_no_sweep():
    from pipeline.config.overrides import declares_sweep

    names = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
    assert [n for n in names if not declares_sweep([f"experiment={n}"])] == [
        "bench_cg_peer", "bench_contention", "bench_device", "bench_exact", "bench_learning",
        "bench_sgma_flops", "bench_small_n"]


@pytest.mark.parametrize("name,module", [("bench_cg_peer", "pipeline.bench.cg_peer"),
                                         ("bench_contention", "pipeline.bench.contention"),
                                         ("bench_device", "pipeline.bench.device"),
                                         ("bench_exact", "pipeline.bench.exact"),
                                         ("bench_learning", "pipeline.bench.learning"),
                                         ("bench_sgma_flops", "pipeline.bench"),
                                         ("bench_small_n", "pipeline.bench.small_n")])
def test_a_benchmark_run_as_a_job_names_its_command(tmp_path, monkeypatch, capsys, name, module):
    """A single-run benchmark is run by its own module; as ``experiment=`` of a job it would
    silently run the default job, so it is one line naming the command, and nothing runs."""
    from pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([f"experiment={name}", "size=small"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: experiment={name} is a benchmark, not a job or a sweep; run "
                   f"python -m {module} (size=small: its reduced variant)\n")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_has_a_small_variant(name):
    """conf/reduced/<name>_small.yaml composes over the experiment: its own sweep directory,
    the same mode (a sweep or one run), and no swept key the experiment does not sweep (the
    command line reads those from the experiment's file: pipeline.cli.force_group_keys)."""
    assert (CONF_DIR / "reduced" / f"{name}_small.yaml").is_file()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        full = compose("config", overrides=[f"experiment={name}"], return_hydra_config=True)
        small = compose("config", overrides=[f"experiment={name}", "size=small"],
                        return_hydra_config=True)
    assert small.sweep == f"{name}_small"
    assert small.hydra.mode == full.hydra.mode
    assert set(small.hydra.sweeper.params or {}) <= set(full.hydra.sweeper.params or {})


def run_small(run_cli, cwd: Path, name: str, figures: int):
    """Run ``experiment=<name> size=small``: every point ok, and its report draws ``figures``
    figures; returns the results and the report's text."""
    path = run_experiment(run_cli, cwd, f"experiment={name}", "size=small")
    ds = load(path).load()
    assert ds.attrs["sweep"] == f"{name}_small"
    assert set(np.unique(ds["status"].values)) == {"ok"}, name
    report = render(path)
    drawn = sorted(report.parent.glob("fig*.png"))
    assert len(drawn) == figures, (name, drawn)
    assert all(fig.stat().st_size > 5000 for fig in drawn), name
    return ds, report.read_text()


@pytest.mark.slow
def test_smola2000_basis_small(tmp_path, run_cli):
    """Smola & Bartlett (2000) at small size, Table 2's first row: SGMA runs to eps, and
    standardised rings need more basis functions (one test per experiment: pytest-xdist
    spreads them over its workers)."""
    ds, text = run_small(run_cli, tmp_path, "smola2000_basis", 3)
    assert float(ds["final_gap"].max()) < 0.025  # SGMA ran to eps
    basis = ds["final_n_basis"].squeeze()
    assert bool((basis.sel({"dataset.standardize_y": "True"})  # more for standardised rings
                 > basis.sel({"dataset.standardize_y": "False"})).all())
    assert "certified relative suboptimality (L − L_min)/∣L_min∣" in text


@pytest.mark.slow
def test_smola2000_convergence_small(tmp_path, run_cli):
    """Fig. 1 at small size: larger candidate subsets converge faster, and the certificate
    bounds the true suboptimality."""
    ds, text = run_small(run_cli, tmp_path, "smola2000_convergence", 3)
    gap = ds["final_gap"].squeeze().mean("seed")
    assert bool((gap.sel(kappa=59) < gap.sel(kappa=1)).all())  # larger subsets converge faster
    assert (ds["final_gap_certified"] >= ds["primal_subopt"].sel(step=50) - 1e-12).all()
    assert "(L − L_dual)/∣L∣ at step 50" in text and "∣L∣ at step 20" in text
    assert "Fig. 1" in text


@pytest.mark.slow
def test_smola2000_errorbars_small(tmp_path, run_cli):
    """Table 2's second row at small size: wider kernels need fewer basis functions."""
    ds, text = run_small(run_cli, tmp_path, "smola2000_errorbars", 0)
    means = ds["final_error_bar_basis_mean"].squeeze()
    assert np.all(np.diff(means.values) < 0)  # wider kernels need fewer basis functions
    assert 5 < means.sel({"kernel.width": 10.0}) < 40  # paper: 17 ± 16
    assert "error bar basis mean" in text and "79±61" in text  # the paper's column


@pytest.mark.slow
def test_smola2000_generalisation_small(tmp_path, run_cli):
    """§5's splits at small size: SGMA's test RMSE is the exact GP's, with paired t-tests."""
    ds, text = run_small(run_cli, tmp_path, "smola2000_generalisation", 0)
    rmse = ds["final_test_rmse"].squeeze()
    assert np.all(np.abs(rmse.sel(algorithm="sgma") - rmse.sel(algorithm="exact")) < 0.05)
    rmse = rmse.mean("dataset.split_seed")
    assert np.allclose(rmse.sel(algorithm="sgma"), rmse.sel(algorithm="exact"), rtol=0.01)
    assert "Paired t-tests" in text
    assert "| test root mean squared error [target units] | raw y | sgma | exact |" in text
    raw = ds.sel({"dataset.standardize_y": "False"})  # no other setting: "–"
    assert "| test root mean squared error [target units] | – | sgma | exact |" in paired_tests(
        raw, ds.sgp.attrs["config"]["report"]["paired"])


@pytest.mark.slow
def test_smola2000_synthetic_small(tmp_path, run_cli):
    """The synthetic data at small size: 200 bumps kept, SGMA within its gap."""
    ds, text = run_small(run_cli, tmp_path, "smola2000_synthetic", 1)
    assert int(ds["final_n_basis"].max()) == 200 and float(ds["final_gap"].max()) < 0.05


@pytest.mark.slow
def test_zhang2001_abalone_small(tmp_path, run_cli):
    ds, text = run_small(run_cli, tmp_path, "zhang2001_abalone", 3)
    delta = ds["delta_R"].squeeze()
    assert bool((delta <= ds["bound"].squeeze() + 1e-12).where(np.isfinite(delta), True).all())
    assert "R(w^k) − R(ŵ) [standardised target units²] at step 10" in text


@pytest.mark.slow
def test_kin40k_target_small(tmp_path, run_cli):
    ds, text = run_small(run_cli, tmp_path, "kin40k_target", 2)
    lam = ds["final_hyper_lam"].values
    assert np.allclose(lam, lam.ravel()[0])  # one learning, shared by every job
    assert "Best test root mean squared error [standardised target units] within a budget" in text

    # bench_sweep_overhead (size=small) is run by python -m pipeline.bench.sweep_overhead:
    # tests/test_sweep_planning.py::test_the_sweep_overhead_benchmark_writes_its_figures


def test_bench_small_n_small(tmp_path, monkeypatch):
    """python -m pipeline.bench.small_n size=small: every method's fit seconds over the exact
    GP's on the same data at n = 500 and 1000, with its basis size, and the figure."""
    from pipeline.bench.small_n import main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_small_n_small"
    figures = json.loads((out / "figures.json").read_text())
    methods = figures["config"]["methods"]
    assert [r["n"] for r in figures["rows"]] == [500, 1000]
    for row in figures["rows"]:
        assert set(row["seconds"]) == set(methods)
        assert set(row["ratio"]) == set(methods) - {"exact GP"}
        for label, ratio in row["ratio"].items():
            assert ratio == pytest.approx(row["seconds"][label] / row["seconds"]["exact GP"])
            assert row["seconds"][label] > 0
        assert row["n_basis"]["exact GP"] == row["n"]
        assert row["n_basis"]["SGMA, 100 basis functions"] == 100
        assert row["n_basis"]["Nyström, 256"] == 256
    assert (out / "small_n_ratio.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2


def test_bench_device_small(tmp_path, monkeypatch):
    """python -m pipeline.bench.device size=small: on cpu and torch:cpu (float64 and float32),
    K·v and every method's seconds and test RMSE at n = 500 and 1000, the fractions of the
    device's GEMM rate, float32's RMSE beside float64's, and the figure. Both devices fit the
    same numbers in float64: their RMSEs agree to 1e-9."""
    from pipeline.bench.device import main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_device_small"
    figures = json.loads((out / "figures.json").read_text())
    rows, methods = figures["rows"], figures["config"]["methods"]
    assert [(r["device"], r["precision"], r["n"]) for r in rows] == [
        (d, p, n) for d, p in (("cpu", "float64"), ("torch:cpu", "float64"),
                               ("torch:cpu", "float32")) for n in (500, 1000)]
    assert set(figures["gemm_gflops"]) == {"cpu float64", "torch:cpu float64",
                                           "torch:cpu float32"}
    for row in rows:
        expected = {"K·v", *methods} - ({"SGPR (GPyTorch)"} if row["precision"] == "float32"
                                        else set())
        assert set(row["seconds"]) == expected and all(s > 0 for s in row["seconds"].values())
        assert 0 < row["matvec_vs_gemm"] and 0 < row["exact_vs_gemm"]
    cpu, torch_cpu = rows[1], rows[3]  # n = 1000, float64
    for label, rmse in cpu["rmse"].items():
        assert torch_cpu["rmse"][label] == pytest.approx(rmse, rel=1e-9), label
    for diff in rows[5]["rmse_rel_diff_vs_float64"].values():  # float32: close, not equal
        assert diff < 1e-2
    assert figures["devices"]["torch:cpu"]["device_model"] == "cpu (torch)"
    assert figures["complete"]  # (False in the copy written after each row)
    assert (out / "device_seconds.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2


def test_a_method_that_breaks_down_in_the_device_benchmark_is_recorded_not_fatal(tmp_path,
                                                                                monkeypatch):
    """A fit that breaks down (SGMA in float32 on an H200: its duality gap turned negative)
    leaves its row's seconds without it and says why in ``failed``; the other methods of the
    row are still measured."""
    import pipeline.bench.device as bench
    from algorithms.errors import InputError
    from pipeline.bench.sweep_overhead import single_run_setup

    monkeypatch.chdir(tmp_path)
    cfg, _ = single_run_setup("bench_device", ["size=small"])
    real = bench.run

    def breaks(algorithm, *args, **kwargs):
        if algorithm == "sgma":
            raise InputError("algorithm sgma: the arithmetic broke down (test)")
        return real(algorithm, *args, **kwargs)

    monkeypatch.setattr(bench, "run", breaks)
    row = bench.measure("cpu", "float64", 300, {**cfg, "repeats": 1}, 1.0)
    assert row["failed"] == {"SGMA": "algorithm sgma: the arithmetic broke down (test)"}
    assert set(row["seconds"]) == {"K·v", *cfg["methods"]} - {"SGMA"}


def test_bench_sgma_flops_small(tmp_path):
    """The benchmark at small size (python -m pipeline.bench size=small) writes its figures
    into outputs/bench_sgma_flops_small/."""
    proc = subprocess.run([sys.executable, "-m", "pipeline.bench", "size=small"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = tmp_path / proc.stdout.strip().splitlines()[-1].removeprefix("figures: ")
    assert path.parent.parent == tmp_path / "outputs" / "bench_sgma_flops_small"
    figures = json.loads(path.read_text())
    assert figures["n"] == 5000 and figures["steps_run"] == figures["t_max"] == 100
    assert figures["flops_per_s"] > 0 and (path.parent / "sgma_flops.png").stat().st_size > 1000
    assert figures["algorithm"] == "sgma"
    for key in ("gemm_flops_per_s", "flops_per_s", "step_seconds_at_t_max",
                "ratio_to_gemm", "ratio_to_gemm_at_t_max"):
        assert np.isfinite(figures[key]) and figures[key] > 0, key
    # the steps' parts, not the evaluator's clocks since the start (cpu_seconds was one, with
    # its bookkeeping below −300 × the step)
    parts = figures["step_breakdown_fraction"]
    assert set(parts) == {"project", "block_sm", "solve", "scores", "dual", "bookkeeping"}
    assert sum(parts.values()) == pytest.approx(1.0)
    assert all(value > -0.01 for value in parts.values()), parts


def test_the_device_benchmark_goes_to_the_gpus_memory_on_a_gpu_only(tmp_path, monkeypatch):
    """``gpu_sizes`` follow ``sizes`` on a cuda device only, and there a method's ``max_n``
    (the CPU's limit for the exact GP) does not apply."""
    from pipeline.bench.device import devices, sizes_for
    from pipeline.bench.sweep_overhead import single_run_setup

    cfg = {"sizes": [2000, 4000], "gpu_sizes": [65536]}
    assert sizes_for("cuda", cfg) == sizes_for("cuda:1", cfg) == [2000, 4000, 65536]
    assert sizes_for("cpu", cfg) == sizes_for("torch:cpu", cfg) == [2000, 4000]
    monkeypatch.chdir(tmp_path)  # it makes outputs/<sweep>/
    full, _ = single_run_setup("bench_device", [])
    assert full["gpu_sizes"] and min(full["gpu_sizes"]) > max(full["sizes"])
    assert devices({"devices": ["cpu"]}) == ["cpu"]


def test_a_single_run_benchmark_takes_overrides_of_its_own_keys(tmp_path, monkeypatch, capsys):
    """``key=value`` of the config's own top-level keys (the GPU's run: ``devices=[cuda]
    sizes=[16000]``) replace them; another key, a malformed value or a device that is not here
    is one line and exit code 2, before anything is measured."""
    from pipeline.bench.device import main
    from pipeline.bench.sweep_overhead import single_run_setup

    monkeypatch.chdir(tmp_path)
    cfg, _ = single_run_setup("bench_device", ["size=small", "devices=[torch:cpu]",
                                               "sizes=[300]", "repeats=1"])
    assert (cfg["devices"], cfg["sizes"], cfg["repeats"]) == (["torch:cpu"], [300], 1)
    for argv, message in ((["foo=1"], "error: unknown argument 'foo=1'; pass size=full or "
                                      "size=small (a single-run benchmark also takes "
                                      "key=value for its config's keys)\n"),
                          (["sizes=[300"], "; pass key=value with a value of the key's type\n"),
                          (["devices=[gpu]"], "error: device='gpu' is not a device; pass cpu, "
                                              "torch:cpu, cuda or cuda:N (N the GPU's index)\n")):
        assert main(["size=small", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.endswith(message) and err.count("\n") == 1
    assert not (tmp_path / "outputs" / "bench_device_small" / "figures.json").exists()
