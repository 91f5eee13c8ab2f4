"""What a built wheel holds: pyproject.toml's package discovery and package-data globs cover
every config directory under conf/, every bundled data file and every module, and no test.

The file list is setuptools' own (its ``build_py`` command as configured by pyproject.toml,
which is what ``pip wheel`` runs), computed without building anything (~0.2 s); its egg-info
goes to a temporary directory, not into the checkout. ``.ci/run`` builds, installs and runs the
real wheel."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> tuple[set[str], set[str]]:
    """The wheel's packages and files (paths relative to the checkout), as setuptools lists
    them."""
    from setuptools.dist import Distribution

    cwd = os.getcwd()
    os.chdir(ROOT)  # setuptools reads pyproject.toml and resolves the globs from here
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setuptools' notes on its beta pyproject support
            dist = Distribution()
            dist.script_name = "setup.py"
            dist.parse_config_files()
            egg_info = dist.get_command_obj("egg_info")
            egg_info.egg_base = str(tmp_path_factory.mktemp("egg-info"))
            build_py = dist.get_command_obj("build_py")
            build_py.ensure_finalized()
            modules = {module[2] for module in build_py.find_all_modules()}
            data = {os.path.join(src, name) for _, src, _, names in build_py.data_files
                    for name in names}
    finally:
        os.chdir(cwd)
    files = {Path(os.path.relpath(ROOT / f, ROOT)).as_posix() for f in modules | data}
    return set(dist.packages), files


def _tracked(top: str, pattern: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob(pattern)
            if p.is_file() and "__pycache__" not in p.parts}


def test_every_config_directory_is_shipped(shipped):
    """A new config group (a directory of yaml files at any depth under conf/) is in the wheel
    without anyone listing it: Hydra's ``hydra/sweeper/grouped`` was once left out."""
    packages, files = shipped
    configs = _tracked("conf", "*.yaml")
    directories = {str(Path(f).parent) for f in configs}
    assert {"conf", "conf/algorithm", "conf/hydra/launcher", "conf/hydra/sweeper"} <= directories
    for directory in directories:
        assert directory.replace("/", ".") in packages, directory
    assert sorted(configs - files) == []


def test_code_and_data_are_shipped_and_tests_are_not(shipped):
    _, files = shipped
    for top in ("algorithms", "pipeline", "hydra_plugins"):
        modules = _tracked(top, "*.py")
        assert modules and sorted(modules - files) == [], top
    data = _tracked("pipeline/data", "*")
    assert "pipeline/data/README.md" in data and "pipeline/data/abalone.data" in data
    for name in ("bike", "keggdirected", "keggundirected"):  # the sets added for issue 50
        assert {f"pipeline/data/{name}.csv.gz", f"pipeline/data/{name}_test_mask.csv.gz",
                f"conf/dataset/{name}.yaml"} <= files, name
    assert sorted(data - files) == []
    assert not [f for f in files if f.startswith(("tests/", "outputs/", "multirun/"))]


def test_torch_is_an_optional_extra_named_by_the_missing_torch_error():
    """The default install has no torch: torch and GPyTorch are only in the ``peers`` extra, the
    one (and the distribution) that the one-line error of a torch device without torch names
    (algorithms.device.import_torch)."""
    import tomllib

    from algorithms.device import DIST, EXTRA

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {dep.split(">")[0].split("[")[0].strip() for dep in project["dependencies"]}
    assert not base & {"torch", "gpytorch"}, base
    extra = {dep.split(">")[0].strip() for dep in project["optional-dependencies"][EXTRA]}
    assert {"torch", "gpytorch"} <= extra and project["name"] == DIST
