"""Checksums written with the files a sweep trusts, verified when they are read.

A job's ``result.nc`` carries the sha256 of its payload (every variable, coordinates included,
and every global attr but the checksum itself) as attr :data:`PAYLOAD_DIGEST`
(:func:`payload_digest`); JSON bookkeeping files (a sweep's ``manifest.json``, the cached
learned hyperparameters) carry the sha256 of the rest of the document as key
:data:`JSON_DIGEST` (:func:`seal_json`, :func:`open_sealed_json`). A file that fails its
checksum is never served: the sweep refits the job (or rebuilds the file) with a ``note:``
naming it.

Only numpy, hashlib and json here: a sweep checks thousands of result files, and a job's start
imports no xarray.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

PAYLOAD_DIGEST = "payload_sha256"  # result.nc attr: sha256 of the rest of the file
JSON_DIGEST = "sha256"  # key of a sealed JSON document: sha256 of the rest of it


class DamagedFile(ValueError):
    """A file that fails its checksum, or lacks it, or is not the document it should be; the
    message says what (the caller names the file)."""


def _canonical(value: Any) -> Any:
    """An attr value as JSON the same before it is written and after it is read back (netCDF
    stores ints as int32 and strings as bytes; numpy scalars come back)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    array = np.asarray(value)
    if array.dtype.kind in "iubf":
        values = [float(v) for v in array.ravel().tolist()]
        return [repr(v) for v in values] if array.ndim else repr(values[0])
    return [str(v) for v in array.ravel().tolist()] if array.ndim else str(value)


def _hash_array(h, values) -> None:
    values = np.asarray(values)
    h.update(json.dumps(list(values.shape)).encode())
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), np.nan, values)  # one NaN bit pattern
        h.update(b"f8" + np.ascontiguousarray(values, dtype="<f8").tobytes())
    elif values.dtype.kind in "iub":
        h.update(b"i8" + np.ascontiguousarray(values, dtype="<i8").tobytes())
    else:
        h.update(b"str" + json.dumps([str(v) for v in values.ravel().tolist()]).encode())


def payload_digest(variables: Iterable[tuple[str, tuple[str, ...], Any]],
                   attrs: Mapping[str, Any]) -> str:
    """sha256 of a result file's payload: every ``(name, dims, values)`` of ``variables``
    (coordinates included) and every attr but :data:`PAYLOAD_DIGEST`, canonically serialised
    (floats as little-endian float64 with one NaN, integers as int64, text as UTF-8 JSON), so
    that the in-memory Dataset and the file read back give the same digest."""
    h = hashlib.sha256()
    body = {k: _canonical(v) for k, v in attrs.items() if k != PAYLOAD_DIGEST}
    h.update(json.dumps(body, sort_keys=True, ensure_ascii=False).encode())
    for name, dims, values in sorted(variables, key=lambda item: item[0]):
        h.update(json.dumps([name, list(dims)]).encode())
        _hash_array(h, values)
    return h.hexdigest()


def check_payload(variables: Iterable[tuple[str, tuple[str, ...], Any]],
                  attrs: Mapping[str, Any]) -> None:
    """Raise :class:`DamagedFile` unless ``attrs`` carry the digest of this payload."""
    recorded = attrs.get(PAYLOAD_DIGEST)
    if recorded is None:
        raise DamagedFile(f"has no {PAYLOAD_DIGEST} (written before result files carried "
                          "checksums, or edited)")
    if isinstance(recorded, bytes):
        recorded = recorded.decode("utf-8", "replace")
    if payload_digest(variables, attrs) != recorded:
        raise DamagedFile(f"fails its checksum ({PAYLOAD_DIGEST}: a value or an attr was "
                          "changed after it was written)")


def _json_digest(doc: Mapping[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != JSON_DIGEST}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def seal_json(doc: Mapping[str, Any], **dump_options: Any) -> bytes:
    """``doc`` as JSON text with its sha256 under :data:`JSON_DIGEST`."""
    doc = json.loads(json.dumps(dict(doc), default=str))  # what a reader will see
    doc[JSON_DIGEST] = _json_digest(doc)
    return json.dumps(doc, sort_keys=True, **dump_options).encode()


def open_sealed_json(text: bytes | str, *, legacy: bool = False) -> dict[str, Any]:
    """The document :func:`seal_json` wrote (its digest key removed); raises
    :class:`DamagedFile` for text that is not JSON, not an object, or fails its digest. With
    ``legacy`` a document without a digest (written before they were) is returned as it is."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:
        raise DamagedFile(f"is not JSON ({type(err).__name__})") from None
    if not isinstance(doc, dict):
        raise DamagedFile(f"is not a JSON object (a {type(doc).__name__})")
    recorded = doc.pop(JSON_DIGEST, None)
    if recorded is None:
        if legacy:
            return doc
        raise DamagedFile(f"has no {JSON_DIGEST} key (its checksum)")
    if recorded != _json_digest(doc):
        raise DamagedFile("fails its checksum (its content was changed after it was written)")
    return doc
