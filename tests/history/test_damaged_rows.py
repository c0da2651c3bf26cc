"""`check --baseline history:BRANCH` checks the rows it builds the baseline from as a baseline
file's metrics are checked: a damaged ``metric_values`` row (a negative time, a share above 1, a
tier, unit or caliber not of its kind, a name or view not the key's, a set value that is not JSON)
or a run's config that is not JSON is DAMAGED_BASELINE (exit 5, as any damaged history database)
naming the run, its commit and the metric, never a crash (exit 70) or a baseline built silently from
it. Synthetic captures from perfgate.synth."""
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={})
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    d = tmp_path_factory.mktemp("hrows")
    caps = [write_capture(d / f"c{i}", SynthSpec(seed=10 + i)) for i in range(3)]
    for i, cap in enumerate(caps[:2]):
        code, out = run("history", "record", cap, "--branch", "main", "--commit", f"c{i}", "--db", d / "h.sqlite")
        assert code == 0, out
    return d, caps[2]


def _key(con, prefix):
    return con.execute("select key from metric_values where key like ? order by key limit 1",
                       (prefix + "%",)).fetchone()[0]


DAMAGES = [   # (sql setting one column of one row, words of the message)
    ("value = -7.5", "step.time_us{", "has value -7.5 (a negative time in us)"),
    ("value = -1", "kernel.calls_per_step{", "has value -1.0 (a negative count of calls)"),
    ("value = 1.25", "share.category{", "has value 1.25 (a share, within 0..1)"),
    ("value = NULL", "step.time_us{", "has value None"),
    ("tier = 'x'", "step.time_us{", "has tier 'x'"),
    ("tier = NULL", "step.time_us{", "has tier None"),
    ("unit = NULL", "step.time_us{", "has unit None"),
    ("unit = 'x', value = -2", "step.time_us{", "has value -2.0 (a negative time in us)"),
    ("caliber = 'wall'", "step.time_us{", "has caliber 'wall'"),
    ("name = 'step.count'", "step.time_us{", "has name 'step.count' (its key names 'step.time_us')"),
    ("view = 'rank7'", "step.time_us{", "has labels {'view': 'rank7'}"),
    ("set_value = '[not json'", "kernel.topn", "has set_value '[not json', not JSON (Expecting value"),
    ("set_value = '[1, 2]'", "kernel.topn", "has value [1, 2]"),
]


@pytest.mark.parametrize("sql, prefix, said", DAMAGES)
def test_a_damaged_history_row_is_a_damaged_baseline_naming_run_and_metric(tmp_path, history, sql, prefix, said):
    d, cand = history
    db = tmp_path / "h.sqlite"
    shutil.copy(d / "h.sqlite", db)
    con = sqlite3.connect(db)
    key = _key(con, prefix)
    run_id, commit = con.execute("select id, commit_sha from runs order by id desc limit 1").fetchone()
    con.execute(f"update metric_values set {sql} where run_id = ? and key = ?", (run_id, key))
    con.commit()
    con.close()
    code, out = run("check", "--baseline", "history:main", cand, "--db", db, "--out", tmp_path / "o")
    assert code == 5 and "internal error" not in out, out
    assert "DAMAGED_BASELINE (exit 5)" in out and "history database is damaged" in out, out
    assert f"run {run_id} (commit {commit})" in out and f"metric {key!r}" in out and said in out, out


def test_a_damaged_run_config_is_a_damaged_baseline(tmp_path, history):
    d, cand = history
    db = tmp_path / "h.sqlite"
    shutil.copy(d / "h.sqlite", db)
    con = sqlite3.connect(db)
    con.execute("update runs set config = '{not json' where id = (select max(id) from runs)")
    con.commit()
    con.close()
    code, out = run("check", "--baseline", "history:main", cand, "--db", db, "--out", tmp_path / "o")
    assert code == 5 and "internal error" not in out and "history database is damaged" in out, out


def test_an_intact_history_baseline_still_checks(tmp_path, history):
    d, cand = history
    code, out = run("check", "--baseline", "history:main", cand, "--db", d / "h.sqlite", "--out", tmp_path / "o")
    assert code in (0, 1) and "DAMAGED" not in out, out


def test_record_refuses_a_value_a_history_baseline_would_call_damaged(tmp_path, history):
    """What ``history record`` writes, a history baseline reads back: a fingerprint with a share
    above 1 is a StoreError naming the metric, and nothing of the run is recorded."""
    import dataclasses
    from perfgate.errors import StoreError
    from perfgate.history.store import HistoryStore
    from perfgate.store.baselines import BaselineStore
    d, cand = history
    code, out = run("baseline", "save", "--name", "cand", cand, "--baseline-dir", tmp_path / "bl")
    assert code == 0, out
    fp, _ = BaselineStore(tmp_path / "bl").load("cand")
    key = next(k for k in fp.metrics if k.startswith("share.category{"))
    bad = dataclasses.replace(fp, metrics={**fp.metrics, key: dataclasses.replace(fp.metrics[key], value=1.5)})
    db = tmp_path / "h.sqlite"
    shutil.copy(d / "h.sqlite", db)
    hs = HistoryStore(db)
    try:
        before = len(hs.runs())
        with pytest.raises(StoreError, match=r"has value 1.5 \(a share, within 0..1\): nothing recorded") as e:
            hs.record(bad, branch="main", commit="c9")
        assert repr(key) in str(e.value)
        assert len(hs.runs()) == before
    finally:
        hs.close()
