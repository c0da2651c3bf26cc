"""Host memory settings for one perfgate run: numpy's transparent-huge-page hint, and the
allocator behind Arrow's buffers (:func:`arrow_jemalloc`).

numpy marks every allocation of 4 MiB or more with ``madvise(MADV_HUGEPAGE)`` on Linux. When the
kernel's ``/sys/kernel/mm/transparent_hugepage/defrag`` is ``madvise`` or ``defer+madvise`` (the
Ubuntu default), the first touch of such a region may stall in synchronous reclaim / compaction
instead of falling back to 4 KiB pages (numpy issue #31590; Go hit the same, golang/go#61718).
A 1M-row check allocates several hundred MB of such arrays once each, so it pays that stall rather
than gaining from fewer TLB misses. Measured on this project's 2-core VM (kernel 6.18, defrag ``madvise``):
``perfgate check`` of a 1M-row pair took 7.6-8.7 s wall with the hint and 5.7-6.3 s without it
(3 alternating pairs; system time 2.3-3.2 s → 0.9-1.3 s), see ``docs/performance.md``.

:func:`small_pages` turns the hint off for the duration of a command when, and only when, the
kernel says madvised regions are compacted synchronously; an explicit ``NUMPY_MADVISE_HUGEPAGE``
in the environment is the user's choice and is never overridden. Results do not depend on it.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
ENV = "NUMPY_MADVISE_HUGEPAGE"  # read by numpy once, at import (numpy/__init__.py hugepage_setup)
_STALLING = ("madvise", "defer+madvise")  # modes that compact synchronously on a madvised fault


def defrag_mode(path: Path = DEFRAG) -> str | None:
    """The selected THP defrag mode (the bracketed word of ``path``), or None where the file is
    absent or unreadable (not Linux, a container without /sys)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def hint_stalls(path: Path = DEFRAG) -> bool:
    """True when numpy's MADV_HUGEPAGE hint can stall a first touch on this kernel."""
    return defrag_mode(path) in _STALLING


def _numpy_flag():
    try:
        from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
    return _get_madvise_hugepage, _set_madvise_hugepage


@contextlib.contextmanager
def small_pages(path: Path = DEFRAG):
    """Run the block with numpy's huge-page hint off where :func:`hint_stalls`, then restore it.

    Sets ``NUMPY_MADVISE_HUGEPAGE=0`` (inherited by spawned worker processes) unless the user set
    it (an empty value counts as unset: numpy's import would fail on it); if numpy is already
    imported (an embedding process, CliRunner) its flag is switched too and switched back on exit
    (a numpy first imported inside the block keeps the hint off: a CLI process ends with the
    command). Does nothing where the kernel does not stall or the user chose. Yields whether the
    hint was turned off.
    """
    given = os.environ.get(ENV)
    if given is not None and given.strip():       # the user's choice
        yield False
        return
    stalls = hint_stalls(path)
    if not stalls and given is None:
        yield False
        return
    # an empty value (an unset CI variable passed through) would make numpy's import fail on int(''):
    # it is replaced for the command, by "0" where the hint stalls, else by numpy's own default
    if stalls:
        os.environ[ENV] = "0"
    else:
        del os.environ[ENV]
    restore = _numpy_flag()[1](False) if stalls and "numpy" in sys.modules else None  # setter returns the old value
    try:
        yield stalls
    finally:
        _restore_env(ENV, given)
        if restore is not None:
            _numpy_flag()[1](bool(restore))


def _restore_env(name: str, given: str | None) -> None:
    """Put environment variable ``name`` back as it was (``given``; None = unset)."""
    if given is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = given


ARROW_ENV = "ARROW_DEFAULT_MEMORY_POOL"  # read by Arrow C++ once, when its default pool is first used


@contextlib.contextmanager
def arrow_jemalloc():
    """Run the block with Arrow's buffers allocated by jemalloc instead of pyarrow's default on
    Linux (mimalloc), then restore the previous pool.

    Why: the kernel table is parsed by Arrow's multithreaded CSV reader, whose buffers a fresh
    process faults in for the first time. Measured on this project's 2-core VM (pyarrow 26,
    alternating pairs of fresh processes): ``perfgate fingerprint --trace never`` took
    6.16 → 5.07 s at 1M rows and 15.96 → 13.12 s at 3M (3 pairs each, medians; CPU −12 to
    −15 %, peak RSS 739 → 706 and 1,749 → 1,698 MiB); ``check`` of the 1M pair with
    ``--workers 1`` 8.24 → 7.36 s (5 pairs). See docs/performance.md.

    Does nothing when the user set ``ARROW_DEFAULT_MEMORY_POOL`` (their choice), when pyarrow
    is not installed, or when this pyarrow build has no jemalloc (``NotImplementedError``:
    e.g. Windows wheels). Otherwise sets ``pyarrow.set_memory_pool`` for this process and
    ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` for processes it spawns (only once jemalloc is known
    to exist, so Arrow never warns about an unknown backend). Yields whether it switched.
    Results do not depend on the allocator.
    """
    if os.environ.get(ARROW_ENV, "").strip():
        yield False
        return
    try:
        import pyarrow as pa
        pool = pa.jemalloc_memory_pool()
    except (ImportError, NotImplementedError):
        yield False
        return
    given = os.environ.get(ARROW_ENV)
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    os.environ[ARROW_ENV] = "jemalloc"
    try:
        yield True
    finally:
        _restore_env(ARROW_ENV, given)
        pa.set_memory_pool(previous)
