"""Combining sweeps (``pipeline.results.combine`` and ``python -m pipeline.export combine``):
the union of points and dims, a job held twice checked equal, its timings from the first
store, ``status`` kept text; and what ``load`` returns writes with ``to_netcdf`` and
``to_zarr``. The sweeps are built in-process: job files and a manifest written as a sweep
writes them, consolidated."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from algorithms.contract import Result
from algorithms.errors import InputError
from pipeline.results import combine, load
from pipeline.results.combined import STATUSES
from pipeline.results.consolidate import consolidate
from pipeline.results.job_file import job_path, write_job_result
from pipeline.results.manifest_file import MANIFEST, dump_manifest

CONFIG = {"algorithm": {"name": "sgma", "eps": 0.025}, "dataset": {"name": "sine1d",
          "n_train": 50}, "kernel": {"name": "rbf", "width": 10.0}, "lam": 0.1, "kappa": 5,
          "seed": 0, "cluster": {"n_workers": 1}, "threads": "auto"}


def _value(coords: dict, offset: float) -> float:
    """A job's number: a function of its point, so two sweeps holding it agree."""
    return (coords["lam"] + coords["seed"] / 10 + coords.get("kernel.width", 10.0) / 100
            + offset)


def _sweep(root: Path, name: str, points: list[dict], *, extra=(), offset: float = 0.0,
           config: dict | None = None, seconds: float = 1.0) -> Path:
    """A consolidated sweep ``name`` of the jobs at ``points`` (sgma on sine1d at κ 5 unless
    a point says otherwise): its results.zarr."""
    sweep_dir = root / "outputs" / name
    config = {**CONFIG, **(config or {}), "sweep": name}
    entries = []
    for point in points:
        coords = {"algorithm": "sgma", "dataset": "sine1d", "kappa": 5, **point}
        h = hashlib.sha256(json.dumps(coords, sort_keys=True).encode()).hexdigest()[:16]
        v = _value(coords, offset)
        trace = {k: np.array([2 * v, v]) for k in ("objective", "gap", "test_rmse",
                                                    "test_nlpd", "test_coverage_2sd")}
        trace.update(n_basis=np.array([1.0, 2.0]), seconds=np.array([seconds, 2 * seconds]))
        summary = {k: float(t[-1]) for k, t in trace.items()}
        summary.update(stop_reason="gap", jitter=0.0)
        write_job_result(Result("sgma", trace, summary), config, job_path(sweep_dir, h),
                         {"config_hash": h, "job_seconds": 3 * seconds, "worker": name})
        entries.append({"hash": h, "coords": coords, "overrides": []})
    swept = [k for k in ("lam", "seed", *extra) if len({p.get(k) for p in points}) > 1]
    manifest = {"sweep": name, "command": [], "config": config, "swept_keys": swept,
                "extra_dims": list(extra), "entries": entries, "timings": {}, "n_workers": 1}
    (sweep_dir / MANIFEST).write_bytes(dump_manifest(manifest))
    return consolidate(sweep_dir)


def _points(lams, seeds, **extra) -> list[dict]:
    return [{"lam": lam, "seed": seed, **{k: v for k, v in extra.items()}}
            for lam in lams for seed in seeds]


def _text(ds: xr.Dataset) -> None:
    """status is text of its three values, every text variable without 'nan'."""
    assert ds["status"].dtype.kind == "U"
    assert set(np.unique(ds["status"].values)) <= set(STATUSES)
    for name, var in ds.data_vars.items():
        if var.dtype.kind in "OUS":
            assert var.dtype.kind == "U" and "nan" not in set(var.values.ravel()), name


def test_disjoint_sweeps_join_on_the_union_of_their_points(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]))
    b = _sweep(tmp_path, "b", _points([0.01], [2]))
    ds = combine(a, b)
    assert ds["lam"].values.tolist() == [0.01, 0.1] and ds["seed"].values.tolist() == [0, 1, 2]
    _text(ds)
    status = ds["status"].sel(algorithm="sgma", dataset="sine1d", kappa=5)
    assert status.sel(lam=0.1).values.tolist() == ["ok", "ok", "missing"]
    assert status.sel(lam=0.01).values.tolist() == ["missing", "missing", "ok"]
    for store, lam, seed in ((a, 0.1, 1), (b, 0.01, 2)):
        point = {"algorithm": "sgma", "dataset": "sine1d", "kappa": 5, "lam": lam, "seed": seed}
        one = load(store).load()
        for name in ("final_test_rmse", "worker", "job_hash", "job_seconds"):
            assert ds[name].sel(point).item() == one[name].sel(point).item(), name
        np.testing.assert_array_equal(ds["test_rmse"].sel(point).values,
                                      one["test_rmse"].sel(point).values)
    missing = ds.sel(lam=0.01, seed=0, algorithm="sgma", dataset="sine1d", kappa=5)
    assert missing["error"].item() == "" and np.isnan(missing["final_test_rmse"].item())
    attrs = ds.sgp.attrs
    assert ds.attrs["sweep"] == "a+b" and ds.attrs["Conventions"] == "CF-1.10"
    assert [s["source"] for s in attrs["sources"]] == [str(a), str(b)]
    assert [s["sweep"] for s in attrs["sources"]] == ["a", "b"]
    assert attrs["config"]["dataset"]["n_train"] == 50 and set(attrs["swept_keys"]) == {
        "lam", "seed"}


def test_a_job_held_twice_must_agree_and_keeps_the_first_stores_timings(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]), seconds=1.0)
    b = _sweep(tmp_path, "b", _points([0.1], [1, 2]), seconds=5.0)
    point = {"algorithm": "sgma", "dataset": "sine1d", "kappa": 5, "lam": 0.1, "seed": 1}
    for stores, first in (((a, b), "a"), ((b, a), "b")):
        ds = combine(*stores)
        assert ds["seed"].values.tolist() == [0, 1, 2]
        assert (ds["status"] == "ok").all()
        shared = ds.sel(point)
        assert shared["worker"].item() == first  # where and how long: the first store's
        assert shared["job_seconds"].item() == (3.0 if first == "a" else 15.0)
        assert shared["final_test_rmse"].item() == _value(point, 0.0)
    # numbers that differ by round-off pass with an rtol that allows them
    c = load(b).load()
    c["final_test_rmse"] = c["final_test_rmse"] * (1 + 1e-9)
    assert combine(a, c, rtol=1e-6)["status"].size == 3
    with pytest.raises(InputError, match="final_test_rmse"):
        combine(a, c)


def test_a_job_with_other_numbers_is_refused_in_one_line(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]))
    b = _sweep(tmp_path, "b", _points([0.1], [1, 2]), offset=0.5)
    with pytest.raises(InputError) as err:
        combine(a, b)
    text = str(err.value)
    assert "\n" not in text and str(a) in text and str(b) in text
    assert "seed=1" in text and "lam=0.1" in text and "rtol" in text
    assert any(f" {name}: " in text for name in ("final_gap", "final_objective", "gap"))


def test_a_new_swept_key_adds_a_dimension_at_the_others_config_value(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]))
    c = _sweep(tmp_path, "c", _points([0.1], [0], **{"kernel.width": 5.0})
               + _points([0.1], [0], **{"kernel.width": 10.0}), extra=("kernel.width",))
    ds = combine(a, c)
    assert ds["kernel.width"].values.tolist() == [5.0, 10.0]
    assert ds["kernel.width"].attrs["long_name"] == "kernel width 2ω²"
    sel = ds["status"].sel(algorithm="sgma", dataset="sine1d", kappa=5, lam=0.1)
    assert sel.sel({"kernel.width": 10.0}).values.tolist() == ["ok", "ok"]  # a's, at width 10
    assert sel.sel({"kernel.width": 5.0}).values.tolist() == ["ok", "missing"]
    assert "kernel.width" in ds.sgp.attrs["swept_keys"]
    # a store whose config records no value of the dim is refused, naming it
    lost = load(a).load()
    lost.attrs["config"] = json.dumps({k: v for k, v in CONFIG.items() if k != "kernel"})
    with pytest.raises(InputError, match=r"no dimension 'kernel.width' and its config records "
                                         "no value") as err:
        combine(lost, c)
    assert "\n" not in str(err.value)


def test_sweeps_of_other_settings_are_refused_naming_the_setting(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0]))
    b = _sweep(tmp_path, "b", _points([0.1], [1]),
               config={"dataset": {"name": "sine1d", "n_train": 80},
                       "cluster": {"n_workers": 4}, "threads": 2})  # these two may differ
    with pytest.raises(InputError, match=r"dataset.n_train=50 and dataset.n_train=80"):
        combine(a, b)
    with pytest.raises(InputError, match="rtol"):
        combine(a, b, rtol=-1.0)
    with pytest.raises(InputError, match="at least one"):
        combine()


def test_results_write_with_to_netcdf_and_to_zarr(tmp_path):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]))
    ds = load(a)
    assert ds.attrs["Conventions"] == "CF-1.10" and "long_name" in ds.attrs["comment"]
    assert isinstance(ds.attrs["config"], str)  # JSON text, decoded by ds.sgp.attrs
    assert ds.sgp.attrs["config"]["kernel"]["width"] == 10.0
    assert ds.sgp.attrs["swept_keys"] == ["seed"]
    ds.to_netcdf(tmp_path / "a.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr 3's note on its string dtype
        ds.to_zarr(tmp_path / "a3.zarr")
    ds.to_zarr(tmp_path / "a2.zarr", zarr_format=2)
    for back in (xr.open_dataset(tmp_path / "a.nc"), xr.open_zarr(tmp_path / "a3.zarr"),
                 xr.open_zarr(tmp_path / "a2.zarr")):
        assert back.sgp.attrs["config"] == ds.sgp.attrs["config"]
        assert back.attrs["Conventions"] == "CF-1.10"
        np.testing.assert_array_equal(back["test_rmse"].values, ds["test_rmse"].values)
        assert back["status"].values.astype(str).tolist() == ds["status"].values.tolist()
    combined = combine(a, _sweep(tmp_path, "b", _points([0.01], [0])))
    combined.to_netcdf(tmp_path / "ab.nc")
    back = xr.open_dataset(tmp_path / "ab.nc")
    assert sorted(set(back["status"].values.astype(str).ravel())) == ["missing", "ok"]
    assert len(back.sgp.attrs["sources"]) == 2


def test_the_command_line_writes_a_verified_store_and_refuses_in_one_line(tmp_path,
                                                                            in_process):
    a = _sweep(tmp_path, "a", _points([0.1], [0, 1]))
    b = _sweep(tmp_path, "b", _points([0.1], [1, 2]))
    ran = in_process(tmp_path, "pipeline.export", "combine", str(a), str(b))
    assert ran.returncode == 0, ran.stderr
    out = tmp_path / "outputs" / "a-b" / "results.zarr"
    assert ran.stdout.splitlines()[-1] == f"results: {Path('outputs/a-b/results.zarr')}"
    assert "3 sweep points (3 ok, 0 failed, 0 missing)" in ran.stdout
    ds = load(out)  # verified: content hashes recorded
    assert ds.attrs["sweep"] == "a-b" and ds["seed"].values.tolist() == [0, 1, 2]
    before = sorted(p.name for p in out.rglob("*"))
    bad = {
        "exists": [str(a), str(b)],
        "does not exist": [str(a), str(tmp_path / "outputs" / "nope" / "results.zarr")],
        "unknown format": [str(a), str(b), "--out", "outputs/x.csv"],
        "one store": [str(a)],
        "invalid float value": [str(a), str(b), "--rtol", "abc"],
    }
    for what, args in bad.items():
        ran = in_process(tmp_path, "pipeline.export", "combine", *args)
        assert ran.returncode == 2 and ran.stderr.startswith("error: "), (what, ran)
        assert what in ran.stderr, (what, ran)
        assert ran.stderr.count("\n") == 1 and not ran.stdout, what
    assert sorted(p.name for p in out.rglob("*")) == before  # never overwritten
    other = _sweep(tmp_path, "c", _points([0.1], [1]), offset=1.0)
    ran = in_process(tmp_path, "pipeline.export", "combine", str(a), str(other), "--out",
                     "outputs/ac.zarr")
    assert ran.returncode == 2 and "hold the same job" in ran.stderr and ran.stderr.count("\n") == 1
    assert not (tmp_path / "outputs" / "ac.zarr").exists()
