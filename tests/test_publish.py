"""The published folder of an accuracy-against-time run (pipeline.publish): its table's schema,
the jobs a mode does not change listed under each mode, and the README rendered from the CSV."""

import io

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from pipeline.publish import COLUMNS, budget_tables, job_table, main, readme


def _sweep() -> xr.Dataset:
    """Algorithm a (two basis sizes, two splits, two modes that change it) and b (ignores the
    basis size and the mode: the same two jobs everywhere)."""
    dims = ("algorithm", "dataset", "algorithm.max_basis", "dataset.split", "protocol")
    rmse = np.array([[[[0.5, 0.7], [0.3, 0.5]]], [[[0.45, 0.45], [0.45, 0.45]]]])
    secs = np.array([[[[1.0, 3.0], [10.0, 30.0]]], [[[5.0, 5.0], [5.0, 5.0]]]])
    hashes = np.array([[[["a1", "a2"], ["a3", "a4"]]], [[["b1", "b2"], ["b1", "b2"]]]])
    own = {"a1": "c1", "a2": "c2", "a3": "c3", "a4": "c4"}

    def both(values, own_values):
        return np.stack([values, own_values], axis=-1)

    shape = rmse.shape + (2,)
    return xr.Dataset(
        {"final_test_rmse": (dims, both(rmse, rmse + np.array([0.1, 0])[:, None, None, None])),
         "final_test_nlpd": (dims, both(rmse + 1, rmse + 1)),
         "final_seconds": (dims, both(secs, secs)),
         "final_hyper_seconds": (dims, np.full(shape, 1.0)),
         "final_blas_threads": (dims, np.full(shape, 2.0)),
         "final_cpu_model": (dims, np.full(shape, "AMD EPYC")),
         "status": (dims, np.full(shape, "ok")),
         "job_hash": (dims, both(hashes, np.vectorize(lambda h: own.get(h, h))(hashes)))},
        coords={"algorithm": ["a", "b"], "dataset": ["d"], "algorithm.max_basis": [8, 64],
                "dataset.split": [0, 1], "protocol": ["shared", "own"]},
        attrs={"config": {"dataset": {"split": 0}}})


def test_the_table_has_its_schema_and_lists_mode_free_jobs_under_each_mode():
    table = job_table(_sweep())
    assert table.columns.tolist() == list(COLUMNS)
    # a: 2 sizes × 2 splits × 2 modes; b: 2 splits, listed under both modes
    assert len(table) == 8 + 4
    b = table[table["algorithm"] == "b"]
    assert sorted(b["mode"]) == ["own", "own", "shared", "shared"]
    assert b["basis_size"].isna().all()
    assert set(table["cpu_model"]) == {"AMD EPYC"}


def test_readme_renders_from_the_csv_with_mean_and_sd_over_splits():
    buffer = io.StringIO()
    job_table(_sweep()).to_csv(buffer, index=False)
    table = pd.read_csv(io.StringIO(buffer.getvalue()))
    text = readme(table, reference="b", sweep="s", code_version="git 0",
                  commands=["python -m pipeline -m experiment=s"], figures=["f.png"],
                  mode_order=["shared", "own"])
    shared, own = text.index("**shared**"), text.index("**own**")
    assert shared < own
    # within 10 s: b (mean 6 s) beats a at m = 8 (mean 3 s, RMSE 0.6); within 60 s a at m = 64
    # (mean (11 + 31)/2 = 21 s, RMSE 0.4 ± 0.14 over the two splits)
    assert "| d | b: 0.45 ± 0 in 6 s | a (m = 64): 0.4 ± 0.14 in 21 s |" in text[shared:own]
    assert "| d | b: 0.45 ± 0 in 6 s | b: 0.45 ± 0 in 6 s |" in text[own:]
    # b ran the same jobs in both modes: one row for them, in the modes' order
    assert "| shared, own | d | b | 0.45 ± 0 | 1.45 ± 0 | 6 | 2 | – |" in text
    assert "Machine: AMD EPYC; BLAS threads per job: 2" in text
    assert "![f.png](f.png)" in text
    # several references, in the order given, per mode and dataset
    text = readme(table, reference="b,a", sweep="s", code_version="git 0", commands=[],
                  figures=[])
    assert "## The reference (`b`, `a`)" in text
    shared = text[text.index("| shared | d | b |"):]
    assert shared.index("| shared | d | a (m = 8) |") > 0
    # a's relative gap to b over the splits both ran, per basis size: RMSE 0.5 and 0.7 (m = 8),
    # 0.3 and 0.5 (m = 64) against 0.45
    assert "| shared | d | a (m = 8) | 0.6 ± 0.14 | 1.6 ± 0.14 | 3 | 2 | 0.56 (2) |" in text
    assert "| shared | d | a (m = 64) | 0.4 ± 0.14 | 1.4 ± 0.14 | 21 | 2 | 0.33 (2) |" in text


def test_keys_the_run_fixed_come_from_its_config_and_another_swept_key_is_refused():
    from algorithms.errors import InputError

    # one mode and one basis size, fixed by the run: every row has the config's values
    one = _sweep().isel(protocol=0, drop=True).isel({"algorithm.max_basis": 1}, drop=True)
    one.attrs["config"] = {"dataset": {"split": 0}, "protocol": "shared",
                           "algorithm": {"max_basis": 64}}
    table = job_table(one)
    assert set(table["mode"]) == {"shared"} and set(table["basis_size"]) == {64}
    assert sorted(table["split"]) == [0, 0, 1, 1]
    # a swept key the table has no column for would be averaged away unseen
    two = _sweep().expand_dims(lam=[0.1, 1.0])
    with pytest.raises(InputError, match="the run sweeps lam besides"):
        job_table(two)


def test_a_budget_whose_settings_have_no_finite_rmse_is_a_dash():
    table = job_table(_sweep())
    table["test_rmse"] = np.nan  # e.g. every fit within the budget diverged
    text = readme(table, reference="a", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60))
    assert text.count("| d | — (least 3 s) | — (least 3 s) |") == 2  # both modes


@pytest.mark.parametrize("argv, fragment", [
    (["missing.zarr", "--reference", "exact"], "missing.zarr does not exist"),
    (["missing.zarr"], "the following arguments are required: --reference"),
])
def test_bad_arguments_are_one_line_errors(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1
    assert not (tmp_path / "docs").exists()


def test_a_setting_that_finished_fewer_splits_is_not_ranked_and_is_named():
    table = job_table(_sweep())
    failed = ((table["mode"] == "shared") & (table["algorithm"] == "a")
              & (table["basis_size"] == 64) & (table["split"] == 1))
    table.loc[failed, "status"] = "failed"
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    shared = text[:text.index("**own**")]
    # its one split (RMSE 0.3) would beat b's mean over two: it is left out, and said so
    assert "| d | b: 0.45 ± 0 in 6 s | b: 0.45 ± 0 in 6 s |" in shared
    assert "Not ranked, having finished fewer splits: a (m = 64) on d (1 of 2)." in shared


def test_settings_within_a_tenth_of_a_percent_tie_and_the_faster_is_named():
    table = job_table(_sweep())
    slow = (table["algorithm"] == "a") & (table["basis_size"] == 64)
    table.loc[slow, "test_rmse"] = 0.45 * (1 - 5e-4)  # below b's 0.45, but within 0.1 %
    text = budget_tables(table, budgets=(60,), order=["shared", "own"])
    assert text.count("| d | b: 0.45 ± 0 in 6 s |") == 2
    table.loc[slow, "test_rmse"] = 0.45 * (1 - 2e-3)  # beyond the tie: the better wins
    assert "| d | a (m = 64): 0.4491 ± 0 in 21 s |" in budget_tables(table, budgets=(60,))


def test_a_reference_without_finished_jobs_is_one_line():
    from algorithms.errors import InputError
    from pipeline.publish import reference_table

    table = job_table(_sweep())
    with pytest.raises(InputError, match=r"--reference b,z: no finished job of z in the "
                                         r"results; pass .* comma-separated"):
        reference_table(table, "b,z")
    with pytest.raises(InputError, match=r"no finished job of an algorithm"):
        reference_table(table, " , ")


def test_notes_and_the_grid_are_put_in_the_readme_as_given():
    table = job_table(_sweep())
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], grid="params:\n  a: 1,2", notes="## Sizing\n\n8 hours.\n")
    # after the results (budgets, reference, figures), before the grid
    sizing = text.index("## Sizing\n\n8 hours.")
    assert text.index("## Figures") < sizing < text.index("## The grid")
    assert "## The grid" in text and "```yaml\nparams:\n  a: 1,2\n```" in text
    plain = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                   figures=[])
    assert "## The grid" not in plain and "## Sizing" not in plain
