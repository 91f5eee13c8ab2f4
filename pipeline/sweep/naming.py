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
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from algorithms.errors import InputError
from pipeline.atomic import write_text
from pipeline.config import CONF_DIR, GROUPS, read_yaml
from pipeline.config.overrides import override_keys

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
    or when no sweep was started from here."""
    keys = override_keys(overrides)
    if RESUME not in keys:
        return None
    if keys[RESUME] != "last":
        raise InputError(f"resume={keys[RESUME]!r}: pass resume=last (the most recent sweep "
                         "started here), or name a sweep with -m … sweep=<name>")
    others = [a for a in overrides if not a.lstrip("+").startswith(f"{RESUME}=")
              and a not in ("-m", "--multirun")]
    record = _read_last(outputs)
    command = "python -m pipeline -m " + shlex.join(record["overrides"])
    if others:
        raise InputError(f"resume=last reruns the last sweep's command as it was ({command}); "
                         f"to change it, run that command with your changes instead of "
                         f"{' '.join(others)}")
    return _commands(record, outputs)


def _commands(record: dict, outputs: Path) -> list[list[str]]:
    """The commands that resume the recorded sweep: where its directory's manifest holds
    several commands (merges), those that added its unfinished points, oldest first; else
    (one command, every point finished, or no readable manifest) the recorded one."""
    from pipeline.sweep.invocations import invocations, unfinished
    from pipeline.sweep.manifest import read_manifest

    last = [list(record["overrides"])]
    sweep_dir = outputs / record["sweep"]
    try:
        manifest = read_manifest(sweep_dir)
    except (OSError, ValueError):  # a damaged manifest (DamagedFile is a ValueError)
        return last  # the recorded command reports the damage
    records = invocations(manifest)
    if len(records) < 2:
        return last
    _, _, whose = unfinished(sweep_dir, manifest)
    commands = [typed([str(a) for a in records[i]["command"]]) for i in whose
                if i < len(records) and records[i].get("command")]
    return commands or last


def typed(overrides: Sequence[str]) -> list[str]:
    """A sweep's overrides as the user typed them: the ``++`` the checks force on group keys
    taken off (they force them again)."""
    return [a[2:] if a.startswith("++") and a[2:].split(".")[0] in GROUPS else a
            for a in overrides]


def _read_last(outputs: Path) -> dict:
    path = outputs / LAST
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"resume=last: no sweep was started from {outputs.parent} yet (no "
                         f"outputs/{LAST}); start one with python -m pipeline -m …") from None
    except (OSError, ValueError) as err:
        raise InputError(f"resume=last: outputs/{LAST} is unreadable ({err}); resume by "
                         "naming the sweep: python -m pipeline -m … sweep=<name>") from None
    if not (isinstance(record, dict) and isinstance(record.get("sweep"), str)
            and isinstance(record.get("overrides"), list)
            and all(isinstance(a, str) for a in record["overrides"])):
        raise InputError(f"resume=last: outputs/{LAST} is not a sweep record; resume by "
                         "naming the sweep: python -m pipeline -m … sweep=<name>")
    return record


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
    ``outputs/last_sweep.json`` for ``resume=last``: its overrides as typed (the checks force
    the group keys again). A sweep refused before any job ran leaves the record as it was."""
    overrides = typed([str(a) for a in master.hydra.overrides.task])
    try:
        write_text(Path.cwd() / "outputs" / LAST,
                   json.dumps({"sweep": str(master.sweep or sweep_dir), "overrides": overrides},
                              indent=1) + "\n")
    except OSError:  # a lost record loses only the shortcut (resume by naming the sweep)
        pass
