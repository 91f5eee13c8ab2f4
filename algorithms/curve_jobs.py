"""Learning-curve jobs: with ``learning_curve`` set in the config, a job measures Lemma 4's
generalisation error E^g(n) of its algorithm (one whose spec has a ``learning_curve`` model,
with ``algorithm.m`` eigenfunctions where it needs a Mercer basis) instead of fitting the
dataset's targets; see :mod:`algorithms.learning_curves` and
``conf/experiment/ferrari1999_*.yaml``.

    learning_curve:
      n: [1, 2, 5, 10, 100]   # training set sizes
      draws: 100              # x̄ ~ pⁿ per n (the same x̄ for every algorithm with one seed)
      density: uniform        # U(0,1) (1-D datasets in [0,1]) | empirical (training inputs)
      n_nodes: 2000           # Gauss–Legendre nodes, or the training inputs drawn for p
      baseline: null          # another algorithm: record E_algorithm − E_baseline, paired
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from algorithms.contract import AlgorithmSpec, Curve
from algorithms.errors import InputError
from algorithms.kernels import Kernel
from algorithms.learning_curves import DENSITIES, learning_curve
from algorithms.projected import Density, empirical_density, uniform_density
from algorithms.registry import REGISTRY

CURVE_KEYS = {"n", "draws", "density", "n_nodes", "baseline"}


def curve_density(spec: Mapping, blocks, seed: int) -> Density:
    """The input density of a learning-curve job (validated against the dataset)."""
    density, n_nodes = spec.get("density", "uniform"), spec.get("n_nodes", 2000)
    if density not in DENSITIES:
        raise InputError(f"learning_curve.density={density!r} is not one of "
                         f"{', '.join(DENSITIES)}")
    if not isinstance(n_nodes, int) or n_nodes < 2:
        raise InputError(f"learning_curve.n_nodes={n_nodes!r} must be an integer ≥ 2")
    if density == "uniform":
        X = np.asarray(blocks.inputs(slice(None)))
        if blocks.d != 1 or X.min() < 0.0 or X.max() > 1.0:
            raise InputError(f"learning_curve.density=uniform is U(0,1) in 1-D, but the dataset "
                             f"has d={blocks.d} inputs in [{X.min():.3g}, {X.max():.3g}]; use "
                             "dataset=matern1d or learning_curve.density=empirical")
        return uniform_density(n_nodes)
    rng = np.random.default_rng([seed, 0])  # one p per seed, shared by every algorithm
    rows = np.sort(rng.choice(blocks.n, min(n_nodes, blocks.n), replace=False))
    return empirical_density(blocks.inputs(rows))


def _curve_spec(name: str | None, label: str) -> AlgorithmSpec:
    spec = REGISTRY.get(name)
    if spec is None or spec.learning_curve is None:
        able = [s.name for s in REGISTRY.values() if s.learning_curve is not None]
        raise InputError(f"{label}={name!r} has no Lemma-4 learning curve; choose one of: "
                         f"{', '.join(able)}")
    return spec


def run_curve(settings: Mapping, spec: AlgorithmSpec, kernel: Kernel, blocks,
              options: Mapping, *, seed: int, lam: float) -> Curve:
    """The learning curve a job's ``learning_curve`` block (``settings``) asks for, of the
    algorithm ``spec`` with ``options`` (validated), its kernel, ``seed`` and λ."""
    curve = dict(settings)
    unknown = sorted(set(curve) - CURVE_KEYS)
    if unknown:
        raise InputError(f"learning_curve has no key {unknown[0]!r}; its keys: "
                         f"{', '.join(sorted(CURVE_KEYS))}")
    if "n" not in curve:
        raise InputError("learning_curve.n is missing: pass the training set sizes, "
                         "e.g. learning_curve.n=[1,10,100]")
    _curve_spec(spec.name, "algorithm")
    baseline = None
    if curve.get("baseline") is not None:
        baseline_spec = _curve_spec(curve["baseline"], "learning_curve.baseline")
        baseline = (baseline_spec.name, baseline_spec.learning_curve)
    density = curve_density(curve, blocks, seed)
    return learning_curve(spec.name, spec.learning_curve, kernel, density, lam=lam,
                          n_grid=curve["n"], draws=curve.get("draws", 100), seed=seed,
                          m=options.get(spec.learning_curve.basis_option), baseline=baseline)
