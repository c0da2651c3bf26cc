"""Atomic file writes: a temp file in the target's folder, fsync, then os.replace."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from perfgate.errors import StoreError


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: readers see the old file or the new
    one, never a half-written one; on failure the old file is untouched.

    Raises:
        StoreError: the folder cannot be created or the file cannot be written.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise StoreError(f"cannot write here: {e.strerror}", path=path.parent) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreError(f"write failed, previous content kept: {e.strerror}", path=path) from None
    return path
