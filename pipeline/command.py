"""What the pipeline's commands share: an argparse parser whose errors are one ``InputError``
line (``pipeline.report``, ``pipeline.export``), a sweep's command line as a user types it
again (:func:`command_text`: its manifest's history, its report), and the one ``error: …``
line on stderr with exit code 2 that every failure becomes."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from algorithms.errors import InputError
from pipeline.lines import one_line


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one InputError line ending in ``usage: <usage_line>`` (its default
    is usage text plus a line); the description is printed as written."""

    def __init__(self, *, usage_line: str, **kwargs) -> None:
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        self.usage_line = usage_line

    def error(self, message: str):
        raise InputError(f"{message}; usage: {self.usage_line}")


def command_text(overrides: Sequence[str]) -> str:
    """The command line of a sweep's overrides, as a user types it again."""
    return "python -m pipeline -m " + shlex.join(str(a).removeprefix("++") for a in overrides)


def fail(err: InputError) -> int:
    """Print ``err`` as one ``error: …`` line on stderr; the exit code 2."""
    print(f"error: {one_line(err)}", file=sys.stderr)
    return 2
