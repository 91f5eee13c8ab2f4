"""A sweep's directory, named before Hydra starts: a new one per unnamed sweep, as Hydra's
``multirun/<date>/<time>``, and ``resume=last`` to rerun the most recent sweep's command.

A sweep named on the command line (``sweep=<name>``), by its experiment (the file's
``sweep:``) or by ``hydra.sweep.dir=`` keeps that directory; resuming is naming it again.
Any other sweep gets ``sweep=<YYYY-MM-DD>/<HH-MM-SS>`` (``outputs/<date>/<time>/``), printed
with its directory as it starts. Every sweep started from a working directory is recorded in
``outputs/last_sweep.json`` (its directory and its command's overrides), which
``resume=last`` reads back.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from algorithms.errors import InputError
from pipeline.atomic import write_text
from pipeline.config import CONF_DIR, GROUPS, read_yaml
from pipeline.config.keys import check_sweep_name
from pipeline.config.overrides import override_keys
from pipeline.config.writes import widening_key
from pipeline.oserrors import os_reason

LAST = "last_sweep.json"  # under the working directory's outputs/
RESUME = "resume"


def _experiment_names_sweep(overrides: Sequence[str]) -> bool:
    name = override_keys(overrides).get("experiment")
    if not name or "," in name:
        return False
    path = CONF_DIR / "experiment" / f"{name}.yaml"
    return path.is_file() and read_yaml(path).get("sweep") is not None


def resumed(overrides: Sequence[str], outputs: Path) -> list[list[str]] | None:
    """The commands (each a list of overrides) ``resume=last`` reruns, or None when the command
    line has no ``resume=``: the last sweep's recorded command, or, where ``merge=true`` added
    other commands' points to its directory, each of its commands with unfinished points
    (:func:`_commands`). One line of error for ``resume=<other>``, for other keys beside it,
    when no sweep was started from here, or for a record that is not trusted
    (:func:`_read_last`, :func:`_sealed`, :func:`_check_replayed`).

    The record is input like any other: each command it leads to gets the checks of a typed
    command line, and one that changes where the run writes or what it runs
    (:data:`pipeline.config.writes.WIDENING`) is replayed only with that override typed again
    beside ``resume=last`` (the user's confirmation)."""
    keys = override_keys(overrides)
    if RESUME not in keys:
        return None
    if keys[RESUME] != "last":
        raise InputError(f"resume={keys[RESUME][:100]!r}: pass resume=last (the most recent "
                         "sweep started here), or name a sweep with -m … sweep=<name>")
    others = [a for a in overrides if not a.lstrip("+").startswith(f"{RESUME}=")
              and a not in ("-m", "--multirun")]
    record = _read_last(outputs)
    manifest = _sealed(record, outputs)
    confirmed = [a for a in others if a in record["overrides"] and widening_key(a)]
    rest = [a for a in others if a not in confirmed]
    if rest:
        command = "python -m pipeline -m " + shlex.join(record["overrides"])
        raise InputError(f"resume=last reruns the last sweep's command as it was ({command}); "
                         f"to change it, run that command with your changes instead of "
                         f"{' '.join(rest)}")
    commands = _commands(record, manifest, outputs)
    for command in commands:
        _check_replayed(command, confirmed)
    return commands


def _check_replayed(command: Sequence[str], confirmed: Sequence[str]) -> None:
    """Raise InputError (one line naming it) for the first override of a replayed ``command``
    that widens where the run writes or what it runs, unless typed again (``confirmed``)."""
    for arg in command:
        key = widening_key(arg)
        if key is not None and arg not in confirmed:
            raise InputError(f"resume=last: the recorded command sets {arg!r} ({key}: where "
                             f"the run writes or what it runs), which outputs/{LAST} may not "
                             f"set alone; to replay it, type it too: python -m pipeline "
                             f"resume=last {shlex.quote(arg)}")


def _commands(record: dict, manifest: dict, outputs: Path) -> list[list[str]]:
    """The commands that resume the recorded sweep: where its directory's manifest holds
    several commands (merges), those that added its unfinished points, oldest first; else
    (one command, every point finished) the recorded one."""
    from pipeline.sweep.invocations import invocations, unfinished

    last = [list(record["overrides"])]
    records = invocations(manifest)
    if len(records) < 2:
        return last
    _, _, whose = unfinished(outputs / record["sweep"], manifest)
    commands = [typed([str(a) for a in records[i]["command"]]) for i in whose
                if i < len(records) and records[i].get("command")]
    return [_checked_command(c) for c in commands] or last


def typed(overrides: Sequence[str]) -> list[str]:
    """A sweep's overrides as the user typed them: the ``++`` the checks force on group keys
    taken off (they force them again)."""
    return [a[2:] if a.startswith("++") and a[2:].split(".")[0] in GROUPS else a
            for a in overrides]


# outputs/last_sweep.json is read as untrusted input: its size, shape and contents bounded
MAX_RECORD_BYTES = 64 * 1024
MAX_RECORD_OVERRIDES = 256
MAX_OVERRIDE_CHARS = 2000
_NAME_IT = "resume by naming the sweep: python -m pipeline -m … sweep=<name>"


def _read_last(outputs: Path) -> dict:
    """``outputs/last_sweep.json``, read as untrusted: a regular file (no link, no FIFO) of
    at most :data:`MAX_RECORD_BYTES`, a JSON object of a plain ``sweep`` name (a directory
    under outputs/, :func:`~pipeline.config.keys.check_sweep_name`) and a list of at most
    :data:`MAX_RECORD_OVERRIDES` overrides, each a ``key=value`` string (no flag) of at most
    :data:`MAX_OVERRIDE_CHARS` characters. Anything else is one line of error."""
    path = outputs / LAST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"resume=last: no sweep was started from {outputs.parent} yet (no "
                         f"outputs/{LAST}); start one with python -m pipeline -m …") from None
    except OSError as err:  # a symbolic link (ELOOP), unreadable
        raise InputError(f"resume=last: outputs/{LAST} cannot be read as a sweep record "
                         f"({os_reason(err)}; a link is not followed); {_NAME_IT}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size if stat.S_ISREG(os.fstat(fd).st_mode) else -1
        data = f.read(MAX_RECORD_BYTES + 1) if 0 <= size <= MAX_RECORD_BYTES else b""
    if not 0 <= size <= MAX_RECORD_BYTES or len(data) > MAX_RECORD_BYTES:
        what = "not a regular file" if size < 0 else f"{max(size, len(data))} bytes, more " \
            f"than the {MAX_RECORD_BYTES} a sweep record may have"
        raise InputError(f"resume=last: outputs/{LAST} is {what}; it is not read; {_NAME_IT}")
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError, JSONDecodeError
        raise InputError(f"resume=last: outputs/{LAST} is unreadable "
                         f"({' '.join(str(err).split())[:200]}); {_NAME_IT}") from None
    problem = _record_problem(record)
    if problem:
        raise InputError(f"resume=last: outputs/{LAST} is not a sweep record ({problem}); "
                         f"{_NAME_IT}")
    return record


def _record_problem(record: object) -> str | None:
    """Why ``record`` is not a sweep record of the shape :func:`record` writes, or None."""
    if not isinstance(record, dict) or set(record) != {"sweep", "overrides"}:
        return "not an object of sweep and overrides"
    if record["sweep"] is None:
        return "its sweep lies outside outputs/, which resume=last does not reach"
    try:
        check_sweep_name(record["sweep"])
    except InputError as err:
        return f"its sweep name is refused: {err}"
    overrides = record["overrides"]
    if not isinstance(overrides, list) or len(overrides) > MAX_RECORD_OVERRIDES:
        return f"its overrides are not a list of at most {MAX_RECORD_OVERRIDES}"
    for arg in overrides:
        if not isinstance(arg, str) or len(arg) > MAX_OVERRIDE_CHARS or "=" not in arg \
                or arg.startswith("-") or not arg.isprintable():
            return (f"override {str(arg)[:80]!r} is not a key=value string of at most "
                    f"{MAX_OVERRIDE_CHARS} characters")
    return None


def _sealed(record: dict, outputs: Path) -> dict:
    """The manifest of the recorded sweep (``outputs/<sweep>/manifest.json``), which must hold
    the recorded command among its commands (the record is written after the sweep's
    manifest, from the same overrides): a record that names no sweep made here, or a command
    no sweep ran, is refused in one line."""
    from pipeline.sweep.invocations import invocations
    from pipeline.sweep.manifest import read_manifest

    where = f"outputs/{record['sweep']}/manifest.json"
    try:
        manifest = read_manifest(outputs / record["sweep"])
    except (OSError, ValueError) as err:  # DamagedFile is a ValueError
        raise InputError(f"resume=last: {where}, which must hold the command of outputs/{LAST}, "
                         f"cannot be read ({' '.join(str(err).split())[:300]}); "
                         f"{_NAME_IT}") from None
    if manifest is None:
        raise InputError(f"resume=last: outputs/{LAST} names sweep {record['sweep']}, which has "
                         f"no {where}; {_NAME_IT}")
    commands = [sorted(typed([str(a) for a in r.get("command") or []]))
                for r in invocations(manifest)]
    if sorted(record["overrides"]) not in commands:  # in any order: the same command
        raise InputError(f"resume=last: outputs/{LAST} does not match {where} (no command of "
                         f"that sweep has its overrides), so it is not replayed; {_NAME_IT}")
    return manifest


def _checked_command(command: list[str]) -> list[str]:
    """A command from a sweep's manifest, bounded as the record's overrides are."""
    problem = _record_problem({"sweep": "x", "overrides": command})
    if problem:
        raise InputError(f"resume=last: a command of the last sweep's manifest.json is refused "
                         f"({problem}); {_NAME_IT}")
    return command


GENERATED: set[str] = set()  # the names this process gave unnamed sweeps


def name_sweep(overrides: Sequence[str], outputs: Path) -> list[str]:
    """``overrides`` with the sweep's directory named: a new ``sweep=<date>/<time>`` unless
    the command line or its experiment names it (``sweep=``, ``hydra.sweep.dir=``, the
    experiment file's ``sweep:``)."""
    overrides = list(overrides)
    keys = override_keys(overrides)
    if "sweep" in keys or "hydra.sweep.dir" in keys or _experiment_names_sweep(overrides):
        return overrides
    stamp = time.strftime("%Y-%m-%d/%H-%M-%S")
    name, n = stamp, 1
    while (outputs / name).exists() or name in GENERATED:  # two sweeps within a second
        n += 1
        name = f"{stamp}-{n}"
    GENERATED.add(name)
    return [*overrides, f"sweep={name}"]


def announce(master) -> None:
    """For a name :func:`name_sweep` gave, how to resume the sweep, printed as it starts."""
    if master.sweep in GENERATED:
        print(f"resume: python -m pipeline resume=last, or the same command with "
              f"sweep={master.sweep}", flush=True)


def record(sweep_dir: Path, master) -> None:
    """The sweep, once its jobs ran (finished, interrupted or stopped with jobs done), in
    ``outputs/last_sweep.json`` for ``resume=last``: its directory under outputs/ (null for
    one outside it, which resume=last refuses) and its overrides as typed (the checks force
    the group keys again), those its manifest records too (:func:`_sealed`). A sweep refused
    before any job ran leaves the record as it was."""
    from pipeline.outputs import outputs_root

    overrides = typed([str(a) for a in master.hydra.overrides.task])
    root, where = outputs_root(), Path(sweep_dir).resolve()
    name = where.relative_to(root).as_posix() if root in where.parents else None
    try:
        write_text(Path.cwd() / "outputs" / LAST,
                   json.dumps({"sweep": name, "overrides": overrides}, indent=1) + "\n")
    except OSError:  # a lost record loses only the shortcut (resume by naming the sweep)
        pass
