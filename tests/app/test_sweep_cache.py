"""sweep's per-capture cache and rollup: a policy change recomputes, a damaged cache entry is
recomputed not trusted, a folder name that is not UTF-8 still gets its row, and a rollup that cannot
be written whole leaves none."""
from __future__ import annotations

import pytest

from _cli import run
from _edits import policy_with


def test_a_sweep_after_a_policy_change_recomputes(copy_capture, tmp_path):
    """``sweep`` cached per capture under a key holding only the policy's fingerprint and segment
    rules: run again with ``operators.require_pipe: true`` (or other self-check / findings
    settings) it served the cached "ok" for a capture that policy refuses."""
    import csv
    root = tmp_path / "sw"
    root.mkdir()
    cap = copy_capture("level0")
    cap.rename(root / "L0")
    strict = policy_with(tmp_path, "require_pipe: false", "require_pipe: true")
    out = tmp_path / "o"

    def status(*policy):
        r = run("sweep", *policy, "--out", out, root)
        assert r.exit_code == 0, r.output
        rows = list(csv.DictReader(open(out / "sweep.csv", newline="", encoding="utf-8")))
        return [(row["status"], row["cached"]) for row in rows]
    assert status() == [("ok", "False")]
    assert status() == [("ok", "True")]                       # the same policy: served from the cache
    assert status("--policy", strict) == [("failed", "False")]


def test_a_sweep_that_cannot_write_its_xlsx_leaves_no_fresh_csv(copy_capture, tmp_path):
    """``sweep --out o`` with ``o/sweep.xlsx`` a folder: exit 5, but a new sweep.csv stayed and
    looked current. One rollup or none."""
    pytest.importorskip("openpyxl")
    root = tmp_path / "sw"
    root.mkdir()
    copy_capture("level1").rename(root / "L1")
    out = tmp_path / "o"
    (out / "sweep.xlsx").mkdir(parents=True)
    r = run("sweep", "--out", out, root)
    assert r.exit_code == 5, r.output
    assert not (out / "sweep.csv").exists() and not list(out.glob(".sweep.*.tmp*"))


@pytest.mark.parametrize("content", ["null", '{"status": "ok"}', '{"status": "ok", "ranks": "x"}', "[]"])
def test_a_damaged_sweep_cache_entry_is_recomputed_not_trusted(text_captures, tmp_path, content):
    """`{"status": "ok"}` in every cache file made a sweep report all 14 captures ok (5 fail);
    `null` was exit 70."""
    root = tmp_path / "caps"
    root.mkdir()
    import shutil
    shutil.copytree(text_captures / "level1", root / "good")
    (root / "bad" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)   # nothing to read
    out = tmp_path / "sw"
    first = run("sweep", root, "--out", out, "--workers", "1")
    assert first.exit_code == 0, first.output
    caches = list((out / ".cache").glob("*.json")) if (out / ".cache").is_dir() else []
    assert len(caches) == 2, first.output
    for c in caches:
        c.write_text(content)
    again = run("sweep", root, "--out", out, "--workers", "1")
    assert again.exit_code == 0, again.output
    assert again.output == first.output, again.output   # recomputed: the same summary, one capture failed
    rows = (out / "sweep.csv").read_text()
    assert "failed" in rows and ",ok," in rows


def test_a_sweep_over_a_folder_name_that_is_not_utf8_writes_its_rollup(text_captures, tmp_path):
    """A capture folder `cap\\xe9` beside a good one: the rollup stopped at its name (exit 70)."""
    import os
    import shutil
    root = tmp_path / "caps"
    root.mkdir()
    shutil.copytree(text_captures / "level1", root / "good")
    shutil.copytree(text_captures / "level1", os.fsdecode(os.fsencode(str(root)) + b"/cap\xe9"))
    r = run("sweep", root, "--out", tmp_path / "sw", "--workers", "1")
    assert r.exit_code == 0, r.output
    rows = (tmp_path / "sw" / "sweep.csv").read_text(encoding="utf-8")
    assert "cap\\xe9," in rows and "good,ok," in rows
