"""Where results go, in odd states (issue 34): a file where a directory must be, a read-only
file system, a full disk before and during a sweep. One ``error:`` line naming the path and
what is wrong, exit 2, nothing already on disk damaged, and a sweep stopped by a full disk
resumes once space is freed, refitting nothing (harness: ``tests/bad_input.py``).

The file-system cases mount a small tmpfs (root on Linux, as in CI); without that privilege
they are skipped with the reason shown."""

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.bad_input import SEED_SWEEP, Case, params, run_case

JOB = ("pipeline", "algorithm=exact", "dataset=sine1d", "dataset.n_train=40")
SWEEP = ("pipeline", "-m", "algorithm=exact", "dataset=sine1d", "dataset.n_train=40",
         "seed=0,1", "cluster.n_workers=1", "cluster.dashboard_address=null")


def _replace_by_file(relative: str):
    def setup(work: Path) -> None:
        path = work / relative
        if path.is_dir():
            shutil.rmtree(path)
        path.write_text("not a directory\n")
    return setup


def _outputs_is_a_file(work: Path) -> None:
    shutil.move(work / "outputs", work / "kept")
    (work / "outputs").write_text("not a directory\n")


def _a_file_of_yours_in_the_store(work: Path) -> None:
    (work / "outputs" / "seed" / "results.zarr" / "table.csv").write_text("a,b\n1,2\n")


def _a_directory_for_a_result_file(work: Path) -> None:
    path = next((work / "outputs" / "seed" / "jobs").glob("*/result.nc"))
    path.unlink()
    path.mkdir()


def _killed_between_the_renames(work: Path) -> None:
    """What a consolidation killed after setting the old store aside leaves: no results.zarr,
    the old and new copies beside it and their record (:mod:`pipeline.results.store_swap`)."""
    from pipeline.results.consolidate import load
    from pipeline.results.store_swap import Swap

    store = work / "outputs" / "seed" / "results.zarr"
    steps = Swap(store).steps(load(store).load(), None)
    while next(steps) != "moved aside":
        pass


CASES = [
    Case("outputs-is-a-file-sweep", SWEEP, ("outputs is a file", "sweep directory"),
         setup=_outputs_is_a_file),
    Case("outputs-is-a-file-job", JOB, ("outputs is a file where a directory must be",),
         setup=_outputs_is_a_file),
    Case("sweep-dir-is-a-file", (*SWEEP, "sweep=taken"), ("outputs/taken is a file",),
         setup=_replace_by_file("outputs/taken")),
    Case("jobs-dir-is-a-file", ("pipeline", *SEED_SWEEP), ("outputs/seed/jobs is not a "
                                                          "directory", "rerun"),
         setup=_replace_by_file("outputs/seed/jobs")),
    # a rerun replaces results.zarr whole: a file it did not write there is refused, not removed
    Case("a-file-of-yours-in-results-zarr", ("pipeline", *SEED_SWEEP),
         ("outputs/seed/results.zarr/table.csv lies inside", "move it out of the store"),
         setup=_a_file_of_yours_in_the_store),
    Case("export-into-results-zarr", ("pipeline.export", "outputs/seed/results.zarr",
                                      "outputs/seed/results.zarr/table.csv"),
         ("outputs/seed/results.zarr/table.csv lies inside the zarr store",
          "beside the store instead, e.g. ", "outputs/seed/export/table.csv")),
    Case("combine-into-results-zarr", ("pipeline.export", "combine", "outputs/seed/results.zarr",
                                       "outputs/seed/results.zarr", "--out",
                                       "outputs/seed/results.zarr/both.zarr"),
         ("--out outputs/seed/results.zarr/both.zarr lies inside the zarr store",
          "outputs/seed/export/both.zarr")),
    Case("result-file-is-a-directory", ("pipeline", *SEED_SWEEP),
         ("/result.nc is a directory, not a job's result file (remove it: rm -r ",
          "then rerun the sweep: that job is not finished and runs again"),
         setup=_a_directory_for_a_result_file),
    Case("report-after-a-kill-between-the-renames", ("pipeline.report", "outputs/seed"),
         ("outputs/seed/results.zarr was interrupted between swapping",
          "results.zarr.swap remains", "rerun the sweep command that made it (sweep=seed",
          "resume=last", "it completes the consolidation"),
         setup=_killed_between_the_renames),
]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_output_directory(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    """A tmpfs of ``size`` mounted at ``where``. Mounting needs root on Linux (CI runs as root):
    without it the test fails, as the Chromium test does without Chromium, rather than pass
    unseen by a skip."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here ({proc.stderr.strip()}): run the tests as root "
                    "on Linux (CI does)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(directory: Path) -> None:
    """Write into ``directory`` until its file system is full."""
    with open(directory / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())


def _workdir(tmp_path: Path, mount: Path) -> Path:
    """A working directory whose outputs/ is the mount (the stores stay outside it)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "outputs").symlink_to(mount)
    return work


@pytest.mark.parametrize("args", [SWEEP, JOB], ids=["sweep", "job"])
def test_a_full_disk_before_the_start_is_one_line(args, tmp_path, run_cli):
    with tmpfs(tmp_path / "mnt", "256k") as mount:
        work = _workdir(tmp_path, mount)
        _fill(mount)
        ran = run_cli(work, *args[1:], f"store_root={tmp_path / 'stores'}",
                      "allow_outside_outputs=true")
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        assert ran.returncode == 2 and len(lines) == 1, ran.stderr
        assert lines[0].startswith("error: no space left on the device of ") \
            and "rerun" in lines[0], lines[0]
        # nothing was written beside the filler but a single job's new (timestamped) run
        # directory, where Hydra began its log and config before the disk refused them
        written = [p.relative_to(mount) for p in mount.rglob("*") if not p.is_dir()]
        assert all(p.parts[0] == "runs" for p in written if p.name != "filler"), written


def test_a_read_only_file_system_is_one_line(tmp_path, run_cli):
    with tmpfs(tmp_path / "mnt", "1m") as mount:
        work = _workdir(tmp_path, mount)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        ran = run_cli(work, *SWEEP[1:], f"store_root={tmp_path / 'stores'}",
                      "allow_outside_outputs=true")
        assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
        assert "is on a read-only file system" in ran.stderr and str(mount.name) in ran.stderr


def test_a_disk_filling_up_mid_sweep_stops_it_and_the_rerun_resumes(tmp_path, run_cli):
    """The disk fills up after a few jobs: exit 2 with one line, the finished jobs kept; once
    space is freed the same command finishes the sweep without fitting them again."""
    args = (*SWEEP[1:], "seed=range(0,30)", "algorithm=sgma", "algorithm.max_basis=5",
            f"store_root={tmp_path / 'stores'}", "allow_outside_outputs=true",
            "certificate.enabled=false", "sweep=multirun")
    with tmpfs(tmp_path / "mnt", "192k") as mount:
        work = _workdir(tmp_path, mount)
        ran = run_cli(work, *args)
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        assert ran.returncode == 2 and len(lines) == 1, ran.stdout[-2000:] + ran.stderr
        assert "the disk filled up" in lines[0] and "resume=last" in lines[0]
        jobs = mount / "multirun" / "jobs"
        kept = {p.parent.name for p in jobs.glob("*/result.nc")}
        assert 0 < len(kept) < 30
        subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
        again = run_cli(work, *args)
        assert again.returncode == 0, again.stderr
        assert f"{len(kept)} already finished, {30 - len(kept)} to run" in again.stdout
        assert len(list(jobs.glob("*/result.nc"))) == 30
