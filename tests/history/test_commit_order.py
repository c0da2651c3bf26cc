"""History in commit order (case Q07): runs back-filled out of order are read in commit
order — by ancestry in a git checkout, by the commit time stored at record time elsewhere."""
import os
import re
import subprocess

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.history.order import in_commit_order
from perfgate.history.store import HistoryStore
from perfgate.synth import SynthSpec, write_capture

KEY = "step.time_us{view=p50}"
NO_CI = {"GITHUB_SHA": None, "GITHUB_EVENT_NAME": None, "GITHUB_REF_NAME": None, "GITHUB_HEAD_REF": None,
         "CI_COMMIT_SHA": None, "GITHUB_STEP_SUMMARY": None, "GITHUB_OUTPUT": None}


def _git(cwd, *args, env=None):
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                           "commit.gpgsign=false", *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    """12 commits c1..c12 on main (committer times one hour apart); c7..c12 carry a ~6 % slower
    MatMul. c7..c12 are recorded first, then c1..c6 are back-filled."""
    d = tmp_path_factory.mktemp("q07")
    repo = d / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(1, 13):
        when = f"2026-01-01T{i:02d}:00:00+00:00"
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}",
             env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when})
        shas.append(_git(repo, "rev-parse", "HEAD"))
    db = d / "history.sqlite"
    old = os.getcwd()
    os.chdir(repo)  # `history record` inside the checkout stores commit time and first parent
    try:
        for i in [*range(7, 13), *range(1, 7)]:
            slow = {"aclnnMatmul_MatMulV3Common_MatMulV3": 1.15} if i >= 7 else {}
            cap = write_capture(d / f"cap{i}", SynthSpec(seed=100 + i, slowdown=slow))
            r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--commit", shas[i - 1],
                                          "--db", str(db)], env=NO_CI)
            assert r.exit_code == 0, r.output
    finally:
        os.chdir(old)
    cand = write_capture(d / "cand", SynthSpec(seed=999, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.15}))
    return repo, db, shas, cand, d


def _trend(db, cwd, monkeypatch):
    monkeypatch.chdir(cwd)
    r = CliRunner().invoke(main, ["history", "trend", "--metric", KEY, "--db", str(db)], env=NO_CI)
    assert r.exit_code == 0, r.output
    return r.output


def test_record_stores_commit_time_and_first_parent(backfilled):
    repo, db, shas, _, _ = backfilled
    hs = HistoryStore(db, readonly=True)
    try:
        import json
        rows = {c: json.loads(p) for c, p in hs.conn.execute("select commit_sha, provenance from runs")}
    finally:
        hs.close()
    assert rows[shas[6]]["commit_time"] == "2026-01-01T07:00:00+00:00"
    assert rows[shas[6]]["commit_parent"] == shas[5] and "commit_parent" not in rows[shas[0]]  # c1 is the root


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_backfilled_history_names_c7_as_the_regression(backfilled, monkeypatch, where):
    """In the checkout (ancestry) and outside any git repo (stored commit times) alike."""
    repo, db, shas, _, d = backfilled
    cwd = repo if where == "checkout" else d
    hs = HistoryStore(db, readonly=True, repo=cwd)
    try:
        runs = hs.runs(branch="main")
        assert list(runs["commit"]) == shas  # c1..c12, although recorded c7..c12 first
        assert list(runs["id"]) == [7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6]
    finally:
        hs.close()
    out = _trend(db, cwd, monkeypatch)
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "(#" in ln]
    assert len(rows) == 1, out
    assert shas[6][:12] in rows[0] and "(#7)" in rows[0], out
    change = float(re.search(r"\| ([+-]\d+\.\d)% (\w+)", rows[0]).group(1))
    assert 3.0 < change < 10.0 and "regression" in rows[0], rows[0]


def test_history_baseline_uses_the_newest_commits(backfilled, monkeypatch):
    repo, db, shas, cand, d = backfilled
    monkeypatch.chdir(repo)
    r = CliRunner().invoke(main, ["check", "--baseline", "history:main", str(cand), "--db", str(db),
                                  "--out", str(d / "out")], env=NO_CI)
    assert r.exit_code in (0, 1), r.output
    import json
    result = json.loads((d / "out" / "perfgate-result.json").read_text())
    note = next(n for n in result["notes"] if "baseline history:main" in n)
    used = re.findall(r"'([0-9a-f]{12})'", note)
    assert used == [s[:12] for s in reversed(shas[-5:])], note  # window 5: c12..c8, not the back-filled c2..c6


def test_runs_without_a_commit_keep_record_order():
    import pandas as pd
    df = pd.DataFrame({"id": [1, 2, 3, 4, 5], "commit": ["b", None, "a", None, "c"]})
    out = in_commit_order(df, {"a": 1.0, "b": 2.0, "c": 3.0})
    assert list(out["id"]) == [3, 2, 1, 4, 5]  # a, b, c fill the slots of the commits; the others stay
    assert list(in_commit_order(df, {})["id"]) == [1, 2, 3, 4, 5]


def test_a_wrong_clock_does_not_make_a_commit_the_newest():
    """Commit times (no git): a committer date after the commit's first recording is a wrong
    clock; that commit goes right after the commit recorded before it (or, recorded first, just
    before the one recorded after it), not to the end of every series. A date a few minutes
    after the recording (clock skew within CLOCK_SLACK_S) is still used."""
    from perfgate.history.order import CLOCK_SLACK_S, commit_order
    times = {"a": "2026-01-01T01:00:00+00:00", "b": "2026-01-01T02:00:00+00:00", "bad": "2099-01-01T00:00:00Z",
             "c": "2026-01-01T03:00:00+00:00"}
    rec = [("a", "2026-02-01T00:00:00+00:00"), ("b", "2026-02-01T00:01:00+00:00"),
           ("bad", "2026-02-01T00:02:00+00:00"), ("c", "2026-02-01T00:03:00+00:00")]
    keys, wrong = commit_order(times, cwd=os.devnull, record_order=rec)
    assert sorted(keys, key=keys.get) == ["a", "b", "bad", "c"]
    assert wrong == {"bad": ("2099-01-01T00:00:00Z", "2026-02-01T00:02:00+00:00")}
    # recorded first (back-filled after it): just before the commit recorded after it
    keys, _ = commit_order(times, cwd=os.devnull, record_order=[rec[2], rec[3], rec[0], rec[1]])
    assert sorted(keys, key=keys.get) == ["a", "b", "bad", "c"]
    # nothing with a usable time: no key, its runs keep their place in record order
    keys, wrong = commit_order({"bad": times["bad"]}, cwd=os.devnull, record_order=[rec[2]])
    assert keys == {} and list(wrong) == ["bad"]
    # a committer clock a little ahead of the runner's is skew, not a wrong clock
    skew = {"a": times["a"], "b": "2026-02-01T00:06:00+00:00", "c": "2026-02-01T00:05:00+00:00"}
    assert CLOCK_SLACK_S >= 360
    keys, wrong = commit_order(skew, cwd=os.devnull, record_order=[("a", rec[0][1]), ("b", rec[1][1]), ("c", rec[3][1])])
    assert not wrong and sorted(keys, key=keys.get) == ["a", "c", "b"]


@pytest.fixture(scope="module")
def future_dated(tmp_path_factory):
    """c1..c6 on main, one hour apart, but c4's committer clock said 2099; recorded in order,
    c4..c6 carry a ~15 % slower MatMul."""
    d = tmp_path_factory.mktemp("clock")
    repo = d / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(1, 7):
        when = "2099-01-01T00:00:00+00:00" if i == 4 else f"2026-01-01T{i:02d}:00:00+00:00"
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}",
             env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when})
        shas.append(_git(repo, "rev-parse", "HEAD"))
    db = d / "history.sqlite"
    old = os.getcwd()
    os.chdir(repo)
    try:
        for i in range(1, 7):
            slow = {"aclnnMatmul_MatMulV3Common_MatMulV3": 1.15} if i >= 4 else {}
            cap = write_capture(d / f"cap{i}", SynthSpec(seed=200 + i, slowdown=slow))
            r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--commit", shas[i - 1],
                                          "--db", str(db)], env=NO_CI)
            assert r.exit_code == 0, r.output
    finally:
        os.chdir(old)
    return repo, db, shas, d


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_a_future_dated_commit_keeps_its_place_and_is_named(future_dated, monkeypatch, where):
    """Outside the checkout the order came from commit times alone, and c4 (2099) sorted as the
    newest run: c1 c2 c3 c5 c6 c4, so a check's rolling baseline and every trend read it last.
    Now c4 keeps its place (it was recorded after c3) and `history runs` / `trend` / a check's
    notes say why; in the checkout ancestry orders them and nothing is said."""
    repo, db, shas, d = future_dated
    cwd = repo if where == "checkout" else d
    monkeypatch.chdir(cwd)
    r = CliRunner().invoke(main, ["history", "runs", "--db", str(db), "--format", "csv"], env=NO_CI)
    assert r.exit_code == 0, r.output
    order = [ln.split(",")[2] for ln in r.output.splitlines() if ln[:1].isdigit()]
    assert order == shas, [shas.index(c) + 1 for c in order]
    named = f"commit {shas[3][:12]}: committer date 2099-01-01T00:00:00+00:00 is after its first run was recorded"
    assert (named in r.output) == (where == "elsewhere"), r.output
    out = _trend(db, cwd, monkeypatch)
    assert (named in out) == (where == "elsewhere"), out
    cand = write_capture(d / f"cand-{where}", SynthSpec(seed=299, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.15}))
    r = CliRunner().invoke(main, ["check", "--baseline", "history:main", str(cand), "--db", str(db),
                                  "--out", str(d / f"out-{where}")], env=NO_CI)
    assert r.exit_code in (0, 1), r.output
    import json
    notes = json.loads((d / f"out-{where}" / "perfgate-result.json").read_text())["notes"]
    note = next(n for n in notes if "baseline history:main" in n)
    assert re.findall(r"'([0-9a-f]{12})'", note) == [s[:12] for s in reversed(shas[-5:])], note  # c6..c2
    assert any(named in n for n in notes) == (where == "elsewhere"), notes
