"""The console script ``sgp-bench`` (the same program as ``python -m pipeline``): its one-screen
``--help`` names every top-level key and group, and Hydra's tab completion answers for it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.config import CONF_DIR

# what a job or a sweep imports, which Hydra's own flags and tab completion must not (CLI start-up:
# `python -m pipeline --help` at 0.2 s of CPU here, not 2.4 s with them)
HEAVY = ("numpy", "scipy", "distributed", "xarray", "zarr", "numba", "torch", "sklearn",
         "algorithms", "pipeline.job", "pipeline.sweep.launch")


def _heavy_imports(importtime: str) -> list[str]:
    """The :data:`HEAVY` modules in Python's ``-X importtime`` report (stderr)."""
    names = {line.rpartition("|")[2].strip() for line in importtime.splitlines()
             if line.startswith("import time:")}
    return sorted(n for n in names if any(n == h or n.startswith(f"{h}.") for h in HEAVY))


def _help() -> str:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not _heavy_imports(proc.stderr), _heavy_imports(proc.stderr)
    return proc.stdout


def test_help_is_one_screen_naming_every_top_level_key_and_group():
    text = _help()
    assert len(text.splitlines()) <= 40
    conf = OmegaConf.load(CONF_DIR / "config.yaml")
    keys = [k for k in conf if k not in ("defaults", "hydra")]
    # (the optional reduced@_global_ is chosen by experiment and size, not on the command line)
    groups = [next(iter(d)) for d in OmegaConf.to_container(conf.defaults)
              if isinstance(d, dict) and not next(iter(d)).startswith(("override", "optional"))]
    for key in keys + groups:
        assert f"\n  {key}" in text, key
    for group in ("algorithm:", "dataset:", "kernel:", "hyper:", "cluster:", "experiment:",
                  "size:"):
        assert f"\n{group} " in text, group


def _script() -> str:
    """The installed script beside this Python (pip puts it there), else on PATH."""
    beside = Path(sys.executable).parent / "sgp-bench"
    path = str(beside) if beside.is_file() else shutil.which("sgp-bench")
    if path is None:
        pytest.fail("the console script sgp-bench is not installed: pip install -e .")
    return path


# what a small job (fixed kernel, n below algorithms.kernels.WARM_UP_ROWS) does not load: the
# compiled kernel tiles (numba's load is more than such a fit's exp costs in numpy), the
# optimisers, the peers' libraries
NOT_FOR_A_SMALL_JOB = ("numba", "scipy.optimize", "torch", "gpytorch", "sklearn")
NOT_BEFORE_THE_FIT = ("xarray", "pandas", "dask", "distributed")  # any job, its store ingested


def test_console_script_runs_a_small_job_without_numba_or_the_optimisers(tmp_path):
    proc = subprocess.run([_script(), "algorithm=nystrom", "algorithm.max_basis=20",
                           "dataset=sine1d", "dataset.n_train=60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = [line for line in proc.stdout.splitlines() if not line.startswith("… ")]
    assert summary[0].startswith("nystrom on sine1d") and "result: " in proc.stdout
    names = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:")}
    assert "algorithms" in names and "numpy" in names  # the report is read
    assert not [n for n in names if n.split(".")[0] in NOT_FOR_A_SMALL_JOB
                or n.startswith("scipy.optimize")]
    # the same job again (its store now ingested) reaches its fit without xarray, pandas or dask:
    # the store is read through zarr alone, and xarray is imported to write the result
    probe = ("import sys\n"
             "import pipeline.job.run as job_run\n"
             "def at_the_fit(*args, **kwargs):\n"
             "    print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & NOT_YET))\n"
             "    raise SystemExit(0)\n"
             "job_run.run = at_the_fit\n"
             "from pipeline.cli import main\n"
             "main(sys.argv[1:])\n").replace("NOT_YET", repr(set(NOT_BEFORE_THE_FIT)))
    proc = subprocess.run([sys.executable, "-c", probe, "algorithm=nystrom",
                           "algorithm.max_basis=20", "dataset=sine1d", "dataset.n_train=60"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    loaded = [line for line in proc.stdout.splitlines() if not line.startswith("… ")]
    assert loaded == ["loaded: []"], (proc.stdout, proc.stderr[-2000:])


@pytest.mark.parametrize("line,answer", [("sgp-bench algorithm=sg", "algorithm=sgma"),
                                         ("sgp-bench dataset=breast", "dataset=breast_cancer"),
                                         ("sgp-bench dataset.n_tr", "dataset.n_train="),
                                         # after a comma too (Hydra's own completion stops)
                                         ("sgp-bench algorithm=exact,ny",
                                          "algorithm=exact,nystrom"),
                                         ("sgp-bench -m dataset=abalone,pu",
                                          "dataset=abalone,pumadyn32nm")])
def test_tab_completion_answers_for_the_console_script(line, answer):
    env = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run([_script(), "-sc", "query=bash"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert answer in proc.stdout.split(), proc.stdout
    assert not _heavy_imports(proc.stderr), _heavy_imports(proc.stderr)


def test_info_lists_the_dask_launcher_once():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--info", "plugins"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("DaskLauncher") == 1, proc.stdout


def test_help_is_hydras_help_without_the_internal_group(monkeypatch, capsys):
    """``--help`` is rendered from the same template as Hydra's ``--help`` (its own rendering
    composes the config once per group option): the same text, without the internal
    ``reduced`` group."""
    from pipeline import app
    from pipeline.cli import help_text

    monkeypatch.setattr(sys, "argv", ["sgp-bench", "--help"])
    with pytest.raises(SystemExit):
        app.hydra_main()
    hydra = [line for line in capsys.readouterr().out.rstrip().splitlines()
             if not line.startswith("reduced: ")]
    assert help_text().splitlines() == hydra


def test_a_single_job_shows_its_phases_one_line_each_in_a_pipe(tmp_path, capsys):
    """In a pipe (not a terminal) each phase is one line on stdout, as it starts, before the
    summary; stderr stays empty (it holds only a failure's one line)."""
    from pipeline.cli import main

    assert main(["algorithm=nystrom", "algorithm.max_basis=20", "dataset=sine1d",
                 "dataset.n_train=60"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    phases = [line for line in out.splitlines() if line.startswith("… ")]
    assert [line.split(",")[0].split(" at ")[0] for line in phases] == [
        "… the nystrom job on sine1d", "… the nystrom fit on sine1d",
        "… the certificate of the nystrom fit on sine1d",
        "… writing the result of the nystrom fit on sine1d"], out
    assert out.strip().splitlines()[-1].startswith("result: ")


def test_a_terminal_redraws_the_phase_with_its_seconds_and_the_fits_steps():
    import io

    from algorithms.evaluation import Recorder
    from pipeline.console import PhaseConsole

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    console = PhaseConsole(screen)
    console.phase("the sgma fit on abalone at n_train=4000")
    recorder = Recorder()
    recorder.rows.extend([{}] * 7)  # seven steps recorded
    console._draw()
    recorder.expected_steps = 20  # a fit that knows its steps: the rest at the rate so far
    console._draw()
    assert ", step 7 of 20, ETA " in console.stream.getvalue()
    console.phase("writing the result")
    console.close()
    text = screen.getvalue()
    assert "\r\x1b[K… the sgma fit on abalone at n_train=4000: " in text and ", step 7" in text
    assert text.endswith("writing the result: 0.0 s\n") and ", step 7 of 20\n" in text
