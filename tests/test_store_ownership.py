"""What consolidation may remove, and a consolidation killed midway.

``results.zarr`` is replaced whole by every consolidation. It records the files it wrote
(:mod:`pipeline.results.ownership`), so that anything else inside it (a user's file, a table
exported into it) makes consolidation refuse, naming it, with nothing removed; and it is
swapped in with two renames whose state is recorded beside it
(:mod:`pipeline.results.store_swap`), so that a kill after any step leaves either a store a
reader can trust or one line saying that rerunning the sweep completes the consolidation,
which the next consolidation does. Kills are simulated in-process: the swap is run a step at
a time and abandoned after step k, as a SIGKILL would leave it (no cleanup runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from algorithms.errors import InputError
from pipeline.datasets.spec import StoreError
from pipeline.export import export
from pipeline.results.consolidate import consolidate, load, seal
from pipeline.results.ownership import WRITTEN, foreign_entry
from pipeline.results.store_swap import Swap, recover, swap_record
from pipeline.results.verify import read_back
from tests.bad_input import run_in_process, snapshot


@pytest.fixture
def sweep_dir(seed_dir, tmp_path) -> Path:
    """A copy of the session's finished seed sweep (conftest's ``seed_dir``)."""
    shutil.copytree(seed_dir, tmp_path / "work", symlinks=True)
    return tmp_path / "work" / "outputs" / "seed"


def _store(sweep_dir: Path) -> Path:
    return sweep_dir / "results.zarr"


def _leftovers(sweep_dir: Path) -> list[str]:
    return sorted(p.name for p in sweep_dir.iterdir()
                  if ".tmp-" in p.name or ".old-" in p.name or p.name.endswith(".swap"))


def _files(store: Path) -> list[str]:
    return sorted(p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file())


# ------------------------------------------------------------------ what the store wrote

def test_the_store_lists_every_file_it_wrote(sweep_dir):
    store = consolidate(sweep_dir)
    listed = json.loads((store / WRITTEN).read_text())
    assert listed == [f for f in _files(store) if f != WRITTEN]
    assert ".zmetadata" in listed and any(f.startswith("final_test_rmse/") for f in listed)
    assert foreign_entry(store) is None
    load(store)  # the list is no damage to the store


def _user_file_on_top(store: Path) -> Path:
    return store / "table.csv"


def _user_file_in_a_variable(store: Path) -> Path:
    return store / "final_test_rmse" / "notes.txt"


def _file_named_like_a_chunk(store: Path) -> Path:  # only the list tells it from a chunk
    return store / "final_test_rmse" / "7.7.7.7.7"


@pytest.mark.parametrize("where", [_user_file_on_top, _user_file_in_a_variable,
                                   _file_named_like_a_chunk])
def test_a_file_consolidation_did_not_write_is_refused_and_kept(sweep_dir, where):
    store = consolidate(sweep_dir)
    foreign = where(store)
    foreign.write_text("mine\n")
    before = snapshot(sweep_dir)
    with pytest.raises(InputError) as refused:
        consolidate(sweep_dir)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{foreign} lies inside {store}"), line
    assert "move it out of the store" in line
    assert snapshot(sweep_dir) == before and _leftovers(sweep_dir) == []
    foreign.unlink()  # moved out, as the line says: consolidation runs again
    assert load(consolidate(sweep_dir))["status"].size


def test_a_store_without_its_list_judges_files_by_their_zarr_names(sweep_dir):
    """A store consolidated before the list was kept: its own files are zarr metadata and
    chunk keys; anything else is foreign. Its next consolidation writes the list."""
    store = _store(sweep_dir)
    (store / WRITTEN).unlink(missing_ok=True)
    assert foreign_entry(store) is None
    (store / "table.csv").write_text("a,b\n")
    assert foreign_entry(store) == store / "table.csv"
    (store / "table.csv").unlink()
    consolidate(sweep_dir)
    assert (store / WRITTEN).is_file() and foreign_entry(store) is None


def test_export_writes_beside_the_store_not_inside_it(sweep_dir):
    store = _store(sweep_dir)
    with pytest.raises(InputError, match="lies inside the zarr store .*; write it beside the "
                                         "store instead, e.g. .*/seed/export/table.csv$"):
        export(store, store / "table.csv")
    assert not (store / "table.csv").exists()
    beside = sweep_dir / "export" / "table.csv"
    export(store, beside, "job")
    assert beside.is_file() and foreign_entry(store) is None
    consolidate(sweep_dir)  # the table beside the store is nobody's business
    assert beside.is_file()


# ------------------------------------------------------------------------ a kill midway

STEPS = ("recorded", "written", "moved aside", "moved in", "old removed", "done")


def _killed_after(store: Path, step: str) -> xr.Dataset:
    """Replace ``store`` by a copy with one value changed, stopping after ``step`` as a kill
    would (the generator is abandoned: no cleanup runs). Returns the new Dataset."""
    new = load(store).load()
    new["final_test_rmse"] = new["final_test_rmse"] + 1.0
    new = seal(new)  # with its content hashes, as consolidation writes it
    swap = Swap(store)
    steps = swap.steps(new, read_back)
    assert next(s for s in steps if s == step) == step
    return new


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_after_any_step_leaves_a_trusted_store_or_one_line(sweep_dir, step):
    store = _store(sweep_dir)
    old = load(store).load()
    new = _killed_after(store, step)
    try:
        found = load(store).load()
    except StoreError as err:  # only between the renames: no store, the old one aside
        assert step == "moved aside", err
        line = str(err)
        assert "\n" not in line and f"the consolidation that writes {store} was interrupted" \
            in line and f"{swap_record(store)} remains" in line
        assert "rerun the sweep command that made it (sweep=seed, or python -m pipeline " \
               "resume=last if it was the last sweep): it completes the consolidation" in line
    else:
        assert step != "moved aside"
        expected = old if step in ("recorded", "written") else new
        np.testing.assert_array_equal(found["final_test_rmse"].values,
                                      expected["final_test_rmse"].values)
    # the next consolidation finishes it: a sound store, and nothing of the swap left
    consolidate(sweep_dir)
    assert _leftovers(sweep_dir) == []
    xr.testing.assert_identical(load(store).load().drop_attrs(), old.drop_attrs())


def test_a_kill_while_the_old_store_is_removed_is_cleaned_up(sweep_dir):
    store = _store(sweep_dir)
    _killed_after(store, "moved in")
    old = next(sweep_dir.glob("results.zarr.old-*"))
    shutil.rmtree(old / "final_test_rmse")  # removed in part when the kill came
    load(store)  # the new store, whole
    consolidate(sweep_dir)
    assert _leftovers(sweep_dir) == []


def test_the_sweep_rerun_completes_an_interrupted_consolidation(sweep_dir, capfd, monkeypatch):
    store = _store(sweep_dir)
    _killed_after(store, "moved aside")
    report = run_in_process(["pipeline.report", "outputs/seed"], sweep_dir.parent.parent, capfd,
                            monkeypatch)
    lines = report.stderr.strip().splitlines()
    assert report.returncode == 2 and len(lines) == 1 and "was interrupted" in lines[0], lines
    from tests.bad_input import SEED_SWEEP

    ran = run_in_process(["pipeline", *SEED_SWEEP], sweep_dir.parent.parent, capfd, monkeypatch)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert "0 run, 0 failed" in ran.stdout
    assert _leftovers(sweep_dir) == [] and load(store)["status"].size


def test_recovery_removes_only_what_its_record_names(sweep_dir):
    """A record naming anything but the store's own temporary and old siblings (edited, or
    another file's) is not followed: nothing but the record is removed."""
    store = _store(sweep_dir)
    before = snapshot(sweep_dir)
    for names in ({"new": "jobs", "old": "manifest.json"},
                  {"new": "results.zarr.tmp-x/../../jobs", "old": "results.zarr.old-x"},
                  "not json"):
        swap_record(store).write_text(names if isinstance(names, str) else json.dumps(names))
        recover(store)
        assert not swap_record(store).exists()
        assert snapshot(sweep_dir) == before
