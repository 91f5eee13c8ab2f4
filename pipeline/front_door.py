"""``sgp-bench <command> …``: one front door to the product's programs.

``sgp-bench run key=value …`` runs one job and ``sgp-bench sweep key=a,b …`` a sweep (Hydra's
override syntax: the same as ``python -m pipeline`` and ``python -m pipeline -m``);
``report``, ``publish``, ``export`` and ``compare`` take paths (argparse: ``sgp-bench publish
--help``); ``bench`` runs the FLOP-rate benchmark (Hydra's syntax). ``sgp-bench --help`` lists
the commands on one screen. The older forms keep working as aliases: ``python -m pipeline…``,
and ``sgp-bench key=value …`` / ``sgp-bench -m …`` (a first argument that is an override or a
flag is a job's or a sweep's command line, as before). Imports stay light until a command is
chosen: the help and tab completion load neither numpy nor Dask.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

# command: (module whose main(argv) -> int runs it, what it does, an example)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("pipeline.cli", "run one job (Hydra overrides)",
            "sgp-bench run algorithm=<name> dataset=abalone lam=0.1"),
    "sweep": ("pipeline.cli", "run a sweep on a Dask cluster (Hydra's -m syntax)",
              "sgp-bench sweep algorithm=<a>,<b> dataset=abalone sweep=grid"),
    "report": ("pipeline.report.build", "a sweep's tables and figures",
               "sgp-bench report outputs/grid/results.zarr"),
    "publish": ("pipeline.publish.cli", "a publication folder from a sweep or its legs",
                "sgp-bench publish outputs/grid/results.zarr --reference <name> --out outputs/pub"),
    "export": ("pipeline.export", "a sweep's results as CSV or Parquet",
               "sgp-bench export outputs/grid/results.zarr outputs/grid/export/table.csv"),
    "compare": ("pipeline.results.compare", "two result files, variable by variable",
                "sgp-bench compare a/result.nc b/result.nc"),
    "bench": ("pipeline.bench.flops", "the FLOP-rate benchmark (Hydra overrides)",
              "sgp-bench bench"),
}
SWEEP_FLAG = "-m"


def help_text() -> str:
    """The commands on one screen."""
    width = max(map(len, COMMANDS))
    lines = ["usage: sgp-bench <command> [arguments]", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what, _) in COMMANDS.items()]
    lines += ["", "examples:"] + [f"  {example}" for _, _, example in COMMANDS.values()]
    lines += ["", "sgp-bench run --help lists every key and config group of a job;",
              "sgp-bench <command> --help the arguments of the others.",
              "sgp-bench key=value ... and python -m pipeline ... still run a job (-m: a sweep)."]
    return "\n".join(lines)


def is_legacy(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a job's or a sweep's command line in the older form: its first
    argument an override (``key=value``, ``+key=…``, ``~key``) or a flag (``-m``, ``--cfg``,
    ``-sc``…), none at all being the default job."""
    if not argv:
        return True
    first = argv[0]
    return "=" in first or first.startswith(("-", "~", "+")) and first not in ("-h", "--help")


def job_argv(command: str, rest: Sequence[str]) -> list[str]:
    """The ``python -m pipeline`` arguments of ``sgp-bench run|sweep rest``."""
    return [SWEEP_FLAG, *rest] if command == "sweep" else list(rest)


def completion_line(line: str) -> str:
    """``COMP_LINE`` (bash's line being completed) as the older form Hydra's completion reads:
    ``sgp-bench run a=…`` → ``sgp-bench a=…``, ``sgp-bench sweep a=…`` → ``sgp-bench -m
    a=…``; any other line unchanged."""
    words = line.split(" ")
    if len(words) > 2 and words[1] in ("run", "sweep"):
        return " ".join([words[0], *job_argv(words[1], words[2:])])
    return line


def dispatch(argv: Sequence[str]) -> tuple[str, Callable[[list[str]], int] | None, list[str]]:
    """(what runs, its main or None for a job's program, its arguments) for ``argv``."""
    if is_legacy(argv):
        return "job", None, list(argv)
    command, rest = argv[0], list(argv[1:])
    if command in ("-h", "--help"):
        return "help", None, []
    if command not in COMMANDS:
        return "unknown", None, [command]
    if command in ("run", "sweep"):
        return "job", None, job_argv(command, rest)
    return command, importlib.import_module(COMMANDS[command][0]).main, rest


def main(argv: Sequence[str] | None = None) -> int:
    """``sgp-bench``'s commands other than a job's: the help, an unknown command (one line,
    exit 2), or the command's own main. A job (``run``, ``sweep``, the older form) is run by
    :func:`console`, in the watched child process."""
    kind, entry, rest = dispatch(sys.argv[1:] if argv is None else argv)
    if kind == "help":
        print(help_text())
        return 0
    if kind == "unknown":
        print(f"error: sgp-bench {rest[0]}: no such command; choose one of "
              f"{', '.join(COMMANDS)} (sgp-bench --help), or give a job's overrides "
              "(sgp-bench run key=value ...)", file=sys.stderr)
        return 2
    if kind == "bench":  # a Hydra main: it reads its overrides from sys.argv
        sys.argv = ["sgp-bench bench", *rest]
        entry()
        return 0
    return entry(rest)


def console() -> None:
    """The ``sgp-bench`` console script (pyproject's ``[project.scripts]``)."""
    line = os.environ.get("COMP_LINE")
    if line is not None and completion_line(line) != line:  # Hydra's completion reads it
        os.environ["COMP_LINE"] = completion_line(line)
        os.environ["COMP_POINT"] = str(len(os.environ["COMP_LINE"]))
    kind, _, rest = dispatch(sys.argv[1:])
    if kind == "job":
        from pipeline.cli import console as job_console

        sys.argv = [sys.argv[0], *rest]
        job_console()
        return
    try:
        code = main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:  # its reader left (`sgp-bench --help | head -1`): not a fault
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
