"""pipeline.results.compare: two sweeps' numbers compared variable by variable."""

import numpy as np
import pytest
import xarray as xr

from algorithms.errors import InputError
from pipeline.results.compare import compare, main


def _results(rmse, seconds):
    return xr.Dataset({"final_test_rmse": (("seed",), np.array(rmse)),
                       "final_seconds": (("seed",), np.array(seconds)),
                       "status": (("seed",), np.array(["ok", "ok"]))},
                      coords={"seed": [0, 1]})


def test_equal_numbers_compare_equal_whatever_the_timings():
    diffs = compare(_results([0.5, np.nan], [1.0, 2.0]), _results([0.5, np.nan], [9.0, 9.0]))
    assert diffs == {"final_test_rmse": 0.0, "seed": 0.0, "status": 0.0}


def test_a_changed_number_is_its_relative_difference():
    diffs = compare(_results([0.5, 1.0], [1, 1]), _results([0.5, 1.0 + 1e-9], [1, 1]))
    assert diffs["final_test_rmse"] == pytest.approx(1e-9, rel=1e-6)
    assert compare(_results([0.5, 1.0], [1, 1]),
                   _results([0.5, np.nan], [1, 1]))["final_test_rmse"] == np.inf


def test_an_infinity_equals_itself_and_differs_from_a_number():
    """inf against inf is equal (no NaN from inf − inf); inf against a number or −inf is an
    infinite difference, never a NaN that a maximum would hide."""
    both = _results([np.inf, 1.0], [1, 1])
    assert compare(both, both)["final_test_rmse"] == 0.0
    for other in ([1.0, 1.0], [-np.inf, 1.0]):
        assert compare(both, _results(other, [1, 1]))["final_test_rmse"] == np.inf


def test_other_sweeps_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(InputError, match="other dims"):
        compare(_results([0.5, 1.0], [1, 1]), _results([0.5, 1.0], [1, 1]).isel(seed=[0]))
    assert main([str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
