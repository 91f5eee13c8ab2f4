"""A small dataset store read without zarr: importing zarr is ~0.2 s of CPU, as much as a
small job's fit and more than reading its store.

A store :func:`pipeline.datasets.store.ingest` writes is zarr format 3 with xarray's
encoding: each array float64, row-chunked (one chunk up to 4 Mi values), each chunk its
little-endian bytes compressed by zstd. :func:`read_small` reads such a store whose every
array is one chunk, decompressing with the system's libzstd through ctypes, and gives up
(None) at anything else (another layout or codec, a missing or undecodable chunk, no libzstd):
the caller then reads the store through zarr, which reads it as it always did and reports
what is wrong with it in its own words. What it reads is what zarr reads: the same JSON
attributes, the same values (a verified read hashes them against the store's sha256).
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CODECS = [{"name": "bytes", "configuration": {"endian": "little"}},
          {"name": "zstd", "configuration": {"level": 0, "checksum": False}}]
_LIBZSTD = ("libzstd.1.dylib",) if sys.platform == "darwin" else ("libzstd.so.1",)
_zstd: list[Any] = []  # the loaded library (None where there is none), once a process


def _decompress() -> Any:
    """libzstd's ``ZSTD_decompress``, or None."""
    if not _zstd:
        lib = None
        for name in _LIBZSTD:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        fn = getattr(lib, "ZSTD_decompress", None)
        if fn is not None:
            fn.restype = ctypes.c_size_t
            fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
        _zstd.append(fn)
    return _zstd[0]


def read_small(path: Path, names: Sequence[str]
               ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, tuple]] | None:
    """(attrs, arrays, dimension names) of the store at ``path`` when it is a zarr v3 group
    whose arrays ``names`` are each float64 in one chunk of bytes + zstd; else None."""
    decompress = _decompress()
    if decompress is None:
        return None
    try:
        group = json.loads((path / "zarr.json").read_bytes())
        if group.get("zarr_format") != 3 or group.get("node_type") != "group":
            return None
        attrs = group.get("attributes", {})
        arrays, dims = {}, {}
        for name in names:
            meta = json.loads((path / name / "zarr.json").read_bytes())
            shape = tuple(meta["shape"])
            if not (meta.get("zarr_format") == 3 and meta.get("node_type") == "array"
                    and meta.get("data_type") == "float64" and meta.get("codecs") == CODECS
                    and not meta.get("storage_transformers")
                    and meta.get("chunk_grid") == {"name": "regular", "configuration": {
                        "chunk_shape": list(shape)}}
                    and meta.get("chunk_key_encoding") == {"name": "default",
                                                           "configuration": {"separator": "/"}}
                    and shape and all(isinstance(s, int) and s > 0 for s in shape)
                    and isinstance(meta.get("dimension_names"), list)):
                return None
            raw = (path / name / "c" / "/".join("0" * len(shape))).read_bytes()
            out = np.empty(shape, dtype="<f8")
            if decompress(out.ctypes.data, out.nbytes, raw, len(raw)) != out.nbytes:
                return None
            arrays[name] = out.astype(np.float64, copy=False)
            dims[name] = tuple(meta["dimension_names"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(attrs, dict):
        return None
    return attrs, arrays, dims
