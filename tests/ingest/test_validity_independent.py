"""Independent captures for the validity model, built by a tester who did not write the fix.

Each test mutates a copy of a real capture (copied into ``tmp_path`` at run time; the shared
fixtures are never changed or committed) into one member of a fault kind of the validity model
(time bases, devices, rank coverage, values no profiler writes, raw msprof, typed trace mode),
runs the ``perfgate`` CLI on it as a user would, and asserts the behaviour the files prove right:
a right value, exit 3 naming the file (and row/column where one row is at fault), or exit 4
naming the ranks. Where perfgate is wrong today the test is ``xfail(strict=True)`` with the wrong
behaviour stated in its reason.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

HOUR_US = 3600e6
DAY_US = 86400e6
TEXT_REL = Path("msinsight/test/data/pytorch/text")
ST_REL = Path("msinsight/test/st/level2")
MSPROF_REL = Path("vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization")
OUT = "ASCEND_PROFILER_OUTPUT"


# ---------------------------------------------------------------- helpers
def _run(*args):
    """Run the perfgate CLI (PYTHONPATH inherited, so the worktree's copy runs)."""
    p = subprocess.run([sys.executable, "-m", "perfgate", *map(str, args)],
                       capture_output=True, text=True, env=dict(os.environ))
    return p.returncode, p.stdout, p.stderr


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:  # the shared fixtures are read-only
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _write_rows(path: Path, rows) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\r\n").writerows(rows)


def _us(x: float) -> str:
    """A time cell as torch_npu/msprof write it: 3 decimals, trailing TAB."""
    return f"{x:.3f}\t"


def _kd(cap: Path, rank: int = 0) -> Path:
    return cap / f"rank{rank}_ascend_pt" / OUT / "kernel_details.csv"


def _edit_column(path: Path, column: str, fn, rows=None) -> None:
    """Apply ``fn(old_cell) -> new_cell`` to ``column`` on the given data rows (1-based) or all."""
    rs = _rows(path)
    i = rs[0].index(column)
    for n in (rows if rows is not None else range(1, len(rs))):
        rs[n][i] = fn(rs[n][i])
    _write_rows(path, rs)


@pytest.fixture
def level1(tmp_path, text_captures):
    """A fresh copy of the real 2-rank G2025 Level1 capture (trace + kernels + step_trace + comm)."""
    return _copy(text_captures / "level1", tmp_path / "level1")


@pytest.fixture
def st_level2(tmp_path, ascend):
    """A fresh copy of the real st/level2 subset capture (world 4, rank 0 full, rank 1 partial)."""
    return _copy(ascend / ST_REL, tmp_path / "st_level2")


@pytest.fixture
def msprof(tmp_path, ascend):
    """A fresh copy of the real raw msprof PROF_ folder; returns (capture, op_summary path)."""
    src = next((ascend / MSPROF_REL).glob("PROF_*"))
    cap = tmp_path / "msprof"
    _copy(src, cap / src.name)
    return cap, next((cap / src.name / "mindstudio_profiler_output").glob("op_summary_*.csv"))


def _fingerprint(cap, *extra):
    rc, out, err = _run("fingerprint", *extra, cap)
    return rc, (json.loads(out) if rc == 0 else None), err


# ---------------------------------------------------------------- time bases
def test_kernel_table_on_a_clock_hours_away_is_refused_naming_kernel_details(level1):
    """kernel_details.csv of rank 0 shifted by +3 h (a file on another clock) while
    step_trace_time.csv, trace_view.json and profiler_info_0.json keep the real clock:
    the kernels lie outside the rank's collection window -> exit 3 naming kernel_details.csv."""
    _edit_column(_kd(level1), "Start Time(us)", lambda s: _us(float(s) + 3 * HOUR_US))
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "rank0_ascend_pt" in err and "kernel_details.csv" in err and "Start Time(us)" in err


def test_clock_shift_without_a_collection_window_drops_host_figures_only(level1, text_captures):
    """Same +3 h shift, but profiler_info_0.json without start_info/end_info (no window to bound
    by). The host ProfilerStep window in trace_view.json no longer overlaps the device tasks: the
    host-minus-device figures (tail gap) must be left out with a warning naming the time base,
    durations unchanged, pre-launch only from step_trace_time.csv's Preparing (same clock)."""
    _edit_column(_kd(level1), "Start Time(us)", lambda s: _us(float(s) + 3 * HOUR_US))
    info = level1 / "rank0_ascend_pt" / "profiler_info_0.json"
    d = json.loads(info.read_text())
    d.pop("start_info"), d.pop("end_info")
    info.write_text(json.dumps(d))
    rc, fp, err = _fingerprint(level1)
    assert rc == 0, err
    tb = [w for w in fp["warnings"] if "time base" in w]
    assert tb and "rank 0" in tb[0] and "trace_view.json" in tb[0] and "kernel_details.csv" in tb[0]
    m = fp["metrics"]
    assert "step.tail_gap_us{view=rank0}" not in m
    pre = _rows(text_captures / "level1" / "rank0_ascend_pt" / OUT / "step_trace_time.csv")
    preparing = float(pre[1][pre[0].index("Preparing")])
    assert m["step.prelaunch_gap_us{view=rank0}"]["value"] == pytest.approx(preparing, abs=0.01)
    assert m["step.time_us{view=rank0}"]["value"] == pytest.approx(136581.009, abs=0.01)


def test_kernel_starts_in_ms_magnitude_are_refused(level1):
    """Every Start Time(us) of rank 0 divided by 1000 (a writer that put ms in the us column):
    the starts fall ~20 days before the capture's collection window -> exit 3 naming the file
    and column."""
    _edit_column(_kd(level1), "Start Time(us)", lambda s: _us(float(s) / 1000))
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "kernel_details.csv" in err and "Start Time(us)" in err


def test_trace_timestamps_in_ns_are_refused_naming_trace_view(level1):
    """trace_view.json ts multiplied by 1000 (ns written into the us field; a Q02 sibling): the
    host clock cannot be the CSVs' clock -> exit 3 naming trace_view.json."""
    for r in (0, 1):
        tv = level1 / f"rank{r}_ascend_pt" / OUT / "trace_view.json"
        ev = json.loads(tv.read_text())
        for e in ev:
            if e.get("ph") != "M" and "ts" in e:
                e["ts"] = f"{float(e['ts']) * 1000:.3f}"
        tv.write_text(json.dumps(ev))
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "trace_view.json" in err


# ---------------------------------------------------------------- devices
def test_step_trace_with_two_devices_but_kernels_of_one_is_refused_naming_devices(level1):
    """step_trace_time.csv of rank 0 gains a Device_id column with rows for devices 0 and 1,
    kernel_details.csv keeps one device: devices are never summed -> exit 3 naming
    step_trace_time.csv and both devices."""
    st = level1 / "rank0_ascend_pt" / OUT / "step_trace_time.csv"
    rs = _rows(st)
    _write_rows(st, [["Device_id", *rs[0]], ["0", *rs[1]], ["1", *rs[1]]])
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "step_trace_time.csv" in err and "Device_id 0" in err and "1 (first row 2)" in err


def test_raw_op_summary_with_two_devices_is_refused_naming_devices(msprof):
    """Raw msprof op_summary holding every row twice, once as Device_id 0 and once as 1."""
    cap, f = msprof
    rs = _rows(f)
    _write_rows(f, rs + [["1", *r[1:]] for r in rs[1:]])
    rc, _, err = _fingerprint(cap)
    assert rc == 3, err
    assert f.name in err and "Device_id 0" in err and "1 (first row 4)" in err


# ---------------------------------------------------------------- rank coverage
def test_ranks_0_2_checked_against_ranks_0_1_is_incompatible_naming_ranks(level1, tmp_path,
                                                                           text_captures):
    """Baseline: the real level1 ranks {0,1}. Candidate: rank 1's folder relabelled rank 2
    (folder and profiler_info_2.json). Different rank sets are different jobs -> exit 4, the
    message names both rank lists; nothing is judged."""
    store = tmp_path / "store"
    rc, _, err = _run("baseline", "save", "--name", "main", "--baseline-dir", store,
                      "--commit", "a" * 40, "--branch", "main", text_captures / "level1")
    assert rc == 0, err
    r1 = level1 / "rank1_ascend_pt"
    r2 = r1.rename(level1 / "rank2_ascend_pt")
    info = json.loads((r2 / "profiler_info_1.json").read_text())
    info["rank_id"] = 2
    (r2 / "profiler_info_1.json").unlink()
    (r2 / "profiler_info_2.json").write_text(json.dumps(info))
    rc, out, err = _run("check", "--baseline", "main", "--baseline-dir", store,
                        "--out", tmp_path / "out", level1)
    assert rc == 4, out + err
    assert "[0, 1]" in out + err and "[0, 2]" in out + err


def test_two_folders_claiming_one_rank_are_refused(level1):
    """rank1_ascend_pt's profiler_info renamed profiler_info_0.json with rank_id 0: two folders
    claim rank 0 -> exit 3 naming both folders."""
    r1 = level1 / "rank1_ascend_pt"
    info = json.loads((r1 / "profiler_info_1.json").read_text())
    info["rank_id"] = 0
    (r1 / "profiler_info_1.json").unlink()
    (r1 / "profiler_info_0.json").write_text(json.dumps(info))
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "rank 0" in err and "rank0_ascend_pt" in err and "rank1_ascend_pt" in err


def test_rank_read_from_profiler_info_file_name_not_folder_name(st_level2):
    """st/level2 with rank_1_ascend_pt renamed rank_5_ascend_pt (a user's folder name; 5 is
    beyond world_size 4). The rank is profiler_info_1.json's (msprof-analyze's rule), so the
    capture is still ranks {0,1}, rank 1 partial."""
    (st_level2 / "rank_1_ascend_pt").rename(st_level2 / "rank_5_ascend_pt")
    rc, fp, err = _fingerprint(st_level2)
    assert rc == 0, err
    assert fp["provenance"]["ranks"] == [0, 1]
    assert fp["provenance"]["rank_dirs"]["1"] == "rank_5_ascend_pt"


def test_profiler_info_name_and_rank_id_disagreeing_is_refused(st_level2):
    """st/level2 rank 1's profiler_info_1.json with its rank_id field set to "3" (a renamed or
    edited file: the profiler writes profiler_info_<N>.json with rank_id N) -> exit 3 naming the
    file and both ranks."""
    p = st_level2 / "rank_1_ascend_pt" / "profiler_info_1.json"
    d = json.loads(p.read_text())
    d["rank_id"] = "3"
    p.write_text(json.dumps(d))
    rc, _, err = _fingerprint(st_level2)
    assert rc == 3, err
    assert "profiler_info_1.json" in err and "rank 1" in err and "says 3" in err


@pytest.mark.parametrize("value,shown", [("abc", '"abc"'), (1.5, "1.5"), (True, "true"), ([0], "[0]")])
def test_profiler_info_rank_id_that_is_no_integer_is_refused(level1, value, shown):
    """The real level1 rank 0's profiler_info_0.json with rank_id "abc" (or 1.5, true, [0]) used to
    be read as "no rank_id", dropping the file-name check silently -> exit 3 naming the file and
    the field, nothing written."""
    p = level1 / "rank0_ascend_pt" / "profiler_info_0.json"
    d = json.loads(p.read_text())
    d["rank_id"] = value
    p.write_text(json.dumps(d))
    rc, out, err = _run("fingerprint", level1, "--output", level1.parent / "fp.json")
    assert rc == 3, err
    assert f"rank0_ascend_pt/profiler_info_0.json: field rank_id must be an integer (the rank), found {shown}" in err
    assert not (level1.parent / "fp.json").exists()


def test_profiler_info_rank_id_as_decimal_text_is_still_the_rank(level1):
    p = level1 / "rank1_ascend_pt" / "profiler_info_1.json"
    d = json.loads(p.read_text())
    d["rank_id"] = " 1"
    p.write_text(json.dumps(d))
    rc, fp, err = _fingerprint(level1)
    assert rc == 0, err
    assert fp["provenance"]["ranks"] == [0, 1]


def test_rank_folder_with_only_communication_matrix_is_refused(st_level2):
    """st/level2 rank 1 left with only communication_matrix.json: nothing usable -> exit 3
    naming that rank's folder."""
    for p in list((st_level2 / "rank_1_ascend_pt").rglob("*")):
        if p.is_file() and p.name != "communication_matrix.json":
            p.unlink()
    rc, _, err = _fingerprint(st_level2)
    assert rc == 3, err
    assert "rank_1_ascend_pt" in err


# ---------------------------------------------------------------- values no profiler writes
def test_negative_kernel_duration_with_self_checks_is_refused(level1):
    """One kernel row (data row 40) of rank 0 with a negative Duration(us): a value no profiler
    writes -> exit 3 naming kernel_details.csv of rank 0, the row and the column."""
    _edit_column(_kd(level1), "Duration(us)", lambda s: "-" + s, rows=[40])
    rc, _, err = _fingerprint(level1, "--no-trace")
    assert rc == 3, err
    # refused at ingest now (before: by the compute busy-union self-check, naming "rank 0"): the
    # rank's folder, the file, the row and the column
    assert "rank0_ascend_pt" in err and "kernel_details.csv row 40" in err and "Duration(us) is negative" in err


def test_negative_duration_in_raw_msprof_is_refused_naming_row(msprof):
    """raw msprof op_summary row 2 with Task Duration(us) -8.060: no self-check bounds raw msprof
    (the row used to be dropped with a warning and the figures moved: ΣDuration 31.262 us instead
    of 39.322 us); a negative duration is a value no profiler writes (unlike N/A) -> exit 3 naming
    file, row and column (fault kind 5)."""
    cap, f = msprof
    _edit_column(f, "Task Duration(us)", lambda s: "-8.060", rows=[2])
    rc, _, err = _fingerprint(cap)
    assert rc == 3, err
    assert f.name in err and "row 2" in err and "Task Duration(us)" in err


def test_start_time_with_three_significant_digits_is_refused_naming_row(level1):
    """Data row 60's Start Time(us) written 1.74E+15 (a spreadsheet round trip): its digits are
    gone -> exit 3 naming file, row 60 and the column."""
    _edit_column(_kd(level1), "Start Time(us)", lambda s: "1.74E+15", rows=[60])
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "kernel_details.csv row 60" in err and "Start Time(us)" in err


def test_kernel_start_a_day_before_the_capture_is_refused_naming_row(level1):
    """Data row 100 of rank 0 starts one day earlier than written (still Step Id 50): a start
    outside the collection window -> exit 3 naming row 100 and Start Time(us)."""
    _edit_column(_kd(level1), "Start Time(us)", lambda s: _us(float(s) - DAY_US), rows=[100])
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "kernel_details.csv row 100" in err and "Start Time(us)" in err


def test_communication_total_op_info_alone_doubled_does_not_move_figures(level1, text_captures):
    """communication.json 'Total Op Info' Elapse doubled while its 5 ops and the kernel rows are
    untouched: perfgate's communication figures come from the ops, so they must equal the real
    capture's (Σ op Elapse = 105,991.878 us = kernel communication ΣDuration)."""
    p = level1 / "rank0_ascend_pt" / OUT / "communication.json"
    d = json.loads(p.read_text())
    d["step50"]["collective"]["Total Op Info"]["Communication Time Info"]["Elapse Time(ms)"] *= 2
    p.write_text(json.dumps(d))
    rc, fp, err = _fingerprint(level1)
    assert rc == 0, err
    rc0, ref, err0 = _fingerprint(text_captures / "level1")
    assert rc0 == 0, err0
    for k in ("comm.elapse_us{view=rank0}", "comm.wait_ratio{view=rank0}",
              "step.comm_us{view=rank0}"):
        assert fp["metrics"][k]["value"] == ref["metrics"][k]["value"], k
    assert fp["metrics"]["comm.elapse_us{view=rank0}"]["value"] == pytest.approx(105991.878, abs=0.01)


def test_communication_op_longer_than_the_capture_is_refused(level1):
    """One communication.json op of rank 0 with Elapse Time(ms) 1,000,000 (1000 s; Idle raised so
    Elapse = Transit + Wait + Idle still holds) in a rank whose collection window is 683 ms and
    whose kernel communication rows sum to 105,991.876 us. Before the fix: exit 0 with
    comm.elapse_us ~1.0e9 us. A duration longer than the capture's own span is impossible ->
    exit 3 naming communication.json, the op and the field."""
    p = level1 / "rank0_ascend_pt" / OUT / "communication.json"
    d = json.loads(p.read_text())
    g = d["step50"]["collective"]
    op = sorted(k for k in g if k != "Total Op Info")[0]
    t = g[op]["Communication Time Info"]
    t["Idle Time(ms)"] += 1e6 - t["Elapse Time(ms)"]
    t["Elapse Time(ms)"] = 1e6
    p.write_text(json.dumps(d))
    rc, _, err = _fingerprint(level1)
    assert rc == 3, err
    assert "communication.json" in err and f"step50.collective.{op.partition('@')[0]}" in err
    assert "Elapse Time(ms) 1,000,000.000 ms" in err


# ---------------------------------------------------------------- raw msprof
def test_raw_msprof_starts_in_ms_are_refused(msprof):
    cap, f = msprof
    """Raw msprof op_summary with every Task Start Time(us) divided by 1000 (ms magnitudes): the 3
    tasks on stream 46 then overlap (row 2 starts 0.77 us after row 1, which lasts 4.6 us). Before
    the fix: exit 0 with step.wall_us 40.66 us instead of 14,025.881 us. A stream runs its tasks in
    order -> exit 3 naming the file, row 2 and the column."""
    _edit_column(f, "Task Start Time(us)", lambda s: _us(float(s) / 1000))
    rc, _, err = _fingerprint(cap)
    assert rc == 3, err
    assert f.name in err and "row 2" in err and "Task Start Time(us)" in err
    assert "starts before its stream's previous task ends" in err
    assert f.name in err and "Task Start Time(us)" in err


def _two_msprof_ranks(tmp_path, ascend, info_for):
    src = next((ascend / MSPROF_REL).glob("PROF_*"))
    cap = tmp_path / "two_ranks"
    for r in (0, 1):
        d = cap / f"node{r}" / src.name
        _copy(src, d)
        f = next((d / "mindstudio_profiler_output").glob("op_summary_*.csv"))
        rs = _rows(f)
        _write_rows(f, [rs[0]] + [[str(r), *row[1:]] for row in rs[1:]])
        if r in info_for:
            (d / f"device_{r}").mkdir()
            (d / f"device_{r}" / f"info.json.{r}").write_text(json.dumps({"rank_id": r}))
    return cap


def test_prof_folder_missing_device_info_json_is_refused_naming_it(tmp_path, ascend):
    """Two PROF_ folders (Q05 layout) where only rank 0's carries device_0/info.json.0: the
    other's rank cannot be told -> exit 3 naming that PROF_ folder (node1)."""
    cap = _two_msprof_ranks(tmp_path, ascend, info_for=(0,))
    rc, _, err = _fingerprint(cap)
    assert rc == 3, err
    assert "node1" in err and "rank" in err


def test_two_prof_folders_with_info_json_give_ranks_0_and_1(tmp_path, ascend):
    """Control for the test above: both info.json.N present -> ranks 0 and 1, each with the
    3 kernels of the real op_summary."""
    cap = _two_msprof_ranks(tmp_path, ascend, info_for=(0, 1))
    rc, fp, err = _fingerprint(cap)
    assert rc == 0, err
    assert fp["provenance"]["ranks"] == [0, 1]


# ---------------------------------------------------------------- typed trace mode
def test_trace_always_refuses_a_rank_without_trace_view(level1):
    """--trace always on level1 whose rank 1 lost trace_view.json -> exit 3 naming rank 1's
    trace_view.json (rank 0's is still there)."""
    (level1 / "rank1_ascend_pt" / OUT / "trace_view.json").unlink()
    rc, _, err = _fingerprint(level1, "--trace", "always")
    assert rc == 3, err
    assert "rank1_ascend_pt" in err and "trace_view.json" in err


def test_structure_honours_trace_always_on_a_db_export_without_overlap_analysis(ascend):
    """`structure --trace always` on the real Level0 DB export (no OVERLAP_ANALYSIS table):
    the same refusal as fingerprint, exit 3 naming the .db file."""
    db = ascend / "msinsight/test/data/pytorch/db/level0"
    rc, _, err = _run("structure", "--trace", "always", db)
    assert rc == 3, err
    assert "ascend_pytorch_profiler_0.db" in err and "OVERLAP_ANALYSIS" in err
