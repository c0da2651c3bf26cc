"""Defects a fresh-user tester found (round 8, h23fix): report files of a failed run, history
store errors (read-only, full disk, locks), policy duplicate keys, CLI argument validation,
token masking, pool workers outliving a killed parent."""
from __future__ import annotations

import json
import sqlite3
import time
import os
import subprocess
import sys

import pytest

from perfgate import errors, terms
from perfgate.errors import StoreError
from perfgate.app.gate import CheckReports, check_and_report, save_baseline
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture


@pytest.fixture
def pair(tmp_path):
    cap = write_capture(tmp_path / "cap", SynthSpec())
    store = BaselineStore(tmp_path / "bl")
    policy = load_policy(None)
    save_baseline(cap, "l1", policy=policy, store=store, env={})
    return cap, store, policy


# 1. a report write that fails removes this run's reports already written
def test_failed_json_write_removes_junit_and_markdown(pair, tmp_path, monkeypatch):
    cap, store, policy = pair
    out = tmp_path / "out"
    from perfgate.report import writers
    real = writers.write_atomic

    def failing(path, text):
        if str(path).endswith(".json"):
            raise StoreError("perfgate-result.json: write failed: No space left on device", path=path)
        return real(path, text)
    monkeypatch.setattr(writers, "write_atomic", failing)
    with pytest.raises(StoreError):
        check_and_report(cap, "l1", policy=policy, store=store, reports=CheckReports(out))
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left == []   # no PASS JUnit / Markdown of a run that exits 5
    monkeypatch.setattr(writers, "write_atomic", real)
    result, paths = check_and_report(cap, "l1", policy=policy, store=store, reports=CheckReports(out))
    assert result.status == terms.PASS and sorted(p.name for p in out.iterdir()) == [
        "perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"]


def _cli(*args, env=None, cwd=None, timeout=120):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "perfgate", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=timeout)


def _recorded_db(tmp_path, pair):
    from perfgate.history.store import HistoryStore
    cap, store, policy = pair
    fp = store.load("l1")[0]
    db = tmp_path / "h" / "hist.sqlite"
    hs = HistoryStore(db)
    for i in range(3):
        hs.record(fp, branch="main", commit=f"{i:040x}", recorded_at=f"2026-01-0{i + 1}T00:00:00+00:00")
    hs.close()
    return db, fp


# 2. a read-only location: not "damaged"; an intact WAL database is read with immutable=1
def test_readonly_history_is_read_immutable_when_folder_not_writable(tmp_path, pair, monkeypatch):
    from perfgate.history import store as hstore
    db, fp = _recorded_db(tmp_path, pair)
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
    db, fp = _recorded_db(tmp_path, pair)

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
    db, fp = _recorded_db(tmp_path, pair)
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
    db, fp = _recorded_db(tmp_path, pair)
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
    db, fp = _recorded_db(tmp_path, pair)
    holder = sqlite3.connect(str(db), isolation_level=None)
    holder.execute("begin exclusive")
    try:
        r = _cli("history", "record", str(cap), "--branch", "main", "--commit", "d" * 40, "--db", str(db),
                 env={"PERFGATE_HISTORY_LOCK_WAIT": "2"})
    finally:
        holder.execute("rollback")
        holder.close()
    assert r.returncode == 5, r.stderr
    assert "waiting for the history database lock held by another process (attempt 2/" in r.stderr


# 7. a blank branch is a usage error
@pytest.mark.parametrize("branch", ["", " ", " main"])
def test_history_record_refuses_blank_branch(tmp_path, pair, branch):
    cap, store, policy = pair
    db = tmp_path / "x.sqlite"
    r = _cli("history", "record", str(cap), "--branch", branch, "--db", str(db))
    assert r.returncode == 2, r.stderr
    assert "branch" in r.stderr and not db.exists()


def test_record_history_library_refuses_blank_branch(tmp_path, pair):
    from perfgate.app.gate import HistoryEntry, record_history
    cap, store, policy = pair
    with pytest.raises(errors.UsageError):
        record_history(cap, HistoryEntry(" "), policy=policy, history_path=tmp_path / "y.sqlite", env={})
    assert not (tmp_path / "y.sqlite").exists()


# 8. --since: a usage error naming the accepted forms
@pytest.mark.parametrize("cmd", [["runs"], ["query", "--metric", "step.time_us{view=rank0}"]])
@pytest.mark.parametrize("since", ["yesterday", "99999999d"])
def test_history_since_bad_values_are_usage_errors(tmp_path, pair, cmd, since):
    db, fp = _recorded_db(tmp_path, pair)
    r = _cli("history", *cmd, "--since", since, "--db", str(db))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "12h" in r.stderr and "ISO date" in r.stderr


# 9. journal of an unknown branch
def test_history_journal_unknown_branch_is_empty_like_runs(tmp_path, pair):
    db, fp = _recorded_db(tmp_path, pair)
    runs = _cli("history", "runs", "--branch", "nosuch", "--db", str(db))
    j = _cli("history", "journal", "--branch", "nosuch", "--db", str(db))
    assert runs.returncode == 0 and j.returncode == 0, j.stderr
    assert "| round |" in j.stdout and "nosuch" in j.stderr + j.stdout


# 6. duplicate keys in a policy file
def test_policy_duplicate_key_is_refused_with_line_and_key(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("version: 1\nmetrics:\n  step.time_us:\n    tolerance: 5%\n    tolerance: 50%\n")
    with pytest.raises(errors.PolicyError) as ei:
        load_policy(p)
    msg = str(ei.value)
    assert str(p) in msg and "line 5" in msg and "duplicate key 'tolerance'" in msg
    assert ei.value.exit_code == 2
    r = _cli("fingerprint", "--policy", str(p), str(tmp_path / "nothing"))
    assert r.returncode == 2 and "duplicate key 'tolerance'" in r.stderr


def test_policy_merge_key_override_still_loads(tmp_path):
    from perfgate.policy.yamlfile import load_unique
    doc = load_unique("base: &b {a: 1, c: 2}\nx:\n  <<: *b\n  a: 3\n")
    assert doc["x"] == {"a": 3, "c": 2}


# 10. a short token masks only whole words
def test_redact_short_token_does_not_mangle_words():
    from perfgate.publish.github import redact
    assert redact("exception: x failed", "x") == "exception: *** failed"
    long = "ghp_0123456789abcdef"
    assert redact(f"url?t={long}x and {long}", long) == "url?t=***x and ***"
    assert redact("Authorization: token abc", "zz") == "Authorization: token ***"


# 5. pool workers never outlive a SIGKILLed parent
_POOL_CHILD = r"""
import os, sys, time
from perfgate.app.run import local_pool
with local_pool(2) as pool:
    futs = [pool.submit(time.sleep, 0.5) for _ in range(4)]
    for f in futs:
        f.result()
    print(" ".join(str(p) for p in pool._processes), flush=True)
    time.sleep(120)
"""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (killed, not yet reaped by init) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.parametrize("main_thread", [True, False])
def test_pool_workers_exit_when_parent_is_killed(tmp_path, main_thread):
    import signal
    code = _POOL_CHILD if main_thread else (
        "import threading\n" + "def body():\n" + "".join("    " + ln + "\n" for ln in _POOL_CHILD.strip().splitlines())
        + "t = threading.Thread(target=body); t.start(); t.join()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        line = child.stdout.readline()
        pids = [int(x) for x in line.split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), [p for p in pids if _alive(p)]
    finally:
        if child.poll() is None:
            child.kill()
        for p in pids:   # never leave a worker of a failed run behind
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_failed_html_write_removes_the_three_reports(pair, tmp_path, monkeypatch):
    pytest.importorskip("jinja2")
    cap, store, policy = pair
    out = tmp_path / "out"
    from perfgate.report import writers

    def failing(result, path, **kw):
        raise StoreError("report.html: write failed: No space left on device", path=path)
    monkeypatch.setattr(writers, "write_check_html", failing)
    try:
        errors.require_extra("html", "--html")
    except errors.PerfgateError:
        pytest.skip("the html extra is not installed")
    with pytest.raises(StoreError):
        check_and_report(cap, "l1", policy=policy, store=store,
                         reports=CheckReports(out, html_path=tmp_path / "r.html"))
    assert sorted(p.name for p in out.iterdir()) == []
