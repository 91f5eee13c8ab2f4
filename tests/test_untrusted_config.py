"""Config files and records are input (reliability round 4): a bad file in ``conf/`` affects
only the commands that name it, in one line naming it; no config file runs code or widens where
a run writes (``hydra.callbacks``, a ``_target_``, a tag, ``allow_outside_outputs``), whether
the command line names it, an experiment's defaults list pulls it in, or the composed config
carries it; and ``outputs/last_sweep.json`` is replayed only bounded, matching its sweep's
manifest, and without an override that widens where the run writes unless typed again.

The config-file cases run on a copy of ``conf/`` (the real one is never touched), in-process
(harness: ``tests/bad_input.py``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import pipeline.config
from algorithms.errors import InputError
from pipeline.config import CONF_DIR
from tests.bad_input import Case, isolated, params, run_case, run_in_process


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    """A copy of ``conf/`` that every loaded module reads as the product's config directory."""
    copy = tmp_path / "conf"
    shutil.copytree(CONF_DIR, copy)
    monkeypatch.setattr(pipeline.config, "CONF_DIR", copy)
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("pipeline", "hydra_plugins") and module is not None \
                and getattr(module, "CONF_DIR", None) == CONF_DIR:
            monkeypatch.setattr(module, "CONF_DIR", copy)
    (tmp_path / "work").mkdir()
    return copy


def run(tmp_path, capfd, monkeypatch, *args):
    return run_in_process(["pipeline", *args], tmp_path / "work", capfd, monkeypatch)


def one_error_line(ran) -> str:
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert ran.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        ran.stdout[-2000:] + ran.stderr[-3000:]
    assert "Traceback" not in ran.stdout + ran.stderr
    return lines[0]


# ------------------------------------------------ finding 4: a bad file affects only its commands
BAD_FILES = {
    "not-utf8": (b"lam: 0.2  # \xff\n", "not UTF-8 text (byte 0xff on line 1)"),
    "duplicate-key": (b"# @package _global_\nlam: 0.2\nlam: 0.3\n",
                      "the key 'lam' is given twice (line 3)"),
    "python-tag": (b"# @package _global_\nlam: !!python/object/apply:os.getcwd []\n",
                   "the tag !!python/object/apply:os.getcwd would make an object"),
    "alias-bomb": (("a0: &a0 [" + ",".join(['"x"'] * 9) + "]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))).encode(),
        "expands to more than"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_experiment_file_affects_only_the_commands_that_name_it(kind, conf, tmp_path,
                                                                       capfd, monkeypatch):
    content, why = BAD_FILES[kind]
    (conf / "experiment" / "bad.yaml").write_bytes(content)
    shown = run(tmp_path, capfd, monkeypatch, "--cfg", "job", "dataset=sine1d", "lam=0.3")
    assert shown.returncode == 0 and "lam: 0.3" in shown.stdout, shown.stderr[-3000:]
    typo = run(tmp_path, capfd, monkeypatch, "dataset=sine1d", "lamb=0.3")  # reads every key
    assert "did you mean lam?" in one_error_line(typo)
    for args in (["experiment=bad", "dataset=sine1d"], ["-m", "experiment=bad", "seed=0,1"],
                 ["--cfg", "job", "experiment=bad"]):
        line = one_error_line(run(tmp_path, capfd, monkeypatch, *args))
        assert line.startswith("error: conf/experiment/bad.yaml") and why in line, line
    assert not (tmp_path / "work" / "outputs").exists()


# --------------------------------------- finding 3: no config file runs code without a flag
def callback(pwned: Path) -> str:
    return ("# @package _global_\nhydra:\n  callbacks:\n    x:\n      _target_: builtins.open\n"
            f"      file: {pwned}\n      mode: w\n")


CODE_FILES = {
    # file under conf/ → (its text, the command's extra overrides, what the line names)
    "experiment-callback": ({"experiment/cb.yaml": callback}, ["experiment=cb"],
                            ("conf/experiment/cb.yaml", "hydra.callbacks")),
    "experiment-target": ({"experiment/t.yaml": lambda p: f"x:\n  _target_: os.remove\n  "
                                                          f"path: {p}\n"},
                          ["experiment=t"], ("conf/experiment/t.yaml", "_target_")),
    "experiment-launcher-target": (
        {"experiment/l.yaml": lambda p: "# @package _global_\nhydra:\n  launcher:\n"
                                        "    _target_: builtins.open\n"},
        ["experiment=l"], ("conf/experiment/l.yaml", "hydra.launcher._target_")),
    "pulled-in-by-defaults": (
        {"algorithm/evil.yaml": callback,
         "experiment/pull.yaml": lambda p: "# @package _global_\ndefaults:\n"
                                           "  - override /algorithm: evil\n"},
        ["experiment=pull"], ("conf/algorithm/evil.yaml", "hydra.callbacks")),
    "placed-in-hydra-callbacks": (
        {"experiment/reloc.yaml": lambda p: "# @package _global_\ndefaults:\n"
                                            "  - /algorithm@hydra.callbacks: sgma\n"},
        ["experiment=reloc"], ("conf/algorithm/sgma.yaml", "hydra.callbacks")),
    "logging-factory": (
        {"experiment/log.yaml": lambda p: "# @package _global_\nhydra:\n  job_logging:\n"
                                          "    handlers:\n      f:\n        (): os.getcwd\n"},
        ["experiment=log"], ("conf/experiment/log.yaml", "hydra.job_logging")),
    "factory": ({"experiment/f.yaml": lambda p: "# @package _global_\nown:\n  (): os.getcwd\n"},
                ["experiment=f"], ("conf/experiment/f.yaml", "own.()")),
    "allow-outside-outputs": (
        {"experiment/out.yaml": lambda p: "# @package _global_\nallow_outside_outputs: true\n"
                                          f"hydra:\n  run:\n    dir: {p.parent}/run\n"},
        ["experiment=out"], ("conf/experiment/out.yaml", "allow_outside_outputs")),
    "group-option-named": ({"algorithm/evil.yaml": callback}, ["algorithm=evil"],
                           ("conf/algorithm/evil.yaml", "hydra.callbacks")),
}


@pytest.mark.parametrize("case", list(CODE_FILES))
@pytest.mark.parametrize("mode", ["job", "sweep"])
def test_a_config_file_that_runs_code_is_refused_naming_file_and_key(case, mode, conf, tmp_path,
                                                                      capfd, monkeypatch):
    files, extra, names = CODE_FILES[case]
    pwned = tmp_path / "pwned"
    for name, text in files.items():
        (conf / name).write_text(text(pwned))
    args = ["dataset=sine1d", "dataset.n_train=20", *extra]
    args = ["-m", *args, "seed=0,1", "dry_run=true"] if mode == "sweep" else args
    line = one_error_line(run(tmp_path, capfd, monkeypatch, *args))
    assert all(n in line for n in names), line
    assert not pwned.exists()  # nothing was opened, created or truncated
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "work"]


@pytest.mark.parametrize("mode", ["run", "multirun"])
def test_the_composed_config_is_checked_before_any_callback_is_made(mode, tmp_path,
                                                                    monkeypatch):
    """What no file and no typed command line can give (the Python API skips the command
    line's checks): a callback in the composed config is refused before Hydra makes it."""
    from pipeline import app

    pwned = tmp_path / "pwned"
    overrides = ["dataset=sine1d", "dataset.n_train=20",
                 "+hydra.callbacks.x._target_=builtins.open",
                 f"+hydra.callbacks.x.file={pwned}", "+hydra.callbacks.x.mode=w"]
    with isolated(tmp_path, {}, monkeypatch, ["pipeline"]):  # Hydra configures logging
        with pytest.raises(InputError, match=r"^hydra\.callbacks\.x \(builtins\.open\) "
                                             "would run"):
            if mode == "run":
                app.run(overrides)
            else:
                app.multirun([*overrides, "seed=0,1", "dry_run=true"])
        with pytest.raises(InputError, match=r"^hydra\.launcher\._target_=builtins\.open"):
            app.multirun(["dataset=sine1d", "seed=0,1", "dry_run=true",
                          "hydra.launcher._target_=builtins.open"])
    assert not pwned.exists() and not (tmp_path / "outputs").exists()


def test_the_known_targets_are_the_products_plugins():
    from hydra_plugins.sgp_dask_launcher.dask_launcher import DaskLauncher
    from hydra_plugins.sgp_dask_launcher.grouped_sweeper import GroupedSweeper
    from pipeline.config.untrusted import KNOWN_TARGETS

    assert set(KNOWN_TARGETS.values()) == {f"{c.__module__}.{c.__qualname__}"
                                           for c in (DaskLauncher, GroupedSweeper)}


# ------------------------------------------ finding 1: outputs/last_sweep.json is untrusted
SEED_COMMAND = ["algorithm=sgma,exact", "dataset=sine1d", "dataset.n_train=40",
                "dataset.n_test=20", "lam=0.1", "seed=0", "sweep=seed", "cluster.n_workers=1",
                "cluster.dashboard_address=null"]


def last_sweep(record: object):
    def setup(work: Path) -> None:
        text = record if isinstance(record, str) else json.dumps(record)
        (work / "outputs" / "last_sweep.json").write_text(text)
    return setup


def seed_manifest_with(extra: list[str]):
    """The seed sweep's manifest as if its command had had ``extra`` too (resealed), and
    the record of that command: a record the manifest vouches for."""
    def setup(work: Path) -> None:
        from pipeline.results.manifest_file import dump_manifest

        path = work / "outputs" / "seed" / "manifest.json"
        manifest = json.loads(path.read_text())
        command = [*manifest["command"], *extra]
        manifest["command"] = command
        for invocation in manifest.get("invocations") or []:
            invocation["command"] = command
        manifest.pop("checksum", None)
        path.write_bytes(dump_manifest({k: v for k, v in manifest.items()
                                        if not k.startswith("_")}))
        last_sweep({"sweep": "seed", "overrides": [*SEED_COMMAND, *extra]})(work)
    return setup


RESUME = ("pipeline", "resume=last")
RESUME_CASES = [
    Case("record-too-large", RESUME, ("outputs/last_sweep.json", "65536"),
         setup=last_sweep({"sweep": "seed", "overrides": ["a=" + "x" * 70000]}), timeout=30),
    Case("record-huge-list", RESUME, ("more than the 65536",),
         setup=last_sweep("[" + "0," * 10**6 + "0]"), timeout=30),
    Case("record-not-json", RESUME, ("outputs/last_sweep.json is unreadable",),
         setup=last_sweep("{not json")),
    Case("record-absolute-sweep", RESUME, ("is not a sweep record", "sweep='/elsewhere'"),
         setup=last_sweep({"sweep": "/elsewhere", "overrides": ["seed=0"]})),
    Case("record-long-sweep-name", RESUME, ("is not a sweep record", "more than the 100"),
         setup=last_sweep({"sweep": "a" * 300, "overrides": ["seed=0"]})),
    Case("record-flag", RESUME, ("is not a sweep record", "'--config-dir=/x'"),
         setup=last_sweep({"sweep": "seed", "overrides": ["--config-dir=/x"]})),
    Case("record-too-many-overrides", RESUME, ("is not a sweep record", "at most 256"),
         setup=last_sweep({"sweep": "seed", "overrides": ["seed=0"] * 300})),
    # a record its sweep's manifest does not vouch for: not replayed
    Case("record-not-in-manifest", RESUME, ("does not match outputs/seed/manifest.json",),
         setup=last_sweep({"sweep": "seed", "overrides": [
             *SEED_COMMAND, "allow_outside_outputs=true", "hydra.sweep.dir=/tmp/elsewhere"]})),
    Case("record-without-manifest", RESUME, ("no outputs/nosuch/manifest.json",),
         setup=last_sweep({"sweep": "nosuch", "overrides": SEED_COMMAND})),
    # one it vouches for: each override that widens where the run writes is typed again
    Case("replayed-allow-outside-outputs", RESUME,
         ("'allow_outside_outputs=true'", "resume=last allow_outside_outputs=true"),
         setup=seed_manifest_with(["allow_outside_outputs=true"])),
    Case("replayed-sweep-dir", (*RESUME, "allow_outside_outputs=true"),
         ("'hydra.sweep.dir=/tmp/elsewhere'",),
         setup=seed_manifest_with(["allow_outside_outputs=true",
                                   "hydra.sweep.dir=/tmp/elsewhere"])),
    Case("replayed-output-subdir", RESUME, ("'hydra.output_subdir=/tmp/elsewhere'",),
         setup=seed_manifest_with(["hydra.output_subdir=/tmp/elsewhere"])),
    Case("replayed-callbacks", RESUME, ("'+hydra.callbacks.x._target_=builtins.open'",),
         setup=seed_manifest_with(["+hydra.callbacks.x._target_=builtins.open"])),
    # typed again, it gets the checks of a typed command line
    Case("confirmed-output-subdir", (*RESUME, "hydra.output_subdir=/tmp/elsewhere"),
         ("hydra.output_subdir=/tmp/elsewhere", "outside"),
         setup=seed_manifest_with(["hydra.output_subdir=/tmp/elsewhere"])),
    Case("confirmed-callbacks", (*RESUME, "+hydra.callbacks.x._target_=builtins.open"),
         ("hydra.callbacks",), setup=seed_manifest_with(
             ["+hydra.callbacks.x._target_=builtins.open"])),
]


@pytest.mark.parametrize("case", params(RESUME_CASES))
def test_a_last_sweep_record_is_untrusted(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)
    assert not Path("/tmp/elsewhere").exists()


def test_a_record_its_manifest_vouches_for_resumes_with_its_widening_override_typed(
        seed_dir, tmp_path, capfd, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(seed_dir, work, symlinks=True)
    seed_manifest_with(["store_root=outputs/stores", "dry_run=true"])(work)
    ran = run_in_process(["pipeline", "resume=last", "store_root=outputs/stores"], work, capfd,
                         monkeypatch)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "already finished, 0 would run" in ran.stdout


def test_a_sweep_is_recorded_under_outputs_by_its_directory(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from pipeline.sweep.naming import record

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    master = OmegaConf.create({"sweep": None, "hydra": {"overrides": {"task": ["seed=0,1"]}}})
    record(tmp_path / "outputs" / "a" / "b", master)
    assert json.loads((tmp_path / "outputs" / "last_sweep.json").read_text()) == {
        "sweep": "a/b", "overrides": ["seed=0,1"]}
    record(tmp_path / "elsewhere", master)  # outside outputs/: not resumed by resume=last
    assert json.loads((tmp_path / "outputs" / "last_sweep.json").read_text())["sweep"] is None


def test_every_shipped_config_file_passes_the_checks():
    """Each option of each config group (and each reduced variant) composes without a
    refusal: the shipped files set no key the checks refuse."""
    from pipeline.config import GROUPS, group_options
    from pipeline.config.untrusted import composed_files_problem

    for group in GROUPS:
        for option in group_options(group):
            for size in ("full", "small"):
                assert composed_files_problem([f"{group}={option}", f"size={size}"]) is None
