"""Bounds on the YAML the product reads, checked before the file is composed or loaded: a config
file (``conf/``, a ``--config-dir``, a ``hydra.searchpath`` entry) or a run's record larger than
:data:`MAX_YAML_BYTES`, nested deeper than :data:`MAX_YAML_DEPTH`, or whose aliases would
expand it to more than :data:`MAX_YAML_NODES` nodes (a "billion laughs": nine anchors of nine
aliases each are 10⁹ nodes once OmegaConf copies them) is refused in one line naming it.

The check walks the parser's events (no object is built), so it takes time and memory in
proportion to the file's text, whatever its aliases would expand to: ~0.2 ms a shipped config
file. Its verdict is kept per file (path, size, modification time) for the process. The checks
return the line (None: fine), as :mod:`pipeline.config.overrides` does, so that Hydra's own
flags need not import the algorithms; :func:`load_yaml` raises it as an ``InputError``.

A config file is also read strictly (:func:`strict_load`): UTF-8, no key given twice, no tag
that makes an object (``!!python/...``); which files a command reads, and what keys they may
set, is :mod:`pipeline.config.untrusted`'s.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

MAX_YAML_BYTES = 1 << 20    # 1 MiB; the largest shipped config file is ~7 KB
MAX_YAML_DEPTH = 64         # nested mappings and lists; the shipped ones reach 6
MAX_YAML_NODES = 100_000    # scalars once every alias is expanded; the shipped ones ≤ ~1000
MAX_FILES_A_DIRECTORY = 5000  # config files checked in one search-path directory

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_checked: dict[tuple[str, int, int], None] = {}


def yaml_problem(data: bytes | str, name: str) -> str | None:
    """The one line (naming ``name``) saying why ``data`` is larger, deeper or expands to more
    nodes than the limits above, or None; a file that is not YAML is left to its reader's own
    message."""
    size = len(data.encode() if isinstance(data, str) else data)
    if size > MAX_YAML_BYTES:
        return (f"{name} has {size} bytes, more than the {MAX_YAML_BYTES} a YAML file read "
                "here may have; shorten it")
    anchors: dict[str, int] = {}
    open_nodes: list[list] = []  # [anchor, nodes so far] of each open mapping or list
    try:
        for event in yaml.parse(data, Loader=_LOADER):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                open_nodes.append([event.anchor, 1])
                if len(open_nodes) > MAX_YAML_DEPTH:
                    return (f"{name} nests mappings or lists deeper than {MAX_YAML_DEPTH} "
                            f"levels (line {event.start_mark.line + 1}); flatten it")
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, nodes = open_nodes.pop()
            elif isinstance(event, yaml.ScalarEvent):
                anchor, nodes = event.anchor, 1
            elif isinstance(event, yaml.AliasEvent):
                anchor, nodes = None, anchors.get(event.anchor, 1)
            else:
                continue
            if anchor is not None:
                anchors[anchor] = nodes
            if open_nodes:
                open_nodes[-1][1] += nodes
            if nodes > MAX_YAML_NODES or (open_nodes and open_nodes[-1][1] > MAX_YAML_NODES):
                return (f"{name} expands to more than {MAX_YAML_NODES} nodes through its "
                        f"aliases (*name, line {event.start_mark.line + 1}); write the values "
                        "out, or use interpolations (${...})")
    except yaml.YAMLError:
        return None  # not YAML: the reader says what is wrong, with the line
    return None


def yaml_file_problem(path: str | os.PathLike, name: str | None = None) -> str | None:
    """:func:`yaml_problem` of the file at ``path`` (read at most one byte past the limit),
    named ``name`` (default: the path)."""
    path = Path(path)
    name = str(path) if name is None else name
    try:
        st = path.stat()
    except OSError:
        return None  # the reader reports a missing or unreadable file
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block its reader
        return f"{name} is not a regular file; a YAML file read here must be one"
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _checked:
        return None
    with open(path, "rb") as f:
        data = f.read(MAX_YAML_BYTES + 1)
    problem = yaml_problem(data, name)
    if problem is None:
        _checked[key] = None
    return problem


class _StrictLoader(_LOADER):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one
    silently; OmegaConf refuses it when Hydra composes the file, with a traceback)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key_node.value!r} is given twice",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def strict_load(path: str | os.PathLike, name: str | None = None) -> tuple[Any, str, str | None]:
    """``(data, text, problem)`` of the YAML file at ``path`` (checked by
    :func:`yaml_file_problem` first): ``problem`` is the one line ``<name>: <why>`` for a file
    that is not UTF-8, not YAML, gives a key twice or has a tag the safe loader does not
    make (``!!python/...``), else None."""
    name = str(path) if name is None else name
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        return None, "", (f"{name}: not UTF-8 text (byte 0x{raw[err.start]:02x} on line "
                          f"{line}); save it as UTF-8")
    try:
        return yaml.load(text, Loader=_StrictLoader), text, None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        why = " ".join(str(getattr(err, "problem", None) or err).split())
        tag = re.search(r"constructor for the tag '([^']*)'", why)
        if tag:
            why = (f"the tag {tag[1].replace('tag:yaml.org,2002:', '!!')} would make an "
                   "object, and a config file is data only; remove the tag")
        elif "given twice" not in why:
            why = f"not YAML: {why}"
        return None, text, f"{name}: {why}{where}"


def load_yaml(path: str | os.PathLike, strict: bool = False):
    """The YAML file at ``path`` as plain data (safe loader); raises ``InputError`` (one
    line) when :func:`yaml_file_problem` finds one, or, ``strict``, when
    :func:`strict_load` does."""
    problem = yaml_file_problem(path)
    if problem is None and strict:
        data, _, problem = strict_load(path)
        if problem is None:
            return data
    if problem is not None:
        from algorithms.errors import InputError  # the algorithms package: only when refusing

        raise InputError(problem)
    return yaml.load(Path(path).read_text(), Loader=_LOADER)


def config_directories_problem(directories: Iterable[str | os.PathLike]) -> str | None:
    """The first :func:`yaml_file_problem` among the ``*.yaml`` / ``*.yml`` files Hydra may
    compose from ``directories`` (its config search path: the primary config directory and its
    groups; at most :data:`MAX_FILES_A_DIRECTORY` files of each), or None."""
    for directory in directories:
        directory = Path(directory)
        if not directory.is_dir():
            continue
        for n, path in enumerate(_config_files(directory)):
            if n >= MAX_FILES_A_DIRECTORY:
                break
            problem = yaml_file_problem(path)
            if problem is not None:
                return problem
    return None


def _config_files(directory: Path) -> Iterable[Path]:
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                yield Path(root) / name


_FLAG_WITH_DIR = ("--config-dir", "-cd", "--config-path", "-cp")
_SEARCHPATH = re.compile(r"^\+{0,2}hydra\.searchpath=(.*)$")


def search_directories(argv: Sequence[str], primary: str | os.PathLike) -> list[Path]:
    """The directories Hydra's config search path will hold for command line ``argv``: the
    ``primary`` config directory, ``--config-dir``/``-cd``, ``--config-path``/``-cp`` and the
    ``file://`` (or plain) entries of a ``hydra.searchpath=[...]`` override."""
    found = [Path(primary)]
    args = list(argv)
    for i, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in _FLAG_WITH_DIR:
            value = value if equals else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                found.append(Path(value))
            continue
        match = _SEARCHPATH.match(arg)
        if match:
            for entry in match.group(1).strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    found.append(Path(entry.removeprefix("file://")))
                elif entry and "://" not in entry:
                    found.append(Path(entry))
    return found
