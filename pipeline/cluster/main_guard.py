"""The check a local cluster makes before it starts worker processes: that the script running
it calls it under ``if __name__ == "__main__":``.

A local Dask cluster starts its workers with multiprocessing's spawn or forkserver method,
which import the main script again in every new process (Python's "safe importing of the main
module" rule). A script that calls :func:`pipeline.cli.run_sweep` at its top level, unguarded,
would start the sweep again in each worker: Dask refuses that with a traceback per worker
(``_check_not_importing_main``) after the sweep line has been printed once per process. The
check reads the main script's syntax tree before any process starts and stops with one line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType

from algorithms.errors import InputError


def _is_main_test(node: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = [node.left, *node.comparators]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def _guarded(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` of the module lies in the body of an ``if __name__ == "__main__":``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.body:
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


def _main_module_frame() -> FrameType | None:
    """The frame executing the main module's top level, if it is on this thread's stack."""
    main = sys.modules.get("__main__")
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is getattr(main, "__dict__",
                                                                             None):
            return frame
        frame = frame.f_back
    return None


def check_main_guard(what: str = "a local Dask cluster") -> None:
    """Raise :class:`InputError` (one line) when the main script starts ``what`` from its top
    level outside ``if __name__ == "__main__":``. Nothing to check for an interactive session,
    ``python -c`` or a notebook (no main file: spawned workers import nothing of it)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    frame = _main_module_frame()
    if path is None or frame is None or not str(path).endswith(".py"):
        return
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return  # the source cannot be read: nothing to check against
    if not _guarded(tree, frame.f_lineno):
        name = Path(path).name
        raise InputError(
            f"{name} line {frame.f_lineno} starts {what} outside `if __name__ == "
            f"\"__main__\":`; its worker processes import {name} again and would run it once "
            "more each: put the call under that guard (docs/getting-started/python-api.md)")
