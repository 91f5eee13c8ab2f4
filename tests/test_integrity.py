"""Every file a sweep's cache or consolidation trusts is verified on read with a checksum written
with it (issue 51): a job's ``result.nc``, the sweep's ``manifest.json``, the dataset store,
the learned hyperparameters. For each, a byte is flipped (or the file otherwise damaged) in a
copy of a finished sweep, and both outcomes are checked: the rerun of the sweep refits the job
(or rebuilds the file) with a ``note:`` naming it, and consolidation never serves it."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from scipy.io import netcdf_file

from algorithms.errors import InputError
from pipeline.checksum import DamagedFile, open_sealed_json, seal_json
from pipeline.job.claims import count_fits
from pipeline.results.consolidate import consolidate, load
from pipeline.results.job_file import (
    DamagedResult,
    job_status,
    load_job_result,
    verified_status,
)
from pipeline.results.manifest_file import dump_manifest
from tests.bad_input import SEED_SWEEP, run_in_process, snapshot


@pytest.fixture
def work(seed_dir, tmp_path) -> Path:
    """A copy of the finished seed sweep (sgma and exact on sine1d) to damage."""
    shutil.copytree(seed_dir, tmp_path / "work")
    return tmp_path / "work"


def _sweep(work: Path) -> Path:
    return work / "outputs" / "seed"


def _job_files(work: Path) -> list[Path]:
    return sorted((_sweep(work) / "jobs").glob("*/result.nc"))


def _rerun(work: Path, capfd, monkeypatch):
    ran = run_in_process(["pipeline", *SEED_SWEEP], work, capfd, monkeypatch)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    return ran


def _counts(out: str) -> tuple[int, int]:
    line = next(x for x in out.splitlines() if "already finished" in x)
    done, to_run = line.split("distinct jobs, ")[1].split(" already finished, ")
    return int(done), int(to_run.split()[0])


# ---------------------------------------------------------------- damage to a result file

def _flip_trace_value(path: Path) -> None:
    """The last test_rmse of the trace, one bit of its mantissa (0.4511 → 0.4510999…)."""
    with netcdf_file(path, mmap=False) as nc:
        value = float(nc.variables["test_rmse"].data[-1])
    raw = bytearray(path.read_bytes())
    at = raw.rfind(struct.pack(">d", value))
    assert at > 0
    raw[at + 7] ^= 0x01
    path.write_bytes(bytes(raw))


def _change_summary_digit(path: Path) -> None:
    """One digit of the summary JSON's test_rmse (the file keeps its length and layout)."""
    raw = bytearray(path.read_bytes())
    at = raw.find(b'"test_rmse": 0.')
    assert at > 0
    digit = at + len(b'"test_rmse": 0.') + 1
    raw[digit] = ord("1") if raw[digit] != ord("1") else ord("2")
    path.write_bytes(bytes(raw))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:200])


def _a_directory_in_its_place(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _malformed_summary_resealed(path: Path) -> None:
    """A summary that is not JSON, in a file whose checksum was recomputed (so the checksum
    passes): still never served."""
    import xarray as xr

    from pipeline.results.job_file import _sealed

    with xr.open_dataset(path, engine="scipy") as ds:
        ds = ds.load()
    ds.attrs["summary"] = '{"test_rmse": 0.41,'
    _sealed(ds).to_netcdf(path, engine="scipy")


DAMAGE = {
    "trace-value": (_flip_trace_value, "fails its checksum"),
    "summary-digit": (_change_summary_digit, "fails its checksum"),
    "truncated": (_truncate, "cannot be read"),
    "directory": (_a_directory_in_its_place, "is a directory, not a job's result file"),
    "malformed-summary": (_malformed_summary_resealed, "has a summary attr that is not JSON"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_result_file_is_never_served(work, capfd, monkeypatch, kind):
    damage, what = DAMAGE[kind]
    path = _job_files(work)[0]
    h = path.parent.name
    damage(path)
    # read directly: one line naming the file, never the numbers
    assert job_status(path) is None
    with pytest.raises(DamagedResult) as err:
        verified_status(path)
    read_what = "cannot be read" if kind == "directory" else what  # the reader's own words
    assert str(path) in str(err.value) and read_what in str(err.value)
    assert "\n" not in str(err.value)
    if path.is_file():
        with pytest.raises(DamagedResult, match=what.split()[0]):
            load_job_result(path)
    # consolidation leaves it out (status missing, the error says why), the rest is served
    capfd.readouterr()
    ds = load(consolidate(_sweep(work)))
    err = capfd.readouterr().err
    assert f"note: result file {path} {what}" in err and "left out of" in err, err
    status = ds["status"].values.ravel().tolist()
    errors = ds["error"].values.ravel().tolist()
    hashes = ds["job_hash"].values.ravel().tolist()
    mine = [i for i, x in enumerate(hashes) if x == h]
    assert mine and all(status[i] == "missing" and what in errors[i] for i in mine)
    assert all(np.isnan(ds["final_test_rmse"].values.ravel()[i]) for i in mine)
    assert status.count("ok") == len(status) - len(mine)
    assert f"rm -r {path}" in err or kind != "directory", err
    if kind == "directory":  # not ours to delete: the rerun stops with one line naming it
        ran = run_in_process(["pipeline", *SEED_SWEEP], work, capfd, monkeypatch)
        errors = [x for x in ran.stderr.splitlines() if x.startswith("error: ")]
        assert ran.returncode == 2 and len(errors) == 1 and str(path) in errors[0], ran.stderr
        assert f"{path} is a directory, not a job's result file (remove it: rm -r {path}), " \
               "then rerun the sweep: that job is not finished" in errors[0], errors
        assert "Traceback" not in ran.stderr and path.is_dir()
        assert "distinct jobs" not in ran.stdout  # refused before anything ran
        # removed as the line says, the rerun treats the job as not finished: it runs again
        path.rmdir()
        ran = _rerun(work, capfd, monkeypatch)
        assert _counts(ran.stdout) == (1, 1) and verified_status(path) == ("ok", h)
        return
    # the rerun refits it, with a note naming the file, and fits nothing else
    ran = _rerun(work, capfd, monkeypatch)
    assert f"note: result file {path} {what}" in ran.stderr and "its job runs again" in ran.stderr
    assert _counts(ran.stdout) == (1, 1)
    assert verified_status(path) == ("ok", h)
    assert count_fits(path.parent) == 2
    assert set(load(_sweep(work) / "results.zarr")["status"].values.ravel()) == {"ok"}


def test_a_result_file_filed_under_another_job_is_not_consolidated(work, capfd):
    first, second = _job_files(work)
    shutil.copy(first, second)  # a valid file, of another job
    capfd.readouterr()
    ds = load(consolidate(_sweep(work)))
    assert f"names job '{first.parent.name}', not {second.parent.name}" in capfd.readouterr().err
    status = dict(zip(ds["job_hash"].values.ravel(), ds["status"].values.ravel(), strict=True))
    assert status[second.parent.name] == "missing" and status[first.parent.name] == "ok"


# ---------------------------------------------------------------- damage to the manifest

def _edit_manifest(work: Path, change) -> None:
    path = _sweep(work) / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


def _flip_manifest_digit(work: Path) -> None:
    path = _sweep(work) / "manifest.json"
    text = path.read_text()
    at = text.index('"lam": 0.1')
    path.write_text(text[:at] + '"lam": 0.2' + text[at + len('"lam": 0.1'):])


def _drop_an_entry_hash(work: Path) -> None:
    _edit_manifest(work, lambda doc: doc["entries"][0].pop("hash"))


def _garble_manifest(work: Path) -> None:
    (_sweep(work) / "manifest.json").write_text("{not json")


MANIFEST_DAMAGE = {"digit": (_flip_manifest_digit, "fails its checksum"),
                   "entry-without-hash": (_drop_an_entry_hash, "fails its checksum"),
                   "garbled": (_garble_manifest, "is not JSON")}


@pytest.mark.parametrize("kind", sorted(MANIFEST_DAMAGE))
def test_a_damaged_manifest_is_rebuilt_with_a_note_and_never_consolidated(work, capfd,
                                                                         monkeypatch, kind):
    damage, what = MANIFEST_DAMAGE[kind]
    manifest = _sweep(work) / "manifest.json"
    results = _sweep(work) / "results.zarr"
    before = load(results)["final_test_rmse"].values.copy()
    damage(work)
    with pytest.raises(InputError) as err:  # consolidation refuses it: one line
        consolidate(_sweep(work))
    assert str(manifest) in str(err.value) and what in str(err.value)
    assert "\n" not in str(err.value)
    np.testing.assert_array_equal(load(results)["final_test_rmse"].values, before)
    ran = _rerun(work, capfd, monkeypatch)
    assert f"note: {manifest.resolve()} {what}" in ran.stderr
    assert ": rebuilt from this sweep's points" in ran.stderr
    assert _counts(ran.stdout) == (2, 0)  # no job refitted
    open_sealed_json(manifest.read_bytes())  # sealed again
    np.testing.assert_array_equal(load(results)["final_test_rmse"].values, before)


@pytest.mark.parametrize("results", ["another-sweep", "no-results"])
def test_a_damaged_manifest_of_a_directory_that_may_hold_another_sweep_stops_in_one_line(
        work, capfd, monkeypatch, results):
    """Where the directory's results do not show this very sweep (another grid, or no
    results.zarr), a damaged manifest is not replaced: one line, nothing rewritten."""
    sweep = _sweep(work)
    _garble_manifest(work)
    if results == "no-results":
        shutil.rmtree(sweep / "results.zarr")
        args = SEED_SWEEP
    else:
        args = tuple(a if a != "seed=0" else "seed=0,1" for a in SEED_SWEEP)
    before = snapshot(sweep)
    ran = run_in_process(["pipeline", *args], work, capfd, monkeypatch)
    errors = [x for x in ran.stderr.splitlines() if x.startswith("error: ")]
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr
    assert f"{(sweep / 'manifest.json').resolve()} is not JSON" in errors[0]
    assert "sweep=<new name>" in errors[0] and "Traceback" not in ran.stderr
    assert snapshot(sweep) == before


def test_a_manifest_without_its_checksum_or_structure_is_one_line(work):
    """A manifest without its checksum cannot be verified; one whose checksum matches but
    lacks what consolidation reads (an entry without its hash, no entries, an entry without a
    coordinate) is one line too, never a KeyError."""
    path = _sweep(work) / "manifest.json"
    sealed = path.read_bytes()
    _edit_manifest(work, lambda doc: doc.pop("sha256"))
    with pytest.raises(InputError, match="has no sha256 key"):
        consolidate(_sweep(work))
    for change, what in ((lambda doc: doc["entries"][0].pop("hash"), "entry 0 without its hash"),
                         (lambda doc: doc["entries"][1]["coords"].pop("seed"),
                          "entry 1 without its coordinates"),
                         (lambda doc: doc.pop("entries"), "has no list of entries")):
        doc = open_sealed_json(sealed)
        change(doc)
        path.write_bytes(dump_manifest(doc))  # a matching checksum: a writer's bug, say
        with pytest.raises(InputError, match=what) as err:
            consolidate(_sweep(work))
        assert str(path) in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- damage to the dataset store

def _store(work: Path) -> Path:
    (store,) = (work / "outputs" / "stores").glob("sine1d-*.zarr")
    return store


def _flip_store_chunk(store: Path) -> None:
    chunk = next(p for p in (store / "y_train").rglob("*") if p.is_file()
                 and p.name != "zarr.json")
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    chunk.write_bytes(bytes(raw))


def _delete_store_chunk(store: Path) -> None:
    next(p for p in (store / "X_train").rglob("*") if p.is_file()
         and p.name != "zarr.json").unlink()


def _garble_store_metadata(store: Path) -> None:
    (store / "zarr.json").write_text("{garbled")


def _file_in_place_of_store(store: Path) -> None:
    shutil.rmtree(store)
    store.write_text("not a store")


STORE_DAMAGE = {"chunk-byte": (_flip_store_chunk, "fails its checksum (y_train"),
                "chunk-deleted": (_delete_store_chunk, "fails its checksum (X_train"),
                "metadata": (_garble_store_metadata, "cannot be opened"),
                "file-in-place": (_file_in_place_of_store, "cannot be opened")}


@pytest.mark.parametrize("kind", sorted(STORE_DAMAGE))
def test_a_damaged_dataset_store_is_rebuilt_and_the_finished_sweep_kept(work, capfd,
                                                                       monkeypatch, kind):
    """The audit's case: a damaged store on a rerun of a finished sweep gave exit 1, no
    stderr, new job hashes and results.zarr rewritten with every point failed. Now: the store
    is rebuilt from its source with a note naming it, the job hashes stay, nothing is refitted,
    and the results are what they were."""
    damage, what = STORE_DAMAGE[kind]
    store = _store(work)
    results = load(_sweep(work) / "results.zarr")
    hashes, rmse = results["job_hash"].values.copy(), results["final_test_rmse"].values.copy()
    damage(store)
    ran = _rerun(work, capfd, monkeypatch)
    assert f"note: dataset store {store.resolve()} {what}" in ran.stderr, ran.stderr
    assert "rebuilt from its source" in ran.stderr
    assert _counts(ran.stdout) == (2, 0)
    after = load(_sweep(work) / "results.zarr")
    assert set(after["status"].values.ravel()) == {"ok"}
    np.testing.assert_array_equal(after["job_hash"].values, hashes)
    np.testing.assert_array_equal(after["final_test_rmse"].values, rmse)
    assert not [p for p in store.parent.iterdir() if ".damaged-" in p.name or ".tmp-" in p.name]


def test_a_store_whose_source_cannot_be_read_stops_the_sweep_in_one_line(work, capfd,
                                                                       monkeypatch):
    """A store that cannot be rebuilt (here: its builder fails as a damaged shipped file
    would) stops the sweep before any job is named: one line, the results left as they were."""
    from pipeline.datasets import DATASETS, StoreError

    _delete_store_chunk(_store(work))
    real = DATASETS["sine1d"]

    def damaged_source(norm):
        raise StoreError("source file sine1d.csv sha256 mismatch; reinstall the package")

    monkeypatch.setitem(DATASETS, "sine1d", type(real)(real.name, damaged_source,
                                                       real.options, real.train_shape,
                                                       real.task))
    before = (_sweep(work) / "results.zarr" / "status").stat().st_mtime_ns
    ran = run_in_process(["pipeline", *SEED_SWEEP], work, capfd, monkeypatch)
    assert ran.returncode == 2, ran.stderr
    lines = [x for x in ran.stderr.splitlines() if x.startswith("error: ")]
    assert lines == ["error: source file sine1d.csv sha256 mismatch; reinstall the package"]
    assert "Traceback" not in ran.stderr
    assert (_sweep(work) / "results.zarr" / "status").stat().st_mtime_ns == before
    assert set(load(_sweep(work) / "results.zarr")["status"].values.ravel()) == {"ok"}


# ---------------------------------------------------------------- consolidation robustness

def test_seeds_beyond_int64_consolidate_as_text(work):
    """A coordinate no zarr dtype holds (a seed of 2**64) does not break consolidation."""
    manifest = _sweep(work) / "manifest.json"
    doc = open_sealed_json(manifest.read_bytes())
    doc["entries"][0]["coords"]["seed"] = 2**64
    manifest.write_bytes(dump_manifest(doc))
    ds = load(consolidate(_sweep(work)))
    assert ds["seed"].values.tolist() == ["0", str(2**64)]
    assert (ds["status"].values == "ok").sum() == 2


# ---------------------------------------------------------------- sealed JSON, learned files

def test_sealed_json_detects_every_change():
    text = seal_json({"a": [1, 2.5, "x"], "b": {"c": None}})
    assert open_sealed_json(text) == {"a": [1, 2.5, "x"], "b": {"c": None}}
    for old, new in ((b"2.5", b"2.6"), (b'"x"', b'"y"'), (b"null", b"true")):
        with pytest.raises(DamagedFile, match="fails its checksum"):
            open_sealed_json(text.replace(old, new))
    with pytest.raises(DamagedFile, match="has no sha256"):
        open_sealed_json(json.dumps({"a": 1}))
    assert open_sealed_json(json.dumps({"a": 1}), legacy=True) == {"a": 1}
    with pytest.raises(DamagedFile, match="not JSON"):
        open_sealed_json(b"{")


def test_damaged_learned_hyperparameters_are_learned_again(tmp_path, capfd, monkeypatch):
    from pipeline.job import hyper
    from pipeline.job.spec import JobSpec

    config = JobSpec.from_config({"algorithm": {"name": "exact"}, "dataset": {
        "name": "sine1d", "n_train": 40, "n_test": 10}, "kernel": {"name": "rbf", "width": 1.0},
        "lam": 0.1, "store_root": str(tmp_path),
        "hyper": {"name": "ml", "restarts": 0, "max_iter": 20}})
    first = hyper.learned(config)
    (path,) = (tmp_path / hyper.CACHE_DIR).glob("*.json")
    text = path.read_text()
    lam = json.loads(text)["lam"]
    path.write_text(text.replace(repr(lam), repr(lam * 2)))  # one learned number changed
    capfd.readouterr()
    again = hyper.learned(config)
    assert f"note: learned hyperparameters {path} fails its checksum" in capfd.readouterr().err
    assert again.lam == first.lam
    open_sealed_json(path.read_bytes())
