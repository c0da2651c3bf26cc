"""Files of one capture that disagree, or a capture that lost tasks, fail closed: ``check``,
``baseline save`` and ``history record`` exit 3 naming the file (and row or slice); nothing is
written. Each case damages a copy of a real capture (nothing is written under ../shared):

* step_trace_time.csv naming another Device_id than every kernel row (st/level2 rank 0);
* a rank folder that is a byte copy of another rank's, its communication.json left out (level1);
* another rank's op_statistic.csv copied alone beside a rank's kernel table (level2);
* device tasks lost in the middle of the step, at its tail, or every HCCL task (level1): their
  rows, Ascend Hardware events and flow ends gone, op_statistic.csv counting them no more;
* the last op_summary slice of a sliced raw msprof export lost, its op_statistic counting it;
* an op_summary slice carrying another export's (L2Cache, 37-column) header.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from perfgate.synth.mutate import count_in_op_statistic
from _refusals import assert_refused_everywhere, saved_main

pytestmark = pytest.mark.real

ST_LEVEL2 = "msinsight/test/st/level2"
PIPE = ("vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
        "PROF_000001_20260823165326062_00625538CIGQAHCJ/mindstudio_profiler_output")
L2CACHE = ("vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache/PROF_000001_20260823165523228_00627338KRCOPCPN/"
           "mindstudio_profiler_output/op_summary_20260823165532.csv")


def _csv(path: Path):
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))
    return rows[0], rows[1:]


def _write(path: Path, header, rows):
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *rows])
    path.write_text(buf.getvalue(), encoding="utf-8")


def _out(cap: Path, rank: int) -> Path:
    return cap / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


# -- one device per rank folder: step_trace_time.csv and the kernel table name the same one -------
def test_step_trace_of_another_device_is_refused_naming_both_files(ascend, tmp_path):
    """st/level2 rank 0: every kernel row runs on Device_id 0; its step_trace_time.csv row says
    Device_id 1 (rank 1's). Was exit 0 and saved as a baseline."""
    bl = saved_main(ascend / ST_LEVEL2, tmp_path / "bl")
    cap = tmp_path / "cap"
    shutil.copytree(ascend / ST_LEVEL2, cap)
    p = cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    h, rows = _csv(p)
    assert rows[0][h.index("Device_id")] == "0"
    rows[0][h.index("Device_id")] = "1"
    _write(p, h, rows)
    assert_refused_everywhere(cap, bl, tmp_path, [
        "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv row 1", "says Device_id 1",
        "every row of kernel_details.csv runs on Device_id 0"])


# -- a rank folder copied from another rank ---------------------------------------------------------
def test_a_rank_folder_copied_from_another_rank_is_refused(copy_capture, tmp_path):
    """level1's rank 1 replaced by a byte copy of rank 0's folder (its profiler_info renumbered,
    its communication.json left out, so the shared-communication refusal cannot see it). Was
    exit 0 and saved: two ranks cannot run the same tasks at the same ns starts."""
    cap = copy_capture("level1", "copied")
    bl = saved_main(copy_capture("level1", "intact"), tmp_path / "bl")
    shutil.rmtree(cap / "rank1_ascend_pt")
    dst = cap / "rank1_ascend_pt"
    shutil.copytree(cap / "rank0_ascend_pt", dst)
    info = json.loads((dst / "profiler_info_0.json").read_text())
    info["rank_id"] = 1
    (dst / "profiler_info_1.json").write_text(json.dumps(info))
    (dst / "profiler_info_0.json").unlink()
    (dst / "ASCEND_PROFILER_OUTPUT/communication.json").unlink()
    assert_refused_everywhere(cap, bl, tmp_path, [
        "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "is byte for byte the kernel_details.csv of rank 0",
        "two ranks cannot run the same tasks at the same times"])


def test_another_ranks_op_statistic_is_refused_naming_its_row(copy_capture, tmp_path):
    """level2: rank 0's op_statistic.csv copied alone into rank 1's folder. Every (OP Type, Core
    Type) pair counts the same tasks as rank 1's kernel table, but rank 0's times: was exit 0 and
    saved (a ΣDuration that differs with equal counts only warned)."""
    cap = copy_capture("level2", "copied")
    bl = saved_main(copy_capture("level2", "intact"), tmp_path / "bl")
    shutil.copyfile(_out(cap, 0) / "op_statistic.csv", _out(cap, 1) / "op_statistic.csv")
    assert_refused_everywhere(cap, bl, tmp_path, [
        "self-check op_statistic_vs_kernels failed on rank 1",
        "(AdaptiveAvgPool3d, AI_VECTOR_CORE): 1 task(s) 19.220 us in "
        "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv (its data row 19, line 20), 1 row(s) 16.700 us in "
        "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
        "29 more pair(s)", "not this rank's export of these tasks"])


# -- device tasks lost ----------------------------------------------------------------------------
_DEVICE_PROCESSES = ("Ascend Hardware", "HCCL")
_COMM_CORES = ("HCCL", "COMMUNICATION")


def _union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _minus(spans, cut):
    out = []
    for s, e in spans:
        at = s
        for cs, ce in cut:
            if ce > at and cs < e:
                if cs > at:
                    out.append([at, cs])
                at = max(at, ce)
        if at < e:
            out.append([at, e])
    return out


def _overlap_from_rows(out: Path) -> None:
    """Overlap Analysis of the one-step rank rebuilt from its kernel rows as torch_npu derives it
    (Computing: busy union of compute rows; Communication: of communication rows; Not Overlapped:
    communication minus computing; Free: the gaps between the first and last task), and
    step_trace_time.csv's sums with it. On the intact level1 rank 0 it gives the file's own
    values within 0.02 us."""
    h, rows = _csv(out / "kernel_details.csv")
    si, di, ci = h.index("Start Time(us)"), h.index("Duration(us)"), h.index("Accelerator Core")
    spans = {True: [], False: []}
    for r in rows:
        s = Decimal(r[si].strip())
        spans[r[ci].strip() in _COMM_CORES].append((s, s + Decimal(r[di].strip())))
    comp, comm = _union(spans[False]), _union(spans[True])
    busy = _union([tuple(x) for x in comp + comm])
    parts = {"Computing": comp, "Communication": comm, "Communication(Not Overlapped)": _minus(comm, comp),
             "Free": _minus([[busy[0][0], busy[-1][1]]], busy)}
    ev = json.loads((out / "trace_view.json").read_text())
    proc = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    old = [e for e in ev if proc.get(e.get("pid")) == "Overlap Analysis" and e.get("ph") == "X"]
    tid = {e["name"]: e["tid"] for e in old}
    ev = [e for e in ev if not (proc.get(e.get("pid")) == "Overlap Analysis" and e.get("ph") == "X")]
    ev += [{"name": name, "pid": old[0]["pid"], "tid": tid[name], "ts": f"{s:.3f}", "dur": float(e - s), "ph": "X"}
           for name, iv in parts.items() for s, e in iv]
    (out / "trace_view.json").write_text(json.dumps(ev))
    sums = {name: sum((e - s for s, e in iv), Decimal(0)) for name, iv in parts.items()}
    sums["Overlapped"] = sums["Communication"] - sums["Communication(Not Overlapped)"]
    sums["Communication(Not Overlapped and Exclude Receive)"] = sums["Communication(Not Overlapped)"]
    h, rows = _csv(out / "step_trace_time.csv")
    for name, v in sums.items():
        rows[0][h.index(name)] = str(float(v))
    _write(out / "step_trace_time.csv", h, rows)


def _lose_tasks(out: Path, where: str, n: int = 20) -> int:
    """Tasks the device never reported: ``n`` kernel rows in the middle of the step (by start) or
    at its tail, or every HCCL row. Every file derived from the device's tasks agrees: their
    Ascend Hardware / HCCL events and flow ends leave the timeline, Overlap Analysis and
    step_trace_time.csv are rebuilt from the rows left (:func:`_overlap_from_rows`),
    op_statistic.csv counts them no more. Their host launches stay, as does communication.json
    (the host's record of each collective). Returns how many rows were dropped."""
    h, rows = _csv(out / "kernel_details.csv")
    i = h.index("Start Time(us)")
    order = sorted(range(len(rows)), key=lambda j: Decimal(rows[j][i].strip()))
    if where == "middle":
        drop = set(order[len(order) // 2 - n // 2: len(order) // 2 - n // 2 + n])
    elif where == "tail":
        drop = set(order[-n:])
    else:
        core = h.index("Accelerator Core")
        drop = {j for j, r in enumerate(rows) if r[core].strip() in _COMM_CORES}
    starts = {Decimal(rows[j][i].strip()) for j in drop}
    _write(out / "kernel_details.csv", h, [r for j, r in enumerate(rows) if j not in drop])
    count_in_op_statistic(out, h, [r for j, r in enumerate(rows) if j in drop], sign=-1)
    ev = json.loads((out / "trace_view.json").read_text())
    proc = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    keep = [e for e in ev if not ("ts" in e and e.get("ph") in ("X", "f") and proc.get(e.get("pid")) in
                                  _DEVICE_PROCESSES and Decimal(str(e["ts"])) in starts)]
    assert len(keep) < len(ev)
    (out / "trace_view.json").write_text(json.dumps(keep))
    _overlap_from_rows(out)
    return len(drop)


def test_overlap_rebuilt_from_the_intact_rows_is_the_files_own(copy_capture, tmp_path, policy):
    """The recipe's rebuild is faithful: on the intact rank the capture still passes every check."""
    from perfgate.ingest import load_capture
    from perfgate.metrics.fingerprint import fingerprint_capture
    cap = copy_capture("level1", "rebuilt")
    _overlap_from_rows(_out(cap, 0))
    fp = fingerprint_capture(load_capture(cap), policy)
    assert not [c for c in fp.self_checks if c.status == "fail"]
    assert not [f for f in fp.findings if f.code == "DEVICE_TASKS_LOST"]
    saved_main(cap, tmp_path / "bl")


_LOST = "DEVICE_TASKS_LOST: rank 0 step 50:"
_HCCL_LOST = ["self-check comm_ops_vs_kernels failed on rank 0 step 50: rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/"
              "communication.json holds 4 op(s) in this step", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv "
              "has no communication row at all"]


@pytest.mark.parametrize("where, n, trace, needles", [
    ("middle", 20, [], [_LOST, "40 host launch(es) never reached the device", "flow starts without an end in "
                        "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"]),
    ("tail", 20, [], ["self-check comm_ops_vs_kernels failed on rank 0 step 50: op hcom_allReduce__586_1_1 is in "
                      "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json 1 time(s) but among the "
                      "communication rows of rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv 0 time(s)"]),
    # communication.json still lists the 4 collectives the table lost (the timeline read or not)
    ("hccl", 4, [], _HCCL_LOST),
    ("hccl", 4, ["--trace", "never"], _HCCL_LOST),
])
def test_lost_device_tasks_are_refused_by_check_as_by_save(copy_capture, tmp_path, where, n, trace, needles):
    """20 tasks lost mid-step or at the tail, or the 4 HCCL tasks: ``check`` against the intact
    level1 baseline exits 3 as ``baseline save`` does (never a regression blamed on a family
    whose time did not change, nor a communication kind called gone). With the timeline read the
    host launches without a device task tell (DEVICE_TASKS_LOST, in every command's fail-closed
    set); without it communication.json tells for communication tasks. A compute loss the
    device-derived files all agree on is seen only in the timeline's host launches."""
    bl = saved_main(copy_capture("level1", "intact"), tmp_path / "bl")
    cap = copy_capture("level1", where)
    assert _lose_tasks(_out(cap, 0), where, n) == n
    assert_refused_everywhere(cap, bl, tmp_path, needles, trace)
    doc = json.loads((tmp_path / "out" / "perfgate-result.json").read_text())
    assert doc["verdict"] == "INVALID_CAPTURE" and not doc["comparisons"]


# -- sliced raw msprof exports ----------------------------------------------------------------------
def _sliced_export(ascend, tmp_path: Path, slices: int = 3) -> Path:
    """The real PipeUtilization op_summary (3 tasks) written as ``slices`` full slices of one
    export, slice k its rows 1 s * k later, and its op_statistic counting every slice's tasks
    (Count and Total Time x ``slices``). Returns the capture folder (PROF_1)."""
    src = ascend / PIPE
    out = tmp_path / "PROF_1" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    whole = next(src.glob("op_summary_*.csv"))
    h, rows = _csv(whole)
    si = h.index("Task Start Time(us)")
    for k in range(slices):
        moved = [[*r[:si], f"{Decimal(r[si].strip()) + k * 1_000_000}\t", *r[si + 1:]] for r in rows]
        _write(out / f"op_summary_slice_{k}_2026082316533{5 + k}.csv", h, moved)
    sh, srows = _csv(next(src.glob("op_statistic_*.csv")))
    for r in srows:
        r[sh.index("Count")] = str(int(r[sh.index("Count")]) * slices)
        r[sh.index("Total Time(us)")] = str(Decimal(r[sh.index("Total Time(us)")]) * slices)
    _write(out / "op_statistic_20260823165335.csv", sh, srows)
    return tmp_path / "PROF_1"


def test_the_slices_of_one_export_with_their_op_statistic_are_valid(ascend, tmp_path):
    """The sliced export, whole: its op_statistic witnesses all 9 tasks and passes."""
    from perfgate.ingest import load_capture
    from perfgate.metrics.fingerprint import fingerprint_capture
    from perfgate.policy import load_policy
    cap = _sliced_export(ascend, tmp_path / "whole")
    fp = fingerprint_capture(load_capture(cap), load_policy())
    (check,) = [c for c in fp.self_checks if c.name == "op_statistic_vs_kernels"]
    assert check.status == "pass" and "9 task(s)" in check.message, check
    saved_main(cap, tmp_path / "bl")


def test_a_lost_last_slice_is_refused_by_its_op_statistic(ascend, tmp_path):
    """The last slice of a sliced export lost: the two left are full and alike, so no slice rule
    sees it; op_statistic counts 3 more tasks. Was exit 0 (op_statistic was not read beside
    slices), and a later check reported GroupedMatmul calls gone."""
    bl = saved_main(_sliced_export(ascend, tmp_path / "whole"), tmp_path / "bl")
    cap = _sliced_export(ascend, tmp_path / "lost")
    (cap / "mindstudio_profiler_output/op_summary_slice_2_20260823165337.csv").unlink()
    assert_refused_everywhere(cap, bl, tmp_path, [
        "self-check op_statistic_vs_kernels failed on rank 0",
        "(GroupedMatmul, MIX_AIC): 3 task(s)", "op_statistic_20260823165335.csv (its data row 1, line 2), 2 row(s)",
        "(the table is 2 op_summary slices,", "op_summary_slice_1_20260823165336.csv: a slice lost?)"])


def test_a_slice_with_another_exports_header_is_refused_naming_it(ascend, tmp_path):
    """Slice 2 replaced by the L2Cache export's op_summary (37 columns, 3 rows: a full slice):
    was read as one table with the PipeUtilization slices (46 columns), exit 0."""
    bl = saved_main(_sliced_export(ascend, tmp_path / "whole"), tmp_path / "bl")
    cap = _sliced_export(ascend, tmp_path / "mixed")
    out = cap / "mindstudio_profiler_output"
    (out / "op_summary_slice_2_20260823165337.csv").unlink()
    shutil.copy(ascend / L2CACHE, out / "op_summary_slice_2_20260823165337.csv")
    assert_refused_everywhere(cap, bl, tmp_path, [
        "op_summary_slice_2_20260823165337.csv", "has a 37-column header where op_summary_slice_0_20260823165335.csv "
        "has 46 columns", "another export's"])
