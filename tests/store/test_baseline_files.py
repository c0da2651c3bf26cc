"""Baseline files in the store: a hand-edited file, a value of the wrong kind, a number too long for
Python or a name that is no file is a damaged store; a killed writer's temp file is swept by the next
save; a missing baseline names the folder searched."""
from __future__ import annotations

import json

import pytest

from _cli import run


def test_a_killed_writers_temp_file_is_swept_by_the_next_save(tmp_path):
    """kill -9 during `baseline save` left `.main.json.XXXX.tmp` in the store for good. The next
    write of the same file removes such temp files once they are older than an hour (a live
    writer's is seconds old, and stays)."""
    import os
    import time
    from perfgate.store.atomic import STALE_TMP_S, write_atomic
    target = tmp_path / "main.json"
    old = tmp_path / ".main.json.abc123.tmp"
    young = tmp_path / ".main.json.def456.tmp"
    other = tmp_path / ".other.json.abc123.tmp"
    for f in (old, young, other):
        f.write_text("{")
    past = time.time() - STALE_TMP_S - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    write_atomic(target, "{}")
    assert target.read_text() == "{}"
    assert not old.exists() and young.exists() and other.exists()


@pytest.mark.parametrize("key, value", [("kernel.topn{view=p50}", 5), ("step.time_us{view=p50}", ["a", "b"])])
def test_a_baseline_value_of_the_wrong_kind_is_a_damaged_baseline(synth_cap, tmp_path, key, value):
    """A stored baseline whose ``kernel.topn`` holds a number (or a number metric a list): check
    was an internal error (exit 70, ``'int' object is not iterable``) and wrote no report; a
    string value already gave DAMAGED_BASELINE. Now the same: exit 5, the reports written,
    naming the metric."""
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    doc = json.loads((bl / "b.json").read_text())
    doc["fingerprint"]["metrics"][key]["value"] = value
    (bl / "b.json").write_text(json.dumps(doc))
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 5, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert res["verdict"] == "DAMAGED_BASELINE"
    assert key in json.dumps(res)


def test_no_baseline_names_the_folder_searched_and_how_to_point_elsewhere(synth_cap, tmp_path, monkeypatch):
    """Run from another folder than the one holding ./baselines: "no baseline named 'main' in
    baselines" and "record one with: perfgate baseline save" while one was saved, elsewhere. The
    message now names the absolute folder searched and --baseline-dir / PERFGATE_BASELINE_DIR."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = run("check", "--baseline", "main", "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 4, r.output
    assert str(elsewhere / "baselines") in r.output
    assert "--baseline-dir" in r.output and "PERFGATE_BASELINE_DIR" in r.output


def test_a_number_too_long_for_python_in_a_stored_baseline_is_a_damaged_store(text_captures, tmp_path):
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, text_captures / "level1").exit_code == 0
    doc = bl / "b.json"
    text = doc.read_text()
    doc.write_text("{" + '"zz": 1' + "0" * 5000 + "," + text[text.index("{") + 1:])
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "out", text_captures / "level1")
    assert r.exit_code == 5, r.output
    r = run("baseline", "list", "--baseline-dir", bl)
    assert r.exit_code == 5 and "more digits than Python reads" in r.output, r.output


@pytest.mark.parametrize("edit, says", [
    ("d['provenance']['steps'] = 5", "provenance.steps is a number, not an object"),
    ("d['config']['ranks'] = '0,1'", 'config.ranks is "0,1", not an array of rank numbers'),
    ("d['config']['coverage'] = [1]", "config.coverage is an array, not an object"),
    ("d['metrics'][next(iter(d['metrics']))]['context'] = None", "is not an object with an object context"),
    ("d['detail']['operators'] = 'x'", "detail.operators is a string, not an object"),
    ("d['detail']['segments'] = 5", "detail.segments is a number, not an array"),
    ("d['detail']['step_time'] = 5", "detail.step_time is a number, not an array"),
])
def test_a_hand_edited_baseline_is_damaged_not_an_internal_error(demo, tmp_path, edit, says):
    _, cand, bl = demo
    doc = json.loads((bl / "main.json").read_text())
    d = doc["fingerprint"]
    exec(edit, {"d": d})
    (bl / "main.json").write_text(json.dumps(doc))
    r = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 5 and says in r.output, r.output


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_baseline_name_that_is_no_file_is_a_damaged_store(demo, tmp_path, kind):
    """A folder `dir.json` or a dangling `dangling.json` link was listed UNREADABLE with exit 0,
    and `check` said "no baseline named 'dir' (stored: ..., dir, ...)", which
    --no-baseline-ok then passed."""
    _, cand, bl = demo
    path = bl / "odd.json"
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "missing.json")
    r = run("baseline", "list", "--baseline-dir", bl)
    assert r.exit_code == 5 and "odd\tUNREADABLE: baseline file is a" in r.output, r.output
    r = run("check", "--baseline", "odd", "--baseline-dir", bl, "--out", tmp_path / "o", "--no-baseline-ok", cand)
    assert r.exit_code == 5 and "DAMAGED_BASELINE" in r.output, r.output
