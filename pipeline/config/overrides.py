"""Checks of the command line's overrides made before Hydra starts, so that a typo gets a
one-line error, and the one rewrite the product makes of them (``algorithm.eps=…`` →
``++algorithm.eps=…``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override, OverrideType
from hydra.errors import HydraException

from pipeline.config import (
    CONF_DIR,
    GROUPS,
    did_you_mean,
    group_options,
    read_yaml,
    top_level_keys,
)

_PARSER = OverridesParser.create()


def override_keys(overrides: Sequence[str]) -> dict[str, str]:
    """``key → value`` of plain ``key=value`` overrides (``+``/``++`` stripped)."""
    out = {}
    for arg in overrides:
        key, equals, value = arg.lstrip("+").partition("=")
        if equals:
            out[key] = value
    return out


def parse(argv: Sequence[str]) -> tuple[Override, ...] | str:
    """``argv``'s overrides as Hydra's parser reads them (flags such as ``-m`` skipped), or a
    one-line message naming the first that is not ``key=value``. Parsed once per command
    line: each check below asks for it."""
    return _parse(tuple(argv))


@functools.lru_cache(maxsize=8)
def _parse(argv: tuple[str, ...]) -> tuple[Override, ...] | str:
    out = []
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            override = _PARSER.parse_override(arg)
        except HydraException:
            key, equals, value = arg.partition("=")
            if equals and key in GROUPS and "" in value.split(","):  # algorithm=sgma,
                return (f"unknown {key} ''; choose one of: {', '.join(group_options(key))} "
                        f"(files in conf/{key}/; {arg!r} has an empty choice)")
            override = None
        if override is None and not arg.isascii():
            key, _, value = arg.partition("=")
            odd = next(c for c in arg if not c.isascii())
            return (f"override {arg!r} has a character Hydra's parser reads only quoted "
                    f"({odd!r}, U+{ord(odd):04X}); quote the value ({key}='{value}'), or type "
                    "numbers in ASCII digits")
        if override is None or not override.key_or_group:
            return (f"override {arg!r} is not key=value; pass e.g. lam=0.1 (keys: python -m "
                    "pipeline --cfg job)")
        out.append(override)
    return tuple(out)  # shared by the checks: not to be changed


def _choices(override: Override) -> list[str]:
    """The values an override gives its key as typed: one, or each of ``a,b`` (Hydra's sweep
    functions such as ``choice(...)``, ``range(...)`` or globs: none, left to Hydra)."""
    if override.value_type is None:
        return []
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    value = override.value()
    if isinstance(value, ChoiceSweep) and value.simple_form:
        return [str(v) for v in override.sweep_string_iterator()]
    return []


def _values(overrides: Sequence[Override], key: str) -> list[str]:
    return [v for o in overrides if o.key_or_group == key and o.package is None
            for v in _choices(o) if v]


def check_group_choices(argv: list[str]) -> str | None:
    """A one-line message for the first unknown config-group choice in ``argv``, else None.

    Plain and comma-separated choices are checked (``algorithm=a,b``); Hydra's sweep
    functions (``choice(...)``, globs) are left to Hydra.
    """
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    for override in overrides:
        group = override.key_or_group
        if group not in GROUPS or override.package is not None \
                or override.type != OverrideType.CHANGE:
            continue
        options = group_options(group)
        for value in _choices(override):
            if value not in options:
                return (f"unknown {group} '{value}'; choose one of: {', '.join(options)} "
                        f"(files in conf/{group}/)")
    return None


def check_size(argv: list[str]) -> str | None:
    """A one-line message when ``size=<variant>`` (other than ``full``) has nothing to reduce:
    without ``experiment=<name>`` it would silently run the default job, and an experiment
    without that variant (``conf/reduced/<name>_<variant>.yaml``) would silently run at full
    size."""
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    sizes = [s for s in _values(overrides, "size") if s != "full"]
    if not sizes:
        return None
    experiments = _values(overrides, "experiment")
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


def check_benchmark(argv: list[str]) -> str | None:
    """A one-line message when ``experiment=<name>`` is a benchmark that its own module runs
    (its file names it as ``benchmark: <module>``): through a job it would silently run the
    default job instead."""
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    for name in _values(overrides, "experiment"):
        path = CONF_DIR / "experiment" / f"{name}.yaml"
        module = read_yaml(path).get("benchmark") if path.is_file() else None
        if module:
            return (f"experiment={name} is a benchmark, not a job or a sweep; run "
                    f"python -m {module} (size=small: its reduced variant)")
    return None


def check_override_syntax(argv: list[str]) -> str | None:
    """A one-line message for the first override that is not ``key=value`` with a known key,
    with the closest valid names (:func:`~pipeline.config.did_you_mean`). ``+key=…`` and
    ``++key=…`` are checked alike: a product key is never added, only set, so an unknown one
    is a typo, not a new key. A config group's options (``algorithm.eps``) are checked when the
    job's config is (the options of the algorithm chosen); ``~key`` is Hydra's to judge."""
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    known = None
    for override in overrides:
        key = override.key_or_group
        head = key.split(".")[0].split("/")[0]
        if head == "sweep" and key == "sweep" \
                and not override.is_sweep_override():  # checked before Hydra makes the directory
            value = override.value()
            if not (isinstance(value, str) and "${" in value):
                # imported here: the keys load the algorithms' contract, which tab completion
                # (this module's other user) must not pay for
                from pipeline.config.keys import check_sweep_name
                check_sweep_name(value if isinstance(value, str) else
                                 override.get_value_element_as_str())
        if override.type == OverrideType.DEL or override.package is not None:
            continue
        known = known if known is not None else top_level_keys()
        if head not in known:
            hint = did_you_mean(key) or f"the keys: {', '.join(sorted(known))}; "
            return (f"unknown key {head!r} in {override.input_line!r}; {hint}"
                    "every key: python -m pipeline --help")
        block = _block(head)
        if block is not None and "." in key and key.split(".", 1)[1] not in block:
            return (f"unknown key {key!r} in {override.input_line!r}; {did_you_mean(key)}"
                    f"{head}'s keys: {', '.join(sorted(block))}")
    return None


def _block(head: str) -> dict | None:
    """config.yaml's value of ``head`` when it is a block of keys of its own (``certificate``;
    not a config group, whose options are checked with the job, nor Hydra's)."""
    if head in GROUPS or head == "hydra":
        return None
    value = read_yaml(CONF_DIR / "config.yaml").get(head)
    return value if isinstance(value, dict) else None


# Hydra's own settings the product does not let a command line change: each one would lead
# around its checks, its launcher or its composition (→ why, and what to pass instead)
HYDRA_REFUSED = {
    "hydra.mode": "is set by -m (a sweep) or by an experiment that declares a sweep; pass -m "
                  "for a sweep",
    "hydra.searchpath": "would add configs the product's checks do not read; put the settings "
                        "in conf/experiment/<name>.yaml and pass experiment=<name>",
    "hydra.callbacks": "would run code of its own around the jobs, past the product's checks; "
                       "run the command without it",
    "hydra.runtime": "is Hydra's record of the run, not a setting; leave it out",
    "hydra.overrides": "is Hydra's record of the command line, not a setting; leave it out",
    "hydra/callbacks": "would run code of its own around the jobs, past the product's checks; "
                       "run the command without it",
}
# config groups of Hydra's whose only accepted option is the product's
HYDRA_GROUPS = {"hydra/launcher": "dask", "hydra/sweeper": "grouped"}


def check_hydra_overrides(argv: list[str]) -> str | None:
    """A one-line message for an override of Hydra's own config (``hydra.*``, ``hydra/*``)
    that would lead around the product (:data:`HYDRA_REFUSED`, another launcher or sweeper
    than the product's), else None. Other ``hydra.*`` keys (its output directories, logging,
    the launcher's and sweeper's options) are Hydra's, and checked where they are used."""
    overrides = parse(argv)
    if isinstance(overrides, str):
        return overrides
    for override in overrides:
        key = override.key_or_group
        for refused, why in HYDRA_REFUSED.items():
            if key == refused or key.startswith((refused + ".", refused + "/")):
                return f"override {override.input_line!r}: {refused} {why}"
        if key in HYDRA_GROUPS and (override.type == OverrideType.DEL or any(
                value != HYDRA_GROUPS[key] for value in _choices(override) or ["?"])):
            kind = key.split("/")[1]
            return (f"override {override.input_line!r}: the product's sweeps run through its "
                    f"{HYDRA_GROUPS[key]} {kind} (checks, cache, results.zarr); leave "
                    f"{key}={HYDRA_GROUPS[key]} (where jobs run: cluster=<name>)")
    return None


def _experiment_sweep_keys(overrides: Sequence[Override]) -> set[str]:
    """Keys an ``experiment=<name>`` on the command line sweeps in ``hydra.sweeper.params``."""
    keys: set[str] = set()
    for name in _values(overrides, "experiment"):
        path = CONF_DIR / "experiment" / f"{name}.yaml"
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
    overrides = parse(argv)
    if isinstance(overrides, str):
        return list(argv)  # Hydra says what is wrong
    swept = _experiment_sweep_keys(overrides)
    forced = {o.input_line for o in overrides
              if o.type == OverrideType.CHANGE and o.package is None
              and "." in o.key_or_group and o.key_or_group.split(".")[0] in GROUPS
              and o.key_or_group not in swept}
    return [f"++{arg}" if arg in forced else arg for arg in argv]


def declares_sweep(overrides: Sequence[str]) -> bool:
    """Whether the ``experiment=<name>`` among ``overrides`` is a sweep (its file sets Hydra's
    ``hydra.mode: MULTIRUN``), which then runs as one without ``-m``."""
    parsed = parse(overrides)
    for name in [] if isinstance(parsed, str) else _values(parsed, "experiment")[:1]:
        path = CONF_DIR / "experiment" / f"{name}.yaml"
        if path.is_file():
            mode = (read_yaml(path).get("hydra") or {}).get("mode")
            return str(mode) == "MULTIRUN"
    return False
