"""The published comparison's tables, from the job table of :mod:`pipeline.publish` alone (one
row per job and mode): every mean over splits with its Nadeau–Bengio corrected 95 % interval
(the splits' training sets overlap), every setting against the reference split by split. The
ranks, the best per time budget and the ties are :mod:`pipeline.publish.ranking`; the
statistics :mod:`pipeline.publish.stats`.

A *setting* is (mode, dataset, algorithm, basis size); its value on a split is the mean over
the seeds it ran there (a deterministic method's jobs are one job whatever the seed). A
setting is *ranked* (in a budget table, a tie, a rank) only when it finished every split the
dataset's other settings ran and none of its splits is trivial (:func:`stats.trivial`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from pipeline.datasets import StoreError, build
from pipeline.publish import stats

BUDGETS = (10, 60, 600)
NO_BASIS = -1.0  # the basis-size key of a method without one
KEYS = ["mode", "dataset", "algorithm", "basis"]
METRICS = {"rmse": ("test_rmse", "test RMSE"), "nlpd": ("test_nlpd", "test NLPD")}
COSTS = {"fit": "fit only", "cost": "learning + fit"}

CI_WORDS = ("mean ± the half-width of its 95 % confidence interval over the splits, Nadeau and "
            "Bengio's corrected resampled t (the variance over the n splits in brackets scaled "
            "by 1/n + n_test/n_train, as the splits' training sets overlap; Student t with n − 1 "
            "degrees of freedom)")
TIE_WORDS = ("A setting is *tied* with the best when Wilcoxon's signed-rank test on their "
             "per-split differences (the splits both ran; two-sided), Holm-corrected over the "
             "settings compared with the best, does not find it worse at 5 %. With n splits "
             "the smallest two-sided p is 2/2ⁿ (0.25 for 3 splits, 0.002 for 10): on 3 splits "
             "no tie can be decided, and *tied* means only that.")
DEFAULT_TEST_FRACTION = 0.1  # Wilson et al.'s 90/10 splits, where a data set is not built here
_FRACTIONS: dict[str, float] = {}


def test_fraction(dataset: str) -> float:
    """The share of ``dataset``'s rows held out for testing, n_test / (n_train + n_test), on
    its split 0 as :func:`pipeline.datasets.build` makes it (every shipped set's splits hold
    out the same share); :data:`DEFAULT_TEST_FRACTION` where it cannot be built here."""
    if dataset not in _FRACTIONS:
        try:
            arrays, _ = build({"name": dataset, "split": 0})
            n_test, n_train = len(arrays["y_test"]), len(arrays["y_train"])
            _FRACTIONS[dataset] = n_test / (n_test + n_train)
        except (InputError, StoreError, KeyError, ValueError, TypeError):
            _FRACTIONS[dataset] = DEFAULT_TEST_FRACTION
    return _FRACTIONS[dataset]


def as_floats(column: pd.Series) -> pd.Series:
    """A column as floats, NaN where empty."""
    return pd.to_numeric(column, errors="coerce").astype(float)


def per_split(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting and split, the finished jobs' values averaged over seeds: ``rmse``,
    ``nlpd``, ``fit`` (fit-only seconds), ``cost`` (learning + fit seconds), the sd over seeds
    of RMSE and NLPD (NaN with one seed), ``seeds``, and whether any job was ``trivial`` or
    ``contended``."""
    ok = table[table["status"] == "ok"]
    frame = pd.DataFrame({
        "mode": ok["mode"].astype(object), "dataset": ok["dataset"],
        "algorithm": ok["algorithm"],
        "basis": as_floats(ok["basis_size"]).fillna(NO_BASIS),
        "split": as_floats(ok["split"]),
        "seed": as_floats(ok["seed"]) if "seed" in ok else np.nan,
        "rmse": as_floats(ok["test_rmse"]), "nlpd": as_floats(ok["test_nlpd"]),
        "fit": as_floats(ok["fit_seconds"]),
        "cost": as_floats(ok["fit_seconds"]) + as_floats(ok["learning_seconds"])
        .fillna(0.0),
        "trivial": _flag(ok, "trivial"), "nlpd_above_mean": _flag(ok, "nlpd_above_mean"),
        "contended": _flag(ok, "contended")})
    grouped = frame.groupby([*KEYS, "split"], dropna=False, sort=True)
    out = grouped.agg(rmse=("rmse", "mean"), nlpd=("nlpd", "mean"), fit=("fit", "mean"),
                      cost=("cost", "mean"), rmse_seed_sd=("rmse", "std"),
                      nlpd_seed_sd=("nlpd", "std"), seeds=("rmse", "size"),
                      trivial=("trivial", "max"), nlpd_above_mean=("nlpd_above_mean", "max"),
                      contended=("contended", "max"))
    return out.reset_index()


def _flag(table: pd.DataFrame, name: str) -> pd.Series:
    """A boolean column as 0/1 floats (NaN where not recorded)."""
    if name not in table:
        return pd.Series(np.nan, index=table.index)
    return table[name].map(lambda v: np.nan if pd.isna(v) else float(bool(v))).astype(float)


def settings(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting: each metric's mean, CI half-width and splits (``rmse``, ``rmse_ci``,
    ``rmse_n``; the same for ``nlpd``), mean ``fit`` and ``cost`` seconds, ``splits``
    finished, the most ``seeds`` of a split and the mean over splits of the sd over seeds
    (``rmse_seed_sd``), the ``trivial`` splits, the ``nlpd_above_mean`` splits, the
    ``contended`` splits, ``ranked`` (every split finished, none trivial) and ``ranked_nlpd``
    (ranked, and an NLPD on every split, none above the mean predictor's)."""
    rows = []
    for key, group in per_split(table).groupby(KEYS, dropna=False, sort=True):
        row = dict(zip(KEYS, key, strict=True))
        for metric in METRICS:
            row[metric], row[f"{metric}_ci"], row[f"{metric}_n"] = stats.corrected_t_interval(
                group[metric], test_fraction(key[1]))
            spread = group[f"{metric}_seed_sd"]
            row[f"{metric}_seed_sd"] = float(spread.mean()) if spread.notna().any() else np.nan
        row.update(fit=group["fit"].mean(), cost=group["cost"].mean(),
                   splits=group["split"].nunique(), seeds=int(group["seeds"].max()),
                   trivial=int((group["trivial"] == 1).sum()),
                   nlpd_above_mean=int((group["nlpd_above_mean"] == 1).sum()),
                   contended=int((group["contended"] == 1).sum()))
        rows.append(row)
    out = pd.DataFrame(rows, columns=[*KEYS, "rmse", "rmse_ci", "rmse_n", "rmse_seed_sd",
                                      "nlpd", "nlpd_ci", "nlpd_n", "nlpd_seed_sd", "fit", "cost",
                                      "splits", "seeds", "trivial", "nlpd_above_mean",
                                      "contended"])
    most = out.groupby(["mode", "dataset"], dropna=False)["splits"].transform("max")
    out["full"] = out["splits"] == most
    out["ranked"] = out["full"] & (out["trivial"] == 0) & (out["rmse_n"] == out["splits"])
    out["ranked_nlpd"] = (out["ranked"] & (out["nlpd_above_mean"] == 0)
                          & (out["nlpd_n"] == out["splits"]))
    return out


# The published per-setting table (``<sweep>_settings.csv``): column → meaning
SETTING_COLUMNS: dict[str, str] = {
    "mode": "the protocol (as in the per-job table)",
    "dataset": "the data set",
    "algorithm": "the method",
    "basis_size": "basis functions / inducing points (empty: the method has none)",
    "splits": "splits finished",
    "seeds": "the most seeds a split ran (a split's value is the mean over its seeds)",
    **{f"{metric}_{part}": f"{what}: {meaning}" for metric, (_, what) in METRICS.items()
       for part, meaning in (
           ("mean", "mean over the splits"),
           ("ci_low", "lower bound of the mean's corrected 95 % t interval over the splits (empty: "
                      "fewer than 2 splits)"),
           ("ci_high", "upper bound of that interval"),
           ("seed_sd", "mean over the splits of the sd over the seeds (empty: one seed)"))},
    "fit_seconds": "mean over the splits of the fit's seconds",
    "learning_fit_seconds": "mean over the splits of the seconds of learning + fit",
    "trivial_splits": "splits on which the setting is a trivial predictor (test RMSE)",
    "nlpd_above_mean_splits": "splits on which the setting's test NLPD is above the mean "
                              "predictor's Gaussian's",
    "contended_splits": "splits whose job was flagged contended",
    "ranked": "whether the figures draw the setting (every split finished, none trivial); "
              "the ranks and budget tables take every setting that ran every split, a failed "
              "or trivial one last",
    "ranked_nlpd": "whether the NLPD figures draw it (drawn, with an NLPD on every split, none "
                   "above the mean predictor's)",
}


def settings_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`settings` as the published per-setting table, :data:`SETTING_COLUMNS`: each
    metric's mean with the bounds of its corrected 95 % t interval over the splits."""
    rows = settings(table)
    out = pd.DataFrame({"mode": rows["mode"], "dataset": rows["dataset"],
                        "algorithm": rows["algorithm"],
                        "basis_size": rows["basis"].where(rows["basis"] != NO_BASIS).astype(
                            "Int64"),
                        "splits": rows["splits"], "seeds": rows["seeds"]})
    for metric in METRICS:
        out[f"{metric}_mean"] = rows[metric]
        out[f"{metric}_ci_low"] = rows[metric] - rows[f"{metric}_ci"]
        out[f"{metric}_ci_high"] = rows[metric] + rows[f"{metric}_ci"]
        out[f"{metric}_seed_sd"] = rows[f"{metric}_seed_sd"]
    out["fit_seconds"], out["learning_fit_seconds"] = rows["fit"], rows["cost"]
    out["trivial_splits"], out["contended_splits"] = rows["trivial"], rows["contended"]
    out["nlpd_above_mean_splits"] = rows["nlpd_above_mean"]
    out["ranked"], out["ranked_nlpd"] = rows["ranked"], rows["ranked_nlpd"]
    return out[list(SETTING_COLUMNS)]


def label(row) -> str:
    """``algorithm (m = size)``, or the algorithm alone for a method without a basis."""
    size = row["basis"]
    return row["algorithm"] + ("" if pd.isna(size) or size == NO_BASIS else f" (m = {int(size)})")


def mean_ci(mean: float, half: float, n: int) -> str:
    """``mean ± half (n)``; the mean alone where there is no interval; — without a value."""
    if not np.isfinite(mean):
        return "—"
    return f"{mean:.4g} ({n})" if not np.isfinite(half) else f"{mean:.4g} ± {half:.2g} ({n})"


def modes(table: pd.DataFrame, order: Sequence[str] = ()) -> list:
    """The table's modes, those named in ``order`` first and in that order."""
    held = [m for m in table["mode"].unique().tolist() if not pd.isna(m)]
    return [m for m in order if m in held] + sorted(m for m in held if m not in order) + (
        [pd.NA] if table["mode"].isna().any() else [])


def rows_of_mode(frame: pd.DataFrame, mode) -> pd.DataFrame:
    return frame[frame["mode"].isna() if pd.isna(mode) else frame["mode"] == mode]


def excluded(table: pd.DataFrame, order: Sequence[str] = ()) -> dict[str, list[str]]:
    """Per reason (``trivial``, ``fewer splits``), the settings never ranked, and
    (``nlpd above mean``) the ranked ones left out of the NLPD comparisons, as
    ``mode: setting on dataset (detail)``."""
    out: dict[str, list[str]] = {"trivial": [], "fewer splits": [], "nlpd above mean": []}
    rows = settings(table)
    for mode in modes(table, order):
        mine = rows_of_mode(rows, mode)
        for _, r in mine.iterrows():
            where = f"{'' if pd.isna(mode) else f'{mode}: '}{label(r)} on {r['dataset']}"
            if r["trivial"]:
                out["trivial"].append(f"{where} ({r['trivial']} of {r['splits']} splits; "
                                      f"RMSE {r['rmse']:.4g})")
            elif not r["full"]:
                most = mine[mine["dataset"] == r["dataset"]]["splits"].max()
                out["fewer splits"].append(f"{where} ({r['splits']} of {most})")
            elif r["nlpd_above_mean"]:
                out["nlpd above mean"].append(f"{where} ({r['nlpd_above_mean']} of "
                                              f"{r['splits']} splits; NLPD {r['nlpd']:.4g})")
    return out


def references_of(reference: str | Sequence[str]) -> list[str]:
    """``--reference`` as a list: one algorithm, or several separated by commas."""
    names = reference.split(",") if isinstance(reference, str) else list(reference)
    return [name.strip() for name in names if name.strip()]


def check_reference(table: pd.DataFrame, reference: str | Sequence[str]) -> list[str]:
    """The ``reference`` algorithms, each with a finished job; else one-line InputError."""
    names = references_of(reference)
    ran = set(table[table["status"] == "ok"]["algorithm"])
    missing = [name for name in names if name not in ran]
    if missing or not names:
        raise InputError(f"--reference {','.join(names) or repr(reference)}: no finished job of "
                         f"{missing[0] if missing else 'an algorithm'} in the results; pass the "
                         "algorithms the run used as its reference (the full GP, factored or "
                         "by PCG), comma-separated")
    return names


def _reference_per_split(splits: pd.DataFrame, names: list[str], metric: str,
                         exclude: str | None = None) -> pd.Series:
    """Per split, the first of ``names`` (other than ``exclude``) with a finite ``metric``."""
    out = pd.Series(np.nan, index=sorted(splits["split"].unique()), dtype=float)
    for name in reversed([n for n in names if n != exclude]):
        mine = splits[splits["algorithm"] == name].groupby("split")[metric].first()
        mine = mine[np.isfinite(mine)]
        out.loc[mine.index] = mine.to_numpy(float)
    return out


def _same_in_every_mode(table: pd.DataFrame, names: list[str]) -> bool:
    """Whether the ``names`` algorithms' rows are the same jobs under every mode (they learn
    nothing themselves): equal RMSE and seconds per dataset, split and basis size."""
    mine = table[table["algorithm"].isin(names)]
    if mine["mode"].nunique() < 2:
        return False
    keys = ["dataset", "algorithm", "basis_size", "split"]
    per_job = mine.groupby(keys, dropna=False)[["status", "test_rmse", "fit_seconds"]]
    return bool((per_job.nunique(dropna=False) <= 1).all().all())


def reference_table(table: pd.DataFrame, reference: str | Sequence[str],
                    order: Sequence[str] = ()) -> str:
    """Markdown: each ``reference`` algorithm's test RMSE and NLPD (:func:`mean_ci`) and
    seconds (learning + fit) per mode and dataset, with its per-split RMSE difference from the
    first reference (mean ± CI over the splits both ran); one row for the modes together
    (those of ``order`` first) where they ran the same jobs."""
    names = check_reference(table, reference)
    rows = settings(table)
    rows = rows[rows["algorithm"].isin(names)]
    rank = {name: i for i, name in enumerate(names)}
    rows = rows.assign(rank=rows["algorithm"].map(rank)).sort_values(["mode", "dataset", "rank"])
    splits = per_split(table)
    together = _same_in_every_mode(table, names)
    if together:
        first = rows["mode"].iloc[0]
        rows = rows[rows["mode"] == first].assign(
            shown=", ".join(str(m) for m in modes(table, list(order))))
    else:
        rows = rows.assign(shown=rows["mode"].astype(str))
    lines = ["| mode | dataset | algorithm | test RMSE | test NLPD | seconds | splits | "
             f"RMSE − RMSE of `{names[0]}` (splits both ran) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in rows.iterrows():
        here = rows_of_mode(splits, r["mode"])
        here = here[here["dataset"] == r["dataset"]]
        if r["algorithm"] == names[0]:
            gap = "–"
        else:
            ref = here[here["algorithm"] == names[0]].set_index("split")["rmse"]
            mine = here[(here["algorithm"] == r["algorithm"]) & (here["basis"] == r["basis"])]
            mine = mine.set_index("split")["rmse"]
            d, half, n = stats.corrected_paired_difference(mine, ref.reindex(mine.index),
                                                           test_fraction(r["dataset"]))
            gap = f"{d:+.2g} ± {half:.2g} ({n})" if np.isfinite(half) else (
                f"{d:+.2g} ({n})" if n else "–")
        lines.append(f"| {r['shown']} | {r['dataset']} | {label(r)} | "
                     f"{mean_ci(r['rmse'], r['rmse_ci'], r['rmse_n'])} | "
                     f"{mean_ci(r['nlpd'], r['nlpd_ci'], r['nlpd_n'])} | {r['cost']:.3g} | "
                     f"{r['splits']} | {gap} |")
    return "\n".join(lines)


def _delta(here: pd.DataFrame, row, names: list[str], metric: str) -> str:
    """``row``'s per-split ``metric`` minus the reference's (:func:`_reference_per_split`):
    mean ± CI (n splits), or – where they share none."""
    mine = here[(here["algorithm"] == row["algorithm"]) & (here["basis"] == row["basis"])]
    mine = mine.set_index("split")[metric]
    ref = _reference_per_split(here, names, metric, exclude=row["algorithm"])
    d, half, n = stats.corrected_paired_difference(mine.to_numpy(float),
                                                   ref.reindex(mine.index),
                                                   test_fraction(row["dataset"]))
    if not n:
        return "–"
    return f"{d:+.3g} ± {half:.2g} ({n})" if np.isfinite(half) else f"{d:+.3g} ({n})"


def against_reference(table: pd.DataFrame, reference: str | Sequence[str], mode) -> str:
    """Markdown for one mode: every setting per dataset with its test RMSE and NLPD
    (:func:`mean_ci`), its per-split difference from the reference in each (mean ± CI over
    the splits both ran; the reference on a split is the first ``reference`` algorithm that
    has the metric there), its seconds (fit only; learning), the spread over seeds where it ran
    several, and why it is not ranked."""
    names = check_reference(table, reference)
    rows, splits = rows_of_mode(settings(table), mode), rows_of_mode(per_split(table), mode)
    lines = ["| dataset | setting | test RMSE | Δ RMSE | test NLPD | Δ NLPD | fit s | "
             "learning s | seed sd (RMSE) | not ranked |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in rows.sort_values(["dataset", "algorithm", "basis"]).iterrows():
        here = splits[splits["dataset"] == r["dataset"]]
        why = ("trivial" if r["trivial"] else "" if r["full"] else
               f"{r['splits']} splits")
        lines.append(
            f"| {r['dataset']} | {label(r)} | {mean_ci(r['rmse'], r['rmse_ci'], r['rmse_n'])} | "
            f"{_delta(here, r, names, 'rmse')} | "
            f"{mean_ci(r['nlpd'], r['nlpd_ci'], r['nlpd_n'])} | "
            f"{_delta(here, r, names, 'nlpd')} | {r['fit']:.3g} | "
            f"{r['cost'] - r['fit']:.3g} | "
            f"{f'{r.rmse_seed_sd:.2g} ({r.seeds} seeds)' if r['seeds'] > 1 else ''} | {why} |")
    return "\n".join(lines)


MIN_METHODS = 3  # Friedman's test compares at least 3 methods
