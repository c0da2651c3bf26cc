"""Reading the history: journal, runs, trend and report on odd or damaged rows (text values, notes with
bars, newlines or bytes that are not UTF-8, unknown branches, bad --since values), the rank count
column, side effects of faster compute in a trend, and history report without matplotlib."""
from __future__ import annotations

import sqlite3

import pytest

from perfgate.app.gate import save_baseline
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.writer import SynthSpec, write_capture
from _cli import run, run_process
from _edits import history_of_three_runs


@pytest.fixture
def history_db(synth_cap, tmp_path):
    db = tmp_path / "h.sqlite"
    r = run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, synth_cap)
    assert r.exit_code == 0, r.output
    return db


@pytest.mark.parametrize("metric, said", [("kernel.topn{view=p50}", "is a set metric"),
                                          ("nope{view=p50}", "unknown metric 'nope{view=p50}'"),
                                          ("step.time_us{view=rank7}", "no recorded metric")])
def test_the_journal_refuses_a_metric_it_cannot_follow(history_db, metric, said):
    """``history journal --metric 'kernel.topn{view=p50}'`` on a healthy database was an internal
    error (exit 70, ``ufunc 'isnan'``: a set metric's values are NULL); an unknown metric printed
    a table of "—" with exit 0, where ``history query`` / ``trend`` say "no recorded metric"."""
    r = run("history", "journal", "--branch", "main", "--metric", metric, "--db", history_db)
    assert r.exit_code == 2, r.output
    assert said in r.output
    assert "internal error" not in r.output


@pytest.mark.parametrize("value", ["'abc'", "NULL"])
@pytest.mark.parametrize("command", [["journal", "--branch", "main"], ["report", "--branch", "main"],
                                     ["query", "--metric", "step.time_us{view=p50}"],
                                     ["trend", "--metric", "step.time_us{view=p50}"]])
def test_a_damaged_value_row_is_a_store_error_for_every_history_read(history_db, tmp_path, command, value):
    """A metric_values row whose value is text or NULL (and no set value): ``check --baseline
    history:main`` already said DAMAGED_BASELINE (exit 5); ``history journal`` and ``history
    report`` were internal errors (exit 70). Every read names the run, commit and metric, exit 5."""
    import sqlite3
    con = sqlite3.connect(history_db)
    con.execute(f"update metric_values set value={value} where key = 'step.time_us{{view=p50}}'")
    con.commit()
    con.close()
    extra = ["--out", tmp_path / "rep"] if command[0] == "report" else []
    r = run("history", *command, *extra, "--db", history_db)
    assert r.exit_code == 5, r.output
    assert "history database is damaged" in r.output and "commit c1" in r.output
    assert "step.time_us{view=p50}" in r.output


def test_history_report_without_matplotlib_is_refused_even_with_nothing_to_report(tmp_path, monkeypatch):
    """`history report` without the html extra exited 0 while no metric had changed and exit 2
    (after its work, leaving an empty folder) on the first night one had: a nightly job passed
    for weeks, then lost its report on the first regression. It is now refused up front, every
    time, as docs/install.md says."""
    import sys
    from perfgate.synth.writer import SynthSpec, write_capture
    cap = write_capture(tmp_path / "cap", SynthSpec(steps=3))
    db = tmp_path / "h.sqlite"
    assert run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, cap).exit_code == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = run("history", "report", "--db", db, "--out", tmp_path / "hr")
    assert r.exit_code == 2, r.output
    assert "perfgate history report (its plots) needs matplotlib" in r.output and "pip install matplotlib (the 'html' extra" in r.output
    assert not (tmp_path / "hr" / "report.md").exists()


def test_a_journal_note_with_a_bar_or_a_newline_stays_in_its_cell(tmp_path):
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    for i, note in enumerate(["base", "BLOCK | 128->64\nsecond line"]):
        cap = write_capture(tmp_path / f"c{i}", SynthSpec(steps=3, seed=i))
        r = run("history", "record", "--branch", "main", "--commit", f"c{i}", "--note", note, "--db", db, cap)
        assert r.exit_code == 0, r.output
    r = run("history", "journal", "--branch", "main", "--db", db)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "BLOCK" in line)
    assert "BLOCK \\| 128->64 second line" in row
    assert row.count(" | ") == r.output.splitlines()[0].count(" | ")   # as many columns as the header


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_history_runs_shows_a_note_that_is_not_utf8(tmp_path, fmt):
    """A note stored as bytes that are not UTF-8 (by another tool) made `history runs --format
    json` exit 70; its bad bytes are now shown escaped in every format."""
    import sqlite3
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "c", SynthSpec(steps=3))
    assert run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cap).exit_code == 0
    con = sqlite3.connect(db)
    con.execute("update runs set note = x'ff41'")
    con.commit()
    con.close()
    r = run("history", "runs", "--db", db, "--format", fmt)
    assert r.exit_code == 0, r.output
    assert "xffA" in r.output, r.output


@pytest.fixture(scope="module")
def faster_compute_db(tmp_path_factory):
    """14 runs on main; from run 9 every compute kernel family is 0.7x as long, communication as
    it was (the helper's recipe)."""
    from perfgate.app.gate import HistoryEntry, record_history
    from perfgate.policy import load_policy
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    d = tmp_path_factory.mktemp("trend7")
    faster = {f[0]: 0.7 for f in DEFAULT_FAMILIES}
    db = d / "h.sqlite"
    for i in range(1, 15):
        spec = SynthSpec(seed=200 + i, **({"slowdown": faster} if i > 8 else {}))
        record_history(write_capture(d / f"r{i}", spec), HistoryEntry("main", commit=f"{i:02d}" + "0" * 38),
                       policy=load_policy(), history_path=db, env={})
    return db


def test_trend_calls_no_side_effect_of_faster_compute_a_change(faster_compute_db):
    """Compute 0.7x with communication as it was: `check` calls the Comm shares unchanged and the
    larger exposed communication within what the device explains; `history trend` reported them as
    confirmed regressions (+13 pp, +20 pp). Every change point there is an improvement now."""
    r = run("history", "trend", "--db", faster_compute_db)
    assert r.exit_code == 0, r.output
    sections = r.output.split("\n### ")[1:]
    changed = {sec.split("`")[1].split(" (series")[0]: [ln for ln in sec.splitlines() if ln.startswith("| 9 (#9)")
                                                        or ln.startswith("| 10 (#10)")] for sec in sections}
    changed = {k: v for k, v in changed.items() if v}
    assert {"step.computing_us", "step.time_us"} <= {k.split("{")[0] for k in changed}, changed
    assert all("improvement" in row for rows in changed.values() for row in rows), changed   # nothing got slower


@pytest.mark.real
def test_history_runs_names_the_rank_count_as_such(ascend, tmp_path):
    """`history runs` showed world_size 2 for st/level2, whose job has world size 4 (PP2 x DP2, 2
    ranks profiled): the column is the number of rank folders read, and is named so."""
    db = tmp_path / "h.sqlite"
    assert run("history", "record", "--db", db, "--branch", "main", "--commit", "abc",
                ascend / "msinsight/test/st/level2").exit_code == 0
    r = run("history", "runs", "--db", db)
    assert r.exit_code == 0 and "world_size" not in r.output and "ranks" in r.output.splitlines()[0], r.output


@pytest.fixture(scope="module")
def recorded_db(tmp_path_factory):
    """A history database of three runs of one synthetic capture on main, shared by the tests that
    only read it."""
    tmp_path = tmp_path_factory.mktemp("recorded")
    cap = write_capture(tmp_path / "cap", SynthSpec())
    store = BaselineStore(tmp_path / "bl")
    save_baseline(cap, "l1", policy=load_policy(None), store=store, env={})
    return history_of_three_runs(tmp_path, store)


# 8. --since: a usage error naming the accepted forms
@pytest.mark.parametrize("cmd", [["runs"], ["query", "--metric", "step.time_us{view=rank0}"]])
@pytest.mark.parametrize("since", ["yesterday", "99999999d"])
def test_history_since_bad_values_are_usage_errors(recorded_db, cmd, since):
    db, fp = recorded_db
    r = run_process("history", *cmd, "--since", since, "--db", str(db))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "12h" in r.stderr and "ISO date" in r.stderr


# 9. journal of an unknown branch
def test_history_journal_unknown_branch_is_empty_like_runs(recorded_db):
    db, fp = recorded_db
    runs = run_process("history", "runs", "--branch", "nosuch", "--db", str(db))
    j = run_process("history", "journal", "--branch", "nosuch", "--db", str(db))
    assert runs.returncode == 0 and j.returncode == 0, j.stderr
    assert "| round |" in j.stdout and "nosuch" in j.stderr + j.stdout
