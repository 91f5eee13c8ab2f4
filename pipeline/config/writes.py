"""Overrides that run code or widen where a run writes, as the command line gives them.

- Code: a ``_target_`` or a logging factory (``()``), in a key or inside a value
  (``hydra.launcher._target_=…``, ``hydra.job_logging={handlers: {x: {(): …}}}``), and a
  logging handler's ``class``: refused, whatever else the command line says.
- Writes: where a run's files go (:data:`WIDENING`). The directories a run writes are checked
  on the composed config (:func:`pipeline.outputs.check_run_directories`, before anything is
  written), except Hydra's own logging (``hydra.hydra_logging``), which Hydra configures as it
  composes: a file it names is checked here, as typed. ``allow_outside_outputs=true`` typed
  on the command line is the opt-out.
- A command replayed from a record (``resume=last``) may carry none of :data:`WIDENING` unless
  the user types it again (:func:`widening_key`, :mod:`pipeline.sweep.naming`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.config.overrides import parse

OPT_OUT = "allow_outside_outputs"
# keys whose value decides where a run writes, or what it runs around its jobs (a key under
# one of them alike); a config group's choice (hydra/job_logging=…) too
WIDENING = ("allow_outside_outputs", "store_root", "hydra.sweep.dir", "hydra.run.dir",
            "hydra.output_subdir", "hydra.job_logging", "hydra.hydra_logging",
            "hydra.callbacks", "hydra.searchpath", "hydra.job.env_set", "hydra.job.name",
            "hydra/job_logging", "hydra/hydra_logging", "hydra/callbacks")
CODE_KEYS = ("_target_", "()")
LOGGING = ("hydra.job_logging", "hydra.hydra_logging")


def override_key(arg: str) -> str:
    """The key of a ``key=value`` override as typed (``+``/``++``/``~`` and ``@package``
    dropped)."""
    return arg.lstrip("+~").partition("=")[0].split("@")[0].strip()


def widening_key(arg: str) -> str | None:
    """The entry of :data:`WIDENING` that override ``arg`` sets, or None."""
    key = override_key(arg)
    return next((w for w in WIDENING if key == w or key.startswith((w + ".", w + "/"))), None)


def opted_out(argv: Sequence[str]) -> bool:
    """Whether ``argv`` types ``allow_outside_outputs=true``."""
    return any(override_key(a) == OPT_OUT and a.partition("=")[2].strip().lower() == "true"
               for a in argv if not a.startswith("-"))


def _keys(value: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every key path of a parsed override value (a dict or list of dicts) under ``prefix``."""
    out = []
    if isinstance(value, dict):
        for key, inner in value.items():
            path = (*prefix, str(key))
            out += [path, *_keys(inner, path)]
    elif isinstance(value, list):
        for inner in value:
            out += _keys(inner, prefix)
    return out


def check_code_and_log_overrides(argv: Sequence[str]) -> str | None:
    """A one-line message for the first override of ``argv`` that runs code (a ``_target_``,
    a ``()`` factory, a logging handler's ``class``) or names a file for Hydra's own logging
    outside outputs/ (without ``allow_outside_outputs=true`` typed), else None."""
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    opted = opted_out(argv)
    for override in overrides:
        key = override.key_or_group
        value = None if override.is_sweep_override() else override.value()
        for path in [tuple(key.split(".")), *_keys(value, tuple(key.split(".")))]:
            dotted = ".".join(path)
            if path[-1] in CODE_KEYS:
                return (f"override {override.input_line!r}: {dotted} would call any importable "
                        "callable, past the product's checks; run the command without it")
            if dotted.startswith(LOGGING) and path[-1] == "class":
                return (f"override {override.input_line!r}: {dotted} would make a logging "
                        "handler of any class; choose one of Hydra's logging configs "
                        "(hydra/job_logging=<name>) instead")
        if not opted and key.startswith("hydra.hydra_logging"):
            problem = _log_file_problem(override.input_line, key, value)
            if problem:
                return problem
    return None


def _log_file_problem(line: str, key: str, value: Any) -> str | None:
    """Hydra's own logging is configured as Hydra composes (before the composed config is
    checked): a ``filename`` it is given must be a plain path under outputs/ as typed."""
    from pipeline.outputs import outputs_root, under_outputs

    files = [value] if key.endswith(".filename") else []
    if isinstance(value, dict):
        files += [v for path, v in _leaves(value) if path[-1] == "filename"]
    for name in files:
        if not isinstance(name, str) or "${" in name or not under_outputs(name):
            return (f"override {line!r}: hydra.hydra_logging would write its log to {name}, "
                    f"outside {outputs_root()}: a run writes only under the working "
                    f"directory's outputs/; pass a plain path under outputs/, or "
                    f"{OPT_OUT}=true to write there")
    return None


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*prefix, str(k)))]
    return [(prefix, value)] if prefix else []

