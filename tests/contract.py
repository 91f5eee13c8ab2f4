"""The algorithm contract as checks (in the spirit of scikit-learn's estimator checks): every
registered algorithm must pass each of :data:`CHECKS`. ``tests/test_contract.py`` runs them over
the registry; a new algorithm is picked up with no list to edit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from algorithms import ArrayKernelBlocks, Kernel, run
from algorithms.contract import (
    CURVE_SUMMARY_KEYS,
    CURVE_TRACE_KEYS,
    N_MARK,
    AlgorithmSpec,
    Fit,
    summary_keys,
    trace_keys,
)
from algorithms.errors import InputError
from algorithms.learning_curves import learning_curve
from algorithms.projected import uniform_density
from algorithms.variables import describe
from pipeline.blocks.store import open_blocks
from pipeline.datasets import ingest, load_arrays

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
KERNEL = Kernel("rbf", {"width": 2.0})
LAM = 0.5


@dataclass
class Problem:
    """A small problem of one task held twice: in memory and in a verified zarr store."""

    memory: ArrayKernelBlocks
    store: ArrayKernelBlocks
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


PROBLEM_DATA = {"regression": {"name": "friedman1", "n_train": 60, "n_test": 25, "data_seed": 3},
                "classification": {"name": "two_moons", "n_train": 60, "n_test": 25,
                                   "data_seed": 3}}


def make_problem(store_root: Path, task: str = "regression") -> Problem:
    store = ingest(PROBLEM_DATA[task], store_root)
    X, y, X_test, y_test = load_arrays(store)
    return Problem(ArrayKernelBlocks(X, KERNEL), open_blocks(store, KERNEL), y, X_test, y_test)


def fit(spec: AlgorithmSpec, problem: Problem, *, blocks=None, seed: int = 3, **options) -> Fit:
    return run(spec, blocks or problem.memory, problem.y, lam=LAM, kappa=7, rng=seed,
               test=(problem.X_test, problem.y_test), **{**spec.check_options, **options})


def _same(a: Fit, b: Fit) -> None:
    for key in a.trace:
        if not key.endswith("seconds"):  # timings (seconds, *_seconds) differ run to run
            np.testing.assert_array_equal(a.trace[key], b.trace[key], err_msg=key)
    np.testing.assert_array_equal(a.basis, b.basis)
    np.testing.assert_array_equal(a.coef, b.coef)
    for key, value in a.summary.items():
        other = b.summary[key]
        if not key.endswith("seconds"):  # timings differ between runs
            assert value == other or (value != value and other != other), key


def check_yaml_matches_spec(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """conf/algorithm/<name>.yaml holds exactly the spec's options and defaults."""
    conf = OmegaConf.to_container(OmegaConf.load(conf_dir / "algorithm" / f"{spec.name}.yaml"))
    assert conf.pop("name") == spec.name
    assert conf == {key: opt.default for key, opt in spec.options.items()}


def check_result_schema(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """Required trace and summary keys, equal trace lengths, reasons for NaNs, immutability,
    predictions of the right shape and every test metric where a variance exists."""
    result = fit(spec, problem)
    assert result.task == spec.task
    assert set(trace_keys(spec.task)) <= set(result.trace)
    assert set(summary_keys(spec.task)) <= set(result.summary)
    lengths = {len(v) for v in result.trace.values()}
    assert len(lengths) == 1 and lengths.pop() >= 1
    for key in summary_keys(spec.task):
        value = result.summary[key]
        assert value == value or key in result.not_applicable, key
    if spec.task == "classification":
        prob = result.predict_proba(problem.X_test)
        assert prob.shape == (len(problem.X_test),) and ((prob >= 0) & (prob <= 1)).all()
        assert 0 <= result.summary["test_error_rate"] <= 1
        assert np.isfinite(result.summary["test_log_loss"])
        assert 0 <= result.summary["test_brier"] <= 1
    else:
        assert np.isfinite(result.summary["test_rmse"])
    with pytest.raises(TypeError):
        result.summary["n_basis"] = 0  # type: ignore[index]
    with pytest.raises(ValueError):
        result.trace["gap"][0] = 0.0
    mean = result.predict(problem.X_test)
    assert mean.shape == (len(problem.X_test),) and np.isfinite(mean).all()
    var = result.predict_var(problem.X_test)
    if spec.task == "classification":
        return
    if spec.has_variance:
        assert var.shape == mean.shape and (var > 0).all()
        assert np.isfinite(result.summary["test_nlpd"])
        assert 0 <= result.summary["test_coverage_2sd"] <= 1
    else:
        assert var is None and "test_nlpd" in result.not_applicable


def check_deterministic(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """A fixed seed gives the same result; a seed-free algorithm ignores the seed."""
    _same(fit(spec, problem, seed=3), fit(spec, problem, seed=3))
    if spec.seed_free:
        _same(fit(spec, problem, seed=3), fit(spec, problem, seed=4))


def check_store_blocks_equal_memory_blocks(spec: AlgorithmSpec, problem: Problem,
                                           conf_dir: Path) -> None:
    """The same fit on numpy blocks and on zarr-store blocks."""
    _same(fit(spec, problem, blocks=problem.memory), fit(spec, problem, blocks=problem.store))


def check_torch_blocks_equal_memory_blocks(spec: AlgorithmSpec, problem: Problem,
                                           conf_dir: Path) -> None:
    """An algorithm that runs on a torch device (``AlgorithmSpec.device_blocks``) fits on the
    torch back end (``device=torch:cpu``) as on numpy: the same basis, and coefficients and
    every number of its summary (objectives, residuals, test metrics) to 1e-10 relative, or
    1e-10 absolute for a quantity already relative (a gap, a residual). Not its intermediate
    steps: CG's iterates amplify round-off midway (a relative residual differing by 1e-5 at
    iteration 10 of 18 in float64) and agree again at convergence."""
    if not_applicable(check_torch_blocks_equal_memory_blocks, spec) is not None:
        return
    import torch

    from algorithms.torch_blocks import TorchKernelBlocks

    on_numpy = fit(spec, problem, blocks=problem.memory)
    on_torch = fit(spec, problem, blocks=TorchKernelBlocks(
        problem.memory.X, problem.memory.kernel, torch.device("cpu")))
    np.testing.assert_array_equal(on_numpy.basis, on_torch.basis)
    np.testing.assert_allclose(on_torch.coef, on_numpy.coef, rtol=1e-10,
                               atol=1e-10 * np.abs(on_numpy.coef).max())
    for key, value in on_numpy.summary.items():
        if key.endswith("seconds") or isinstance(value, (str, bool)) or value is None:
            continue
        np.testing.assert_allclose(on_torch.summary[key], value, rtol=1e-10, atol=1e-10,
                                   err_msg=key)


def check_exact_limit(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """With all points (spec.exact_limit), predictions equal the exact GP's."""
    if not_applicable(check_exact_limit, spec) is not None:
        return  # nothing to test (tests/test_contract.py skips this case with the reason)
    n = problem.memory.n
    options = {k: n if v == N_MARK else v for k, v in spec.exact_limit.options.items()}
    exact = run("exact", problem.memory, problem.y, lam=LAM)
    limit = run(spec, problem.memory, problem.y, lam=LAM, kappa=n, rng=0, **options)
    scale = np.abs(exact.predict(problem.X_test)).max()
    np.testing.assert_allclose(limit.predict(problem.X_test), exact.predict(problem.X_test),
                               atol=1e-6 * scale)
    if spec.exact_limit.variance:
        np.testing.assert_allclose(limit.predict_var(problem.X_test),
                                   exact.predict_var(problem.X_test), rtol=1e-6)


def check_bad_options(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """An unknown option and every declared option's bad values are one-line InputErrors."""
    with pytest.raises(InputError, match=f"algorithm {spec.name} has no option 'no_such'"):
        fit(spec, problem, no_such=1)
    for key, opt in spec.options.items():
        for bad in opt.bad_values():
            with pytest.raises(InputError) as err:
                fit(spec, problem, **{key: bad})
            assert key in str(err.value) and "\n" not in str(err.value), (key, bad)


def check_learning_curve(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """Where declared, a Lemma-4 learning curve runs and has the curve schema."""
    if not_applicable(check_learning_curve, spec) is not None:
        return  # nothing to test (tests/test_contract.py skips this case with the reason)
    curve = learning_curve(spec.name, spec.learning_curve, Kernel("matern32", {"mu": 0.2}),
                           uniform_density(60), lam=0.5, n_grid=[2, 8], draws=3, seed=0, m=3)
    assert set(CURVE_TRACE_KEYS) <= set(curve.trace)
    assert set(CURVE_SUMMARY_KEYS) <= set(curve.summary)
    assert np.isfinite(curve.trace["xbar_error"]).all() and curve.errors.shape == (2, 3)


def check_extreme_lam(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """At lam = 1e-300, 1e-15 (just above float64 resolution) and 1e300 a fit succeeds with
    finite numbers or is one InputError naming lam and the kernel (the evaluator's checks),
    never a FloatingPointError, LinAlgError or TypeError. A classifier has no noise variance:
    it ignores lam and must succeed."""
    for lam in (1e-300, 1e-15, 1e300):
        try:
            result = run(spec, problem.memory, problem.y, lam=lam, kappa=7, rng=0,
                         test=(problem.X_test, problem.y_test), **spec.check_options)
        except InputError as err:
            msg = str(err)
            assert spec.task == "regression", msg
            assert f"lam={lam:g}" in msg and f"kernel {KERNEL}" in msg and "\n" not in msg, msg
            assert ("larger lam" if lam < 1 else "smaller lam") in msg, msg
            continue
        assert np.isfinite(result.coef).all(), lam
        for key in summary_keys(spec.task):
            value = result.summary[key]
            assert (key in result.not_applicable or not isinstance(value, float)
                    or np.isfinite(value)), (lam, key, value)


def check_variables_described(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """Every trace, summary and solution key the algorithm emits (and its learning curve's)
    has a long name and units in :data:`algorithms.variables.DESCRIPTIONS`, so the results
    written from it describe themselves."""
    result = fit(spec, problem)
    keys = {*result.trace, *result.summary, *result.variables()}
    if spec.learning_curve is not None:
        curve = learning_curve(spec.name, spec.learning_curve, Kernel("matern32", {"mu": 0.2}),
                               uniform_density(60), lam=0.5, n_grid=[2, 8], draws=3, seed=0,
                               m=3, baseline=(spec.name, spec.learning_curve))
        keys |= {*curve.trace, *curve.summary}
    undescribed = sorted(k for k in keys if describe(k) is None)
    assert not undescribed, f"add to algorithms/variables.py: {undescribed}"


def check_defaults_fit_a_tiny_dataset(spec: AlgorithmSpec, problem: Problem,
                                      conf_dir: Path) -> None:
    """With every option at its default, a fit on 12 training rows succeeds: a size option
    above n_train (``clip_to_n``: a basis, a subset) is clipped, and the summary says so."""
    X = problem.memory.inputs(np.arange(12))
    blocks = ArrayKernelBlocks(X, KERNEL)
    result = run(spec, blocks, problem.y[:12], lam=LAM, kappa=7, rng=0)
    assert np.isfinite(result.summary["seconds"])
    clipped = [key for key, opt in spec.options.items()
               if opt.clip_to_n and isinstance(opt.default, int) and opt.default > 12]
    note = result.summary.get("clipped_options", "")
    assert note == "; ".join(f"algorithm.{key}={spec.options[key].default} clipped to "
                             "n_train=12" for key in clipped)


def check_blas_lead(spec: AlgorithmSpec, problem: Problem, conf_dir: Path) -> None:
    """The evaluator runs the fit under :func:`~algorithms.kernel_threads.lead_blas` of the
    spec's ``blas_lead``: a package that ships a BLAS of its own."""
    from algorithms.kernel_threads import BLAS_OWNERS

    assert spec.blas_lead in BLAS_OWNERS, (spec.name, spec.blas_lead)


CHECKS = [check_yaml_matches_spec, check_blas_lead, check_result_schema, check_deterministic,
          check_store_blocks_equal_memory_blocks, check_torch_blocks_equal_memory_blocks,
          check_exact_limit, check_bad_options,
          check_learning_curve, check_extreme_lam, check_variables_described,
          check_defaults_fit_a_tiny_dataset]

# checks that test nothing for some algorithms: why, for a spec they do not apply to
NOT_APPLICABLE = {
    check_exact_limit: lambda spec: None if spec.exact_limit is not None else
    f"{spec.name} declares no exact limit (AlgorithmSpec.exact_limit is None)",
    check_learning_curve: lambda spec: None if spec.learning_curve is not None else
    f"{spec.name} declares no learning curve (AlgorithmSpec.learning_curve is None)",
    check_torch_blocks_equal_memory_blocks: lambda spec: None if spec.device_blocks
    else f"{spec.name} runs on numpy only (AlgorithmSpec.device_blocks is False)",
}


def not_applicable(check, spec: AlgorithmSpec) -> str | None:
    """Why ``check`` tests nothing for ``spec``, else None: tests/test_contract.py skips such a
    case with the reason; a caller running every check on one spec (tests/test_peers.py) gets
    a check that returns at once."""
    reason = NOT_APPLICABLE.get(check)
    return reason(spec) if reason is not None else None
