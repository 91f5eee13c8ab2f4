"""What a results store holds that consolidation did not write.

``results.zarr`` is replaced whole by each consolidation (the previous copy renamed aside and
removed), so anything else inside it (another sweep's directory, a user's file) would be
removed with it. :func:`foreign_entry` finds such a thing, so that the sweep and the
consolidation refuse to run instead.
"""

from __future__ import annotations

import os
from pathlib import Path

ARRAY_OR_GROUP = (".zarray", ".zgroup", "zarr.json")  # what marks a zarr array or group


def foreign_entry(store: str | os.PathLike) -> Path | None:
    """The first path inside the zarr store ``store`` that consolidation does not write
    there: a symlink, or a directory that is no zarr array or group (another sweep's
    directory, a user's folder). None when there is none, or no store. A store that is itself
    a symlink is foreign: its target is never read or removed."""
    store = Path(store)
    if store.is_symlink():
        return store
    if not store.is_dir():
        return None
    for top, dirs, files in os.walk(store):
        for name in sorted(dirs + files):
            if (Path(top) / name).is_symlink():
                return Path(top) / name
        if Path(top) != store and not any(marker in files for marker in ARRAY_OR_GROUP):
            return Path(top)
    return None
