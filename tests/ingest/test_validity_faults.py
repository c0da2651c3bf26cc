"""Validity model, one test per KIND of fault: devices (Q01), time bases (Q02), lost
device tasks (Q03), values no profiler writes (Q04), raw msprof timelines (Q11), and further
captures of each kind built here as mutations of the real fixtures (tmp copies; nothing is
written into the shared folder)."""
from __future__ import annotations

import csv
import io
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture

pytestmark = pytest.mark.real

MSPROF = ("vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
          "PROF_000001_20260823165326062_00625538CIGQAHCJ")


def _run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={})
    return r.exit_code, r.output


def _csv(path: Path):
    text = path.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    return rows[0], rows[1:]


def _write(path: Path, header, rows):
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *rows])
    path.write_text(buf.getvalue(), encoding="utf-8")


def _refused(tmp_path, cap, needles):
    """fingerprint and baseline save exit 3 naming every needle; nothing is written."""
    code, out = _run("fingerprint", cap)
    assert code == 3 and all(n in out for n in needles), out
    code, out = _run("baseline", "save", "--name", "x", cap, "--baseline-dir", tmp_path / "bl-refused")
    assert code == 3 and all(n in out for n in needles), out
    assert not (tmp_path / "bl-refused" / "x.json").exists()
    return out


def _out(cap, rank=0):
    return cap / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


# -- devices ---------------------------------------------------------------------------------------
def _two_devices(cap):
    """Q01 recipe on rank 0: Device_id column (0) + a copy of every row with Device_id 1 and
    Start + 11,560,000 us; step_trace_time.csv one row per (device, step); no trace."""
    out = _out(cap)
    h, rows = _csv(out / "kernel_details.csv")
    i = h.index("Start Time(us)")
    dev1 = [["1", *r[:i], f"{Decimal(r[i].strip()) + 11560000}", *r[i + 1:]] for r in rows]
    _write(out / "kernel_details.csv", ["Device_id", *h], [["0", *r] for r in rows] + dev1)
    h, rows = _csv(out / "step_trace_time.csv")
    _write(out / "step_trace_time.csv", ["Device_id", *h], [["0", *r] for r in rows] + [["1", *r] for r in rows])
    (out / "trace_view.json").unlink()


def test_q01_several_devices_in_one_rank_are_refused_naming_them(copy_capture, tmp_path):
    cap = copy_capture("level1", "q01")
    _two_devices(cap)
    n = len(_csv(_out(cap) / "kernel_details.csv")[1]) // 2
    _refused(tmp_path, cap, ["kernel_details.csv", "holds 2 devices in one rank folder",
                             f"Device_id 0 (first row 1), 1 (first row {n + 1})", "never sums devices"])


def test_several_devices_in_step_trace_alone_are_refused(ascend, tmp_path):
    """Mutant 1: st/level2 rank 1's step_trace_time.csv with a second device row for step 13."""
    cap = tmp_path / "c"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    p = cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    h, rows = _csv(p)
    _write(p, h, rows + [["3", *rows[0][1:]]])
    _refused(tmp_path, cap, ["step_trace_time.csv", "row 1", "Device_id 1 (first row 1), 3 (first row 2)"])


def test_msprof_op_summary_with_several_devices_is_refused(ascend, tmp_path):
    """Mutant 2: raw msprof op_summary whose last row runs on Device_id 1."""
    prof = tmp_path / "PROF_1"
    shutil.copytree(ascend / MSPROF, prof)
    p = next((prof / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    h, rows = _csv(p)
    rows[-1][h.index("Device_id")] = "1"
    _write(p, h, rows)
    _refused(tmp_path, prof, [p.name, "holds 2 devices", "Device_id 0 (first row 1), 1 (first row 3)"])


# -- values no profiler writes ---------------------------------------------------------------------
def _msprof_copy(ascend, tmp_path):
    prof = tmp_path / "PROF_1"
    shutil.copytree(ascend / MSPROF, prof)
    return prof, next((prof / "mindstudio_profiler_output").glob("op_summary_*.csv"))


def test_q04_duration_of_236_years_is_refused_with_file_row_column(ascend, tmp_path):
    prof, p = _msprof_copy(ascend, tmp_path)
    h, rows = _csv(p)
    rows[0][h.index("Task Duration(us)")] = "7447680000000000.000"
    _write(p, h, rows)
    out = _refused(tmp_path, prof, [p.name, "row 1", "Task Duration(us) 7447680000000000.000 us (236.0 years)",
                                    "longer than the table's own span"])
    assert "regression" not in out.lower()


def test_msprof_start_days_away_from_the_others_is_refused(ascend, tmp_path):
    """Mutant 3: raw msprof (no window recorded) with one start moved 3 days later."""
    prof, p = _msprof_copy(ascend, tmp_path)
    h, rows = _csv(p)
    i = h.index("Task Start Time(us)")
    rows[1][i] = f"{Decimal(rows[1][i].strip()) + 3 * 86400 * 10**6}"
    _write(p, h, rows)
    _refused(tmp_path, prof, [p.name, "row 2", "Task Start Time(us)", "days from the table's median start"])


def test_start_outside_the_collection_window_is_refused(copy_capture, tmp_path):
    """Mutant 4: level1 rank 1 kernel row 7 starts 10 days later (profiler_info window 0.66 s)."""
    cap = copy_capture("level1", "m4")
    p = _out(cap, 1) / "kernel_details.csv"
    h, rows = _csv(p)
    i = h.index("Start Time(us)")
    rows[6][i] = f"{Decimal(rows[6][i].strip()) + 10 * 86400 * 10**6}"
    _write(p, h, rows)
    _refused(tmp_path, cap, ["rank1_ascend_pt", "kernel_details.csv", "row 7", "Start Time(us)",
                             "outside the collection window", "profiler_info_1.json"])


def test_duration_longer_than_the_collection_window_is_refused(copy_capture, tmp_path):
    """Mutant 5: level1 rank 0 row 3 lasts 5 s, the profiler collected for 0.68 s."""
    cap = copy_capture("level1", "m5")
    p = _out(cap) / "kernel_details.csv"
    h, rows = _csv(p)
    rows[2][h.index("Duration(us)")] = "5000000.000"
    _write(p, h, rows)
    _refused(tmp_path, cap, ["kernel_details.csv", "row 3", "Duration(us) 5000000.000 us is longer than the "
                             "whole collection window (683,464 us"])


def test_start_whose_precision_was_lost_is_refused(copy_capture, tmp_path):
    """Mutant 6: level0 rank 0 row 2 start as a spreadsheet writes it (1.73641E+15 us)."""
    cap = copy_capture("level0", "m6")
    p = _out(cap) / "kernel_details.csv"
    h, rows = _csv(p)
    rows[1][h.index("Start Time(us)")] = "1.73641E+15"
    _write(p, h, rows)
    needles = ["kernel_details.csv", "row 2", "Start Time(us) is 1736410000000000 us", "digits were lost"]
    _refused(tmp_path, cap, needles)
    rows[1][h.index("Start Time(us)")] = "1736410000000000.000"  # mutant 6b: the same, written out
    _write(p, h, rows)
    _refused(tmp_path, cap, needles)


# -- time bases ------------------------------------------------------------------------------------
def _shift_trace(cap, rank, relative=True, by_us=0):
    p = _out(cap, rank) / "trace_view.json"
    ev = json.loads(p.read_text())
    t0 = min(Decimal(str(e["ts"])) for e in ev if e.get("ph") != "M" and "ts" in e)
    for e in ev:
        if e.get("ph") != "M" and "ts" in e:
            ts = Decimal(str(e["ts"]))
            e["ts"] = float(ts - t0) if relative else f"{ts + by_us:.3f}"
    p.write_text(json.dumps(ev))


def test_q02_relative_trace_leaves_host_figures_out_with_a_warning(copy_capture, tmp_path, policy):
    cap = copy_capture("level1", "q02")
    for r in (0, 1):
        _shift_trace(cap, r)
    fp = fingerprint_capture(load_capture(cap), policy)
    warn = [w for w in fp.warnings if "different time bases" in w]
    assert len(warn) == 2 and "trace_view.json host step windows and kernel_details.csv device tasks" in warn[0]
    st = load_capture(cap, with_trace=False).ranks[0].step_trace
    pre = fp.metrics["step.prelaunch_gap_us{view=rank0}"].value  # torch_npu Preparing, not host − device
    assert pre == pytest.approx(float(st["preparing_us"].iloc[0])) and pre == pytest.approx(17902.5)
    assert "step.tail_gap_us{view=rank0}" not in fp.metrics
    assert all(f.value < 1e6 for f in fp.findings if f.code == "PRELAUNCH_GAP_HEAVY")  # never 55 years
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", copy_capture("level1", "ref"), "--baseline-dir", bl)[0] == 0
    code, out = _run("check", "--baseline", "main", cap, "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 0 and "different time bases" in out and "e+" not in out, out


def test_trace_on_a_clock_one_hour_off_is_not_combined(copy_capture, policy):
    """Mutant 7: rank 1's timeline written one hour late (absolute, another clock)."""
    cap = copy_capture("level1", "m7")
    _shift_trace(cap, 1, relative=False, by_us=3600 * 10**6)
    fp = fingerprint_capture(load_capture(cap), policy)
    assert [w for w in fp.warnings if w.startswith("rank 1:") and "3,600 s apart" in w]
    assert not [w for w in fp.warnings if w.startswith("rank 0:") and "time bases" in w]
    tails = {s["rank"]: s["tail_us"] for s in fp.detail["steps"]}
    assert tails[1] is None and tails[0] is not None and 0 < tails[0] < 1e6


# -- lost device tasks -----------------------------------------------------------------------------
_NPU = {"Ascend Hardware", "HCCL", "Overlap Analysis", "AI Core Freq", "Stars Soc Info", "Acc PMU", "HBM",
        "LLC", "NPU MEM", "QoS"}
_OVERLAP = {"Computing": "Computing", "Communication": "Communication",
            "Communication(Not Overlapped)": "Communication(Not Overlapped)", "Free": "Free"}


def _lose_head(cap, rank=0, n=20):
    """Q03 recipe: the n earliest device tasks removed from kernel_details.csv, the trace's NPU
    events before that cut (Overlap Analysis clipped at it), their flow ends, and
    step_trace_time.csv recomputed from the clipped Overlap Analysis."""
    out = _out(cap, rank)
    h, rows = _csv(out / "kernel_details.csv")
    i = h.index("Start Time(us)")
    order = sorted(range(len(rows)), key=lambda j: Decimal(rows[j][i].strip()))
    cut = Decimal(rows[order[n]][i].strip())
    drop = set(order[:n])
    _write(out / "kernel_details.csv", h, [r for j, r in enumerate(rows) if j not in drop])
    # the export counts what the device reported: op_statistic.csv lacks the lost tasks too
    from perfgate.synth.mutate import count_in_op_statistic
    count_in_op_statistic(out, h, [r for j, r in enumerate(rows) if j in drop], sign=-1)
    ev = json.loads((out / "trace_view.json").read_text())
    pname = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    keep, sums = [], {k: Decimal(0) for k in _OVERLAP}
    for e in ev:
        if e.get("ph") == "M" or "ts" not in e:
            keep.append(e)
            continue
        ts = Decimal(str(e["ts"]))
        on_npu = pname.get(e.get("pid")) in _NPU
        if e.get("ph") == "f" and ts < cut:
            continue
        if on_npu and pname[e["pid"]] == "Overlap Analysis" and e.get("ph") == "X":
            end = ts + Decimal(str(e.get("dur", 0)))
            if end <= cut:
                continue
            if ts < cut:
                e["ts"], e["dur"] = f"{cut:.3f}", float(end - cut)
            sums[e["name"]] += end - max(ts, cut)
        elif on_npu and ts < cut:
            continue
        keep.append(e)
    (out / "trace_view.json").write_text(json.dumps(keep))
    h, rows = _csv(out / "step_trace_time.csv")
    r = rows[0]
    comp, comm, nov, free = (sums[k] for k in ("Computing", "Communication", "Communication(Not Overlapped)", "Free"))
    for col, v in (("Computing", comp), ("Communication", comm), ("Communication(Not Overlapped)", nov),
                   ("Free", free), ("Overlapped", comm - nov),
                   ("Communication(Not Overlapped and Exclude Receive)", nov)):
        r[h.index(col)] = str(float(v))
    _write(out / "step_trace_time.csv", h, rows)


def test_q03_lost_head_tasks_are_an_invalid_capture_as_baseline_and_as_candidate(copy_capture, tmp_path, policy):
    cap = copy_capture("level1", "q03")
    _lose_head(cap, 0, 20)
    fp = fingerprint_capture(load_capture(cap), policy)
    lost = [f for f in fp.findings if f.code == "DEVICE_TASKS_LOST"]
    assert [(f.rank, f.step) for f in lost] == [(0, "50")]
    assert "44 host launch(es)" in lost[0].message and "22 async_npu + 22 HostToDevice" in lost[0].message
    assert not [c for c in fp.self_checks if c.status == "fail"]  # the files agree: only flows tell
    code, out = _run("baseline", "save", "--name", "main", cap, "--baseline-dir", tmp_path / "bad")
    assert code == 3 and "DEVICE_TASKS_LOST" in out and not (tmp_path / "bad" / "main.json").exists()
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", copy_capture("level1", "full"), "--baseline-dir", bl)[0] == 0
    code, out = _run("check", "--baseline", "main", cap, "--baseline-dir", bl, "--out", tmp_path / "o")
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())   # never a regression: exit 3
    assert code == 3 and doc["verdict"] == "INVALID_CAPTURE" and "DEVICE_TASKS_LOST" in doc["error"]["message"]
    assert not doc["comparisons"]


def test_lost_tasks_on_rank1_only(copy_capture, policy):
    """Mutant 8: 5 head tasks of rank 1 lost; rank 0 complete."""
    cap = copy_capture("level2", "m8")
    _lose_head(cap, 1, 5)
    fp = fingerprint_capture(load_capture(cap), policy)
    lost = [f for f in fp.findings if f.code == "DEVICE_TASKS_LOST"]
    assert [(f.rank, f.step) for f in lost] == [(1, "50")] and lost[0].value > 0


def test_complete_real_captures_have_no_lost_launches(text_captures, policy):
    for lvl in ("level0", "level1", "level2"):
        cap = load_capture(text_captures / lvl)
        assert all(r.lost_launches == {} for r in cap.ranks), lvl


# -- raw msprof timeline (Q11) ---------------------------------------------------------------------
def test_q11_implicit_step_spans_the_device_tasks_and_messages_name_msprof_json(ascend, tmp_path, policy):
    """A raw msprof capture whose timeline starts 15 s before the first kernel (host setup
    counted as Overlap Analysis Free): step time is the device tasks' span, and the self-check
    names msprof_<ts>.json, the file actually read."""
    prof, p = _msprof_copy(ascend, tmp_path)
    h, rows = _csv(p)
    i, d = h.index("Task Start Time(us)"), h.index("Task Duration(us)")
    iv = sorted((Decimal(r[i].strip()), Decimal(r[i].strip()) + Decimal(r[d])) for r in rows)
    pid = 7
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "Overlap Analysis"}}]
    first, last = iv[0][0], iv[-1][1]
    ev.append({"ph": "X", "name": "Free", "pid": pid, "tid": 3, "ts": f"{first - 15_000_000:.3f}",
               "dur": float(15_000_000)})
    prev = None
    for s, e in iv:
        if prev is not None and s > prev:
            ev.append({"ph": "X", "name": "Free", "pid": pid, "tid": 3, "ts": f"{prev:.3f}", "dur": float(s - prev)})
        ev.append({"ph": "X", "name": "Computing", "pid": pid, "tid": 1, "ts": f"{s:.3f}", "dur": float(e - s)})
        prev = e
    tl = p.parent / "msprof_20260823165335.json"
    tl.write_text(json.dumps(ev))
    fp = fingerprint_capture(load_capture(prof), policy)
    wall = float(last - first)
    assert fp.metrics["step.time_us{view=rank0}"].value == pytest.approx(wall, abs=0.01)
    assert fp.metrics["step.free_us{view=rank0}"].value == pytest.approx(wall - float(sum(e - s for s, e in iv)),
                                                                         abs=0.01)
    named = [c for c in fp.self_checks if "Overlap Analysis" in c.message]
    assert named and all("msprof_20260823165335.json" in c.message and "trace_view" not in c.message
                         for c in named)


# -- typed trace mode ------------------------------------------------------------------------------
def test_trace_mode_is_one_enum_with_the_older_spellings():
    from perfgate.terms import TraceMode
    assert [TraceMode.of(v) for v in (True, False, "require", "auto", "always", "never", TraceMode.READ)] == [
        TraceMode.READ, TraceMode.NEVER, TraceMode.ALWAYS, TraceMode.AUTO, TraceMode.ALWAYS, TraceMode.NEVER,
        TraceMode.READ]
    with pytest.raises(ValueError):
        TraceMode.of("sometimes")


def test_trace_always_on_a_db_export_without_overlap_analysis_is_exit_3(ascend, tmp_path, policy):
    db = ascend / "msinsight/test/data/pytorch/db/level0"
    out = _refused_with(tmp_path, db, "always", ["ascend_pytorch_profiler_0.db", "has no OVERLAP_ANALYSIS table",
                                                 "--trace always"])
    assert "ascend_pytorch_profiler_1.db" in out
    from perfgate.app.run import fingerprint_path
    fp = fingerprint_path(db, policy, workers=1)
    assert fp.config["has_trace"] is False  # a DB without OVERLAP_ANALYSIS holds no timeline to check


def _refused_with(tmp_path, cap, mode, needles):
    code, out = _run("fingerprint", "--trace", mode, cap)
    assert code == 3 and all(n in out for n in needles), out
    code, out = _run("baseline", "save", "--name", "x", cap, "--trace", mode, "--baseline-dir", tmp_path / "blt")
    assert code == 3 and all(n in out for n in needles), out
    assert not (tmp_path / "blt" / "x.json").exists()
    return out


def test_structure_honours_the_trace_mode(ascend):
    st = ascend / "msinsight/test/st/level2"
    code, out = _run("structure", st, "--trace", "always")
    assert code == 3 and "trace_view.json" in out and "--trace always" in out, out
    code, out = _run("structure", st)
    assert code == 0, out
    rep = json.loads(out)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1] and rep["ranks"][1]["partial"] == ["step_trace", "comm"]
    assert rep["ranks"][0]["steps"][0]["step"] == "13"


# -- findings need evidence that tells causes apart --------------------------------------------------
def _gap_capture(tmp_path, name):
    """The synthetic step of tests/metrics/test_steps_comm.py with a gap 10.1x ΣDuration (RECOMPILE
    thresholds met) whose following task waited through it: an input-setup-like gap."""
    from perfgate.synth import SynthSpec, write_capture
    from _edits import EXACT
    base = load_capture(write_capture(tmp_path / f"{name}0", SynthSpec(**EXACT)))
    from perfgate.metrics.steps import step_table
    r0 = step_table(base.ranks[0]).iloc[0]
    b = 10.1 * r0["kernel_sum_us"] - (r0["wall_us"] - 3.0)
    return write_capture(tmp_path / name, SynthSpec(**dict(EXACT, bubble_us=round(b, 3))))


def test_a_gap_without_compile_evidence_is_a_plain_gap(tmp_path, policy):
    cap = _gap_capture(tmp_path, "plain")
    fp = fingerprint_capture(load_capture(cap), policy)
    codes = {f.code for f in fp.findings}
    assert "RECOMPILE_SUSPECTED" not in codes and "IDLE_GAP_UNEXPLAINED" in codes
    f = next(f for f in fp.findings if f.code == "IDLE_GAP_UNEXPLAINED")
    assert f.severity == "info" and "no AI CPU or compile task" in f.message and f.value == pytest.approx(10.1, abs=1e-3)


def test_a_gap_ended_by_an_ai_cpu_task_is_recompile_suspected(tmp_path, policy):
    cap = _gap_capture(tmp_path, "aicpu")
    f0 = next(f for f in fingerprint_capture(load_capture(cap), policy).findings if f.code == "IDLE_GAP_UNEXPLAINED")
    row = int(f0.message.split("ends at row ")[1].split()[0])
    p = next(cap.rglob("rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    h, rows = _csv(p)
    rows[row - 1][h.index("Accelerator Core")] = "AI_CPU"
    _write(p, h, rows)
    fp = fingerprint_capture(load_capture(cap, with_trace=False), policy)
    f = next(f for f in fp.findings if f.code == "RECOMPILE_SUSPECTED")
    assert f"evidence: row {row} after the gap runs on the AI CPU" in f.message


def test_q01_with_the_trace_kept_names_the_devices_not_a_foreign_file(copy_capture, tmp_path):
    """Q01 variant: the same two-device tables with trace_view.json left in place: the refusal
    is about the devices, never "the files are not from one capture"."""
    cap = copy_capture("level1", "q01t")
    keep = (_out(cap) / "trace_view.json").read_bytes()
    _two_devices(cap)
    (_out(cap) / "trace_view.json").write_bytes(keep)
    out = _refused(tmp_path, cap, ["holds 2 devices in one rank folder", "Device_id 0 (first row 1)"])
    assert "not from one capture" not in out


def test_raw_msprof_without_timeline_names_the_msprof_files(ascend, tmp_path, policy):
    """Messages name the files actually read: op_summary_*.csv and the msprof_*.json timeline,
    never kernel_details.csv / trace_view.json."""
    prof, p = _msprof_copy(ascend, tmp_path)
    fp = fingerprint_capture(load_capture(prof), policy)
    skipped = [c for c in fp.self_checks if c.name == "comm_equality"]
    assert skipped and "no msprof_*.json timeline with an Overlap Analysis process" in skipped[0].message
    assert f"cannot cross-check {p.name}" in skipped[0].message
    assert any("msprof_*.json timeline not present" in w for w in fp.warnings)


def test_step_trace_value_longer_than_the_window_is_refused(ascend, tmp_path):
    """Mutant 9: the partial rank 1 of st/level2 with Free = 1,000 s (window 1.06 s): refused
    with file, row and column although no kernel table could cross-check it."""
    cap = tmp_path / "c"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    p = cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    h, rows = _csv(p)
    rows[0][h.index("Free")] = "1000000000.0"
    _write(p, h, rows)
    _refused(tmp_path, cap, ["rank_1_ascend_pt", "step_trace_time.csv row 1", "Free 1,000,000,000.000 us is "
                             "longer than the whole collection window", "profiler_info_1.json"])
