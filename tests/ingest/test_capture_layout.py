"""Rank discovery over the folders of a capture: a stray ASCEND_PROFILER_OUTPUT beside or above the
rank folders, a rank folder below the search depth, links naming a rank folder, a folder named for
another rank, ranks of another run without their profiler_info, and which ranks are partial."""
from __future__ import annotations

import json
import shutil


from _cli import run


def _tree_digest(d):
    import hashlib
    from pathlib import Path
    d = Path(d)
    if not d.exists():
        return None
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


def test_stray_output_folder_beside_rank_folders_is_refused(copy_capture, tmp_path):
    """A capture folder holding rank folders and also an ASCEND_PROFILER_OUTPUT/ of its own (rank
    1's copied up): discovery read only the stray one, as rank 0, and saved that as the baseline
    (exit 0). Now exit 3 naming the folder, and nothing is saved."""
    cap = copy_capture("level1", "stray")
    shutil.copytree(cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT", cap / "ASCEND_PROFILER_OUTPUT")
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "s", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "holds an ASCEND_PROFILER_OUTPUT/ of its own beside rank folders" in r.output
    assert "rank0_ascend_pt, rank1_ascend_pt" in r.output and _tree_digest(bl) in (None, {})


def test_rank_folder_below_the_search_depth_is_refused(text_captures, tmp_path):
    """One rank folder 7 levels down: it was left out silently (a 1-rank fingerprint); now exit 3
    naming it."""
    root = tmp_path / "job"
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt", root / "n0" / "rank0_ascend_pt")
    deep = root / "n1" / "a" / "b" / "c" / "d" / "e"
    shutil.copytree(text_captures / "level1" / "rank1_ascend_pt", deep / "rank1_ascend_pt")
    r = run("fingerprint", "--trace", "never", root, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT lies more than 6 folder levels" in r.output
    # five levels down is still found
    shutil.move(str(deep / "rank1_ascend_pt"), str(root / "n1" / "a" / "b" / "c" / "rank1_ascend_pt"))
    r = run("fingerprint", "--trace", "never", root, "-o", tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "fp.json").read_text())["config"]["ranks"] == [0, 1]


def test_stray_output_folder_above_nested_rank_folders_is_refused(text_captures, tmp_path):
    """The stray copy at the capture's root with the rank folders one level further down
    (cap/job/rank*_ascend_pt): the same refusal; and a rank 19 levels down beside a shallow one."""
    cap = tmp_path / "cap"
    shutil.copytree(text_captures / "level1", cap / "job")
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", cap / "ASCEND_PROFILER_OUTPUT")
    r = run("baseline", "save", "--name", "x", "--baseline-dir", tmp_path / "bl", cap)
    assert r.exit_code == 3 and "beside rank folders with theirs (job)" in r.output, r.output
    deep = tmp_path / "deep"
    shutil.copytree(text_captures / "level1" / "rank1_ascend_pt", deep / "rank1_ascend_pt")
    far = deep.joinpath(*[f"l{i}" for i in range(1, 19)])
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt", far / "rank0_ascend_pt")
    r = run("fingerprint", "--trace", "never", deep, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "l18/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT lies more than 6" in r.output, r.output


def test_a_rank_that_lost_its_kernel_table_beside_derived_tables_is_no_partial_rank(copy_capture, tmp_path):
    """level1 with rank 1's kernel_details.csv and trace_view.json deleted: op_statistic.csv,
    operator_details.csv and l2_cache.csv (derived from the same kernel tasks) remain. It was read
    as a partial rank: PASS (partial) and `baseline save` stored it, while deleting the kernel table
    alone was exit 3. Now exit 3 both ways, naming the derived tables; the real partial rank
    (st/level2 rank 1: step_trace, communication, matrix, analysis.db) stays a partial rank."""
    cap = copy_capture("level1", "lost")
    out = cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (out / "kernel_details.csv").unlink()
    (out / "trace_view.json").unlink()
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "x", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "op_statistic.csv, operator_details.csv, l2_cache.csv (derived from the same kernel tasks) are present" in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_the_real_partial_rank_is_still_partial(ascend):
    from perfgate.ingest.load import load_capture
    cap = load_capture(ascend / "msinsight/test/st/level2", with_trace="never")
    part = [rc for rc in cap.ranks if rc.kernels is None]
    assert [rc.rank for rc in part] == [1]


def test_a_rank_of_another_run_without_profiler_info_is_refused(text_captures, tmp_path):
    """level1's rank 0 beside level2's rank 1 (about an hour later) whose profiler_info_1.json was
    removed: with the file it is exit 3 (RANKS_FROM_DIFFERENT_RUNS, collection ends 3,591 s apart);
    without it, it passed with two notes. The kernel spans prove it as well: exit 3."""
    cap = tmp_path / "mix"
    cap.mkdir()
    shutil.copytree(text_captures / "level1/rank0_ascend_pt", cap / "rank0_ascend_pt")
    shutil.copytree(text_captures / "level2/rank1_ascend_pt", cap / "rank1_ascend_pt")
    (cap / "rank1_ascend_pt/profiler_info_1.json").unlink()
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "RANKS_FROM_DIFFERENT_RUNS: rank 0's kernels end 3,591 s before rank 1's begin" in r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_ranks_of_one_run_keep_passing_without_profiler_info(copy_capture, tmp_path):
    cap = copy_capture("level1", "one")
    (cap / "rank1_ascend_pt/profiler_info_1.json").unlink()
    r = run("baseline", "save", "--name", "m", "--baseline-dir", tmp_path / "bl", cap)
    assert r.exit_code == 0, r.output


def test_a_link_naming_a_rank_folder_is_read_once(copy_capture, tmp_path):
    """`ln -s rank1_ascend_pt latest` in a run folder: exit 3 "two folders claim rank 1", though
    it is one folder; `ln -s . self` gave "…/self/self/self/… lies more than 6 folder levels
    below". Each is read once now, with a warning, and the fingerprint is the plain folder's."""
    import os
    plain = copy_capture("level1", "plain")
    assert run("fingerprint", plain, "-o", tmp_path / "fp0.json").exit_code == 0
    want = json.loads((tmp_path / "fp0.json").read_text())["metrics"]
    for name, target in (("latest", "rank1_ascend_pt"), ("self", ".")):
        cap = copy_capture("level1", f"with_{name}")
        os.symlink(target, cap / name)
        r = run("fingerprint", cap, "-o", tmp_path / f"fp_{name}.json")
        assert r.exit_code == 0, r.output
        got = json.loads((tmp_path / f"fp_{name}.json").read_text())
        assert got["metrics"] == want
        assert any("name a folder already read" in w and "read once" in w for w in got["warnings"]), got["warnings"]


def test_a_rank_folder_named_for_another_rank_is_said(text_captures, tmp_path):
    """A folder rank3_ascend_pt holding profiler_info_1.json was read as rank 1 with no word."""
    cap = tmp_path / "c"
    cap.mkdir()
    shutil.copytree(text_captures / "level1/rank1_ascend_pt", cap / "rank3_ascend_pt")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp.json").read_text())
    assert fp["config"]["ranks"] == [1]
    assert any("folder rank3_ascend_pt is named for rank 3 but holds rank 1" in w for w in fp["warnings"])
