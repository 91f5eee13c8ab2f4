"""Wang et al. 2019's exact-GP column like for like (``experiment=wang2019_exact``, issue 85):
their random 64/16/20 % train/validation/test split (``dataset.splits=wang2019``) and the
experiment at reduced size: one isotropic Matérn-3/2 kernel learned by marginal likelihood,
the exact GP fitted on the training rows only."""

import json

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from algorithms.errors import InputError
from pipeline.config import CONF_DIR
from pipeline.datasets import build, ingest, read_store, train_shape
from pipeline.datasets.sources import _load_uci, wang2019_rows, wang2019_sizes
from pipeline.results.consolidate import load

# training n of their Table 1 (Pleiss's thesis, tables/large_exact_gp_results.tex), and each
# set's rows
TABLE1_N = {"pol": (9600, 15000), "elevators": (10623, 16599), "kin40k": (25600, 40000),
            "protein": (29267, 45730), "keggdirected": (31248, 48827)}


@pytest.mark.parametrize("name", sorted(TABLE1_N))
def test_wang2019_splits_give_their_training_sizes(name):
    n_train, rows = TABLE1_N[name]
    assert wang2019_sizes(rows)[0] == n_train
    for trial in (0, 2):
        assert train_shape({"name": name, "splits": "wang2019", "split": trial})[0] == n_train


def test_wang2019_split_is_64_16_20_disjoint_and_seeded_by_the_trial():
    n = 15000
    train, validation, test = wang2019_rows(n, 1)
    assert (len(train), len(validation), len(test)) == (9600, 2400, 3000)  # 64/16/20 %
    assert np.array_equal(np.sort(np.concatenate([train, validation, test])), np.arange(n))
    again = wang2019_rows(n, 1)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, validation, test),
                                                    strict=True))
    other = wang2019_rows(n, 2)
    assert not np.array_equal(np.sort(other[2]), np.sort(test))
    for n in (16599, 40000, 45730, 48827, 17379, 63608, 7, 1):  # every row in exactly one part
        parts = wang2019_rows(n, 0)
        assert sum(map(len, parts)) == n
        assert abs(len(parts[2]) - 0.2 * n) < 1 and abs(len(parts[0]) - 0.64 * n) < 2


def test_wang2019_builds_train_and_test_rows_only_standardised_on_training_rows():
    arrays, attrs = build({"name": "pol", "splits": "wang2019", "split": 1})
    assert (attrs["n_train"], attrs["n_test"]) == (9600, 3000)  # 2400 validation rows left out
    assert "2400 validation rows left out" in attrs["provenance"]
    data, _ = _load_uci("pol")
    train, validation, test = wang2019_rows(len(data), 1)
    y = attrs["standardisation"]
    assert np.allclose(arrays["y_train"] * y["y_std"] + y["y_mean"], data[train, -1])
    assert np.allclose(arrays["y_test"] * y["y_std"] + y["y_mean"], data[test, -1])
    assert y["y_mean"] == pytest.approx(data[train, -1].mean())  # the 64 %: not validation
    assert abs(arrays["y_train"].mean()) < 1e-12 and arrays["y_train"].std() == pytest.approx(1)
    # the fixed masks are still the default
    assert train_shape({"name": "pol"}) == (13500, 26)
    assert build({"name": "pol", "n_train": 50})[1]["n_test"] == 1500
    with pytest.raises(InputError, match="n_train=9601 exceeds the 9600 training rows"):
        build({"name": "pol", "splits": "wang2019", "n_train": 9601})
    with pytest.raises(InputError, match="splits='random' is invalid; it must be one of mask, "
                                         "wang2019"):
        build({"name": "pol", "splits": "random"})


def test_wang2019_exact_experiment_is_their_protocol():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["experiment=wang2019_exact"],
                      return_hydra_config=True)
    assert cfg.kernel.name == "matern32" and cfg.hyper.name == "ml"
    assert cfg.hyper.ard is False and cfg.hyper.subset == 10000 and cfg.hyper.restarts == 0
    assert cfg.hyper.init == "kernel" and cfg.hyper.refine is None
    # GPyTorch's default start: ℓ = softplus(0) (ours μ = ℓ/√3), outputscale and noise alike
    assert cfg.kernel.mu * np.sqrt(3) == pytest.approx(np.log(2), abs=1e-5)
    assert cfg.kernel.variance == pytest.approx(np.log(2), abs=1e-4)
    assert cfg.lam == pytest.approx(np.log(2) + 1e-4, abs=1e-4)
    assert cfg.dataset.splits == "wang2019" and cfg.dataset.standardize_y
    params = cfg.hydra.sweeper.params
    assert params["algorithm"] == "exact" and params["dataset.split"] == "0,1,2"
    assert params["dataset"] == "pol,elevators,kin40k,protein,keggdirected"


def test_wang2019_exact_reduced(tmp_path, run_cli):
    """The experiment at small size (pol, trial 0, 300 of its 9 600 training rows): the split
    is 64/16/20 % (the test rows are the full 20 %), the kernel an isotropic Matérn-3/2
    learned by marginal likelihood, and the exact GP beats the mean predictor."""
    proc = run_cli(tmp_path, "-m", "experiment=wang2019_exact", "size=small",
                   "cluster.n_workers=1", "cluster.dashboard_address=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("results: ")
    ds = load(path).load()
    assert set(np.unique(ds["status"].values)) == {"ok"}
    config = json.loads(ds.attrs["config"])
    assert config["dataset"] == {"name": "pol", "split": 0, "splits": "wang2019",
                                 "n_train": 300, "standardize_x": True, "standardize_y": True}
    assert config["kernel"]["name"] == "matern32" and config["hyper"]["ard"] is False
    store = read_store(ingest(config["dataset"], tmp_path / "outputs" / "stores"))
    assert (store.attrs["n_train"], store.attrs["n_test"]) == (300, 3000)  # 20 % of 15 000
    full = train_shape({**config["dataset"], "n_train": None})[0]
    assert (full, store.attrs["n_test"]) == (0.64 * 15000, 0.20 * 15000)
    learned = str(ds["final_hyper_kernel"].values.ravel()[0])
    assert learned.startswith("matern32(mu=") and "lengthscales" not in learned  # isotropic
    assert float(ds["final_hyper_n_subset"].max()) == 200
    assert ds["final_hyper_stop_reason"].values.ravel()[0] == "converged"
    rmse = float(ds["final_test_rmse"].max())
    assert rmse < 0.8 * float(ds["final_baseline_test_rmse"].max())
    assert np.isfinite(ds["final_test_nlpd"]).all()
