"""What a published folder shows beside its tables, drawn from the published table: a
critical-difference diagram per mode and metric (:func:`cd_figures`,
:mod:`pipeline.publish.critical_difference`), every PNG held to :data:`MAX_FIGURE_BYTES`
(:func:`within_figure_limit`), the ``--notes`` file's text (:func:`notes_text`) and the tables
of numbers published elsewhere (``--beside``: :func:`check_beside`, :func:`beside_text`,
:mod:`pipeline.publish.elsewhere`). :mod:`pipeline.publish.folder` writes them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from algorithms.errors import InputError
from pipeline.publish import comparison, ranking
from pipeline.publish.elsewhere import beside_tables, read_beside
from pipeline.publish.untrusted import read_regular

MAX_FIGURE_BYTES = 300_000
MAX_NOTES_BYTES = 1 << 22  # a --notes file: markdown written for the run


def within_figure_limit(path: Path, whose: str) -> None:
    """Raise the one-line error for a PNG above :data:`MAX_FIGURE_BYTES` (``whose`` dpi to
    lower)."""
    size = path.stat().st_size
    if size > MAX_FIGURE_BYTES:
        raise InputError(f"{path.name} is {size} bytes, above {MAX_FIGURE_BYTES}; lower "
                         f"{whose} dpi")


def cd_figures(table: pd.DataFrame, out: Path, order: Sequence[str] = (),
               solvers: Sequence[str] = ()) -> dict:
    """Draw the CD diagram (:mod:`pipeline.publish.critical_difference`) of every mode and
    metric with enough entries (:func:`pipeline.publish.ranking.ranks`, the exact GP's
    ``solvers`` one entry) into ``out``; (mode, metric) → the file's name."""
    # deferred: matplotlib, which the command line's checks and errors do without
    from pipeline.publish.critical_difference import cd_diagram

    names = {}
    for mode in comparison.modes(table, order):
        for metric, (_, words) in comparison.METRICS.items():
            result = ranking.ranks(table, mode, metric, solvers)
            if not len(result.ranks):
                continue
            tag = "all" if pd.isna(mode) else str(mode)
            labels = [name.split(" [")[0] for name in result.names]
            path = cd_diagram(labels, result.ranks, result.cd,
                              out / f"cd_{tag}_{metric}.png",
                              title=f"{tag}: average rank of {words} over {result.n} "
                                    "data sets")
            within_figure_limit(path, "the CD diagram's")
            names[(tag, metric)] = path.name
    return names


def notes_text(notes: str | Path | None) -> str | None:
    """The ``--notes`` file's text; a FIFO, a device or a directory is refused before it is
    opened (:func:`~pipeline.publish.untrusted.read_regular`: reading one would block)."""
    if notes is None:
        return None
    data = read_regular(notes, "--notes", "pass a markdown file", MAX_NOTES_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"--notes {notes}: cannot read it ({err.reason} at byte {err.start}); "
                         "pass a markdown file in UTF-8") from None


def check_beside(beside: Sequence[str | Path]) -> None:
    """Read every ``--beside`` file (each checked, :func:`~pipeline.publish.elsewhere.
    read_beside`): a bad one fails before anything is written; they are rendered once, from
    the written CSV, by :func:`beside_text`."""
    for path in beside:
        read_beside(path)


def beside_text(table: pd.DataFrame, beside: Sequence[str | Path]) -> str | None:
    """The tables of numbers published elsewhere (:mod:`pipeline.publish.elsewhere`) from the
    ``--beside`` files, one after another; None without any."""
    if not beside:
        return None
    return "\n\n".join(beside_tables(table, read_beside(path)) for path in beside)
