"""A job's ``result.nc`` written with scipy's netCDF3 writer directly, as xarray writes it.

``xr.Dataset(data_vars, coords=coords, attrs=attrs).to_netcdf(path, engine="scipy")`` costs a
tiny job more CPU than its fit: importing xarray (and pandas) is ~0.4 s, and xarray's first
variable asks which duck-array libraries there are, which imports ``dask.array`` (~1 s).
:func:`plain_dataset` holds what that Dataset would hold (its variables in its order, a variable
named as its one dim being a coordinate) for the datasets a job writes: numbers, booleans and
text over named dims, attrs of text and numbers. :func:`write_netcdf3` writes it with the calls
xarray's scipy backend makes (the same CF encoding: NaN ``_FillValue`` of floats, int64 stored
as int32, booleans as int8 with ``dtype: bool``, text as UTF-8 characters over a
``string<n>`` dim), so the file is the one xarray writes, byte for byte (tests/test_netcdf3.py
compares them). Anything else raises :class:`NotPlain`, and the caller goes through xarray.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # names any netCDF3 writer takes as they are
_RESERVED = {"byte", "char", "short", "ushort", "int", "uint", "int64", "uint64", "float",
             "real", "double", "bool", "string"}
_STORED = {"int64": "int32", "uint64": "int32", "uint32": "int32", "uint16": "int16",
           "uint8": "int8"}  # netCDF3 has no such integers: xarray stores them as these
_VALUES = ("float32", "float64", "int8", "int16", "int32", *_STORED, "bool")
_COORDINATES = ("float32", "float64", "int32", "int64")  # as xarray's pandas index keeps them


class NotPlain(ValueError):
    """A dataset this writer leaves to xarray (the message says why)."""


@dataclass
class PlainVariable:
    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict = field(default_factory=dict)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype


@dataclass
class PlainDataset:
    """The variables (in xarray's order) and attrs of a Dataset, without xarray; read as a
    Dataset is by :func:`pipeline.results.variables.describe_dataset` and the checksum."""

    variables: dict[str, PlainVariable]
    attrs: dict

    def __contains__(self, name: str) -> bool:
        return name in self.variables

    def __getitem__(self, name: str) -> PlainVariable:
        return self.variables[name]


def _name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
        raise NotPlain(f"name {name!r}")
    return name


def _attr(value):
    """An attr value as xarray's netCDF3 encoding stores it (text as UTF-8 bytes, numbers as
    a 1-d array of a netCDF3 type)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    try:
        array = np.atleast_1d(value)
    except Exception:  # e.g. an int too large for any numpy integer
        raise NotPlain(f"attr value {value!r}") from None
    if array.ndim != 1 or array.dtype.name not in _VALUES:
        raise NotPlain(f"attr value {value!r}")
    return _stored(array)


def _stored(array: np.ndarray) -> np.ndarray:
    """``array`` in the netCDF3 type xarray stores it as (bool as int8, int64 as int32, …)."""
    name = "int8" if array.dtype == bool else _STORED.get(array.dtype.name)
    if name is None:
        return array
    cast = array.astype(name)
    if not (cast == array).all():  # xarray refuses these: let it say so
        raise NotPlain(f"{array.dtype} values that {name} does not hold")
    return cast


def plain_dataset(data_vars: Mapping, coords: Mapping, attrs: Mapping) -> PlainDataset:
    """What ``xr.Dataset(data_vars, coords=coords, attrs=attrs)`` holds (``data_vars``: name
    -> (dims, values); ``coords``: name -> values over the dim of that name), or
    :class:`NotPlain` where xarray would do more than this module does (or refuse)."""
    variables: dict[str, PlainVariable] = {}
    for name, item in data_vars.items():
        if not isinstance(item, tuple) or len(item) != 2:
            raise NotPlain(f"variable {name!r} is not (dims, values)")
        dims = (item[0],) if isinstance(item[0], str) else tuple(item[0])
        variables[_name(name)] = PlainVariable(dims, np.asarray(item[1]))
    for name, values in coords.items():
        if name in variables:
            raise NotPlain(f"coordinate {name!r} is a data variable too")
        variables[_name(name)] = PlainVariable((name,), np.asarray(values))
    sizes: dict[str, int] = {}
    for name, var in variables.items():
        if len(var.dims) != var.values.ndim or len(set(var.dims)) != len(var.dims):
            raise NotPlain(f"variable {name!r} has dims {var.dims} for shape {var.values.shape}")
        for dim, size in zip(var.dims, var.values.shape, strict=True):
            if sizes.setdefault(_name(dim), size) != size:
                raise NotPlain(f"dim {dim!r} has two sizes")
    for name, var in variables.items():
        kind = var.dtype.name if var.dtype.kind != "U" else "text"
        if name in sizes and (var.dims != (name,) or kind not in _COORDINATES):
            raise NotPlain(f"coordinate {name!r}: {var.dims}, {var.dtype}")
        if kind not in (*_VALUES, "text") or (kind == "text" and var.values.ndim != 1):
            raise NotPlain(f"variable {name!r} of {var.dtype}")
        _stored(var.values)
    for key, value in attrs.items():
        _name(key), _attr(value)
    return PlainDataset(variables, dict(attrs))


def _encoded(name: str, var: PlainVariable) -> tuple[tuple[str, ...], np.ndarray, dict]:
    """(dims, stored values, attrs) of a variable as xarray's CF and netCDF3 encoding make
    them: a NaN ``_FillValue`` for floats, ``dtype: bool`` for booleans, UTF-8 characters
    over a ``string<n>`` dim and ``_Encoding`` for text."""
    dims, values, attrs = var.dims, var.values, dict(var.attrs)
    if values.dtype.kind == "f":
        attrs["_FillValue"] = values.dtype.type(np.nan)
    elif values.dtype == bool:
        attrs["dtype"] = "bool"
    elif values.dtype.kind == "U":
        attrs["_Encoding"] = "utf-8"
        encoded = np.array([text.encode("utf-8") for text in values.ravel()], dtype=bytes)
        values = np.ascontiguousarray(encoded.reshape(values.shape))
        values = values.reshape(values.shape + (1,)).view("S1")
        dims = (*dims, f"string{values.shape[-1]}")
    return dims, _stored(values), {_name(k): _attr(v) for k, v in attrs.items()}


def write_netcdf3(ds: PlainDataset, path: str | os.PathLike) -> None:
    """Write ``ds`` to the new file ``path`` as xarray's scipy backend does (netCDF3 64-bit
    offset; attrs, then dims in the order the variables first use them, then the
    variables)."""
    from scipy.io import netcdf_file

    encoded = {name: _encoded(name, var) for name, var in ds.variables.items()}
    sizes: dict[str, int] = {}
    for dims, values, _ in encoded.values():
        sizes.update(zip(dims, values.shape, strict=True))
    nc = netcdf_file(os.fspath(path), mode="w", mmap=None, version=2)
    try:
        for key, value in ds.attrs.items():
            setattr(nc, _name(key), _attr(value))
        for dim, size in sizes.items():
            nc.createDimension(dim, size)
        for name, (dims, values, attrs) in encoded.items():
            nc.createVariable(name, values.dtype, list(dims))
            target = nc.variables[name]
            for key, value in attrs.items():
                setattr(target, key, value)
            try:
                target[...] = values
            except TypeError:  # as xarray does (scipy/scipy#6880)
                target[:] = values
    finally:
        nc.close()
