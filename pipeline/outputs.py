"""Every directory a run writes lies under the working directory's ``outputs/``.

A sweep's directory (``sweep=``, or ``hydra.sweep.dir``), a single job's (``hydra.run.dir``),
each job's Hydra record (``hydra.output_subdir``, under the job's directory), the files of
the logging handlers (``hydra.job_logging``, ``hydra.hydra_logging``) and the dataset stores
(``store_root``) are checked before anything is made: each must resolve (symlinks followed,
``..`` taken) to a path inside ``<cwd>/outputs/``. The opt-out is the config key
``allow_outside_outputs=true``, typed on the command line (a config file may not set it,
:mod:`pipeline.config.untrusted`; a replayed record may not either, :mod:`pipeline.config.
writes`). The reports and
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


def check_under_outputs(path: str | os.PathLike, what: str, opt_out: str,
                        value: object = None) -> None:
    """Raise InputError (one line naming ``what``, its ``value`` (default: ``path``), the
    path it resolves to, the rule and ``opt_out``) unless ``path`` lies inside the working
    directory's ``outputs/``."""
    try:
        if under_outputs(path):
            return
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as err:  # a name too long, a loop of links
        resolved = f"a path that cannot be resolved ({err})"
    raise InputError(f"{what}={path if value is None else value} resolves to {resolved}, "
                     f"outside {outputs_root()}: a run writes only under the working "
                     f"directory's outputs/; pass a path under outputs/, or {opt_out} to "
                     "write there")


def check_run_directories(config, mode: str) -> None:
    """The directories a job (``mode`` "run") or a sweep ("sweep") of the composed
    ``config`` writes, checked by :func:`check_under_outputs` unless
    ``allow_outside_outputs`` is true: ``hydra.<mode>.dir``, ``store_root``, each job's
    ``hydra.output_subdir`` and the logging handlers' files (:func:`log_files`)."""
    if _allowed(config):
        return
    check_under_outputs(str(config.hydra[mode].dir), f"hydra.{mode}.dir", f"{OPT_OUT}=true")
    check_store_root(config)
    job_dir = Path(str(config.hydra[mode].dir))
    if mode == "sweep":  # a link among the job directories is named as such, not by a file
        check_job_links(Path(os.path.abspath(job_dir)))  # that would go through it
        job_dir = job_dir / "jobs" / "<hash>"
    subdir = config.hydra.get("output_subdir")
    if subdir is not None:
        check_under_outputs(job_dir / str(subdir), "hydra.output_subdir", f"{OPT_OUT}=true",
                            subdir)
    for key, filename in log_files(config, job_dir):
        check_under_outputs(filename, key, f"{OPT_OUT}=true")


def log_files(config, job_dir: Path) -> list[tuple[str, str]]:
    """``(key, file)`` of each logging handler of the composed ``config``'s
    ``hydra.job_logging`` and ``hydra.hydra_logging`` that names a file, resolved as for a job
    in ``job_dir`` (its ``${hydra.runtime.output_dir}``); one that does not resolve raises
    InputError (one line)."""
    from omegaconf import OmegaConf, open_dict, read_write
    from omegaconf.errors import OmegaConfBaseException

    out = []
    runtime = config.hydra.runtime
    before = OmegaConf.to_container(runtime, resolve=False).get("output_dir")
    with read_write(runtime), open_dict(runtime):
        runtime.output_dir = str(job_dir)
        try:
            for part in ("job_logging", "hydra_logging"):
                handlers = OmegaConf.select(config, f"hydra.{part}.handlers", default=None)
                for name in handlers or {}:
                    key = f"hydra.{part}.handlers.{name}.filename"
                    try:
                        filename = OmegaConf.select(config, key, default=None)
                    except OmegaConfBaseException as err:
                        raise InputError(f"{key} does not resolve ({' '.join(str(err).split())})"
                                         "; pass a plain path under outputs/") from None
                    if filename is not None:
                        out.append((key, str(filename)))
        finally:
            runtime.output_dir = before
    return out


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


def _link_refused(link: Path) -> InputError:
    try:
        to = f" (to {os.readlink(link)})"
    except OSError:
        to = ""
    return InputError(f"{link} is a symbolic link{to}: a sweep writes its jobs only into "
                      "directories of its own, never through a link to elsewhere; replace it "
                      "by a directory (or remove it) and rerun the command")


def check_job_links(sweep_dir: Path) -> None:
    """Raise InputError (one line naming the link) where ``<sweep_dir>/jobs`` or a job's
    directory ``jobs/<hash>`` is a symbolic link: the sweep would write its results, records
    and logs wherever the link points. Looked at (``lstat``, the directory entries' types)
    before the sweep makes or opens any job directory; a link is never followed."""
    jobs = Path(sweep_dir) / "jobs"
    if os.path.islink(jobs):
        raise _link_refused(jobs)
    try:
        with os.scandir(jobs) as entries:
            for entry in entries:  # d_type: no stat a job
                if entry.is_symlink():
                    raise _link_refused(Path(entry.path))
    except OSError:  # none yet, or unreadable: the sweep's write check says why
        return
