"""Bad input to ``python -m pipeline.report``: what is not a results store, a damaged results
store (the seed sweep's ``outputs/seed/results.zarr``, damaged by each case's setup), an --out it
cannot write, bad flags: one ``error:`` line, exit 2, the bad value named, nothing on disk
changed (harness: ``tests/bad_input.py``)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.bad_input import Case, params, run_case, run_command

RESULTS = "outputs/seed/results.zarr"
REBUILD = "rerunning the sweep command that wrote it (sweep=seed)"


def _store(workdir: Path) -> Path:
    return workdir / RESULTS


def _chunk(workdir: Path, name: str) -> Path:
    return next(p for p in (_store(workdir) / name).iterdir() if not p.name.startswith("."))


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def delete_chunk(name: str):
    return lambda workdir: _chunk(workdir, name).unlink()


def truncate_chunk(workdir: Path) -> None:
    chunk = _chunk(workdir, "final_test_rmse")
    chunk.write_bytes(chunk.read_bytes()[:10])


def change_chunk(workdir: Path) -> None:
    shutil.copy(_chunk(workdir, "final_gap"), _chunk(workdir, "final_test_rmse"))


def edit_attr(workdir: Path) -> None:
    """The sweep name changed where readers see it (.zmetadata) and in .zattrs."""
    _edit_json(_store(workdir) / ".zmetadata",
               lambda d: d["metadata"][".zattrs"].update(sweep="edited"))
    _edit_json(_store(workdir) / ".zattrs", lambda d: d.update(sweep="edited"))


def edit_attr_file(workdir: Path) -> None:
    _edit_json(_store(workdir) / ".zattrs", lambda d: d.update(sweep="edited"))


def drop_hashes(workdir: Path) -> None:
    def drop(attrs: dict) -> None:
        attrs.pop("content_sha256")
        attrs.pop("attrs_sha256")

    _edit_json(_store(workdir) / ".zmetadata", lambda d: drop(d["metadata"][".zattrs"]))
    _edit_json(_store(workdir) / ".zattrs", drop)


def copy_a_job_file(workdir: Path) -> None:
    shutil.copy(next((workdir / "outputs/seed/jobs").glob("*/result.nc")),
                workdir / "outputs/one_job.nc")


def name_the_dataset_store(workdir: Path) -> None:
    store = next((workdir / "outputs/stores").glob("sine1d-*.zarr"))
    store.rename(store.with_name("sine1d.zarr"))


CASES = [
    # not a results store
    Case("missing-path", ("pipeline.report", "outputs/nope.zarr"),
         ("outputs/nope.zarr", "does not exist")),
    Case("plain-dir", ("pipeline.report", "outputs"), ("outputs", "not a zarr store")),
    Case("a-device", ("pipeline.report", "/dev/null"), ("/dev/null", "neither a directory")),
    Case("a-fifo", ("pipeline.report", "{dir}/pipe"), ("pipe", "a FIFO"),
         setup=lambda work: os.mkfifo(work / "pipe")),
    Case("sweep-dir", ("pipeline.report", "outputs/seed"), ("outputs/seed", RESULTS)),
    Case("a-file", ("pipeline.report", "outputs/seed/manifest.json"),
         ("outputs/seed/manifest.json", "is a file")),
    Case("a-job-file", ("pipeline.report", "outputs/one_job.nc"),
         ("outputs/one_job.nc", "load_job_result"), setup=copy_a_job_file),
    Case("dataset-store", ("pipeline.report", "outputs/stores/sine1d.zarr"),
         ("outputs/stores/sine1d.zarr", "dataset store"), setup=name_the_dataset_store),
    # a damaged results store
    Case("deleted-chunk", ("pipeline.report", RESULTS),
         (RESULTS, "final_test_rmse/", REBUILD), setup=delete_chunk("final_test_rmse")),
    Case("deleted-status-chunk", ("pipeline.report", RESULTS), ("status/", REBUILD),
         setup=delete_chunk("status")),
    Case("truncated-chunk", ("pipeline.report", RESULTS),
         ("unreadable chunk in variable final_test_rmse", REBUILD), setup=truncate_chunk),
    Case("changed-chunk", ("pipeline.report", RESULTS),
         ("variable final_test_rmse different", REBUILD), setup=change_chunk),
    Case("edited-attr", ("pipeline.report", RESULTS), ("attrs_sha256", REBUILD),
         setup=edit_attr),
    Case("edited-attr-file", ("pipeline.report", RESULTS), (".zattrs", REBUILD),
         setup=edit_attr_file),
    Case("deleted-zmetadata", ("pipeline.report", RESULTS), (".zmetadata", REBUILD),
         setup=lambda w: (_store(w) / ".zmetadata").unlink()),
    Case("deleted-variable", ("pipeline.report", RESULTS), ("lacks variable gap", REBUILD),
         setup=lambda w: shutil.rmtree(_store(w) / "gap")),
    Case("no-hashes", ("pipeline.report", RESULTS), ("no content hashes", REBUILD),
         setup=drop_hashes),
    # where the report goes, and the command line
    Case("out-under-a-file", ("pipeline.report", RESULTS, "--out", "outputs/seed/manifest.json/r"),
         ("outputs/seed/manifest.json/r", "Not a directory")),
    Case("out-is-a-file", ("pipeline.report", RESULTS, "--out", "outputs/seed/manifest.json"),
         ("outputs/seed/manifest.json", "File exists")),
    Case("unknown-flag", ("pipeline.report", RESULTS, "--bogus"), ("--bogus", "usage")),
    Case("two-paths", ("pipeline.report", RESULTS, "outputs/other.zarr"),
         ("outputs/other.zarr",)),
    Case("no-path", ("pipeline.report",), ("results", "usage")),
    Case("out-without-value", ("pipeline.report", RESULTS, "--out"), ("--out",)),
    Case("select-not-a-pair", ("pipeline.report", RESULTS, "--select", "seed"),
         ("--select 'seed' is not DIM=VALUE", "dataset.split=0")),
    Case("select-unknown-dim", ("pipeline.report", RESULTS, "--select", "split=0"),
         ("--select split=0", "not a swept dim", "choose one of")),
    Case("select-unknown-value", ("pipeline.report", RESULTS, "--select", "seed=7"),
         ("--select seed=7", "seed takes", "pass one of them")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


# also as real `python -m` commands: argparse, a damaged results store
E2E = ["unknown-flag", "truncated-chunk"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("case", params(CASES, E2E))
def test_bad_input_as_a_command(case, seed_dir, tmp_path):
    run_command(case, seed_dir, tmp_path / "work")
