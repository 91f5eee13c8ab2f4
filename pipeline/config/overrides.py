"""Checks of the command line's overrides made before Hydra starts, so that a typo gets a
one-line error, and the one rewrite the product makes of them (``algorithm.eps=…`` →
``++algorithm.eps=…``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.config import CONF_DIR, GROUPS, group_options, read_yaml, top_level_keys
from pipeline.job.validate import check_sweep_name


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
            check_sweep_name(value)
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

