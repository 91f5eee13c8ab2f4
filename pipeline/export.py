"""A sweep's results as one tidy table for pandas, R or a spreadsheet; several sweeps' results
as one store.

    python -m pipeline.export outputs/<sweep>/results.zarr results.csv [--per job|step]
    python -m pipeline.export combine <A/results.zarr> <B/results.zarr> [...] [--out <path>]

``--per step`` (the default): one row per distinct finished job and step at which a trace
variable has a value; ``--per job``: one row per distinct job with its final values, status
and error. Jobs that a sweep repeats along a dim they do not depend on (κ for the exact GP, the
seed of a deterministic method) appear once, with an empty value in that dim. The format
follows the suffix: ``.csv``, or ``.parquet`` (needs pyarrow: ``pip install -e '.[export]'``).
See :func:`pipeline.results.access.tidy`.

``combine`` joins the results of sweeps run with the same settings into one verified store
(:func:`pipeline.results.combined.combine`: the union of their points and dims, a job held by
two checked to give the same numbers to ``--rtol``, its timings kept from the first store).
``--out`` is a new ``.zarr`` (a results store that ``pipeline.results.load`` and
``pipeline.report`` read) or ``.nc`` path, never overwritten; by default
``outputs/<A>-<B>/results.zarr`` (under the working directory's outputs/, as every default
output; an explicit ``--out`` is the user's choice).

Neither writes inside a zarr store (``outputs/<sweep>/results.zarr/table.csv``): a sweep's
``results.zarr`` is replaced whole by its next run, which refuses to while a file it did not
write is inside it (:mod:`pipeline.results.ownership`). Such a path is refused in one line
naming a place beside the store (``outputs/<sweep>/export/table.csv``). Refusing, rather than
recording the table in the store so that consolidation keeps it, keeps a table from outliving
the results it was made of: the rebuilt store would hold a stale one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd

from algorithms.errors import InputError
from pipeline.atomic import atomic_path
from pipeline.command import OneLineParser, fail
from pipeline.oserrors import write_failure
from pipeline.outputs import check_under_outputs
from pipeline.results.access import tidy
from pipeline.results.consolidate import load
from pipeline.results.ownership import enclosing_store, inside_store_error

USAGE = "python -m pipeline.export <results.zarr> <out.csv|out.parquet> [--per job|step]"
COMBINE_USAGE = ("python -m pipeline.export combine <A/results.zarr> <B/results.zarr> [...] "
                 "[--out outputs/<name>/results.zarr|.nc] [--rtol R]")
FORMATS = (".csv", ".parquet")


def export(results: str | Path, out: str | Path, per: str = "step") -> pd.DataFrame:
    """Write the tidy table of ``results`` (a verified results.zarr) to ``out``; returns it.

    Raises :class:`InputError` (one line) for an unknown suffix, a missing pyarrow for
    parquet, an unsound store or an unwritable ``out``."""
    out = Path(out)
    if out.suffix not in FORMATS:
        raise InputError(f"{out}: unknown format {out.suffix or '(no suffix)'!r}; name the "
                         f"output file with one of {', '.join(FORMATS)}")
    store = enclosing_store(out)  # its next consolidation would refuse while it is there
    if store is not None:
        raise InputError(inside_store_error(out, store))
    if out.suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise InputError(f"{out}: writing parquet needs pyarrow; pip install pyarrow (or "
                         "pip install -e '.[export]'), or write .csv")
    table = tidy(load(results).load(), per)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            if out.suffix == ".csv":
                table.to_csv(tmp, index=False)
            else:
                table.to_parquet(tmp, index=False)
    except OSError as err:
        raise InputError(f"cannot write {out}: " + write_failure(
            err, out, elsewhere="pass a path in a writable directory", rerun="rerun")) from None
    return table


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["combine"]:
        return combine_main(argv[1:])
    parser = OneLineParser(prog="python -m pipeline.export", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a sweep's results.zarr")
    parser.add_argument("out", help="the table to write: .csv or .parquet")
    parser.add_argument("--per", choices=("job", "step"), default="step",
                        help="one row per job and evaluated step (default), or per job")
    try:
        args = parser.parse_args(argv)
        table = export(args.results, args.out, args.per)
    except InputError as err:
        return fail(err)
    print(f"{len(table)} rows × {table.shape[1]} columns (one per {args.per}): {args.out}")
    return 0



def _sweep_name(store: str) -> str:
    path = Path(store)
    return (path.parent if path.name == "results.zarr" else path.with_suffix("")).name


def combine_main(argv: list[str]) -> int:
    """``python -m pipeline.export combine``: one ``error: …`` line and exit code 2 on bad
    input (a store that is not one, settings or numbers that differ, an existing --out)."""
    from pipeline.results.combined import RTOL, combine, write_combined

    parser = OneLineParser(prog="python -m pipeline.export combine", description=__doc__,
                           usage_line=COMBINE_USAGE)
    parser.add_argument("stores", nargs="+", help="the results.zarr of each sweep")
    parser.add_argument("--out", help="the combined store to write: a new .zarr or .nc path "
                                      "(default outputs/<A>-<B>/results.zarr)")
    parser.add_argument("--rtol", type=float, default=RTOL,
                        help=f"relative tolerance of a job's numbers held twice (default {RTOL:g})")
    try:
        args = parser.parse_args(argv)
        if len(args.stores) < 2:
            raise InputError(f"combine got one store ({args.stores[0]}); pass two or more "
                             f"results.zarr; usage: {COMBINE_USAGE}")
        out = args.out
        store = None if out is None else enclosing_store(out)
        if store is not None:  # said before the stores are read
            raise InputError(inside_store_error(out, store, "--out"))
        if out is None:
            out = Path("outputs") / "-".join(map(_sweep_name, args.stores)) / "results.zarr"
            check_under_outputs(out, "the combined store's default --out", "--out <path>")
        ds = combine(*args.stores, rtol=args.rtol)
        written = write_combined(ds, out)
    except InputError as err:
        return fail(err)
    status = ds["status"].values
    counts = ", ".join(f"{(status == s).sum()} {s}" for s in ("ok", "failed", "missing"))
    print(f"{len(args.stores)} stores combined: {status.size} sweep points ({counts}) over "
          f"{', '.join(f'{d} {n}' for d, n in ds['status'].sizes.items())}")
    print(f"results: {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
