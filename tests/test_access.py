"""Self-describing results: long names and units on every variable, the last valid value along
step, the tidy export (no padding rows, repeated jobs once) and the README's query."""

import subprocess
import sys

import cf_units
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from pipeline.export import main as export_main
from pipeline.results.access import evaluated, last_valid
from pipeline.results.consolidate import load
from pipeline.results.job_file import load_job_result

SWEEP = ["algorithm=exact,sgma", "dataset=friedman1", "dataset.n_train=200", "dataset.n_test=50",
         "kappa=5,10", "seed=0,1", "algorithm.max_basis=30", "cluster.n_workers=2",
         "cluster.dashboard_address=null"]


def sweep(cwd, *args):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "-m", *SWEEP, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1].removeprefix("results: ")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("access"), "sweep=access")


def described(ds: xr.Dataset) -> None:
    """CF attrs: a long name everywhere; units a valid UDUNITS string (cf-units parses it) or
    absent — always on text, and with a comment naming the data's units where a quantity is
    in them; "1" only on numbers."""
    for name, var in ds.variables.items():
        assert var.attrs.get("long_name") and "not described" not in var.attrs["long_name"], name
        units = var.attrs.get("units")
        if var.dtype.kind in "OUSb":
            assert units is None, (name, units)
        elif units is None:
            assert "units" in var.attrs.get("comment", ""), name
        else:
            cf_units.Unit(units)  # raises for a string UDUNITS cannot parse


def test_every_variable_and_coordinate_has_a_long_name_and_units(results, tmp_path):
    ds = load(results)
    described(ds)
    assert ds["final_test_rmse"].attrs == {"long_name": "final test root mean squared error",
                                           "comment": "in target units (the dataset's own, "
                                                      "not recorded)"}
    assert "units" not in ds["status"].attrs and "units" not in ds["algorithm"].attrs
    assert ds["final_fit_seconds" if "final_fit_seconds" in ds else "job_seconds"
              ].attrs["units"] == "s"
    assert ds["job_seconds"].attrs["units"] == "s" and "step" not in ds["job_seconds"].dims
    assert "evaluated steps" in ds["step"].attrs["long_name"]
    assert ds["final_cpu_model"].dims == ds["status"].dims  # text summaries are kept too
    # timing a reader can trust: CPU beside wall seconds (per step too), the load, the cores,
    # the untimed warm-up, and the training-mean predictor beside the fit's metrics
    for name in ("final_cpu_seconds", "cpu_seconds", "final_load_start", "final_load_end",
                 "final_warmup_seconds"):
        assert ds[name].attrs["units"] == ("s" if "seconds" in name else "1"), name
    ran = ds["status"] == "ok"
    for name in ("final_cpu_seconds", "final_warmup_seconds", "final_load_start",
                 "final_load_end", "final_cores", "final_baseline_test_rmse",
                 "final_baseline_test_nlpd"):
        assert bool((ds[name] >= 0).where(ran, True).all()), name
    assert bool((ds["final_cores"] >= 1).where(ran, True).all())
    assert ds["final_baseline_test_nlpd"].attrs["units"] == "1"  # nats
    # one warm-up per worker process and algorithm: at most the 2 workers' first jobs (a job
    # that ignores κ and the seed stands at several points: counted once, by its hash)
    for algorithm in ("exact", "sgma"):
        one = ds.sel(algorithm=algorithm)
        warmed = set(one["job_hash"].values[(one["final_warmup_seconds"] > 0).values])
        assert 1 <= len(warmed) <= 2, (algorithm, warmed)
    job = next((tmp_path.parent / "access0" / "outputs" / "access" / "jobs").glob("*/result.nc"))
    described(load_job_result(job))
    learned = load(sweep(tmp_path, "sweep=learned", "hyper=ml", "algorithm=sgma", "kappa=5",
                         "seed=0"))
    described(learned)
    assert learned["hyper_lml"].dims[-1] == "hyper_eval"
    assert learned["final_hyper_lengthscale"].attrs["long_name"] == "learned length scale"
    assert learned["final_hyper_cpu_seconds"].attrs["units"] == "s"
    assert bool((learned["final_hyper_cpu_seconds"] >= 0).all())


def test_last_valid_value_along_step():
    values = np.array([[1.0, np.nan, 3.0, np.nan], [np.nan] * 4, [5.0, 6.0, 7.0, 8.0]])
    da = xr.DataArray(values, dims=("seed", "step"), attrs={"units": "s"})
    last = last_valid(da)
    assert last.dims == ("seed",) and last.attrs == {"units": "s"}
    np.testing.assert_array_equal(last.values, [3.0, np.nan, 8.0])
    assert evaluated(da).sizes["step"] == 4
    sparse = xr.DataArray([[1.0, np.nan, 3.0], [2.0, np.nan, np.nan]], dims=("seed", "step"))
    np.testing.assert_array_equal(evaluated(sparse).values, [[1.0, 3.0], [2.0, np.nan]])


def test_the_readme_query_final_value_mean_over_seeds_vs_exact(results):
    ds = load(results)
    rmse = ds.sgp.last("test_rmse").sel(lam=0.1)
    sgma = rmse.sel(algorithm="sgma").mean("seed")
    exact = rmse.sel(algorithm="exact").isel(kappa=0, seed=0)
    gap = (sgma - exact).squeeze()
    assert gap.dims == ("kappa",)
    for kappa in (5, 10):
        runs = ds["final_test_rmse"].sel(algorithm="sgma", kappa=kappa).values.ravel()
        reference = float(ds["final_test_rmse"].sel(algorithm="exact").values.ravel()[0])
        assert np.isclose(float(gap.sel(kappa=kappa)), runs.mean() - reference, rtol=1e-12)
    # the trap the accessor avoids: the padded trace's last step is one run's value or NaN
    naive = ds["test_rmse"].isel(step=-1).sel(algorithm="sgma")
    assert int(np.isfinite(naive).sum()) < naive.size


def test_tidy_tables_have_no_padding_rows_and_each_job_once(results, tmp_path):
    ds = load(results).load()
    jobs = ds.sgp.tidy(per="job")
    assert len(jobs) == 5 == len(np.unique(ds["job_hash"].values))  # exact once, sgma 2 κ × 2 seeds
    exact = jobs[jobs["algorithm"] == "exact"].iloc[0]
    assert pd.isna(exact["kappa"]) and pd.isna(exact["seed"])  # it depends on neither
    assert list(jobs.columns[:7]) == ["algorithm", "dataset", "lam", "kappa", "seed", "status",
                                      "job_hash"]
    steps = ds.sgp.tidy()
    traces = [n for n, v in ds.data_vars.items() if "step" in v.dims]
    assert steps[traces].notna().any(axis=1).all()  # no padding rows
    for _, job in jobs.iterrows():
        n_steps = int(np.isfinite(ds["n_basis"].values[ds["job_hash"].values
                                                       == job["job_hash"]][0]).sum())
        assert (steps["job_hash"] == job["job_hash"]).sum() == n_steps
    evaluated_rmse = steps.dropna(subset=["test_rmse"]).groupby("job_hash")["test_rmse"].last()
    assert np.allclose(evaluated_rmse.sort_index().values,
                       jobs.set_index("job_hash")["final_test_rmse"].sort_index().values)
    assert export_main([results, str(tmp_path / "t.csv"), "--per", "job"]) == 0
    assert len(pd.read_csv(tmp_path / "t.csv")) == 5
    assert export_main([results, str(tmp_path / "t.parquet")]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t.parquet"), steps,
                                  check_dtype=False)


def test_export_refuses_an_unknown_format_in_one_line(results, tmp_path, capsys):
    assert export_main([results, str(tmp_path / "t.xlsx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ".csv, .parquet" in err and err.count("\n") == 1
    assert not (tmp_path / "t.xlsx").exists()


def test_every_described_unit_is_written_as_udunits_or_left_out():
    """Each (long name, unit label) of the tables becomes a CF attribute set whose units
    UDUNITS parses, or none (with the data's units in a comment); text never has units."""
    from algorithms.variables import DESCRIPTIONS
    from pipeline.results.variables import PIPELINE, SWEPT, cf_attrs

    for table in (DESCRIPTIONS, PIPELINE, SWEPT):
        for name, (long_name, units) in table.items():
            attrs = cf_attrs(long_name, units, np.dtype(float))
            if "units" in attrs:
                cf_units.Unit(attrs["units"])
            else:
                assert units in attrs["comment"], name
            assert "units" not in cf_attrs(long_name, units, np.dtype(object)), name
    assert cf_attrs("log marginal likelihood", "nats", np.dtype(float)) == {
        "long_name": "log marginal likelihood (nats)", "units": "1"}
