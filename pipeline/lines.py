"""The one-line texts the product prints: a value or an error on one line, and a ``note:`` line.

Every failure a user sees is one ``error: …`` line and every recovered problem one
``note: …`` line (docs/getting-started/first-job.md, "Bad input"); a message that carries
another library's text is put on one line here first.
"""

from __future__ import annotations

import sys


def one_line(value: object) -> str:
    """``value`` as text on one line: its whitespace runs (newlines included) as one space."""
    return " ".join(str(value).split())


def note(text: str) -> None:
    """Print a ``note: …`` line (a recovered problem) on stderr."""
    print(f"note: {text}", file=sys.stderr, flush=True)
