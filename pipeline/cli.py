"""Command-line checks made before Hydra starts, so a typo gets a one-line error."""

from __future__ import annotations

import re

from pipeline.app import CONF_DIR

GROUPS = ("algorithm", "dataset", "kernel")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(argv: list[str]) -> str | None:
    """A one-line message for the first unknown config-group choice in ``argv``, else None.

    Plain and comma-separated choices are checked (``algorithm=exact,sgma``); Hydra's sweep
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
