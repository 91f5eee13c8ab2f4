"""The critical-difference diagram of Demšar (2006), *Statistical Comparisons of Classifiers over
Multiple Data Sets*, JMLR 7:1–30, Fig. 1: an axis of average ranks (1 = best, on the left),
each method a tick with its name and rank beside it (the better half to the left, the rest to
the right), thick bars joining the methods whose ranks differ by less than the Nemenyi
critical difference (:func:`pipeline.publish.stats.cliques`), and the CD drawn above the axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pipeline.atomic import save_figure  # noqa: E402
from pipeline.publish.stats import cliques  # noqa: E402

ROW = 0.28  # inches between two labels
BAR = 0.12  # inches between two clique bars
AXIS = 4.6  # inches of the rank axis
CHAR = 0.075  # inches per character of a 9-point label (generous)


def cd_diagram(names: Sequence[str], ranks: Sequence[float], cd: float, path: str | Path,
               title: str = "", dpi: int = 110) -> Path:
    """Draw the CD diagram of methods ``names`` at average ``ranks`` with critical difference
    ``cd`` into ``path`` (PNG); returns the path."""
    r = np.asarray(ranks, dtype=np.float64)
    k = len(r)
    order = list(np.argsort(r, kind="stable"))
    left, right = order[: (k + 1) // 2], order[(k + 1) // 2:][::-1]
    groups = cliques(r, cd)
    labels = [f"{name} ({rank:.2f})" for name, rank in zip(names, r, strict=True)]
    margin = 0.45 + CHAR * max(len(label) for label in labels)  # inches beside the axis
    width = AXIS + 2 * margin
    # inches from the top: the title, the CD, the ranks' numbers, the axis, the bars, the labels
    cd_at = 0.2 + (0.3 if title else 0.0)
    axis_at = cd_at + 0.5
    first = axis_at + 0.25 + BAR * len(groups)
    height = first + ROW * (max(len(left), len(right)) - 1) + 0.25
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, width), ylim=(height, 0))  # inches, y downwards
    ax.set_axis_off()
    lo, hi = 1, max(k, int(np.ceil(r.max())))

    def x(rank: float) -> float:
        return margin + AXIS * (rank - lo) / (hi - lo)

    if title:
        ax.text(width / 2, 0.12, title, ha="center", va="top", fontsize=10)
    ax.plot([x(lo), x(lo + cd)], [cd_at, cd_at], color="k", lw=1.2)
    for end in (lo, lo + cd):
        ax.plot([x(end), x(end)], [cd_at - 0.05, cd_at + 0.05], color="k", lw=1.2)
    ax.text(x(lo + cd) + 0.08, cd_at, f"CD = {cd:.2f}", ha="left", va="center", fontsize=9)
    ax.plot([x(lo), x(hi)], [axis_at, axis_at], color="k", lw=1)
    for t in np.arange(lo, hi + 0.01, 0.5):
        whole = float(t).is_integer()
        ax.plot([x(t), x(t)], [axis_at, axis_at - (0.08 if whole else 0.05)], color="k", lw=0.8)
        if whole:
            ax.text(x(t), axis_at - 0.11, f"{int(t)}", ha="center", va="bottom", fontsize=9)
    for g, group in enumerate(groups):  # under the axis, one below the other
        y = axis_at + 0.18 + g * BAR
        ax.plot([x(r[group[0]]) - 0.04, x(r[group[-1]]) + 0.04], [y, y], color="k", lw=3,
                solid_capstyle="butt")
    for side, members in (("left", left), ("right", right)):
        for row, i in enumerate(members):
            y = first + row * ROW
            end = margin - 0.25 if side == "left" else margin + AXIS + 0.25
            ax.plot([x(r[i]), x(r[i]), end], [axis_at, y, y], color="0.3", lw=0.9, zorder=0)
            ax.text(end - 0.05 if side == "left" else end + 0.05, y, labels[i], fontsize=9,
                    ha="right" if side == "left" else "left", va="center")
    save_figure(fig, path, dpi=dpi)
    plt.close(fig)
    return Path(path)
