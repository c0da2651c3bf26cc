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


_STREAM_PREFIXES = ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/")
_STREAMS = ("/dev/stdout", "/dev/stderr", "/dev/stdin")


def is_stream(path) -> bool:
    """``path`` names one of this process's open streams (``/dev/stdout``, ``/dev/stderr``,
    ``/dev/fd/N``, ``/proc/self/fd/N``): written in place, never replaced, whatever it is
    redirected to (a file, a pipe, a terminal)."""
    s = os.path.abspath(str(path))
    return s in _STREAMS or s.startswith(_STREAM_PREFIXES)


def _target(path: Path) -> tuple[Path, bool]:
    """``(where to write, in place?)``: a stream or an existing non-regular file (``/dev/null``, a
    FIFO) is written in place; a symbolic link to a regular file or to nothing yet is resolved, so
    its target is replaced atomically and the link itself stays a link."""
    if is_stream(path):
        return path, True
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            return path, True
    except OSError:
        pass
    if os.path.islink(path):
        return Path(os.path.realpath(path)), False
    return path, False


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest parent that exists (``file/sub`` does not exist: ENOTDIR)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def unwritable_reason(path, *, folder: bool = False) -> str | None:
    """Why a file (``folder=False``) or folder could not be written at ``path``, judged before any
    work: the path is a folder where a file is wanted (or the reverse), the nearest existing
    parent is a regular file, or that parent folder is not writable; a stream or special file
    (``/dev/stdout``, a FIFO) that this user cannot open for writing; a path too long to name
    anything (:func:`perfgate.errors.path_too_long`). ``None`` when it can be."""
    from perfgate.errors import path_too_long
    too_long = path_too_long(path)
    if too_long:
        return too_long
    path = Path(path)
    if not folder:
        path, in_place = _target(path)
        if in_place:
            return None if os.access(path, os.W_OK) else f"{path} is not writable"
    if path.exists():
        if folder and not path.is_dir():
            return f"{path} is a file, not a folder"
        if not folder and path.is_dir():
            return f"{path} is a folder, not a file"
    anc = nearest_existing(path.parent if not path.exists() or not folder else path)
    if not anc.is_dir():
        return f"{anc} is a file, not a folder"
    if not os.access(anc, os.W_OK | os.X_OK):
        return f"folder {anc} is not writable"
    return None


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (str, written as UTF-8; or bytes, written as they are) to ``path``
    atomically: readers see the old file or the new one, never a half-written one; on failure
    the old file is untouched, and on any exception (also KeyboardInterrupt and the CLI's
    SIGTERM exception mid-write) the temp file is removed. The new file gets the usual permissions (0666 minus the umask),
    not the temp file's 0600.

    A stream of this process (``/dev/stdout``, ``/dev/fd/1``, ...: :func:`is_stream`) or a target
    that exists and is not a regular file (``/dev/null``, a FIFO) is written in place, never
    replaced. A symbolic link is followed: its target is replaced atomically and the link stays
    (before, the link itself was replaced by a regular file: as root, ``--output /dev/stdout``
    turned the machine's /dev/stdout into a file).

    Raises:
        StoreError: the folder cannot be created or the file cannot be written.
        BrokenPipeError: a stream whose reader went away (``| head``): the caller's exit code
            stands, as for its own stdout.
    """
    given = Path(path)
    path, in_place = _target(given)
    if in_place:
        try:
            with (open(path, "wb") if isinstance(text, bytes) else open(path, "w", encoding="utf-8")) as f:
                f.write(text)
            return given
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StoreError(f"cannot write: {e.strerror}", path=given) from None
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
        _sweep_stale(path)
    except OSError as e:
        _remove(tmp)
        raise StoreError(f"write failed, previous content kept: {e.strerror}", path=path) from None
    except BaseException:
        # Ctrl-C or the CLI's SIGTERM exception mid-write: no hidden .tmp left in the baseline
        # store or the reports folder (it would pile up in a cached or uploaded folder)
        _remove(tmp)
        raise
    return given


#: a temp file of :func:`write_atomic` older than this was left by a killed writer (kill -9, power
#: loss: no handler runs); a live writer's is seconds old
STALE_TMP_S = 3600


def _sweep_stale(path: Path) -> None:
    """Remove the temp files (``.<name>.XXXX.tmp``) of earlier writes of ``path`` that a killed
    writer left (older than :data:`STALE_TMP_S`): nothing else removes them, and they would stay
    in the baseline store for good. Best effort; a concurrent writer's young temp file is left alone."""
    import glob
    import time
    now = time.time()
    try:
        for t in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            try:
                st = os.lstat(t)
                if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TMP_S:
                    os.unlink(t)
            except OSError:
                pass
    except OSError:
        pass


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def discard_stale(path) -> bool:
    """Remove the document an earlier run left at ``path``, before a run that will write one there
    reads anything: a run that is refused (exit 3 at ingest), fails or is killed then leaves no
    earlier document where CI would take it for this run's (an ``if: always()`` upload). Only the
    file the path names is removed, as :func:`write_atomic` would replace it: a regular file, or
    through a symbolic link the link's target (the link stays, and the next write recreates the
    target). A stream (``/dev/stdout``), another non-regular file (``/dev/null``, a FIFO), a folder
    and a missing path are left as they are; a file that cannot be removed too (the write then
    reports it). Returns True when a file was removed."""
    target, in_place = _target(Path(path))
    if in_place:
        return False
    try:
        if stat.S_ISREG(os.lstat(target).st_mode):
            os.unlink(target)
            return True
    except OSError:
        pass
    return False
