"""Whether two sweeps computed the same numbers: their ``results.zarr`` compared variable by
variable, on the same coordinates, timings and where each job ran left out.

    python -m pipeline.results.compare A/results.zarr B/results.zarr [--rtol 1e-12]

Prints one line per variable that differs (its largest relative difference) and a summary;
exits 0 when every compared variable agrees within ``rtol``, 1 when one does not, 2 on bad
input (one ``error: …`` line). Used to check that a change of code that should not change any
number (a refactoring) did not: run the same experiment before and after, compare.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import xarray as xr

from algorithms.errors import InputError
from pipeline.command import OneLineParser, fail
from pipeline.results.consolidate import load

USAGE = "python -m pipeline.results.compare <A/results.zarr> <B/results.zarr> [--rtol R]"
# what depends on when, where and how a job ran, not on what it computed
EXECUTION_WORDS = ("seconds", "worker", "job_hash", "blas_threads", "kernel_threads",
                   "cpu_model", "peak", "rss", "memory", "load_start", "load_end", "cores",
                   "warmup", "cluster_")


def execution(name: str) -> bool:
    """Whether variable ``name`` says when, where or how a job ran (its times, worker, hash,
    threads, CPU, memory, the machine's load, the warm-up, its cluster layout), not what it
    computed."""
    return any(word in name for word in EXECUTION_WORDS)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| / max(|a|, |b|) over the entries (0 where both agree, NaN included;
    inf where only one is NaN)."""
    if np.any(np.isnan(a) != np.isnan(b)):
        return float("inf")
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore"):  # inf − inf where both are inf: masked by ``same``
        rel = np.where(same, 0.0, np.abs(a - b) / np.where(scale == 0, 1.0, scale))
    rel = np.where(~same & (np.isinf(a) | np.isinf(b)), np.inf, rel)  # inf against a number
    return float(rel.max()) if rel.size else 0.0


def compare(a: xr.Dataset, b: xr.Dataset) -> dict[str, float]:
    """Each shared variable's largest relative difference (inf: other shape, coordinates,
    NaN pattern or non-numeric values); raises InputError when the two have other dims or
    variables."""
    if dict(a.sizes) != dict(b.sizes):
        raise InputError(f"the two stores have other dims ({dict(a.sizes)} and "
                         f"{dict(b.sizes)}); pass the results of the same sweep")
    names = {n for n in a.variables if not execution(n)}
    other = names ^ {n for n in b.variables if not execution(n)}
    if other:
        raise InputError(f"variables in one store only: {', '.join(sorted(other))}; pass the "
                         "results of the same sweep")
    out = {}
    for name in sorted(names):
        x, y = a[name], b[name]
        if x.dims != y.dims or any(not np.array_equal(a[d].values, b[d].values)
                                   for d in x.dims if d in a.coords):
            out[name] = float("inf")
        elif x.dtype.kind in "fc" and y.dtype.kind in "fc":
            out[name] = _relative(np.asarray(x.values, dtype=float),
                                  np.asarray(y.values, dtype=float))
        else:
            out[name] = 0.0 if np.array_equal(np.asarray(x.values).astype(str),
                                              np.asarray(y.values).astype(str)) else float("inf")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m pipeline.results.compare", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rtol", type=float, default=1e-12)
    try:
        args = parser.parse_args(argv)
        diffs = compare(load(args.a), load(args.b))
    except InputError as err:
        return fail(err)
    bad = {name: d for name, d in diffs.items() if d > args.rtol}
    for name, d in sorted(bad.items()):
        print(f"differs: {name}: largest relative difference {d:.3g}")
    worst = max(diffs.values(), default=0.0)
    print(f"{len(diffs)} variables compared, {len(diffs) - len(bad)} equal within "
          f"rtol={args.rtol:g}; largest relative difference {worst:.3g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
