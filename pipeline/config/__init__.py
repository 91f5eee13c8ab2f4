"""The config schema: where the Hydra config groups live (``conf/``, shipped with the package),
their names and options, and the top-level keys an override may name.

Every top-level default of a job lives in one place, ``conf/config.yaml``; the options of an
algorithm, dataset, kernel, cluster kind and the certificate are declared in Python tables
(:class:`algorithms.options.Option`) that their yaml files are tested equal to. A job config a
Python caller builds by hand is completed from ``conf/config.yaml`` (:func:`complete`), so the
code reads every key directly and no default is written twice.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.config.yaml_limits import load_yaml

CONF_DIR = Path(__file__).resolve().parent.parent.parent / "conf"
GROUPS = ("algorithm", "dataset", "kernel", "hyper", "cluster", "experiment", "size")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@functools.cache
def read_yaml(path: Path) -> dict:
    """A config file's YAML as plain data, read by PyYAML's C loader (OmegaConf.load takes
    ~12 ms a file: the command line's checks read every experiment file), once its size,
    depth and aliases are checked (:mod:`pipeline.config.yaml_limits`)."""
    return load_yaml(path) or {}


# the config groups a job config may leave out, completed with conf/config.yaml's choice
COMPLETED_GROUPS = ("hyper",)


def default_choice(group: str) -> str | None:
    """The option of config group ``group`` that conf/config.yaml's defaults list chooses."""
    for entry in read_yaml(CONF_DIR / "config.yaml")["defaults"]:
        if isinstance(entry, dict) and group in entry:
            return entry[group]
    return None


@functools.cache
def job_defaults() -> dict:
    """conf/config.yaml's top-level job keys and the choices of :data:`COMPLETED_GROUPS`."""
    config = read_yaml(CONF_DIR / "config.yaml")
    out = {k: v for k, v in config.items() if k not in ("defaults", "hydra")}
    for group in COMPLETED_GROUPS:
        out[group] = read_yaml(CONF_DIR / group / f"{default_choice(group)}.yaml")
    return out


def complete(config: Mapping[str, Any]) -> dict:
    """A job config with every top-level key ``conf/config.yaml`` declares: those ``config``
    leaves out (a Python caller's hand-built config) take the yaml's value, and so does each
    key of the ``certificate`` block it leaves out. A composed config is returned as it is."""
    defaults = job_defaults()
    if defaults.keys() <= config.keys() and (
            not isinstance(config["certificate"], Mapping)
            or defaults["certificate"].keys() <= config["certificate"].keys()):
        return dict(config)  # composed by Hydra: complete already
    out = {**copy.deepcopy(defaults), **config}
    if isinstance(config.get("certificate"), Mapping):
        out["certificate"] = {**defaults["certificate"], **config["certificate"]}
    return out


def top_level_keys() -> set[str]:
    """Keys a plain ``key=value`` override may name: config.yaml's, the config groups', and
    the global keys experiments set."""
    keys = set(read_yaml(CONF_DIR / "config.yaml")) | set(GROUPS) | {"hydra"}
    for path in (CONF_DIR / "experiment").glob("*.yaml"):
        keys.update(str(k) for k in read_yaml(path))
    return keys - {"defaults"}

