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


def lookup(config, key: str):
    """The value at dotted ``key`` (list items by index) in plain containers, or None."""
    value = config
    for part in key.split(".") if key else ():
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, Mapping):
            value = value.get(part)
        else:
            return None
    return value


@functools.cache
def read_yaml(path: Path) -> dict:
    """A config file's YAML as plain data, read by PyYAML's C loader (OmegaConf.load takes
    ~12 ms a file: the command line's checks read every experiment file), once its size,
    depth and aliases are checked and it is strict YAML (UTF-8, no key twice, no tag:
    :mod:`pipeline.config.yaml_limits`); raises InputError (one line naming it) else."""
    return load_yaml(path, strict=True) or {}


def _readable(path: Path) -> dict:
    """:func:`read_yaml` of a file no command named, ``{}`` where it is refused: a bad file
    in ``conf/`` is said to the commands that name it (:mod:`pipeline.config.untrusted`)."""
    from algorithms.errors import InputError

    try:
        config = read_yaml(path)
    except InputError:
        return {}
    return config if isinstance(config, dict) else {}


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


def plain_copy(value):
    """A deep copy of plain containers (what ``OmegaConf.to_container`` gives: dicts, lists,
    scalars), ~5× faster than :func:`copy.deepcopy`; anything else by deepcopy."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if type(value) is dict:
        return {k: plain_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [plain_copy(v) for v in value]
    return copy.deepcopy(value)


def complete(config: Mapping[str, Any]) -> dict:
    """A job config with every top-level key ``conf/config.yaml`` declares: those ``config``
    leaves out (a Python caller's hand-built config) take the yaml's value, and so does each
    key of the ``certificate`` block it leaves out. A composed config is returned as it is."""
    defaults = job_defaults()
    if defaults.keys() <= config.keys() and (
            not isinstance(config["certificate"], Mapping)
            or defaults["certificate"].keys() <= config["certificate"].keys()):
        return dict(config)  # composed by Hydra: complete already
    out = {**plain_copy(defaults), **config}
    if isinstance(config.get("certificate"), Mapping):
        out["certificate"] = {**defaults["certificate"], **config["certificate"]}
    return out


def top_level_keys() -> set[str]:
    """Keys a plain ``key=value`` override may name: config.yaml's, the config groups', and
    the global keys the job and sweep experiments set. A benchmark's experiment file (one that
    names its module, ``benchmark: <module>``) is read by that module alone: its keys are not
    the product's."""
    keys = set(read_yaml(CONF_DIR / "config.yaml")) | set(GROUPS) | {"hydra"}
    for path in (CONF_DIR / "experiment").glob("*.yaml"):
        config = _readable(path)
        if not config.get("benchmark"):
            keys.update(str(k) for k in config)
    return keys - {"defaults"}


def dotted_keys() -> set[str]:
    """Every key an override may name, spelt in full: the top-level keys, and ``group.option``
    for each option of every config group's files and of config.yaml's blocks
    (``certificate.tol``)."""
    keys = top_level_keys()
    for group in GROUPS:
        if group in ("experiment", "size"):
            continue
        for path in (CONF_DIR / group).glob("*.yaml"):
            keys.update(f"{group}.{k}" for k in _readable(path) if k not in ("defaults", "name"))
    for key, value in read_yaml(CONF_DIR / "config.yaml").items():
        if isinstance(value, dict) and key not in ("hydra",):
            keys.update(f"{key}.{k}" for k in value)
    return keys


def did_you_mean(key: str) -> str:
    """``"did you mean kernel.width? "`` for a mistyped key (difflib against :func:`dotted_keys`,
    and against their last part, so that ``width`` finds ``kernel.width``), or ``""``."""
    import difflib

    keys = sorted(dotted_keys() - {key, key.split(".")[0]})
    close = difflib.get_close_matches(key, keys, n=2, cutoff=0.75)
    if not close:
        leaves: dict[str, list[str]] = {}
        for full in keys:
            leaves.setdefault(full.rsplit(".", 1)[-1], []).append(full)
        leaf = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(leaves), n=1, cutoff=0.8)
        close = sorted(leaves[leaf[0]])[:3] if leaf else []
    return f"did you mean {' or '.join(close)}? " if close else ""

