"""Every path through the command line gets the product's checks and one line: Hydra's own
flags (each of them: a test fails when Hydra's parser gains one without a case here), Hydra's
own settings (``hydra.*``), integers beyond their range (refused before any job runs) and
file-system errors named by their real cause (harness: ``tests/bad_input.py``)."""

from __future__ import annotations

import errno

import pytest

from tests.bad_input import Case, params, run_case, run_in_process

JOB = ("pipeline", "dataset=sine1d", "dataset.n_train=40")
SWEEP = ("pipeline", "-m", "dataset=sine1d", "dataset.n_train=40", "cluster.n_workers=1",
         "cluster.dashboard_address=null")
LAM = ("lam=-1",)  # bad on every path: the job's own check names it
LAM_LINE = ("lam=-1", "lam=0.1")

# --------------------------------------------------------------------- Hydra's own flags
FLAG_CASES = [
    # flags that would compose configs the checks do not read: refused, saying what instead
    Case("config-dir", (*JOB, "--config-dir", "{dir}", *LAM), ("--config-dir", "experiment=")),
    Case("config-dir-short", (*JOB, "-cd", "{dir}", *LAM), ("--config-dir/-cd",)),
    Case("config-dir-abbreviated", (*JOB, "--config-d", "{dir}", *LAM), ("--config-dir",)),
    Case("config-dir-equals", (*JOB, "--config-dir={dir}", *LAM), ("--config-dir",)),
    Case("config-path", (*JOB, "--config-path", "{dir}", *LAM), ("--config-path", "experiment=")),
    Case("config-path-short", (*JOB, "-cp", "{dir}", *LAM), ("--config-path/-cp",)),
    Case("config-name", (*JOB, "--config-name", "config", *LAM), ("--config-name",)),
    Case("config-name-short", (*JOB, "-cn", "config", *LAM), ("--config-name/-cn",)),
    Case("experimental-rerun", (*JOB, "--experimental-rerun", "{dir}/config.pickle"),
         ("--experimental-rerun", "rerun the same command line")),
    Case("ambiguous-abbreviation", (*JOB, "--conf", "x"), ("ambiguous option: --conf",)),
    Case("unknown-flag", (*JOB, "--bogus"), ("--bogus", "--hydra-help")),
    # flags that show a config: the job's checks on what they show
    Case("cfg-job", (*JOB, "--cfg", "job", *LAM), LAM_LINE),
    Case("cfg-short", (*JOB, "-c", "hydra", *LAM), LAM_LINE),
    Case("cfg-all-resolve", (*JOB, "--cfg", "all", "--resolve", *LAM), LAM_LINE),
    Case("cfg-package", (*JOB, "--cfg", "job", "--package", "lam", *LAM), LAM_LINE),
    Case("cfg-package-short", (*JOB, "--cfg", "job", "-p", "lam", *LAM), LAM_LINE),
    Case("cfg-unknown-key", (*JOB, "--cfg", "job", "lamb=0.1"), ("'lamb'",)),
    Case("cfg-bad-option", (*JOB, "--cfg", "job", "algorithm.max_basis=0"),
         ("algorithm.max_basis=0",)),
    Case("cfg-hydra-error", (*JOB, "--cfg", "job", "+lam=1"), ("'lam'", "++lam=1")),
    Case("info", (*JOB, "--info=config", *LAM), LAM_LINE),
    Case("info-short", (*JOB, "-i", "plugins", *LAM), LAM_LINE),
    Case("info-eats-an-override", (*JOB, "--info", *LAM), ("--info", "invalid choice")),
    Case("help-with-overrides", (*JOB, "--help", *LAM), LAM_LINE),
    Case("help-short-with-overrides", (*JOB, "-h", *LAM), LAM_LINE),
    Case("resolve-alone", (*JOB, "--resolve", "lam=0.2"), ("--resolve", "--cfg job")),
    Case("package-alone", (*JOB, "--package", "lam"), ("--package", "--cfg job")),
    Case("cfg-with-multirun", (*SWEEP, "--cfg", "job"), ("--cfg", "drop -m")),
    Case("cfg-and-info", (*JOB, "--cfg", "job", "--info"), ("--cfg and --info",)),
    # flags that run: the same checks as without them
    Case("run", (*JOB, "--run", *LAM), LAM_LINE),
    Case("run-short", (*JOB, "-r", *LAM), LAM_LINE),
    Case("run-and-multirun", (*SWEEP, "-r"), ("--run/-r and --multirun/-m",)),
    Case("multirun-long", (*SWEEP[:1], "--multirun", *SWEEP[2:], "lam=0.1,-1"), ("lam=-1",)),
    Case("multirun-abbreviated", (*SWEEP[:1], "--multi", *SWEEP[2:], "lam=0.1,-1"),
         ("lam=-1",)),
    # Hydra's own settings that would lead around the product
    Case("hydra-mode", (*JOB, "hydra.mode=MULTIRUN", *LAM), ("hydra.mode", "pass -m")),
    Case("hydra-searchpath", (*JOB, "hydra.searchpath=[file://{dir}]"),
         ("hydra.searchpath", "experiment=")),
    Case("hydra-callbacks", (*JOB, "+hydra.callbacks.x._target_=os.getcwd"),
         ("hydra.callbacks",)),
    Case("hydra-launcher-basic", (*SWEEP, "hydra/launcher=basic", *LAM),
         ("hydra/launcher=basic", "hydra/launcher=dask")),
    Case("hydra-sweeper-basic", (*SWEEP, "hydra/sweeper=basic", "lam=0.1,-1"),
         ("hydra/sweeper=basic", "hydra/sweeper=grouped")),
    # Hydra's settings that would run code, or write Hydra's own log elsewhere
    Case("hydra-launcher-target", (*SWEEP, "hydra.launcher._target_=builtins.open"),
         ("hydra.launcher._target_", "importable callable")),
    Case("hydra-logging-class", (*JOB, "+hydra.job_logging.handlers.x.class=builtins.open"),
         ("hydra.job_logging.handlers.x.class",)),
    Case("hydra-logging-in-a-value", (*JOB, "hydra.job_logging={handlers: {x: {_target_: a.b}}}"),
         ("hydra.job_logging.handlers.x._target_",)),
    Case("hydra-own-log-outside", (*JOB, "+hydra.hydra_logging.handlers.f.filename={dir}.log"),
         ("hydra.hydra_logging", ".log", "allow_outside_outputs=true")),
]

# every flag of Hydra's parser, and the cases (above or in test_a_flag_that_only_prints)
# that try it
FLAGS_TRIED = {
    "--help": "help-with-overrides", "-h": "help-short-with-overrides",
    "--hydra-help": "printed", "--version": "printed", "--cfg": "cfg-job", "-c": "cfg-short",
    "--resolve": "cfg-all-resolve", "--package": "cfg-package", "-p": "cfg-package-short",
    "--run": "run", "-r": "run-short", "--multirun": "multirun-long", "-m": "run-and-multirun",
    "--shell-completion": "printed", "-sc": "printed", "--config-path": "config-path",
    "-cp": "config-path-short", "--config-name": "config-name", "-cn": "config-name-short",
    "--config-dir": "config-dir", "-cd": "config-dir-short",
    "--experimental-rerun": "experimental-rerun", "--info": "info", "-i": "info-short",
}


@pytest.mark.parametrize("case", params(FLAG_CASES))
def test_a_hydra_flag_gets_the_checks_or_one_refusal(case, seed_dir, tmp_path, capfd,
                                                     monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


def test_every_flag_of_hydras_parser_is_tried():
    """The product's copy of Hydra's parser (pipeline.config.flags) has Hydra's flags, each
    with the same arguments, and each is tried by a case."""
    from hydra._internal.utils import get_args_parser

    from pipeline.config.flags import hydra_parser

    def shape(parser):
        return {tuple(a.option_strings): (a.dest, a.nargs, tuple(a.choices or ()), a.const)
                for a in parser._actions}

    assert shape(hydra_parser()) == shape(get_args_parser())
    flags = {s for a in get_args_parser()._actions for s in a.option_strings}
    assert flags == set(FLAGS_TRIED)
    ids = {c.id for c in FLAG_CASES} | {"printed"}
    assert set(FLAGS_TRIED.values()) <= ids


@pytest.mark.parametrize(("argv", "out"), [
    (("--cfg", "job", "lam=0.5"), "lam: 0.5"),
    (("--cfg", "job", "--resolve", "--package", "lam", "lam=0.5"), "0.5"),
    (("--info", "plugins"), "DaskLauncher"),
    (("--version",), "Hydra "),
    (("--hydra-help",), "--cfg"),
    (("-sc", "install=bash"), "complete"),
    (("--help",), "sgp-bench"),
], ids=["cfg", "cfg-resolve-package", "info", "version", "hydra-help", "shell-completion",
        "help"])
def test_a_flag_that_only_prints(argv, out, tmp_path, capfd, monkeypatch):
    ran = run_in_process(["pipeline", *argv], tmp_path, capfd, monkeypatch)
    assert ran.returncode == 0, ran.stderr
    assert out in ran.stdout and "Traceback" not in ran.stderr + ran.stdout
    assert not (tmp_path / "outputs").exists()


def test_run_flag_runs_the_one_job(tmp_path, capfd, monkeypatch):
    ran = run_in_process(["pipeline", "-r", "algorithm=exact", "dataset=sine1d",
                          "dataset.n_train=20", "dataset.n_test=10"], tmp_path, capfd,
                         monkeypatch)
    assert ran.returncode == 0, ran.stderr
    assert "result:" in ran.stdout


# ------------------------------------------------------- integers beyond their range
BIG = "18446744073709551616"  # 2**64
RANGE_CASES = [
    Case("seed-2-64", (*JOB, f"seed={BIG}"), (f"seed={BIG}", "4294967295")),
    Case("seed-2-32", (*JOB, "seed=4294967296"), ("seed=4294967296", "4294967295")),
    Case("sweep-seed-2-64", (*SWEEP, f"seed=0,{BIG}"), (f"seed={BIG}", "4294967295")),
    Case("kappa-10-30", (*JOB, "kappa=" + "1" + "0" * 30), ("kappa=1" + "0" * 30, "2147483647")),
    Case("sweep-kappa-10-30", (*SWEEP, "kappa=5,1" + "0" * 30), ("kappa=1" + "0" * 30,)),
    Case("kappa-float-10-30", (*JOB, "kappa=1e30"), ("kappa=1e+30",)),
    Case("max-basis", (*JOB, "algorithm=nystrom", "algorithm.max_basis=99999999999"),
         ("algorithm.max_basis=99999999999", "≤ 2147483647")),
    Case("max-basis-float", (*JOB, "algorithm=nystrom", "algorithm.max_basis=1e30"),
         ("algorithm.max_basis=1e+30", "≤ 2147483647")),
    Case("data-seed", (*JOB, f"dataset.data_seed={BIG}"), (f"data_seed={BIG}", "4294967295")),
    Case("hyper-seed", (*JOB, "hyper=ml", f"hyper.seed={BIG}"), (f"hyper.seed={BIG}",)),
    Case("hyper-subset", (*JOB, "hyper=ml", "hyper.subset=99999999999"),
         ("hyper.subset=99999999999",)),
    Case("certificate-kappa", (*JOB, "certificate.kappa=99999999999"),
         ("certificate.kappa=99999999999",)),
    Case("threads", (*JOB, "threads=99999999999"), ("threads=99999999999",)),
    Case("workers", (*SWEEP, "seed=0,1", "cluster.n_workers=99999999999"),
         ("n_workers=99999999999",)),
    Case("workers-1e9", (*SWEEP, "seed=0,1", "cluster.n_workers=1000000000"),
         ("cluster.n_workers=1000000000", "worker processes", "a core")),
    Case("job-timeout", (*JOB, "job_timeout=1e300"), ("job_timeout=1e+300", "1e+09")),
]


@pytest.mark.parametrize("case", params(RANGE_CASES))
def test_an_integer_beyond_its_range_is_refused_before_any_job(case, seed_dir, tmp_path, capfd,
                                                               monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


def test_the_int_option_bound_is_named():
    from algorithms.options import INT_MAX, SEED_MAX, Option, validate

    with pytest.raises(Exception, match=f"≤ {INT_MAX}"):
        validate({"m": Option(1, "int", lo=1)}, {"m": INT_MAX + 1}, owner="x", prefix="")
    assert validate({"m": Option(1, "int", lo=1)}, {"m": INT_MAX}, owner="x", prefix="")
    assert validate({"s": Option(0, "int", lo=0, hi=SEED_MAX)}, {"s": SEED_MAX}, owner="x",
                    prefix="")


# ----------------------------------------------------------- file-system errors, by cause
@pytest.mark.parametrize(("code", "setup", "said", "not_said"), [
    (errno.EISDIR, "dir", "is a directory where a file must be", "space"),
    (errno.EEXIST, "dir", "is a directory in the way", "space"),
    (errno.EEXIST, "file-parent", "is a file where a directory must be", "space"),
    (errno.ENOTDIR, "file-parent", "is a file where a directory must be", "space"),
    (errno.ENOTEMPTY, "dir", "is a directory in the way", "space"),
    (errno.ENAMETOOLONG, None, "longer than its file system allows", "space"),
    (errno.ELOOP, None, "symbolic link", "space"),
    (errno.EMFILE, None, "ulimit -n", "space"),
    (errno.EIO, None, "I/O error", "space"),
    (errno.EACCES, None, "not writable", "space"),
    (errno.EROFS, None, "read-only file system", "space"),
    (errno.ENOSPC, None, "free some space", None),
    (errno.EDQUOT, None, "quota", None),
])
def test_a_write_error_names_its_cause_and_fix(code, setup, said, not_said, tmp_path):
    import os

    from pipeline.oserrors import write_failure
    from pipeline.results.job_file import WriteError, write_atomically
    from pipeline.sweep.directory import write_error

    target = tmp_path / "sweep" / "result.nc"
    if setup == "dir":
        target.mkdir(parents=True)
    elif setup == "file-parent":
        (tmp_path / "sweep").write_text("a file")
    err = OSError(code, os.strerror(code), str(target))
    for line in (write_failure(err, target), str(write_error(err, target))):
        assert said in line and "\n" not in line
        assert not_said is None or not_said not in line, line
    if setup == "dir":  # the real thing: a directory where a job's result file goes
        import xarray as xr

        with pytest.raises(WriteError) as raised:
            write_atomically(xr.Dataset({"x": ("i", [1.0])}), target)
        assert f"{target} is a directory where a file must be" in str(raised.value)
        assert "space" not in str(raised.value)


def test_a_sweep_whose_result_directory_is_a_file_says_so(tmp_path):
    from pipeline.sweep.directory import write_error

    (tmp_path / "outputs").write_text("a file")
    err = FileExistsError(errno.EEXIST, "File exists", str(tmp_path / "outputs"))
    line = str(write_error(err, tmp_path / "outputs" / "s" / "jobs"))
    assert line.startswith(f"{tmp_path / 'outputs'} is a file where a directory must be")


def test_publish_reports_an_unforeseen_table_in_one_line(tmp_path, monkeypatch, capsys):
    from pipeline.publish import cli

    def broken(*args, **kwargs):
        raise TypeError("boolean value of NA is ambiguous")

    monkeypatch.setattr(cli, "publish", broken)
    assert cli.main([str(tmp_path / "results.zarr"), "--reference", "exact"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot publish")
    assert "TypeError" in err[0] and "--reference exact" in err[0]


@pytest.mark.parametrize("name", ["a" * 300, "a/" * 3000 + "b", "nul\x00byte", "x" * 5000])
def test_the_write_error_line_never_raises(name, tmp_path):
    """A path the OS cannot look at (a name or a path too long, a NUL byte) still gets its
    one line: building the message never raises (ENAMETOOLONG used to, inside it)."""
    import os

    from pipeline.oserrors import file_in_path, write_failure
    from pipeline.sweep.directory import write_error

    target = tmp_path / "outputs" / name / "jobs"
    for code in (errno.ENAMETOOLONG, errno.EEXIST, errno.EISDIR, errno.ENOTDIR, errno.ELOOP):
        err = OSError(code, os.strerror(code), str(target))
        line = write_failure(err, target)
        assert line and "\n" not in line and str(target) in line
        assert str(target) in str(write_error(err, target))
    assert file_in_path(target) is None
