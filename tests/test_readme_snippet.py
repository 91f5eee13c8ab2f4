"""README's `run_sweep` example, taken from README.md itself and run as a plain script, as a
user saves and runs it; the same script without its `if __name__ == "__main__":` guard stops
with one line before any worker process starts."""

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.cluster.main_guard import _guarded

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- readme-snippet: run_sweep"


def readme_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    after = text[text.index(MARKER):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def run_script(directory: Path, source: str) -> subprocess.CompletedProcess:
    script = directory / "sweep.py"
    script.write_text(source)
    return subprocess.run([sys.executable, script.name], cwd=directory, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_the_readme_run_sweep_example_runs_as_a_script(tmp_path):
    snippet = readme_snippet()
    proc = run_script(tmp_path, snippet)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert sum(line.startswith("sweep ") for line in out) == 1, proc.stdout  # once, not per worker
    assert "['ok' 'ok' 'ok' 'ok']" in out, proc.stdout
    rmse = [float(v) for v in out[-1].strip("[]").split()]
    assert len(rmse) == 2 and all(0 < v < 1 for v in rmse), out[-1]
    assert "Traceback" not in proc.stderr and "Failed to start" not in proc.stderr, proc.stderr
    assert "FailedPointsWarning" not in proc.stderr  # every point ran: nystrom's 256 is clipped

    # the same lines without the guard: one error before anything starts
    body = textwrap.dedent(snippet.split('if __name__ == "__main__":', 1)[1].split("\n", 1)[1])
    unguarded = snippet.split("if __name__", 1)[0] + body
    proc = run_script(tmp_path, unguarded)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    line = 1 + unguarded.splitlines().index(next(x for x in unguarded.splitlines()
                                                 if "run_sweep([" in x))
    assert last.startswith(f"algorithms.errors.InputError: sweep.py line {line} starts "
                           "run_sweep"), last
    assert 'if __name__ == "__main__":' in last
    assert "sweep " not in proc.stdout and "Failed to start" not in proc.stderr


@pytest.mark.parametrize(("source", "line", "guarded"), [
    ("run()\n", 1, False),
    ('if __name__ == "__main__":\n    run()\n', 2, True),
    ('if "__main__" == __name__:\n    x = 1\n    run()\n', 3, True),
    ('def main():\n    run()\n\nmain()\n', 4, False),
    ('if __name__ == "__main__":\n    pass\nelse:\n    run()\n', 4, False),
    ('if __name__ != "__main__":\n    run()\n', 2, False),
])
def test_the_guard_is_found_in_the_script_syntax(source, line, guarded):
    assert _guarded(ast.parse(source), line) is guarded
