"""Real-shaped captures at scale: one real rank's kernel rows replicated over many steps.

A real capture holds one or a few profiled steps (level1: 191 kernel rows in step 50; the
st/level2 transformer: 2,463 rows in step 13). :func:`replicate_rank` writes a capture whose
every step is a copy of the source rank's rows (same names, types, cores, shapes, durations,
PMU columns, inter-kernel gaps) with fresh times: step ``k`` is shifted by ``k`` x the source
step's period (device span + 1 ms). step_trace_time.csv, communication.json (including the
``"Total Op Info"`` aggregate real files carry) and the trace's kept events (process names,
ProfilerStep#N windows, Overlap Analysis tracks) are replicated the same way, so every
self-check that passes on the source passes on the copy. This is the benchmark shape that
keeps the real number of layers, families and kernels per step while the step count grows.

Times are handled in exact integer nanoseconds (P02): a row's ``Start Time(us)`` text
``"1736408883704643.212"`` becomes ``1736408883704643212`` ns, plus the shift, back to text.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfgate.ingest.aliases import OVERLAP_KINDS, OVERLAP_PROCESS

_GAP_NS = 1_000_000  # between the end of one replicated step and the start of the next
_RANK_SKEW_NS = 11_500_000_000  # device clocks differ per rank (as in perfgate.synth.scale)


def _ns(texts) -> np.ndarray:
    """µs texts (``"1736408883704643.212"``, optional TAB / quotes) -> exact int64 ns."""
    out = []
    for t in texts:
        t = str(t).strip().strip('"').strip()
        whole, _, frac = t.partition(".")
        out.append(int(whole) * 1000 + int((frac + "000")[:3]) if t else 0)
    return np.array(out, dtype=np.int64)


def us_text(ns: np.ndarray) -> pa.Array:
    """int64 ns -> µs text with exactly three decimals (``"1736408883704643.212"``), vectorised."""
    ns = pa.array(np.asarray(ns, dtype=np.int64))
    whole = pc.cast(pc.divide(ns, 1000), pa.string())
    frac = pc.utf8_lpad(pc.cast(pc.subtract(ns, pc.multiply(pc.divide(ns, 1000), 1000)), pa.string()), 3, "0")
    return pc.binary_join_element_wise(whole, frac, ".")


def _tile(col: pa.Array, n: int) -> pa.Array:
    return pa.concat_arrays([col] * n) if n else col.slice(0, 0)


def replicate_rank(src: Path, out_dir, *, steps: int, ranks: int = 1, first_step: int = 1, run: int = 0,
                   trace: bool = True) -> Path:
    """Write ``ranks`` copies of the real rank folder ``src`` (``rank0_ascend_pt``), each with
    ``steps`` steps made of the source's kernel rows; returns ``out_dir``. op_statistic.csv is
    written for the copies (each Count and Total Time ``steps`` times the source's).

    ``run`` shifts every time by ``run`` x 7 s (a second run of the same model: same rows,
    fresh absolute times). ``trace=False`` writes no trace_view.json. The source must hold
    ``ASCEND_PROFILER_OUTPUT/kernel_details.csv`` with one Step Id; step_trace_time.csv,
    communication.json and trace_view.json are replicated when present.
    """
    src = Path(src)
    out = Path(out_dir)
    sdir = src / "ASCEND_PROFILER_OUTPUT"
    kd = sdir / "kernel_details.csv"
    with open(kd, newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f))
    tbl = pacsv.read_csv(kd, convert_options=pacsv.ConvertOptions(  # every cell as its exact text
        column_types={h: pa.string() for h in header}, strings_can_be_null=False))
    n = tbl.num_rows
    start = _ns(tbl.column("Start Time(us)").to_pylist())
    dur = _ns(tbl.column("Duration(us)").to_pylist())
    lo, hi = int(start.min()), int((start + dur).max())
    st_path = sdir / "step_trace_time.csv"
    st_lines = st_path.read_text().splitlines() if st_path.is_file() else []
    st_hdr = st_lines[0].split(",") if st_lines else []
    st_row = st_lines[1].split(",") if len(st_lines) > 1 else []
    if st_row:  # the step's host span reaches back over its Preparing time
        lo -= int(float(st_row[st_hdr.index("Preparing")]) * 1000) if "Preparing" in st_hdr else 0
    tab = "\t" if "\t" in str(tbl.column("Start Time(us)")[0]) else ""
    cm_path = sdir / "communication.json"
    comm = json.loads(cm_path.read_text()) if cm_path.is_file() else None
    src_trace = None
    if trace and (sdir / "trace_view.json").is_file():
        from perfgate.ingest.trace import read_trace
        src_trace = read_trace(sdir / "trace_view.json")
        if len(src_trace.steps):  # the host ProfilerStep window is wider than the device span
            lo = min(lo, int(src_trace.steps["start_ns"].min()))
            hi = max(hi, int(src_trace.steps["end_ns"].max()))
        if len(src_trace.overlap):
            lo = min(lo, int(src_trace.overlap["start_ns"].min()))
            hi = max(hi, int(src_trace.overlap["end_ns"].max()))
    period = hi - lo + _GAP_NS
    offs = np.arange(steps, dtype=np.int64) * period
    for r in range(ranks):
        shift = r * _RANK_SKEW_NS + run * 7_000_000_000
        rdir = out / f"rank{r}_ascend_pt"
        odir = rdir / "ASCEND_PROFILER_OUTPUT"
        odir.mkdir(parents=True, exist_ok=True)
        cols = {c: _tile(tbl.column(c).combine_chunks(), steps) for c in tbl.column_names}
        step_ids = np.repeat(np.arange(first_step, first_step + steps), n).astype(str)
        cols["Step Id"] = pa.array(step_ids)
        starts = np.tile(start, steps) + np.repeat(offs, n) + shift
        cols["Start Time(us)"] = pc.binary_join_element_wise(us_text(starts), pa.scalar(tab), "") if tab \
            else us_text(starts)
        if "Device_id" in cols:
            cols["Device_id"] = pa.array(np.full(n * steps, str(r)))
        pacsv.write_csv(pa.table(list(cols.values()), names=list(cols)), odir / "kernel_details.csv",
                        pacsv.WriteOptions(quoting_style="needed"))
        if st_row:
            si = st_hdr.index("Step")
            rows = []
            for k in range(steps):
                row = list(st_row)
                row[si] = str(first_step + k)
                if "Device_id" in st_hdr:
                    row[st_hdr.index("Device_id")] = str(r)
                rows.append(",".join(row))
            (odir / "step_trace_time.csv").write_text(st_lines[0] + "\n" + "\n".join(rows) + "\n")
        if (sdir / "op_statistic.csv").is_file():
            _write_op_statistic(sdir / "op_statistic.csv", odir / "op_statistic.csv", steps)
        if comm is not None:
            (odir / "communication.json").write_text(
                _comm_steps(next(iter(comm.values())), (offs + shift) / 1000.0, first_step))
        if src_trace is not None:
            _write_trace(odir / "trace_view.json", src_trace, offs + shift, first_step, r)
        for f in src.glob("profiler_*.json"):
            name = f.name.replace("_0.json", f"_{r}.json") if f.name.startswith("profiler_info") else f.name
            info = json.loads(f.read_text())
            if isinstance(info, dict) and "rank_id" in info:
                info["rank_id"] = r
            end = info.get("end_info") if isinstance(info, dict) else None
            if isinstance(end, dict) and isinstance(end.get("collectionTimeEnd"), int) \
                    and isinstance(end.get("MonotonicTimeEnd"), int):
                # the collection window (perfgate.ingest.validity.collection_window) moves by the
                # shift and grows by the added steps, so every replicated time lies inside it
                end["collectionTimeEnd"] += int(offs[-1]) + shift
                end["MonotonicTimeEnd"] += int(offs[-1])
            dist = info.get("distributed_args") if isinstance(info, dict) else None
            if isinstance(dist, dict):  # the copy is a job of `ranks` ranks
                dist.update(rank=r, world_size=ranks)
                info.pop("parallel_group_info", None)
            (rdir / name).write_text(json.dumps(info, indent=1))
    return out


def _write_op_statistic(src: Path, dst: Path, steps: int) -> None:
    """op_statistic.csv of ``steps`` copies of the source's step: Count and Total Time(us) times
    ``steps`` (exact decimals), Min / Avg / Max and Ratio(%) as they were."""
    from decimal import Decimal
    with open(src, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    ci, ti = head.index("Count"), head.index("Total Time(us)")
    for r in rows[1:]:
        r[ci] = str(int(r[ci]) * steps)
        r[ti] = str(Decimal(r[ti].strip()) * steps)
    with open(dst, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def _comm_steps(one: dict, offs_us: np.ndarray, first_step: int) -> str:
    """communication.json of ``len(offs_us)`` steps, each the source step ``one`` with every op's
    ``Communication Time Info.Start Timestamp(us)`` moved by that step's offset (us), as the
    kernel rows move: each op starts inside the replicated collection window
    (:func:`perfgate.ingest.validity.check_comm_values`)."""
    infos = [op["Communication Time Info"] for kind in one.values() if isinstance(kind, dict)
             for op in kind.values() if isinstance(op, dict)
             and isinstance(op.get("Communication Time Info"), dict)
             and isinstance(op["Communication Time Info"].get("Start Timestamp(us)"), (int, float))]
    base = [i["Start Timestamp(us)"] for i in infos]
    parts = []
    try:
        for k, d in enumerate(offs_us.tolist()):
            for i, b in zip(infos, base):
                i["Start Timestamp(us)"] = b + d
            parts.append(f'"step{first_step + k}":' + json.dumps(one))
    finally:
        for i, b in zip(infos, base):
            i["Start Timestamp(us)"] = b
    return "{" + ",".join(parts) + "}"


def _write_trace(path: Path, tr, offs: np.ndarray, first_step: int, rank: int) -> None:
    """The kept events of the source trace (process names, ProfilerStep#N, Overlap Analysis
    tracks) once per step, shifted by ``offs``; written in one pass per step block."""
    names = {v: k for k, v in OVERLAP_KINDS.items()}
    ov_pid = next((p for p, nm in tr.processes.items() if nm == OVERLAP_PROCESS), 3_170_820_832)
    py_pid = next((p for p, nm in tr.processes.items() if nm != OVERLAP_PROCESS), 4_000_000 + rank)
    head = [json.dumps({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": nm}})
            for p, nm in tr.processes.items()]
    ov = tr.overlap
    kinds = ov["kind"].map(names).to_numpy(dtype=object) if len(ov) else np.zeros(0, dtype=object)
    tids = {k: i for i, k in enumerate(OVERLAP_KINDS)}
    s0 = ov["start_ns"].to_numpy(np.int64)
    d0 = ov["dur_ns"].to_numpy(np.int64)
    dtext = np.array(us_text(d0).to_pylist(), dtype=object)
    steps0 = tr.steps
    with open(path, "w", encoding="utf-8") as f:
        f.write("[" + ",".join(head))
        for k, off in enumerate(offs.tolist()):
            for _, srow in steps0.head(1).iterrows():
                s = int(srow["start_ns"]) + off
                f.write("," + json.dumps({"ph": "X", "name": f"ProfilerStep#{first_step + k}", "pid": py_pid,
                                          "tid": py_pid, "ts": f"{s // 1000}.{s % 1000:03d}",
                                          "dur": (int(srow["end_ns"]) - int(srow["start_ns"])) / 1000,
                                          "cat": "cpu_op", "args": {}}))
            ts = us_text(s0 + off).to_pylist()
            if ts:
                f.write("," + ",".join(
                    f'{{"name":"{nm}","pid":{ov_pid},"tid":{tids[nm]},"ts":"{a}","dur":{b},"ph":"X"}}'
                    for nm, a, b in zip(kinds, ts, dtext)))
        f.write("]")
