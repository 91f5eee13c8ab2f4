"""Config files are data, checked before Hydra composes them: a file under ``conf/`` that a
command composes (``conf/config.yaml``, each group option the command line, config.yaml's
defaults list or a composed file's own defaults list chooses) is read with a strict safe
loader (UTF-8, no duplicate key, no tag such as ``!!python/...``), bounded
(:mod:`pipeline.config.yaml_limits`), and may not run code or widen where the run writes:
no ``hydra.callbacks``, no ``_target_`` outside the product's own launcher and sweeper, no
logging factory (``()``), no logging config, environment or search path of Hydra's, no
``allow_outside_outputs: true`` (typed on the command line only). Each refusal is one line
``conf/<group>/<file>.yaml: <key> …`` naming the file and the key.

A file no command names is not read: one bad file in ``conf/experiment/`` affects only the
commands that name it. :func:`check_composed` is the same rule on the config Hydra composed
(whatever composed it), before any callback, launcher or sweeper is made from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import ChoiceSweep, Override, OverrideType

import pipeline.config as config
from pipeline.config import yaml_limits
from pipeline.config.overrides import parse

# the only _target_ a config file may name: the product's launcher and sweeper
KNOWN_TARGETS = {
    "hydra.launcher._target_": "hydra_plugins.sgp_dask_launcher.dask_launcher.DaskLauncher",
    "hydra.sweeper._target_": "hydra_plugins.sgp_dask_launcher.grouped_sweeper.GroupedSweeper",
}
# keys a config file may not set (→ why); a key under one of them is refused alike
REFUSED_IN_FILES = {
    "hydra.callbacks": "would run code of its own around the jobs",
    "hydra.job_logging": "would configure logging handlers (files written anywhere, classes "
                         "made); choose Hydra's own with hydra/job_logging=<name> on the "
                         "command line",
    "hydra.hydra_logging": "would configure logging handlers (files written anywhere, classes "
                           "made)",
    "hydra.job.env_set": "would set the jobs' environment (LD_PRELOAD, PATH: code of its own); "
                         "pass it on the command line if it is meant",
    "hydra.searchpath": "would add configs the product's checks do not read",
}
CODE_KEYS = {"_target_": "would make an object of any importable callable",
             "()": "would call any importable callable (a logging factory)"}

_verdicts: dict[tuple[str, int, int, tuple[str, ...]], None] = {}


def shown(path: Path) -> str:
    """``conf/experiment/<name>.yaml`` for a file under the product's config directory, else the
    path as given."""
    try:
        return Path(path).relative_to(config.CONF_DIR.parent).as_posix()
    except ValueError:
        return str(path)


def _package(path: Path, text: str) -> str:
    """The package a file's keys go to: its ``# @package`` header, else its group's path."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        match = re.match(r"\s*#\s*@package\s+(\S+)", line)
        if match:
            return "" if match[1] == "_global_" else match[1].removeprefix("_global_.")
    try:
        group = path.parent.relative_to(config.CONF_DIR)
    except ValueError:
        return ""
    return "" if str(group) == "." else group.as_posix().replace("/", ".")


def _walk(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (key path, value) of plain YAML data, depth first."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = (*prefix, str(key))
            yield path, value
            yield from _walk(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*prefix, str(i)))


def code_problem(data: Any, own: str, packages: Sequence[str] = ()) -> str | None:
    """``<key> <why>`` for the first key of ``data`` (a config file's, its keys in package
    ``own``) that runs code or widens where a run writes, else None. The keys Hydra acts on
    are looked for in ``own``, at the top (a file placed in ``_global_``) and in each of
    ``packages`` (where a defaults list places it)."""
    places = list(dict.fromkeys(["", own, *packages]))
    for path, value in _walk(data):
        if path[-1] in CODE_KEYS:
            key = ".".join(p for p in (own, *path) if p)
            if KNOWN_TARGETS.get(key) != value:
                return f"{key}: {value!r} {CODE_KEYS[path[-1]]}"
        for package in places:
            key = ".".join(p for p in (package, *path) if p)
            for refused, why in REFUSED_IN_FILES.items():
                if key == refused or key.startswith(refused + "."):
                    return f"{key} {why}"
            if key == "allow_outside_outputs" and value is not False:
                return (f"allow_outside_outputs: {value!r} would let the run write outside "
                        "outputs/; it is taken from the command line only (type "
                        "allow_outside_outputs=true there)")
    return None


def file_problem(path: Path, packages: Sequence[str] = ()) -> str | None:
    """Why the config file at ``path`` may not be composed (one line naming it), or None:
    too large, deep or an alias bomb, not strict YAML (:func:`~pipeline.config.yaml_limits.
    strict_load`), or a key that runs code (:func:`code_problem`; ``packages``: where a
    defaults list or the command line places it). A file that does not exist is Hydra's to
    report."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns, tuple(packages))
    if key in _verdicts:
        return None
    name = shown(path)
    problem = yaml_limits.yaml_file_problem(path, name)
    if problem is not None:
        return problem
    data, text, problem = yaml_limits.strict_load(path, name)
    if problem is not None:
        return problem
    found = code_problem(data, _package(path, text), packages)
    if found is not None:
        return f"{name}: {found}; a config file may not run code or widen where a run writes"
    _verdicts[key] = None
    return None


# ------------------------------------------------------------------ the files a command composes

def _entries(defaults: Any) -> Iterator[tuple[str, Any]]:
    """(key, option) of each entry of a defaults list (``_self_`` left out)."""
    for entry in defaults if isinstance(defaults, list) else ():
        if isinstance(entry, str):
            if entry != "_self_":
                yield "", entry
        elif isinstance(entry, Mapping):
            yield from ((str(k), v) for k, v in entry.items())


def _options(value: Any) -> list[str] | None:
    """The options an entry or a choice names; None: any of its group's files."""
    values = value if isinstance(value, list) else [value]
    if any(v is not None and not isinstance(v, (str, int, float)) for v in values):
        return None
    names = [str(v) for v in values if v is not None]
    return None if any("${" in n or "*" in n for n in names) else names


def _group_files(group: str, options: list[str] | None) -> list[Path]:
    directory = config.CONF_DIR / group
    if options is None:
        return sorted(directory.glob("*.yaml"))[:yaml_limits.MAX_FILES_A_DIRECTORY]
    return [directory / f"{o}.yaml" for o in options]


def _from_defaults(path: Path, data: Any, chosen: Mapping[str, list[str] | None]
                   ) -> Iterator[tuple[Path, str]]:
    """(file, package it is placed in, "" for its own) for each entry of ``path``'s defaults."""
    here = path.parent.relative_to(config.CONF_DIR).as_posix()
    for key, value in _entries(data.get("defaults") if isinstance(data, Mapping) else None):
        group, _, package = _entry_key(key).partition("@")
        if not group:  # `- name`: an option of this file's own group
            group = here
        elif group.startswith("/"):
            group = group[1:]
        elif here != ".":
            group = f"{here}/{group}"
        if isinstance(value, str) and "${" in value:  # ${experiment}_${size}: each choice
            value = _interpolated(value, chosen)
        for file in _group_files(group, _options(value)):
            yield file, package.removeprefix("_global_").strip(".")


def _entry_key(key: str) -> str:
    """A defaults entry's ``group@package``, its ``override``/``optional`` keywords dropped."""
    return re.sub(r"^((override|optional)\s+)+", "", key.strip())


def _interpolated(value: str, chosen: Mapping[str, list[str] | None]) -> list[str] | None:
    names = re.findall(r"\$\{(\w+)\}", value)
    if re.sub(r"\$\{\w+\}", "", value).count("${") or any(chosen.get(n) is None for n in names):
        return None
    out = [value]
    for name in names:
        out = [o.replace(f"${{{name}}}", c) for o in out for c in chosen[name]]
    return out


def _choice_values(override: Override) -> list[str] | None:
    if override.type == OverrideType.DEL:
        return []
    if not override.is_sweep_override():
        return _options(override.value())
    value = override.value()
    if isinstance(value, ChoiceSweep):
        return _options(list(value.list))
    return None


def command_choices(argv: Sequence[str]) -> dict[str, tuple[list[str] | None, str]]:
    """group → (options, package) that the command line ``argv`` chooses, from its overrides
    as :func:`pipeline.config.overrides.parse` reads them (flags skipped; none where one is
    not key=value: the command line's checks refuse that first)."""
    parsed = parse(argv)
    out: dict[str, tuple[list[str] | None, str]] = {}
    for override in () if isinstance(parsed, str) else parsed:
        group = override.key_or_group
        if group and (config.CONF_DIR / group).is_dir() and "." not in group:
            out[group] = (_choice_values(override), override.package or "")
    return out


def composed_files_problem(argv: Sequence[str]) -> str | None:
    """The first :func:`file_problem` among the files of ``conf/`` a command line
    ``argv`` composes: ``conf/config.yaml``, each group option its defaults list, the command
    line or a composed file's defaults list chooses (an option given by a pattern or an
    interpolation: every file of its group), or None."""
    primary = config.CONF_DIR / "config.yaml"
    problem = file_problem(primary)
    if problem is not None:
        return problem
    defaults = config.read_yaml(primary).get("defaults")
    typed = command_choices(argv)
    chosen = {_entry_key(key).partition("@")[0]: _options(value)
              for key, value in _entries(defaults) if "${" not in str(value)}
    chosen.update({group: options for group, (options, _) in typed.items()})
    queue = [(f, package) for group, (options, package) in typed.items()
             for f in _group_files(group, options)]
    # config.yaml's own choices, but those the command line replaces
    queue += [(f, package) for f, package in _from_defaults(primary, {"defaults": defaults},
                                                            chosen)
              if f.parent.relative_to(config.CONF_DIR).as_posix() not in typed]
    seen: set[tuple[Path, str]] = set()
    while queue:
        path, package = queue.pop(0)
        if (path, package) in seen or not path.is_file():
            continue
        seen.add((path, package))
        problem = file_problem(path, [package] if package else [])
        if problem is not None:
            return problem
        queue += list(_from_defaults(path, config.read_yaml(path), chosen))
    return None


def config_files_problem(argv: Sequence[str]) -> str | None:
    """The one line saying why a config file Hydra may compose for ``argv`` may not be
    composed: those of ``conf/`` it composes (:func:`composed_files_problem`), and every file
    of a ``--config-dir`` or a ``hydra.searchpath`` entry (bounded only: the command line
    refuses them next, :mod:`pipeline.config.flags`), or None."""
    extra = yaml_limits.search_directories(argv, config.CONF_DIR)[1:]
    return composed_files_problem(argv) or yaml_limits.config_directories_problem(extra)


# ---------------------------------------------------------------------- the composed config

def check_composed(cfg: Any) -> None:
    """The rule of the config files on the config Hydra composed, before a callback, the
    launcher or the sweeper is made from it: no ``hydra.callbacks``, the product's own
    launcher and sweeper; raises InputError (one line naming the key)."""
    from omegaconf import OmegaConf

    from algorithms.errors import InputError

    hydra = cfg.hydra
    callbacks = OmegaConf.to_container(hydra.callbacks, resolve=False) \
        if hydra.get("callbacks") else {}
    for name, node in (callbacks or {}).items():
        target = node.get("_target_") if isinstance(node, Mapping) else node
        raise InputError(f"hydra.callbacks.{name} ({target}) would run code of its own around "
                         "the jobs, past the product's checks; remove it from the config or "
                         "command that sets it")
    for key, known in KNOWN_TARGETS.items():
        node = OmegaConf.select(cfg, key.rsplit(".", 1)[0], default=None)
        target = None if node is None else OmegaConf.to_container(node, resolve=False).get(
            "_target_")
        if target is not None and target != known:
            raise InputError(f"{key}={target} would run another {key.split('.')[1]} than the "
                             f"product's ({known}); remove it from the config that sets it")

