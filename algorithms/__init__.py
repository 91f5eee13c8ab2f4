"""Pure numerics for sparse GP approximations: one module per algorithm, one shared contract.

``REGISTRY`` maps an algorithm name to its ``fit(blocks, y, *, lam, ..., rng, test, **options)``.
``USES_KAPPA`` names the algorithms for which the candidate-subset size κ means something;
``SEED_FREE`` those whose result does not depend on the random seed.
"""

from algorithms import exact, online, projected, sgma, zhang
from algorithms.base import Fit, InputError, KernelBlocks
from algorithms.kernels import ArrayKernelBlocks, Kernel

REGISTRY = {
    "exact": exact.fit,
    "sgma": sgma.fit,
    "zhang_greedy": zhang.fit_greedy,
    "zhang_kappa_greedy": zhang.fit_kappa_greedy,
    "zhang_random": zhang.fit_random,
    "sparse_online": online.fit,
    "pbr": projected.fit_pbr,
    "finite_full": projected.fit_finite_full,
    "finite_optimal": projected.fit_finite_optimal,
    "finite_diagonal": projected.fit_finite_diagonal,
}
USES_KAPPA = {"sgma", "zhang_kappa_greedy"}
SEED_FREE = {"exact", "zhang_greedy"}

__all__ = ["REGISTRY", "USES_KAPPA", "SEED_FREE", "Fit", "InputError", "KernelBlocks",
           "ArrayKernelBlocks", "Kernel"]
