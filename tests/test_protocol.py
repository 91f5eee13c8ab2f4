"""protocol=shared|own (pipeline/job/protocol.py): a method that learns by itself trains from
the run's first start (hyper.init, evaluated, never another method's learning); our low-rank
methods learn by Titsias' bound at their basis size from the same start; the exact GP and CG
are the shared job; hyper.budget_seconds holds every method's learning alike."""

import math

import numpy as np
import pytest

from algorithms import REGISTRY, InputError, Kernel
from algorithms.evaluation import options_of
from algorithms.hyper import Parameters, learn, log_marginal_likelihood
from pipeline.config import complete
from pipeline.job.hyper import cache_key, hyper_options, learning_keys
from pipeline.job.identity import config_hash
from pipeline.job.protocol import apply_protocol
from pipeline.job.run import run_job
from pipeline.job.spec import JobSpec


def key(config: dict) -> str:
    """The cache key of the learning of the job ``config`` describes."""
    return cache_key(JobSpec.from_config(config))


def job(algorithm: str, protocol: str, **algorithm_options) -> dict:
    return complete({"algorithm": {"name": algorithm, **algorithm_options},
                     "dataset": {"name": "sine1d", "n_train": 100},
                     "kernel": {"name": "rbf", "width": 2.0}, "protocol": protocol,
                     "hyper": {"name": "ml", "restarts": 5, "max_iter": 200}})


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.own_protocol))
def test_own_protocols_are_valid_options_of_their_spec(name):
    spec = REGISTRY[name]
    assert set(spec.own_protocol) <= set(spec.options)
    options = options_of(spec, dict(spec.own_protocol))
    assert {k: options[k] for k in spec.own_protocol} == dict(spec.own_protocol)


def test_a_method_that_learns_nothing_itself_runs_the_shared_job():
    for name in ("exact", "cg", "sklearn_nystroem"):  # the reference keeps the shared kernel
        own, shared = job(name, "own"), job(name, "shared")
        assert apply_protocol(own) == "shared" and own == shared, name
        assert config_hash(own) == config_hash(shared)
    # under hyper=fixed nothing is learned: a low-rank method's own job is the shared one too
    own, shared = job("nystrom", "own"), job("nystrom", "shared")
    own["hyper"] = shared["hyper"] = {"name": "fixed"}
    assert apply_protocol(own) == "shared" and own == shared


@pytest.mark.parametrize("name", ["nystrom", "incomplete_cholesky", "sgma",
                                  "zhang_kappa_greedy"])
def test_a_low_rank_method_learns_by_titsias_bound_at_its_own_basis_size(name):
    """protocol=own for a method with a basis size m: hyper.method=lowrank with hyper.basis = m
    (the bound SGPR trains on), the rest of the hyper block as configured; one learning per
    dataset, split and m, shared by every such method, none with the shared mode."""
    config = job(name, "own", max_basis=16)
    assert apply_protocol(config) == "own"
    shared_hyper = job(name, "shared")["hyper"]
    assert config["hyper"] == {**shared_hyper, "method": "lowrank", "bound": "vfe",
                               "basis": 16, "refine": None, "shared_start": None}
    again = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    assert apply_protocol(again) == "own" and again == config  # idempotent
    shared = job(name, "shared", max_basis=16)
    apply_protocol(shared)
    assert config_hash(config) != config_hash(shared)
    assert key(config) != key(shared)
    nystrom = job("nystrom", "own", max_basis=16)
    larger = job("nystrom", "own", max_basis=32)
    apply_protocol(nystrom), apply_protocol(larger)
    assert key(config) == key(nystrom) != key(larger)


def test_an_own_learning_never_starts_from_the_shared_learning():
    """With hyper.refine on the shared learning (the reference's protocol), a low-rank own
    learning has no stage of its own and no start from the shared learning: its cache key
    names no other learning (no warm start from the exact GP's kernel)."""
    config = job("nystrom", "own", max_basis=16)
    config["hyper"] = {**config["hyper"], "refine": {"subset": 8000, "max_iter": 50}}
    shared = {**config, "protocol": "shared", "hyper": dict(config["hyper"])}
    apply_protocol(config), apply_protocol(shared)
    assert config["hyper"]["refine"] is None and config["hyper"]["shared_start"] is None
    assert learning_keys(JobSpec.from_config(config)) == {key(config)}
    assert key(config) not in learning_keys(JobSpec.from_config(shared))


def test_a_refined_learning_starts_from_the_learning_before_its_stage(tmp_path):
    """hyper.refine: the learning on 40 rows, then its optimum refined on every row (120) from
    it alone; the stage's record says 120 rows and one run, and its start's seconds are the
    40-row learning's (cached apart: a job without the stage reads it)."""
    base = {"dataset": {"name": "sine1d", "n_train": 120, "n_test": 20},
            "kernel": {"name": "rbf", "width": 2.0}, "algorithm": {"name": "exact"},
            "hyper": {"name": "ml", "restarts": 0, "subset": 40},
            "store_root": str(tmp_path / "stores"), "certificate": {"enabled": False}}
    refined = run_job({**base, "hyper": {**base["hyper"],
                                         "refine": {"subset": 1000, "max_iter": 20}}},
                      tmp_path / "refined.nc").result.summary
    first = run_job(base, tmp_path / "first.nc").result.summary
    assert first["hyper_n_subset"] == 40 and refined["hyper_n_subset"] == 120
    assert refined["hyper_runs"] == 1 and refined["hyper_start_seconds"] == first["hyper_seconds"]
    # the stage started at the 40-row optimum: its first evaluation there, on all 120 rows
    assert refined["hyper_lam"] != first["hyper_lam"]


@pytest.mark.parametrize("refine", [{"subset": 8000}, {"subset": 0, "max_iter": 5}, 3,
                                    {"subset": 8000, "max_iter": 50, "init": "median"}])
def test_a_bad_refine_is_one_line(refine):
    config = job("exact", "shared")
    config["hyper"] = {**config["hyper"], "refine": refine}
    with pytest.raises(InputError, match=r"hyper.refine=.* must be null or \{subset: N, max_iter"):
        hyper_options(config["hyper"])


def test_own_protocol_trains_a_peer_from_the_runs_first_start_evaluated():
    """A peer trains by its own protocol from the run's first start (hyper.init), evaluated by
    hyper=ml and not optimised: max_iter 0, no restarts, no refinement, no budget of the
    learning's own (the peer gets it); its ``starts`` is ``given``."""
    config = job("gpytorch_sgpr", "own", max_basis=16, steps=0, optimizer="adam")
    config["hyper"] = {**config["hyper"], "init": "standard", "budget_seconds": 30.0,
                       "refine": {"subset": 8000, "max_iter": 50}}
    assert apply_protocol(config) == "own"
    spec = REGISTRY["gpytorch_sgpr"]
    expected = {"name": "gpytorch_sgpr", "max_basis": 16, **spec.own_protocol, "starts": "given"}
    if "budget_seconds" in spec.options:
        expected["budget_seconds"] = 30.0
    assert config["algorithm"] == expected
    assert config["hyper"]["max_iter"] == 0 and config["hyper"]["restarts"] == 0
    assert config["hyper"]["refine"] is None and config["hyper"]["budget_seconds"] is None
    assert config["hyper"]["init"] == "standard"
    again = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    assert apply_protocol(again) == "own" and again == config  # idempotent
    shared = job("gpytorch_sgpr", "shared", max_basis=16, steps=0, optimizer="adam")
    assert apply_protocol(shared) == "shared" and config_hash(shared) != config_hash(config)
    assert key(config) != key(shared)


def test_the_standard_start_depends_on_the_input_dimension_alone():
    """hyper.init=standard: variance 1, every length scale √(d/2), σ² = lam, whatever the
    rows: two data sets of one dimension start at the same θ."""
    kernel = Kernel("rbf", {"width": 2.0})
    params = Parameters.of(kernel, 8, True)
    starts = []
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(50, 8)) * (seed + 1)
        y = rng.normal(size=50) * 5
        got = learn(X, y, kernel, 0.1, rng=rng, restarts=0, max_iter=0, ard=True,
                    init="standard")
        starts.append(got.trace["theta"][0])
    assert np.array_equal(starts[0], starts[1])
    assert np.allclose(starts[0], [0.0, *[0.5 * math.log(4.0)] * 8, math.log(0.1)],
                       rtol=0, atol=1e-15)
    assert params.n_lengths == 8
    from algorithms.hyper import standard_start
    start_kernel, start_lam = standard_start(8, Kernel("rbf", {"lengthscales": [1.0] * 8}), 0.1)
    assert start_kernel.lengthscales == pytest.approx([2.0] * 8, rel=1e-12)
    assert start_kernel.variance == pytest.approx(1.0) and start_lam == pytest.approx(0.1)


def test_a_learning_stops_at_its_budget_and_says_so():
    """hyper.budget_seconds: the L-BFGS-B run stops at the end of the iteration past the
    budget, its iterate kept, no further start runs; the summary's stop reason is budget."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=600)
    kernel = Kernel("rbf", {"width": 2.0})
    free = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), restarts=2, ard=True,
                 subset=600)
    assert free.summary()["hyper_stop_reason"] == "converged" and len(free.runs) == 3
    held = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), restarts=2, ard=True,
                 subset=600, budget_seconds=0.0)
    assert held.summary()["hyper_stop_reason"] == "budget"
    assert len(held.runs) == 1 and held.runs[0]["iterations"] == 1
    assert not held.runs[0]["converged"]
    assert held.summary()["hyper_iterations"] == 1
    assert held.log_marginal_likelihood < free.log_marginal_likelihood


def test_a_tiny_own_job_learns_by_the_low_rank_bound(tmp_path):
    """In process: nystrom under protocol=own runs hyper.method=lowrank at basis = max_basis,
    the exact GP under protocol=own the shared learning."""
    base = {"dataset": {"name": "sine1d", "n_train": 60, "n_test": 20},
            "kernel": {"name": "rbf", "width": 2.0}, "protocol": "own",
            "hyper": {"name": "ml", "restarts": 0, "max_iter": 20},
            "store_root": str(tmp_path / "stores"), "certificate": {"enabled": False}}
    nystrom = run_job({**base, "algorithm": {"name": "nystrom", "max_basis": 12}},
                      tmp_path / "nystrom.nc").result.summary
    assert nystrom["hyper_method"] == "lowrank" and nystrom["hyper_n_basis"] == 12
    assert nystrom["hyper_runs"] == 1  # the median start alone: no start from another learning
    exact = run_job({**base, "algorithm": {"name": "exact"}},
                    tmp_path / "exact.nc").result.summary
    assert exact["hyper_method"] == "subset" and exact["hyper_n_basis"] == 0
    assert exact["hyper_lam"] != nystrom["hyper_lam"]
    # it started from no other learning: no other learning's seconds in its cost
    assert "hyper_start_seconds" not in nystrom and "hyper_start_seconds" not in exact
    assert nystrom["own_stop_reason"] in ("converged", "cap")
    assert nystrom["own_iterations"] >= 1


def test_own_caps_set_a_peers_own_options_and_nothing_else():
    caps = {"gpytorch_sgpr": {"steps": 50}, "gpytorch_svgp": {"epochs": 20}}
    config = job("gpytorch_sgpr", "own", max_basis=16)
    config["own"] = caps
    assert apply_protocol(config) == "own"
    assert config["algorithm"] == {"name": "gpytorch_sgpr", "max_basis": 16,
                                   **REGISTRY["gpytorch_sgpr"].own_protocol, "starts": "given",
                                   "steps": 50}
    assert apply_protocol(config) == "own" and config["algorithm"]["steps"] == 50  # idempotent
    uncapped = job("gpytorch_sgpr", "own", max_basis=16)
    apply_protocol(uncapped)
    assert config_hash(config) != config_hash(uncapped)  # the cap is in the job's identity
    # the shared mode and the methods that learn nothing are the same jobs with or without it
    for algorithm, protocol in (("gpytorch_sgpr", "shared"), ("nystrom", "own"), ("exact", "own")):
        plain, capped = job(algorithm, protocol), job(algorithm, protocol)
        capped["own"] = caps
        apply_protocol(plain), apply_protocol(capped)
        assert plain["algorithm"] == capped["algorithm"]
        assert config_hash(plain) == config_hash(capped)


@pytest.mark.parametrize("own, message", [
    ({"nope": {"steps": 5}}, r"own\.nope: no such algorithm; own names an algorithm with its "
                             r"own protocol: .*gpytorch_sgpr"),
    ({"nystrom": {"max_basis": 5}}, r"own\.nystrom: nystrom learns nothing itself; own names"),
    ({"gpytorch_sgpr": {"stepz": 5}}, r"own\.gpytorch_sgpr\.stepz: gpytorch_sgpr has no option "
                                      r"'stepz'; its options: .*steps"),
    ({"gpytorch_sgpr": 5}, r"own\.gpytorch_sgpr=5 must map options to values; pass e\.g\."),
    ([1, 2], r"own=\[1, 2\] must map an algorithm to options of its own protocol"),
])
def test_bad_own_caps_are_one_line(own, message):
    config = job("nystrom", "shared")
    config["own"] = own
    with pytest.raises(InputError, match=message):
        apply_protocol(config)


def test_a_bad_protocol_is_one_line():
    with pytest.raises(InputError, match=r"protocol='mine' must be one of shared, own; pass"):
        apply_protocol(job("nystrom", "mine"))


def test_max_iter_zero_returns_the_first_start_evaluated():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80) + 3.0
    kernel = Kernel("rbf", {"width": 2.0})
    got = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), restarts=5, max_iter=0,
                ard=True)
    assert len(got.runs) == 1 and got.runs[0]["iterations"] == 0
    assert len(got.trace["run"]) == 1
    params = Parameters.of(kernel, 2, True)
    theta = got.trace["theta"][0]
    assert math.isclose(theta[0], math.log(np.var(y - y.mean())), rel_tol=1e-12)
    assert math.isclose(theta[-1], math.log(0.1), rel_tol=1e-12)  # σ² at lam
    value, _ = log_marginal_likelihood(X, y - y.mean(), params, theta)
    assert got.log_marginal_likelihood == pytest.approx(value, rel=1e-12)
    assert got.lam == pytest.approx(0.1) and got.y_offset == pytest.approx(y.mean())


@pytest.mark.parametrize("method", ["lowrank", "subset"])
def test_a_further_start_is_evaluated_and_the_better_kept(method):
    """learn(extra_starts=…): every start is a run of its own (with method=lowrank its own
    pivoted-Cholesky basis), and the best objective wins: a start at a learned optimum beats
    the median start it was learned from."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=80)
    kernel = Kernel("rbf", {"width": 2.0})
    options = {"method": method, "basis": 10, "restarts": 0}
    optimum = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), max_iter=50, **options)
    median = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), max_iter=0, **options)
    both = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), max_iter=0,
                 extra_starts=[(optimum.kernel, optimum.lam)], **options)
    assert [run["run"] for run in both.runs] == [0, 1]
    assert both.runs[0]["log_marginal_likelihood"] == median.log_marginal_likelihood
    assert both.log_marginal_likelihood == max(r["log_marginal_likelihood"] for r in both.runs)
    assert both.log_marginal_likelihood > median.log_marginal_likelihood
    assert both.lam == pytest.approx(optimum.lam, rel=1e-12)
    assert both.n_basis == (10 if method == "lowrank" else 0)


def test_init_shared_refines_the_given_optimum_only():
    """hyper.init=shared: no start of its own, the given optimum is the one start (a
    refinement of a learning on fewer rows). Refining the 60-row optimum on all 200 rows ends
    at least as high as the median start on all rows does here, and a refinement of the
    all-row optimum itself stays there; without a given start it is one ``error:`` line."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=200)
    kernel = Kernel("rbf", {"width": 2.0})
    small = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), subset=60, restarts=0)
    full = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), subset=200, restarts=0)
    refined = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), subset=200, restarts=0,
                    init="shared", extra_starts=[(small.kernel, small.lam)])
    assert len(refined.runs) == 1 and refined.runs[0]["converged"]
    first = refined.trace["theta"][0]
    params = Parameters.of(kernel, 2, False)
    assert np.allclose(first, params.theta(small.kernel, small.lam, 2), rtol=1e-12)
    assert refined.log_marginal_likelihood == pytest.approx(full.log_marginal_likelihood,
                                                            abs=1e-4)
    again = learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), subset=200, restarts=0,
                  init="shared", extra_starts=[(full.kernel, full.lam)])
    assert again.lam == pytest.approx(full.lam, rel=1e-4)
    with pytest.raises(InputError, match="hyper.init=shared"):
        learn(X, y, kernel, 0.1, rng=np.random.default_rng(1), init="shared")


def test_init_shared_needs_a_shared_start_with_a_start_of_its_own():
    from pipeline.job.hyper import hyper_options

    for shared_start in (None, {"subset": 2000, "init": "shared"}):
        with pytest.raises(InputError, match="hyper.init=shared starts from the optimum"):
            hyper_options({"name": "ml", "init": "shared", "shared_start": shared_start})
    options = hyper_options({"name": "ml", "init": "shared", "subset": 8000,
                             "shared_start": {"subset": 2000, "init": "median"}})
    assert options["init"] == "shared" and options["shared_start"]["subset"] == 2000
