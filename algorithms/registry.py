"""The registry of algorithm specs, filled by discovering every module of this package that
declares ``SPECS`` (a list of :class:`~algorithms.contract.AlgorithmSpec`), as benchopt
discovers its solvers. A new algorithm is one module (and one ``conf/algorithm`` yaml): no list
to edit. :func:`register` adds a spec from elsewhere (e.g. a test's toy algorithm).

Discovery is on demand: looking one name up (``REGISTRY[name]``, :func:`get`) imports the
module that declares it (found by its file name or the name quoted in its source, then by
importing every module), so a job imports its own algorithm's code, not every algorithm's
(scipy.special, scipy.sparse, the peers); listing (iterating, ``len``, an unknown name)
imports them all, in the order, and with the names, that discovering them at once gives."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from types import ModuleType

from algorithms.contract import EVALUATOR_OPTIONS, AlgorithmSpec
from algorithms.errors import InputError

FIT_ARGUMENTS = ("blocks", "y", "lam", "rng", "recorder")
# what ``SparseGPClassifier()`` fits when no algorithm is named (pipeline.estimators; a
# regressor's default is a job's, conf/config.yaml's): the Laplace approximation, the
# classification experiment's reference (smola2001_classification), full n × n unless its
# option m asks for a low-rank form; no job has a classification default to take instead
DEFAULT_CLASSIFIER = "gp_laplace"
PACKAGE = "algorithms"
_LOCK = threading.RLock()  # one discovery at a time (a worker's jobs run in threads)


class Registry(MutableMapping):
    """name → :class:`AlgorithmSpec`; a name not registered yet is looked for (its module
    imported) before it is missing, and the whole package is discovered before listing."""

    def __init__(self) -> None:
        self._specs: dict[str, AlgorithmSpec] = {}
        self._complete = False

    def __getitem__(self, name: str) -> AlgorithmSpec:
        if name not in self._specs and not self._complete:
            _find(name)
        return self._specs[name]

    def __setitem__(self, name: str, spec: AlgorithmSpec) -> None:
        self._specs[name] = spec

    def __delitem__(self, name: str) -> None:
        del self._specs[name]

    def __iter__(self) -> Iterator[str]:
        discover()
        return iter(self._specs)

    def __len__(self) -> int:
        discover()
        return len(self._specs)

    def __repr__(self) -> str:
        discover()
        return repr(self._specs)


REGISTRY = Registry()


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec`` (its fit function must take exactly the declared options)."""
    discover()  # a name that a module of the package declares is taken
    return _register(spec)


def _register(spec: AlgorithmSpec) -> AlgorithmSpec:
    other = REGISTRY._specs.get(spec.name)
    if other is not None and other is not spec:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    params = set(inspect.signature(spec.fit).parameters)
    expected = {*FIT_ARGUMENTS, *(set(spec.options) - set(EVALUATOR_OPTIONS)),
                *(("kappa",) if spec.uses_kappa else ())}
    if params != expected:
        raise ValueError(f"algorithm {spec.name!r}: fit takes {sorted(params)} but the spec "
                         f"declares {sorted(expected)}")
    REGISTRY._specs[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    discover()  # a module's spec, once removed, is not found again
    REGISTRY._specs.pop(name, None)


def register_module(module: ModuleType) -> list[AlgorithmSpec]:
    discover()
    return _register_module(module)


def _register_module(module: ModuleType) -> list[AlgorithmSpec]:
    return [_register(spec) for spec in getattr(module, "SPECS", ())]


def _public_modules(package: str) -> list[str]:
    """The public modules of ``package`` (a private one, ``_name``, declares no spec and is
    imported where it is used: the kernel tiles' compiled loops load numba and LLVM, ~60 MiB,
    only in a process that computes), in discovery order."""
    root = importlib.import_module(package)
    return [info.name for info in pkgutil.iter_modules(root.__path__)
            if not info.name.startswith("_")]


def discover(package: str = PACKAGE) -> None:
    """Import every public module of ``package`` and register the specs it declares; for this
    package (once a process), the registry then lists its modules' specs in module order, then
    those registered from elsewhere."""
    if package == PACKAGE and REGISTRY._complete:
        return
    with _LOCK:
        if package == PACKAGE and REGISTRY._complete:
            return
        found: dict[str, AlgorithmSpec] = {}
        for name in _public_modules(package):
            for spec in _register_module(importlib.import_module(f"{package}.{name}")):
                found[spec.name] = spec
        if package == PACKAGE:
            REGISTRY._specs = {**found, **{k: v for k, v in REGISTRY._specs.items()
                                           if k not in found}}
            REGISTRY._complete = True


def _find(name: str) -> None:
    """Register the spec ``name`` if a module of this package declares it: first the modules
    that look like its home (the module called ``name``, those whose source quotes it), then,
    if none declares it, every module."""
    with _LOCK:
        if name in REGISTRY._specs or REGISTRY._complete:
            return
        modules = _public_modules(PACKAGE)
        root = Path(importlib.import_module(PACKAGE).__path__[0])
        quoted = (f'"{name}"', f"'{name}'")
        likely = [m for m in modules if m == name] + [
            m for m in modules if m != name and _quotes(root / f"{m}.py", quoted)]
        for module in likely:
            _register_module(importlib.import_module(f"{PACKAGE}.{module}"))
            if name in REGISTRY._specs:
                return
        discover()


def _quotes(path: Path, quoted: tuple[str, ...]) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    return any(q in text for q in quoted)


def get(name: str) -> AlgorithmSpec:
    """The spec of algorithm ``name``; an unknown name is a one-line error listing them all."""
    if name not in REGISTRY:
        raise InputError(f"unknown algorithm '{name}'; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]
