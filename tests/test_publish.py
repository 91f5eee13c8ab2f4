"""The published folder of an accuracy-against-time run (pipeline.publish): its table's schema,
the jobs a mode does not change listed under each mode, and the README rendered from the CSV."""

import io

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from pipeline.publish import COLUMNS, budget_tables, job_table, main, readme
from pipeline.report.comparison import SETTING_COLUMNS


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


def _write_run_record(path) -> None:
    """The run's record (``<sweep>.run.yaml``) a published CSV is re-rendered with."""
    import yaml

    path.write_text(yaml.safe_dump(
        {"command": "python -m pipeline -m experiment=s", "code_version": "git 0",
         "mode_order": ["shared", "own"], "budgets": [60], "figures": [], "grid": None}))


def test_the_table_has_its_schema_and_lists_mode_free_jobs_under_each_mode():
    table = job_table(_sweep())
    assert table.columns.tolist() == list(COLUMNS)
    # a: 2 sizes × 2 splits × 2 modes; b: 2 splits, listed under both modes
    assert len(table) == 8 + 4
    b = table[table["algorithm"] == "b"]
    assert sorted(b["mode"]) == ["own", "own", "shared", "shared"]
    assert b["basis_size"].isna().all()
    assert set(table["cpu_model"]) == {"AMD EPYC"}


def test_learning_seconds_hold_the_shared_learning_a_method_started_from():
    """learning_seconds = hyper_seconds + hyper_start_seconds + own_learning_seconds (a missing
    term is 0): ours pay for the shared learning they start from, as the peers do."""
    ds = _sweep()
    start = np.zeros(ds["final_seconds"].shape)
    start[0, ..., 1] = 4.0  # a, own: started from a shared learning of 4 s
    ds["final_hyper_start_seconds"] = (ds["final_seconds"].dims, start)
    table = job_table(ds)
    a_own = table[(table["algorithm"] == "a") & (table["mode"] == "own")]
    assert (a_own["learning_seconds"] == 5.0).all()
    assert (table[table["mode"] == "shared"]["learning_seconds"] == 1.0).all()


def test_readme_renders_from_the_csv_with_confidence_intervals_over_splits():
    buffer = io.StringIO()
    job_table(_sweep()).to_csv(buffer, index=False)
    table = pd.read_csv(io.StringIO(buffer.getvalue()))
    text = readme(table, reference="b", sweep="s", code_version="git 0",
                  commands=["python -m pipeline -m experiment=s"], figures=["f.png"],
                  mode_order=["shared", "own"])
    shared, own = text.index("**shared**"), text.index("**own**")
    assert shared < own
    # learning + fit within 10 s: b (6 s, RMSE 0.45) beats a at m = 8 (3 s, RMSE 0.5 and 0.7)
    # but not significantly: differences 0.05 and 0.25, t = 1.5 on 1 df, p = 0.37: tied.
    # Within 60 s a at m = 64 ((11 + 31)/2 = 21 s, RMSE 0.3 and 0.5): mean 0.4 ± t(0.975, 1)
    # · 0.1414/√2 = 12.71 · 0.1 = 1.3; b is tied with it, a at m = 8 is worse on both splits by
    # exactly 0.2 (no spread: significant)
    cells = ("| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | a (m = 64): 0.4 ± 1.3 (2) in 21 s, "
             "tied with 1 | a (m = 64): 0.4 ± 1.3 (2) in 21 s, tied with 1 |")
    assert cells in text[shared:own]
    assert "d ≤ 10 s (with b): a (m = 8); d ≤ 60, 600 s (with a (m = 64)): b." in text[shared:own]
    # fit only: a at m = 64 takes (10 + 30)/2 = 20 s
    assert "a (m = 64): 0.4 ± 1.3 (2) in 20 s" in text[shared:own]
    assert "| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | b: 0.45 ± 0 (2) in 6 s, tied with 2 |" \
        in text[own:]
    # b ran the same jobs in both modes: one row for them, in the modes' order
    assert "| shared, own | d | b | 0.45 ± 0 (2) | 1.45 ± 0 (2) | 6 | 2 | – |" in text
    assert "Machine: AMD EPYC; BLAS threads per job: 2" in text
    assert "![f.png](f.png)" in text
    # several references, in the order given, per mode and dataset
    text = readme(table, reference="b,a", sweep="s", code_version="git 0", commands=[],
                  figures=[])
    assert "## The reference (`b`, `a`)" in text
    shared = text[text.index("| shared | d | b |"):]
    assert shared.index("| shared | d | a (m = 8) |") > 0
    # a's difference from b over the splits both ran, per basis size: RMSE 0.5 and 0.7 (m = 8)
    # against 0.45: +0.15 ± 12.71 · 0.1414/√2
    assert "| shared | d | a (m = 8) | 0.6 ± 1.3 (2) | 1.6 ± 1.3 (2) | 3 | 2 | +0.15 ± 1.3 (2) |" \
        in text
    # every setting against the reference, per split: Δ RMSE and Δ NLPD with their intervals
    assert ("| d | a (m = 64) | 0.4 ± 1.3 (2) | -0.05 ± 1.3 (2) | 1.4 ± 1.3 (2) | "
            "-0.05 ± 1.3 (2) | 20 | 1 |  |  |") in text


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
    # no setting has an RMSE on every split, so none is ranked: both modes, both costs
    assert text.count("| d | — (none ranked) | — (none ranked) |") == 4


@pytest.mark.parametrize("argv, fragment", [
    (["missing.zarr", "--reference", "exact"], "missing.zarr does not exist"),
    (["missing.zarr"], "--reference is missing: name the run's reference algorithm(s)"),
    (["missing.zarr", "--legs", "legs"], "missing.zarr does not exist"),
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
    assert "| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | b: 0.45 ± 0 (2) in 6 s, tied with 1 |" \
        in shared
    assert "data set's others (a mean over fewer splits is not comparable): shared: a (m = 64) " \
        "on d (1 of 2)." in text


def test_ties_are_called_by_a_paired_test_over_splits():
    table = job_table(_sweep())
    slow = (table["algorithm"] == "a") & (table["basis_size"] == 64)
    # below b's 0.45 on one split, above on the other: the better mean, b tied with it
    table.loc[slow & (table["split"] == 0), "test_rmse"] = 0.43
    table.loc[slow & (table["split"] == 1), "test_rmse"] = 0.46
    text = budget_tables(table, budgets=(60,), order=["shared", "own"])
    # a at m = 8 (0.5 and 0.7) differs by 0.07 and 0.24: with 2 splits, tied too
    assert text.count("| d | a (m = 64): 0.445 ± 0.19 (2) in 21 s, tied with 2 |") == 2
    assert "d ≤ 60 s (with a (m = 64)): a (m = 8), b." in text
    # 0.01 below b on both splits: no spread in the difference, so significant: b is not tied
    table.loc[slow, "test_rmse"] = 0.44
    text = budget_tables(table, budgets=(60,))
    assert text.count("| d | a (m = 64): 0.44 ± 0 (2) in 21 s, tied with 1 |") == 2
    assert "d ≤ 60 s (with a (m = 64)): a (m = 8)." in text


def test_a_trivial_setting_is_flagged_and_never_ranked():
    from pipeline.publish import complete

    table = job_table(_sweep())
    table["baseline_rmse"], table["baseline_nlpd"] = 0.6, 1.55
    table = complete(table)
    # RMSE ≥ 0.99 · 0.6 = 0.594 or NLPD > 1.55: a at m = 8 on split 1 (0.7, 1.7) when shared
    shared = table[table["mode"] == "shared"]
    assert shared[shared["trivial"]][["algorithm", "basis_size", "split"]].values.tolist() == [
        ["a", 8, 1]]
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60), mode_order=["shared", "own"])
    budget = text[text.index("**shared**"):text.index("**own**")]
    # a at m = 8 (3 s) would be the only setting within 5 s: it is not ranked
    assert "| d | — (least 6 s) | a (m = 64): 0.4 ± 1.3 (2) in 21 s, tied with 1 |" in budget
    assert "a (m = 8):" not in budget
    assert "Left out as trivial: shared: a (m = 8) on d (1 of 2 splits; RMSE 0.6)" in text
    # flagged in the table's CSV
    assert table["trivial"].notna().all()
    # and not drawn in the frontier figures: only a (m = 64) and b are points
    from pipeline.report.comparison import rows_of_mode, settings
    from pipeline.report.table_frontier import table_points

    rows = rows_of_mode(settings(table), "shared")
    drawn = table_points(rows, "d", "rmse", "fit")
    assert sorted((p[0], p[1]) for p in drawn) == [("a", 64), ("b", None)]
    assert [p[2:] for p in drawn if p[0] == "a"] == [(20.0, 0.4, 2)]


def test_an_nlpd_above_the_mean_predictors_leaves_a_setting_out_of_the_nlpd_comparisons():
    """A setting whose mean beats the training mean but whose NLPD is above the mean
    predictor's Gaussian's on a split (an overconfident variance) is ranked by its RMSE and
    left out of every NLPD rank and figure, named."""
    from pipeline.publish import complete
    from pipeline.report.comparison import rows_of_mode, settings
    from pipeline.report.table_frontier import table_points

    table = job_table(_sweep())
    table["baseline_rmse"], table["baseline_nlpd"] = 1.0, 1.65
    table = complete(table)
    # NLPD > 1.65: a at m = 8 on split 1 (1.7), in both modes; no RMSE near 1.0: none trivial
    assert not table["trivial"].any()
    above = table[table["nlpd_above_mean"]]
    assert above[["algorithm", "basis_size", "split"]].drop_duplicates().values.tolist() == [
        ["a", 8, 1]]
    rows = rows_of_mode(settings(table), "shared")
    a8 = rows[(rows["algorithm"] == "a") & (rows["basis"] == 8)].iloc[0]
    assert a8["ranked"] and not a8["ranked_nlpd"]
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60), mode_order=["shared", "own"])
    budget = text[text.index("**shared**"):text.index("**own**")]
    assert "| d | a (m = 8): 0.6 ± 1.3 (2) in 3 s" in budget  # ranked by its RMSE
    assert ("Left out of the NLPD comparisons: shared: a (m = 8) on d (1 of 2 splits; "
            "NLPD 1.6); own: a (m = 8) on d (1 of 2 splits; NLPD 1.6)") in text
    assert sorted(p[:2] for p in table_points(rows, "d", "rmse", "fit")) == [
        ("a", 8), ("a", 64), ("b", None)]
    assert sorted(p[:2] for p in table_points(rows, "d", "nlpd", "fit")) == [
        ("a", 64), ("b", None)]


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


def test_seeds_are_averaged_per_split_and_their_spread_is_shown():
    # a draws at random (its jobs differ by seed); b does not (one job whatever the seed)
    two = _sweep().expand_dims(seed=[0, 1]).copy(deep=True)
    hashes = two["job_hash"].values.astype(object)
    hashes[1] = np.vectorize(lambda h: h if h.startswith("b") else h + "s1",
                             otypes=[object])(hashes[1])
    two["job_hash"] = (two["job_hash"].dims, hashes.astype(str))
    two["final_test_rmse"].loc[{"seed": 1, "algorithm": "a"}] += 0.02
    table = job_table(two)
    b = table[table["algorithm"] == "b"]
    assert len(b) == 4 and b["seed"].isna().all()  # counted once, under each mode
    a = table[(table["algorithm"] == "a") & (table["mode"] == "shared")]
    assert sorted(a["seed"].dropna()) == [0] * 4 + [1] * 4
    text = budget_tables(table, budgets=(60,), order=["shared", "own"])
    # a at m = 64: seeds 0.3/0.32 and 0.5/0.52, mean 0.41; sd over seeds 0.02/√2 = 0.014
    assert "a (m = 64): 0.41 ± 1.3 (2), seed sd 0.014 in 21 s" in text


def test_the_readme_re_renders_from_a_published_csv_and_its_run_record(tmp_path, capsys):
    import yaml

    job_table(_sweep()).drop(columns=["trivial", "seed"]).to_csv(tmp_path / "s.csv",
                                                                index=False)
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out", str(tmp_path)]) == 2
    assert "s.run.yaml does not exist" in capsys.readouterr().err
    _write_run_record(tmp_path / "s.run.yaml")
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "| d | a (m = 64): 0.4 ± 1.3 (2) in 21 s, tied with 1 |" in text
    # two methods: no Friedman test, and said so; the CSV is rewritten in today's columns
    assert "the Friedman test needs at least 3 methods" in text
    assert pd.read_csv(tmp_path / "s.csv").columns.tolist() == list(COLUMNS)
    # the settings: each mean with its 95 % t interval's bounds; a at m = 64, shared: RMSE 0.3
    # and 0.5, 0.4 ± 12.71 · 0.1414/√2; b, which ignores the basis size, has none
    settings = pd.read_csv(tmp_path / "s_settings.csv")
    assert settings.columns.tolist() == list(SETTING_COLUMNS)
    assert "## The settings: `s_settings.csv`" in text and "| `rmse_ci_low` |" in text
    a64 = settings[(settings["mode"] == "shared") & (settings["algorithm"] == "a")
                   & (settings["basis_size"] == 64)].iloc[0]
    half = 12.706204736174698 * np.std([0.3, 0.5], ddof=1) / np.sqrt(2)
    assert a64["rmse_mean"] == pytest.approx(0.4)
    assert (a64["rmse_ci_low"], a64["rmse_ci_high"]) == pytest.approx((0.4 - half, 0.4 + half))
    # the fixture's recorded seconds carried over (fit 10 and 30 s, learning 1 s each), not a
    # time measured by the test
    assert a64["splits"] == 2 and a64["learning_fit_seconds"] == pytest.approx(21)
    assert settings[settings["algorithm"] == "b"]["basis_size"].isna().all()
    assert settings["ranked"].all()
    assert not list(tmp_path.glob("cd_*.png"))
    # the frontier figures are drawn from the table: per mode, metric, and fit-only or
    # learning + fit seconds, each in the README with its caption and listed in the record
    names = [f"fig{k}_frontier_final_test_{metric}_{mode}_{cost}.png"
             for k, (mode, cost, metric) in enumerate(
                 ((mode, cost, metric) for mode in ("shared", "own") for cost in ("fit", "cost")
                  for metric in ("rmse", "nlpd")), start=1)]
    assert yaml.safe_load((tmp_path / "s.run.yaml").read_text())["figures"] == names
    for name in names:
        assert (tmp_path / name).stat().st_size > 10_000
        assert f"![{name}]({name})\n\nPoints: one setting's mean" in text


def test_the_readme_counts_the_own_learnings_that_stopped_at_their_cap():
    table = job_table(_sweep())
    own_a = (table["mode"] == "own") & (table["algorithm"] == "a")
    table["converged"] = pd.array([pd.NA] * len(table), dtype="boolean")
    table.loc[own_a, "converged"] = [True, False, False, True]  # m = 8: split 1; m = 64: split 0
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    assert ("stopped at its safety cap). 2 of 4 such rows did not converge: own: a (m = 8) on "
            "d (1); own: a (m = 64) on d (1).") in text
    table["converged"] = pd.array([pd.NA] * len(table), dtype="boolean")
    assert "This table's run did not record it." in readme(
        table, reference="b", sweep="s", code_version="git 0", commands=[], figures=[])


def test_a_merged_sweeps_published_command_lists_every_command():
    """A sweep made by several commands (merge=true) publishes them all, in order."""
    import json

    from pipeline.publish import _run_command

    made = json.dumps([{"command": ["lam=0.1", "sweep=s"]},
                       {"command": ["lam=0.5", "sweep=s", "merge=true"]}])
    assert _run_command(None, "s", made) == ("python -m pipeline -m lam=0.1 sweep=s; then "
                                             "python -m pipeline -m lam=0.5 sweep=s merge=true")
    assert _run_command(None, "s") == "python -m pipeline -m experiment=s"


BESIDE_HEADER = "source,dataset,method,metric,mean,sd,trials,algorithm,mode,basis_size,where\n"


def _beside(tmp_path, rows: str):
    path = tmp_path / "beside.csv"
    path.write_text(BESIDE_HEADER + rows)
    return path


def test_numbers_published_elsewhere_are_set_beside_the_runs_own(tmp_path):
    from pipeline.report.elsewhere import beside_tables, read_beside

    table = job_table(_sweep())
    path = _beside(tmp_path, "\n".join([
        "Them 2019,d,their a,rmse,0.35,0.01,3,a,shared,64,repo@0:t.tex#L1",
        "Them 2019,d,their a,nlpd,1.2,,3,a,shared,64,repo@0:t.tex#L1",
        "Them 2019,d,their c,rmse,0.5,0.1,3,c,own,,repo@0:t.tex#L2"]) + "\n")
    text = beside_tables(table, read_beside(path))
    # a at m = 64, shared: RMSE 0.3 and 0.5 (mean 0.4), NLPD 1.3 and 1.5 (mean 1.4)
    assert ("| d | their a | a (m = 64), shared | 0.35 ± 0.01 (3) | 0.4 ± 1.3 (2) | +0.05 | "
            "1.2 (3) | 1.4 ± 1.3 (2) | +0.2 |") in text
    assert "| d | their c | c, own | 0.5 ± 0.1 (3) | not run | – | – | not run | – |" in text
    assert text.startswith("**Them 2019** (their ± as printed")
    assert "Read from: `repo@0:t.tex#L1`; `repo@0:t.tex#L2`." in text
    readme_text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                         figures=[], beside=text, notes="## Notes\n")
    at = readme_text.index("## Beside published numbers")
    assert readme_text.index("## Figures") < at < readme_text.index("## Notes")


@pytest.mark.parametrize(("rows", "fragment"), [
    (None, "its columns are a, b; a beside file has source"),
    ("Them,d,x,accuracy,0.3,0.01,3,a,shared,64,w\n", "row 2: metric='accuracy'; pass one of"),
    ("Them,d,x,rmse,nan,0.01,3,a,shared,64,w\n", "row 2: mean='nan' is not a finite number"),
    ("Them,d,x,rmse,0.3,-1,3,a,shared,64,w\n", "sd='-1' is not a finite number ≥ 0"),
    ("Them,d,x,rmse,0.3,0.1,0,a,shared,64,w\n", "trials='0' is not a positive integer"),
    ("Them,d,x,rmse,0.3,0.1,3,a,shared,6.4,w\n", "basis_size='6.4' is not a positive integer"),
    ('Them,d,"two\nlines",rmse,0.3,0.1,3,a,shared,64,w\n', "method='two\\nlines' is not one"),
    ("Them,d,a|b,rmse,0.3,0.1,3,a,shared,64,w\n", "method='a|b' is not one short line"),
    ("", "holds no number"),
])
def test_a_bad_beside_file_is_one_line(tmp_path, rows, fragment):
    from algorithms.errors import InputError
    from pipeline.report.elsewhere import read_beside

    path = tmp_path / "beside.csv"
    path.write_text("a,b\n1,2\n" if rows is None else BESIDE_HEADER + rows)
    with pytest.raises(InputError) as err:
        read_beside(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"--beside {path}")


def test_beside_text_is_escaped_in_the_readme(tmp_path):
    from pipeline.report.elsewhere import beside_tables, read_beside

    path = _beside(tmp_path, "<img src=x onerror=alert(1)>,d,![a](http://x/y.png),rmse,0.3,"
                             "0.1,3,a,shared,64,repo@0:t.tex#L1\n")
    text = beside_tables(job_table(_sweep()), read_beside(path))
    # as text, not rendered: a backslash before the tag's "<" and the image's "]"
    assert "<img" not in text.replace("\\<img", "") and "![a](http" not in text


def test_publish_takes_beside_files_and_refuses_a_bad_one_before_writing(tmp_path, capsys):
    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    good = _beside(tmp_path, "Them 2019,d,their a,rmse,0.35,0.01,3,a,shared,64,r@0:t#L1\n")
    bad = tmp_path / "bad.csv"
    bad.write_text(BESIDE_HEADER + "Them,d,x,rmse,soon,0.1,3,a,shared,64,w\n")
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main([*argv, "--beside", str(good), "--beside", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --beside {bad}, row 2: mean='soon' is not a finite number; fix the row\n"
    assert not out.exists()  # refused before anything was written
    assert main([*argv, "--beside", str(good)]) == 0
    text = (out / "README.md").read_text()
    assert "## Beside published numbers" in text and "| d | their a | a (m = 64), shared |" in text
    assert f"--out {out} --beside {good}" in text  # the command that renders it again


def test_a_publication_that_fails_leaves_its_folder_as_it_was(tmp_path, capsys, monkeypatch):
    """Every file is written into a folder of its own first: a figure above the size limit
    (checked after the CSVs are written) fails the publication with its one line and leaves
    the earlier publication in ``--out`` untouched, with nothing of the failed one beside it."""
    import pipeline.publish as publish

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main(argv) == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert "README.md" in before and "s.csv" in before
    table = pd.read_csv(tmp_path / "s.csv")
    table["test_rmse"] *= 1.5  # a second run of the table, whose publication fails
    table.to_csv(tmp_path / "s.csv", index=False)
    monkeypatch.setattr(publish, "MAX_FIGURE_BYTES", 1000)
    assert main(argv) == 2
    assert "above 1000; lower the frontier figures' dpi" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_data_set_where_fewer_than_three_methods_are_ranked_is_left_out_of_the_ranks():
    """NLPD ranks over the data sets on which at least 3 methods have a ranked NLPD setting:
    a set where every method but 2 is above the mean predictor's NLPD would otherwise leave
    a complete table of 2 methods and no test. The set is named, its RMSE ranks kept."""
    from pipeline.report.comparison import ranks
    from pipeline.report.published import _cd_caption

    rows = []
    for d, dataset in enumerate(["d1", "d2", "d3"]):
        for i, algorithm in enumerate("pqrs"):
            for split in (0, 1):
                rows.append({"mode": "shared", "dataset": dataset, "algorithm": algorithm,
                             "basis_size": np.nan, "split": split, "seed": 0, "status": "ok",
                             "test_rmse": 0.1 * (i + 1) + 0.01 * split + d,
                             "test_nlpd": 0.1 * (i + 1) - 0.01 * split,
                             "fit_seconds": 1.0, "learning_seconds": 0.0, "trivial": False,
                             "nlpd_above_mean": dataset == "d3" and algorithm in "rs",
                             "contended": False})
    table = pd.DataFrame(rows)
    nlpd = ranks(table, "shared", "nlpd")
    assert nlpd["datasets"] == ["d1", "d2"] and nlpd["names"] == list("pqrs")
    assert nlpd["dropped"] == ["d3 (2 methods with a ranked setting there)"]
    assert nlpd["ranks"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert "Data sets left out (fewer than 3 methods have a ranked setting with test NLPD " \
        "there): d3 (2 methods with a ranked setting there)." in _cd_caption(nlpd, "nlpd")[0]
    rmse = ranks(table, "shared", "rmse")
    assert rmse["datasets"] == ["d1", "d2", "d3"] and rmse["dropped"] == []
    # two methods with an NLPD on a set of their own: no set enters, no test, said so
    table.loc[table["dataset"] != "d3", "nlpd_above_mean"] = True
    none = ranks(table, "shared", "nlpd")
    assert none["datasets"] == [] and not len(none["ranks"]) and len(none["dropped"]) == 3
    assert _cd_caption(none, "nlpd")[0].startswith("No ranks of test NLPD: 0 method(s) over 0 ")


def test_a_publication_removes_the_files_of_the_one_before_it_does_not_write_again(tmp_path):
    """The run record lists every file a publication wrote; the next publication into the
    folder removes those it does not write again (an edition with fewer figures leaves none
    of the old ones behind) and nothing else (a file the user put there stays)."""
    import yaml

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main(argv) == 0
    first = sorted(path.name for path in out.iterdir())
    assert yaml.safe_load((out / "s.run.yaml").read_text())["files"] == first
    own = [name for name in first if "_own_" in name]
    assert own  # the own mode's figures
    (out / "mine.txt").write_text("the user's")
    table = pd.read_csv(tmp_path / "s.csv")
    table[table["mode"] == "shared"].to_csv(tmp_path / "s.csv", index=False)  # one mode
    import shutil

    shutil.copy(out / "s.run.yaml", tmp_path / "s.run.yaml")
    assert main(argv) == 0
    second = sorted(path.name for path in out.iterdir())
    assert second == sorted([name for name in first if name not in own] + ["mine.txt"])
    assert yaml.safe_load((out / "s.run.yaml").read_text())["files"] == [
        name for name in second if name != "mine.txt"]


def test_converged_is_recorded_only_under_the_own_protocol():
    """A peer that does not train at the shared kernel (GPyTorch's SGPR reports that run as
    not converged) is no learning stopped at its cap: ``converged`` is empty outside the own
    protocol, and the README counts only the own protocol's caps."""
    from pipeline.job.protocol import PROTOCOLS
    from pipeline.publish import complete
    from pipeline.report.job_table import OWN

    assert OWN in PROTOCOLS
    table = job_table(_sweep())
    table["converged"] = pd.array([False] * len(table), dtype="boolean")
    table = complete(table)
    assert table.loc[table["mode"] == "shared", "converged"].isna().all()
    assert table.loc[table["mode"] == "own", "converged"].eq(False).all()
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    assert "6 of 6 such rows did not converge: own: a (m = 8) on d (2); own: a (m = 64) on d " \
        "(2); own: b on d (2)." in text


def test_a_killed_publications_staging_folder_is_removed_by_the_next_once_stale(tmp_path):
    """A publication killed mid-write (SIGKILL) leaves its ``.publishing-*`` folder; the next
    publication into the folder removes it once it is an hour old, and keeps a younger one
    (another publication may be writing it)."""
    import os
    import time

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    (out / ".publishing-killed").mkdir(parents=True)
    (out / ".publishing-killed" / "s.csv").write_text("half")
    old = time.time() - 2 * 3600
    os.utime(out / ".publishing-killed", (old, old))
    (out / ".publishing-young").mkdir()
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]) == 0
    assert not (out / ".publishing-killed").exists()
    assert (out / ".publishing-young").is_dir()
