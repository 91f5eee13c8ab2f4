"""Declared options: a default plus the accepted kind and range, validated in one place.

Algorithm specs (:mod:`algorithms.contract`), kernels (:mod:`algorithms.kernels`) and dataset
specs (:mod:`pipeline.datasets.spec`) declare their options as :class:`Option` tables; the
yaml files of ``conf/`` are tested against those tables, so every default lives here once.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.errors import InputError

KINDS = ("int", "float", "bool", "str", "path", "choice", "any")

# an ``int`` option without its own ``hi`` (``lo``) is at most INT_MAX (at least −INT_MAX): a
# size, a count or an index that numpy's and the stores' 32-bit integers hold; an option that
# may be larger (bytes) declares its own ``hi``
INT_MAX = 2**31 - 1
# seeds: numpy's RandomState takes 0 ≤ seed < 2**32, and the stores keep them as int64
SEED_MAX = 2**32 - 1
# memory sizes in bytes (256 TiB)
BYTES_MAX = 2**48


@dataclass(frozen=True)
class Option:
    """One option: its default, the accepted kind and range, and what it means.

    ``kind`` is one of :data:`KINDS`; ``choices`` lists the values of a ``choice``;
    ``parse`` (for ``any``) returns the validated value or raises :class:`InputError`.
    ``clip_to_n``: a size bounded by the training set (a basis, a subset): an integer value
    above n_train is clipped to n_train by :func:`clip_to_n`, which says so, rather than
    refused (a sweep's one value across datasets of several sizes, a default above a small
    dataset's size).
    """

    default: Any
    kind: str
    doc: str = ""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    none_ok: bool = False
    choices: tuple = ()
    example: Any = None
    parse: Callable[[Any], Any] | None = None
    clip_to_n: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Option kind {self.kind!r} is not one of {KINDS}")

    def describe(self, value: Any = None) -> str:
        """What the option accepts, e.g. ``an integer ≥ 1``; with ``value``, an integer out of
        the default range (:data:`INT_MAX`) is named with the bound it passed."""
        what = {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "path": "a file path", "any": self.doc or "a value",
                "choice": "one of " + ", ".join(map(str, self.choices))}[self.kind]
        def number(x: float) -> str:
            return str(int(x)) if self.kind == "int" and float(x).is_integer() else f"{x:g}"
        if self.lo is not None and self.hi is not None:
            what += (f" in {'(' if self.lo_open else '['}{number(self.lo)}, "
                     f"{number(self.hi)}{')' if self.hi_open else ']'}")
        elif self.lo is not None:
            what += f" {'>' if self.lo_open else '≥'} {number(self.lo)}"
        if self.kind == "int" and isinstance(value, (int, float, np.integer, np.floating)) \
                and not isinstance(value, (bool, np.bool_)):
            if self.hi is None and value > INT_MAX:
                what += f" and ≤ {INT_MAX}"
            elif self.lo is None and value < -INT_MAX:
                what += f" and ≥ {-INT_MAX}"
        return what + (" or null" if self.none_ok else "")

    def check(self, value: Any) -> tuple[bool, Any]:
        """(valid, normalised value)."""
        if value is None:
            return self.none_ok, None
        if self.kind == "any":
            return True, value if self.parse is None else self.parse(value)
        if self.kind == "choice":
            return value in self.choices, value
        if self.kind == "bool":
            return isinstance(value, (bool, np.bool_)), bool(value)
        if self.kind in ("str", "path"):
            return isinstance(value, str) and value != "", value
        if isinstance(value, (bool, np.bool_)):
            return False, value
        if self.kind == "int":
            if isinstance(value, (float, np.floating)) and float(value).is_integer():
                value = int(value)
            if not isinstance(value, (int, np.integer)):
                return False, value
            value = int(value)
        else:
            if not isinstance(value, (int, float, np.integer, np.floating)):
                return False, value
            value = float(value)
            if not math.isfinite(value):
                return False, value
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False, value
        if self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)):
            return False, value
        if self.kind == "int":
            lo, hi = self.int_bounds()
            if not lo <= value <= hi:
                return False, value
        return True, value

    def int_bounds(self) -> tuple[float, float]:
        """The range an ``int`` option accepts: its own ``lo``/``hi``, else ±:data:`INT_MAX`."""
        return (self.lo if self.lo is not None else -INT_MAX,
                self.hi if self.hi is not None else INT_MAX)

    def bad_values(self) -> list:
        """Values this option must refuse (for the contract tests)."""
        out: list = []
        if not self.none_ok:
            out.append(None)
        if self.kind in ("int", "float"):
            out.append("abc")
            if self.lo is not None:
                out.append(self.lo - 1 if self.kind == "int" else self.lo - 1.0)
        elif self.kind == "choice":
            out.append("no-such-choice")
        elif self.kind == "bool":
            out.append("yes")
        return out


def validate(options: Mapping[str, Option], given: Mapping[str, Any], *, owner: str,
             prefix: str) -> dict[str, Any]:
    """Every option of ``options`` with its given or default value, validated.

    ``owner`` names what the options belong to in messages (e.g. "algorithm sgma") and
    ``prefix`` how the user spells them (e.g. "algorithm." for ``algorithm.eps=0.1``).
    Raises :class:`InputError` for an unknown option or a value of the wrong kind or range.
    """
    unknown = sorted(str(k) for k in given if k not in options)
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(options), n=1)
        hint = f"did you mean {prefix}{close[0]}? " if close else ""
        raise InputError(f"{owner} has no option {unknown[0]!r}; {hint}its options: "
                         f"{', '.join(sorted(options)) or '(none)'}")
    out = {}
    for key, opt in options.items():
        value = given.get(key, opt.default)
        ok, value = opt.check(value)
        if not ok:
            example = opt.example if opt.example is not None else opt.default
            raise InputError(f"{owner}: {prefix}{key}={given.get(key, opt.default)!r} is invalid; "
                             f"it must be {opt.describe(value)}, e.g. {prefix}{key}="
                             f"{json.dumps(example)}")
        out[key] = value
    return out


def clip_to_n(options: Mapping[str, Option], values: Mapping[str, Any], n: int, *,
              prefix: str) -> tuple[dict[str, Any], str]:
    """``values`` with every integer of a :attr:`Option.clip_to_n` option above ``n`` set to
    ``n``, and a note naming each change (empty when none), e.g.
    ``algorithm.max_basis=256 clipped to n_train=60``."""
    out, notes = dict(values), []
    for key, opt in options.items():
        value = out.get(key)
        if (opt.clip_to_n and isinstance(value, (int, np.integer))
                and not isinstance(value, (bool, np.bool_)) and value > n):
            out[key] = n
            notes.append(f"{prefix}{key}={value} clipped to n_train={n}")
    return out, "; ".join(notes)


def defaults(options: Mapping[str, Option]) -> dict[str, Any]:
    return {key: opt.default for key, opt in options.items()}
