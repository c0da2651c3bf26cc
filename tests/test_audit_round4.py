"""Defects found by the fourth audit round (2026-12-02, tenth session): a verdict review of uniform
compute changes and a helper breaking ingest with unusual captures; each with the behaviour wanted."""
from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal

from click.testing import CliRunner

from perfgate.cli import main


def _run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def _scale_compute(cap, factor: str):
    """Every non-hcom row's Duration × ``factor`` (communication untouched), timeline and
    step_trace_time.csv removed so that ΣDuration alone carries the change."""
    for p in [*cap.rglob("trace_view.json"), *cap.rglob("step_trace_time.csv")]:
        p.unlink()
    for p in cap.rglob("kernel_details.csv"):
        rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
        di, ni = rows[0].index("Duration(us)"), rows[0].index("Name")
        for r in rows[1:]:
            if not r[ni].startswith("hcom"):
                r[di] = str((Decimal(r[di].strip()) * Decimal(factor)).quantize(Decimal("0.001")))
        with open(p, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    return cap


def test_compute_faster_with_communication_as_it_was_is_no_communication_regression(copy_capture, tmp_path):
    """Every compute kernel of level1 ×0.667 (faster), communication untouched: the device scale
    is 0.667, so hcom_allReduce is "×1.5 relative to the device" and its share grew. It failed the
    gate as "REGRESSION communication hcom_allReduce: ΣDuration 3,047 -> 3,047 us/step (+0%)".
    Communication time is set by the links and the other ranks, not by the device's compute
    speed: its own ΣDuration did not move, so it is unchanged (a consequence) and the check passes."""
    base = copy_capture("level1", "base")
    for p in [*base.rglob("trace_view.json"), *base.rglob("step_trace_time.csv")]:
        p.unlink()
    cand = _scale_compute(copy_capture("level1", "cand"), "0.667")
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 0, r.output
    comm = [c for c in res["comparisons"] if c["gated"] and c["name"].startswith("share.")
            and ("hcom" in str(c["labels"].get("family", "")) or c["labels"].get("category") == "Comm"
                 or c["labels"].get("core_type") in ("HCCL", "COMMUNICATION"))]
    assert comm and all(c["verdict"] == "unchanged" for c in comm), [(c["key"], c["verdict"]) for c in comm]
    assert any("within the bound" in c["reason"] for c in comm)
    assert not any(x["subject"].startswith("hcom") for x in res["causes"])


def test_a_compute_family_that_kept_its_time_on_a_faster_device_is_no_regression(tmp_path):
    """Every compute family ×0.5 except MatMulV3 (its time as before, on a device twice as fast):
    the device's speed explains any own time between the baseline's and s times it, so a family
    that kept its time did not regress (nothing got slower; the step got faster). Its reason says
    which range the device explains."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    keep = "aclnnMatmul_MatMulV3Common_MatMulV3"
    base = write_capture(tmp_path / "base", SynthSpec())
    cand = write_capture(tmp_path / "cand", SynthSpec(slowdown={f[0]: 0.5 for f in DEFAULT_FAMILIES if f[0] != keep}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 0, r.output
    share = next(c for c in res["comparisons"] if c["name"] == "share.family" and c["labels"]["family"] == keep
                 and c["labels"]["view"] == "rank0")
    assert share["verdict"] == "unchanged" and "within the bound" in share["reason"]
    lo, hi = share["stats"]["part"]["explained_us"]
    assert lo < share["stats"]["part"]["cand_us"] <= hi and share["stats"]["part"]["scale"] < 0.6
    assert not any(x["fails"] for x in res["causes"])


def test_uniform_compute_slowdown_names_computing_and_calls_nothing_a_gain(tmp_path):
    """Synthetic pair, every compute kernel ×1.5 on every rank, communication as it was: the
    cause is Computing as a whole (no kernel family explains it, each moved with the device), it
    explains the Computing metrics too (they were listed as unexplained), and no communication
    share is called an improvement ("6 improved" were side effects)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec())
    cand = write_capture(tmp_path / "cand", SynthSpec(rank_slowdown={0: 1.5, 1: 1.5}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 1
    assert res["counts"]["gated"]["improvement"] == 0, r.output
    top = res["causes"][0]
    assert top["kind"] == "device" and top["subject"] == "Computing", res["causes"]
    assert any(k.startswith("step.computing_us") for k in top["explains"])
    assert top["step_delta_caliber"] == "busy union" and "every compute kernel ×1.5" in top["what"]
    assert not [k for k in res["unexplained"] if k.startswith("step.computing_us")]
    assert "more than the step's change" not in r.output   # +3,298 of +3,297 us is 100 %, not "more"


def _rank_subset(src, dst, ranks, other=None, other_ranks=()):
    dst.mkdir()
    for r in ranks:
        shutil.copytree(src / f"rank{r}_ascend_pt", dst / f"rank{r}_ascend_pt")
    for r in other_ranks:
        shutil.copytree(other / f"rank{r}_ascend_pt", dst / f"rank{r}_ascend_pt")
    return dst


def test_history_pool_leaves_out_runs_of_other_rank_ids(tmp_path):
    """Three runs profiled ranks 0,1 and two ranks 0,3 (rank 3 another pipeline stage, twice the
    Cast calls), all on main: one series (its key hashes the rank count). A ranks-0,3 candidate
    was judged against the median of all five (REGRESSION, Cast calls 10 -> 15/step), and a
    ranks-0,1 run of the pool was refused (exit 4: "baseline ranks [0, 3]", the newest run's).
    Now the pool holds the candidate's rank set only, and says which runs it left out."""
    from perfgate.synth.writer import SynthSpec, write_capture
    caps = {}
    for s in range(21, 27):
        n = write_capture(tmp_path / f"n{s}", SynthSpec(ranks=4, steps=3, seed=s))
        x = write_capture(tmp_path / f"x{s}", SynthSpec(ranks=4, steps=3, seed=s,
                                                         extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
        caps[("01", s)] = _rank_subset(n, tmp_path / f"a01_{s}", (0, 1))
        caps[("03", s)] = _rank_subset(n, tmp_path / f"a03_{s}", (0,), x, (3,))
    db = tmp_path / "h.sqlite"
    for key in [("01", 21), ("01", 22), ("01", 23), ("03", 24), ("03", 25)]:
        r = _run("history", "record", "--db", db, "--branch", "main", "--commit", f"c{key[0]}{key[1]}", caps[key])
        assert r.exit_code == 0, r.output
    r = _run("check", "--baseline", "history:main", "--db", db, caps[("03", 26)], "--out", tmp_path / "o1")
    assert r.exit_code == 0, r.output
    res = _result(tmp_path / "o1")
    assert res["baseline_provenance"]["runs"] == [5, 4] and res["baseline_provenance"]["other_rank_runs"] == [1, 2, 3]
    assert any("left out: they profiled other ranks" in n for n in res["notes"])
    r = _run("check", "--baseline", "history:main", "--db", db, caps[("01", 21)], "--out", tmp_path / "o2")
    assert r.exit_code == 0, r.output
    # a rank set with too few runs: no baseline (exit 4), the message names the runs left out
    _rank_subset(tmp_path / "n21", tmp_path / "a02", (0, 2))
    r = _run("check", "--baseline", "history:main", "--db", db, tmp_path / "a02", "--out", tmp_path / "o3")
    assert r.exit_code == 4 and "profiled other ranks than the candidate's [0, 2]" in r.output, r.output


def _msprof_output(ascend, tmp_path):
    src = next((ascend / "vllm_ascend_msprof/prof_unpack").rglob("op_summary_20260823165335.csv")).parent
    out = tmp_path / "cap" / "PROF_A" / "mindstudio_profiler_output"
    shutil.copytree(src, out)
    return out


def test_two_op_summary_exports_in_one_folder_are_refused(ascend, tmp_path):
    """The raw msprof PipeUtilization output plus the op_summary of a later export (the L2Cache
    run's, another timestamp) left in the same folder: both were read as slices of one table, every
    call counted twice (exit 1, "calls 1 -> 2/step", evidence rows from the other file). Now exit 3
    naming both files; nothing is saved."""
    out = _msprof_output(ascend, tmp_path)
    other = next((ascend / "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache").rglob(
        "op_summary_20260823165532.csv"))
    shutil.copy(other, out / other.name)
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, tmp_path / "cap")
    assert r.exit_code == 3, r.output
    assert "2 exports (op_summary_20260823165335.csv, op_summary_20260823165532.csv)" in r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_op_summary_slices_must_be_of_one_export(ascend, tmp_path):
    """A sliced export beside an unsliced one (slice 0 twice), or slice stamps that fall as the
    slice number rises: exit 3. msprof stamps each slice when it writes it, so the stamps of one
    export may differ (seventh audit round: a real export of over 1M rows was refused); slices in
    one pass stay one table (tests/test_ingest_db.py, tests/test_audit_round7.py)."""
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.load import load_capture
    import pytest
    out = _msprof_output(ascend, tmp_path)
    whole = out / "op_summary_20260823165335.csv"
    lines = whole.read_text(encoding="utf-8").splitlines()
    (out / "op_summary_slice_0_20260823165335.csv").write_text("\n".join(lines[:3]) + "\n")
    with pytest.raises(InvalidCaptureError, match="a sliced export .* beside an unsliced one"):
        load_capture(tmp_path / "cap")
    whole.unlink()
    (out / "op_summary_slice_0_20260823165335.csv").rename(out / "op_summary_slice_0_20260823170000.csv")
    (out / "op_summary_slice_1_20260823165335.csv").write_text("\n".join([lines[0], *lines[3:5]]) + "\n")
    with pytest.raises(InvalidCaptureError, match=r"slice stamps that fall as the slice number rises "
                                                  r"\(20260823170000 then 20260823165335\)"):
        load_capture(tmp_path / "cap")
    (out / "op_summary_slice_1_20260823165335.csv").rename(out / "op_summary_slice_1_20260823170004.csv")
    assert len(load_capture(tmp_path / "cap").ranks[0].kernels.df) == 2 + len(lines[3:5])


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
    r = _run("baseline", "save", "--name", "x", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "op_statistic.csv, operator_details.csv, l2_cache.csv (derived from the same kernel tasks) are present" in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_the_real_partial_rank_is_still_partial(ascend):
    from perfgate.ingest.load import load_capture
    cap = load_capture(ascend / "msinsight/test/st/level2", with_trace="never")
    part = [rc for rc in cap.ranks if rc.kernels is None]
    assert [rc.rank for rc in part] == [1]


def test_a_step_trace_step_that_is_no_integer_is_a_bad_cell(copy_capture, tmp_path):
    """step_trace_time.csv Step '50.0' (what a pandas float round trip writes): with the timeline
    read it was "files not from one capture", and with --trace never PASS with six step metrics
    gone; kernel_details.csv's '50.0' is exit 3 naming the cell. Now step_trace_time.csv's is too."""
    cap = copy_capture("level1", "s")
    st = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    lines = st.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("50,", "50.0,", 1)
    st.write_text("".join(lines))
    for trace in ("never", "always"):
        r = _run("fingerprint", cap, "--trace", trace, "-o", tmp_path / f"fp_{trace}.json")
        assert r.exit_code == 3, r.output
        assert "step_trace_time.csv row 1: Step is not an integer step id" in r.output and "'50.0'" in r.output


def test_an_error_quoting_a_damaged_line_writes_no_control_bytes(copy_capture, tmp_path):
    """A kernel_details.csv with a NUL-filled tail, or a row holding terminal escapes: exit 3, and
    the error's excerpt of the bad line (from the CSV parser) put 96 NUL bytes on the console and
    the Markdown report (the PR comment body), and 3 ESC bytes in the Markdown. Now every error
    text writes a control character as its escape (a run once, with its length)."""
    base = copy_capture("level1", "base")
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "m", "--baseline-dir", bl, base).exit_code == 0
    nul = copy_capture("level1", "nul")
    with open(nul / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "ab") as f:
        f.write(b"\0" * 4096)
    esc = copy_capture("level1", "esc")
    with open(esc / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "ab") as f:
        f.write(b"50,\x1b[2J\x1b[31mPWNED\x1b[0m,x\r\n")
    for cap in (nul, esc):
        out = tmp_path / f"o_{cap.name}"
        r = _run("check", "--baseline", "m", "--baseline-dir", bl, cap, "--out", out)
        assert r.exit_code == 3, r.output
        for text in (r.output.encode(), (out / "perfgate-report.md").read_bytes(),
                     (out / "perfgate-junit.xml").read_bytes(), (out / "perfgate-result.json").read_bytes()):
            assert b"\0" not in text and b"\x1b" not in text
    assert "\\x1b" in (tmp_path / "o_esc" / "perfgate-report.md").read_text()


def test_printable_escapes_controls_and_keeps_text():
    from perfgate.errors import printable
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("x" + "\0" * 96 + "y") == "x\\x00×96y"
    assert printable("tab\tand\nnewline, ü, 中") == "tab\tand\nnewline, ü, 中"
    assert printable("\x9b31m") == "\\x9b31m" and printable(None) is None and printable(3) == 3


def test_a_communication_json_from_another_capture_is_refused(copy_capture, text_captures):
    """level2's rank-0 communication.json copied into level1: its ops start ~3,591 s after
    profiler_info_0's collectionTimeEnd. It passed (exit 0), comm.wait_ratio and bandwidth read
    from the foreign file. Now exit 3, as a kernel row outside the collection window is."""
    cap = copy_capture("level1", "c")
    shutil.copy(text_captures / "level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json",
                cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")
    r = _run("fingerprint", cap, "--trace", "never", "-o", cap.parent / "fp.json")
    assert r.exit_code == 3, r.output
    assert "communication.json" in r.output and "Start Timestamp(us)" in r.output and "outside the collection window" in r.output


def _db_level1(ascend, tmp_path):
    cap = tmp_path / "db"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", cap)
    return cap


def test_swapped_db_output_folders_are_refused(ascend, tmp_path):
    """db/level1 with the two ranks' ASCEND_PROFILER_OUTPUT folders swapped (profiler_info files
    stay): rank 0's folder held ascend_pytorch_profiler_1.db (RANK_DEVICE_MAP [(1, 1)]) and was
    read as rank 0 (exit 0, rank 1's warnings reported as rank 0's). Now exit 3 naming both facts."""
    cap = _db_level1(ascend, tmp_path)
    a, b = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT", cap / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT"
    a.rename(tmp_path / "o0")
    b.rename(a)
    (tmp_path / "o0").rename(b)
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "ascend_pytorch_profiler_1.db: holds another rank than its folder: its file name says rank 1; " \
           "RANK_DEVICE_MAP says rank 1, the folder rank 0" in r.output


def test_a_db_export_of_two_devices_is_refused(ascend, tmp_path):
    """Half of a DB export's TASK rows on deviceId 1: summed into one rank (exit 0), while the
    same in kernel_details.csv is exit 3 ("holds 2 devices in one rank folder")."""
    import sqlite3
    cap = _db_level1(ascend, tmp_path)
    db = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute("update TASK set deviceId = 1 where rowid % 2 = 0")
    con.commit()
    con.close()
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "TASK holds 2 devices in one rank folder (deviceId 0, 1)" in r.output, r.output


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
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "RANKS_FROM_DIFFERENT_RUNS: rank 0's kernels end 3,591 s before rank 1's begin" in r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_ranks_of_one_run_keep_passing_without_profiler_info(copy_capture, tmp_path):
    cap = copy_capture("level1", "one")
    (cap / "rank1_ascend_pt/profiler_info_1.json").unlink()
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", tmp_path / "bl", cap)
    assert r.exit_code == 0, r.output


def test_a_link_naming_a_rank_folder_is_read_once(copy_capture, tmp_path):
    """`ln -s rank1_ascend_pt latest` in a run folder: exit 3 "two folders claim rank 1", though
    it is one folder; `ln -s . self` gave "…/self/self/self/… lies more than 6 folder levels
    below". Each is read once now, with a warning, and the fingerprint is the plain folder's."""
    import os
    plain = copy_capture("level1", "plain")
    assert _run("fingerprint", plain, "-o", tmp_path / "fp0.json").exit_code == 0
    want = json.loads((tmp_path / "fp0.json").read_text())["metrics"]
    for name, target in (("latest", "rank1_ascend_pt"), ("self", ".")):
        cap = copy_capture("level1", f"with_{name}")
        os.symlink(target, cap / name)
        r = _run("fingerprint", cap, "-o", tmp_path / f"fp_{name}.json")
        assert r.exit_code == 0, r.output
        got = json.loads((tmp_path / f"fp_{name}.json").read_text())
        assert got["metrics"] == want
        assert any("name a folder already read" in w and "read once" in w for w in got["warnings"]), got["warnings"]


def test_a_rank_folder_named_for_another_rank_is_said(text_captures, tmp_path):
    """A folder rank3_ascend_pt holding profiler_info_1.json was read as rank 1 with no word."""
    cap = tmp_path / "c"
    cap.mkdir()
    shutil.copytree(text_captures / "level1/rank1_ascend_pt", cap / "rank3_ascend_pt")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp.json").read_text())
    assert fp["config"]["ranks"] == [1]
    assert any("folder rank3_ascend_pt is named for rank 3 but holds rank 1" in w for w in fp["warnings"])


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
