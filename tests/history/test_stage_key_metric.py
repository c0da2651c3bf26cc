"""The tuning journal's key metric (``history.key_metric``, default ``step.time_us{view=p50}``) of a
pipeline-parallel job, whose fingerprint holds stage p50s and no pooled p50: read as the job-level
p50 (:func:`perfgate.metrics.stages.job_p50`, the largest stage p50) with its stage named; a run of
one stage keeps its recorded p50 under the same key."""
from __future__ import annotations

import json

import pytest

from _cli import run
from perfgate.history.store import HistoryStore
from perfgate.synth import SynthSpec, pipeline_spec, write_capture

KEY = "step.time_us{view=p50}"
MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"


@pytest.fixture(scope="module")
def pipeline_db(tmp_path_factory):
    """A history of two kept runs of a 2-stage x 2-DP synthetic job, the second with stage 1
    (ranks 2, 3) slower, and the stage p50s each recorded."""
    root = tmp_path_factory.mktemp("pp-history")
    db = root / "h.sqlite"
    caps = [write_capture(root / "r1", pipeline_spec(seed=1)),
            write_capture(root / "r2", pipeline_spec(seed=2, slowdown={MATMUL: 1.3}, inject_ranks=[2, 3]))]
    for i, cap in enumerate(caps):
        r = run("history", "record", "--branch", "main", "--commit", f"c{i}", "--db", db, cap)
        assert r.exit_code == 0, r.output
    return db


def _stage_p50s(hs, run_id):
    rows = hs.conn.execute("select view, value from metric_values where run_id = ? and name = 'step.time_us' "
                           "and view like 'stage%.p50'", (run_id,)).fetchall()
    return dict(rows)


def test_a_pipeline_run_gives_the_key_metric_as_its_largest_stage_p50(pipeline_db):
    hs = HistoryStore(pipeline_db, readonly=True)
    try:
        assert KEY not in hs.keys() and hs.has_key(KEY)   # recorded as stage p50s, read as the job's p50
        s = hs.series(KEY, branch="main")
        assert len(s) == 2 and s["value"].notna().all()
        for r in s.itertuples():
            staged = _stage_p50s(hs, r.run_id)
            assert set(staged) == {"stage0.p50", "stage1.p50"}
            assert r.value == max(staged.values()) and r.view == max(staged, key=staged.get)
    finally:
        hs.close()


def test_the_journal_shows_the_key_metric_of_a_pipeline_job_and_its_stage(pipeline_db):
    r = run("history", "journal", "--branch", "main", "--db", pipeline_db)
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2 and all("(stage 1)" in line for line in rows), r.output
    assert "—" not in rows[1] and "%" in rows[1]   # a value and its change against the previous kept round
    assert "largest stage p50" in r.output
    q = run("history", "query", "--metric", KEY, "--branch", "main", "--format", "json", "--db", pipeline_db)
    assert q.exit_code == 0, q.output
    assert [x["view"] for x in json.loads(q.output)] == ["stage1.p50", "stage1.p50"]


def test_a_run_of_one_stage_keeps_its_recorded_p50_and_columns(tmp_path):
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "one", SynthSpec(ranks=2, steps=2, seed=4))
    assert run("history", "record", "--branch", "main", "--db", db, cap).exit_code == 0
    hs = HistoryStore(db, readonly=True)
    try:
        assert KEY in hs.keys()
        s = hs.series(KEY)
        stored = hs.conn.execute("select value from metric_values where key = ?", (KEY,)).fetchone()[0]
        assert "view" not in s.columns and s["value"].tolist() == [stored]
    finally:
        hs.close()
    r = run("history", "journal", "--branch", "main", "--db", db)
    assert r.exit_code == 0 and "stage" not in r.output, r.output
