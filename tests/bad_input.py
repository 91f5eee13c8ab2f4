"""The harness of the bad-input case tables (``tests/test_bad_input_*.py``).

Every case is a command (``python -m pipeline ...``, ``python -m pipeline.report ...``) run in a
scratch directory that starts as a copy of a *seed* directory: a finished tiny sweep
(``outputs/seed/`` with ``results.zarr``, its job files and ``report/``) and its dataset store
(``outputs/stores/``). A case passes when the command

- exits with the expected code (2: bad input) within its timeout (nothing hangs);
- writes exactly one non-blank line to stderr, starting with ``error: ``, and no traceback
  anywhere;
- names the bad value (every fragment of ``names`` is in that line);
- leaves every file that was on disk before byte-identical (and removes none).

A case's ``setup(workdir)`` may create or damage files first (a bad CSV, a truncated store);
``{dir}`` in an argument is replaced by the scratch directory.

:func:`run_case` runs the command **in-process**: the ``main(argv) -> int`` that
``python -m <module>`` runs (:func:`entry_point`), called in the scratch directory with the
case's environment, its output captured at the file-descriptor level (pytest's ``capfd``: what
C code and child processes such as Dask workers write to fd 1/2 is seen too), ``SystemExit``
taken as the exit code and an uncaught exception printed as the interpreter would (so it fails
the no-traceback check). :func:`isolated` puts back what such a call may leave behind in the
test process. :func:`run_command` runs the same case as a real ``python -m`` subprocess; each
table runs a few representative cases that way too (``e2e``), keeping the wiring of
``python -m`` (``__main__``, ``sys.exit``, the fork server) honest.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib
import importlib.util
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SEED_SWEEP = ("-m", "algorithm=sgma,exact", "dataset=sine1d", "dataset.n_train=40",
              "dataset.n_test=20", "lam=0.1", "seed=0", "sweep=seed", "cluster.n_workers=1",
              "cluster.dashboard_address=null")

# ``python -m <name>`` runs ``<name>.main`` except where the module is a package whose
# ``__main__`` calls another module's ``main``: pipeline/__main__.py runs pipeline.cli.main
# (after pipeline.cluster.prestart.prestart, which only warms a fork server for local workers and is
# skipped in-process: the workers are spawned instead, as when the fork server cannot start);
# pipeline/report/__main__.py runs pipeline.report.build.main, pipeline/publish/__main__.py
# pipeline.publish.cli.main
ENTRY_POINTS = {"pipeline": "pipeline.cli", "pipeline.report": "pipeline.report.build",
                "pipeline.publish": "pipeline.publish.cli"}
# the packages whose module globals a call may rebind (pipeline.sweep.clock's "this process is the
# command line" mark, say): put back after every in-process case
PROJECT_PACKAGES = ("pipeline", "algorithms", "hydra_plugins")
# seconds a case's test may take beyond the command's own timeout: the copy of the seed, the
# setup, the hashing and, in the first case of a process, importing the entry point (a call
# that returns later than the command's timeout fails too: run_case measures it)
SLACK = 30


@dataclass(frozen=True)
class Case:
    """One bad input: the command after ``python -m`` and what its error line must name."""

    id: str
    argv: tuple[str, ...]
    names: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    exit_code: int = 2
    timeout: float = 120
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ran:
    """What a command did (the fields :class:`subprocess.CompletedProcess` has too)."""

    returncode: int
    stdout: str
    stderr: str


def params(cases: Iterable[Case], ids: Iterable[str] | None = None) -> list:
    """``cases`` (or those with ``ids``: every one must exist) as pytest params, each with a
    per-test timeout (pytest-timeout) of the case's timeout plus :data:`SLACK`: a hang fails
    the test."""
    cases = list(cases)
    if ids is not None:
        by_id = {c.id: c for c in cases}
        missing = [i for i in ids if i not in by_id]
        assert not missing, f"no such case: {missing}"
        cases = [by_id[i] for i in ids]
    return [pytest.param(c, id=c.id, marks=pytest.mark.timeout(c.timeout + SLACK, func_only=True))
            for c in cases]


def make_seed_dir(root: Path) -> Path:
    """A finished tiny sweep and its report in ``root`` (built once per test session)."""
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pipeline", *SEED_SWEEP], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "pipeline.report",
                           "outputs/seed/results.zarr"], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return root


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (relative path -> digest)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


_SEED_SNAPSHOTS: dict[Path, dict[str, str]] = {}


def prepare(case: Case, seed_dir: Path, workdir: Path) -> dict[str, str]:
    """Copy ``seed_dir`` to ``workdir``, run the case's setup; the digest of every file there.

    Without a setup the copy holds the seed's bytes, whose digests are computed once per
    session; a setup may change anything, so its workdir is hashed in full."""
    shutil.copytree(seed_dir, workdir, symlinks=True)
    if case.setup is None:
        if seed_dir not in _SEED_SNAPSHOTS:
            _SEED_SNAPSHOTS[seed_dir] = snapshot(seed_dir)
        return dict(_SEED_SNAPSHOTS[seed_dir])
    case.setup(workdir)
    return snapshot(workdir)


def check(case: Case, ran: Ran | subprocess.CompletedProcess, workdir: Path,
          before: Mapping[str, str]) -> None:
    """Every assertion of the module docstring on what the command did."""
    shown = f"\n--- stdout\n{ran.stdout[-3000:]}\n--- stderr\n{ran.stderr[-3000:]}"
    assert ran.returncode == case.exit_code, f"exit {ran.returncode}{shown}"
    assert "Traceback" not in ran.stderr + ran.stdout, shown
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    if case.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        for fragment in case.names:
            assert fragment in lines[0], f"{fragment!r} not named{shown}"
    else:
        for fragment in case.names:
            assert fragment in ran.stdout + ran.stderr, f"{fragment!r} not named{shown}"
    after = snapshot(workdir)
    changed = [p for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"files on disk changed or removed: {changed[:10]}{shown}"


def _argv(case: Case, workdir: Path) -> list[str]:
    return [arg.replace("{dir}", str(workdir)) for arg in case.argv]


# ----------------------------------------------------------------------------- in-process

def entry_point(module: str) -> Callable[[list[str]], int]:
    """The ``main(argv) -> int`` that ``python -m <module>`` runs."""
    return importlib.import_module(ENTRY_POINTS.get(module, module)).main


def script_path(module: str) -> str:
    """``sys.argv[0]`` under ``python -m <module>``: the file it runs (a package's
    ``__main__.py``)."""
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(f"{module}.__main__")
    return spec.origin if spec is not None and spec.origin else module


def run_case(case: Case, seed_dir: Path, workdir: Path, capfd: pytest.CaptureFixture,
             monkeypatch: pytest.MonkeyPatch) -> Ran:
    """Run ``case`` in-process in a copy of ``seed_dir`` and assert everything the module
    docstring lists (``capfd`` and ``monkeypatch``: the test's fixtures)."""
    before = prepare(case, seed_dir, workdir)
    start = time.monotonic()
    ran = run_in_process(_argv(case, workdir), workdir, capfd, monkeypatch, case.env)
    elapsed = time.monotonic() - start
    assert elapsed <= case.timeout, f"{case.id}: took {elapsed:.0f} s, more than {case.timeout} s"
    check(case, ran, workdir, before)
    return ran


def run_in_process(argv: list[str], workdir: Path, capfd: pytest.CaptureFixture,
                   monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str] | None = None) -> Ran:
    """What ``python -m <argv>`` run in ``workdir`` (with ``env`` added) does, run in this
    process: the entry point's ``main`` (:func:`entry_point`) under :func:`isolated`, its
    output captured at the file-descriptor level (``capfd``)."""
    main = entry_point(argv[0])
    with isolated(workdir, env or {}, monkeypatch, [script_path(argv[0]), *argv[1:]]):
        capfd.readouterr()  # only the command's own output
        code = call(main, argv[1:])
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = capfd.readouterr()
    return Ran(code, out, err)


def call(main: Callable[[list[str]], int], args: list[str]) -> int:
    """``main(args)``'s exit code as the interpreter would make it: ``SystemExit``'s code (a
    message is printed to stderr, code 1), an uncaught exception's traceback on stderr and 1."""
    try:
        return main(list(args))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


@contextlib.contextmanager
def isolated(workdir: Path, env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch,
             argv: list[str]) -> Iterator[None]:
    """Run a command's ``main`` in this process as if in its own: in ``workdir``, with ``env``
    added to the environment and ``argv`` as ``sys.argv``; afterwards everything such a call
    may leave behind is put back (see :class:`_ProcessState`)."""
    state = _ProcessState.capture()
    _clear_hydra()
    try:
        with monkeypatch.context() as mp, warnings.catch_warnings():
            mp.chdir(workdir)
            for key, value in env.items():
                mp.setenv(key, value)
            mp.setattr(sys, "argv", argv)
            _as_a_new_process()
            yield
    finally:
        _clear_hydra()
        state.restore()


# the warnings filters an interpreter starts with (no -W, no PYTHONWARNINGS)
DEFAULT_WARNING_FILTERS = (("default", DeprecationWarning, "__main__"),
                           ("ignore", DeprecationWarning, ""),
                           ("ignore", PendingDeprecationWarning, ""),
                           ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, ""))


def _as_a_new_process() -> None:
    """Warnings and log records reach stderr as in a new interpreter: pytest records warnings
    and its handlers on the root logger take every record, where a command prints a warning
    and a record no handler takes (logging's last resort) on stderr — lines the case's
    one-line check must see."""
    warnings.resetwarnings()
    for action, category, module in DEFAULT_WARNING_FILTERS:
        warnings.filterwarnings(action, category=category, module=module, append=True)
    warnings.showwarning = _print_warning
    logging.root.handlers = []
    logging.root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """How the interpreter shows a warning: to stderr."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _clear_hydra() -> None:
    """Hydra's GlobalHydra and HydraConfig singletons as in a new process."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


@dataclass
class _ProcessState:
    """What an in-process command may change in the test process, taken before and put back
    after: os.environ, signal handlers, logging (Hydra configures the root logger and adds
    handlers bound to the captured streams and to a log file in the workdir), warnings
    filters, numpy's error state, Dask's config (the sections it had), the multiprocessing
    start method, sys.path, sys.std*, rebound globals of the project's modules; and Dask
    clients, clusters and child processes the call left running are closed."""

    environ: dict[str, str]
    signals: dict[int, object]
    loggers: dict[str, tuple]
    logging_disable: int
    warning_filters: list
    showwarning: object
    np_err: dict
    dask_config: dict
    start_method: str | None
    sys_path: list[str]
    streams: tuple
    hooks: tuple
    module_globals: dict[str, dict[str, object]]
    clients: set[int]
    clusters: set[int]
    children: set[int]

    @classmethod
    def capture(cls) -> _ProcessState:
        import dask.config
        import numpy as np

        return cls(
            environ=dict(os.environ),
            signals={s: signal.getsignal(s) for s in _signals()},
            loggers={name: _logger_state(logger) for name, logger in _loggers().items()},
            logging_disable=logging.root.manager.disable,
            warning_filters=list(warnings.filters),
            showwarning=warnings.showwarning,
            np_err=np.geterr(),
            dask_config=copy.deepcopy(dask.config.config),
            start_method=multiprocessing.get_start_method(allow_none=True),
            sys_path=list(sys.path),
            streams=(sys.stdin, sys.stdout, sys.stderr),
            hooks=(sys.excepthook, _threading_excepthook()),
            module_globals={name: dict(vars(module)) for name, module in _project_modules()},
            clients={id(c) for c in _live_clients()},
            clusters={id(c) for c in _live_clusters()},
            children={p.pid for p in _children()},
        )

    def restore(self) -> None:
        import dask.config
        import numpy as np

        for client in _live_clients():
            if id(client) not in self.clients:
                with contextlib.suppress(Exception):
                    client.close(timeout=10)
        for cluster in _live_clusters():  # left running (one left closing is not waited for:
            if id(cluster) not in self.clusters:  # a close that already failed never ends)
                with contextlib.suppress(Exception):
                    cluster.close(timeout=10)
        _end_children(self.children)
        os.environ.clear()
        os.environ.update(self.environ)
        for signum, handler in self.signals.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(signum, handler)
        _restore_loggers(self.loggers)
        logging.disable(self.logging_disable)
        warnings.filters[:] = self.warning_filters
        warnings.showwarning = self.showwarning
        np.seterr(**self.np_err)
        # each section as it was; a section added since stays (the defaults a library
        # registers when first imported: dask_jobqueue's "jobqueue")
        dask.config.config.update(self.dask_config)
        if multiprocessing.get_start_method(allow_none=True) != self.start_method:
            multiprocessing.set_start_method(self.start_method, force=True)
        sys.path[:] = self.sys_path
        sys.stdin, sys.stdout, sys.stderr = self.streams
        sys.excepthook = self.hooks[0]
        if self.hooks[1] is not None:
            import threading

            threading.excepthook = self.hooks[1]
        for name, module in _project_modules():
            saved = self.module_globals.get(name)
            if saved is None:  # imported by the call: as imported, nothing to put back
                continue
            now = vars(module)  # a global rebound since is put back (a name added is kept:
            for key, value in saved.items():  # a submodule imported since, a lazy import)
                if now.get(key, _MISSING) is not value:
                    now[key] = value


_MISSING = object()


def _signals() -> list[int]:
    return [s for s in signal.valid_signals()
            if s not in (signal.SIGKILL, signal.SIGSTOP)]


def _threading_excepthook():
    import threading

    return getattr(threading, "excepthook", None)


def _loggers() -> dict[str, logging.Logger]:
    out = {"": logging.root}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = logger
    return out


def _logger_state(logger: logging.Logger) -> tuple:
    return logger.level, logger.disabled, logger.propagate, list(logger.handlers)


def _restore_loggers(saved: Mapping[str, tuple]) -> None:
    """Loggers as they were; a handler added since (Hydra's console handler on a captured
    stream, its log file in the workdir) is removed and closed."""
    kept = {id(h) for state in saved.values() for h in state[3]}
    for name, logger in _loggers().items():
        added = [h for h in logger.handlers if id(h) not in kept]
        if name in saved:
            level, disabled, propagate, handlers = saved[name]
            logger.setLevel(level)
            logger.disabled, logger.propagate = disabled, propagate
            logger.handlers[:] = handlers
        else:
            for handler in added:
                logger.removeHandler(handler)
        for handler in added:
            with contextlib.suppress(Exception):
                handler.close()


def _project_modules() -> list[tuple[str, object]]:
    return [(name, module) for name, module in list(sys.modules.items())
            if module is not None and name.partition(".")[0] in PROJECT_PACKAGES]


def _live_clients() -> list:
    client_module = sys.modules.get("distributed.client")
    if client_module is None:
        return []
    return [c for c in list(client_module.Client._instances)
            if c.status not in ("closing", "closed")]


def _live_clusters() -> list:
    spec_module = sys.modules.get("distributed.deploy.spec")
    if spec_module is None:
        return []
    return [c for c in list(spec_module.SpecCluster._instances)
            if getattr(getattr(c, "status", None), "name", "") in ("created", "running")]


def _children() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _end_children(before: set[int]) -> None:
    """Terminate child processes started since (a Dask worker, a nanny); not multiprocessing's
    resource tracker or fork server, which live as long as this process."""
    import psutil

    new = []
    for proc in _children():
        if proc.pid in before:
            continue
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.cmdline())
            if "resource_tracker" in cmdline or "forkserver" in cmdline:
                continue
            proc.terminate()
            new.append(proc)
    _, alive = psutil.wait_procs(new, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


# ----------------------------------------------------------------------------- subprocess

def run_command(case: Case, seed_dir: Path, workdir: Path) -> subprocess.CompletedProcess:
    """Run ``case`` as a real ``python -m`` subprocess in a copy of ``seed_dir`` and assert
    everything the module docstring lists."""
    before = prepare(case, seed_dir, workdir)
    env = {**os.environ, **case.env}
    try:
        proc = subprocess.run([sys.executable, "-m", *_argv(case, workdir)], cwd=workdir,
                              capture_output=True, text=True, timeout=case.timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{case.id}: hung for more than {case.timeout} s") from exc
    check(case, proc, workdir, before)
    return proc
