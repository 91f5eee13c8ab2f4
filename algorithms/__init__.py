"""Pure numerics for sparse GP approximations: one module per algorithm, one shared contract.

Every module that declares ``SPECS`` is registered (:mod:`algorithms.registry`); ``REGISTRY``
maps a name to its :class:`~algorithms.contract.AlgorithmSpec` and :func:`run` fits and
evaluates any of them:

    fit = algorithms.run("sgma", blocks, y, lam=0.1, kappa=59, rng=0, test=(X_test, y_test))

The names below are imported on first use, and the registry imports an algorithm's module
when its name is first looked up: ``from algorithms.errors import InputError`` (every command)
imports no numerics, and a job imports its own algorithm's module, not every one.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "AlgorithmSpec": "contract", "Curve": "contract", "Fit": "contract",
    "KernelBlocks": "contract", "Result": "contract", "Solution": "contract",
    "InputError": "errors", "run": "evaluation",
    "KERNELS": "kernels", "ArrayKernelBlocks": "kernel_blocks", "Kernel": "kernels",
    "REGISTRY": "registry", "discover": "registry", "get": "registry", "register": "registry",
}

__all__ = ["REGISTRY", "KERNELS", "AlgorithmSpec", "ArrayKernelBlocks", "Curve", "Fit",
           "InputError", "Kernel", "KernelBlocks", "Result", "Solution", "get", "register",
           "run"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
