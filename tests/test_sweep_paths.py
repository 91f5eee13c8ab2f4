"""Where runs write (issue 51, classes 2 and 5): no sweep inside another sweep's files or a
store, none that a run would delete with its results.zarr; a run whose inputs fail before
fitting keeps a finished results.zarr; every directory a run writes under outputs/ unless
``allow_outside_outputs=true``; a report's default directory too (an explicit --out is the
user's choice)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from algorithms.errors import InputError
from pipeline.results.consolidate import consolidate
from pipeline.sweep.directory import check_not_nested
from tests.test_untrusted_outputs import crafted_store

SWEEP = ("-m", "dataset=sine1d", "dataset.n_train=41", "seed=0,1", "dry_run=true")


@pytest.fixture
def base(tmp_path, monkeypatch):
    """A finished sweep ``outputs/evil`` (manifest, jobs, results.zarr) in the working dir."""
    monkeypatch.chdir(tmp_path)
    return crafted_store(tmp_path).parent


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("inner", ["results.zarr/inner", "results.zarr", "jobs/x", "report/x",
                                   "manifest.json/x"])
def test_a_sweep_inside_another_sweeps_files_is_refused_naming_both(base, inner):
    with pytest.raises(InputError) as err:
        check_not_nested(base / inner)
    message = str(err.value)
    assert str(base / inner.split("/")[0]) in message and str(base / inner) in message


def test_a_sweep_inside_a_store_or_the_store_root_is_refused(base, tmp_path):
    with pytest.raises(InputError, match=r"inside the zarr store .*sine1d-1\.zarr"):
        check_not_nested(tmp_path / "outputs" / "stores" / "sine1d-1.zarr" / "s")
    with pytest.raises(InputError, match=r"inside store_root .*outputs/stores"):
        check_not_nested(tmp_path / "outputs" / "stores" / "s", tmp_path / "outputs" / "stores")
    check_not_nested(base / "beside", tmp_path / "outputs" / "stores")  # its own directory


def test_a_sweep_whose_results_zarr_holds_another_is_refused_and_not_deleted(base):
    """A sweep made inside results.zarr before this check existed: the outer sweep's run is
    refused (it would replace the store whole), and consolidation never deletes it."""
    inner = base / "results.zarr" / "inner"
    (inner / "jobs").mkdir(parents=True)
    (inner / "manifest.json").write_text("{}")
    before = files(base)
    with pytest.raises(InputError, match=rf"{inner} lies inside {base / 'results.zarr'}"):
        check_not_nested(base)
    with pytest.raises(InputError, match=rf"{inner} lies inside"):
        consolidate(base)
    assert files(base) == before  # nothing moved, nothing removed, no temporary left
    shutil.rmtree(inner)
    consolidate(base)  # once moved out, the store is replaced as before
    assert not [p for p in base.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_a_symlinked_results_zarr_is_never_replaced_through(base, tmp_path):
    elsewhere = tmp_path / "elsewhere.zarr"
    (base / "results.zarr").rename(elsewhere)
    (base / "results.zarr").symlink_to(elsewhere)
    with pytest.raises(InputError, match="lies inside"):
        consolidate(base)
    assert (elsewhere / ".zmetadata").is_file()


def test_the_cli_refuses_a_sweep_named_inside_another_sweeps_store(base, tmp_path, run_cli):
    before = files(tmp_path / "outputs")
    ran = run_cli(tmp_path, *SWEEP, "sweep=evil/results.zarr/inner")
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.startswith("error: the sweep directory ") and "results.zarr" in ran.stderr
    assert files(tmp_path / "outputs") == before


def test_inputs_failing_before_fitting_keep_a_finished_results_zarr(base):
    from pipeline.sweep.launch import check_inputs_held

    records = {"a": {"status": "failed", "error": "StoreError: store x is damaged",
                     "before_fit": True},
               "b": {"status": "ok", "error": ""}}
    with pytest.raises(InputError, match=r"1 job\(s\) of this run failed before fitting, on "
                                         r"their input \(StoreError: store x is damaged\); .*"
                                         r"results.zarr is kept as it was"):
        check_inputs_held(records, base)
    check_inputs_held({"b": records["b"]}, base)  # jobs that ran: consolidated as always
    shutil.rmtree(base / "results.zarr")
    check_inputs_held(records, base)  # no finished store: the failures are consolidated


@pytest.mark.parametrize("args", [
    (*SWEEP, "hydra.sweep.dir=.."),
    (*SWEEP, "hydra.sweep.dir={outside}/sweep"),
    (*SWEEP, "store_root={outside}/stores"),
    ("dataset=sine1d", "dataset.n_train=41", "hydra.run.dir={outside}/run"),
    ("dataset=sine1d", "dataset.n_train=41", "hydra.run.dir=outputs/../run"),
    ("dataset=sine1d", "dataset.n_train=41", "store_root={outside}/stores"),
    ("dataset=sine1d", "dataset.n_train=41", "hydra.output_subdir={outside}/hydra"),
    ("dataset=sine1d", "dataset.n_train=41", "hydra.output_subdir=../../../../.."),
    (*SWEEP, "hydra.output_subdir={outside}/hydra"),
    ("dataset=sine1d", "dataset.n_train=41",
     "hydra.job_logging.handlers.file.filename={outside}/job.log"),
    (*SWEEP, "hydra.job_logging.handlers.file.filename={outside}/job.log"),
    ("dataset=sine1d", "dataset.n_train=41", "hydra.job.name=../../../../../../outside/x"),
    ("dataset=sine1d", "dataset.n_train=41", "+hydra.hydra_logging.handlers.f.filename="
                                             "{outside}/hydra.log"),
], ids=["sweep-dir-parent", "sweep-dir-absolute", "sweep-store-root", "run-dir-absolute",
        "run-dir-dotdot", "job-store-root", "run-output-subdir-absolute",
        "run-output-subdir-dotdot", "sweep-output-subdir", "run-job-log", "sweep-job-log",
        "run-job-name-dotdot", "hydra-log"])
def test_every_directory_a_run_writes_lies_under_outputs(args, tmp_path, run_cli):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    ran = run_cli(work, *(a.format(outside=outside) for a in args))
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stdout + ran.stderr
    assert ran.stderr.startswith("error: ") and f"outside {work / 'outputs'}" in ran.stderr
    assert "allow_outside_outputs=true" in ran.stderr
    assert files(tmp_path) == {"work", "outside"}  # nothing written anywhere


@pytest.mark.parametrize("link", ["jobs", "jobs/0123abcd"])
def test_a_sweep_never_writes_through_a_symlinked_job_directory(link, tmp_path, run_cli):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "outputs" / "s").mkdir(parents=True)
    outside.mkdir()
    (work / "outputs" / "s" / link).parent.mkdir(parents=True, exist_ok=True)
    (work / "outputs" / "s" / link).symlink_to(outside)
    for extra in ((), ("allow_outside_outputs=true",)):  # the opt-out does not follow links
        ran = run_cli(work, *SWEEP[:-1], "sweep=s", *extra)
        assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stdout + ran.stderr
        assert ran.stderr.startswith(f"error: {work / 'outputs' / 's' / link} is a symbolic "
                                     f"link (to {outside})"), ran.stderr
        assert "never through a link" in ran.stderr
    assert list(outside.iterdir()) == []


def test_allow_outside_outputs_lets_a_job_write_elsewhere(tmp_path, run_cli):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    ran = run_cli(work, "dataset=sine1d", "dataset.n_train=41", "algorithm.max_basis=3",
                  "certificate.enabled=false", f"hydra.run.dir={outside}/run",
                  "allow_outside_outputs=true")
    assert ran.returncode == 0, ran.stderr
    assert (outside / "run" / "result.nc").is_file()


def test_a_reports_default_directory_lies_under_outputs_and_out_opts_out(base, tmp_path,
                                                                         monkeypatch, capsys):
    from pipeline.report.build import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the store is outside this working directory's outputs/
    results = str(base / "results.zarr")
    assert main([results]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the report's default --out" in err and "--out <dir>" in err
    assert not (base / "report").exists()
    assert main([results, "--out", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "report.html").is_file()


def test_publish_writes_under_outputs_unless_out_is_given():
    from pipeline.publish.cli import DEFAULT_OUT

    assert Path(DEFAULT_OUT).parts[0] == "outputs"


def test_a_crafted_store_has_what_the_checks_need(base):
    """The fixture's sweep is a sweep directory (a manifest beside its results.zarr)."""
    assert json.loads((base / "manifest.json").read_text())["entries"]
    assert (base / "results.zarr" / ".zmetadata").is_file() and os.path.isdir(base / "jobs")
