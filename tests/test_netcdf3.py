"""A job's result file written without xarray (pipeline.results.netcdf3) is the file xarray
writes, byte for byte: fits (regression, classification, with a learning's trace), failure
records, text, NaN padding, attrs of every kind; what that writer does not hold goes through
xarray as before. Both read back identically and verify their checksum."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import xarray as xr

import algorithms
from pipeline.results import job_file
from pipeline.results.job_file import (
    _job_dataset,
    _write_netcdf,
    load_job_attrs,
    load_job_result,
    read_job,
    write_job_failure,
    write_job_result,
)
from pipeline.results.netcdf3 import NotPlain, PlainDataset, plain_dataset
from tests.conftest import make_problem

NAN = np.nan
ATTRS = {"algorithm": "sgma", "kind": "fit", "status": "ok", "error": "",
         "summary": '{"gap": 0.001, "stop_reason": "tol"}', "not_applicable": "{}",
         "config": '{"lam": 0.1, "kernel": {"name": "rbf", "width": null}}',
         "host": "héte σ² λ — ✓", "pid": 12345, "job_seconds": 0.25, "n_train": np.int64(60),
         "d": np.int32(3), "ratio": np.float32(0.5), "flag": True, "pair": [1.5, 2.5],
         "counts": np.array([1, 2, 3]), "config_hash": "0123456789abcdef"}


def _fit_vars(steps: int = 4, basis: int = 5) -> dict:
    rng = np.random.default_rng(0)
    trace = rng.normal(size=steps)
    trace[1:3] = NAN  # NaN padding: metrics at evaluated steps only
    return {"seconds": ("step", np.linspace(0, 1, steps)),
            "n_basis": ("step", np.arange(steps) * 1.0), "test_rmse": ("step", trace),
            "objective": ("step", rng.normal(size=steps)),
            "basis": ("basis", np.arange(basis, dtype=np.int32)),
            "coef": ("basis", rng.normal(size=basis))}


CASES = {
    "regression": (_fit_vars(), {"step": np.arange(1, 5)}, ATTRS),
    "classification": ({**_fit_vars(3, 2), "test_error_rate": ("step", [0.5, NAN, 0.25]),
                        "test_log_loss": ("step", np.array([0.7, 0.6, NAN]))},
                       {"step": np.arange(1, 4)}, {**ATTRS, "algorithm": "laplace"}),
    "learning": ({**_fit_vars(), "hyper_run": (("hyper_eval",), np.array([0, 0, 1], np.int32)),
                  "hyper_lml": (("hyper_eval",), np.array([-3.0, -2.5, NAN])),
                  "hyper_log_lengthscale_0": (("hyper_eval",), np.zeros(3))},
                 {"step": np.arange(1, 5)}, ATTRS),
    "failure": ({}, {}, {"algorithm": "exact", "status": "failed", "summary": "{}",
                         "error": "λ must be > 0 — got -1 (σ²)", "config_hash": "ab"}),
    "no-steps": ({"seconds": ("step", np.zeros(0))}, {"step": np.arange(1, 1)}, ATTRS),
    "text": ({"stop": ("step", np.array(["tol", "", "max_basis", "ε reached"])),
              "empty": ("other", np.array(["", ""])), "seconds": ("step", np.ones(4))},
             {"step": np.arange(1, 5)}, ATTRS),
    "kinds": ({"flags": ("step", np.array([True, False, True])),
               "small": ("step", np.array([1, 2, 3], np.uint8)),
               "wide": ("step", np.array([1, 2, 3], np.int64)),
               "single": ("step", np.array([1.5, NAN, 2], np.float32)),
               "halves": ("step", np.array([1, -2, 3], np.int16)),
               "grid": (("step", "feature"), np.arange(6.0).reshape(3, 2)),
               "eval": ("eval", np.array([0.5, 0.25])), "scale": ((), np.array(2.0)),
               "score": ("score", np.array([0.1, 0.2], np.float32))},
              {"step": np.arange(1, 4)}, ATTRS),
}


def _both(tmp_path, data_vars, coords, attrs, monkeypatch):
    """The file written without xarray and the one written through xarray."""
    plain = _job_dataset(data_vars, coords, attrs)
    assert isinstance(plain, PlainDataset)
    with monkeypatch.context() as m:
        m.setattr(job_file, "plain_dataset", _refuse)
        through_xarray = _job_dataset(data_vars, coords, attrs)
    assert isinstance(through_xarray, xr.Dataset)
    paths = tmp_path / "plain.nc", tmp_path / "xarray.nc"
    _write_netcdf(plain, paths[0])
    _write_netcdf(through_xarray, paths[1])
    return paths


def _refuse(*args):
    raise NotPlain("through xarray")


def _same_files(a, b) -> None:
    assert a.read_bytes() == b.read_bytes()
    with xr.open_dataset(a, engine="scipy") as one, xr.open_dataset(b, engine="scipy") as two:
        xr.testing.assert_identical(one.load(), two.load())
    for path in (a, b):  # both verify, read as consolidation and as load_job_result read them
        read_job(path)
        load_job_result(path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_file_without_xarray_is_the_file_xarray_writes(case, tmp_path, monkeypatch):
    _same_files(*_both(tmp_path, *CASES[case], monkeypatch))


def test_a_real_fit_with_a_learning_writes_the_same_file(tmp_path, monkeypatch):
    blocks, y, X_test, y_test = make_problem()
    fit = algorithms.run("exact", blocks, y, lam=0.1, rng=0, test=(X_test, y_test))
    extra = {"hyper_run": (("hyper_eval",), np.zeros(3, np.int32)),
             "hyper_lml": (("hyper_eval",), np.array([-3.0, -2.0, -1.5]))}
    config = {"algorithm": {"name": "exact"}, "lam": 0.1}
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7))  # one run_id for both
    plain = write_job_result(fit, config, tmp_path / "a" / "result.nc", {"config_hash": "x"}, extra)
    monkeypatch.setattr(job_file, "plain_dataset", _refuse)
    other = write_job_result(fit, config, tmp_path / "b" / "result.nc", {"config_hash": "x"}, extra)
    _same_files(plain, other)
    assert load_job_attrs(plain) == load_job_result(plain).attrs
    assert load_job_attrs(plain)["config"] == config


def test_a_failure_record_is_the_same_file(tmp_path, monkeypatch):
    config = {"algorithm": {"name": "exact"}}
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7))
    plain = write_job_failure(config, "boom — σ²", tmp_path / "a" / "result.nc",
                              {"config_hash": "x"})
    monkeypatch.setattr(job_file, "plain_dataset", _refuse)
    other = write_job_failure(config, "boom — σ²", tmp_path / "b" / "result.nc",
                              {"config_hash": "x"})
    _same_files(plain, other)
    assert load_job_attrs(plain)["error"] == "boom — σ²"


@pytest.mark.parametrize("data_vars, coords, attrs", [
    ({"x": ("step", np.array([None, 1.0]))}, {}, {}),  # objects
    ({"x": (("a", "b"), np.array([["u", "v"]]))}, {}, {}),  # text over two dims
    ({"x": ("step", np.ones(2))}, {}, {"bad name": 1}),
    ({"short": ("step", np.ones(2))}, {}, {}),  # a reserved name in CDL
    ({"x": ("step", np.ones(2))}, {}, {"a": None}),
    ({"x": ("step", np.ones(2)), "y": ("step", np.ones(3))}, {}, {}),  # two sizes of a dim
    ({"x": ("step", np.ones(2)), "step": ("other", np.ones(2))}, {}, {}),
    ({"x": ("step", np.ones(2))}, {}, {"a": np.ones((2, 2))}),
    ({"x": ("step", np.array([2**40, 1]))}, {}, {}),  # int64 beyond int32
    ({"x": ("step", np.array(["2020-01-01"], "datetime64[ns]"))}, {}, {}),
    ({"x": ("step", np.ones(2), {"units": "s"})}, {}, {}),
])
def test_what_the_writer_does_not_hold_goes_through_xarray(data_vars, coords, attrs):
    with pytest.raises(NotPlain):
        plain_dataset(data_vars, coords, attrs)
