"""The look shared by a report's figures: one colour and marker per method in every figure
(:func:`line_styles`), a line style per setting that tells overlapping lines apart, math text
in labels and one legend beside the panels. A figure's caption is returned with it and written
once, under the figure in the report (never also inside the PNG).
"""

from __future__ import annotations

import itertools
import re
import textwrap
import zlib
from collections.abc import Sequence
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


def panel_row(n_panels: int, height: float = 4.4):
    """One row of panels with room on the right for the legend (constrained layout)."""
    return plt.subplots(1, n_panels, figsize=(5.6 * n_panels + 2.6, height), squeeze=False,
                        layout="constrained")


def finish_figure(fig, axes, path: Path, caption: str) -> Figure:
    """One legend for the figure beside the panels (outside the data; one entry per label) and
    the PNG; the caption goes with it to the report, which prints it under the figure."""
    handles: dict[str, object] = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), [_wrap(math_text(k), 34) for k in handles],
                   loc="outside right upper", fontsize=7, frameon=False)
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return Figure(path, caption)


def plain_log_ticks(axis) -> None:
    """A log axis ticked at 1, 2 and 5 times the powers of ten, labelled as plain numbers
    (matplotlib's minor labels of a narrow range overlap)."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def setting_style(i: int) -> dict:
    """Line style and marker of the i-th setting: with its colour, no two settings look alike
    and a series drawn over another still shows."""
    return {"ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def markevery_for(n_points: int, i: int, n_series: int):
    """Every point of a short line; about ten markers on a long one, staggered between the
    settings so that markers of overlapping lines do not hide each other."""
    if n_points <= 12:
        return None
    every = max(1, n_points // 10)
    return (int(i * every / max(n_series, 1)) % every, every)


# One colour (tab10's index, or a colour name) and marker per method, the same in every figure
# of every report and of docs/results: the eleven methods of the published comparison each have
# a colour of their own (tab10's ten and black); a method that no shipped experiment draws
# beside another of its colour shares that colour, told apart by its marker
# (tests/test_report_figures.py checks both).
def method_styles() -> dict[str, tuple[int | str, str]]:
    """conf/method_styles.yaml: each method's (tab10 index or a matplotlib colour name,
    marker), one for every figure."""
    from pipeline.config import CONF_DIR, read_yaml

    return {str(k): (v[0] if isinstance(v[0], str) else int(v[0]), str(v[1])) for k, v in
            read_yaml(CONF_DIR / "method_styles.yaml").items()}


SHADE = 0.55  # a method's settings: its colour, then tints up to this much lighter (darker
# shades of one method's colour would turn into another's: orange into sgma's brown)


def method_style(name: str) -> tuple[tuple, str]:
    """(RGBA colour, marker) of the method ``name``: :func:`method_styles`, or for a method not
    listed there a pair chosen by a stable hash of its name (the same in every run)."""
    index, marker = method_styles().get(name) or (
        lambda h: (h % 10, MARKERS[(h // 10) % len(MARKERS)]))(zlib.crc32(name.encode()))
    if isinstance(index, str):  # a colour of its own beyond tab10's ten
        return matplotlib.colors.to_rgba(index), marker
    return plt.get_cmap("tab10")(index), marker


def _shade(colour, t: float) -> tuple:
    """``colour`` mixed with black (t < 0) or white (t > 0) by |t|."""
    rgb = np.asarray(colour[:3], dtype=float)
    rgb = rgb * (1 + t) if t < 0 else rgb + (1 - rgb) * t
    return (*rgb.tolist(), 1.0)


def line_styles(lines: Sequence[tuple[str, str]]) -> dict[str, dict]:
    """Colour and marker of every line (label, method) a report draws, one mapping for all its
    figures: a method drawn as one line has its own :func:`method_style`; the lines of a
    method drawn with several settings keep its marker, in tints of its colour; when every
    line is one method's (its settings told apart), tab10/tab20 colours and markers by
    position instead."""
    labels = list(dict.fromkeys(lines))
    methods = list(dict.fromkeys(method for _, method in labels))
    if len(methods) == 1 and len(labels) > 1:
        colours = palette(len(labels))
        return {label: {"color": colours[i], "marker": MARKERS[i % len(MARKERS)]}
                for i, (label, _) in enumerate(labels)}
    out = {}
    for method in methods:
        colour, marker = method_style(method)
        mine = [label for label, m in labels if m == method]
        shades = np.linspace(0.0, SHADE, len(mine))
        out.update({label: {"color": _shade(colour, float(t)), "marker": marker}
                    for label, t in zip(mine, shades, strict=True)})
    return out


def palette(n: int) -> list:
    """n distinct colours: tab10, or tab20 beyond ten lines."""
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def panel_title(ax, text: str, width: int = 58) -> None:
    ax.set_title(_wrap(math_text(text), width), fontsize=10)


def panel_ylabel(ax, text: str, width: int = 45) -> None:
    ax.set_ylabel(_wrap(math_text(text), width), fontsize=9)


def overlapping_settings(means: list[tuple[object, str, np.ndarray, np.ndarray]]) -> list[str]:
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
