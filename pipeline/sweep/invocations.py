"""A sweep directory's history: every command that added points to it or ran its jobs.

The manifest (:mod:`pipeline.sweep.manifest`) keeps a list ``invocations``, one record per
distinct command (the same overrides again, in any order, are that command resumed), each
with its overrides, when it first and last ran, the points it named and added, the jobs it ran,
its timings and workers, its config, its swept keys and the file holding Hydra's record of it:
the first command's stays ``multirun.yaml``, a later one's is ``multirun.<n>.yaml`` beside it
(Hydra writes ``multirun.yaml`` anew for every command; the first's is put back). Each manifest
entry names the invocation that added its point (``invocation``: an index into the list). A
manifest written before invocations were kept reads as one invocation made of its ``command``,
``config``, ``swept_keys``, ``timings`` and ``n_workers``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.command import command_text
from pipeline.job.numbers import coordinate_text
from pipeline.results.job_file import job_path, job_status

HYDRA_RECORD = "multirun.yaml"  # Hydra's record of the sweep, written before the launcher runs
HYDRA_RECORD_KEPT = "manifest.multirun.yaml"  # that of the sweep's first command, kept


def record_name(index: int) -> str:
    """The file beside the manifest that holds Hydra's record of invocation ``index``."""
    return HYDRA_RECORD if index == 0 else f"multirun.{index + 1}.yaml"


def invocations(manifest: Mapping | None) -> list[dict]:
    """The invocations of ``manifest`` (module docstring), oldest first; [] for none."""
    if manifest is None:
        return []
    found = manifest.get("invocations")
    if isinstance(found, list) and found:
        return [dict(inv) for inv in found]
    return [{"command": list(manifest.get("command", [])), "started": None,
             "config": manifest.get("config", {}),
             "swept_keys": list(manifest.get("swept_keys", [])),
             "points": len(manifest.get("entries", [])),
             "added": len(manifest.get("entries", [])), "ran": [],
             "timings": manifest.get("timings", {}),
             "n_workers": manifest.get("n_workers", 0), "hydra_record": HYDRA_RECORD}]


# the keys that say what a job's numbers were computed on, which are no sweep point's
# coordinates unless swept, and their values in a config that does not name them (a sweep
# made before the key existed ran at that value)
RUN_ON = {"device": "cpu", "precision": "float64"}


def ran_at(manifest: Mapping, key: str) -> set[str]:
    """The values of ``key`` (one of :data:`RUN_ON`) that the points of ``manifest`` were
    run at: each from the config of the invocation that added it, else the manifest's
    config, else the key's default."""
    records = invocations(manifest)
    fallback = manifest.get("config")
    out = set()
    for entry in manifest.get("entries", []):
        index = entry_invocation(entry)
        config = records[index].get("config") if index < len(records) else None
        if not isinstance(config, Mapping) or key not in config:
            config = fallback if isinstance(fallback, Mapping) else {}
        out.add(str(config.get(key, RUN_ON[key])))
    return out


def same_command(a: Sequence[str], b: Sequence[str]) -> bool:
    return sorted(map(str, a)) == sorted(map(str, b))


def invocation_index(records: list[dict], command: Sequence[str]) -> int:
    """The index of the invocation of ``command`` among ``records`` (a new one: its length)."""
    for i, record in enumerate(records):
        if same_command(record.get("command", []), command):
            return i
    return len(records)


def entry_invocation(entry: Mapping) -> int:
    value = entry.get("invocation", 0)
    return value if isinstance(value, int) and value >= 0 else 0


def updated(records: list[dict], index: int, *, command: list[str], config: dict,
            swept: list[str], points: int, added: int, ran: list[str], timings: dict,
            n_workers: int) -> list[dict]:
    """``records`` with invocation ``index`` (a new one if it is their length) recording this
    run of its command."""
    records = [dict(r) for r in records]
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if index == len(records):
        records.append({"command": command, "started": now, "hydra_record": record_name(index),
                        "added": added})
    record = records[index]
    record.update({"command": command, "last_run": now, "config": config, "swept_keys": swept,
                   "points": points, "added": max(int(record.get("added", 0)), added),
                   "ran": ran, "timings": timings, "n_workers": n_workers})
    return records


def union_swept(records: list[dict], entries: list[dict], dims: Sequence[str]) -> list[str]:
    """The keys swept by any invocation, and every dim of ``dims`` whose points take more than
    one value: the first command's order, then the others'."""
    keys = [str(k) for r in records for k in r.get("swept_keys", [])]
    varied = [d for d in dims if len({coordinate_text(e["coords"].get(d)) for e in entries}) > 1]
    return list(dict.fromkeys(keys + varied))


def unfinished(sweep_dir: Path, manifest: Mapping) -> tuple[int, int, list[int]]:
    """(points without a finished job, all points, the invocations that added those points)
    of ``manifest``: a job is finished when its result file in ``sweep_dir`` verifies with
    status ok."""
    entries = manifest.get("entries", [])
    status: dict[str, bool] = {}
    left: dict[int, None] = {}
    count = 0
    for entry in entries:
        h = entry["hash"]
        if h not in status:
            found = job_status(job_path(sweep_dir, h))
            status[h] = found is not None and found[0] == "ok"
        if not status[h]:
            count += 1
            left.setdefault(entry_invocation(entry))
    return count, len(entries), sorted(left)


def history_text(sweep_dir: Path, manifest: Mapping) -> str:
    """What a refused command is told of the sweep in ``sweep_dir``: the command that started
    it and how many others added to it, and which points are unfinished with the command(s)
    that resume them (one line)."""
    records = invocations(manifest)
    first = command_text(records[0]["command"]) if records and records[0]["command"] \
        else "(unknown)"
    text = f"started with: {first}"
    if len(records) > 1:
        text += f", and {len(records) - 1} more command(s) since"
    left, total, whose = unfinished(sweep_dir, manifest)
    if not left:
        return f"{text}); all its {total} points are finished"
    commands = [command_text(records[i]["command"]) if i < len(records) else "(unknown)"
                for i in whose]
    return (f"{text}); {left} of its {total} points are unfinished: rerun "
            + " and ".join(commands) + " to resume " + ("it" if left == 1 else "them"))
