"""Trend history: a SQLite database of recorded runs and their metric values (sqlite-utils).

Schema (version 1, migrated forward by :data:`MIGRATIONS`; the version lives in ``meta``)::

    runs(id, branch, commit_sha, recorded_at, ci_run_id, note, status, series_key, world_size,
         profiler_level, aic_metrics, cann_version, torch_npu_version, source, provenance, config)
    metric_values(run_id, key, name, view, value, unit, caliber, tier, set_value)

Concurrency (case C04): WAL journal, ``busy_timeout``, one short ``BEGIN IMMEDIATE``
transaction per record with bounded retries on "database is locked"; readers open the file
read-only. A writer waiting for another process's lock says so (``on_wait``; the CLI prints it
on stderr) at each retry ("waiting for the history database lock held by another process (attempt k/N)") and gives up
after :data:`LOCK_WAIT_S` seconds in all (default 60 s; ``$PERFGATE_HISTORY_LOCK_WAIT`` seconds
overrides it): a store error, exit 5. A full disk (SQLite's "database or disk is full") is named
as such, never blamed on a lock. A WAL database in a folder this process cannot write (a
read-only mount) cannot get its ``-shm`` file; a read then opens it with ``immutable=1`` when its
``-wal`` holds nothing, else it is a store error saying it cannot be opened (not "damaged"). A record is all-or-nothing: a killed writer leaves no half-recorded run.
Invalid captures never get metric values; with a tuning-journal note they are kept as a run
with status ``invalid`` and no values.

Series: a run's series is :func:`series_id`: the stored ``series_key`` (a hash of
:data:`SERIES_FACETS`: rank count, CANN / torch_npu versions, aic_metrics, Type / Accelerator Core
availability, plus the profiler collection options that change what is measured when they are
not torch_npu's defaults, e.g. with_stack=true: :func:`series_key`) and the ``profiler_level`` column. Runs of another ``series_key`` are never
compared. The profiler level splits trends and sparklines, and each rolling-baseline pool holds
one level (:meth:`HistoryStore.rolling_baseline`): Level1 and Level2 write the same kernel rows,
but a Level2 run costs the job more profiling overhead, so pooling them would read the
configuration change as noise, which is why repeated captures of one side refuse mixed levels
(:mod:`perfgate.metrics.repeat`) and calibrate's runs too. A candidate of another level than the
pool is still judged, with a note, as against a stored baseline of another level. The level is
read from its own column, recorded since schema 1, so a database recorded before this split needs
no migration.

Order: every read (runs, series, rolling baseline, trends) is in commit order
(:mod:`perfgate.history.order`: ancestry from git in ``repo``, else the commit time stored at
record time), not record order; runs without a commit keep their place in record order. A
commit time after the commit's first recording (a wrong clock) is not used: that commit is
ordered by when it was recorded, and :meth:`HistoryStore.order_warnings` says so.
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import os
import random
import re
import sqlite3
import time
import weakref
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.compare.stats import robust_sigma
from perfgate.history.order import commit_order, in_commit_order
from perfgate.errors import NoBaselineError, StoreError, StoreUnopenableError, UsageError
from perfgate.metrics import registry
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, parse_metric_key

SCHEMA_VERSION = 1
# What the stored series_key hashes: anything that changes what the gate measures. The profiler
# level splits a series too, but from its own column (series_id), not in this hash: the keys of
# runs recorded before it split a series stay valid (Level0's Type / Accelerator Core N/A is also
# in type_available / core_available).
SERIES_FACETS = ("world_size", "cann_version", "torch_npu_version", "aic_metrics", "type_available",
                 "core_available")
STATUSES = ("kept", "reverted", "invalid")


def _file_uri(path) -> str:
    """``path`` as a percent-encoded ``file:`` URI for ``sqlite3.connect(..., uri=True)``: a ``#``,
    ``?`` or ``%`` in a folder name stays part of the path (``f"file:{path}"`` cut it there)."""
    return Path(path).absolute().as_uri()


def _v1(db: "sqlite_utils.Database") -> None:
    db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db["runs"].create({
        "id": int, "branch": str, "commit_sha": str, "recorded_at": str, "ci_run_id": str, "note": str,
        "status": str, "series_key": str, "world_size": int, "profiler_level": str, "aic_metrics": str,
        "cann_version": str, "torch_npu_version": str, "source": str, "provenance": str, "config": str,
    }, pk="id", if_not_exists=True)
    db["metric_values"].create({
        "run_id": int, "key": str, "name": str, "view": str, "value": float, "unit": str, "caliber": str,
        "tier": int, "set_value": str,
    }, pk=("run_id", "key"), foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db["runs"].create_index(["branch", "recorded_at"], if_not_exists=True)
    db["metric_values"].create_index(["key"], if_not_exists=True)


MIGRATIONS = {1: _v1}


def _other_workload_runs(vals: pd.DataFrame, ids: list, cand: Fingerprint | None = None) -> dict:
    """{run id: reason} for the runs among ``ids`` (newest first) whose kernel families are not
    the workload of ``cand`` (the candidate; None: the newest run)
    (:func:`perfgate.metrics.workload.other_workload` on their ``share.family`` values): the
    series key holds no notion of the model, and a CNN recorded on a branch of transformer runs
    would make a ``history:BRANCH`` baseline of transformer medians with the CNN's Top-N set."""
    from perfgate.metrics.workload import other_workload
    fam = vals[vals["key"].str.startswith("share.family{")]
    if fam.empty or (len(ids) < 2 and cand is None):
        return {}

    def fp_of(run_id):
        rows = fam[fam["run_id"] == run_id]
        ms = {}
        for key, v in zip(rows["key"], rows["value"]):
            name, labels = parse_metric_key(key)
            ms[key] = MetricValue(key=key, name=name, labels=labels, value=float(v), unit="ratio", caliber=None,
                                  tier=2, evidence="", context={})
        return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="history", provenance={}, config={},
                           metrics=ms)
    ref, ref_name = (cand, "candidate") if cand is not None else (fp_of(ids[0]), f"newest run {ids[0]}")
    out = {}
    for i in (ids if cand is not None else ids[1:]):
        why = other_workload(ref, fp_of(i), names=(ref_name, f"run {i}"))
        if why:
            out[i] = why
    return out


def _rank_set(ranks) -> tuple | None:
    """Rank ids (a fingerprint config's ``ranks``) as a sorted tuple; None when absent or not a
    list of integers."""
    try:
        return tuple(sorted(int(r) for r in ranks)) if ranks is not None else None
    except (TypeError, ValueError):
        return None


def _ranks_of(config_json) -> tuple | None:
    """:func:`_rank_set` of a stored run's ``config`` (JSON text); None when it is not readable
    (the pool's later checks name a damaged row)."""
    try:
        return _rank_set(json.loads(config_json).get("ranks"))
    except (TypeError, ValueError, AttributeError):
        return None


def series_key(config: dict) -> str:
    """The stored ``runs.series_key``: 12 hex of sha256 over rank count, CANN / torch_npu
    versions, aic_metrics and Type / Accelerator Core availability (``SERIES_FACETS``), and the
    profiler collection options that change what is measured when they are away from torch_npu's
    defaults (``collection``: :func:`perfgate.metrics.collection.series_signature`, e.g.
    ``["with_stack=true"]``). Options at their defaults, not recorded, or a run recorded before
    perfgate read them add nothing, so the keys stored before stay valid. One part of a run's
    series; :func:`series_id` adds the profiler level."""
    from perfgate.metrics.collection import series_signature
    facets = {k: config.get(k) for k in SERIES_FACETS}
    signature = series_signature(config)
    if signature:
        facets["collection"] = signature
    blob = json.dumps(facets, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def series_id(config: dict) -> str:
    """The series a run of ``config`` belongs to: ``<series_key>/<profiler_level>``
    (``e58e0af2769d/Level1``), or the series_key alone when the level is unknown (raw msprof,
    a DB export). Runs are compared, pooled (rolling baseline, noise band) and trended only
    within one series; :data:`_SERIES_SQL` computes the same from the stored columns."""
    level = config.get("profiler_level")
    return series_key(config) + (f"/{level}" if level is not None else "")


# series_id of a stored run, from its columns (NULL for a tuning-journal run without values)
_SERIES_SQL = "{p}series_key || coalesce('/' || {p}profiler_level, '')"


def _provenance_digest(provenance) -> str | None:
    """The ``metrics_digest`` a run's stored provenance (JSON text) records, or None."""
    try:
        d = json.loads(provenance) if isinstance(provenance, str) else provenance
    except ValueError:
        return None
    return d.get("metrics_digest") if isinstance(d, dict) else None


def metrics_digest(fp: Fingerprint) -> str:
    """Content identity of a fingerprint: sha256 (first 16 hex) over every metric key and value.

    Two recordings of the same capture files give the same digest; two profiling runs of one
    commit practically never do (timings differ in the last nanosecond).
    """
    blob = json.dumps({k: m.value for k, m in fp.metrics.items()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def clean_commit(value) -> str | None:
    """A recorded commit as text, or None when the run has none.

    A run recorded outside git without ``--commit`` has no commit: it is stored as SQL NULL.
    pandas reads NULL in a text column that also holds strings as float NaN, and older code
    could leave an empty string; both (and the text ``nan`` a NaN turns into once formatted)
    mean "no commit" here, so callers never slice a float.
    """
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value.lower() != "nan" else None


NO_COMMIT = "(no commit)"  # how a run without a commit is displayed


def _clean_commits(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``commit`` column as str or None (never NaN), see :func:`clean_commit`."""
    if "commit" in df.columns:
        df["commit"] = pd.Series([clean_commit(c) for c in df["commit"]], index=df.index, dtype=object)
    return df


def require_db_path(path) -> Path:
    """``path`` as a Path, refused when it names a directory (an existing folder can never be
    the history database file). Used for ``--db`` / ``--history`` / ``$PERFGATE_HISTORY`` alike.

    Raises:
        StoreUnopenableError: ``path`` is a directory (a StoreError, exit 5, the path named in
            the message).
    """
    from perfgate.errors import path_too_long
    too_long = path_too_long(path)
    if too_long:
        raise StoreUnopenableError(f"the history database cannot exist there: {too_long}", path=path,
                                   hint="give a shorter --db path")
    path = Path(path)
    if path.is_dir():
        raise StoreUnopenableError("the history database path is a directory, not a file", path=path,
                                   hint="give the database file, e.g. --db DIR/perfgate-history.sqlite")
    return path


_SINCE_FORMS = "use Nh, Nd or Nw (e.g. 12h, 30d, 2w) or an ISO date (2026-01-31, 2026-01-31T12:00)"


def parse_since(text: str | None) -> str | None:
    """``30d`` / ``12h`` / ``2w`` / an ISO date -> ISO timestamp lower bound (UTC).

    Raises:
        UsageError: any other text (``yesterday``) or a span reaching before year 1 (exit 2,
            naming the accepted forms)."""
    if not text:
        return None
    units = {"h": "hours", "d": "days", "w": "weeks"}
    if text[-1:] in units and text[:-1].isdigit():
        try:
            delta = _dt.timedelta(**{units[text[-1]]: int(text[:-1])})
            return (_dt.datetime.now(_dt.timezone.utc) - delta).isoformat(timespec="seconds")
        except OverflowError:
            raise UsageError(f"--since {text!r} reaches before year 1; {_SINCE_FORMS}") from None
    try:
        return _dt.datetime.fromisoformat(text).isoformat(timespec="seconds")
    except ValueError:
        raise UsageError(f"--since {text!r}: {_SINCE_FORMS}") from None


#: the characters of a commit SHA or ref name as perfgate records it (besides letters and digits)
COMMIT_PUNCTUATION = "._/@+-"
_COMMIT_RE = re.compile(r"[0-9A-Za-z" + re.escape(COMMIT_PUNCTUATION) + r"]{1,200}")


def require_commit(commit, what: str = "--commit") -> str | None:
    """A commit as recorded (None: none given): a SHA or a ref name of at most 200 characters
    from ``0-9 A-Z a-z . _ / @ + -``. A newline, ``|`` or other character no SHA or ref name
    needs would break the one-line rows of ``history trend`` / ``report`` / ``journal``.

    Raises:
        UsageError: another value (exit 2), shown escaped."""
    if commit is None:
        return None
    if not _COMMIT_RE.fullmatch(str(commit)):
        shown = str(commit)[:60].encode("unicode_escape").decode("ascii")
        raise UsageError(f"{what} {shown!r}: not a commit SHA or ref name (1-200 characters of 0-9, A-Z, a-z "
                         f"and . _ / @ + -)", hint="pass the commit SHA, e.g. $GITHUB_SHA")
    return str(commit)


def require_branch(branch, what: str = "--branch") -> str:
    """A branch name as recorded and as ``history:BRANCH`` reads it: not empty, not blank, no
    surrounding whitespace and no control character (git refuses all of them in a ref name; a
    run recorded under such a name could never be a ``history:`` baseline).

    Raises:
        UsageError: the name breaks one of those rules (exit 2)."""
    if branch is None or not str(branch).strip():
        raise UsageError(f"{what}: the branch name is empty", hint="give a branch, e.g. main")
    if str(branch) != str(branch).strip():
        raise UsageError(f"{what} {branch!r}: the branch name has surrounding whitespace")
    if any(ord(c) < 32 or ord(c) == 127 for c in str(branch)):
        raise UsageError(f"{what} {branch!r} holds a control character (a branch name never does)")
    return str(branch)


LOCK_WAIT_S = 60.0   # default total wait for another process's lock, per write (seconds)
_FULL = "database or disk is full"


def _lock_wait_s() -> float:
    """Total seconds a write waits for another process's lock: ``$PERFGATE_HISTORY_LOCK_WAIT``
    (a number of seconds >= 0), else :data:`LOCK_WAIT_S`."""
    raw = os.environ.get("PERFGATE_HISTORY_LOCK_WAIT")
    if raw:
        try:
            v = float(raw)
            if math.isfinite(v) and v >= 0:
                return v
        except ValueError:
            pass
        raise UsageError(f"PERFGATE_HISTORY_LOCK_WAIT={raw!r}: give a number of seconds >= 0")
    return LOCK_WAIT_S


def _is_locked(e: Exception) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def _cannot_open(e: Exception) -> bool:
    """SQLite could not open the file or its side files: not a damaged database."""
    msg = str(e).lower()
    return "unable to open" in msg or "readonly" in msg or "read-only" in msg


def _folder_writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _reading(method):
    """A read of the database: SQLite's "database disk image is malformed" (a page the query
    reaches is damaged), raised by sqlite3 or through pandas, becomes the store's damaged-database
    error (:meth:`HistoryStore._damaged`, exit 5) instead of an internal error."""
    @functools.wraps(method)
    def read(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:
            # pandas wraps SQLite's error in "Execution failed on sql '<the query>': ..."
            raise self._damaged(e.__cause__ if isinstance(e.__cause__, sqlite3.Error) else e) from None
    return read


class HistoryStore:
    """The history database at ``path``.

    Args:
        path: SQLite file (created on first write; a writer open that fails, e.g. SQLITE_FULL,
            removes the file it created while that holds nothing, never an existing one).
        repo: git checkout whose ancestry orders the runs' commits (default: the working folder;
            commits it does not hold fall back to the stored commit times).
        readonly: open with ``mode=ro`` (comparisons and queries); a missing file is then
            a :class:`StoreError`.
        busy_timeout_ms / retries: how long one statement waits for a lock (at most
            ``lock_wait_s / (retries + 1)``), and how many times a locked write transaction is
            retried (with jittered backoff).
        lock_wait_s: total seconds one write waits for another process's lock (default
            ``$PERFGATE_HISTORY_LOCK_WAIT`` or :data:`LOCK_WAIT_S` = 60 s); then StoreError.
        on_wait: called with one line ("waiting for the history database lock held by another
            process (attempt k/N, ...)") before each retry; default: nothing.
    """

    def __init__(self, path, *, readonly: bool = False, busy_timeout_ms: int = 5000, retries: int = 11,
                 repo=None, lock_wait_s: float | None = None, on_wait=None):
        self.path = require_db_path(path)
        self.readonly = readonly
        self.retries = retries
        self.lock_wait_s = _lock_wait_s() if lock_wait_s is None else float(lock_wait_s)
        # one attempt's SQLite busy wait: the total wait shared over the attempts (5 s by default)
        self.busy_timeout_ms = int(min(busy_timeout_ms, self.lock_wait_s * 1000 / (retries + 1)))
        self.on_wait = on_wait or (lambda line: None)   # the CLI passes a stderr line writer
        busy_timeout_ms = self.busy_timeout_ms
        self.repo = repo  # git checkout for commit ancestry (None = the working folder)
        self._keys = None
        self._wrong_clocks: dict = {}
        conn = None
        try:
            if readonly:
                if not self.path.is_file():
                    raise StoreError("no history database here", path=self.path,
                                     hint="record runs first: perfgate history record CAPTURE --branch main")
                absent = not any(Path(f"{self.path}{x}").exists() for x in _SIDE_FILES)
                conn = self._open_reader(busy_timeout_ms / 1000)
                # a read leaves the folder as it was: the -wal / -shm a read-only open of a WAL
                # database creates are removed when this store closes or is collected (_close_reader)
                self._closer = weakref.finalize(self, _close_reader, conn, self.path, absent)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # what this open creates, removed again should the open fail (_discard_created)
                created = [f for f in (self.path, *(Path(f"{self.path}{x}") for x in (*_SIDE_FILES, "-journal")))
                           if not f.exists()]
                conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=busy_timeout_ms / 1000)
                conn.execute(f"pragma busy_timeout = {int(busy_timeout_ms)}")
                self.conn = conn
                self._refuse_foreign()   # before WAL mode rewrites another application's file header
                self._retry(lambda: conn.execute("pragma journal_mode = wal"))
                conn.execute("pragma synchronous = normal")
        except sqlite3.DatabaseError as e:
            if not readonly:
                if conn is not None:
                    conn.close()
                _discard_created(self.path, created)
            if readonly or _cannot_open(e) or _FULL in str(e).lower():
                raise self._damaged(e) from None
            raise StoreError(f"cannot open history database: {e}", path=self.path) from None
        except OSError as e:  # e.g. a parent path component is a regular file
            raise StoreError(f"cannot create the history database's folder: {e.strerror or e}",
                             path=self.path) from None
        self.conn = conn
        import sqlite_utils   # here, not at module level: check imports this module for metrics_digest
        self.db = sqlite_utils.Database(conn)
        try:
            if not readonly:
                self._migrate()
            else:
                self._check_version()
        except sqlite3.DatabaseError as e:  # a file that is not (or no longer) a SQLite database
            conn.close()
            if not readonly:
                _discard_created(self.path, created)
            raise self._damaged(e) from None

    def _open_reader(self, timeout: float):
        """A read-only connection (``mode=ro``), probed with one read. When SQLite cannot open it
        ("unable to open database file": a WAL database whose ``-shm`` cannot be created in a
        folder this process cannot write, a read-only mount) and the folder is not writable and
        the ``-wal`` holds nothing, the file is opened again with ``immutable=1`` (nothing can
        change it meanwhile: nobody can write there). Other errors go to the caller."""
        uri = f"{_file_uri(self.path)}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout)
            conn.execute("select count(*) from sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError as e:
            if not _cannot_open(e):
                raise
            first = e
        wal = Path(f"{self.path}-wal")
        try:
            wal_empty = not wal.exists() or wal.stat().st_size == 0
        except OSError:
            wal_empty = False
        if not _folder_writable(self.path.parent) and wal_empty:
            try:
                conn = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None, timeout=timeout)
                conn.execute("select count(*) from sqlite_master").fetchone()
                return conn
            except sqlite3.OperationalError:
                pass
        raise first

    def _damaged(self, e: Exception) -> StoreError:
        """The error for a database SQLite cannot use, a store error (exit 5): a file that is not
        (or no longer) SQLite is "damaged"; a file SQLite cannot open (permissions, a read-only
        location without the WAL's ``-shm`` / ``-wal``) or a full disk is said as such."""
        msg = str(e)
        if _FULL in msg.lower():
            return StoreError(f"history database: {_FULL} (SQLITE_FULL)", path=self.path,
                              hint="free space on the database's filesystem (and its -wal file's); "
                                   "nothing was written")
        if _cannot_open(e):
            return StoreUnopenableError(f"cannot open the history database: {msg}", path=self.path,
                              hint="check the file's and folder's permissions; on a read-only location a WAL "
                                   "database needs its -shm / -wal files present or a writable folder "
                                   "(perfgate reads it with immutable=1 only when its -wal is empty)")
        return StoreError(f"history database is damaged: {msg}", path=self.path,
                          hint="restore it from where it is kept (cache, artifact) or start a new one")

    def require_intact(self) -> None:
        """Before a write: SQLite's ``pragma quick_check`` over the whole file (linear in its size,
        ~0.1 s per 50 MB), once per store object. A database damaged where the next write or the
        duplicate lookup would not look (e.g. bytes overwritten in another table's pages) still
        opens and answers some queries; writing on would bury the damage under new runs.

        Raises:
            StoreError: the database is damaged (exit 5), naming SQLite's first complaint."""
        if getattr(self, "_intact", False):
            return
        try:
            rows = self.conn.execute("pragma quick_check").fetchall()
        except sqlite3.DatabaseError as e:
            raise self._damaged(Exception(f"SQLite quick_check: {e}")) from None
        if [tuple(r) for r in rows] != [("ok",)]:
            said = [x.strip() for r in rows for x in str(r[0]).splitlines() if x.strip() and not x.startswith("***")]
            raise self._damaged(Exception(f"SQLite quick_check: {said[0] if said else rows[0][0]}"
                                          + (f" (+{len(said) - 1} more)" if len(said) > 1 else "")))
        self._intact = True

    # -- schema ---------------------------------------------------------------------------
    def _refuse_foreign(self) -> None:
        """Raise StoreError (exit 5) when the file is another application's SQLite database: it
        holds tables and none of perfgate's (no ``meta`` schema version, no ``runs``)."""
        names = [r[0] for r in self.conn.execute("select name from sqlite_master where type = 'table'")]
        others = [t for t in names if not t.startswith("sqlite_")]
        if others and "meta" not in others and "runs" not in others:
            raise StoreError(f"not a perfgate history database: it holds other tables "
                             f"({', '.join(sorted(others)[:5])}) and no perfgate schema", path=self.path,
                             hint="give perfgate a database file of its own (--db)")

    def _version(self) -> int:
        if "meta" not in self.db.table_names():
            return 0
        row = self.conn.execute("select value from meta where key='schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _check_version(self):
        v = self._version()
        if v != SCHEMA_VERSION:
            if v == 0:
                self._refuse_foreign()   # another application's database: never written into
            if v > SCHEMA_VERSION:
                raise StoreError(f"history schema version {v} is newer than this perfgate ({SCHEMA_VERSION})",
                                 path=self.path, hint="read it with the perfgate version that wrote it, or a newer one")
            raise StoreError(f"history schema version {v} is not {SCHEMA_VERSION}; open it once for writing "
                             f"with this perfgate to migrate", path=self.path)

    def _migrate(self):
        def run():
            self.conn.execute("begin immediate")
            try:
                v = self._version()
                if v > SCHEMA_VERSION:
                    raise StoreError(f"history schema version {v} is newer than this perfgate ({SCHEMA_VERSION})",
                                     path=self.path)
                for target in range(v + 1, SCHEMA_VERSION + 1):
                    MIGRATIONS[target](self.db)
                    self.db["meta"].upsert({"key": "schema_version", "value": str(target)}, pk="key")
                self.conn.execute("commit")
            except BaseException:
                self._rollback()
                raise
        self._retry(run)

    # -- writes ---------------------------------------------------------------------------
    def _rollback(self) -> None:
        """Roll back the open transaction, if SQLite has not already done so (it does on
        SQLITE_FULL, for one): a failing rollback never hides the error that caused it."""
        try:
            if self.conn.in_transaction:
                self.conn.execute("rollback")
        except sqlite3.Error:
            pass

    def _retry(self, fn):
        """Run the write ``fn``; on "database is locked" retry (jittered backoff) up to
        ``retries`` times and at most ``lock_wait_s`` seconds in all, saying on stderr
        (``on_wait``) at each retry that it waits for another process's lock.

        Raises:
            StoreError: still locked after the retries / the wait (exit 5); a full disk
                ("database or disk is full") or another SQLite failure, named as it is."""
        n = self.retries + 1
        deadline = time.monotonic() + self.lock_wait_s
        t0 = time.monotonic()
        for attempt in range(1, n + 1):
            left = deadline - time.monotonic()
            try:
                self.conn.execute(f"pragma busy_timeout = {int(max(0.0, min(self.busy_timeout_ms / 1000, left)) * 1000)}")
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_locked(e):
                    raise   # the caller names it: a full disk, a damaged or unopenable file
                left = deadline - time.monotonic()
                if attempt == n or left <= 0:
                    raise StoreError(f"history database is locked by another process: gave up after "
                                     f"{time.monotonic() - t0:.0f} s and {attempt} attempt(s), nothing recorded",
                                     path=self.path,
                                     hint="use per-job result files merged by one job, or allow a longer wait with "
                                          "PERFGATE_HISTORY_LOCK_WAIT=SECONDS") from None
                self.on_wait(f"waiting for the history database lock held by another process "
                             f"(attempt {attempt + 1}/{n}, at most {self.lock_wait_s:g} s in all)")
                time.sleep(min(left, min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + random.random())))

    def record(self, fp: Fingerprint | None, *, branch: str, commit: str | None = None, note: str | None = None,
               status: str = "kept", ci_run_id: str | None = None, recorded_at: str | None = None,
               error: str | None = None) -> int:
        """Record one run (fingerprint and all its metric values) in one transaction.

        ``fp`` None with status ``invalid`` records a tuning-journal entry without values.

        Raises:
            StoreError: bad status, locked beyond the retries, a metric not of its kind
                (:func:`perfgate.metrics.registry.check_stored`, as a history baseline checks its
                rows), or any write failure (nothing of the run is left behind).
        """
        if self.readonly:
            raise StoreError("history opened read-only", path=self.path)
        self.require_intact()
        if status not in STATUSES:
            raise StoreError(f"status must be one of {STATUSES}, got {status!r}")
        if fp is None and status != "invalid":
            raise StoreError("only an invalid run may be recorded without a fingerprint")
        cfg = fp.config if fp else {}
        prov = dict(fp.provenance) if fp else {}
        if error:
            prov["error"] = error
        if fp is not None:
            prov["metrics_digest"] = metrics_digest(fp)
        run = {
            "branch": branch, "commit_sha": clean_commit(commit) or clean_commit(prov.get("commit")),
            "recorded_at": recorded_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds"),
            "ci_run_id": ci_run_id or prov.get("ci_run_id"), "note": note, "status": status,
            "series_key": series_key(cfg) if fp else None, "world_size": cfg.get("world_size"),
            "profiler_level": cfg.get("profiler_level"), "aic_metrics": cfg.get("aic_metrics"),
            "cann_version": cfg.get("cann_version"), "torch_npu_version": cfg.get("torch_npu_version"),
            "source": prov.get("source"), "provenance": json.dumps(prov, sort_keys=True),
            "config": json.dumps(cfg, sort_keys=True),
        }
        values = []
        if fp is not None:
            for key, m in fp.metrics.items():
                try:   # never record a value a history baseline would call damaged (_check_rows)
                    registry.check_stored(key, m)
                except (TypeError, ValueError) as e:
                    raise StoreError(f"fingerprint {e}: nothing recorded", path=self.path,
                                     hint="a value no capture can hold (a negative time or count, a share "
                                          "outside 0..1); report it with the capture") from None
                is_set = isinstance(m.value, list)
                values.append({"key": key, "name": m.name, "view": m.labels.get("view"),
                               "value": None if is_set else float(m.value), "unit": m.unit, "caliber": m.caliber,
                               "tier": m.tier, "set_value": json.dumps(m.value) if is_set else None})

        def write():
            self.conn.execute("begin immediate")
            try:
                run_id = self.db["runs"].insert(run).last_pk
                for v in values:
                    v["run_id"] = run_id
                self.db["metric_values"].insert_all(values, batch_size=2000)
                self.conn.execute("commit")
                return run_id
            except BaseException:
                self._rollback()
                raise
        try:
            return self._retry(write)
        except sqlite3.DatabaseError as e:
            if _FULL in str(e).lower() or _cannot_open(e):
                raise self._damaged(e) from None
            raise StoreError(f"history write failed, nothing recorded: {e}", path=self.path) from None

    # -- reads ----------------------------------------------------------------------------
    @_reading
    def commit_keys(self) -> dict:
        """``{commit: sort key}`` of every recorded commit (:func:`perfgate.history.order.commit_keys`),
        computed once per store."""
        if self._keys is None:
            times: dict = {}
            recorded = []
            for c, t, r in self.conn.execute("select commit_sha, json_extract(provenance, '$.commit_time'), "
                                             "recorded_at from runs order by recorded_at, id"):
                c = clean_commit(c)
                if c:
                    times[c] = times.get(c) or t
                    recorded.append((c, r))
            self._keys, self._wrong_clocks = commit_order(times, self.repo, recorded)
        return self._keys

    def order_warnings(self) -> list[str]:
        """One line per commit whose stored committer time lies after its first recording (a
        wrong clock, :func:`perfgate.history.order.wrong_clocks`), when commit times order the
        runs: that commit is ordered by when it was recorded instead. Empty when ancestry
        orders them."""
        self.commit_keys()
        return [f"commit {c[:12]}: committer date {t} is after its first run was recorded ({r}); a wrong "
                f"clock: ordered by when it was recorded (after the commit recorded before it), not by that date"
                for c, (t, r) in sorted(self._wrong_clocks.items(), key=lambda x: x[1][1])]

    def _ordered(self, df: pd.DataFrame) -> pd.DataFrame:
        return in_commit_order(df, self.commit_keys()) if len(df) > 1 else df

    @_reading
    def same_capture(self, fp: Fingerprint, branch: str) -> int | None:
        """Id of the newest run on ``branch`` with the same :func:`metrics_digest`, or None."""
        row = self.conn.execute(
            "select id from runs where branch = ? and json_extract(provenance, '$.metrics_digest') = ? "
            "order by id desc limit 1", (branch, metrics_digest(fp))).fetchone()
        return row[0] if row else None

    @staticmethod
    def _filters(branch, since, prefix="", where=None, args=None):
        """SQL conditions for the optional branch / since filters on ``runs``."""
        where, args = list(where or []), list(args or [])
        if branch:
            where.append(f"{prefix}branch = ?")
            args.append(branch)
        if since:
            where.append(f"{prefix}recorded_at >= ?")
            args.append(parse_since(since))
        return where, args

    @_reading
    def runs(self, branch: str | None = None, since: str | None = None, limit: int | None = None) -> pd.DataFrame:
        """Runs, oldest commit first (see the module docstring): id, branch, commit, recorded_at,
        status, note, series_key, ranks (the number of rank folders the run's capture held: the
        ``world_size`` column, which is not the job's world size when a subset of ranks was
        profiled), ..."""
        where, args = self._filters(branch, since)
        sql = ("select id, branch, commit_sha as \"commit\", recorded_at, status, note, series_key, world_size as ranks, profiler_level, "
               "cann_version, torch_npu_version, ci_run_id, source from runs")
        if where:
            sql += " where " + " and ".join(where)
        sql += " order by recorded_at, id"
        df = self._ordered(_clean_commits(pd.read_sql_query(sql, self.conn, params=args)))
        return df.tail(limit) if limit else df

    @_reading
    def series(self, key: str, branch: str | None = None, since: str | None = None, *,
               with_set: bool = False) -> pd.DataFrame:
        """One metric in commit order (see the module docstring): run_id, recorded_at, commit (str or None), status, note,
        series_key (the run's :func:`series_id`: stored key and profiler level), value (float; NaN for a set metric such as ``kernel.topn``), and with
        ``with_set`` also set_value (the JSON list of a set metric, None for numbers).

        A p50 key (``step.time_us{view=p50}``) is read for a run of several pipeline stages, which
        records no pooled p50, as its job-level value (:func:`perfgate.metrics.stages.job_p50`: the
        largest stage p50); the frame then has a ``view`` column saying where each value came
        from (``p50``, ``stage1.p50``). Runs of one stage read exactly their recorded p50."""
        where, args = self._filters(branch, since, "r.", ["v.key = ?"], [key])
        df = pd.read_sql_query(self._SERIES_SELECT + " and ".join(where) + " order by r.recorded_at, r.id",
                               self.conn, params=args)
        df = self._with_stage_p50(df, key, branch, since)
        df = self._ordered(_clean_commits(df))
        df["value"] = self._numeric_values(df, key)
        return df if with_set else df.drop(columns="set_value")

    _SERIES_SELECT = ("select r.id as run_id, r.recorded_at, r.commit_sha as \"commit\", r.status, r.note, "
                      + _SERIES_SQL.format(p="r.") + " as series_key, v.value, v.set_value, v.key"
                      + " from metric_values v join runs r on r.id = v.run_id where ")

    def _with_stage_p50(self, df: pd.DataFrame, key: str, branch, since) -> pd.DataFrame:
        """``df`` (the rows of ``key``) with, for a p50 key, one row per run that lacks it but records
        that metric's stage p50s: the job-level value (:func:`perfgate.metrics.stages.job_p50`), its
        view in a ``view`` column. ``df`` without its ``key`` column when there is none."""
        from perfgate.metrics.stages import job_p50, pooled_p50_key
        got = pooled_p50_key(key)
        if got is None or got[1] != "p50":
            return df.drop(columns="key")
        where, args = self._filters(branch, since, "r.", ["v.name = ?", "v.view like 'stage%.p50'"],
                                    [parse_metric_key(key)[0]])
        staged = pd.read_sql_query(self._SERIES_SELECT + " and ".join(where) + " order by r.recorded_at, r.id",
                                   self.conn, params=args)
        staged = staged[~staged["run_id"].isin(df["run_id"])]
        staged = staged[[(pooled_p50_key(k) or (None,))[0] == key for k in staged["key"]]]
        if staged.empty:
            return df.drop(columns="key")
        rows = []
        for _, g in staged.groupby("run_id", sort=False):
            views = [pooled_p50_key(k)[1] for k in g["key"]]
            job = job_p50(dict(zip(views, pd.to_numeric(g["value"], errors="coerce"))))
            if job is not None:
                rows.append(dict(g.iloc[0], value=job.value, view=job.view))
        df = df.assign(view="p50")
        out = pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True) if rows else df
        return out.sort_values(["recorded_at", "run_id"], kind="stable").drop(columns="key").reset_index(drop=True)

    def has_key(self, key: str) -> bool:
        """Whether ``key`` was recorded, or can be read (:meth:`series`) as the job-level p50 of a run
        of several pipeline stages."""
        from perfgate.metrics.stages import pooled_p50_key
        keys = self.keys(key.split("{")[0])
        return key in keys or any((pooled_p50_key(k) or (None,))[0] == key for k in keys)

    def _numeric_values(self, df: pd.DataFrame, key: str) -> pd.Series:
        """``df["value"]`` as float64 (NULL -> NaN), where each row holds a finite number, or NULL
        beside a ``set_value`` (a set metric), as :meth:`record` writes them.

        Raises:
            StoreError: a damaged row (text or NULL where a number belongs, a non-finite number;
                exit 5, as :meth:`_check_rows` says it), naming its run, commit and the metric."""
        raw = df["value"]
        values = pd.to_numeric(raw, errors="coerce").astype(np.float64)
        written = raw.notna().to_numpy()
        bad = (written & ~np.isfinite(values.to_numpy())) | (~written & df["set_value"].isna().to_numpy())
        if bad.any():
            i = int(np.argmax(bad))
            r = df.iloc[i]
            shown = "NULL" if not written[i] else repr(raw.iloc[i])[:40]
            raise self._damaged(ValueError(f"run {r['run_id']} (commit {r['commit'] or 'none'}): metric {key!r} "
                                           f"has value {shown}, not a number"))
        return values

    @_reading
    def keys(self, prefix: str | None = None) -> list[str]:
        """Distinct recorded metric keys (optionally those starting with ``prefix``), sorted."""
        sql = "select distinct key from metric_values"
        args = []
        if prefix:
            sql += " where key like ?"
            args.append(prefix + "%")
        return [r[0] for r in self.conn.execute(sql + " order by key", args)]

    def rolling_baseline(self, branch: str, cand_config: dict, *, window: int, min_runs: int,
                         band_k: float, cand: Fingerprint | None = None) -> tuple[Fingerprint, dict]:
        """Baseline = per-metric median of the last ``window`` kept runs (newest commits, see the
        module docstring) of ``branch`` with the candidate's ``series_key`` and one profiler level
        (:func:`series_id`): the candidate's level when it has at least ``min_runs`` runs, else the
        level of the newest run among the levels that have (then :func:`perfgate.compare.rules.config_notes` says the level changed, as
        for a stored baseline), plus a noise band per metric = ``band_k`` x 1.4826 x MAD (robust
        sigma) of those runs, in the metric's unit.

        Returns ``(fingerprint, noise)``. Raises :class:`NoBaselineError` when fewer than
        ``min_runs`` runs qualify (the message says how many and why), StoreError when the
        database file is damaged (truncated, not SQLite) or a row the baseline is built from is
        (a metric value, unit, tier, caliber, name or view not of its kind, as in a baseline file:
        :meth:`_check_rows`, naming run and metric).
        """
        from pandas import errors as pd_errors
        try:
            return self._rolling_baseline(branch, cand_config, window=window, min_runs=min_runs, band_k=band_k,
                                          cand=cand)
        except (sqlite3.DatabaseError, pd_errors.DatabaseError) as e:
            raise self._damaged(e) from None

    def _rolling_baseline(self, branch: str, cand_config: dict, *, window: int, min_runs: int,
                          band_k: float, cand: Fingerprint | None = None) -> tuple[Fingerprint, dict]:
        sk = series_key(cand_config)
        runs = pd.read_sql_query(
            "select id, commit_sha as \"commit\", recorded_at, series_key, " + _SERIES_SQL.format(p="")
            + " as series, config, provenance from runs where branch = ? and "
            "status = 'kept' order by recorded_at, id", self.conn, params=[branch])
        runs = self._ordered(_clean_commits(runs)).iloc[::-1].reset_index(drop=True)  # newest commit first
        # the candidate itself, already recorded (the same metrics digest): never part of its own
        # baseline, where it would pull the median toward itself (a regression recorded, then
        # checked, would pass)
        own_runs: list = []
        if cand is not None and len(runs):
            digest = metrics_digest(cand)
            mine = runs["provenance"].map(lambda p: _provenance_digest(p) == digest).astype(bool)
            own_runs = sorted(int(i) for i in runs["id"][mine])
            runs = runs[~mine].reset_index(drop=True)
        in_key = runs[runs["series_key"] == sk]
        # one rank set per pool: the series key hashes the rank count, so runs that profiled other
        # ranks (ranks 0,1 against 0,3: another pipeline stage) share it; a stored baseline of other
        # rank ids is refused (exit 4), so they are left out here, with a note
        want = _rank_set(cand_config.get("ranks"))
        other_ranks: dict = {}
        if want is not None:
            got = in_key["config"].map(_ranks_of)
            off = got.map(lambda r: r is not None and r != want).astype(bool)
            other_ranks = {int(i): list(r) for i, r in zip(in_key["id"][off], got[off])}
            in_key = in_key[~off]
        # one profiler level per pool (its median and noise band): the candidate's when it has enough
        # runs, else the level of the newest run among those that have enough; a level that differs from
        # the candidate's is a note, as between a stored baseline and a candidate (config_notes)
        counts = in_key["series"].value_counts()
        own = series_id(cand_config)
        enough = [x for x in pd.unique(in_key["series"]) if counts[x] >= min_runs]   # newest first
        pick = own if own in enough or not enough else enough[0]
        same = in_key[in_key["series"] == pick].head(window)
        if len(same) < min_runs:
            other = len(runs) - len(same) - len(other_ranks)
            why = (f" ({other} other run(s) of {branch!r} are from another series or profiler level: "
                   f"profiler level or aic_metrics, a collection option such as with_stack, CANN / torch_npu "
                   f"version, rank count or Type / Accelerator Core availability changed)" if other else "")
            if other_ranks:
                sets = sorted({tuple(r) for r in other_ranks.values()})
                why += (f" ({len(other_ranks)} run(s) of this series profiled other ranks than the candidate's "
                        f"{list(want)}: {', '.join(str(list(x)) for x in sets[:3])})")
            raise NoBaselineError(f"history:{branch} has {len(same)} kept run(s) in this series, "
                                  f"{min_runs} needed{why}", path=self.path)
        ids = [int(i) for i in same["id"]]
        q = ",".join("?" * len(ids))
        vals = pd.read_sql_query(f"select * from metric_values where run_id in ({q})", self.conn, params=ids)
        self._check_rows(vals, dict(zip(ids, same["commit"])))
        other = _other_workload_runs(vals, ids, cand)
        if other:   # one workload per pool: the candidate's (else the newest run's)
            keep = [i for i in ids if i not in other]
            if len(keep) < min_runs:
                raise NoBaselineError(
                    f"history:{branch} has {len(keep)} kept run(s) of the {'candidate' if cand is not None else 'newest run'}'s "
                    f"workload in this series, "
                    f"{min_runs} needed: run(s) {sorted(other)} are another workload ({other[min(other)]})",
                    path=self.path, hint="record runs of one model per branch and series, or check against a "
                                         "stored baseline")
            same = same[same["id"].isin(keep)]
            ids = keep
            vals = vals[vals["run_id"].isin(keep)]
        latest = ids[0]
        metrics, noise = {}, {}
        for key, g in vals.groupby("key"):
            if len(g) * 2 < len(ids):
                continue  # present in fewer than half of the runs: not part of the baseline
            ref = g[g["run_id"] == latest].iloc[0] if (g["run_id"] == latest).any() else g.iloc[0]
            name, labels = parse_metric_key(key)
            if pd.notna(ref["set_value"]):
                value = json.loads(ref["set_value"])
                ctx = {"ranked": value + [], "n": len(value), "slack": 0}
            else:
                arr = g["value"].astype(float).to_numpy()
                value = float(np.median(arr))
                noise[key] = band_k * robust_sigma(arr)
                ctx = {"runs": len(arr)}
            metrics[key] = MetricValue(key=key, name=name, labels=labels, value=value, unit=ref["unit"],
                                       caliber=ref["caliber"], tier=int(ref["tier"]),
                                       evidence=f"history:{branch} median of {len(g)} run(s)", context=ctx)
        try:
            cfg = json.loads(same.iloc[0]["config"])
            prov_steps = json.loads(same.iloc[0]["provenance"]).get("steps", {})
            if not isinstance(cfg, dict):
                raise ValueError(f"config is {cfg!r}, not an object")
        except (TypeError, ValueError, AttributeError) as e:
            raise self._damaged(ValueError(f"run {latest}: config / provenance is not a JSON object ({e})")) from None
        prov = {"source": f"history:{branch}", "runs": ids, "commits": list(same["commit"]),  # None = no commit
                "other_workload_runs": sorted(other),
                "other_rank_runs": sorted(other_ranks),
                "candidate_runs": own_runs,
                "ranks": cfg.get("ranks"),
                "window": window, "series_key": sk, "series": same.iloc[0]["series"], "db": str(self.path),
                "steps": prov_steps}
        fp = Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="history", provenance=prov, config=cfg,
                         metrics=metrics)
        return fp, noise

    def _check_rows(self, vals: pd.DataFrame, commits: dict) -> None:
        """Check every ``metric_values`` row a history baseline is built from as a stored baseline's
        metrics are checked (:func:`perfgate.metrics.registry.check_stored`: name and view those of
        the key, tier, caliber, unit, a finite and physically possible value; a set metric's
        ``set_value`` a JSON list of str).

        Raises:
            StoreError: the first damaged row (exit 5, DAMAGED_BASELINE for ``check``, as any damaged
                history database), naming its run, commit and metric key."""
        cols = ("run_id", "key", "name", "view", "value", "unit", "caliber", "tier", "set_value")
        # pandas reads NULL as None or NaN (by the column's other values): both are NULL here
        rows = zip(*([None if isinstance(x, float) and math.isnan(x) else x for x in vals[c].tolist()] for c in cols))
        for run_id, key, name, view, value, unit, caliber, tier, set_value in rows:
            try:
                if not isinstance(key, str):
                    raise ValueError(f"metric key {key!r} is not text")
                if set_value is not None:
                    try:
                        value = json.loads(set_value)
                    except (TypeError, ValueError) as e:
                        raise ValueError(f"metric {key!r} has set_value {str(set_value)[:40]!r}, not JSON ({e})") from None
                if isinstance(tier, float) and tier.is_integer():
                    tier = int(tier)   # an integer column pandas read as floats (another row's tier is NULL)
                _, labels = parse_metric_key(key)
                labels.pop("view", None)
                if view is not None:
                    labels["view"] = view
                registry.check_stored(key, MetricValue(key=key, name=name, labels=labels, value=value, unit=unit,
                                                       caliber=caliber, tier=tier))
            except (TypeError, ValueError) as e:
                commit = commits.get(run_id)
                raise self._damaged(ValueError(f"run {run_id} (commit {commit or 'none'}): {e}")) from None

    def close(self):
        """Close the connection (writes are already committed); a read-only store also removes the
        ``-wal`` / ``-shm`` files its open created (:func:`_close_reader`)."""
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()
        else:
            self.conn.close()


_SIDE_FILES = ("-wal", "-shm")


def _discard_created(path: Path, created: list) -> None:
    """After a failed writer open (SQLITE_FULL, a damaged file): remove what that open created, so
    "nothing was written" holds (no 0-byte database left behind to read as an empty history). Only files in
    ``created`` (absent before the open), and the database only while it holds nothing: a 0-byte
    file with no -wal content (another process may have opened and filled it meanwhile). An
    existing database and its files are never touched; a removal that fails is left."""
    if path not in created:
        return
    try:
        wal = Path(f"{path}-wal")
        if path.stat().st_size or (wal.exists() and wal.stat().st_size):
            return
        for f in created:
            if f.exists():
                f.unlink()
    except OSError:
        pass


def _close_reader(conn, path: Path, absent: bool) -> None:
    """Close a read-only connection. When the database had no ``-wal`` / ``-shm`` beside it at open
    (``absent``) and now has, SQLite's read-only open of a WAL database created them and cannot
    delete them itself; a read-write connection opened and closed here is then the last connection,
    which checkpoints an empty WAL (the database bytes do not change) and deletes both files under
    SQLite's own locks. When another connection opened meanwhile it is not the last, and the files stay
    for it. Any error (read-only file or folder) leaves them: never an error of the read."""
    conn.close()
    if not absent or not any(Path(f"{path}{x}").exists() for x in _SIDE_FILES):
        return
    try:
        rw = sqlite3.connect(f"{_file_uri(path)}?mode=rw", uri=True, isolation_level=None, timeout=1.0)
        try:
            rw.execute("select count(*) from sqlite_master").fetchone()
        finally:
            rw.close()
    except sqlite3.Error:
        pass


def trend_series(path, keys, *, branch: str | None = None, config: dict | None = None,
                 last: int = 30) -> dict:
    """Recorded values of ``keys`` for trend sparklines: ``{key: DataFrame}`` with columns
    run_id, recorded_at, commit, value (oldest first, the last ``last`` kept runs).

    Only one series is returned per key: the candidate's (:func:`series_id` of ``config``) when
    ``config`` is given and recorded, else the series of the most recent run, so values
    across a split (rank count, versions, aic_metrics, profiler level) are never drawn on one line. Keys with
    no recorded value are left out. A missing database gives ``{}``.

    Raises:
        StoreError: the file exists but is not a readable perfgate history database, or
            ``path`` is a directory.
    """
    if not require_db_path(path).is_file():
        return {}
    hs = HistoryStore(path, readonly=True)
    want = series_id(config) if config else None
    out = {}
    try:
        for key in keys:
            s = hs.series(key, branch=branch)
            s = s[s["status"] == "kept"]
            if s.empty:
                continue
            sk = want if want is not None and (s["series_key"] == want).any() else s["series_key"].iloc[-1]
            s = s[s["series_key"] == sk].tail(last)
            out[key] = s[["run_id", "recorded_at", "commit", "value"]].reset_index(drop=True)
    finally:
        hs.close()
    return out
