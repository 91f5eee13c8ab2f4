"""``sgp-bench <command>`` (pipeline.front_door): one front door; the older forms stay aliases."""

import os
import subprocess
import sys

import pytest

from pipeline.front_door import COMMANDS, completion_line, dispatch, help_text, main


def test_help_lists_every_command_on_one_screen(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == help_text() and len(out.splitlines()) <= 40
    for name in ("run", "sweep", "report", "publish", "export", "compare", "bench"):
        assert f"\n  {name} " in out and f"sgp-bench {name}" in out, name
    assert set(COMMANDS) == {"run", "sweep", "report", "publish", "export", "compare", "bench"}


@pytest.mark.parametrize(("argv", "kind", "rest"), [
    (["run", "algorithm=sgma", "lam=0.1"], "job", ["algorithm=sgma", "lam=0.1"]),
    (["sweep", "algorithm=exact,nystrom"], "job", ["-m", "algorithm=exact,nystrom"]),
    (["run", "--help"], "job", ["--help"]),  # a job's keys and groups (Hydra's help)
    (["algorithm=sgma"], "job", ["algorithm=sgma"]),  # the older forms
    (["-m", "seed=0,1"], "job", ["-m", "seed=0,1"]),
    (["-sc", "install=bash"], "job", ["-sc", "install=bash"]),
    (["+kernel.lengthscales=[1,2]"], "job", ["+kernel.lengthscales=[1,2]"]),
    ([], "job", []),
    (["-h"], "help", []),
    (["nonesuch"], "unknown", ["nonesuch"]),
])
def test_each_command_line_goes_to_its_program(argv, kind, rest):
    got, entry, args = dispatch(argv)
    assert (got, args) == (kind, rest) and entry is None


def test_a_path_command_runs_its_own_main(capsys):
    kind, entry, rest = dispatch(["report", "x.zarr"])
    from pipeline.report.build import main as report_main

    assert (kind, entry, rest) == ("report", report_main, ["x.zarr"])
    assert main(["compare"]) == 2  # its own one-line refusal: two paths are required
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "required" in err[0]


def test_an_unknown_command_is_one_line_naming_it_and_the_commands(capsys):
    assert main(["nonesuch"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: sgp-bench nonesuch: no such command")
    assert all(name in err for name in COMMANDS)


@pytest.mark.parametrize(("line", "older"), [
    ("sgp-bench run algorithm=sg", "sgp-bench algorithm=sg"),
    ("sgp-bench sweep dataset=abalone,pu", "sgp-bench -m dataset=abalone,pu"),
    ("sgp-bench algorithm=sg", "sgp-bench algorithm=sg"),
    ("sgp-bench run", "sgp-bench run"),
])
def test_tab_completion_reads_a_command_line_as_the_older_form(line, older):
    assert completion_line(line) == older


def test_the_console_script_runs_a_job_and_prints_the_commands(tmp_path):
    """One real process each way: ``sgp-bench run`` (the job's watched child) and ``sgp-bench
    --help`` (neither numpy nor Dask imported)."""
    script = [sys.executable, "-c", "from pipeline.front_door import console; console()"]
    job = subprocess.run([*script, "run", "algorithm=nystrom", "algorithm.max_basis=20",
                          "dataset=sine1d", "dataset.n_train=60"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "result: " in job.stdout and job.stderr == ""
    helped = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert helped.returncode == 0 and helped.stdout.strip() == help_text()
    imported = {line.rpartition("|")[2].strip() for line in helped.stderr.splitlines()}
    heavy = imported & {"numpy", "distributed", "hydra"}
    assert not heavy, heavy
