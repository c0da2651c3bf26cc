"""Opening the history database: read-only folders, files that cannot be opened, a full disk, locks
(waiting with progress, bounded), another application's SQLite file, and a damaged database that
costs a check only its HTML sparklines."""
from __future__ import annotations

import sqlite3
import time

import pytest

from perfgate import errors
from perfgate.errors import StoreError
from _cli import run, run_process
from _edits import history_of_three_runs


def test_a_damaged_history_database_costs_only_the_sparklines(demo, tmp_path):
    """With a stored baseline the history database only draws the HTML page's trend sparklines; a
    damaged one made `check --html` exit 5 and write no JUnit, Markdown or JSON at all."""
    _, cand, bl = demo
    db = tmp_path / "bad.sqlite"
    db.write_text("not a database")
    out = tmp_path / "o"
    r = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", out, "--html", tmp_path / "r.html",
             "--db", db, cand)
    assert r.exit_code == 1, r.output
    assert {p.name for p in out.iterdir()} == {"perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"}
    assert "trend sparklines not drawn: the history database" in (tmp_path / "r.html").read_text()


def test_another_applications_sqlite_file_is_not_adopted_as_the_history(tmp_path):
    """`history record --db OTHER.sqlite` added perfgate's tables to any SQLite file (a
    profiler's .db, an application's database); reads told the user to "open it once for
    writing to migrate". Both are now exit 5 naming it, and the file is left as it was."""
    import sqlite3
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("create table foo(x)")
    con.commit()
    con.close()
    before = db.read_bytes()
    cap = write_capture(tmp_path / "c", SynthSpec(steps=3))
    r = run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cap)
    assert r.exit_code == 5 and "not a perfgate history database: it holds other tables (foo)" in r.output, r.output
    r = run("history", "runs", "--db", db)
    assert r.exit_code == 5 and "not a perfgate history database" in r.output, r.output
    assert db.read_bytes() == before


# 2. a read-only location: not "damaged"; an intact WAL database is read with immutable=1
def test_readonly_history_is_read_immutable_when_folder_not_writable(tmp_path, pair, monkeypatch):
    from perfgate.history import store as hstore
    db, fp = history_of_three_runs(tmp_path, pair[1])
    real = sqlite3.connect
    opened = []

    def connect(database, *a, **k):
        opened.append(str(database))
        if "mode=ro" in str(database) and "immutable=1" not in str(database):
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *a, **k)
    monkeypatch.setattr(hstore.sqlite3, "connect", connect)
    monkeypatch.setattr(hstore, "_folder_writable", lambda folder: False)
    hs = hstore.HistoryStore(db, readonly=True)
    try:
        assert len(hs.runs()) == 3 and any("immutable=1" in u for u in opened)
    finally:
        hs.close()


def test_unopenable_history_is_a_cannot_open_store_error_not_damaged(tmp_path, pair, monkeypatch):
    from perfgate.history import store as hstore
    db, fp = history_of_three_runs(tmp_path, pair[1])

    def connect(database, *a, **k):
        raise sqlite3.OperationalError("unable to open database file")
    monkeypatch.setattr(hstore.sqlite3, "connect", connect)
    with pytest.raises(StoreError) as ei:
        hstore.HistoryStore(db, readonly=True)
    msg = ei.value.message + " " + (ei.value.hint or "")
    assert "cannot open the history database" in msg and "damaged" not in msg and "-shm" in msg
    assert ei.value.exit_code == errors.EXIT_STORE


# 3. a full disk while recording: named as such, nothing recorded
def test_full_disk_during_record_is_named_full_and_records_nothing(tmp_path, pair):
    from perfgate.history.store import HistoryStore
    db, fp = history_of_three_runs(tmp_path, pair[1])
    hs = HistoryStore(db)
    hs.require_intact()
    pages = hs.conn.execute("pragma page_count").fetchone()[0]
    hs.conn.execute(f"pragma max_page_count = {pages}")   # SQLite itself: no page more (SQLITE_FULL)
    with pytest.raises(StoreError) as ei:
        hs.record(fp, branch="main", commit="f" * 40)
    hs.close()
    assert "database or disk is full" in ei.value.message
    assert "lock" not in ei.value.message and "rollback" not in ei.value.message
    assert ei.value.exit_code == errors.EXIT_STORE
    hs = HistoryStore(db, readonly=True)
    assert len(hs.runs()) == 3
    hs.close()


# 4. a locked database: a progress line per retry, a bounded total wait
def test_locked_history_says_it_waits_and_gives_up_in_time(tmp_path, pair):
    from perfgate.history.store import HistoryStore
    db, fp = history_of_three_runs(tmp_path, pair[1])
    holder = sqlite3.connect(str(db), isolation_level=None)
    holder.execute("begin exclusive")
    said = []
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError) as ei:   # the open (WAL pragma) or the record waits
            hs = HistoryStore(db, lock_wait_s=1.5, busy_timeout_ms=300, on_wait=said.append)
            hs.record(fp, branch="main", commit="e" * 40)
        took = time.monotonic() - t0
    finally:
        holder.execute("rollback")
        holder.close()
    assert took < 4.0, took
    assert said and all("waiting for the history database lock held by another process (attempt" in s for s in said)
    assert "locked by another process" in ei.value.message and "nothing recorded" in ei.value.message


def test_lock_wait_default_is_bounded_and_env_overrides(monkeypatch):
    from perfgate.history import store as hstore
    monkeypatch.delenv("PERFGATE_HISTORY_LOCK_WAIT", raising=False)
    assert hstore._lock_wait_s() == hstore.LOCK_WAIT_S <= 60
    monkeypatch.setenv("PERFGATE_HISTORY_LOCK_WAIT", "7")
    assert hstore._lock_wait_s() == 7.0
    monkeypatch.setenv("PERFGATE_HISTORY_LOCK_WAIT", "soon")
    with pytest.raises(errors.UsageError):
        hstore._lock_wait_s()


def test_locked_history_record_cli_prints_progress(tmp_path, pair):
    cap, store, policy = pair
    db, fp = history_of_three_runs(tmp_path, pair[1])
    holder = sqlite3.connect(str(db), isolation_level=None)
    holder.execute("begin exclusive")
    try:
        r = run_process("history", "record", str(cap), "--branch", "main", "--commit", "d" * 40, "--db", str(db),
                 env={"PERFGATE_HISTORY_LOCK_WAIT": "2"})
    finally:
        holder.execute("rollback")
        holder.close()
    assert r.returncode == 5, r.stderr
    assert "waiting for the history database lock held by another process (attempt 2/" in r.stderr
