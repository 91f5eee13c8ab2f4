"""The command line: `python -m pipeline key=value ...` in a scratch directory, run in-process
through the same ``main`` (``tests/bad_input.py``; the subprocess wiring of ``python -m`` is
kept honest by the bad-input tables' e2e cases and tests/test_console.py)."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from pipeline.results.job_file import load_job_result


def result_path(proc) -> Path:
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("result: "), proc.stdout
    return Path(last.removeprefix("result: "))


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_sgma_and_exact_jobs_on_abalone(tmp_path, run_cli):
    sgma = run_cli(tmp_path, "algorithm=sgma", "dataset=abalone", "lam=0.1", "kappa=59", "seed=0")
    assert sgma.returncode == 0, sgma.stderr
    for label in ("basis size", "gap", "test RMSE", "seconds"):
        assert label in sgma.stdout
    exact = run_cli(tmp_path, "algorithm=exact", "dataset=abalone", "lam=0.1")
    assert exact.returncode == 0, exact.stderr

    sparse, full = load_job_result(result_path(sgma)), load_job_result(result_path(exact))
    assert result_path(sgma).is_relative_to(tmp_path / "outputs")
    assert sparse.attrs["config"]["kappa"] == 59 and sparse.attrs["config"]["lam"] == 0.1
    assert sparse.attrs["summary"]["gap"] < 0.025 <= float(sparse["gap"][-2])
    assert full.attrs["summary"]["n_basis"] == 4000
    # at gap < 0.025 the sparse fit predicts as well as the exact GP (Smola & Bartlett §5)
    rmse_sparse = sparse.attrs["summary"]["test_rmse"]
    rmse_exact = full.attrs["summary"]["test_rmse"]
    assert abs(rmse_sparse - rmse_exact) < 0.02 * rmse_exact
    assert set(xr.open_dataset(result_path(sgma)).variables) >= {
        "objective", "gap", "test_rmse", "n_basis", "seconds", "basis", "coef"}


@pytest.mark.parametrize("args,fragments", [
    (["algorithm=nope"], ["unknown algorithm 'nope'", "choose one of: cg, exact", "sgma"]),
    (["algorithm=exact,nope"], ["unknown algorithm 'nope'"]),
    (["dataset=iris"], ["unknown dataset 'iris'", "abalone"]),
    (["kernel=gauss"], ["unknown kernel 'gauss'", "rbf"]),
    (["lam=0"], ["lam=0", "must be a finite number > 0", "lam=0.1"]),
    (["lam=-1"], ["lam=-1"]),
    (["kappa=0"], ["kappa=0 must be ≥ 1"]),
    (["kernel.width=-2"], ["kernel.width=-2 is invalid", "must be a number > 0"]),
    (["dataset=csv"], ["path"]),
    (["algorithm=exact", "+algorithm.eps=0.1"], ["algorithm exact has no option 'eps'", "max_n"]),
    (["algorithm=sgma", "dataset=matern1d", "kernel=matern32", "+learning_curve.n=[5]"],
     ["algorithm='sgma' has no Lemma-4 learning curve", "finite_optimal"]),
    (["algorithm=exact", "dataset=abalone", "+learning_curve.n=[5]"],
     ["learning_curve.density=uniform is U(0,1) in 1-D", "d=10", "density=empirical"]),
    (["algorithm=exact", "dataset=matern1d", "+learning_curve.n=[5]", "+learning_curve.nn=1"],
     ["learning_curve has no key 'nn'", "draws"]),
    (["algorithm=exact", "dataset=matern1d", "+learning_curve.draws=5"],
     ["learning_curve.n is missing"]),
    (["algorithm=nystrom", "own={nope: {steps: 5}}"],
     ["own.nope: no such algorithm", "gpytorch_sgpr"]),
    (["algorithm=nystrom", "own={gpytorch_sgpr: {stepz: 5}}"],
     ["own.gpytorch_sgpr.stepz: gpytorch_sgpr has no option 'stepz'", "steps"]),
    (["-m", "algorithm=nystrom", "own=5"], ["own=5 must map an algorithm to options"]),
    (["-m", "algorithm=nystrom", "hydra.sweeper.grids=[1]"],
     ["hydra.sweeper.grids=[1] must be a list of mappings", "write e.g. grids: [{}"]),
    # a typo is refused with the closest names, whether typed plain, + or ++ (issue 53)
    (["width=5"], ["unknown key 'width' in 'width=5'; did you mean kernel.width?"]),
    (["+width=5"], ["unknown key 'width' in '+width=5'; did you mean kernel.width?"]),
    (["++lamm=0.1"], ["unknown key 'lamm' in '++lamm=0.1'; did you mean lam?",
                      "every key: python -m pipeline --help"]),
    (["kernal.width=3"], ["unknown key 'kernal'", "did you mean kernel.width?"]),
    (["+certificate.tolx=1"], ["unknown key 'certificate.tolx'", "did you mean certificate.tol?",
                               "certificate's keys: enabled, kappa, max_dual, tol"]),
    (["kernel.widht=2"], ["kernel 'rbf' has no option 'widht'; did you mean kernel.width?"]),
    (["algorithm=sgma", "algorithm.epss=0.1"], ["did you mean algorithm.eps?"]),
    # a benchmark's own keys are its module's, not the product's
    (["gemm_size=3"], ["unknown key 'gemm_size'"]),
])
def test_bad_configuration_is_a_one_line_error(tmp_path, args, fragments, run_cli):
    assert_one_line_error(run_cli(tmp_path, *args), *fragments)


@pytest.mark.parametrize("args", [["size=small"], ["-m", "size=small", "seed=0,1"],
                                  ["size=full,small"]])
def test_size_small_without_an_experiment_is_a_one_line_error(tmp_path, args, run_cli):
    """size=small reduces an experiment: alone it would silently run the default job."""
    assert_one_line_error(run_cli(tmp_path, *args),
                          "size=small reduces an experiment; pass experiment=<name> too",
                          "(experiments: bench_cg_peer, bench_cluster_blocks, bench_contention, "
                          "bench_device, bench_exact, bench_learning, bench_sgma_flops,",
                          "zhang2001")
    assert not (tmp_path / "outputs").exists()  # nothing ran


def test_size_is_checked_before_hydra_starts(tmp_path, run_cli):
    from pipeline.config.overrides import check_size

    assert_one_line_error(run_cli(tmp_path, "size=tiny"), "unknown size 'tiny'",
                          "choose one of: full, small")
    assert check_size(["size=full"]) is None and check_size(["lam=0.1"]) is None
    assert check_size(["experiment=zhang2001", "size=small"]) is None
    assert check_size(["experiment=zhang2001,nope", "size=small"]) == (
        "experiment nope has no size=small variant (no conf/reduced/nope_small.yaml); pass "
        "size=full or another experiment")


def test_nan_in_data_is_a_one_line_error(tmp_path, run_cli):
    data = np.random.default_rng(0).normal(size=(30, 4))
    data[17, 2] = np.nan
    np.savetxt(tmp_path / "bad.csv", data, delimiter=",")
    proc = run_cli(tmp_path, "dataset=csv", f"dataset.path={tmp_path / 'bad.csv'}")
    assert_one_line_error(proc, "NaN/inf", "row 17", "column 2")
    assert not (tmp_path / "outputs" / "stores").exists() or not any(
        p.name.startswith("csv-") and not p.name.endswith("tmp")
        for p in (tmp_path / "outputs" / "stores").iterdir())


def test_inf_and_ragged_csv_are_one_line_errors(tmp_path, run_cli):
    (tmp_path / "inf.csv").write_text("1,2,3\n4,inf,6\n7,8,9\n1,1,1\n")
    assert_one_line_error(run_cli(tmp_path, "dataset=csv", f"dataset.path={tmp_path}/inf.csv"),
                          "NaN/inf")
    (tmp_path / "ragged.csv").write_text("1,2,3\n4,5\n7,8,9\n")
    assert_one_line_error(
        run_cli(tmp_path, "dataset=csv", f"dataset.path={tmp_path}/ragged.csv"),
        "cannot read", "same number of columns")


def test_good_csv_runs(tmp_path, run_cli):
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(120, 2))
    np.savetxt(tmp_path / "ok.csv", np.column_stack([X, np.sin(6 * X[:, 0])]), delimiter=",")
    proc = run_cli(tmp_path, "algorithm=sgma", "dataset=csv", f"dataset.path={tmp_path}/ok.csv",
                   "kappa=10", "kernel.width=0.5", "lam=0.01")
    assert proc.returncode == 0, proc.stderr
    # noiseless target of std ≈ 0.7: a sensible fit is far better than predicting the mean
    assert load_job_result(result_path(proc)).attrs["summary"]["test_rmse"] < 0.2


def test_store_failing_its_checksum_is_rebuilt_with_a_note(tmp_path, run_cli):
    args = ["algorithm=sgma", "dataset=sine1d", "kappa=5", "kernel.width=0.1"]
    first = run_cli(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    (store,) = (tmp_path / "outputs" / "stores").glob("sine1d-*.zarr")
    arr = zarr.open_array(store / "X_train", mode="r+")
    arr[3, 0] = arr[3, 0] + 1.0
    again = run_cli(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert f"note: dataset store outputs/stores/{store.name} fails its checksum (X_train): " \
           "rebuilt from its source" in again.stderr
    results = [load_job_result(result_path(p)).attrs for p in (first, again)]
    assert results[0]["config_hash"] == results[1]["config_hash"]  # the same data: the same job
    assert results[0]["summary"]["test_rmse"] == results[1]["summary"]["test_rmse"]


def test_learning_curve_job_prints_the_curve(tmp_path, run_cli):
    proc = run_cli(tmp_path, "algorithm=finite_optimal", "algorithm.m=3", "dataset=matern1d",
                   "kernel=matern32", "kernel.mu=0.1", "lam=1", "+learning_curve.n=[2,10]",
                   "+learning_curve.draws=4", "certificate.enabled=false")
    assert proc.returncode == 0, proc.stderr
    assert "learning curve of finite_optimal m=3" in proc.stdout
    assert "plateau σ² + Σ_(i>m) λ_i = 1.23443" in proc.stdout
    assert "detaching point n̄ = σ²/λ_m = 6.335" in proc.stdout
    result = load_job_result(result_path(proc))
    assert result["n_train"].values.tolist() == [2, 10] and "coef" not in result
