"""The SQLite run history: recording, rolling baselines, change points, the tuning journal,
concurrent writers and crash safety."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from perfgate import terms
from perfgate.cli import main
from perfgate.errors import NoBaselineError, StoreError
from perfgate.app.gate import HistoryEntry, check, record_history
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key
from perfgate.store.baselines import BaselineStore
from perfgate.history.store import HistoryStore
from perfgate.history.changepoints import change_points

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = {"world_size": 2, "cann_version": None, "torch_npu_version": None, "aic_metrics": "PIPE",
          "type_available": True, "core_available": True}


def fp_of(values: dict, config=None, n_extra=0) -> Fingerprint:
    """A small fingerprint: {name: value} at view p50, plus n_extra filler metrics."""
    metrics = {}
    for name, v in values.items():
        k = metric_key(name, view="p50")
        metrics[k] = MetricValue(key=k, name=name, labels={"view": "p50"}, value=float(v), unit="us",
                                 caliber="busy_union", tier=3)
    for i in range(n_extra):
        k = metric_key("kernel.calls_per_step", family=f"k{i}", view="p50")
        metrics[k] = MetricValue(key=k, name="kernel.calls_per_step", labels={"family": f"k{i}", "view": "p50"},
                                 value=float(i % 7), unit="calls", tier=1)
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={"source": "synthetic"},
                       config=dict(config or CONFIG), metrics=metrics)


def test_sixty_run_history_finds_the_step_and_nothing_else(tmp_path):
    """Must show 1. Noise model: every metric is 100 * (1 + 0.01 * N(0,1)) per run (numpy
    default_rng(seed=2026)); step.time_us gets a +10 % step from run index 40 on (0-based).
    Five noise-only metrics share the generator."""
    rng = np.random.default_rng(2026)
    hs = HistoryStore(tmp_path / "h.sqlite")
    names = ["step.time_us"] + [f"noise{i}.us" for i in range(5)]
    for run in range(60):
        vals = {n: 100 * (1 + 0.01 * rng.standard_normal()) for n in names}
        if run >= 40:
            vals["step.time_us"] *= 1.10
        hs.record(fp_of(vals), branch="main", commit=f"c{run:02d}", recorded_at=f"2026-01-01T00:{run:02d}:00")
    found = {}
    for n in names:
        s = hs.series(metric_key(n, view="p50"), branch="main")
        assert len(s) == 60
        found[n] = change_points(s, n)
    step = found.pop("step.time_us")
    assert len(step) == 1 and abs(step[0].index - 40) <= 1 and step[0].commit == f"c{step[0].index:02d}"
    assert step[0].direction == terms.REGRESSION and 0.08 < step[0].rel_change < 0.12 and step[0].confirmed
    assert all(not cps for cps in found.values()), found


def test_change_at_the_end_is_unconfirmed(tmp_path):
    y = np.r_[np.full(30, 100.0), np.full(2, 120.0)] + np.random.default_rng(1).normal(0, 0.5, 32)
    import pandas as pd
    s = pd.DataFrame({"run_id": range(32), "commit": None, "value": y})
    cps = change_points(s, "k", min_size=2, min_after=3)
    assert cps and not cps[-1].confirmed


_WORKER = """
import sys
sys.path.insert(0, {repo!r})
sys.path.insert(0, {tests!r})
from test_history import fp_of
from perfgate.history.store import HistoryStore
hs = HistoryStore({db!r})
for i in range(25):
    hs.record(fp_of({{"step.time_us": 100 + i}}, n_extra=300), branch="w{w}", commit="w{w}-%d" % i)
print("done")
"""


@pytest.mark.slow
def test_eight_concurrent_writers_lose_nothing(tmp_path):
    """Must show 2 (case C04): 8 processes x 25 runs -> 200 runs, no 'database is locked'."""
    db = str(tmp_path / "h.sqlite")
    HistoryStore(db).close()  # create + migrate once
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER.format(repo=REPO, tests=os.path.join(REPO, "tests", "history"),
                                                                  db=db, w=w)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from runs").fetchone()[0] == 200
    assert con.execute("select count(distinct commit_sha) from runs").fetchone()[0] == 200
    assert con.execute("select count(*) from metric_values").fetchone()[0] == 200 * 301


_SLOW = """
import sys
sys.path.insert(0, {repo!r})
sys.path.insert(0, {tests!r})
from test_history import fp_of
from perfgate.history.store import HistoryStore
fp = fp_of({{"step.time_us": 1.0}}, n_extra=400000)
hs = HistoryStore({db!r})
print("writing", flush=True)
hs.record(fp, branch="main", commit="big")
print("committed", flush=True)
"""


@pytest.mark.slow
def test_sigkill_mid_record_leaves_no_half_run(tmp_path):
    """Must show 4: SIGKILL during a record -> database readable, no half-recorded run."""
    db = str(tmp_path / "h.sqlite")
    hs = HistoryStore(db)
    hs.record(fp_of({"step.time_us": 5.0}), branch="main", commit="before")
    hs.close()
    p = subprocess.Popen([sys.executable, "-c", _SLOW.format(repo=REPO, tests=os.path.join(REPO, "tests", "history"), db=db)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    time.sleep(0.4)
    assert p.poll() is None  # still inside the write
    p.send_signal(signal.SIGKILL)
    p.wait()
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    runs = con.execute("select id, commit_sha from runs").fetchall()
    if len(runs) == 2:  # the commit landed before the kill: then it is complete
        assert con.execute("select count(*) from metric_values where run_id = ?", (runs[1][0],)).fetchone()[0] == 400001
    else:
        assert runs == [(1, "before")]
        assert con.execute("select count(*) from metric_values").fetchone()[0] == 1
    HistoryStore(db).record(fp_of({"step.time_us": 6.0}), branch="main")  # still writable


def test_history_baseline_on_real_captures(text_captures, policy, tmp_path):
    """Must show 3: record level1 twice, check level2 against history:main."""
    db = tmp_path / "h.sqlite"
    for c in ("a1", "b2"):
        record_history(text_captures / "level1", HistoryEntry("main", commit=c), policy=policy, history_path=db,
                       env={}, allow_duplicate=True)
    r = check(text_captures / "level2", "history:main", policy=policy, store=BaselineStore(tmp_path / "bl"),
              env={}, history_path=db)
    assert r.status == terms.PASS and r.exit_code == 0
    note = next(n for n in r.notes if n.startswith("baseline history:main"))
    assert "median of 2 run(s)" in note and "'b2'" in note and "'a1'" in note


def test_too_few_runs_and_series_split(policy, tmp_path):
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    hs.record(fp_of({"step.time_us": 100}), branch="main")
    hs.record(fp_of({"step.time_us": 100}, config=dict(CONFIG, world_size=8)), branch="main")
    hs.close()
    ro = HistoryStore(db, readonly=True)
    with pytest.raises(NoBaselineError, match="1 kept run\\(s\\) in this series, 2 needed .*1 other run"):
        ro.rolling_baseline("main", CONFIG, window=5, min_runs=2, band_k=3)


def test_rolling_noise_band_widens_tolerance(policy, tmp_path):
    from perfgate.compare import compare_fingerprints
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    for v in (100, 104, 96, 108, 92):
        hs.record(fp_of({"step.time_us": v * 1000}), branch="main")
    base, noise = hs.rolling_baseline("main", CONFIG, window=5, min_runs=2, band_k=3.0)
    key = "step.time_us{view=p50}"
    assert base.metrics[key].value == 100_000 and noise[key] == pytest.approx(3 * 1.4826 * 4000)
    cand = fp_of({"step.time_us": 120_000})
    plain = {c.key: c for c in compare_fingerprints(base, cand, policy)[0]}
    banded = {c.key: c for c in compare_fingerprints(base, cand, policy, noise=noise)[0]}
    assert plain[key].verdict == terms.REGRESSION and banded[key].verdict == terms.UNCHANGED
    assert "noise band" in banded[key].tolerance


def test_journal_and_invalid_rounds(tmp_path, policy, text_captures, copy_capture):
    from perfgate.errors import InvalidCaptureError
    from perfgate.synth import mutate
    db = tmp_path / "h.sqlite"
    record_history(text_captures / "level1", HistoryEntry("tune", note="baseline"), policy=policy, history_path=db,
                   env={})
    bad = copy_capture("level1", "bad")
    mutate.header_only(bad / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with pytest.raises(InvalidCaptureError):
        record_history(bad, HistoryEntry("tune", note="BLOCK 128->64"), policy=policy, history_path=db, env={})
    record_history(text_captures / "level2", HistoryEntry("tune", note="fuse cast"), policy=policy, history_path=db,
                   env={})
    r = CliRunner().invoke(main, ["history", "journal", "--branch", "tune", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "| 2 | BLOCK 128->64 | invalid | — |" in r.output
    assert "| 3 | fuse cast | kept | 129,309.3 | -3.7% | -3.7% |" in r.output
    assert "Cumulative over kept rounds: -3.7%" in r.output
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from metric_values v join runs r on r.id=v.run_id "
                       "where r.status='invalid'").fetchone()[0] == 0


@pytest.mark.slow
def test_cli_history_commands(tmp_path):
    from perfgate.synth import SynthSpec, write_capture
    db = str(tmp_path / "h.sqlite")
    run = lambda *a: CliRunner().invoke(main, list(map(str, a)), env={})
    for seed in range(3):
        cap = write_capture(tmp_path / f"c{seed}", SynthSpec(seed=seed, ranks=1, steps=2))
        r = run("history", "record", cap, "--branch", "main", "--commit", f"s{seed}", "--db", db)
        assert r.exit_code == 0, r.output
    r = run("history", "runs", "--db", db, "--format", "json")
    assert [x["commit"] for x in json.loads(r.output)] == ["s0", "s1", "s2"]
    r = run("history", "query", "--metric", "step.time_us{view=p50}", "--db", db, "--format", "csv", "--since", "1d")
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == 4
    r = run("history", "query", "--metric", "nope", "--db", db)
    assert r.exit_code != 0 and "no recorded metric" in r.output
    r = run("history", "trend", "--db", db)
    assert r.exit_code == 0 and "change point(s) over" in r.output
    r = run("history", "report", "--db", db, "--out", tmp_path / "rep")
    assert r.exit_code == 0 and (tmp_path / "rep" / "report.md").is_file()
    r = run("history", "runs", "--db", tmp_path / "missing.sqlite")
    assert r.exit_code == 5 and "no history database" in r.output
    r = run("check", "--baseline", "history:main", tmp_path / "c0", "--history", tmp_path / "missing.sqlite",
            "--out", tmp_path / "o")
    assert r.exit_code == 4 and "no history database" in r.output
    # The same capture again: idempotent, nothing written, the existing run named.
    r = run("history", "record", tmp_path / "c0", "--branch", "main", "--db", db)
    assert r.exit_code == 0 and "already recorded on branch 'main' as run 1" in r.output
    assert len(json.loads(run("history", "runs", "--db", db, "--format", "json").output)) == 3
    r = run("history", "record", tmp_path / "c0", "--branch", "main", "--db", db, "--allow-duplicate")
    assert r.exit_code == 0 and "recorded run 4" in r.output
    # Another branch is another series of records: not a duplicate there.
    r = run("history", "record", tmp_path / "c0", "--branch", "perf", "--db", db)
    assert r.exit_code == 0 and "recorded run 5" in r.output
    r = CliRunner().invoke(main, ["history", "record", str(tmp_path / "c0"), "--branch", "main", "--db", db],
                           env={"GITHUB_EVENT_NAME": "pull_request"})
    assert r.exit_code == 2 and "never write to the history" in r.output


def test_report_plots_a_recent_change(tmp_path):
    db = str(tmp_path / "h.sqlite")
    hs = HistoryStore(db)
    rng = np.random.default_rng(5)
    for run in range(30):
        v = 100 * (1 + 0.005 * rng.standard_normal()) * (1.2 if run >= 22 else 1)
        hs.record(fp_of({"step.time_us": v * 1000}), branch="main", commit=f"c{run}")
    hs.close()
    r = CliRunner().invoke(main, ["history", "report", "--db", db, "--out", str(tmp_path / "rep"), "--last", "10"])
    assert r.exit_code == 0 and "1 metric(s) changed" in r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "step.time_us{view=p50}" in md and "c22" in md
    # the block names its series, as `history trend` does, and the unit
    assert "### `step.time_us{view=p50} (series " in md and ")` (us, elapsed)" in md
    png = (tmp_path / "rep" / "metric-001.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_schema_versioning(tmp_path):
    db = tmp_path / "h.sqlite"
    HistoryStore(db).close()
    con = sqlite3.connect(db)
    assert con.execute("select value from meta where key='schema_version'").fetchone()[0] == "1"
    con.execute("update meta set value='99' where key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer than this perfgate"):
        HistoryStore(db)
    with pytest.raises(StoreError, match="schema version 99"):
        HistoryStore(db, readonly=True)


@pytest.mark.slow
def test_history_db_option_has_both_names(tmp_path):
    """`check --db` = `check --history`, `history ... --history` = `history ... --db`, and
    `report --db` = `report --history`: one option, two spellings, the same database."""
    from perfgate.synth import SynthSpec, write_capture
    run = lambda *a: CliRunner().invoke(main, list(map(str, a)), env={})
    db = tmp_path / "h.sqlite"
    caps = [write_capture(tmp_path / f"c{s}", SynthSpec(seed=s, ranks=1, steps=2)) for s in range(3)]
    for i, cap in enumerate(caps):  # record with both spellings into one file
        r = run("history", "record", cap, "--branch", "main", "--commit", f"s{i}", "--history" if i % 2 else "--db", db)
        assert r.exit_code == 0 and str(db) in r.output, r.output
    runs = {opt: json.loads(run("history", "runs", opt, db, "--format", "json").output) for opt in ("--db", "--history")}
    assert [x["commit"] for x in runs["--db"]] == ["s0", "s1", "s2"] and runs["--db"] == runs["--history"]
    results = {}
    for opt in ("--history", "--db"):
        out = tmp_path / f"o{opt}"
        r = run("check", "--baseline", "history:main", caps[0], opt, db, "--out", out)
        doc = json.loads((out / "perfgate-result.json").read_text())
        results[opt] = (r.exit_code, doc["verdict"], [n for n in doc["notes"] if n.startswith("baseline history:main")])
    assert results["--history"] == results["--db"] and results["--db"][0] == 0 and results["--db"][2], results
    for opt in ("--history", "--db"):  # a missing database: the same error through either name
        r = run("check", "--baseline", "history:main", caps[0], opt, tmp_path / "missing.sqlite", "--out", tmp_path / "o")
        assert r.exit_code == 4 and "no history database" in r.output and "missing.sqlite" in r.output
        r = run("history", "runs", opt, tmp_path / "missing.sqlite")
        assert r.exit_code == 5 and "no history database" in r.output
    r = run("report", caps[0], "--html", tmp_path / "r.html", "--db", db)  # --history: test_html_report.py
    assert r.exit_code == 0 and (tmp_path / "r.html").is_file(), r.output
    r = run("check", "--help")
    assert "--history, --db" in r.output
    r = run("history", "record", "--help")  # one option, declared once: the same spelling everywhere
    assert "--history, --db" in r.output
