"""Rank-set integrity and the report page of an unreadable capture.

1. A rank folder whose export is missing (``rank1_ascend_pt/`` without ``ASCEND_PROFILER_OUTPUT/``)
   fails closed: exit 3, nothing written. A capture with fewer ranks than the job's world size
   (``profiler_metadata.json`` ``distributed_args.world_size``) is recorded coverage.
2. Different rank id sets on the two sides of a check are incompatible (exit 4) naming both
   sets; repeated captures of one side with different rank sets are refused.
3. ``perfgate report CAPTURE --html`` writes a page (exit 3) when the capture cannot be read.
"""
from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.discover import discover
from perfgate.synth import SynthSpec, write_capture
from _edits import set_cell


def _run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={})
    return r.exit_code, r.output


def _no_runs(db):
    """True when the history database does not exist or holds no row in any table."""
    if not db.exists():
        return True
    with sqlite3.connect(db) as con:
        tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
        return all(con.execute(f"select count(*) from [{t}]").fetchone()[0] == 0 for t in tables)


def _refused(tmp_path, capture, needles):
    """baseline save, history record, fingerprint and check all exit 3 naming ``needles``;
    no baseline file and no history run is written."""
    bl, db = tmp_path / "bl-refused", tmp_path / "refused.sqlite"
    code, out = _run("baseline", "save", "--name", "p", capture, "--baseline-dir", bl)
    assert code == 3 and all(n in out for n in needles), out
    assert not (bl / "p.json").exists()
    code, out = _run("history", "record", capture, "--branch", "main", "--db", db)
    assert code == 3 and all(n in out for n in needles), out
    assert _no_runs(db)
    code, out = _run("fingerprint", capture)
    assert code == 3 and all(n in out for n in needles), out


def _renumber(capture, old: int, new: int) -> None:
    """Rename rank ``old`` to ``new`` everywhere it is written: folder, profiler_info_<N>.json, rank_id."""
    src = capture / f"rank{old}_ascend_pt"
    dst = capture / f"rank{new}_ascend_pt"
    src.rename(dst)
    info = dst / f"profiler_info_{old}.json"
    doc = json.loads(info.read_text())
    doc["rank_id"] = new
    (dst / f"profiler_info_{new}.json").write_text(json.dumps(doc))
    info.unlink()


def _set_world_size(capture, world_size: int) -> None:
    """Write the MindSpeed-style profiler_metadata.json (SCHEMAS.md §0, G8.3) into every rank folder."""
    for rdir in sorted(capture.glob("rank*_ascend_pt")):
        rank = int(rdir.name[4:].split("_")[0])
        (rdir / "profiler_metadata.json").write_text(json.dumps(
            {"distributed_args": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                                  "data_parallel_size": world_size, "rank": rank, "world_size": world_size},
             "ENV_VARIABLES": {}}))


# -- 1. a rank folder without its export ----------------------------------------------------------
def test_rank_folder_without_export_fails_closed_synthetic(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=3, steps=2, seed=1))
    shutil.rmtree(cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    with pytest.raises(InvalidCaptureError) as ei:
        discover(cap)
    assert "rank1_ascend_pt" in str(ei.value) and "no ASCEND_PROFILER_OUTPUT/" in str(ei.value)
    _refused(tmp_path, cap, ["rank1_ascend_pt", "no ASCEND_PROFILER_OUTPUT/"])


def test_every_rank_folder_without_export_is_listed(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=3, steps=2, seed=1))
    for r in (0, 2):
        shutil.rmtree(cap / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    with pytest.raises(InvalidCaptureError) as ei:
        discover(cap)
    e = ei.value
    assert "rank0_ascend_pt" in str(e) and "(and 1 more problem(s))" in str(e)
    assert any("rank2_ascend_pt" in p["path"] for p in e.problems)


def test_rank_folder_without_export_fails_closed_real_level1(copy_capture, tmp_path):
    """The exact report: level1 with rank1's ASCEND_PROFILER_OUTPUT removed saved a 1-rank baseline."""
    cap = copy_capture("level1", "x")
    shutil.rmtree(cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    _refused(tmp_path, cap, ["rank1_ascend_pt", "no ASCEND_PROFILER_OUTPUT/"])


def test_folder_with_profiler_info_but_no_export_fails_closed(tmp_path):
    """A rank folder is also recognised by its profiler_info_<N>.json, whatever its name."""
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    odd = cap / "worker7"
    odd.mkdir()
    (odd / "profiler_info_7.json").write_text((cap / "rank0_ascend_pt" / "profiler_info_0.json").read_text())
    with pytest.raises(InvalidCaptureError, match="worker7.*no ASCEND_PROFILER_OUTPUT/"):
        discover(cap)


def test_legitimate_layouts_still_read(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    assert [loc.rank for loc in discover(cap)] == [0, 1]
    assert [loc.rank for loc in discover(cap / "rank1_ascend_pt")] == [1]
    assert [loc.rank for loc in discover(cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT")] == [1]
    one = write_capture(tmp_path / "one", SynthSpec(ranks=1, steps=2, seed=1))
    assert [loc.rank for loc in discover(one)] == [0]


def test_real_db_export_still_read(ascend):
    db = ascend / "msinsight/test/data/pytorch/db/level1"
    assert [loc.rank for loc in discover(db)] == [0, 1]


# -- 1b. fewer ranks than the job's world size -----------------------------------------------------
def test_fewer_ranks_than_world_size_is_recorded_coverage(tmp_path, policy):
    """A subset of the job's ranks (Megatron / MindSpeed --profile-ranks) is a
    normal capture; the job's world size and the ranks profiled are recorded, never guessed."""
    from perfgate.ingest import load_capture
    from perfgate.metrics.fingerprint import fingerprint_capture
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    _set_world_size(cap, 4)
    assert [loc.rank for loc in discover(cap)] == [0, 1]
    fp = fingerprint_capture(load_capture(cap), policy)
    assert (fp.config["job_world_size"], fp.config["world_size"], fp.config["ranks"]) == (4, 2, [0, 1])
    code, out = _run("baseline", "save", "--name", "p", cap, "--baseline-dir", tmp_path / "bl")
    assert code == 0, out


def test_world_size_matching_the_ranks_passes(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    _set_world_size(cap, 2)
    assert [loc.rank for loc in discover(cap)] == [0, 1]


def test_rank_id_beyond_world_size_fails_closed(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    _set_world_size(cap, 2)
    _renumber(cap, 1, 5)
    with pytest.raises(InvalidCaptureError, match=r"rank\(s\) \[5\] outside 0\.\.1"):
        discover(cap)


def test_unreadable_metadata_fails_closed(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    (cap / "rank1_ascend_pt" / "profiler_metadata.json").write_text('{"distributed_args": {"world_size": 4')
    with pytest.raises(InvalidCaptureError, match="profiler_metadata.json.*truncated JSON: the file ends at byte"):
        discover(cap)


# -- 2. renumbered ranks ---------------------------------------------------------------------------
@pytest.fixture
def base01(tmp_path):
    base = write_capture(tmp_path / "base", SynthSpec(ranks=2, steps=2, seed=1))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", base, "--baseline-dir", bl)[0] == 0
    return bl


def test_renumbered_rank_is_incompatible(tmp_path, base01):
    cand = write_capture(tmp_path / "cand", SynthSpec(ranks=2, steps=2, seed=2))
    code, out = _run("check", "--baseline", "main", cand, "--baseline-dir", base01, "--out", tmp_path / "o1")
    assert code == 0, out  # control: the same rank set passes
    _renumber(cand, 1, 2)
    code, out = _run("check", "--baseline", "main", cand, "--baseline-dir", base01, "--out", tmp_path / "o2")
    assert code == 4 and "INCOMPATIBLE_BASELINE" in out, out
    doc = json.loads((tmp_path / "o2" / "perfgate-result.json").read_text())
    msg = doc["error"]["message"]
    assert "ranks [0, 1]" in msg and "ranks [0, 2]" in msg and "missing or extra rank" in msg
    gated = [c for c in doc["comparisons"] if c["gated"]]
    assert gated and all(c["verdict"] == "incomparable" for c in gated)
    assert all("rank ids changed ([0, 1] -> [0, 2])" in c["reason"] for c in gated)


def test_renumbered_rank_cannot_replace_a_baseline(tmp_path, base01):
    cand = write_capture(tmp_path / "cand", SynthSpec(ranks=2, steps=2, seed=2))
    _renumber(cand, 1, 2)
    code, out = _run("baseline", "save", "--name", "main", cand, "--baseline-dir", base01)
    assert code == 2 and "[0, 1]" in out and "[0, 2]" in out, out
    assert json.loads((base01 / "main.json").read_text())["fingerprint"]["config"]["ranks"] == [0, 1]
    assert _run("baseline", "save", "--name", "main", cand, "--baseline-dir", base01, "--force")[0] == 0


def test_repeated_captures_with_different_rank_sets_are_refused(tmp_path, base01):
    a = write_capture(tmp_path / "a", SynthSpec(ranks=2, steps=2, seed=3))
    b = write_capture(tmp_path / "b", SynthSpec(ranks=2, steps=2, seed=4))
    _renumber(b, 1, 2)
    code, out = _run("check", "--baseline", "main", a, b, "--baseline-dir", base01, "--out", tmp_path / "o")
    assert code == 2 and "[0, 1]" in out and "[0, 2]" in out and "same job" in out, out
    code, out = _run("baseline", "save", "--name", "rep", a, b, "--baseline-dir", base01)
    assert code == 2 and "[0, 1]" in out and "[0, 2]" in out, out
    assert not (base01 / "rep.json").exists()


# -- 3. report --html on a capture that cannot be read ---------------------------------------------
def test_report_html_for_a_read_error_writes_the_page(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    set_cell(cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", 4, "Duration(us)", "nan")
    page = tmp_path / "r.html"
    code, out = _run("report", cap, "--html", page)
    assert code == 3 and "INVALID_CAPTURE" in out and str(page) in out, out
    text = page.read_text()
    assert 'class="invalid"' in text and "INVALID_CAPTURE" in text
    assert "kernel_details.csv" in text and "row 4" in text
    assert "Duration(us) is not a finite number: &#x27;nan&#x27;" in text
    assert "nothing was compared" in text
    assert not list(tmp_path.glob("r.html.*")) and not list(tmp_path.glob(".r.html*"))  # no temp file left


def test_report_html_for_a_missing_export_lists_every_problem(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=3, steps=2, seed=1))
    for r in (0, 2):
        shutil.rmtree(cap / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    page = tmp_path / "r.html"
    code, out = _run("report", cap, "--html", page)
    text = page.read_text()
    assert code == 3 and "rank0_ascend_pt" in text and "rank2_ascend_pt" in text


def test_report_html_unwritable_page_is_refused_before_reading(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=2, seed=1))
    set_cell(cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", 2, "Duration(us)", "nan")
    (tmp_path / "file").write_text("x")
    code, out = _run("report", cap, "--html", tmp_path / "file" / "r.html")
    # the page's destination is refused before the capture is read (exit 5, a report that cannot
    # be written, naming --html, as `check` does for its reports): the capture's own error shows
    # once the destination is fixed
    assert code == 5 and "--html" in out and "is a file, not a folder" in out, out
    assert (tmp_path / "file").read_text() == "x"
    code, out = _run("report", cap, "--html", tmp_path / "r.html")
    assert code == 3 and "Duration(us) is not a finite number" in out, out


def test_report_for_a_missing_path_writes_no_page(tmp_path):
    """A missing capture path is an invalid capture (exit 3, as for `check`), but no page is written."""
    code, out = _run("report", tmp_path / "nope", "--html", tmp_path / "r.html")
    assert code == 3 and "does not exist" in out and not (tmp_path / "r.html").exists()


# -- 4. ranks of one level and header generation carry the same columns ------------------------------
@pytest.mark.real
@pytest.mark.parametrize("column, renamed, what", [("Accelerator Core", "Accel Core", "Accelerator Core")])
def test_a_rank_whose_header_lost_a_column_its_sibling_has_is_refused(copy_capture, tmp_path, column, renamed, what):
    """One rank's kernel_details.csv with a renamed Accelerator Core (or Type) header passed as
    "partial: 20 gated metrics not comparable", blamed on Level0, and baseline save stored
    share.category{Comm} p50 = the median of 0.92 and 0. Exit 3 for every
    command, naming the file and its sibling; nothing stored. (A renamed Type is refused already:
    the column is required.)"""
    from _refusals import assert_refused_everywhere
    from _refusals import saved_main
    bl = saved_main(copy_capture("level1", "base"), tmp_path / "bl")
    cap = copy_capture("level1", "cand")
    kd = cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_text(encoding="utf-8").split("\n", 1)
    head = lines[0].split(",")
    assert column in head
    head[head.index(column)] = renamed
    kd.write_text(",".join(head) + "\n" + lines[1], encoding="utf-8")
    assert_refused_everywhere(cap, bl, tmp_path, [
        "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv: rank 1 has no " + what + " values (its header has no",
        "while rank 0's rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv of the same profiler level (Level1)"])


@pytest.mark.real
def test_ranks_of_different_levels_may_differ_in_columns(text_captures, tmp_path, policy):
    """A Level0 rank beside a Level1 one (mixed levels: a warning) has no Type / Core values by
    its level, not by damage: not refused."""
    from perfgate.app.run import fingerprint_path
    cap = tmp_path / "mixed"
    shutil.copytree(text_captures / "level0" / "rank0_ascend_pt", cap / "rank0_ascend_pt")
    shutil.copytree(text_captures / "level1" / "rank1_ascend_pt", cap / "rank1_ascend_pt")
    fp = fingerprint_path(cap, policy, with_trace=False)
    assert any("different levels" in w or "levels" in w for w in fp.warnings), fp.warnings


@pytest.mark.real
def test_ranks_that_share_no_profiled_step_are_refused(copy_capture, tmp_path):
    """Rank 1 of step 51 beside rank 0 of step 50 (files from another run, clocks close enough
    to pass RANKS_FROM_DIFFERENT_RUNS) passed check and was saved as a baseline.
    RANKS_WITHOUT_COMMON_STEP fails closed: exit 3 for every command, nothing stored."""
    from _refusals import assert_refused_everywhere
    from _refusals import saved_main
    bl = saved_main(copy_capture("level1", "base"), tmp_path / "bl")
    cap = copy_capture("level1", "cand")
    out = cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    for name in ("kernel_details.csv", "step_trace_time.csv"):
        f = out / name
        f.write_text("\n".join(ln.replace("50,", "51,", 1) if ln.startswith("50,") else ln
                               for ln in f.read_text(encoding="utf-8").split("\n")), encoding="utf-8")
    cm = out / "communication.json"   # its steps renamed too: a step it alone lists is exit 3 on its own
    cm.write_text(cm.read_text(encoding="utf-8").replace('"step50"', '"step51"'), encoding="utf-8")
    for p in cap.rglob("trace_view.json"):   # the timelines would fail their own self-check first
        p.unlink()
    assert_refused_everywhere(cap, bl, tmp_path, [
        "RANKS_WITHOUT_COMMON_STEP: the ranks share no profiled step (rank 0: 1 step(s) ['50']; rank 1: 1 step(s) ['51'])"])


def test_ranks_that_share_some_steps_are_a_warning_only(tmp_path, policy):
    from perfgate.metrics.steps import cross_rank_findings
    import pandas as pd
    tables = pd.DataFrame({"rank": [0, 0, 1], "step": ["1", "2", "2"]})
    step_time = {(0, "1"): 10.0, (0, "2"): 10.0, (1, "2"): 10.0}
    codes = [f.code for f in cross_rank_findings(tables, step_time, {}, None)]
    assert "RANK_STEP_MISMATCH" in codes and "RANKS_WITHOUT_COMMON_STEP" not in codes
    # a chain (rank 0 holds step 2, rank 2 step 1, rank 1 both): ranks that lost some steps
    tables = pd.DataFrame({"rank": [0, 1, 1, 2], "step": ["2", "1", "2", "1"]})
    step_time = {(0, "2"): 10.0, (1, "1"): 10.0, (1, "2"): 10.0, (2, "1"): 10.0}
    codes = [f.code for f in cross_rank_findings(tables, step_time, {}, None)]
    assert "RANK_STEP_MISMATCH" in codes and "RANKS_WITHOUT_COMMON_STEP" not in codes
