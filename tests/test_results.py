"""The results store: content hashes recorded by consolidation and checked by load (a damaged
store is reported with how to rebuild it, and the rebuild works); writes that fail leave the
old file and no temporary sibling."""

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from algorithms.errors import InputError
from pipeline.datasets.spec import StoreError
from pipeline.results import job_file
from pipeline.results.consolidate import consolidate, load
from pipeline.results.job_file import load_job_result, write_atomically
from tests.bad_input import SEED_SWEEP, make_seed_dir


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    return make_seed_dir(tmp_path_factory.mktemp("seed"))


@pytest.fixture
def sweep_dir(seed_dir, tmp_path):
    shutil.copytree(seed_dir, tmp_path / "work")
    return tmp_path / "work" / "outputs" / "seed"


def results(sweep_dir: Path) -> Path:
    return sweep_dir / "results.zarr"


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_consolidation_records_a_hash_per_variable_and_of_the_attrs(sweep_dir):
    ds = load(results(sweep_dir))
    assert set(ds.sgp.attrs["content_sha256"]) == set(ds.variables)
    assert len(ds.attrs["attrs_sha256"]) == 64
    assert ds["status"].load().values.ravel().tolist().count("ok") > 0


def _chunk(store: Path, name: str) -> Path:
    return next(p for p in (store / name).iterdir() if not p.name.startswith("."))


def _delete_chunk(store):
    _chunk(store, "final_test_rmse").unlink()


def _truncate_chunk(store):
    chunk = _chunk(store, "final_test_rmse")
    chunk.write_bytes(chunk.read_bytes()[:10])


def _change_chunk(store):  # a valid chunk of another variable of the same shape and dtype
    shutil.copy(_chunk(store, "final_gap"), _chunk(store, "final_test_rmse"))


def _edit_attr(store):
    edit_json(store / ".zmetadata", lambda d: d["metadata"][".zattrs"].update(git_sha="0" * 40))
    edit_json(store / ".zattrs", lambda d: d.update(git_sha="0" * 40))


def _edit_attr_file_only(store):
    edit_json(store / ".zattrs", lambda d: d.update(git_sha="0" * 40))


def _drop_hashes(store):  # a store consolidated before hashes were recorded
    for path, key in ((store / ".zattrs", None), (store / ".zmetadata", ".zattrs")):
        def drop(d, key=key):
            attrs = d["metadata"][key] if key else d
            attrs.pop("content_sha256")
            attrs.pop("attrs_sha256")
        edit_json(path, drop)


DAMAGE = [
    ("deleted-chunk", _delete_chunk, "lacks chunk file final_test_rmse/"),
    ("truncated-chunk", _truncate_chunk, "unreadable chunk in variable final_test_rmse"),
    ("changed-chunk", _change_chunk, "has variable final_test_rmse different"),
    ("edited-attr", _edit_attr, "attrs that differ from what consolidation wrote"),
    ("edited-attr-file", _edit_attr_file_only, "has .zattrs different from its copy"),
    ("no-zmetadata", lambda store: (store / ".zmetadata").unlink(), "lacks .zmetadata"),
    ("no-hashes", _drop_hashes, "has no content hashes"),
]


@pytest.mark.parametrize("damage,what", [(d, w) for _, d, w in DAMAGE],
                         ids=[i for i, _, _ in DAMAGE])
def test_a_damaged_store_is_refused_with_how_to_rebuild_it(sweep_dir, damage, what):
    store = results(sweep_dir)
    damage(store)
    with pytest.raises(StoreError) as err:
        load(store)
    message = str(err.value)
    assert "\n" not in message and what in message and str(store) in message, message
    assert "rerunning the sweep command that wrote it (sweep=seed): only consolidation runs, " \
        "no finished job is refitted" in message
    if damage is not _truncate_chunk:
        load(store, verify=False)  # opens unchecked


def test_rerunning_the_sweep_rebuilds_a_damaged_store_without_refitting(sweep_dir):
    runs = {p: load_job_result(p).attrs["run_id"] for p in sweep_dir.glob("jobs/*/result.nc")}
    _delete_chunk(results(sweep_dir))
    proc = subprocess.run([sys.executable, "-m", "pipeline", *SEED_SWEEP],
                          cwd=sweep_dir.parent.parent, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 run, 0 failed" in proc.stdout
    assert {p: load_job_result(p).attrs["run_id"] for p in runs} == runs
    assert np.isfinite(load(results(sweep_dir))["final_test_rmse"].values).any()


@pytest.mark.parametrize("where,what", [
    ("missing", "does not exist; pass the results.zarr a sweep printed"),
    ("sweep-dir", "is a sweep directory; pass"),
    ("plain-dir", "is a directory but not a zarr store"),
    ("file", "is a file, not a sweep's results store"),
    ("job-file", "is one job's result file"),
    ("dataset-store", "is a dataset store (written by ingest)"),
])
def test_what_is_not_a_results_store_is_named(sweep_dir, where, what):
    root = sweep_dir.parent.parent
    path = {"missing": sweep_dir / "nope.zarr", "sweep-dir": sweep_dir,
            "plain-dir": root / "outputs", "file": sweep_dir / "manifest.json",
            "job-file": next(sweep_dir.glob("jobs/*/result.nc")),
            "dataset-store": next((root / "outputs" / "stores").glob("*.zarr"))}[where]
    for verify in (True, False):
        with pytest.raises(StoreError, match=what.replace("(", r"\(").replace(")", r"\)")):
            load(path, verify=verify)


# ----------------------------------------------------------------------------- failing writes

def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name
                  or p.name.endswith(".swap"))  # the swap's record (pipeline.results.store_swap)


def test_a_job_file_on_a_full_disk_keeps_the_old_one(sweep_dir, monkeypatch):
    path = next(sweep_dir.glob("jobs/*/result.nc"))
    before = path.read_bytes()

    def half_written(ds, target):
        Path(target).write_bytes(b"CDF\x01 partial")
        _enospc()

    monkeypatch.setattr(job_file, "_write_netcdf", half_written)
    with pytest.raises(InputError) as err:
        write_atomically(xr.Dataset({"a": ("x", np.arange(3.0))}), path)
    message = str(err.value)
    assert str(path) in message and "No space left on device (ENOSPC)" in message, message
    assert "\n" not in message
    assert path.read_bytes() == before and _leftovers(path.parent) == []


def test_results_zarr_on_a_full_disk_keeps_the_old_store(sweep_dir, monkeypatch):
    store = results(sweep_dir)
    before = load(store).load()
    real_to_zarr = xr.Dataset.to_zarr

    def half_written(self, target, *args, **kwargs):
        real_to_zarr(self.isel(step=slice(0, 1)), target, *args, **kwargs)
        _enospc()

    monkeypatch.setattr(xr.Dataset, "to_zarr", half_written)
    with pytest.raises(InputError, match=r"cannot write \S*results.zarr: no space left on the "
                                         r"device of .*\(No space left on device \(ENOSPC\)\); "
                                         r"free some space"):
        consolidate(sweep_dir)
    assert _leftovers(sweep_dir) == []
    xr.testing.assert_identical(load(store).load(), before)


def test_a_failed_swap_puts_the_old_store_back(sweep_dir, monkeypatch):
    store = results(sweep_dir)
    before = load(store).load()
    real_rename = __import__("os").rename

    def rename(src, dst):
        if ".tmp-" in str(src):
            raise OSError(errno.EACCES, "Permission denied")
        return real_rename(src, dst)

    monkeypatch.setattr("pipeline.results.store_swap.os.rename", rename)
    with pytest.raises(InputError, match=r"Permission denied \(EACCES\)"):
        consolidate(sweep_dir)
    assert _leftovers(sweep_dir) == []
    xr.testing.assert_identical(load(store).load(), before)


def test_an_unwritable_directory_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = blocker / "jobs" / "result.nc"
    with pytest.raises(InputError, match=f"cannot write {path}: {blocker} is a file where a "
                                         "directory must be"):
        write_atomically(xr.Dataset({"a": ("x", np.arange(3.0))}), path)
