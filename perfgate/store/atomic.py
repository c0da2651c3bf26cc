"""Atomic file writes: a temp file in the target's folder, fsync, then os.replace."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from perfgate.errors import StoreError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (str, written as UTF-8; or bytes, written as they are) to ``path``
    atomically: readers see the old file or the new one, never a half-written one; on failure
    the old file is untouched. The new file gets the usual permissions (0666 minus the umask),
    not the temp file's 0600.

    A target that exists and is not a regular file (``/dev/null``, a FIFO, ``/dev/stdout``)
    is written in place, never replaced.

    Raises:
        StoreError: the folder cannot be created or the file cannot be written.
    """
    path = Path(path)
    try:
        st = os.stat(path)
        special = not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)
    except OSError:
        special = False
    if special:
        try:
            with (open(path, "wb") if isinstance(text, bytes) else open(path, "w", encoding="utf-8")) as f:
                f.write(text)
            return path
        except OSError as e:
            raise StoreError(f"cannot write: {e.strerror}", path=path) from None
    if path.is_dir():
        raise StoreError("is a directory, expected a file path", path=path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise StoreError(f"cannot write here: {e.strerror}", path=path.parent) from None
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreError(f"write failed, previous content kept: {e.strerror}", path=path) from None
    return path
