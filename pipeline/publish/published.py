"""The README of a published folder (:mod:`pipeline.publish.cli`), rendered from its job table
alone by the tables of :mod:`pipeline.publish.comparison`, plus what the run's record says
(its command, code version, grid) and the figures beside it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pipeline.lines import one_line
from pipeline.publish import comparison, ranking, stats
from pipeline.publish.comparison import BUDGETS, reference_table, references_of
from pipeline.publish.job_table import COLUMNS
from pipeline.report.markdown import code, fence, inert


def _summary(table: pd.DataFrame, code_version: str) -> str:
    """The table in one paragraph: rows, status, data sets, splits, machine, threads."""
    ran = table[table["status"] == "ok"]
    machines = sorted({str(m) for m in ran["cpu_model"].dropna() if str(m).strip()})
    threads = sorted(int(t) for t in ran["threads"].dropna().unique())
    counts = table["status"].value_counts().to_dict()
    return (f"{len(table)} rows, one per job and mode "
            f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}), over "
            f"{table['dataset'].nunique()} data sets and splits "
            f"{', '.join(str(s) for s in sorted(table['split'].dropna().unique()))}. "
            f"Machine: {', '.join(machines) or 'not recorded'}; BLAS threads per job: "
            f"{', '.join(map(str, threads)) or 'not recorded'}. Code version: `{code_version}`.")


def _how(table: pd.DataFrame, order: Sequence[str]) -> list[str]:
    """The README's account of its statistics and flags, with this table's counts."""
    ok = table[table["status"] == "ok"]
    seeds = comparison.per_split(table)["seeds"].max() if len(ok) else 0
    left = comparison.excluded(table, order)
    flagged, judged = int(ok["contended"].eq(True).sum()), int(ok["contended"].notna().sum())
    computed = "" if ok["fit_cpu_seconds"].notna().any() else (
        " This table's run recorded neither CPU seconds, load nor cores, so no row could be "
        "judged; nor did it record a method's own learning apart from its fit, so a method "
        "that trains itself inside its fit has that training in its fit seconds.")
    trivial = "; ".join(left["trivial"]) or "none"
    above = "; ".join(left["nlpd above mean"]) or "none"
    known = ok["converged"].notna()
    capped = ok[known & ok["converged"].eq(False)]
    where = "; ".join(f"{mode}: {comparison.label(row)} on {row['dataset']} ({n})"
                      for (mode, row), n in _counted(capped))
    own = (f"{len(capped)} of {int(known.sum())} such rows did not converge"
           + (f": {where}." if len(capped) else ".") if known.any() else
           "This table's run did not record it.")
    stops = ok["learning_stop_reason"].dropna().astype(str)
    if len(stops):
        own += (f" Stopped by the learning budget (`learning_stop_reason` = budget): "
                f"{int((stops == 'budget').sum())} of {len(stops)} rows with a learning.")
    return [
        "## How the numbers are summarised",
        "",
        f"- **Means over splits.** Every mean over the splits is shown as {comparison.CI_WORDS}."
        " Without an interval, the setting ran one split.",
        f"- **Seeds.** A setting's value on a split is the mean over the seeds it ran there (a "
        "method without random choices runs one job whatever the seed, counted once). Where a "
        "setting ran several seeds, *seed sd* is the mean over the splits of the sd over the "
        f"seeds. In this table a split ran at most {int(seeds)} seed(s)"
        + (": no setting shows a seed spread, so how much a re-draw of the random choices "
           "(e.g. landmarks) moves a result is not measured here." if seeds <= 1 else "."),
        f"- **Trivial predictors and failures.** A job is trivial when its test RMSE is at "
        f"least {stats.TRIVIAL_RATIO} times that of the training-mean predictor on the same "
        "test rows (column `trivial`; the baselines are columns `baseline_rmse` and "
        "`baseline_nlpd`, computed from the shipped data where the run did not record them). "
        "A setting with a trivial or failed split (a refusal, a crash, a time-out) is ranked "
        "last on that data set, in every metric, and marked *failed* in the rank tables; the "
        "figures do not draw it: "
        f"{int(ok['trivial'].eq(True).sum())} of {len(ok)} finished rows are trivial "
        f"({trivial}), {int((table['status'] != 'ok').sum())} rows failed.",
        "- **NLPD above the mean predictor's.** A job whose test NLPD is above that of the "
        "mean predictor's Gaussian N(ȳ_train, var(y_train)) (column `nlpd_above_mean`) "
        "predicts a distribution worse than the constant one's, however good its mean: it is "
        "ranked by its NLPD like any other and left out of the NLPD figures: "
        f"{int(ok['nlpd_above_mean'].eq(True).sum())} of {len(ok)} finished rows ({above}).",
        f"- **Contention.** A row is flagged `contended` when its fit or its learning, if it "
        f"took at least {stats.MIN_WALL:g} s, got less than {stats.BUSY_CPU} CPU seconds per "
        "wall second (a CPU-bound step keeps at least one thread running, so less than 0.8 "
        "of a core means it waited for one; between 1 and the job's threads is no evidence, "
        "as a fit with 2 BLAS threads is partly single-threaded), or when other processes "
        f"and the hypervisor kept more than {stats.OTHER_CORES:g} cores busy on average "
        "while it ran (columns `other_cores`, `learning_other_cores`: the machine's CPU "
        "accounting less the job's own; the sweep's own processes keep about 0.1 busy); a "
        "row recorded without those (an earlier run) is flagged when the 1-minute load average"
        " at the job's start or end exceeded its cores. "
        f"{flagged} of {judged} finished rows that could be judged are flagged"
        f" ({len(ok) - judged} could not).{computed}",
        "- **Own learning.** A method that trains itself (a peer under its own protocol) "
        "records whether its learning met its stopping rule (column `converged`; false: it "
        f"stopped at its safety cap). {own}",
        "",
    ]


def _counted(rows: pd.DataFrame) -> list[tuple[tuple[str, pd.Series], int]]:
    """((mode, a representative row), how many rows) per mode, data set, method and basis."""
    keys = ["mode", "dataset", "algorithm", "basis_size"]
    out = []
    for _, group in rows.groupby(keys, dropna=False, sort=True):
        first = group.iloc[0].copy()
        first["basis"] = first["basis_size"]
        out.append(((str(first["mode"]), first), len(group)))
    return out


def _cd_caption(result: ranking.Ranks, metric: str) -> list[str]:
    """What a rank figure shows, its tests and what was left out."""
    words = comparison.METRICS[metric][1]
    methods = "; ".join(result.left_out) or "none"
    if not len(result.ranks):
        return [f"No ranks of {words}: {len(result.names)} entries over {result.n} data "
                f"set(s) (the Friedman test needs at least {comparison.MIN_METHODS} entries "
                f"and 2 data sets). Left out: {methods}."]
    failed = "; ".join(f"{name} on {', '.join(sets)}" for name, sets in result.failures.items()
                       if sets) or "none"
    return [
        f"Average rank of {words} over {result.n} data sets (1 = best). Each method at each "
        "basis size of the run's grid is an entry of its own (none chosen by its test "
        "score); the reference's solvers (the `--reference` algorithms) are one entry; on a data "
        "set, means "
        f"within a relative {ranking.SAME:g} of each other are ordered by their seconds "
        "(learning + fit), cheaper first, and an entry with a failed or trivial split ranks "
        f"last (failed: {failed}). Friedman χ² = {result.chi2:.3g}, p = {result.p:.2g}; "
        f"Iman–Davenport F = {result.iman_davenport:.3g}, p = {result.iman_davenport_p:.2g} "
        f"(Demšar 2006, §3.2.2). The diagram's bars join entries whose average ranks differ "
        f"by less than the Nemenyi critical difference at 5 % (CD = {result.cd:.2f} for k = "
        f"{len(result.names)}, N = {result.n}); the table's last column is each entry's "
        "Wilcoxon signed-rank test against the best over the data sets, Holm-corrected over "
        f"the k − 1 comparisons (Benavoli et al. 2016): with N = {result.n} data sets its "
        f"smallest p is {2 / 2 ** result.n:.2g} before the correction. The per-set columns: "
        + ("the entry's mean test RMSE relative to the reference's" if metric == "rmse" else
           "the entry's mean test NLPD minus the reference's, in nats")
        + f". Left out: {methods}.",
        "",
        ranking.rank_table(result),
    ]


def _figure_lines(figure) -> list[str]:
    """A figure (its file name, or a :class:`~pipeline.report.style.Figure` with its
    caption) as README lines: the image, then its caption."""
    if isinstance(figure, str):
        return [f"![{figure}]({figure})", ""]
    name = Path(figure.path).name
    return [f"![{name}]({name})", "", inert(figure.caption), ""]


def readme(table: pd.DataFrame, *, reference: str | Sequence[str], sweep: str,
           code_version: str, commands: list[str], figures: Sequence,
           mode_order: Sequence[str] = (), grid: str | None = None, notes: str | None = None,
           budgets=BUDGETS, cd: dict | None = None, beside: str | None = None) -> str:
    """The folder's README.md, from the published table alone (plus what the store says of the
    run: its name, code version and commands, and the figures written beside it: the
    frontier ``figures`` and the ``cd`` diagrams of :func:`pipeline.publish.render.cd_figures`);
    ``grid`` (YAML: the sweep's grid as recorded) and ``notes`` (markdown written for the run)
    are added as given; ``beside`` (markdown: :func:`pipeline.publish.elsewhere.beside_tables`)
    follows the figures; the schema listed is :data:`pipeline.publish.job_table.COLUMNS`."""
    order = list(mode_order)
    names = references_of(reference)
    schema = "\n".join(f"| `{name}` | {meaning} |" for name, (_, meaning) in COLUMNS.items())
    # every string from the table (or the run's record) is text: it neither links, embeds nor
    # is HTML; the figure lines, the notes (written for the run) and the code blocks are not
    # escaped (a fence longer than any backtick run inside keeps a code block closed)
    grid_fence = fence(grid or "")
    commands_fence = fence("\n".join(commands))
    return "\n".join([
        f"# Results: {inert(one_line(sweep))}",
        "",
        inert(_summary(table, code_version)),
        "",
        inert("\n".join(_how(table, order))),
        *_ranking_lines(table, order, budgets, cd, names),
        *_reference_lines(table, names, order),
        "## Figures",
        "",
        "The frontier figures draw the ranked settings only (a trivial setting, or one that "
        "finished fewer splits, is left out, as in the tables): each point is a setting's mean "
        "over its splits, once against its fit-only seconds and once against its learning + "
        "fit seconds. The Pareto line is drawn from the means and is not a ranking (the tables "
        "above are).",
        "",
        *[line for figure in figures for line in _figure_lines(figure)],
        *(["## Beside published numbers", "",
           "Numbers of other papers on the same data sets, each beside the setting of this run "
           "closest to theirs, as typed in from the text named under each table (the "
           "`--beside` files of the command below). Their protocol is not this run's (the "
           "notes say how they differ), so the difference of the means is shown with no "
           "test.", "", beside, ""] if beside else []),
        *([notes.strip(), ""] if notes else []),
        *(["## The grid", "",
           "The sweeper's `params`, then the union of its `grids` (each `params` with the "
           "entry's values), and the caps on the peers' own protocols (`own`), as the run "
           "recorded them:", "", f"{grid_fence}yaml", grid, grid_fence, ""] if grid else []),
        f"## The table: {code(f'{sweep}.csv')}",
        "",
        "| column | meaning |",
        "| --- | --- |",
        schema,
        "",
        f"## The settings: {code(f'{sweep}_settings.csv')}",
        "",
        "One row per setting (mode, data set, method, basis size), from the table above as "
        "the README's tables summarise it:",
        "",
        "| column | meaning |",
        "| --- | --- |",
        *(f"| `{name}` | {meaning} |" for name, meaning in comparison.SETTING_COLUMNS.items()),
        "",
        "## Reproduce",
        "",
        f"{commands_fence}bash",
        *commands,
        commands_fence,
        "",
    ])


def _ranking_lines(table: pd.DataFrame, order: list, budgets, cd: dict | None,
                   solvers: list[str]) -> list[str]:
    """The README's sections "Ranks across data sets" and "Best method per time budget"."""
    left = comparison.excluded(table, order)
    ranks = []
    for mode in comparison.modes(table, order):
        tag = "all" if pd.isna(mode) else str(mode)
        for metric in comparison.METRICS:
            result = ranking.ranks(table, mode, metric, solvers)
            figure = (cd or {}).get((tag, metric))
            ranks += [inert(f"**{tag}, {comparison.METRICS[metric][1]}**"), "",
                      *([f"![{figure}]({figure})", ""] if figure else []),
                      inert("\n".join(_cd_caption(result, metric))), ""]
    return [
        "## Ranks across data sets",
        "",
        *ranks,
        "## Best method per time budget",
        "",
        "Per mode, two tables: the budget on the mean *fit-only* seconds, and on the mean "
        "seconds of *learning + fit*. A cell names the entry with the lowest mean test RMSE "
        "among those that finished every split, none trivial, within the budget (equal RMSEs, "
        f"to a relative {ranking.SAME:g}, go to the cheaper; the reference's entry takes the "
        "seconds of its cheaper solver on each split, named after *by*): its RMSE as "
        f"{comparison.CI_WORDS}, its mean seconds, and how many entries are tied with it. "
        f"{comparison.TIE_WORDS} Left out (fewer splits than the data set's others): "
        + inert("; ".join(left["fewer splits"]) or "none") + ".",
        "",
        inert(ranking.budget_tables(table, budgets, order=order, solvers=solvers)),
        "",
    ]


def _reference_lines(table: pd.DataFrame, names: list[str], order: list) -> list[str]:
    """The README's sections "The reference" and "Every setting against the reference"."""
    against = []
    for mode in comparison.modes(table, order):
        tag = "all jobs" if pd.isna(mode) else str(mode)
        against += [f"<details><summary>{html.escape(one_line(tag))}</summary>", "",
                    inert(comparison.against_reference(table, names, mode)), "", "</details>",
                    ""]
    return [
        f"## The reference ({', '.join(code(n) for n in names)})",
        "",
        f"Test RMSE and NLPD as {comparison.CI_WORDS}; seconds of learning + fit; the last "
        "column: the per-split RMSE difference from the first reference, mean ± 95 % CI over "
        "the splits both ran.",
        "",
        inert(reference_table(table, names, order=order)),
        "",
        "## Every setting against the reference",
        "",
        f"Per mode and data set, every setting's test RMSE and NLPD as {comparison.CI_WORDS}, "
        "and Δ: its per-split difference from the reference on the same split (negative: "
        "better than the reference), mean ± corrected 95 % t interval over the splits both ran (in "
        f"brackets). The reference on a split is the first of {', '.join(names)} that has the "
        "metric there (a reference algorithm is compared with the others). Seconds: mean "
        "fit-only and learning seconds. *not ranked*: trivial, or fewer splits than the data "
        "set's other settings.",
        "",
        *against,
    ]
