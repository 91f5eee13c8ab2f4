"""Pure numerics for sparse GP approximations: one module per algorithm, one shared contract.

Every module that declares ``SPECS`` is registered (:mod:`algorithms.registry`); ``REGISTRY``
maps a name to its :class:`~algorithms.contract.AlgorithmSpec` and :func:`run` fits and
evaluates any of them:

    fit = algorithms.run("sgma", blocks, y, lam=0.1, kappa=59, rng=0, test=(X_test, y_test))
"""

from algorithms.contract import AlgorithmSpec, Curve, Fit, KernelBlocks, Result, Solution
from algorithms.errors import InputError
from algorithms.evaluation import run
from algorithms.kernels import KERNELS, ArrayKernelBlocks, Kernel
from algorithms.registry import REGISTRY, discover, get, register

discover()

__all__ = ["REGISTRY", "KERNELS", "AlgorithmSpec", "ArrayKernelBlocks", "Curve", "Fit",
           "InputError", "Kernel", "KernelBlocks", "Result", "Solution", "get", "register",
           "run"]
