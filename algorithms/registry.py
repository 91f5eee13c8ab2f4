"""The registry of algorithm specs, filled by discovering every module of this package that
declares ``SPECS`` (a list of :class:`~algorithms.contract.AlgorithmSpec`), as benchopt
discovers its solvers. A new algorithm is one module (and one ``conf/algorithm`` yaml): no list
to edit. :func:`register` adds a spec from elsewhere (e.g. a test's toy algorithm)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

from algorithms.contract import EVALUATOR_OPTIONS, AlgorithmSpec
from algorithms.errors import InputError

REGISTRY: dict[str, AlgorithmSpec] = {}
FIT_ARGUMENTS = ("blocks", "y", "lam", "rng", "recorder")


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec`` (its fit function must take exactly the declared options)."""
    other = REGISTRY.get(spec.name)
    if other is not None and other is not spec:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    params = set(inspect.signature(spec.fit).parameters)
    expected = {*FIT_ARGUMENTS, *(set(spec.options) - set(EVALUATOR_OPTIONS)),
                *(("kappa",) if spec.uses_kappa else ())}
    if params != expected:
        raise ValueError(f"algorithm {spec.name!r}: fit takes {sorted(params)} but the spec "
                         f"declares {sorted(expected)}")
    REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def register_module(module: ModuleType) -> list[AlgorithmSpec]:
    return [register(spec) for spec in getattr(module, "SPECS", ())]


def discover(package: str = "algorithms") -> None:
    """Import every public module of ``package`` and register the specs it declares (a
    private module, ``_name``, declares none and is imported where it is used: the kernel
    tiles' compiled loops load numba and LLVM, ~60 MiB, only in a process that computes)."""
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__):
        if not info.name.startswith("_"):
            register_module(importlib.import_module(f"{package}.{info.name}"))


def get(name: str) -> AlgorithmSpec:
    """The spec of algorithm ``name``; an unknown name is a one-line error listing them all."""
    if name not in REGISTRY:
        raise InputError(f"unknown algorithm '{name}'; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]
