"""protocol=shared|own (pipeline/job/protocol.py): a method that learns by itself trains from
the shared learned kernel (and the median start); our low-rank methods learn by Titsias' bound
at their basis size; the exact GP and CG are the shared job."""

import math

import numpy as np
import pytest

from algorithms import REGISTRY, InputError, Kernel
from algorithms.evaluation import options_of
from algorithms.hyper import Parameters, learn, log_marginal_likelihood
from pipeline.config import complete
from pipeline.job.hyper import HYPER_OPTIONS, base_config, cache_key, hyper_options, shared_config
from pipeline.job.identity import config_hash
from pipeline.job.protocol import apply_protocol
from pipeline.job.run import run_job


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
                               "basis": 16, "refine": None,
                               "shared_start": {k: shared_hyper.get(k, HYPER_OPTIONS[k].default)
                                                for k in ("refine", "method", "bound", "basis")}}
    assert shared_config(config)["hyper"]["method"] == shared_hyper.get("method", "subset")
    again = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    assert apply_protocol(again) == "own" and again == config  # idempotent
    shared = job(name, "shared", max_basis=16)
    apply_protocol(shared)
    assert config_hash(config) != config_hash(shared)
    assert cache_key(config) != cache_key(shared)
    nystrom = job("nystrom", "own", max_basis=16)
    larger = job("nystrom", "own", max_basis=32)
    apply_protocol(nystrom), apply_protocol(larger)
    assert cache_key(config) == cache_key(nystrom) != cache_key(larger)


def test_an_own_learning_starts_from_the_refined_shared_learning():
    """With hyper.refine on the shared learning (the reference's protocol), a low-rank own
    learning has no stage of its own and starts from the refined shared learning: the
    shared_start form carries the stage, so it names the shared learning's cache entry."""
    config = job("nystrom", "own", max_basis=16)
    config["hyper"] = {**config["hyper"], "refine": {"subset": 8000, "max_iter": 50}}
    shared = {**config, "protocol": "shared", "hyper": dict(config["hyper"])}
    apply_protocol(config), apply_protocol(shared)
    assert config["hyper"]["refine"] is None
    assert config["hyper"]["shared_start"]["refine"] == {"subset": 8000, "max_iter": 50}
    assert cache_key(shared_config(config)) == cache_key(shared)
    assert cache_key(base_config(shared)) != cache_key(shared)


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
        hyper_options(config)


def test_own_protocol_applies_the_specs_training_from_the_shared_kernel():
    """A peer trains by its own protocol from the kernel hyper=ml learned for the shared mode
    (the same learning: one cache key) and from the median start its ``starts`` names."""
    config = job("gpytorch_sgpr", "own", max_basis=16, steps=0, optimizer="adam")
    assert apply_protocol(config) == "own"
    assert config["algorithm"] == {"name": "gpytorch_sgpr", "max_basis": 16,
                                   **REGISTRY["gpytorch_sgpr"].own_protocol}
    assert config["algorithm"]["starts"] == "given+median"
    again = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    assert apply_protocol(again) == "own" and again == config  # idempotent
    shared = job("gpytorch_sgpr", "shared", max_basis=16, steps=0, optimizer="adam")
    assert apply_protocol(shared) == "shared" and config_hash(shared) != config_hash(config)
    assert config["hyper"] == shared["hyper"] and cache_key(config) == cache_key(shared)


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
    assert nystrom["hyper_runs"] == 2  # the median start and the shared learning's optimum
    exact = run_job({**base, "algorithm": {"name": "exact"}},
                    tmp_path / "exact.nc").result.summary
    assert exact["hyper_method"] == "subset" and exact["hyper_n_basis"] == 0
    assert exact["hyper_lam"] != nystrom["hyper_lam"]
    # the shared learning it started from is part of its learning's cost, as for a peer
    assert nystrom["hyper_start_seconds"] == exact["hyper_seconds"] > 0
    assert nystrom["hyper_start_cpu_seconds"] == exact["hyper_cpu_seconds"] > 0
    assert "hyper_start_seconds" not in exact


def test_own_caps_set_a_peers_own_options_and_nothing_else():
    caps = {"gpytorch_sgpr": {"steps": 50}, "gpytorch_svgp": {"epochs": 20}}
    config = job("gpytorch_sgpr", "own", max_basis=16)
    config["own"] = caps
    assert apply_protocol(config) == "own"
    assert config["algorithm"] == {"name": "gpytorch_sgpr", "max_basis": 16,
                                   **REGISTRY["gpytorch_sgpr"].own_protocol, "steps": 50}
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
            hyper_options({"hyper": {"name": "ml", "init": "shared",
                                     "shared_start": shared_start}})
    options = hyper_options({"hyper": {"name": "ml", "init": "shared", "subset": 8000,
                                       "shared_start": {"subset": 2000, "init": "median"}}})
    assert options["init"] == "shared" and options["shared_start"]["subset"] == 2000
