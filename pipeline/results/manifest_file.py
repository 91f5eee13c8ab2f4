"""A sweep's ``manifest.json`` as a document: written with its checksum
(:func:`pipeline.checksum.seal_json`) and checked, checksum and structure, whenever it
is read, by the sweep (:mod:`pipeline.sweep.manifest`) and by consolidation alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.checksum import DamagedFile, open_sealed_json, seal_json

# the dims of every sweep (its other swept keys come after them): here, not in
# pipeline.results.consolidate, so that planning a sweep imports no xarray
FIXED_DIMS = ("algorithm", "dataset", "lam", "kappa", "seed")

MANIFEST = "manifest.json"


def dump_manifest(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's text, with its checksum."""
    return seal_json(manifest, indent=1)


def load_manifest(path: Path, dims: tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest at ``path``, checksum and structure verified: every entry has its
    ``hash``, ``coords`` over ``dims`` and the manifest's ``extra_dims``, and ``overrides``.
    One without its checksum (written before manifests carried one, or edited) cannot be
    verified and is damaged too.

    Raises FileNotFoundError if there is none, :class:`DamagedFile` (saying what is wrong, not
    naming the file) if it is unreadable, fails its checksum or lacks what a sweep needs."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise DamagedFile(f"cannot be read ({err.strerror or err})") from None
    doc = open_sealed_json(text)
    check_structure(doc, dims)
    return doc


def check_structure(doc: Mapping[str, Any], dims: tuple[str, ...] = ()) -> None:
    """Raise :class:`DamagedFile` unless ``doc`` has what a sweep and consolidation read (the
    invocations, :mod:`pipeline.sweep.invocations`, included)."""
    extra = doc.get("extra_dims")
    if not isinstance(extra, list) or not all(isinstance(d, str) for d in extra):
        raise DamagedFile("has no list of extra_dims")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise DamagedFile("has no list of entries")
    need = set(dims) | set(extra)
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise DamagedFile(f"has an entry {i} that is not an object")
        if not isinstance(entry.get("hash"), str) or not entry["hash"]:
            raise DamagedFile(f"has an entry {i} without its hash")
        coords = entry.get("coords")
        if not isinstance(coords, Mapping) or not need <= set(coords):
            raise DamagedFile(f"has an entry {i} without its coordinates "
                              f"({', '.join(sorted(need))})")
        if not isinstance(entry.get("overrides", []), list):
            raise DamagedFile(f"has an entry {i} whose overrides are not a list")
        if not isinstance(entry.get("invocation", 0), int):
            raise DamagedFile(f"has an entry {i} whose invocation is not a number")
    if not isinstance(doc.get("sweep"), str):
        raise DamagedFile("has no sweep name")
    for key, kind in (("command", list), ("swept_keys", list),
                      ("timings", dict), ("invocations", list)):
        if key in doc and not isinstance(doc[key], kind):
            raise DamagedFile(f"has a {key} that is not a {kind.__name__}")
    for i, record in enumerate(doc.get("invocations", [])):
        if not isinstance(record, Mapping) or not isinstance(record.get("command"), list) \
                or not isinstance(record.get("timings", {}), dict):
            raise DamagedFile(f"has an invocation {i} without its command and timings")
