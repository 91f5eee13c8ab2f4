"""What the pipeline's small commands (``pipeline.report``, ``pipeline.export``) share: an
argparse parser whose errors are one ``InputError`` line, and the one ``error: …`` line on
stderr with exit code 2 that every failure becomes."""

from __future__ import annotations

import argparse
import sys

from algorithms.errors import InputError
from pipeline.datasets.spec import one_line


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one InputError line ending in ``usage: <usage_line>`` (its default
    is usage text plus a line); the description is printed as written."""

    def __init__(self, *, usage_line: str, **kwargs) -> None:
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        self.usage_line = usage_line

    def error(self, message: str):
        raise InputError(f"{message}; usage: {self.usage_line}")


def fail(err: InputError) -> int:
    """Print ``err`` as one ``error: …`` line on stderr; the exit code 2."""
    print(f"error: {one_line(err)}", file=sys.stderr)
    return 2
