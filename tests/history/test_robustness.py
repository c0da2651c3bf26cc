"""History edge cases, each reproduced as a user ran it:

1. `history trend` crashed (exit 70) once a branch had >= 6 runs: the set metric kernel.topn
   (NaN in the value column) went into PELT.
2. `check --baseline history:main` crashed (exit 70) when a run had no commit (NULL read as NaN).
3. `history trend --metric M` printed nothing when no change point was found.
4. A history path that is a directory: exit 2 via --db, exit 5 via $PERFGATE_HISTORY (now exit 5 for
   every spelling; a command that does not use the history ignores the default path).
"""
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import mannwhitneyu

from perfgate.cli import main
from perfgate.history.store import HistoryStore
from perfgate.history.changepoints import change_points, describe, min_exact_p, runs_needed, set_changes
from test_history import fp_of


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {})


@pytest.fixture(scope="module")
def six_runs(tmp_path_factory):
    """The user's repro: six synthetic captures (seeds 1..6, 10 steps) recorded on main with
    commits c1..c6, through the CLI."""
    root = tmp_path_factory.mktemp("six")
    db = root / "h.sqlite"
    for s in range(1, 7):
        r = run("synth", root / f"s{s}", "--seed", s, "--steps", 10)
        assert r.exit_code == 0, r.output
        r = run("history", "record", root / f"s{s}", "--branch", "main", "--db", db, "--commit", f"c{s}")
        assert r.exit_code == 0, r.output
    return root, db


# -- 1. trend over NaN / set / non-numeric / constant series ------------------------------------

def test_trend_over_six_synth_runs_does_not_crash(six_runs):
    root, db = six_runs
    r = run("history", "trend", "--db", db)
    assert r.exit_code == 0, r.output
    assert "change point(s) over" in r.output
    # the set metric is named and said not to be trended numerically
    assert "kernel.topn{view=p50}: set metric" in r.output and "not trended numerically" in r.output
    assert "membership changed" in r.output
    # six runs can never show a change point at alpha 0.01: the output says so
    assert "history too short: the longest series has 6 run(s)" in r.output
    r = run("history", "trend", "--db", db, "--metric", "kernel.topn{view=rank0}")
    assert r.exit_code == 0 and "not trended numerically" in r.output, r.output
    r = run("history", "report", "--db", db, "--out", root / "rep")
    assert r.exit_code == 0 and (root / "rep" / "report.md").is_file(), r.output


def _frame(values, commits=None):
    n = len(values)
    return pd.DataFrame({"run_id": range(1, n + 1), "commit": commits or [f"c{i}" for i in range(n)],
                         "value": pd.Series(values, dtype=object)})


@pytest.mark.parametrize("values", [
    [np.nan] * 8,                                  # a set metric's value column
    [None] * 8,                                    # NULL read as None
    ["a", "b", "c", "d", "e", "f", "g", "h"],      # text
    [5.0] * 8,                                     # constant
    [1.0, np.inf, 1.0, -np.inf, 1.0, 1.0, 1.0, 1.0],
    [np.nan, 1.0, np.nan, 2.0, np.nan, 1.0, np.nan, 2.0],  # too few finite values to segment
])
def test_change_points_never_crash_on_odd_series(values):
    s = _frame(values)
    assert change_points(s, "k") == []
    note = describe(s, [], alpha=0.01, min_size=3, min_after=3)
    assert note  # always says something
    n_finite = int(np.isfinite(pd.to_numeric(s["value"], errors="coerce").astype(float)).sum())
    if n_finite == 0:
        assert note == "no numeric value in 8 run(s): nothing to trend"
    elif n_finite < 8:
        assert f"no change point in {n_finite} run(s) ({8 - n_finite} run(s) without a finite number left out)" in note
    else:
        assert note == "no change point in 8 run(s): constant at 5"


def test_nan_runs_are_left_out_but_indexes_stay_those_of_the_series():
    rng = np.random.default_rng(7)
    y = list(100 + rng.normal(0, 0.3, 40)) + list(120 + rng.normal(0, 0.3, 20))
    y[5] = y[17] = np.nan
    y[50] = "oops"
    cps = change_points(_frame(y), "k")
    assert len(cps) == 1
    assert cps[0].index == 40 and cps[0].run_id == 41 and cps[0].commit == "c40"
    assert cps[0].n_before == 38 and cps[0].n_after == 19  # the two NaN and one text run left out


def test_set_changes_lists_membership_changes():
    s = pd.DataFrame({"run_id": [1, 2, 3, 4], "commit": ["a", None, "c", "d"], "value": [np.nan] * 4,
                      "set_value": [json.dumps(["x", "y"]), json.dumps(["y", "x"]), json.dumps(["x", "z"]), None]})
    assert set_changes(s) == [{"index": 2, "run_id": 3, "commit": "c", "added": ["z"], "removed": ["y"]}]
    note = describe(s, [], alpha=0.01, min_size=3, min_after=3)
    assert "membership changed 1 time(s) in 4 run(s): run 3 (+1 -1)" in note


# -- 2. runs without a commit --------------------------------------------------------------------

@pytest.fixture(scope="module")
def _no_commit_master(six_runs):
    """The six runs, then a seventh capture (seed 7) recorded outside git without --commit."""
    import shutil
    root, six = six_runs
    db = root / "nocommit.sqlite"
    shutil.copy(six, db)
    assert run("synth", root / "s7", "--seed", 7, "--steps", 10).exit_code == 0
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # not a git work tree: gather_provenance finds no commit
        r = run("history", "record", root / "s7", "--branch", "main", "--db", db)
    assert r.exit_code == 0 and "recorded run 7" in r.output, r.output
    return root, db


@pytest.fixture
def no_commit_db(_no_commit_master, tmp_path):
    """A private copy of that database (tests may rewrite it)."""
    import shutil
    root, db = _no_commit_master
    return root, shutil.copy(db, tmp_path / "h.sqlite")


def test_check_against_history_with_a_run_without_commit(no_commit_db, tmp_path):
    root, db = no_commit_db
    con = sqlite3.connect(db)
    assert con.execute("select typeof(commit_sha) from runs where id = 7").fetchone() == ("null",)
    con.close()
    out = tmp_path / "o"
    r = run("check", "--baseline", "history:main", root / "s6", "--db", db, "--out", out)
    assert r.exit_code in (0, 1), r.output
    doc = json.loads((out / "perfgate-result.json").read_text())
    note = next(n for n in doc["notes"] if n.startswith("baseline history:main"))
    # s6 is recorded as run 6 (c6): the candidate itself is left out of its own baseline
    assert "commits ['(no commit)', 'c5', 'c4', 'c3', 'c2']" in note
    assert "run(s) [6] left out: the candidate itself, already recorded" in note
    assert doc["baseline_provenance"]["commits"] == [None, "c5", "c4", "c3", "c2"]
    assert (out / "perfgate-report.md").is_file() and (out / "perfgate-junit.xml").is_file()


def test_runs_and_journal_show_no_commit(no_commit_db):
    _, db = no_commit_db
    r = run("history", "runs", "--db", db)
    assert r.exit_code == 0 and "NaN" not in r.output and r.output.count("(no commit)") == 1, r.output
    assert json.loads(run("history", "runs", "--db", db, "--format", "json").output)[6]["commit"] is None
    r = run("history", "journal", "--branch", "main", "--db", db)
    assert r.exit_code == 0, r.output
    assert "| 7 |  | kept |" in r.output


def test_existing_db_with_nan_or_empty_commits_still_works(no_commit_db, tmp_path):
    """Older files: a NaN bound by an earlier writer (SQLite keeps NULL), its text form and ''."""
    root, db = no_commit_db
    con = sqlite3.connect(db)
    con.execute("update runs set commit_sha = ? where id = 4", (float("nan"),))
    con.execute("update runs set commit_sha = 'nan' where id = 5")
    con.execute("update runs set commit_sha = '' where id = 3")
    con.commit()
    con.close()
    r = run("check", "--baseline", "history:main", root / "s6", "--db", db, "--out", tmp_path / "o")
    assert r.exit_code in (0, 1), r.output
    # s6 (run 6) is the candidate itself: left out of its pool
    assert "commits ['(no commit)', '(no commit)', '(no commit)', '(no commit)', 'c2']" in r.output, r.output
    r = run("history", "runs", "--db", db)
    assert r.output.count("(no commit)") == 4 and "NaN" not in r.output
    hs = HistoryStore(db, readonly=True)
    assert list(hs.series("step.time_us{view=p50}")["commit"]) == ["c1", "c2", None, None, None, "c6", None]


def test_record_stores_a_missing_commit_as_null(tmp_path):
    hs = HistoryStore(tmp_path / "h.sqlite")
    for c in (None, float("nan"), "", "  "):
        hs.record(fp_of({"step.time_us": 1.0}), branch="main", commit=c)
    assert hs.conn.execute("select count(*) from runs where commit_sha is null").fetchone()[0] == 4


# -- 3. trend --metric always says something ------------------------------------------------------

def _record_levels(db, levels):
    hs = HistoryStore(db)
    rng = np.random.default_rng(3)
    for i, v in enumerate(levels):
        hs.record(fp_of({"step.computing_us": v * (1 + 0.002 * rng.standard_normal())}), branch="main",
                  commit=f"c{i}")
    hs.close()


def test_trend_metric_with_no_change_point_says_why(tmp_path):
    """6 unchanged runs, then 3 with Computing +6 %: 9 runs can never pass alpha 0.01."""
    db = tmp_path / "h.sqlite"
    _record_levels(db, [100.0] * 6 + [106.0] * 3)
    r = run("history", "trend", "--db", db, "--metric", "step.computing_us{view=p50}")
    assert r.exit_code == 0, r.output
    assert "No change point in 9 run(s)" in r.output
    assert "smallest exact Mann-Whitney U p is 0.0159" in r.output  # 2 / C(9, 4): the 5 | 4 split
    assert "at least 10 runs are needed (5 | 5), and 12 to see a change in the last 3 runs (9 before them)" in r.output
    r = run("history", "trend", "--db", db, "--metric", "step.computing_us")
    assert r.exit_code == 2 and "no recorded metric" in r.output and "step.computing_us{view=p50}" in r.output


def test_the_same_change_is_found_once_twelve_runs_exist(tmp_path):
    """README: with the default policy a change shows, confirmed, once 3 runs follow 9 before it."""
    db = tmp_path / "h.sqlite"
    _record_levels(db, [100.0] * 9 + [106.0] * 3)
    r = run("history", "trend", "--db", db, "--metric", "step.computing_us{view=p50}")
    assert r.exit_code == 0, r.output
    assert "| 10 (#10) | c9 |" in r.output and "% regression | 0.0091 | 9 / 3 | confirmed |" in r.output
    assert 0.055 < float(r.output.split("| +")[1].split("%")[0]) / 100 < 0.065  # Computing +6 %
    _record_levels(db2 := tmp_path / "h2.sqlite", [100.0] * 8 + [106.0] * 3)
    r = run("history", "trend", "--db", db2, "--metric", "step.computing_us{view=p50}")
    assert "No change point in 11 run(s); a change in the last 3 runs can only show with at least 12 runs" in r.output


def test_min_exact_p_matches_scipy_and_runs_needed_is_minimal():
    for n1, n2 in [(3, 3), (5, 4), (6, 3), (5, 5), (9, 3)]:
        exact = mannwhitneyu(np.arange(n1), np.arange(n1, n1 + n2), method="exact").pvalue
        assert min_exact_p(n1, n2) == pytest.approx(exact)
    for alpha, size, after in [(0.01, 3, 3), (0.05, 3, 3), (0.01, 2, 4), (0.001, 3, 3)]:
        need = runs_needed(alpha=alpha, min_size=size, min_after=after)
        side = max(size, 2)
        ok = lambda n: any(min_exact_p(n - k, k) < alpha for k in range(side, n - side + 1))
        assert ok(need.total) and not ok(need.total - 1)
        assert min_exact_p(need.end_before, need.end_after) < alpha
        assert min_exact_p(need.end_before - 1, need.end_after) >= alpha or need.end_before == side


# -- 4. a directory as the history database -----------------------------------------------------

@pytest.mark.parametrize("spelling", ["--db", "--history", "env"])
@pytest.mark.parametrize("cmd", ["record", "runs", "trend", "check", "report"])
def test_directory_as_history_db_is_exit_5_for_every_spelling(six_runs, tmp_path, spelling, cmd):
    root, _ = six_runs
    d = tmp_path / "histdir"
    d.mkdir()
    args = {"record": ["history", "record", root / "s1", "--branch", "main"],
            "runs": ["history", "runs"], "trend": ["history", "trend"],
            "check": ["check", "--baseline", "history:main", root / "s1", "--out", tmp_path / "o"],
            "report": ["report", root / "s1", "--html", tmp_path / "r.html"]}[cmd]
    env = {}
    if spelling == "env":
        env = {"PERFGATE_HISTORY": str(d)}
    else:
        args = args + [spelling, d]
    r = run(*args, env=env)
    assert r.exit_code == 5, r.output
    assert f"{d}: the history database path is a directory, not a file" in r.output
    assert list(d.iterdir()) == [] and not (tmp_path / "r.html").exists()
    if cmd == "check":   # as for the default path: a STORE_ERROR result, its reports written (docs/history.md;
        # a named path exited 5 with no report, which a CI step uploading reports `if: always()` never found)
        assert json.loads((tmp_path / "o" / "perfgate-result.json").read_text())["verdict"] == "STORE_ERROR"
        assert "<error" in (tmp_path / "o" / "perfgate-junit.xml").read_text()
    else:
        assert not (tmp_path / "o").exists()


def test_default_history_path_as_directory_does_not_block_a_named_baseline_check(six_runs, tmp_path, monkeypatch):
    """Only a history the user names (or history:BRANCH) is refused when it is a directory: a
    plain check against a stored baseline never reads ./perfgate-history.sqlite."""
    root, _ = six_runs
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perfgate-history.sqlite").mkdir()
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "main", root / "s1", "--baseline-dir", bl, "--no-trace").exit_code == 0
    r = run("check", "--baseline", "main", root / "s1", "--baseline-dir", bl, "--out", tmp_path / "o", "--no-trace")
    assert r.exit_code == 0, r.output
    r = run("check", "--baseline", "history:main", root / "s1", "--out", tmp_path / "o2", "--no-trace")
    assert r.exit_code == 5 and "the history database path is a directory" in r.output


def test_named_history_directory_with_a_stored_baseline_is_a_warning(six_runs, tmp_path):
    """check against a stored baseline with ``--history DIR``: the history only feeds the HTML
    sparklines there; the check runs and says the path was not used (it exited 5 with no report)."""
    root, _ = six_runs
    bl, d = tmp_path / "bl", tmp_path / "histdir"
    d.mkdir()
    assert run("baseline", "save", "--name", "main", root / "s1", "--baseline-dir", bl, "--no-trace").exit_code == 0
    r = run("check", "--baseline", "main", root / "s1", "--baseline-dir", bl, "--out", tmp_path / "o",
            "--history", d, "--no-trace")
    assert r.exit_code == 0, r.output
    assert "the history database path is a directory, not a file" in r.output and "not used" in r.output
    assert (tmp_path / "o" / "perfgate-result.json").is_file() and list(d.iterdir()) == []


class _FullConnection:
    """A real SQLite connection whose first write (WAL mode, the schema) fails as on a full disk."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *a):
        if "journal_mode" in sql or sql.lstrip().lower().startswith(("create", "begin")):
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *a)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_at_the_first_record_leaves_no_database_it_created(tmp_path, monkeypatch, existing):
    """SQLITE_FULL while `history record` creates the database: "nothing was written" and no
    file left behind (a 0-byte perfgate-history.sqlite that did not exist
    before). A file that existed before the run (even an empty one) is never removed."""
    import perfgate.history.store as hstore
    from perfgate.synth import SynthSpec, write_capture
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    db = tmp_path / "h.sqlite"
    if existing:
        db.write_bytes(b"")
    real = hstore.sqlite3.connect
    monkeypatch.setattr(hstore.sqlite3, "connect", lambda *a, **k: _FullConnection(real(*a, **k)))
    r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--db", str(db)],
                           catch_exceptions=False)
    assert r.exit_code == 5, r.output
    assert "database or disk is full" in r.output and "nothing was written" in r.output
    assert db.exists() == existing
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("h.sqlite"))
    assert left == (["h.sqlite"] if existing else []), left
