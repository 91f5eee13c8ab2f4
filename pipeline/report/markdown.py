"""Markdown the product writes, kept inert whatever strings it carries.

Reports and published READMEs are written from strings read out of results stores, result
files and CSVs (error texts, dataset and algorithm names, labels, config strings): input the
product did not write, which could hold a Markdown image of a local file
(``![x](/etc/passwd)``), a link, an autolink or raw HTML. :func:`inert` escapes, outside code
spans, every character that could make one of those: ``\\``; ``]`` before ``(``, ``[`` or
``:`` (an inline link or image, a reference link, a link definition: without them a bracket is
text, so a label such as ``error [target units]`` stays as typed); and ``<`` before a letter,
``/``, ``!`` or ``?``. A Markdown renderer then shows the text as typed and never fetches,
embeds or links anything. The product's own figure lines (``![stem](file)``) are added after
it, and only those.
"""

from __future__ import annotations

import re

from pipeline.lines import one_line

# what can make an image, a link, a link definition, an autolink or HTML (``<`` before a
# letter, ``/``, ``!`` or ``?``; ``|x| < 1e-14`` keeps its ``<`` as typed)
ACTIVE = re.compile(r"(\\|\](?=[(\[:])|<(?=[A-Za-z/!?]))")
BACKTICKS = re.compile(r"`+")


def _escape_outside_code(text: str) -> str:
    """``text`` with :data:`ACTIVE` characters backslash-escaped outside code spans (a run of
    n backticks closed by the next run of exactly n, as CommonMark reads them; inside a code
    span nothing is active, and an escape would show)."""
    out, pos = [], 0
    while True:
        opening = BACKTICKS.search(text, pos)
        if opening is None:
            break
        closing = next((m for m in BACKTICKS.finditer(text, opening.end())
                        if len(m.group()) == len(opening.group())), None)
        if closing is None:  # an unmatched run is literal text: escape past it
            out.append(ACTIVE.sub(r"\\\1", text[pos:opening.end()]))
            pos = opening.end()
            continue
        out.append(ACTIVE.sub(r"\\\1", text[pos:opening.start()]))
        out.append(text[opening.start():closing.end()])
        pos = closing.end()
    out.append(ACTIVE.sub(r"\\\1", text[pos:]))
    return "".join(out)


def inert(text: str) -> str:
    """Markdown ``text`` made inert: line by line (a table row cell by cell, as a GFM table
    splits a row before it reads code spans), :data:`ACTIVE` characters escaped outside code
    spans. Headings, lists, tables, emphasis and code spans render as before."""
    lines = []
    for line in str(text).split("\n"):
        if line.lstrip().startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)
            lines.append("|".join(_escape_outside_code(cell) for cell in cells))
        else:
            lines.append(_escape_outside_code(line))
    return "\n".join(lines)


def code(value: object) -> str:
    """``value`` (one line) as a Markdown code span, delimited by a backtick run longer than
    any inside it."""
    text = one_line(value)
    fence = "`" * (max((len(m) for m in BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fence(text: str) -> str:
    """A code fence for ``text``: backticks, longer than any run of them in ``text``."""
    return "`" * max(3, max((len(m) for m in BACKTICKS.findall(text)), default=0) + 1)
