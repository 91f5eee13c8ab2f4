"""``hydra/sweeper=grouped`` on Hydra's public Sweeper interface: the grid, ``params`` before
the command line, batches, job numbers, ``multirun.yaml``, refused sweeps and the composition
check, driven in-process with a fake launcher (no Dask) and Hydra's own config loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, RunMode
from omegaconf import OmegaConf

from hydra_plugins.sgp_dask_launcher.grouped_sweeper import GroupedSweeper
from pipeline.config import CONF_DIR

ROOT = Path(__file__).resolve().parent.parent


class Result:
    def __init__(self, overrides: list[str], error: Exception | None = None) -> None:
        self.overrides = overrides
        self._error = error

    @property
    def return_value(self):
        if self._error is not None:
            raise self._error
        return self.overrides


class FakeLauncher:
    """Records each batch and its first job number; a job whose overrides hold ``fail`` fails."""

    def __init__(self, composes_every_job: bool = True, sweep_dir: Path | None = None) -> None:
        self.composes_every_job = composes_every_job
        self.sweep_dir = sweep_dir
        self.calls: list[tuple[list[list[str]], int]] = []
        self.saw_multirun_yaml: list[bool] = []

    def launch(self, job_overrides, initial_job_idx):
        batch = [list(o) for o in job_overrides]
        self.calls.append((batch, initial_job_idx))
        if self.sweep_dir is not None:
            self.saw_multirun_yaml.append((self.sweep_dir / "multirun.yaml").is_file())
        return [Result(o, RuntimeError("job failed") if "fail=1" in o else None)
                for o in batch]

    @property
    def batches(self) -> list[list[list[str]]]:
        return [batch for batch, _ in self.calls]


@pytest.fixture
def context(tmp_path, monkeypatch):
    """Hydra's config loader for this project's conf/ and a master config whose sweep
    directory is under ``tmp_path``'s outputs/ (the working directory)."""
    monkeypatch.chdir(tmp_path)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="t"):
        loader = GlobalHydra.instance().config_loader()
        sweep_dir = tmp_path / "outputs" / "deep" / "sweep"
        master = loader.load_configuration(
            "config", [f"hydra.sweep.dir={sweep_dir}"], RunMode.MULTIRUN)
        # the callbacks are the launcher's business: Hydra's no-op Callback stands in
        yield HydraContext(config_loader=loader, callbacks=Callback()), master, sweep_dir


def make_sweeper(context, launcher, **kwargs) -> GroupedSweeper:
    hydra_context, master, _ = context
    sweeper = GroupedSweeper(**kwargs)
    # what setup() sets, with a fake launcher in place of Hydra's instantiation
    sweeper.hydra_context, sweeper.config, sweeper.launcher = hydra_context, master, launcher
    return sweeper


def test_grid_is_the_cartesian_product_in_key_order(context):
    launcher = FakeLauncher()
    returns = make_sweeper(context, launcher).sweep(["a=1,2", "b=x,y", "c=z"])
    assert launcher.calls == [([["a=1", "b=x", "c=z"], ["a=1", "b=y", "c=z"],
                                ["a=2", "b=x", "c=z"], ["a=2", "b=y", "c=z"]], 0)]
    assert [[r.return_value for r in batch] for batch in returns] == launcher.batches


def test_params_come_first_and_a_later_value_wins_in_the_first_position(context):
    launcher = FakeLauncher()
    sweeper = make_sweeper(context, launcher, params={"a": "1,2", "b": "p", "s": "x,y"})
    sweeper.sweep(["c=3", "a=5", "s=q", "c=4,6"])
    assert launcher.batches == [[["a=5", "b=p", "s=q", "c=4"], ["a=5", "b=p", "s=q", "c=6"]]]


def test_values_kept_as_written(context):
    launcher = FakeLauncher()
    make_sweeper(context, launcher).sweep(["+extra=1", "l=[1,2]", "d={u:1}", "~gone", "e=null"])
    # a delete without a value is written with Hydra's value text, null (the same delete)
    assert launcher.batches == [[["+extra=1", "l=[1,2]", "d={u:1}", "~gone=null", "e=null"]]]


def test_range_choice_and_glob_expand(context):
    launcher = FakeLauncher()
    make_sweeper(context, launcher).sweep(
        ["n=range(1,4)", "m=choice(a,b)", "algorithm=glob(sklearn_*)"])
    jobs = launcher.batches[0]
    assert len(jobs) == 3 * 2 * 3
    assert {j[0] for j in jobs} == {"n=1", "n=2", "n=3"}
    assert jobs[:3] == [["n=1", "m=a", f"algorithm={name}"]
                        for name in ("sklearn_gpc", "sklearn_gpr", "sklearn_nystroem")]


def test_batches_of_max_batch_size_with_advancing_job_numbers(context):
    launcher = FakeLauncher()
    returns = make_sweeper(context, launcher, max_batch_size=3).sweep(["seed=range(0,7)"])
    assert [idx for _, idx in launcher.calls] == [0, 3, 6]
    assert launcher.batches == [[["seed=0"], ["seed=1"], ["seed=2"]],
                                [["seed=3"], ["seed=4"], ["seed=5"]], [["seed=6"]]]
    assert [len(batch) for batch in returns] == [3, 3, 1]


@pytest.mark.parametrize("size", [None, -1, 10])
def test_one_batch_without_a_limit_or_with_a_large_one(context, size):
    launcher = FakeLauncher()
    make_sweeper(context, launcher, max_batch_size=size).sweep(["seed=0,1,2"])
    assert launcher.calls == [([["seed=0"], ["seed=1"], ["seed=2"]], 0)]


def test_grids_are_a_union_of_products_each_point_once(context):
    launcher = FakeLauncher()
    sweeper = make_sweeper(context, launcher, params={"a": "1,2", "b": "x,y"},
                           grids=[{}, {"a": "3", "b": "x"}, {"a": "1", "c": "z"}])
    sweeper.sweep([])
    assert launcher.batches == [[["a=1", "b=x"], ["a=1", "b=y"], ["a=2", "b=x"], ["a=2", "b=y"],
                                 ["a=3", "b=x"], ["a=1", "b=x", "c=z"], ["a=1", "b=y", "c=z"]]]
    # the command line applies to every grid; points it makes equal run once
    launcher = FakeLauncher()
    sweeper = make_sweeper(context, launcher, params={"a": "1,2", "b": "x,y"},
                           grids=[{}, {"a": "3", "b": "x"}])
    sweeper.sweep(["b=y", "a=3"])
    assert launcher.batches == [[["a=3", "b=y"]]]


def test_narrow_keeps_an_entrys_own_values_of_a_key_the_command_line_gives(context):
    """With narrow, a run's part (split 5) is every grid's points at split 5: an entry kept
    to splits 0, 1 adds nothing there and only its split 1 at split 1; keys an entry does not
    set are replaced as without narrow."""
    grids = [{}, {"m": "1024", "split": "0,1"}, {"m": "512", "split": "range(0,3)"}]

    def points(*arguments, narrow=True):
        launcher = FakeLauncher()
        make_sweeper(context, launcher, params={"set": "a,b", "m": "128", "split": "range(0,10)"},
                     grids=grids, narrow=narrow).sweep(list(arguments))
        return launcher.batches[0] if launcher.batches else []

    assert points("set=b", "split=5") == [["set=b", "m=128", "split=5"]]
    assert points("set=b", "split=1") == [["set=b", "m=128", "split=1"],
                                          ["set=b", "m=1024", "split=1"],
                                          ["set=b", "m=512", "split=1"]]
    assert points("set=b", "split=1,2", "m=512") == [["set=b", "m=512", "split=1"],
                                                     ["set=b", "m=512", "split=2"]]
    assert len(points()) == 2 * 10 + 2 * 2 + 2 * 3
    # without narrow the command line replaces every entry's values: split 5 of each
    assert points("set=b", "split=5", narrow=False) == [["set=b", "m=128", "split=5"],
                                                        ["set=b", "m=1024", "split=5"],
                                                        ["set=b", "m=512", "split=5"]]


def test_narrow_must_be_a_boolean():
    with pytest.raises(HydraException, match=r"hydra\.sweeper\.narrow='yes' must be true or"):
        GroupedSweeper(narrow="yes")


def test_grids_from_yaml_are_read_as_omegaconf_containers(context):
    grids = OmegaConf.create([{"a": "1,2"}, {"a": 5, "split": 0}])
    launcher = FakeLauncher()
    make_sweeper(context, launcher, params={"a": "0"}, grids=grids).sweep([])
    assert launcher.batches == [[["a=1"], ["a=2"], ["a=5", "split=0"]]]


@pytest.mark.parametrize("grids", ["a=1", {"a": "1"}, [{"a": "1"}, "b=2"]])
def test_grids_must_be_a_list_of_mappings(grids):
    with pytest.raises(HydraException, match=r"hydra\.sweeper\.grids=.* must be a list of "
                                             r"mappings like params \(key: values\); write e\.g\."):
        GroupedSweeper(grids=grids)


@pytest.mark.parametrize("size", [0, -2])
def test_max_batch_size_must_be_positive(size):
    with pytest.raises(HydraException, match="max_batch_size"):
        GroupedSweeper(max_batch_size=size)


def test_multirun_yaml_is_written_before_launching(context):
    _, master, sweep_dir = context
    launcher = FakeLauncher(sweep_dir=sweep_dir)
    make_sweeper(context, launcher, max_batch_size=1).sweep(["seed=0,1"])
    assert launcher.saw_multirun_yaml == [True, True]
    saved = OmegaConf.load(sweep_dir / "multirun.yaml")
    assert saved.hydra.sweep.dir == str(sweep_dir)
    assert OmegaConf.to_container(saved) == OmegaConf.to_container(master)


def test_interval_sweep_is_refused_before_anything_runs(context):
    _, _, sweep_dir = context
    launcher = FakeLauncher()
    with pytest.raises(HydraException, match=r"GroupedSweeper.*INTERVAL_SWEEP"):
        make_sweeper(context, launcher).sweep(["seed=0,1", "lam=interval(0.1,1.0)"])
    assert launcher.calls == [] and not sweep_dir.exists()


def test_a_failed_job_raises(context):
    launcher = FakeLauncher()
    with pytest.raises(RuntimeError, match="job failed"):
        make_sweeper(context, launcher, max_batch_size=2).sweep(["fail=1,0", "seed=0,1"])
    assert len(launcher.calls) == 1  # the first batch failed: the second never launched


def test_batches_are_composed_unless_the_launcher_composes_every_job(context):
    args = ["algorithm=exact,nystrom", "dataset=sine1d", "seed=0,1"]
    checking = FakeLauncher(composes_every_job=False)
    make_sweeper(context, checking).sweep(args)
    assert len(checking.batches[0]) == 4

    # a job that does not compose stops the sweep before its batch launches ...
    checking = FakeLauncher(composes_every_job=False)
    with pytest.raises(HydraException, match="no_such_algorithm"):
        make_sweeper(context, checking).sweep(["algorithm=exact,no_such_algorithm"])
    assert checking.calls == []
    # ... unless the launcher composes every job itself (the Dask launcher)
    composing = FakeLauncher(composes_every_job=True)
    make_sweeper(context, composing).sweep(["algorithm=exact,no_such_algorithm"])
    assert composing.batches == [[["algorithm=exact"], ["algorithm=no_such_algorithm"]]]


def test_setup_instantiates_the_configured_launcher(context):
    hydra_context, _, sweep_dir = context
    master = hydra_context.config_loader.load_configuration(
        "config", [f"hydra.sweep.dir={sweep_dir}", "hydra/launcher=basic"], RunMode.MULTIRUN)
    sweeper = GroupedSweeper(max_batch_size=None, params=None)
    sweeper.setup(hydra_context=hydra_context, task_function=lambda cfg: None, config=master)
    assert isinstance(sweeper.launcher, Launcher)
    assert type(sweeper.launcher).__name__ == "BasicLauncher"
    assert sweeper.config is master and sweeper.hydra_context is hydra_context


def test_no_hydra_internal_imports():
    for folder in ("pipeline", "hydra_plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            assert "hydra._internal" not in path.read_text(), path
