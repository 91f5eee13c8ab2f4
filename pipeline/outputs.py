"""Every directory a run writes lies under the working directory's ``outputs/``.

A sweep's directory (``sweep=``, or ``hydra.sweep.dir``), a single job's (``hydra.run.dir``)
and the dataset stores (``store_root``) are checked before anything is made: each must resolve
(symlinks followed, ``..`` taken) to a path inside ``<cwd>/outputs/``. The opt-out is the
config key ``allow_outside_outputs=true``, given on the command line. The reports and
published folders are checked by their commands: their default directory must lie there too,
and an ``--out`` given explicitly is the user's choice (the opt-out for them).
"""

from __future__ import annotations

import os
from pathlib import Path

from algorithms.errors import InputError

OPT_OUT = "allow_outside_outputs"


def outputs_root() -> Path:
    """``<working directory>/outputs``, resolved."""
    return (Path.cwd() / "outputs").resolve()


def under_outputs(path: str | os.PathLike) -> bool:
    """Whether ``path`` resolves to a path strictly inside :func:`outputs_root`."""
    root = outputs_root()
    return root in Path(path).expanduser().resolve().parents


def check_under_outputs(path: str | os.PathLike, what: str, opt_out: str) -> None:
    """Raise InputError (one line naming ``what``, the path it resolves to, the rule and
    ``opt_out``) unless ``path`` lies inside the working directory's ``outputs/``."""
    if under_outputs(path):
        return
    raise InputError(f"{what}={path} resolves to {Path(path).expanduser().resolve()}, outside "
                     f"{outputs_root()}: a run writes only under the working directory's "
                     f"outputs/; pass a path under outputs/, or {opt_out} to write there")


def check_run_directories(config, mode: str) -> None:
    """The directories a job (``mode`` "run") or a sweep ("sweep") of the composed
    ``config`` writes, checked by :func:`check_under_outputs` unless
    ``allow_outside_outputs`` is true: ``hydra.<mode>.dir`` and ``store_root``."""
    if _allowed(config):
        return
    check_under_outputs(str(config.hydra[mode].dir), f"hydra.{mode}.dir", f"{OPT_OUT}=true")
    check_store_root(config)


def check_store_root(config) -> None:
    """``store_root`` of a job's config under outputs/ (unless ``allow_outside_outputs``)."""
    root = config["store_root"]
    if isinstance(root, str) and root.strip() and not _allowed(config):  # else: a bad value,
        check_under_outputs(root, "store_root", f"{OPT_OUT}=true")  # said by pipeline.config.keys


def _allowed(config) -> bool:
    value = config.get(OPT_OUT, False) if hasattr(config, "get") else False
    if not isinstance(value, bool):
        raise InputError(f"{OPT_OUT}={value!r} must be true or false; pass "
                         f"{OPT_OUT}=true to let a run write outside outputs/")
    return value
