"""Synthetic captures at scale: N ranks x M steps x K kernels per step, written vectorised
(numpy + pyarrow), with an optional trace_view.json padded to a target size and streamed to
disk in chunks, so 1,000,000-row kernel tables and multi-GB traces can be generated on a
small machine. Files stay mutually consistent: every self-check passes.

Per step: K compute kernels back to back on stream 2 (lognormal durations, 1-4 us launch
gaps), two allreduces starting halfway through the step (partly hidden by compute). The
Overlap Analysis tracks are derived with :mod:`perfgate.metrics.intervals`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from perfgate.metrics.intervals import gaps, merge, subtract
from perfgate.synth.writer import EPOCH_NS, HEADERS, comm_op_info

FAMILIES = np.array([f"aclnnOp{i:03d}_Kernel{i:03d}" for i in range(200)], dtype=object)
TYPES = np.array([f"Op{i:03d}" for i in range(200)], dtype=object)
CORES = np.array(["AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV"], dtype=object)


def _us(ns: np.ndarray) -> np.ndarray:
    ns = ns.astype(np.int64)
    whole = (ns // 1000).astype(str)
    frac = np.char.zfill((ns % 1000).astype(str), 3)
    return np.char.add(np.char.add(whole, "."), frac)


def _rank(out: Path, rank: int, steps: int, kernels: int, seed: int, trace_mb: float | None, run: int = 0):
    fam = np.random.default_rng([seed, rank]).integers(0, len(FAMILIES), kernels)  # the model: same every run
    rng = np.random.default_rng([seed, rank, run + 1])     # run-to-run noise
    mean = 5.0 + (fam % 17) * 3.0
    rows, st_rows, ov_events, steps_ev, comm_doc = [], [], [], [], {}
    t = EPOCH_NS + rank * 11_500_000_000
    for si in range(steps):
        step = 10 + si
        host = t
        dur = np.maximum(1000, (mean * rng.lognormal(0, 0.03, kernels) * 1000).astype(np.int64))
        gap = rng.integers(1000, 4000, kernels)
        start = host + 500_000 + np.concatenate([[0], np.cumsum(dur + gap)[:-1]])
        end = start + dur
        half = int(start[kernels // 2])
        cdur = np.array([1_500_000, 1_500_000], dtype=np.int64)
        cstart = np.array([half, half + cdur[0] + 2000], dtype=np.int64)
        cend = cstart + cdur
        lo, hi = int(start.min()), int(max(end.max(), cend.max()))
        tracks = {"Computing": merge(start, end), "Communication": merge(cstart, cend),
                  "Communication(Not Overlapped)": subtract(cstart, cend, start, end),
                  "Free": gaps(np.concatenate([start, cstart]), np.concatenate([end, cend]), lo, hi)}
        sums = {k: int((e - s).sum()) / 1000 for k, (s, e) in tracks.items()}
        for tid, (k, (s, e)) in enumerate(tracks.items()):
            ov_events.append((k, tid, s, e))
        rows.append((step, fam, start, dur, cstart, cdur))
        comm = sums["Communication"]
        cno = sums["Communication(Not Overlapped)"]
        st_rows.append([str(step), repr(sums["Computing"]), repr(cno), repr(comm - cno), repr(comm),
                        repr(sums["Free"]), repr((hi - lo) / 1000), "0", repr(cno), repr((lo - host) / 1000)])
        steps_ev.append((step, host, hi + 100_000))
        ops = {f"hcom_allReduce__1_{j}_1@1234": {"Communication Time Info": {   # the kernel rows' names (one name on every rank, as real files)
            "Start Timestamp(us)": float(cstart[j]) / 1000,   # the rank's own clock: no two ranks write one file
            "Elapse Time(ms)": float(cdur[j]) / 1e6, "Transit Time(ms)": float(cdur[j]) / 2e6,
            "Wait Time(ms)": float(cdur[j]) / 2e6, "Idle Time(ms)": 0.0, "Synchronization Time(ms)": 0.0}}
               for j in range(2)}
        total_ms = float(cdur.sum()) / 1e6  # the per-step aggregate real files carry (msprof-analyze reads it)
        ops["Total Op Info"] = comm_op_info(total_ms, total_ms / 2, total_ms / 2, total=True)
        comm_doc[f"step{step}"] = {"collective": ops, "p2p": {}}
        t = hi + 400_000
    # kernel_details.csv (G2025 Level1 header, quoted TAB-guarded timestamps like the real files)
    hdr = HEADERS["g2025_l1"].split(",")
    step_col = np.concatenate([np.full(kernels + 2, str(s), dtype=object) for s, *_ in rows])
    names = np.concatenate([np.concatenate([FAMILIES[f], ["hcom_allReduce__1_0_1", "hcom_allReduce__1_1_1"]])
                            for _, f, *_ in rows])
    types = np.concatenate([np.concatenate([TYPES[f], ["hcom_allReduce_"] * 2]) for _, f, *_ in rows])
    cores = np.concatenate([np.concatenate([CORES[f % 4], ["HCCL"] * 2]) for _, f, *_ in rows])
    starts = np.concatenate([np.concatenate([s, cs]) for _, _, s, _, cs, _ in rows])
    durs = np.concatenate([np.concatenate([d, cd]) for _, _, _, d, _, cd in rows])
    n = len(starts)
    comm_mask = np.char.startswith(names.astype(str), "hcom_")
    cols = {h: pa.array(np.where(comm_mask, "N/A", "0.25" if h.endswith("ratio") else "1.0")) for h in hdr}
    cols["Step Id"] = pa.array(step_col.astype(str))
    cols["Name"] = pa.array(names.astype(str))
    cols["Type"] = pa.array(types.astype(str))
    cols["Accelerator Core"] = pa.array(cores.astype(str))
    cols["Start Time(us)"] = pa.array(np.char.add(_us(starts), "\t"))
    cols["Duration(us)"] = pa.array(_us(durs))
    cols["Wait Time(us)"] = pa.array(np.full(n, "0"))
    cols["Stream ID"] = pa.array(np.where(comm_mask, "N/A", "2"))
    cols["Model ID"] = pa.array(np.full(n, "4294967295"))
    cols["Task ID"] = pa.array(np.arange(n).astype(str))
    cols["Input Shapes"] = pa.array(np.full(n, '"8,2048;2048,2048"'))
    rdir = out / f"rank{rank}_ascend_pt"
    odir = rdir / "ASCEND_PROFILER_OUTPUT"
    odir.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(pa.table([cols[h] for h in hdr], names=hdr), odir / "kernel_details.csv",
                    pacsv.WriteOptions(quoting_style="needed"))
    (rdir / f"profiler_info_{rank}.json").write_text(json.dumps({
        "config": {"experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                                           "_export_type": "text"}},
        # host wall clock: ranks finish together (only device clocks are skewed)
        "end_info": {"collectionTimeEnd": int(t) - rank * 11_500_000_000}, "rank_id": rank}))
    st_hdr = ("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
              "Communication(Not Overlapped and Exclude Receive),Preparing")
    (odir / "step_trace_time.csv").write_text(st_hdr + "\n" + "\n".join(",".join(r) for r in st_rows) + "\n")
    (odir / "communication.json").write_text(json.dumps(comm_doc))
    _write_trace(odir / "trace_view.json", rank, ov_events, steps_ev, trace_mb)
    return n


def _write_trace(path: Path, rank: int, ov_events, steps_ev, trace_mb):
    py, ov = 4_000_000 + rank, 3_170_820_832
    with open(path, "w", encoding="utf-8") as f:
        f.write("[")
        f.write(json.dumps({"ph": "M", "name": "process_name", "pid": py, "tid": 0, "args": {"name": "Python"}}))
        f.write("," + json.dumps({"ph": "M", "name": "process_name", "pid": ov, "tid": 0,
                                  "args": {"name": "Overlap Analysis"}}))
        for step, s, e in steps_ev:
            f.write("," + json.dumps({"ph": "X", "name": f"ProfilerStep#{step}", "pid": py, "tid": py,
                                      "ts": f"{s // 1000}.{s % 1000:03d}", "dur": (e - s) / 1000, "cat": "cpu_op"}))
        for name, tid, s, e in ov_events:
            ts = _us(s)
            du = ((e - s) / 1000).astype(str)
            chunk = ",".join(f'{{"name":"{name}","pid":{ov},"tid":{tid},"ts":"{a}","dur":{b},"ph":"X"}}'
                             for a, b in zip(ts, du))
            if chunk:
                f.write("," + chunk)
        if trace_mb:
            target = int(trace_mb * (1 << 20))
            filler = (',{"ph":"X","name":"aten::add","pid":%d,"tid":%d,"ts":"1736408883000000.000","dur":1.5,'
                      '"cat":"cpu_op","args":{"Sequence number":-1,"Fwd thread id":0,"Call stack":"'
                      % (py, py) + "model.py(1): forward;" * 8 + '"}}')
            block = filler * 2000
            while f.tell() < target:
                f.write(block)
        f.write("]")


def write_scaled(out_dir, *, ranks: int = 1, steps: int = 10, kernels_per_step: int = 1000, seed: int = 0,
                 trace_mb: float | None = None, run: int = 0) -> Path:
    """Write a large synthetic capture; returns ``out_dir``. ``seed`` fixes the model (kernel
    sequence), ``run`` the run-to-run noise (two runs of one model gate as unchanged).
    ``trace_mb`` pads each rank's trace_view.json with realistic host events up to about
    that size (MiB)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        _rank(out, r, steps, kernels_per_step, seed, trace_mb, run)
    return out
