"""A long run kept in legs (pipeline.publish.legs): each (data set, split) unit's rows as a
sealed record, verified and checked for one protocol and one code version when the legs are
published together. The end-to-end path (a real sweep saved as legs and published, equal to
publishing its store) is in tests/test_experiments.py::test_uci_frontier_reduced."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from algorithms.errors import InputError
from pipeline.publish import legs
from pipeline.publish.cli import main
from pipeline.publish.job_table import COLUMNS, job_table, read_table
from tests.test_publish import _sweep

RUN = {"command": "python -m pipeline -m experiment=x", "code_version": "git abc",
       "mode_order": ["shared", "own"], "mode_labels": {}, "standardize_y": True,
       "budgets": [10, 60], "grid": "params:\n  algorithm: a,b"}


def _rows() -> pd.DataFrame:
    table = job_table(_sweep(), extra=("job_hash",))
    table["code_version"] = "v1"
    table["pipeline_code_version"] = "p1"
    return table


def _save(folder, rows=None, run=None, commit="abc") -> list:
    rows = _rows() if rows is None else rows
    return [legs.write_unit(folder, "x", (d, int(s)), group, run or RUN,
                            {"commit": commit, "job_seconds": 1.0, "last_run": None})
            for (d, s), group in rows.groupby(["dataset", "split"])]


def test_legs_publish_the_union_of_their_units(tmp_path):
    written = _save(tmp_path)
    assert [p.name for p in written] == ["d-0.leg.json", "d-1.leg.json"]
    sweep, table, run = legs.read_legs(tmp_path)
    assert sweep == "x" and table.columns.tolist() == list(COLUMNS)
    job_table(_sweep()).to_csv(tmp_path / "all.csv", index=False)
    expected = read_table(tmp_path / "all.csv")  # the table as published, read back
    pd.testing.assert_frame_equal(
        table.sort_values(["mode", "algorithm", "basis_size", "split"]).reset_index(drop=True),
        expected.sort_values(["mode", "algorithm", "basis_size", "split"]).reset_index(drop=True),
        check_dtype=False)
    assert run["grid"] == RUN["grid"] and run["budgets"] == [10, 60]
    assert [(leg["dataset"], leg["split"], leg["jobs"]) for leg in run["legs"]] == [
        ("d", 0, 5), ("d", 1, 5)]  # split 0: a1, a3 (shared), c1, c3 (own), b1 (both)


def test_a_unit_already_kept_is_left_as_it_is(tmp_path):
    _save(tmp_path)
    before = (tmp_path / "d-0.csv").read_bytes()
    rows = _rows()
    rows["test_rmse"] = 9.0
    assert _save(tmp_path, rows) == [None, None]
    assert (tmp_path / "d-0.csv").read_bytes() == before


@pytest.mark.parametrize("damage,fragment", [
    (lambda f: (f / "d-0.csv").write_text((f / "d-0.csv").read_text().replace("0.5", "0.4")),
     "differs from what its record d-0.leg.json sealed"),
    (lambda f: (f / "d-1.csv").unlink(), "d-1.csv is missing"),
    (lambda f: (f / "d-0.leg.json").write_text(
        (f / "d-0.leg.json").read_text().replace('"jobs": 5', '"jobs": 6')),
     "the leg's record is damaged"),
])
def test_a_damaged_leg_is_refused_in_one_line(tmp_path, damage, fragment):
    _save(tmp_path)
    damage(tmp_path)
    with pytest.raises(InputError, match=fragment):
        legs.read_legs(tmp_path)


def test_rows_of_another_unit_are_refused(tmp_path):
    rows = _rows()
    legs.write_unit(tmp_path, "x", ("d", 0), rows, RUN, {"commit": "abc"})  # both splits
    with pytest.raises(InputError, match="rows of another data set or split"):
        legs.read_legs(tmp_path)


def test_legs_of_two_code_versions_are_refused(tmp_path):
    rows = _rows()
    rows.loc[(rows["split"] == 1) & (rows["algorithm"] == "a"), "code_version"] = "v2"
    _save(tmp_path, rows)
    with pytest.raises(InputError, match=r"a ran on two code versions in these legs: d split 0 "
                                         r"\(v1/p1\) and d split 1 \(v2/p1\)"):
        legs.read_legs(tmp_path)


def test_a_unit_with_points_of_two_code_versions_is_not_saved(tmp_path, monkeypatch, capsys):
    """A sweep directory can hold a unit's points of an earlier command (an earlier grid) that
    the current grid does not rerun after a code change: that unit mixes two code versions of
    one algorithm and is not saved (one error line naming it and the way out; exit 1), while
    the other units are."""
    from types import SimpleNamespace

    from pipeline.publish import cli

    table = _rows()
    table["job_seconds"] = 1.0
    stale = table.index[(table["split"] == 0) & (table["algorithm"] == "a")][0]
    table.loc[stale, "job_hash"] = "stale"
    versions = {h: ("v2" if h == "stale" else "v1", "p1") for h in table["job_hash"]}
    ds = SimpleNamespace(attrs={"git_sha": "abc", "invocations": "[]"})
    monkeypatch.setattr(legs, "load_store", lambda results: (ds, "x", None))
    monkeypatch.setattr(legs, "job_table", lambda ds, options, extra: table.drop(
        columns=["code_version", "pipeline_code_version"]))
    monkeypatch.setattr(legs, "run_record", lambda ds, results: dict(RUN))
    monkeypatch.setattr(legs, "load_job_attrs", lambda path: dict(zip(
        ("code_version", "pipeline_code_version"), versions[path.parent.name], strict=True)))
    monkeypatch.setattr(legs, "job_path", lambda root, name: tmp_path / name / "result.nc")
    saved, there, unfinished, mixed = legs.save_legs(tmp_path / "results.zarr",
                                                     tmp_path / "legs")
    assert saved == [("d", 1)] and there == unfinished == []
    assert [unit for unit, _ in mixed] == [("d", 0)]
    assert mixed[0][1] in ("a ran on two code versions here, v1/p1 and v2/p1",
                           "a ran on two code versions here, v2/p1 and v1/p1")
    assert not (tmp_path / "legs" / "d-0.leg.json").exists()
    assert cli._print_legs("legs", saved, there, unfinished, mixed) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: d split 0 not saved: a ran on two code "
                                               "versions here, ")
    assert err[0].endswith("run the unit again in a fresh sweep directory (sweep=<name>)")
    # a unit the folder holds already is left as it is, whatever the store holds now
    legs.write_unit(tmp_path / "legs", "x", ("d", 0), table[table["split"] == 0].assign(
        code_version="v1", pipeline_code_version="p1"), RUN, {})
    assert legs.save_legs(tmp_path / "results.zarr", tmp_path / "legs") == (
        [], [("d", 0), ("d", 1)], [], [])


def test_legs_of_two_protocols_are_refused_and_two_grids_are_both_recorded(tmp_path):
    rows = _rows()
    legs.write_unit(tmp_path, "x", ("d", 0), rows[rows["split"] == 0], RUN, {})
    legs.write_unit(tmp_path, "x", ("d", 1), rows[rows["split"] == 1],
                    {**RUN, "grid": "params:\n  algorithm: a", "code_version": "git def"}, {})
    _, _, run = legs.read_legs(tmp_path)
    assert run["grid"] == ("# units d-0:\nparams:\n  algorithm: a,b\n"
                           "# units d-1:\nparams:\n  algorithm: a")
    assert run["code_version"] == "git abc, git def"
    other = tmp_path / "other"
    legs.write_unit(other, "x", ("d", 0), rows[rows["split"] == 0], RUN, {})
    legs.write_unit(other, "x", ("d", 1), rows[rows["split"] == 1], {**RUN, "budgets": [5]}, {})
    with pytest.raises(InputError, match="d-1.leg.json and d-0.leg.json differ in budgets"):
        legs.read_legs(other)


def test_the_command_line_keeps_legs_and_asks_for_a_reference(tmp_path, capsys):
    assert main([str(tmp_path / "results.zarr")]) == 2
    assert "error: --reference is missing" in capsys.readouterr().err
    assert main([str(tmp_path), "--reference", "a"]) == 2  # a folder with no leg, no store
    assert capsys.readouterr().err.startswith("error: ")
    _save(tmp_path / "legs")
    record = json.loads((tmp_path / "legs" / "d-0.leg.json").read_text())
    assert record["csv"] == "d-0.csv" and len(record["csv_sha256"]) == 64
    assert main([str(tmp_path / "legs"), "--reference", "a", "--out",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "x.csv").exists()
