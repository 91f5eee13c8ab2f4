"""The ranked comparison of a published run, by rules fixed before any number is seen.

- **Entries.** A ranked entry is a method at one basis size of the run's grid (``algorithm
  (m = 512)``), or a method without a basis: every basis size the run declared is its own
  entry, so no entry is chosen by its test score. The solvers of one estimator (the
  ``--reference`` list: the exact GP by Cholesky, then by PCG) are one entry, named by the
  first: its metric is the first solver's that has it on the split, its seconds the cheapest
  solver's on that split (:func:`split_frame`). A method learns as its own protocol says in
  the ``own`` mode; in the ``shared`` mode (the ablation "error at a fixed kernel") every
  method fits at the reference's learned kernel.
- **Failures are ranked last.** A split on which an entry's job failed (refused, crashed, ran
  out of time or memory), or whose predictor is trivial (:func:`stats.trivial`), makes the
  entry's score on that data set a failure: it shares the last ranks there with the other
  failures, and is marked, never dropped. An entry the run never ran on some data set (a grid
  that leaves it out) is left out of the ranks, named.
- **Ties by cost.** Two entries whose mean metric on a data set agrees to a relative
  :data:`SAME` are ordered by their mean seconds (learning + fit), the cheaper first.
- **Statistics valid for overlapping training sets.** Means over splits carry the
  Nadeau–Bengio corrected resampled t-interval (:func:`stats.corrected_t_interval`: the
  splits' training sets overlap, so their scores are correlated and the plain interval is too
  narrow); "tied with the best" is the pairwise Wilcoxon signed-rank test against the best
  with Holm's step-down correction over the family (:func:`stats.tied_with_best_holm`;
  Benavoli et al. 2016, Demšar 2006 §3.2); across data sets, Friedman's χ² with the
  Iman–Davenport F beside it and the Nemenyi critical difference for the diagram, and each
  entry's score relative to the reference's (:func:`ranks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pipeline.publish import stats
from pipeline.publish.comparison import (
    COSTS,
    METRICS,
    MIN_METHODS,
    NO_BASIS,
    as_floats,
    modes,
    rows_of_mode,
    test_fraction,
)

SAME = 1e-6  # relative difference under which two mean metrics are one tie, ordered by cost


def entry_label(algorithm: str, basis: float, solvers: Sequence[str] = ()) -> str:
    """``algorithm (m = size)``; the reference entry names its other solvers."""
    size = "" if pd.isna(basis) or basis == NO_BASIS else f" (m = {int(basis)})"
    others = [s for s in solvers[1:]] if solvers and algorithm == solvers[0] else []
    return algorithm + size + (f" [or {', '.join(others)}]"
                               if others else "")


def split_frame(table: pd.DataFrame, mode, solvers: Sequence[str] = ()) -> pd.DataFrame:
    """Per entry, data set and split of ``mode``: ``rmse``, ``nlpd`` (means over seeds),
    ``cost`` (learning + fit seconds) and ``fit`` (fit seconds), ``failed`` (a job failed or is
    trivial there) and ``solver`` (the solver whose seconds are taken). The ``solvers`` after
    the first are folded into the first's entry (module docstring)."""
    mine = rows_of_mode(table, mode)
    frame = pd.DataFrame({
        "dataset": mine["dataset"].astype(object), "algorithm": mine["algorithm"].astype(object),
        "basis": as_floats(mine["basis_size"]).fillna(NO_BASIS),
        "split": as_floats(mine["split"]),
        "ok": (mine["status"] == "ok").to_numpy(),
        "trivial": mine["trivial"].astype("boolean").fillna(False).to_numpy(dtype=bool),
        "rmse": as_floats(mine["test_rmse"]), "nlpd": as_floats(mine["test_nlpd"]),
        "fit": as_floats(mine["fit_seconds"]),
        "cost": as_floats(mine["fit_seconds"]) + as_floats(mine["learning_seconds"]).fillna(0.0),
    })
    frame.loc[~frame["ok"], ["rmse", "nlpd", "fit", "cost"]] = np.nan
    frame["failed"] = ~frame["ok"] | frame["trivial"]
    per = frame.groupby(["dataset", "algorithm", "basis", "split"], dropna=False, sort=True).agg(
        rmse=("rmse", "mean"), nlpd=("nlpd", "mean"), fit=("fit", "mean"),
        cost=("cost", "mean"), failed=("failed", "max")).reset_index()
    per["solver"] = per["algorithm"]
    if len(solvers) > 1:
        per = _fold_solvers(per, list(solvers))
    per["entry"] = [entry_label(a, b, solvers) for a, b in zip(per["algorithm"], per["basis"],
                                                                 strict=True)]
    return per


def _fold_solvers(per: pd.DataFrame, solvers: list[str]) -> pd.DataFrame:
    """The rows of ``solvers`` as one entry named by the first: per data set and split, the
    metric of the first solver that has it, the seconds of the cheapest that finished, failed
    only where every solver failed."""
    folded, rest = per[per["algorithm"].isin(solvers)], per[~per["algorithm"].isin(solvers)]
    rows = []
    for (dataset, split), group in folded.groupby(["dataset", "split"], sort=True):
        group = group.assign(order=group["algorithm"].map(solvers.index)).sort_values("order")
        row = {"dataset": dataset, "algorithm": solvers[0], "basis": NO_BASIS, "split": split}
        for metric in METRICS:
            values = group[metric].dropna()
            row[metric] = float(values.iloc[0]) if len(values) else np.nan
        done = group[~group["failed"].astype(bool)]
        cheapest = done.loc[done["cost"].idxmin()] if done["cost"].notna().any() else None
        row.update(cost=np.nan if cheapest is None else float(cheapest["cost"]),
                   fit=np.nan if cheapest is None else float(cheapest["fit"]),
                   solver=solvers[0] if cheapest is None else cheapest["algorithm"],
                   failed=bool(group["failed"].astype(bool).all()))
        rows.append(row)
    return pd.concat([rest, pd.DataFrame(rows)], ignore_index=True)


def order_with_cost(scores: np.ndarray, costs: np.ndarray, same: float = SAME) -> np.ndarray:
    """Ranks 1…k of ``scores`` (lower is better; +inf: a failure): scores within a relative
    ``same`` of the group's best are ordered by ``costs`` (cheaper first, a missing cost last);
    the failures share the mean of the last ranks."""
    scores, costs = np.asarray(scores, dtype=np.float64), np.asarray(costs, dtype=np.float64)
    k = len(scores)
    ranks = np.empty(k)
    finite = np.flatnonzero(np.isfinite(scores))
    order = finite[np.argsort(scores[finite], kind="stable")]
    position, i = 1, 0
    while i < len(order):
        j = i
        lead = scores[order[i]]
        while j + 1 < len(order) and abs(scores[order[j + 1]] - lead) <= same * abs(lead):
            j += 1
        group = order[i:j + 1]
        by_cost = group[np.argsort(np.where(np.isfinite(costs[group]), costs[group], np.inf),
                                   kind="stable")]
        for member in by_cost:
            ranks[member] = position
            position += 1
        i = j + 1
    failed = np.flatnonzero(~np.isfinite(scores))
    if len(failed):
        ranks[failed] = np.mean(np.arange(position, k + 1))
    return ranks


@dataclass
class Ranks:
    """What :func:`ranks` found (module docstring)."""

    names: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    ranks: np.ndarray = field(default_factory=lambda: np.array([]))
    scores: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # data sets × entries
    failures: dict[str, list[str]] = field(default_factory=dict)  # entry → data sets failed
    # entry → its score against the reference's per data set: RMSE relative (score/ref − 1),
    # NLPD as a difference in nats (an NLPD may be negative)
    relative: dict[str, list[float]] = field(default_factory=dict)
    metric: str = "rmse"
    left_out: list[str] = field(default_factory=list)
    chi2: float = np.nan
    p: float = np.nan
    iman_davenport: float = np.nan
    iman_davenport_p: float = np.nan
    cd: float = np.nan
    best: str = ""
    holm: dict[str, float] = field(default_factory=dict)  # entry → Holm-adjusted p vs best

    @property
    def n(self) -> int:
        return len(self.datasets)


def ranks(table: pd.DataFrame, mode, metric: str, solvers: Sequence[str] = ()) -> Ranks:
    """The entries' ranks over the data sets on ``metric`` (``rmse`` or ``nlpd``) in ``mode``
    (module docstring): an entry's score on a data set is its mean over the splits, +inf
    where it failed on any split; ranked per data set by :func:`order_with_cost`. An entry
    enters if it ran (or failed) on every split the data set's entries ran, on every data set;
    one that gives no ``metric`` on any finished split is left out (``gives no …``). With at
    least 3 entries and 2 data sets: Friedman's χ² (on the ranks), the Iman–Davenport F, the
    Nemenyi CD at 5 %, and every entry's Wilcoxon signed-rank test over the data sets against
    the best-ranked one, Holm-adjusted."""
    per = split_frame(table, mode, solvers)
    out = Ranks(metric=metric)
    if per.empty:
        return out
    datasets = sorted(per["dataset"].unique())
    splits_of = per.groupby("dataset")["split"].nunique()
    words = METRICS[metric][1]
    scores, costs, names = [], [], []
    for entry, mine in per.groupby("entry", sort=True):
        finished = mine[~mine["failed"].astype(bool)]
        if len(finished) and finished[metric].isna().all():
            out.left_out.append(f"{entry} (gives no {words})")
            continue
        held = mine.groupby("dataset")["split"].nunique()
        short = [d for d in datasets if held.get(d, 0) < splits_of[d]]
        if short:
            out.left_out.append(f"{entry} (not run on every split of {', '.join(short)})")
            continue
        failed = (mine["failed"].astype(bool) | mine[metric].isna()).groupby(
            mine["dataset"]).any()
        mean = mine.groupby("dataset")[metric].mean()
        cost = mine.groupby("dataset")["cost"].mean()
        scores.append([np.inf if failed[d] else float(mean[d]) for d in datasets])
        costs.append([float(cost[d]) for d in datasets])
        names.append(entry)
        out.failures[entry] = [d for d in datasets if failed[d]]
    out.names, out.datasets = names, datasets
    if not names:
        return out
    score = np.array(scores, dtype=np.float64).T  # data sets × entries
    cost = np.array(costs, dtype=np.float64).T
    out.scores = score
    reference = entry_label(solvers[0], NO_BASIS, solvers) if solvers else ""
    if reference in names:
        # where the reference failed, no entry has an effect against it (NaN)
        ref = np.where(np.isfinite(score[:, names.index(reference)]),
                       score[:, names.index(reference)], np.nan)
        out.relative = {name: list(score[:, j] / ref - 1.0 if metric == "rmse"
                                   else score[:, j] - ref) for j, name in enumerate(names)}
    if len(names) < MIN_METHODS or len(datasets) < 2:
        return out
    rank_matrix = np.vstack([order_with_cost(score[i], cost[i]) for i in range(len(datasets))])
    out.ranks = rank_matrix.mean(axis=0)
    out.chi2, out.p = stats.friedman(rank_matrix)
    out.iman_davenport, out.iman_davenport_p = stats.iman_davenport(out.chi2, len(datasets),
                                                                    len(names))
    out.cd = stats.critical_difference(len(names), len(datasets))
    best = int(np.argmin(out.ranks))
    out.best = names[best]
    finite = np.where(np.isfinite(score), score, np.nan)
    worst = np.nanmax(np.abs(finite)) if np.isfinite(finite).any() else 1.0
    # a failure's score for the signed-rank test: beyond every finished score (only its sign
    # and its rank among the differences count)
    filled = np.where(np.isfinite(score), score, 10.0 * worst + 1.0)
    others = [j for j in range(len(names)) if j != best]
    raw = [stats.wilcoxon_pvalue(filled[:, j], filled[:, best]) for j in others]
    adjusted = stats.holm(raw)
    out.holm = {names[j]: float(p) for j, p in zip(others, adjusted, strict=True)}
    return out


def rank_table(result: Ranks, alpha: float = stats.ALPHA) -> str:
    """Markdown: each entry's average rank, its score relative to the reference's per data set
    (a failure: *failed*), and its Holm-adjusted Wilcoxon p against the best; best first."""
    if not len(result.ranks):
        return ""
    sets = result.datasets
    against = ("mean" if not result.relative else "vs reference" if result.metric == "rmse"
               else "− reference (nats)")
    lines = ["| entry | average rank | " + " | ".join(f"{d}: {against}" for d in sets)
             + " | Holm p vs best |", "|" + " --- |" * (len(sets) + 3)]
    for j in np.argsort(result.ranks, kind="stable"):
        name = result.names[j]
        relative = result.relative.get(name)
        cells = ["failed" if np.isinf(result.scores[i, j]) else
                 f"{result.scores[i, j]:.4g}" if relative is None else
                 _effect(relative[i], result.metric) if np.isfinite(relative[i]) else
                 "— (reference failed)" for i in range(len(sets))]
        p = result.holm.get(name)
        verdict = "best" if name == result.best else (
            "–" if p is None or not np.isfinite(p) else
            f"{p:.2g}" + (" (worse)" if p < alpha else ""))
        lines.append(f"| {name} | {result.ranks[j]:.2f} | " + " | ".join(cells)
                     + f" | {verdict} |")
    return "\n".join(lines)


def _effect(value: float, metric: str) -> str:
    """An entry's score against the reference's: RMSE in per cent, NLPD in nats."""
    return f"{value:+.1%}" if metric == "rmse" else f"{value:+.3g}"


def budget_tables(table: pd.DataFrame, budgets: Sequence[float], order: Sequence[str] = (),
                  solvers: Sequence[str] = ()) -> str:
    """Markdown, per mode (those of ``order`` first) and cost (:data:`COSTS`: fit-only
    seconds; learning + fit seconds), :func:`budget_table`, the tied entries named under it."""
    parts = []
    for mode in modes(table, order):
        parts.append(f"**{mode}**" if not pd.isna(mode) else "**all jobs**")
        for cost, words in COSTS.items():
            text, ties = budget_table(table, mode, budgets, solvers, cost)
            lines = [f"*budget on {words} seconds*", "", text]
            if ties:
                lines += ["", "Tied with the best: " + "; ".join(ties) + "."]
            parts.append("\n".join(lines))
    return "\n\n".join(parts)


def budget_table(table: pd.DataFrame, mode, budgets: Sequence[float],
                 solvers: Sequence[str] = (), cost: str = "cost",
                 alpha: float = stats.ALPHA) -> tuple[str, list[str]]:
    """Markdown for one mode and cost (``cost``: learning + fit seconds, or ``fit``): per data
    set and budget, the entry with the lowest mean test RMSE among those that finished every
    split, none trivial, within the budget on their mean seconds; ties in RMSE (:data:`SAME`)
    go to the cheaper. Its RMSE with the Nadeau–Bengio corrected interval, its seconds (and
    the solver that gave them), and how many entries the Holm-corrected Wilcoxon tests do not
    find worse. Returns the table and the lines naming the tied entries."""
    per = split_frame(table, mode, solvers)
    header = ["| dataset | " + " | ".join(f"≤ {b:g} s" for b in budgets) + " |",
              "|" + " --- |" * (len(budgets) + 1)]
    lines, ties = list(header), []
    for dataset, here in per.groupby("dataset", sort=True):
        fraction = test_fraction(dataset)
        splits = here["split"].nunique()
        candidates = {}
        for entry, mine in here.groupby("entry", sort=True):
            if (len(mine) < splits or mine["failed"].astype(bool).any()
                    or mine["rmse"].isna().any()):
                continue
            candidates[entry] = mine.set_index("split").sort_index()
        cells = []
        for budget in budgets:
            within = {e: m for e, m in candidates.items() if m[cost].mean() <= budget}
            if not within:
                least = min((m[cost].mean() for m in candidates.values()), default=np.nan)
                cells.append(f"— (least {least:.3g} s)" if np.isfinite(least) else
                             "— (none ranked)")
                continue
            best, tied, _ = stats.tied_with_best_holm(
                {e: m["rmse"].to_numpy(float) for e, m in within.items()}, alpha=alpha,
                rel_tol=SAME, cost={e: float(m[cost].mean()) for e, m in within.items()})
            m = within[best]
            mean, half, n = stats.corrected_t_interval(m["rmse"].to_numpy(float), fraction)
            solver = m["solver"].mode().iloc[0]
            folded = bool(solvers) and best.startswith(solvers[0] + " [")
            by = f" by {solver}" if folded and solver != solvers[0] else ""
            interval = f" ± {half:.2g}" if np.isfinite(half) else ""
            cells.append(f"{best.split(' [')[0]}{by}: {mean:.4g}{interval} ({n}) in "
                         f"{m[cost].mean():.3g} s" + (f", tied with {len(tied)}" if tied else ""))
            if tied:
                ties.append(f"{dataset} ≤ {budget:g} s (with {best.split(' [')[0]}): "
                            f"{', '.join(t.split(' [')[0] for t in tied)}")
        lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
    return "\n".join(lines), ties


__all__ = ["Ranks", "budget_table", "budget_tables", "entry_label", "order_with_cost",
           "rank_table", "ranks", "split_frame"]
