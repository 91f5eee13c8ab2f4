"""The command line: checks made before Hydra starts (so a typo gets a one-line error), then
one job or a sweep through :mod:`pipeline.app`, with the outcome taken from what it returns."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import xarray as xr
import yaml
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from algorithms.errors import InputError
from pipeline import app
from pipeline.clock import mark_command_line
from pipeline.job import CONF_DIR, check_location
from pipeline.prestart import prestart
from pipeline.results import load
from pipeline.sweep import SweepOutcome

GROUPS = ("algorithm", "dataset", "kernel", "hyper", "cluster", "experiment", "size")
MULTIRUN_FLAGS = ("-m", "--multirun")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(argv: list[str]) -> str | None:
    """A one-line message for the first unknown config-group choice in ``argv``, else None.

    Plain and comma-separated choices are checked (``algorithm=a,b``); Hydra's sweep
    functions (``choice(...)``, globs) are left to Hydra.
    """
    for arg in argv:
        match = re.fullmatch(rf"({'|'.join(GROUPS)})=([\w.,\-]+)", arg)
        if not match:
            continue
        group, values = match.groups()
        options = group_options(group)
        for value in values.split(","):
            if value not in options:
                return (f"unknown {group} '{value}'; choose one of: {', '.join(options)} "
                        f"(files in conf/{group}/)")
    return None


def check_size(argv: list[str]) -> str | None:
    """A one-line message when ``size=<variant>`` (other than ``full``) has nothing to reduce:
    without ``experiment=<name>`` it would silently run the default job, and an experiment
    without that variant (``conf/reduced/<name>_<variant>.yaml``) would silently run at full
    size."""
    def values(key: str) -> list[str]:
        return [v for arg in argv if arg.lstrip("+").partition("=")[0] == key
                for v in arg.partition("=")[2].split(",") if v]

    sizes = [s for s in values("size") if s != "full"]
    if not sizes:
        return None
    experiments = values("experiment")
    if not experiments:
        return (f"size={sizes[0]} reduces an experiment; pass experiment=<name> too "
                f"(experiments: {', '.join(group_options('experiment'))})")
    for name in experiments:
        for size in sizes:
            if not (CONF_DIR / "reduced" / f"{name}_{size}.yaml").is_file():
                return (f"experiment {name} has no size={size} variant (no "
                        f"conf/reduced/{name}_{size}.yaml); pass size=full or another "
                        "experiment")
    return None


@functools.cache
def read_yaml(path: Path) -> dict:
    """A config file's YAML as plain data, read by PyYAML's C loader (OmegaConf.load takes
    ~12 ms a file: the command line's checks read every experiment file)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def top_level_keys() -> set[str]:
    """Keys a plain ``key=value`` override may name: config.yaml's, the config groups', and
    the global keys experiments set."""
    keys = set(read_yaml(CONF_DIR / "config.yaml")) | set(GROUPS) | {"hydra"}
    for path in (CONF_DIR / "experiment").glob("*.yaml"):
        keys.update(str(k) for k in read_yaml(path))
    return keys - {"defaults"}


def check_override_syntax(argv: list[str]) -> str | None:
    """A one-line message for the first override that is not ``key=value`` with a known key."""
    known = None
    for arg in argv:
        if arg.startswith("-"):
            continue
        match = re.fullmatch(r"([~+]*)([A-Za-z_][\w\-]*)([\w.\-/@]*)=(.*)", arg, flags=re.S)
        if match is None:
            if re.fullmatch(r"~[\w.\-/@]+", arg):  # Hydra's delete of a key
                continue
            return (f"override {arg!r} is not key=value; pass e.g. lam=0.1 (keys: python -m "
                    "pipeline --cfg job)")
        prefix, head = match.group(1), match.group(2)
        known = known if known is not None else top_level_keys()
        value = match.group(4)
        if head == "sweep" and not match.group(3) and "${" not in value \
                and not value.startswith(("'", '"')):  # checked before Hydra makes the directory
            check_location({"sweep": value, "store_root": "-"})
        if not prefix and head not in known:
            return (f"unknown key {head!r} in {arg!r}; the keys are: {', '.join(sorted(known))}"
                    " (see python -m pipeline --cfg job)")
    return None


def _experiment_sweep_keys(argv: list[str]) -> set[str]:
    """Keys an ``experiment=<name>`` on the command line sweeps in ``hydra.sweeper.params``."""
    keys: set[str] = set()
    for arg in argv:
        if arg.startswith("experiment="):
            path = CONF_DIR / "experiment" / f"{arg.partition('=')[2]}.yaml"
            if path.is_file():
                params = ((read_yaml(path).get("hydra") or {}).get("sweeper") or {}).get("params")
                keys.update(params.keys() if params is not None else ())
    return keys


def force_group_keys(argv: list[str]) -> list[str]:
    """``algorithm.eps=0.1`` → ``++algorithm.eps=0.1`` (likewise for every config group).

    Hydra refuses to set a key the composed group node lacks, so in a sweep over several
    algorithms a plain option of one of them would be refused for the others, and a typo gets
    Hydra's hint to add it with ``+``. Adding-or-overriding lets the product decide: a sweep
    drops an option from the algorithms that do not take it, and an option nobody takes (a
    typo) is one error listing the valid ones. Keys an experiment sweeps keep their plain form
    (Hydra's sweeper matches them to the experiment's by their spelling).
    """
    groups = "|".join((*GROUPS, "cluster"))
    swept = _experiment_sweep_keys(argv)
    out = []
    for arg in argv:
        match = re.match(rf"(({groups})\.[\w.]+)=", arg)
        out.append(f"++{arg}" if match and match.group(1) not in swept else arg)
    return out


def _one_line(message: object) -> str:
    """An error's text on one line, without Hydra's config search path."""
    return " ".join(str(message).split()).split(" Config search path:")[0]


def _error(message: object) -> int:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    return 2


def declares_sweep(overrides: Sequence[str]) -> bool:
    """Whether the ``experiment=<name>`` among ``overrides`` is a sweep (its file sets Hydra's
    ``hydra.mode: MULTIRUN``), which then runs as one without ``-m``."""
    for item in overrides:
        key, _, name = item.lstrip("+").partition("=")
        if key == "experiment" and name:
            path = CONF_DIR / "experiment" / f"{name}.yaml"
            if path.is_file():
                mode = (read_yaml(path).get("hydra") or {}).get("mode")
                return str(mode) == "MULTIRUN"
    return False


def run_sweep(overrides: Sequence[str]) -> xr.Dataset:
    """Run a Hydra sweep from Python, as ``python -m pipeline -m <overrides>`` does (same
    checks, same launcher and cluster settings), and return its consolidated Dataset: one
    entry per sweep point, ``status`` "ok" or "failed" (the error in ``error``). Bad input
    raises :class:`InputError` (one line)."""
    overrides = [str(o) for o in overrides]
    error = (check_override_syntax(overrides) or check_group_choices(overrides)
             or check_size(overrides))
    if error:
        raise InputError(error)
    try:
        outcome = SweepOutcome.from_returns(app.multirun(force_group_keys(overrides)))
    except (HydraException, OmegaConfBaseException) as err:
        raise InputError(_one_line(err)) from None
    return load(outcome.results_path)


def main(argv: list[str]) -> int:
    mark_command_line()  # a sweep's start-up is this process's age when its launcher runs
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        sys.argv = [sys.argv[0], *argv]  # Hydra's own flags (--cfg job, --help, ...)
        app.hydra_main()
        return 0
    try:
        error = check_override_syntax(argv) or check_group_choices(argv) or check_size(argv)
    except InputError as err:
        error = str(err)
    if error:
        return _error(error)
    overrides = force_group_keys([a for a in argv if a not in MULTIRUN_FLAGS])
    try:
        if not any(a in MULTIRUN_FLAGS for a in argv) and not declares_sweep(overrides):
            record = app.run(overrides).return_value
            if record["status"] == "error":
                return _error(record["error"])
            if record["status"] == "failed":  # the job failed, its input was fine
                print(f"error: {_one_line(record['error'])}", file=sys.stderr)
                return 1
            print(app.summary_text(record["result"]))
            return 0
        outcome = SweepOutcome.from_returns(app.multirun(overrides))
    except InputError as err:
        return _error(err)
    except (HydraException, OmegaConfBaseException) as err:  # a bad override
        return _error(err)
    except KeyboardInterrupt:
        print("error: interrupted; rerun the same command to resume (finished jobs are kept "
              "and not fitted again)", file=sys.stderr)
        return 130
    print(outcome.text())
    return 1 if outcome.failed else 0


def console() -> None:
    """The ``sgp-bench`` console script: the same program as ``python -m pipeline``."""
    prestart(sys.argv[1:])
    exit_now(main(sys.argv[1:]))


def exit_now(code: int) -> NoReturn:
    """End the command-line process with ``code`` once its output is flushed, without the
    interpreter's teardown: after a sweep that is ~0.6 s of stopping Dask's event-loop threads
    and finalising objects nobody reads again (every file is written and closed, the cluster
    is closed, its processes are gone)."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
