"""The contract suite over the registry: every registered algorithm passes every check of
tests/contract.py; a toy algorithm added at test time (one module + one yaml) is found and
checked the same way, and runs as a pipeline job."""

import importlib.util
import textwrap

import numpy as np
import pytest

from algorithms import REGISTRY
from algorithms.registry import register_module, unregister
from pipeline.job.run import run_job
from pipeline.results import load_job_result
from tests.contract import CHECKS, CONF_DIR, check_exact_limit, make_problem, not_applicable


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    return {task: make_problem(root, task) for task in ("regression", "classification")}


@pytest.fixture(scope="module")
def problem(problems):
    return problems["regression"]


def contract_cases() -> list:
    """(algorithm, check) for every registered algorithm and check; a check that tests nothing
    for an algorithm (no exact limit, no learning curve declared) is skipped with the reason."""
    out = []
    for name in sorted(REGISTRY):
        for check in CHECKS:
            reason = not_applicable(check, REGISTRY[name])
            marks = [pytest.mark.skip(reason=reason)] if reason is not None else []
            out.append(pytest.param(name, check, id=f"{name}-{check.__name__}", marks=marks))
    return out


@pytest.mark.parametrize(("name", "check"), contract_cases())
def test_algorithm_follows_the_contract(name, check, problems):
    spec = REGISTRY[name]
    check(spec, problems[spec.task], CONF_DIR)


def test_every_algorithm_yaml_has_a_spec():
    assert {p.stem for p in (CONF_DIR / "algorithm").glob("*.yaml")} == set(REGISTRY)


TOY_MODULE = '''
"""Subset of data: the exact GP on m random training points (a toy for the contract test)."""
import numpy as np
import scipy.linalg as sla

from algorithms.contract import AlgorithmSpec, ExactLimit, Prediction, Solution
from algorithms.options import Option


def fit(blocks, y, *, lam, rng, recorder, m):
    S = np.sort(rng.choice(blocks.n, min(m, blocks.n), replace=False))
    factor = sla.cho_factor(blocks.block(S, S) + lam * np.eye(len(S)), lower=True)
    coef = sla.cho_solve(factor, y[S])

    def variance_bounds(X):
        k = blocks.cross(X, S)
        var = blocks.kernel.diag(X) + lam - np.einsum("ij,ji->i", k, sla.cho_solve(factor, k.T))
        return var, var

    recorder.step(lambda X: Prediction(blocks.cross(X, S) @ coef), n_basis=len(S),
                  objective=np.nan, gap=np.nan)
    return Solution(S, coef, blocks.inputs(S), blocks.kernel, lam,
                    {"n_basis": len(S), "objective": np.nan, "gap": np.nan,
                     "stop_reason": "m points", "jitter": 0.0}, variance_bounds,
                    not_applicable={"objective": "not computed", "gap": "no dual"})


SPECS = [AlgorithmSpec("toy_subset_of_data", fit, "exact GP on m random points",
                       options={"m": Option(20, "int", "subset size", lo=1)},
                       has_variance=True, exact_limit=ExactLimit({"m": "n"}, variance=True),
                       check_options={"m": 10})]
'''


def test_a_toy_algorithm_is_one_module_and_one_yaml(tmp_path, problem):
    module_path = tmp_path / "toy_subset_of_data.py"
    module_path.write_text(textwrap.dedent(TOY_MODULE))
    conf_dir = tmp_path / "conf"
    (conf_dir / "algorithm").mkdir(parents=True)
    (conf_dir / "algorithm" / "toy_subset_of_data.yaml").write_text(
        "name: toy_subset_of_data\nm: 20\n")
    spec_from = importlib.util.spec_from_file_location("toy_subset_of_data", module_path)
    module = importlib.util.module_from_spec(spec_from)
    spec_from.loader.exec_module(module)
    (spec,) = register_module(module)
    try:
        for check in CHECKS:  # the whole suite, as for a shipped algorithm
            if not_applicable(check, spec) is None:
                check(spec, problem, conf_dir)
        assert not_applicable(check_exact_limit, spec) is None  # the toy declares its limit
        config = {"algorithm": {"name": "toy_subset_of_data", "m": 15},
                  "dataset": {"name": "sine1d", "n_train": 50, "n_test": 20},
                  "kernel": {"name": "rbf", "width": 0.1}, "lam": 0.1, "kappa": 5, "seed": 0,
                  "store_root": str(tmp_path / "stores"), "certificate": {"enabled": True}}
        outcome = run_job(config, tmp_path / "result.nc")  # the pipeline runs it unchanged
        ds = load_job_result(outcome.result_path)
        assert ds.attrs["summary"]["n_basis"] == 15 and ds["coef"].shape == (15,)
        assert np.isfinite(ds.attrs["summary"]["test_nlpd"])
        assert ds.attrs["summary"]["gap_certified"] >= 0
        assert np.isfinite(ds.attrs["summary"]["objective"])  # the certificate computed L
    finally:
        unregister("toy_subset_of_data")


def test_every_kernel_yaml_matches_its_spec():
    from omegaconf import OmegaConf

    from algorithms import KERNELS

    assert {p.stem for p in (CONF_DIR / "kernel").glob("*.yaml")} == set(KERNELS)
    for name, spec in KERNELS.items():
        conf = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "kernel" / f"{name}.yaml"))
        assert conf.pop("name") == name
        assert conf == {key: opt.default for key, opt in spec.params.items()}, name
