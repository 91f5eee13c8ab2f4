"""Hydra's own command-line flags (``--cfg``, ``--info``, ``--config-dir``, ``-m`` …), read
as Hydra's parser reads them (its abbreviations and ``--flag=value`` forms included), so that
no flag leads around the product's checks: each flag is either passed on after the same
checks as a plain command line, or refused in one line that says what to use instead.

- ``-m``/``--multirun``: a sweep; ``-r``/``--run``: one job (the default, the flag is
  dropped).
- ``--help``: the product's help; ``--hydra-help``, ``--version``, ``-sc``: Hydra's text.
- ``--cfg``, ``--resolve``, ``--package``, ``--info``: Hydra prints the composed config or
  its own information, once the overrides passed the checks a job gets before it runs.
- ``--config-path``, ``--config-name``, ``--config-dir``, ``--experimental-rerun``: refused;
  the product composes ``conf/config.yaml`` (its checks read ``conf/``), and a rerun is the
  same command again.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass


def _refused(message: str) -> Exception:
    """The one-line refusal (:class:`algorithms.errors.InputError`), imported only when one is
    raised: reading a plain command line (``--help``, shell completion) loads no numerics."""
    from algorithms.errors import InputError

    return InputError(message)


# flag dest (Hydra's parser) → why it is refused and what to use instead
REFUSED = {
    "config_path": "--config-path/-cp would compose another primary config than "
                   "conf/config.yaml, which the product's checks do not read",
    "config_name": "--config-name/-cn would compose another config than conf/config.yaml, "
                   "which the product's checks do not read",
    "config_dir": "--config-dir/-cd would add configs the product's checks do not read",
    "experimental_rerun": "--experimental-rerun would run a pickled config past the "
                          "product's checks",
}
INSTEAD = {
    "experimental_rerun": "rerun the same command line (finished jobs are kept and not "
                          "fitted again; a job's overrides are in its .hydra/overrides.yaml)",
}
DEFAULT_INSTEAD = ("put the settings in conf/experiment/<name>.yaml and pass experiment=<name>, "
                   "or pass them as key=value overrides")

# flags that print and run nothing (Hydra's rendering), in the order Hydra's parser has them
SHOW = ("cfg", "resolve", "package", "info")


@dataclass(frozen=True)
class CommandLine:
    """A command line as Hydra reads it: its overrides and the flags the product acts on."""

    overrides: tuple[str, ...]
    multirun: bool = False
    help: bool = False       # the product's --help
    hydra_only: bool = False  # --hydra-help, shell completion: Hydra's own text
    printed: bool = False    # --version: printed by the parser, nothing else to do
    cfg: str | None = None
    resolve: bool = False
    package: str | None = None
    info: str | None = None

    @property
    def shows(self) -> bool:
        """Whether Hydra prints a config or information instead of running (``--cfg`` …)."""
        return self.cfg is not None or self.info is not None or self.resolve \
            or self.package is not None

    def hydra_argv(self, overrides: Sequence[str]) -> list[str]:
        """Hydra's command line for a ``--cfg``/``--info`` … call with ``overrides``."""
        argv = ["--multirun"] if self.multirun else []
        argv += ["--cfg", self.cfg] if self.cfg is not None else []
        argv += ["--resolve"] if self.resolve else []
        argv += ["--package", self.package] if self.package is not None else []
        argv += [f"--info={self.info}"] if self.info is not None else []
        return [*argv, *overrides]


class _Stop(Exception):
    """argparse's exit (``--version`` after printing it)."""


INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def hydra_parser() -> argparse.ArgumentParser:
    """Hydra's command-line parser as Hydra 1.3 builds it (``get_args_parser`` in Hydra's
    private ``utils``; tests/test_command_line_paths.py holds the two equal): the
    same flags, abbreviations and ``--flag=value`` forms, whose errors are one
    :class:`InputError` line."""
    from hydra import __version__

    parser = argparse.ArgumentParser(add_help=False, prog="python -m pipeline")
    parser.add_argument("--help", "-h", action="store_true")
    parser.add_argument("--hydra-help", action="store_true")
    parser.add_argument("--version", action="version", version=f"Hydra {__version__}")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    parser.add_argument("--resolve", action="store_true")
    parser.add_argument("--package", "-p")
    parser.add_argument("--run", "-r", action="store_true")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--shell-completion", "-sc", action="store_true")
    parser.add_argument("--config-path", "-cp")
    parser.add_argument("--config-name", "-cn")
    parser.add_argument("--config-dir", "-cd")
    parser.add_argument("--experimental-rerun")
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=INFO_CHOICES)

    def error(message: str):
        raise _refused(f"{message} (Hydra's flags: python -m pipeline --hydra-help; "
                         "overrides are key=value)")

    def stop(status: int = 0, message: str | None = None):
        raise _Stop(status)

    parser.error = error  # type: ignore[method-assign]
    parser.exit = stop  # type: ignore[method-assign]
    return parser


def read_command_line(argv: Sequence[str]) -> CommandLine:
    """``argv`` as Hydra's parser reads it; a refused flag or one Hydra's parser does not take
    raises :class:`InputError` (one line)."""
    argv = [str(a) for a in argv]
    if not any(a.startswith("-") for a in argv):  # the common case: overrides only
        return CommandLine(tuple(argv))
    try:
        args = hydra_parser().parse_intermixed_args(argv)
    except _Stop:  # --version, printed
        return CommandLine((), printed=True)
    for dest, why in REFUSED.items():
        if getattr(args, dest) is not None:
            raise _refused(f"{why}; {INSTEAD.get(dest, DEFAULT_INSTEAD)}")
    if args.run and args.multirun:
        raise _refused("--run/-r and --multirun/-m together; pass -m for a sweep, nothing "
                         "for one job")
    if (args.resolve or args.package is not None) and args.cfg is None and not args.help:
        raise _refused("--resolve and --package/-p go with --cfg; pass e.g. --cfg job "
                         "--resolve (or --cfg job --package algorithm)")
    if args.cfg is not None and args.info is not None:
        raise _refused("--cfg and --info together; pass one of them")
    if (args.cfg is not None or args.info is not None) and (args.multirun or args.run):
        raise _refused(f"--{'cfg' if args.cfg is not None else 'info'} shows one job's "
                         "config and runs nothing; drop -m/-r (a sweep's points: -m … "
                         "dry_run=true)")
    overrides = tuple(args.overrides)
    if args.hydra_help or args.shell_completion:
        return CommandLine(overrides, hydra_only=True)
    if args.help:
        return CommandLine(overrides, multirun=args.multirun, help=True)
    return CommandLine(overrides, multirun=args.multirun, cfg=args.cfg, resolve=args.resolve,
                       package=args.package, info=args.info)
