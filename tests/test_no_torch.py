"""The default install has no torch (torch and GPyTorch are the optional extra ``peers``): every
numpy path, listing the algorithms and the estimators work without it, and asking for a torch
device or a peer is one line naming the extra. Subprocesses (three, kept few: each starts an
interpreter): a process that already imported torch cannot show that a path does not need it.

torch is made unimportable by a ``sitecustomize`` on ``PYTHONPATH`` that puts a finder first
on ``sys.meta_path`` refusing torch and gpytorch: ``import torch`` and
``importlib.util.find_spec('torch')`` then raise ModuleNotFoundError, as when it is not
installed, in the process and in every child it starts (the forked program of ``python -m
pipeline``). (``sys.modules['torch'] = None`` is not the same: scipy's array-API helpers read
``sys.modules['torch'].Tensor`` once the name is there.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCKER = textwrap.dedent("""
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "gpytorch"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
""")
FIX = "needs PyTorch, which is not installed: pip install 'sparse-gp-bench[peers]'"


def _python(args: list[str], cwd: Path, blocked: Path | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    paths = [str(ROOT)] + ([str(blocked)] if blocked else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _blocker(tmp_path: Path) -> Path:
    where = tmp_path / "no_torch"
    where.mkdir()
    (where / "sitecustomize.py").write_text(BLOCKER)
    return where


def test_the_registry_and_the_estimators_do_not_import_torch(tmp_path):
    """With torch installed: listing every algorithm and a numpy fit leave torch unimported."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import algorithms.registry
        from algorithms import REGISTRY
        from pipeline.estimators import SparseGPRegressor
        assert len(list(REGISTRY)) > 10
        import algorithms.torch_blocks  # importable on its own: torch at its first use
        X = np.linspace(0, 1, 30)[:, None]
        SparseGPRegressor(random_state=0).fit(X, np.sin(X[:, 0])).predict(X)
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'gpytorch')))
    """)
    done = _python(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_torch_the_api_works_and_a_device_or_peer_is_one_line(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        from algorithms import REGISTRY, InputError
        from algorithms.device import torch_device
        from algorithms.evaluation import options_of
        import algorithms.torch_blocks  # importable without torch
        from pipeline.estimators import SparseGPClassifier, SparseGPRegressor
        assert any(spec.device_blocks for spec in REGISTRY.values())
        X = np.random.default_rng(0).normal(size=(40, 2))
        assert SparseGPRegressor().fit(X, X[:, 0]).score(X, X[:, 0]) > 0.5
        assert SparseGPClassifier().fit(X, X[:, 0] > 0).score(X, X[:, 0] > 0) > 0.8
        for call in (lambda: SparseGPRegressor(algorithm="nope").fit(X, X[:, 0]),
                     lambda: torch_device("torch:cpu"),
                     lambda: options_of(REGISTRY["gpytorch_sgpr"], {})):
            try:
                call()
            except InputError as e:
                print(e)
            else:
                raise AssertionError("no error")
    """)
    done = _python(["-c", code], tmp_path, blocked=_blocker(tmp_path))
    assert done.returncode == 0, done.stderr
    unknown, device, peer = done.stdout.strip().splitlines()
    assert unknown.startswith("algorithm='nope' is not registered; choose one of")
    assert device.startswith(f"device=torch:cpu {FIX}"), device
    assert "needs PyTorch" in peer and "[peers]" in peer, peer


def test_a_torch_device_job_without_torch_is_one_error_line(tmp_path):
    """``python -m pipeline device=torch:cpu`` on the default install: exit 2, one line."""
    done = _python(["-m", "pipeline", "device=torch:cpu", "algorithm=exact", "dataset=sine1d",
                    "dataset.n_train=30", "dataset.n_test=10"], tmp_path,
                   blocked=_blocker(tmp_path))
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: device=torch:cpu {FIX}"), lines
    assert "Traceback" not in done.stdout + done.stderr
