"""YAML input is size- and depth-bounded (issue 51, class 4): an alias bomb ("billion laughs"),
a file nested too deep or too large, as an experiment file of a ``--config-dir``, a
``hydra.searchpath`` entry or ``conf/`` itself, or as a run's record, is refused quickly in one
line naming the file, before Hydra or OmegaConf expands it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from algorithms.errors import InputError
from pipeline import cli
from pipeline.config import CONF_DIR, yaml_limits
from pipeline.config.yaml_limits import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    config_directories_problem,
    load_yaml,
    search_directories,
    yaml_problem,
)


def bomb(levels: int = 9) -> str:
    """A billion laughs: ``levels`` anchors, each a list of nine aliases of the one before."""
    lines = ["# @package _global_", "a0: &a0 [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join([*lines, "lam: 0.1"]) + "\n"


def deep(levels: int) -> str:
    """A mapping holding lists nested to ``levels`` levels in all."""
    return "x: " + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "\n"


def test_the_limits_hold_the_shipped_configs_with_room():
    assert config_directories_problem([CONF_DIR]) is None
    assert MAX_YAML_BYTES >= 100 * max(p.stat().st_size for p in CONF_DIR.rglob("*.yaml"))


CASES = {
    "billion laughs": (bomb(), f"expands to more than {MAX_YAML_NODES} nodes through its "
                               "aliases (*name, line 7)"),
    "twenty levels of laughs": (bomb(20), "expands to more than"),
    "a merge key": ("base: &b {a: 1, b: 2}\nmerged:\n  <<: *b\n  c: 3\n", None),
    "at the depth limit": (deep(MAX_YAML_DEPTH), None),
    "past the depth limit": (deep(MAX_YAML_DEPTH + 1), "nests mappings or lists deeper than "
                                                       f"{MAX_YAML_DEPTH} levels"),
    "compact nested lists": ("- " * 5000 + "x\n", "nests mappings or lists deeper than"),
    "too large": ("x: " + "y" * MAX_YAML_BYTES + "\n", f"more than the {MAX_YAML_BYTES} a YAML"),
    "not YAML": ("x: [unclosed\n", None),  # left to the reader's own message
}


@pytest.mark.parametrize("case", list(CASES))
def test_bombs_deep_and_large_files_get_one_line(case):
    text, problem = CASES[case]
    start = time.perf_counter()
    found = yaml_problem(text, "some.yaml")
    assert time.perf_counter() - start < 2
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith("some.yaml ") and problem in found, found
        assert "\n" not in found


def test_load_yaml_refuses_before_building(tmp_path):
    path = tmp_path / "record.yaml"
    path.write_text(bomb())
    with pytest.raises(InputError, match=f"^{path} expands to more than"):
        load_yaml(path)
    path.write_text("a: 1\n")
    assert load_yaml(path) == {"a": 1}


def test_a_fifo_is_not_read(tmp_path):
    import os

    fifo = tmp_path / "experiment" / "x.yaml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    assert config_directories_problem([tmp_path]) == (
        f"{fifo} is not a regular file; a YAML file read here must be one")


def test_the_search_path_of_a_command_line():
    argv = ["--config-dir", "/a", "-cd=/b", "--config-path=/c", "-cp", "/d",
            "hydra.searchpath=[file:///e,pkg://x.y,'/f']", "seed=1"]
    assert search_directories(argv, "/conf") == [Path(p) for p in
                                                 ("/conf", "/a", "/b", "/c", "/d", "/e", "/f")]


@pytest.fixture
def bomb_dir(tmp_path) -> Path:
    (tmp_path / "cfg" / "experiment").mkdir(parents=True)
    (tmp_path / "cfg" / "experiment" / "bomb.yaml").write_text(bomb())
    return tmp_path / "cfg"


@pytest.mark.parametrize("args", [
    ["--config-dir", "{dir}", "experiment=bomb"],
    ["--cfg", "job", "--config-dir={dir}", "experiment=bomb"],
    ["-m", "hydra.searchpath=[file://{dir}]", "experiment=bomb", "dry_run=true"],
])
def test_an_alias_bomb_experiment_is_refused_in_one_line(tmp_path, bomb_dir, run_cli, args):
    start = time.perf_counter()
    ran = run_cli(tmp_path, *[a.format(dir=bomb_dir) for a in args])
    assert time.perf_counter() - start < 60  # before: OmegaConf expanding 10⁹ nodes
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        f"error: {bomb_dir / 'experiment' / 'bomb.yaml'} expands to more than {MAX_YAML_NODES} "
        "nodes through its aliases (*name, line 7); write the values out, or use "
        "interpolations (${...})"]


def test_a_bomb_in_conf_itself_is_refused(tmp_path, monkeypatch):
    """conf/experiment/<bomb>.yaml: the check covers the shipped directory too (a copy of it
    here, so that conf/ stays untouched), for the commands that name it; the others do not
    read it (tests/test_untrusted_config.py)."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "experiment" / "bomb.yaml").write_text(bomb())
    monkeypatch.setattr("pipeline.config.CONF_DIR", conf)
    problem = cli.config_files_problem(["experiment=bomb"])
    assert problem is not None and problem.startswith("conf/experiment/bomb.yaml expands to ")
    assert cli.config_files_problem(["experiment=zhang2001"]) is None
    from pipeline import app

    monkeypatch.setattr(app, "CONF_DIR", conf)
    with pytest.raises(InputError, match="bomb.yaml expands to more than"):
        app.run(["experiment=bomb"])
    assert yaml_limits._checked  # verdicts kept for the process
