"""The look shared by a report's figures: a style per setting that tells overlapping lines
apart, math text in labels, one legend beside the panels and a caption under them.
"""

from __future__ import annotations

import itertools
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from pipeline.atomic import save_figure  # noqa: E402

MARKERS = "osD^vP*Xh<>p"  # per setting: with the line style, overlapping lines stay visible
LINESTYLES = ["-", (0, (5, 1.5)), "-.", (0, (1.5, 1))]
OVERLAP = 0.01  # mean lines within 1 % of the panel's height everywhere: said in the caption

class Figure(NamedTuple):
    """A figure written to ``path`` and the caption line that explains its marks."""

    path: Path
    caption: str


_FUNCTION = re.compile(r"(?<![\w.$])([A-Z])\((\w)\^(\w+)\)")  # R(w^k)
_HAT = re.compile(r"(?<![\w.$])([A-Z])\(ŵ\)")  # R(ŵ)
_POWER = re.compile(r"(?<![\w.$])([A-Za-zλσ])\^(\w+)(\(\w+\))?")  # E^g(n)
_INDEX = re.compile(r"(?<![\w.$])([A-ZλσμΣ])(\*?)_(\{[^}]*\}|[A-Za-z0-9]+)")  # L_min, λ_m


def math_text(text: str) -> str:
    """``text`` with its plain-text formulas as matplotlib math: ``R(w^k)`` → ``$R(w^k)$``,
    ``R(ŵ)`` → ``$R(\\hat{w})$``,
    ``L_min`` → ``$L_{min}$``, ``L*_min`` → ``$L^*_{min}$``, ``E^g(n)`` → ``$E^g(n)$``."""
    text = _FUNCTION.sub(r"$\1(\2^{\3})$", text)
    text = _HAT.sub(r"$\1(\\hat{w})$", text)
    text = _POWER.sub(lambda m: f"${m[1]}^{{{m[2]}}}{m[3] or ''}$", text)
    return _INDEX.sub(lambda m: f"${m[1]}{'^*' if m[2] else ''}_{{{m[3].strip('{}')}}}$",
                      text)


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


def _subplots(n_panels: int, height: float = 4.4):
    """One row of panels with room on the right for the legend (constrained layout)."""
    return plt.subplots(1, n_panels, figsize=(5.6 * n_panels + 2.6, height), squeeze=False,
                        layout="constrained")


def _finish(fig, axes, path: Path, caption: str) -> Figure:
    """One legend for the figure beside the panels (outside the data; one entry per label),
    the caption under them, and the PNG."""
    handles: dict[str, object] = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), [_wrap(math_text(k), 34) for k in handles],
                   loc="outside right upper", fontsize=7, frameon=False)
    if caption:
        width = int(fig.get_figwidth() * 13)
        fig.supxlabel(_wrap(math_text(caption), width), fontsize=8, x=0.01, ha="left",
                      color="0.25")
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return Figure(path, caption)


def plain_log_ticks(axis) -> None:
    """A log axis ticked at 1, 2 and 5 times the powers of ten, labelled as plain numbers
    (matplotlib's minor labels of a narrow range overlap)."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _style(i: int) -> dict:
    """Line style and marker of the i-th setting: with its colour, no two settings look alike
    and a series drawn over another still shows."""
    return {"ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def _markevery(n_points: int, i: int, n_series: int):
    """Every point of a short line; about ten markers on a long one, staggered between the
    settings so that markers of overlapping lines do not hide each other."""
    if n_points <= 12:
        return None
    every = max(1, n_points // 10)
    return (int(i * every / max(n_series, 1)) % every, every)


def _palette(n: int) -> list:
    """n distinct colours: tab10, or tab20 beyond ten lines."""
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _title(ax, text: str, width: int = 58) -> None:
    ax.set_title(_wrap(math_text(text), width), fontsize=10)


def _ylabel(ax, text: str, width: int = 45) -> None:
    ax.set_ylabel(_wrap(math_text(text), width), fontsize=9)


def _overlaps(means: list[tuple[object, str, np.ndarray, np.ndarray]]) -> list[str]:
    """Groups of settings whose mean lines in one panel lie within OVERLAP of the panel's
    height of each other at every common point (one may hide another), as ``a, b and c``."""
    pairs = []
    for (ax, a, xa, ya), (bx, b, xb, yb) in itertools.combinations(means, 2):
        if ax is not bx or a == b or len(xa) != len(xb) or not np.array_equal(xa, xb):
            continue
        log = ax.get_yscale() == "log"
        with np.errstate(divide="ignore", invalid="ignore"):
            fa, fb = (np.log10(ya), np.log10(yb)) if log else (ya, yb)
            low, high = np.log10(ax.get_ylim()) if log else ax.get_ylim()
        ok = np.isfinite(fa) & np.isfinite(fb)
        if ok.sum() < 2 or not np.all(np.abs(fa[ok] - fb[ok]) <= OVERLAP * abs(high - low)):
            continue
        pairs.append((a, b))
    return [and_list(g) for g in grouped(pairs)]


def grouped(pairs) -> list[list[str]]:
    """The groups that pairs of names linked by some relation (drawn over each other) join
    into, each in the order its names first appear."""
    groups: list[list[str]] = []
    for a, b in pairs:
        joined = [g for g in groups if a in g or b in g]
        merged = list(dict.fromkeys([*(x for g in joined for x in g), a, b]))
        groups = [g for g in groups if g not in joined] + [merged]
    return groups


def and_list(names: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(names[:-1]) + f" and {names[-1]}"
