"""Numbers published elsewhere, set beside the run's own in a published README
(``python -m pipeline.publish … --beside <file.csv>``).

A *beside* file is a CSV with one row per published number, :data:`COLUMNS`: whose number it
is (``source``), on which data set and by which of their methods, the metric (``rmse`` or
``nlpd``, as :data:`pipeline.publish.comparison.METRICS`), its mean and the ± they print with
the number of trials, the setting of this run it is set beside (``algorithm``, ``mode``,
``basis_size``), and ``where`` the number was read (repository, commit, file and line). The
numbers are typed in from that text by hand; the file is what a reader checks them against.

:func:`beside_tables` renders, per source, each number beside the run's mean over its splits
(:func:`pipeline.publish.comparison.settings`: mean ± the corrected 95 % t interval) and the
difference of the two means. No test is made: their per-trial values are not published, and their
protocol (splits, kernel, training) is not this run's; the notes say how they differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from pipeline.publish.comparison import METRICS, NO_BASIS, label, mean_ci, settings
from pipeline.publish.untrusted import GZIP_ERRORS, read_failure, regular_file
from pipeline.report.markdown import code, inert

COLUMNS: dict[str, str] = {
    "source": "whose number it is (authors, year, and which text)",
    "dataset": "the data set, named as in this run",
    "method": "their method, named as they name it",
    "metric": "rmse or nlpd (test RMSE; test negative log predictive density per point)",
    "mean": "their number",
    "sd": "the ± they print beside it (empty: none)",
    "trials": "over how many trials (splits) they averaged",
    "algorithm": "the method of this run set beside it",
    "mode": "its protocol in this run",
    "basis_size": "its basis size (empty: a method without one)",
    "where": "where the number was read: repository@commit:path#Lline",
}
MAX_TEXT = 300  # characters of a text cell


def read_beside(path: str | Path) -> pd.DataFrame:
    """The beside file at ``path`` (a regular file, plain or ``.gz``), checked: its columns
    are :data:`COLUMNS` in order, every metric is one of METRICS, every number finite (``sd``
    ≥ 0 or empty, ``trials`` a positive integer, ``basis_size`` a positive integer or empty),
    every text one short line. Raises InputError (one line naming the file, the row and the
    fix)."""
    path = Path(path)
    fix = f"pass a CSV with the columns {', '.join(COLUMNS)}"
    regular_file(path, "--beside", fix)  # a FIFO or a device would block the reader
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError,
            *GZIP_ERRORS) as err:  # a .csv.gz cut short: EOFError
        raise InputError(f"--beside {path}: cannot read it ({read_failure(err)}); "
                         f"{fix}") from None
    if frame.columns.tolist() != list(COLUMNS):
        raise InputError(f"--beside {path}: its columns are {', '.join(frame.columns)}; a "
                         f"beside file has {', '.join(COLUMNS)}, in that order")
    if frame.empty:
        raise InputError(f"--beside {path} holds no number; add a row per published number")
    rows = []
    for i, row in frame.iterrows():
        rows.append(_checked(row, f"--beside {path}, row {i + 2}"))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _checked(row: pd.Series, where: str) -> dict:
    out = {}
    for name in ("source", "dataset", "method", "algorithm", "mode", "where"):
        text = str(row[name]).strip()
        if not text or len(text) > MAX_TEXT or any(c in text for c in "\r\n\t|"):
            raise InputError(f"{where}: {name}={text[:40]!r} is not one short line of text; "
                             f"give it 1 to {MAX_TEXT} characters on one line, without '|'")
        out[name] = text
    if row["metric"] not in METRICS:
        raise InputError(f"{where}: metric={row['metric']!r}; pass one of "
                         f"{', '.join(METRICS)}")
    out["metric"] = row["metric"]
    out["mean"] = _number(row["mean"], "mean", where)
    out["sd"] = np.nan if row["sd"] == "" else _number(row["sd"], "sd", where, least=0.0)
    out["trials"] = _count(row["trials"], "trials", where)
    out["basis_size"] = None if row["basis_size"] == "" else _count(row["basis_size"],
                                                                    "basis_size", where)
    return out


def _number(text: str, name: str, where: str, least: float = -math.inf) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < least:
        raise InputError(f"{where}: {name}={text!r} is not a finite number"
                         + (f" ≥ {least:g}" if least > -math.inf else "") + "; fix the row")
    return value


def _count(text: str, name: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"{where}: {name}={text!r} is not a positive integer; fix the row")
    return int(text)


def beside_tables(table: pd.DataFrame, beside: pd.DataFrame) -> str:
    """Markdown: per source (in the file's order), each of their settings beside this run's
    (:func:`read_beside` rows): test RMSE and NLPD, theirs (mean ± their ± (trials)) and ours
    (:func:`~pipeline.publish.comparison.mean_ci` over the splits), and ours − theirs."""
    ours = settings(table)
    blocks = []
    for source in dict.fromkeys(beside["source"]):
        rows = beside[beside["source"] == source]
        keys = ["dataset", "method", "algorithm", "mode", "basis_size"]
        lines = [f"**{inert(source)}** (their ± as printed, over their trials; ours: mean ± "
                 "corrected 95 % t interval (splits)):", "",
                 "| dataset | theirs | ours | RMSE, theirs | RMSE, ours | ours − theirs | "
                 "NLPD, theirs | NLPD, ours | ours − theirs |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for key, group in rows.groupby(keys, sort=False, dropna=False):
            setting = dict(zip(keys, key, strict=True))
            mine = _setting(ours, setting)
            cells = []
            for metric in METRICS:
                theirs = group[group["metric"] == metric]
                cells += _pair(theirs.iloc[0] if len(theirs) else None, mine, metric)
            name = label({"algorithm": setting["algorithm"],
                          "basis": _basis(setting["basis_size"])})
            lines.append(f"| {inert(setting['dataset'])} | {inert(setting['method'])} | "
                         f"{inert(name)}, {inert(setting['mode'])} | " + " | ".join(cells) + " |")
        wheres = sorted(dict.fromkeys(rows["where"]))
        lines += ["", "Read from: " + "; ".join(code(w) for w in wheres) + ".", ""]
        blocks.append("\n".join(lines))
    return "\n".join(blocks).strip()


def _basis(size) -> float:
    return NO_BASIS if size is None or pd.isna(size) else float(size)


def _setting(ours: pd.DataFrame, setting: dict) -> pd.Series | None:
    here = ours[(ours["dataset"] == setting["dataset"])
                & (ours["algorithm"] == setting["algorithm"])
                & (ours["mode"].astype(str) == setting["mode"])
                & (ours["basis"] == _basis(setting["basis_size"]))]
    return here.iloc[0] if len(here) else None


def _pair(theirs: pd.Series | None, mine: pd.Series | None, metric: str) -> Sequence[str]:
    """Their cell, ours, and ours − theirs (– where either is missing)."""
    their_text = "–" if theirs is None else (
        f"{theirs['mean']:.4g} ({theirs['trials']})" if np.isnan(theirs["sd"])
        else f"{theirs['mean']:.4g} ± {theirs['sd']:.2g} ({theirs['trials']})")
    if mine is None or not np.isfinite(mine[metric]):
        return [their_text, "not run" if mine is None else "—", "–"]
    mine_text = mean_ci(mine[metric], mine[f"{metric}_ci"], mine[f"{metric}_n"])
    gap = "–" if theirs is None else f"{mine[metric] - theirs['mean']:+.3g}"
    return [their_text, mine_text, gap]
