"""A finished accuracy-against-time run as a publishable folder (the `uci_frontier` results).

    python -m pipeline.publish outputs/uci_frontier/results.zarr --reference <algorithm>[,…]
    python -m pipeline.publish docs/results/uci_frontier.csv --reference … [--out …]

From the store it writes to ``--out`` (default ``outputs/published``; the project's published
results are written with ``--out docs/results``, a directory given explicitly):

- ``uci_frontier.csv`` (the sweep's name): one row per job and mode,
  :data:`~pipeline.publish.job_table.COLUMNS` (:func:`~pipeline.publish.job_table.job_table`;
  missing baselines and the ``trivial``/``contended`` flags:
  :func:`~pipeline.publish.job_table.complete`);
- ``uci_frontier_settings.csv``: one row per setting, each mean with its corrected 95 % t
  interval's bounds over the splits (:func:`pipeline.publish.comparison.settings_table`);
- ``uci_frontier.run.yaml``: the run's command, code version, grid, modes, budgets, figures
  (:mod:`pipeline.publish.run_record`);
- frontier figures drawn from the CSV (per mode, metric, and fit-only or learning + fit
  seconds; only settings with no trivial or failed split: :mod:`pipeline.publish.table_frontier`)
  and a critical-difference diagram per mode and metric
  (:func:`pipeline.publish.render.cd_figures`), each PNG checked to be ≤
  :data:`~pipeline.publish.render.MAX_FIGURE_BYTES`;
- ``README.md`` (:func:`pipeline.publish.published.readme`; :mod:`pipeline.publish.comparison`,
  :mod:`~pipeline.publish.ranking`): the ranks, the best per budget, every setting against the
  reference, the flags' rules, numbers published elsewhere (``--beside``,
  :mod:`pipeline.publish.elsewhere`), notes, grid, commands.

Given a published CSV (with its ``.run.yaml`` beside it) instead of a store, it rewrites the
CSV in the current columns and draws every figure and the README again from it.

``--out`` is a new or empty folder or an earlier publication's: the files are staged beside it
and switched in, overwriting or removing only files an earlier publication recorded with their
sha256 (:mod:`pipeline.publish.publication_files`, which states the guarantee). Every input is
untrusted (:mod:`pipeline.publish.untrusted`): names read from records are plain, inputs that
are not regular files are refused before they are opened.

A run longer than the life of the machine that holds its ``outputs/`` is published from its
legs (:mod:`pipeline.publish.legs`): after each leg, ``--legs <folder>`` keeps every finished
(data set, split) of the store as a small verified record; the folder, given in place of the
store, publishes their union, checked to be one protocol and one code version::

    python -m pipeline.publish outputs/uci_frontier/results.zarr \
        --legs docs/results/uci_frontier_legs
    python -m pipeline.publish docs/results/uci_frontier_legs --reference <algorithm> \
        --out docs/results
"""

from __future__ import annotations

import sys

from algorithms.errors import InputError
from pipeline.command import OneLineParser, fail
from pipeline.publish.folder import publish
from pipeline.publish.legs import save_legs

USAGE = ("python -m pipeline.publish <results.zarr | legs folder | published.csv> --reference "
         "<algorithm>[,<algorithm>] [--out docs/results] [--notes <file.md>] [--beside "
         "<file.csv> …]; or "
         "python -m pipeline.publish <results.zarr> --legs <folder>")
DEFAULT_OUT = "outputs/published"  # under outputs/, as every default output; --out elsewhere


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    parser = OneLineParser(prog="python -m pipeline.publish", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a finished sweep's results.zarr, a folder of a run's "
                                        "legs, or a published table (<sweep>.csv, its "
                                        "<sweep>.run.yaml beside it)")
    parser.add_argument("--reference",
                        help="the algorithm whose jobs are the run's reference (the full GP), "
                             "or several, comma-separated: the factored full GP, then PCG")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"the folder to write (default {DEFAULT_OUT}; the published "
                             "results: --out docs/results)")
    parser.add_argument("--notes", default=None,
                        help="a markdown file written for the run (its design, the time it "
                             "took, comparisons), put in the README after the figures")
    parser.add_argument("--beside", action="append", default=[], metavar="FILE.csv",
                        help="numbers published elsewhere to set beside the run's, one row "
                             "each (pipeline.publish.elsewhere: source, data set, their "
                             "method, metric, mean, sd, trials, the setting of this run, where "
                             "read); repeat for several files")
    parser.add_argument("--legs", default=None,
                        help="instead of publishing: keep each finished (data set, split) of "
                             "the store as a leg in this folder (pipeline.publish.legs)")
    try:
        args = parser.parse_args(argv)
        if args.legs is not None:
            return _print_legs(args.legs, *save_legs(args.results, args.legs))
        if args.reference is None:
            raise InputError("--reference is missing: name the run's reference algorithm(s), "
                             "the full GP's (or pass --legs <folder> to keep legs)")
        path = publish(args.results, args.out, args.reference, args.notes, args.beside)
    except InputError as err:
        return fail(err)
    except (TypeError, ValueError, KeyError) as err:  # a table this code did not foresee
        return fail(InputError(
            f"cannot publish {args.results} with --reference {args.reference}: "
            f"{type(err).__name__}: {err}; check that the run finished the reference's jobs on "
            "every data set (python -m pipeline.report <results.zarr>), else report this line"))
    print(f"published: {path}")
    return 0


def _print_legs(folder: str, saved: list, there: list, unfinished: list, mixed: list) -> int:
    """Say which units ``--legs`` saved, found kept, or left; exit 1 with one ``error:`` line
    per unit refused for mixing code versions."""
    def units(pairs: list) -> str:
        return ", ".join(f"{d} split {s}" for d, s in pairs) or "none"

    print(f"legs in {folder}: saved {units(saved)}; already there (left as they are): "
          f"{units(there)}; unfinished (jobs missing; not saved): {units(unfinished)}")
    for (dataset, split), why in mixed:
        print(f"error: {dataset} split {split} not saved: {why} (a point of an earlier "
              "command beside the rerun of the current grid); run the unit again in a fresh "
              "sweep directory (sweep=<name>)", file=sys.stderr)
    return 1 if mixed else 0
