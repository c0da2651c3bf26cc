"""Synthetic capture writer.

Writes one ``rank<N>_ascend_pt/`` folder per rank with ``profiler_info_<N>.json`` and an
``ASCEND_PROFILER_OUTPUT/`` holding ``kernel_details.csv``, ``step_trace_time.csv``,
``trace_view.json`` (bare array; Python ProfilerStep#N windows, Ascend Hardware / HCCL task
events, Overlap Analysis tracks) and ``communication.json`` — all mutually consistent, so every
self-check passes. Header generations (``header``): ``g2025_l1`` (46 columns, PipeUtilization,
quoted timestamps with the Excel TAB, CRLF), ``g2025_l0`` (8 columns, Type / Accelerator
Core N/A), ``g2023`` (32 columns, plain numbers), ``g83`` (47 columns with Device_id,
``COMMUNICATION`` core type). Deterministic for a given seed.

The Overlap Analysis tracks are derived exactly as torch_npu does (Computing = merged compute
intervals, Communication = merged communication intervals, Communication(Not Overlapped) =
communication minus compute, Free = the rest of the step's device span).
"""
from __future__ import annotations

import csv
import io
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfgate.metrics.intervals import gaps, merge, subtract

EPOCH_NS = 1_736_408_883_000_000_000  # 2025-01-09, like the G2025 fixtures

# (name, OP type, core type, calls per step, mean duration us)
DEFAULT_FAMILIES = (
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", 4, 410.0),
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE", 16, 250.0),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 12, 20.0),
    ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", 8, 35.0),
    ("aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", 10, 8.0),
    ("aclnnSwiGlu_SwiGluAiCore_SwiGlu", "SwiGlu", "MIX_AIV", 4, 60.0),
    ("trans_TransData", "TransData", "AI_VECTOR_CORE", 6, 12.0),
    ("aclnnInplaceCopy_TensorMoveAiCore_TensorMove", "TensorMove", "AI_VECTOR_CORE", 6, 5.0),
    ("aclnnDropoutGenMaskV2_DSAGenBitMask_DSAGenBitMask", "DSAGenBitMask", "DSA_SQE", 2, 2.0),
    ("aclnnNonzero_NonZeroAiCpu_NonZero", "NonZero", "AI_CPU", 1, 30.0),
)

# A diffusion-like step: a DiT denoising block (attention, matmul, norm, RoPE) then a VAE decoder
# (Conv2D, GroupNorm, Upsample), in this time order with SynthSpec(ordered=True). Sixth element:
# per-family column values (Input Shapes / Input Data Types / PipeUtilization ratios).
DIFFUSION_FAMILIES = (
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", 4, 300.0,
     {"aic_mac_ratio": "0.6", "aic_mte2_ratio": "0.3", "aiv_vec_ratio": "0.2"}),
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE", 8, 200.0,
     {"Input Shapes": '"4096,3072;3072,3072"', "Input Data Types": "DT_BF16;DT_BF16",
      "aic_mac_ratio": "0.8", "aic_mte2_ratio": "0.4", "aiv_vec_ratio": "0"}),
    ("aclnnLayerNorm_LayerNormV4_LayerNormV4", "LayerNormV4", "AI_VECTOR_CORE", 4, 50.0,
     {"aiv_vec_ratio": "0.3", "aiv_mte2_ratio": "0.7", "aic_mac_ratio": "0"}),
    ("aclnnRotaryPositionEmbedding_RotaryPositionEmbedding_RotaryPositionEmbedding", "RotaryPositionEmbedding",
     "AI_VECTOR_CORE", 4, 25.0, {"aiv_vec_ratio": "0.5", "aiv_mte2_ratio": "0.4", "aic_mac_ratio": "0"}),
    ("aclnnConvolution_Conv2D_Conv2D", "Conv2D", "AI_CORE", 6, 150.0,
     {"aic_mac_ratio": "0.7", "aic_mte2_ratio": "0.5", "aiv_vec_ratio": "0"}),
    ("aclnnGroupNorm_GroupNorm_GroupNorm", "GroupNorm", "AI_VECTOR_CORE", 3, 40.0,
     {"aiv_vec_ratio": "0.4", "aiv_mte2_ratio": "0.6", "aic_mac_ratio": "0"}),
    ("aclnnUpsampleNearest2d_ResizeNearestNeighborV2_ResizeNearestNeighborV2", "ResizeNearestNeighborV2",
     "AI_VECTOR_CORE", 2, 30.0, {"aiv_vec_ratio": "0.2", "aiv_mte2_ratio": "0.3", "aiv_mte3_ratio": "0.5",
                                 "aic_mac_ratio": "0"}),
)

# PipeUtilization ratios written for a family without its own (by core type): cube kernels bound
# by aic_mac, vector kernels by aiv_mte2 (memory), MIX kernels by their main unit; other stages 0.
PIPE_BY_CORE = {
    "AI_CORE": {"aic_mac_ratio": "0.6", "aic_mte2_ratio": "0.3", "aic_mte1_ratio": "0.2", "aic_fixpipe_ratio": "0.1",
                "aic_scalar_ratio": "0.1"},
    "AI_VECTOR_CORE": {"aiv_vec_ratio": "0.3", "aiv_mte2_ratio": "0.5", "aiv_mte3_ratio": "0.3", "aiv_scalar_ratio": "0.1"},
    "MIX_AIC": {"aic_mac_ratio": "0.5", "aic_mte2_ratio": "0.3", "aiv_vec_ratio": "0.2", "aiv_mte2_ratio": "0.1"},
    "MIX_AIV": {"aiv_vec_ratio": "0.6", "aiv_mte2_ratio": "0.3", "aic_mac_ratio": "0.1"},
}

HEADERS = {
    "g2025_l1": ("Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
                 "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,"
                 "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,"
                 "aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),"
                 "aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,"
                 "aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,"
                 "aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),"
                 "aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)"),
    "g2025_l0": "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim",
    "g2023": ("Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
              "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,"
              "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),"
              "aic_total_cycles,aic_l0a_read_bw(GB/s),aic_l0a_write_bw(GB/s),aic_l0b_read_bw(GB/s),"
              "aic_l0b_write_bw(GB/s),aic_l0c_read_bw_cube(GB/s),aic_l0c_write_bw_cube(GB/s),aiv_time(us),"
              "aiv_total_cycles,aiv_l0c_read_bw(GB/s),aiv_l0c_write_bw(GB/s)"),
}
HEADERS["g83"] = HEADERS["g2025_l1"].replace("Step Id,Model ID", "Step Id,Device_id,Model ID")


@dataclass(frozen=True)
class SynthSpec:
    """What to generate.

    ``extra_calls`` multiplies a family's calls per step (a count regression, placed in the
    compute stream so Computing grows); ``slowdown`` multiplies its durations (a time
    regression). Both take {family name: factor} and apply to ``inject_ranks`` (None = all).
    ``comm_ops``/``comm_us``: allreduces per step and their duration; ``overlap``: fraction
    of the compute span after which communication starts (0 = fully overlapped from the
    start, 1 = fully exposed at the end). ``jitter``: relative sigma of durations.
    Host-bound shapes: ``gap_dist`` ``exp`` (random launch gaps, mean ``gap_us``) or
    ``fixed`` (every gap exactly ``gap_us``); ``prelaunch_us`` (host step start -> first
    task, random 400-600 us when None); ``tail_us`` (last task -> host step end);
    ``bubble_us`` (one idle gap after the first quarter of the kernels, before any
    communication). ``warmup_factor`` stretches the first step's kernels; ``rank_slowdown``
    ({rank: factor}) stretches every kernel of a rank.

    Noise model of repeated captures (``perfgate.compare.stats``, ``benchmarks/bench_verdicts.py``):
    every kernel duration is ``mean × lognormal(0, jitter)``; with probability
    ``outlier_prob`` a kernel call is an outlier, × uniform(1.5, ``outlier_max``);
    ``comm_drift`` > 1 multiplies every collective's duration on every rank by
    uniform(1, ``comm_drift``) (device-to-device drift of single collectives: up to 2x).
    Different ``seed`` values are repeated captures of one commit. With the defaults (no
    outliers, no drift) the output is the same as before these fields existed.
    """
    ranks: int = 2
    steps: int = 3
    first_step: int = 10
    families: tuple = DEFAULT_FAMILIES
    comm_ops: int = 2
    comm_us: float = 1500.0
    overlap: float = 0.5
    gap_us: float = 3.0
    jitter: float = 0.03
    seed: int = 0
    header: str = "g2025_l1"
    extra_calls: dict = field(default_factory=dict)
    slowdown: dict = field(default_factory=dict)
    inject_ranks: tuple | None = None
    gap_dist: str = "exp"
    prelaunch_us: float | None = None
    tail_us: float = 100.0
    bubble_us: float = 0.0
    warmup_factor: float = 1.0
    rank_slowdown: dict = field(default_factory=dict)
    profiler_level: str = "Level1"
    aic_metrics: str = "ACL_AICORE_PIPE_UTILIZATION"
    torch_npu_version: str | None = None
    cann_version: str | None = None
    # ((name, OP type, core type, mean duration us), ...) in execution order: when given, every
    # step runs exactly this kernel sequence instead of shuffled `families` (extra_calls ignored;
    # see perfgate.synth.transformer)
    sequence: tuple = ()
    ordered: bool = False   # keep the kernels in family order (no shuffle): for phase regions
    outlier_prob: float = 0.0
    outlier_max: float = 3.0
    comm_drift: float = 1.0
    # a pipeline-parallel job: one `families` tuple per stage; the ranks are split into
    # len(stage_families) consecutive blocks of equal size (Megatron's order with TP = 1: rank =
    # stage x DP + DP rank), each block running its stage's kernels. ``pipeline_layout`` also
    # writes each rank's profiler_metadata.json with its pipeline group (parallel_group_info "pp")
    stage_families: tuple = ()
    pipeline_layout: bool = False

    def stage_of(self, rank: int) -> int:
        """The pipeline stage of ``rank`` (0 without ``stage_families``)."""
        n = len(self.stage_families)
        return rank * n // self.ranks if n else 0

    def families_of(self, rank: int) -> tuple:
        """The kernel families ``rank`` runs: its stage's, else ``families``."""
        return self.stage_families[self.stage_of(rank)] if self.stage_families else self.families


LINKS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")


def comm_op_info(elapse_ms: float, transit_ms: float, wait_ms: float, *, start_us: float | None = None,
                 size_mb: float = 0.0, link: str = "HCCS", total: bool = False) -> dict:
    """One communication.json entry shaped like torch_npu's (SCHEMAS.md): ``Communication Time
    Info`` (ms) and ``Communication Bandwidth Info`` with every link (RDMA, HCCS, PCIE, SDMA, SIO),
    traffic on ``link`` (and SDMA, which torch_npu sums the on-chip links into). ``total=True``
    gives the per-step ``"Total Op Info"`` aggregate (no start time, no per-op bandwidth),
    which msprof-analyze reads: without it its compare stops (UnboundLocalError rdma_bandwidth)."""
    time_info = {"Elapse Time(ms)": elapse_ms, "Transit Time(ms)": transit_ms, "Wait Time(ms)": wait_ms,
                 "Synchronization Time(ms)": 0.0, "Idle Time(ms)": max(0.0, elapse_ms - transit_ms - wait_ms),
                 "Wait Time Ratio": round(wait_ms / (wait_ms + transit_ms), 4) if wait_ms + transit_ms else 0,
                 "Synchronization Time Ratio": 0.0}
    if start_us is not None:
        time_info = {"Start Timestamp(us)": start_us, **time_info}
    bw = {}
    for ln in LINKS:
        busy = ln in (link, "SDMA")
        entry = {"Transit Time(ms)": transit_ms if busy else 0, "Transit Size(MB)": size_mb if busy else 0}
        if not total:
            entry["Bandwidth(GB/s)"] = round(size_mb / transit_ms, 4) if busy and transit_ms else 0
            entry["Large Packet Ratio"] = 0
        entry["Size Distribution"] = {}
        bw[ln] = entry
    return {"Communication Time Info": time_info, "Communication Bandwidth Info": bw}


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _rank_timeline(spec: SynthSpec, rank: int, rng: np.random.Generator):
    injected = spec.inject_ranks is None or rank in spec.inject_ranks
    skew = rank * 11_500_000_000  # devices' clocks are not aligned (P17): 11.5 s per rank
    rank_factor = float(spec.rank_slowdown.get(rank, 1.0))
    t = EPOCH_NS + skew
    steps = []
    for si in range(spec.steps):
        step = spec.first_step + si
        host_start = t
        pre = spec.prelaunch_us if spec.prelaunch_us is not None else float(rng.uniform(400, 600))
        cur = t + int(round(pre * 1000))
        calls = []
        for fam in spec.families_of(rank):
            name, typ, core, n, mean = fam[:5]
            extra = fam[5] if len(fam) > 5 else {}
            k = n * (spec.extra_calls.get(name, 1) if injected else 1)
            slow = spec.slowdown.get(name, 1.0) if injected else 1.0
            for _ in range(int(round(k))):
                calls.append((name, typ, core, mean * slow, extra))
        order = np.arange(len(calls)) if spec.ordered else rng.permutation(len(calls))
        if spec.sequence:
            calls = [(n, ty, c, m * (spec.slowdown.get(n, 1.0) if injected else 1.0), {})
                     for n, ty, c, m in spec.sequence]
            order = np.arange(len(calls))
        stretch = rank_factor * (spec.warmup_factor if si == 0 else 1.0)
        bubble_at = len(order) // 4 if spec.bubble_us > 0 else -1
        bubble_end = None
        tasks = []
        last_gap = 0
        for idx, i in enumerate(order):
            name, typ, core, mean, extra = calls[i]
            if idx == bubble_at:  # this gap is exactly bubble_us long
                cur += int(round(spec.bubble_us * 1000)) - last_gap
                bubble_end = cur
            noise = float(rng.lognormal(0.0, spec.jitter))
            if spec.outlier_prob > 0 and rng.random() < spec.outlier_prob:
                noise *= float(rng.uniform(1.5, spec.outlier_max))
            dur = max(1, int(round(mean * stretch * noise * 1000)))
            tasks.append({"name": name, "type": typ, "core": core, "start": cur, "dur": dur, "comm": core == "HCCL",
                          "extra": extra})
            gap = spec.gap_us if spec.gap_dist == "fixed" else float(rng.exponential(spec.gap_us)) + 1.0
            last_gap = int(round(gap * 1000))
            cur += dur + last_gap
        # communication starts with the kernel at fraction `overlap` of the sequence (after the
        # compute end for overlap >= 1), so an inserted bubble shifts it with the kernels after it
        at = int(spec.overlap * len(tasks))
        c_at = tasks[at]["start"] if at < len(tasks) else tasks[-1]["start"] + tasks[-1]["dur"]
        if bubble_end is not None:
            c_at = max(c_at, bubble_end)
        for j in range(spec.comm_ops):
            drift = float(rng.uniform(1.0, spec.comm_drift)) if spec.comm_drift > 1 else 1.0
            dur = max(1, int(round(spec.comm_us * drift * float(rng.lognormal(0.0, spec.jitter)) * 1000)))
            tasks.append({"name": f"hcom_allReduce__{586 + rank}_{j}_1", "type": "hcom_allReduce_",
                          "core": "HCCL", "start": c_at, "dur": dur, "comm": True})
            c_at += dur + 2000
        end = max(x["start"] + x["dur"] for x in tasks)
        steps.append({"step": step, "host_start": host_start,
                      "host_end": end + int(round(spec.tail_us * 1000)), "tasks": tasks})
        t = steps[-1]["host_end"] + 300_000
    return steps


def _overlap_tracks(tasks):
    cs = np.array([x["start"] for x in tasks if not x["comm"]], dtype=np.int64)
    ce = np.array([x["start"] + x["dur"] for x in tasks if not x["comm"]], dtype=np.int64)
    ms = np.array([x["start"] for x in tasks if x["comm"]], dtype=np.int64)
    me = np.array([x["start"] + x["dur"] for x in tasks if x["comm"]], dtype=np.int64)
    lo = int(min(x["start"] for x in tasks))
    hi = int(max(x["start"] + x["dur"] for x in tasks))
    comp = merge(cs, ce)
    comm = merge(ms, me)
    cno = subtract(ms, me, cs, ce)
    free = gaps(np.concatenate([cs, ms]), np.concatenate([ce, me]), lo, hi)
    return {"Computing": comp, "Communication": comm, "Communication(Not Overlapped)": cno,
            "Free": free}, lo, hi


def _kernel_rows(spec, rank, steps):
    hdr = HEADERS[spec.header].split(",")
    tab = spec.header != "g2023"
    rows = []
    task_id = 1000
    for st in steps:
        prev_end = None
        for x in sorted(st["tasks"], key=lambda x: x["start"]):
            task_id += 1
            wait = 0 if prev_end is None else max(0, x["start"] - prev_end)
            prev_end = x["start"] + x["dur"]
            comm = x["comm"]
            core = x["core"]
            if comm and spec.header == "g83":
                core = "COMMUNICATION"
            start = _us(x["start"]) + ("\t" if tab else "")
            v = {
                "Step Id": str(st["step"]), "Device_id": str(rank), "Model ID": "4294967295",
                "Task ID": "N/A" if comm else str(task_id), "Stream ID": "N/A" if comm else "2",
                "Name": x["name"], "Type": x["type"], "OP State": "N/A" if comm else "dynamic",
                "Accelerator Core": core, "Start Time(us)": start, "Duration(us)": _us(x["dur"]),
                "Wait Time(us)": (f"{wait / 1000:.6f}" if spec.header == "g83" else _us(wait)),
                "Block Dim": "0" if comm else "20", "Mix Block Dim": "N/A" if comm else "0",
                "HF32 Eligible": "N/A" if comm else "NO",
                "Input Shapes": "N/A" if comm else '"8,2048;2048,2048"',
                "Input Data Types": "N/A" if comm else "DT_BF16;DT_BF16",
                "Input Formats": "N/A" if comm else "ND;ND",
                "Output Shapes": "N/A" if comm else '"8,2048"',
                "Output Data Types": "N/A" if comm else "DT_BF16", "Output Formats": "N/A" if comm else "ND",
                "Context ID": "N/A",
            }
            if spec.header == "g2025_l0":
                if not comm:
                    v["Type"] = "N/A"
                    v["Accelerator Core"] = "N/A"
                else:
                    v["Type"] = "N/A"
            if not comm:
                # the family's own PMU ratios (else by core type): other stages 0, pipe times =
                # ratio × Duration
                extra = x.get("extra") or PIPE_BY_CORE.get(x["core"], {})
                v.update(extra)
                for h in hdr:
                    if h.endswith("_ratio") and h not in extra:
                        v[h] = "0"
                for h in hdr:
                    stage = h[:-len("_time(us)")] if h.endswith("_time(us)") else None
                    if stage and f"{stage}_ratio" in v:
                        v[h] = f"{float(v[stage + '_ratio']) * x['dur'] / 1000:.3f}"
            for h in hdr:
                if h not in v:
                    v[h] = "N/A" if comm else ("0.25" if h.endswith("ratio") else "1.0")
            rows.append([v[h] for h in hdr])
    return hdr, rows


def _write_csv(path: Path, header, rows, crlf: bool):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n" if crlf else "\n")
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")


def _write_rank(root: Path, spec: SynthSpec, rank: int, steps) -> Path:
    rdir = root / f"rank{rank}_ascend_pt"
    out = rdir / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    info = {"config": {"common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                                         "schedule": {"wait": 0, "active": spec.steps, "warmup": 1,
                                                      "repeat": 1, "skip_first": spec.first_step - 2}},
                       "experimental_config": {"_profiler_level": spec.profiler_level,
                                               "_aic_metrics": spec.aic_metrics,
                                               "_export_type": "text", "_l2_cache": False}},
            # host wall clock: ranks finish together (only device clocks are skewed per rank)
            "end_info": {"collectionTimeEnd": steps[-1]["host_end"] - rank * 11_500_000_000}, "rank_id": rank}
    if spec.torch_npu_version:
        info["torch_npu_version"] = spec.torch_npu_version
    if spec.cann_version:
        info["cann_version"] = spec.cann_version
    (rdir / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4), encoding="utf-8")
    if spec.pipeline_layout and spec.stage_families:
        (rdir / "profiler_metadata.json").write_text(json.dumps(_pipeline_metadata(spec, rank)), encoding="utf-8")

    hdr, rows = _kernel_rows(spec, rank, steps)
    _write_csv(out / "kernel_details.csv", hdr, rows, crlf=spec.header.startswith("g2025"))

    py_pid, hw_pid, hccl_pid, ov_pid = 3_000_000 + rank, 3_170_820_512, 3_170_820_576, 3_170_820_832
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": n}}
          for pid, n in ((py_pid, "Python"), (hw_pid, "Ascend Hardware"), (hccl_pid, "HCCL"),
                         (ov_pid, "Overlap Analysis"))]
    ev += [{"ph": "M", "name": "thread_name", "pid": ov_pid, "tid": i, "args": {"name": n}}
           for i, n in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free"))]
    ev.append({"ph": "M", "name": "thread_name", "pid": hccl_pid, "tid": 0,
               "args": {"name": "Group 0 Communication"}})
    st_rows = []
    comm_doc = {}
    for st in steps:
        ev.append({"ph": "X", "name": f"ProfilerStep#{st['step']}", "pid": py_pid, "tid": py_pid,
                   "ts": _us(st["host_start"]), "dur": (st["host_end"] - st["host_start"]) / 1000,
                   "cat": "cpu_op", "args": {}})
        for x in st["tasks"]:
            pid = hccl_pid if x["comm"] else hw_pid
            ev.append({"ph": "X", "name": x["name"], "pid": pid, "tid": 0 if x["comm"] else 2,
                       "ts": _us(x["start"]), "dur": x["dur"] / 1000,
                       "args": {"Task Type": "HCCL" if x["comm"] else x["core"]}})
        tracks, lo, hi = _overlap_tracks(st["tasks"])
        sums = {}
        for tid, (name, (s, e)) in enumerate(tracks.items()):
            sums[name] = int((e - s).sum())
            for a, b in zip(s.tolist(), e.tolist()):
                ev.append({"ph": "X", "name": name, "pid": ov_pid, "tid": tid, "ts": _us(a),
                           "dur": (b - a) / 1000})
        comp, comm, cno, free = (sums[k] / 1000 for k in tracks)
        st_rows.append([str(st["step"]), f"{comp}", f"{cno}", f"{comm - cno}", f"{comm}", f"{free}",
                        f"{(hi - lo) / 1000}", "0", f"{cno}", f"{(lo - st['host_start']) / 1000}"])
        ops = {}
        total = 0.0
        for j, x in enumerate(t for t in st["tasks"] if t["comm"]):
            ms = x["dur"] / 1e6
            total += ms
            ops[f"{x['name']}@1752268860347708058{rank}"] = {
                "Communication Time Info": {"Start Timestamp(us)": float(_us(x["start"])),
                                            "Elapse Time(ms)": ms, "Transit Time(ms)": ms * 0.3,
                                            "Wait Time(ms)": ms * 0.7, "Synchronization Time(ms)": 0.0,
                                            "Idle Time(ms)": 0.0, "Wait Time Ratio": 0.7,
                                            "Synchronization Time Ratio": 0.0},
                "Communication Bandwidth Info": {}}
        ops["Total Op Info"] = comm_op_info(total, total * 0.3, total * 0.7, total=True)
        comm_doc[f"step{st['step']}"] = {"collective": ops, "p2p": {}}
    (out / "trace_view.json").write_text(json.dumps(ev), encoding="utf-8")
    st_hdr = ["Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
              "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
    if spec.header == "g83":
        st_hdr = ["Device_id"] + st_hdr
        st_rows = [[str(rank)] + r for r in st_rows]
    _write_csv(out / "step_trace_time.csv", st_hdr, st_rows, crlf=spec.header.startswith("g2025"))
    if spec.comm_ops:
        (out / "communication.json").write_text(json.dumps(comm_doc, indent=1), encoding="utf-8")
    return rdir


def _pipeline_metadata(spec: SynthSpec, rank: int) -> dict:
    """profiler_metadata.json of one rank of a pipeline-parallel job (TP 1, the ranks of a stage
    consecutive), as torch_npu writes it for Megatron / MindSpeed: ``distributed_args`` and the
    ``parallel_group_info`` groups default_group, dp (its stage's ranks) and pp (one rank per stage,
    ``group_rank`` = the stage)."""
    pp = len(spec.stage_families)
    dp = spec.ranks // pp
    stage, dp_rank = rank // dp, rank % dp
    groups = {"group_name_0": {"group_name": "default_group", "group_rank": rank,
                               "global_ranks": list(range(spec.ranks))},
              f"group_name_{1 + stage}": {"group_name": "dp", "group_rank": dp_rank,
                                          "global_ranks": list(range(stage * dp, (stage + 1) * dp))},
              f"group_name_{1 + pp + dp_rank}": {"group_name": "pp", "group_rank": stage,
                                                 "global_ranks": [s * dp + dp_rank for s in range(pp)]}}
    return {"distributed_args": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": pp,
                                 "data_parallel_size": dp, "rank": rank, "world_size": spec.ranks},
            "parallel_group_info": groups}


def write_capture(out_dir, spec: SynthSpec = SynthSpec(), *, existing: str = "into") -> Path:
    """Write a synthetic capture (one folder per rank) under ``out_dir``; returns ``out_dir``.

    ``existing`` says what happens to a folder that already holds files:

    * ``"into"`` (the library default, for callers that own a fresh folder): the rank folders
      are written into it; other files in it stay (a larger earlier capture's extra ranks too).
    * ``"refuse"`` (``perfgate synth``): a non-empty ``out_dir`` is refused (UsageError), so
      an earlier capture's rank folders can never end up beside the new ones.
    * ``"replace"`` (``perfgate synth --overwrite``, ``perfgate demo``): the capture is replaced
      wholesale, but only an earlier capture: every entry must be a rank folder
      (``*_ascend_pt/``), anything else is refused (UsageError), so a mistyped path never
      deletes unrelated files.

    With ``"refuse"`` and ``"replace"`` the capture is written into a hidden sibling folder
    (``.NAME.tmp-*``) and renamed into place only once complete: a failure (full disk,
    interrupt) leaves the earlier folder as it was and no mix of old and new files; an earlier
    capture is renamed aside (``.NAME.old-*``) and deleted after the swap.

    Raises:
        ValueError: unknown ``spec.header`` or ``existing``.
        UsageError: ``out_dir`` holds files it may not replace (see ``existing``; exit 2).
        StoreError: a folder or file cannot be written (read-only place, a path component that
            is a file, a full disk: exit 5), naming the path.
    """
    if spec.header not in HEADERS:
        raise ValueError(f"unknown header generation {spec.header!r}; use one of {sorted(HEADERS)}")
    if existing not in ("into", "refuse", "replace"):
        raise ValueError(f"existing must be 'into', 'refuse' or 'replace', got {existing!r}")
    root = Path(out_dir)
    if existing != "into":
        return _write_fresh(root, spec, replace=existing == "replace")
    try:
        root.mkdir(parents=True, exist_ok=True)
        _write_ranks(root, spec)
    except OSError as e:
        from perfgate.errors import StoreError
        raise StoreError(f"cannot write the synthetic capture: {e.strerror or e}",
                         path=Path(e.filename) if e.filename else root) from None
    return root


def _write_ranks(root: Path, spec: SynthSpec):
    for rank in range(spec.ranks):
        rng = np.random.default_rng([spec.seed, rank])
        _write_rank(root, spec, rank, _rank_timeline(spec, rank, rng))


#: hidden folders ``_write_fresh`` makes inside an existing target (left only by a crash)
_SCRATCH = (".perfgate-synth-new-", ".perfgate-synth-old-")


def _foreign_entries(root: Path, replace: bool) -> list[str]:
    """Entries of an existing ``root`` that forbid writing a capture there: every entry when
    not replacing, else those that are neither rank folders (``*_ascend_pt/``) nor the scratch
    folders a crashed earlier replacement left."""
    names = sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in os.scandir(root))
    if not replace:
        return names
    return [n for n in names if not (n.endswith("_ascend_pt/") or n.startswith(_SCRATCH))]


def _write_fresh(root: Path, spec: SynthSpec, *, replace: bool) -> Path:
    """``write_capture(existing="refuse" | "replace")``. A missing ``root``: written as a hidden
    sibling, renamed into place. An existing one (kept itself: a working directory, a mount
    point, a symbolic link stay valid): written into a hidden scratch folder inside it, the
    earlier entries moved into a second one, the new ones moved in, the second one deleted; a
    failure moves the earlier entries back."""
    from perfgate.errors import StoreError, UsageError
    target = root.resolve()
    try:
        foreign = _foreign_entries(target, replace) if target.is_dir() else []
    except OSError as e:
        raise StoreError(f"cannot read the folder: {e.strerror or e}", path=root) from None
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        if replace:
            raise UsageError(f"refusing to replace this folder: it holds more than a capture's rank folders "
                             f"(*_ascend_pt/): {shown}", path=root,
                             hint="choose a new folder, or remove it yourself")
        raise UsageError(f"the folder is not empty ({shown}): a capture written into it would mix with "
                         f"what is there", path=root,
                         hint="choose a new or empty folder, or pass --overwrite to replace an earlier capture")
    new = old = None
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        if replace and target.is_dir():   # a crashed earlier replacement's scratch folders
            for n in os.listdir(target):
                if n.startswith(_SCRATCH):
                    shutil.rmtree(target / n)
        if not target.is_dir():
            if not target.parent.exists():
                target.parent.mkdir(parents=True)
            new = _scratch(target.parent, f".{target.name}.synth-new-")
            _write_ranks(new, spec)
            os.rename(new, target)
            new = None
            return root
        new = _scratch(target, _SCRATCH[0])
        _write_ranks(new, spec)
        earlier = sorted(n for n in os.listdir(target) if not n.startswith(_SCRATCH))
        if earlier:
            old = _scratch(target, _SCRATCH[1])
            for n in earlier:
                os.rename(target / n, old / n)
                moved_out.append(n)
        for n in sorted(os.listdir(new)):
            os.rename(new / n, target / n)
            moved_in.append(n)
        moved_out = []   # done: the earlier capture goes with `old`
    except OSError as e:
        for n in moved_in:
            shutil.rmtree(target / n, ignore_errors=True)
        for n in moved_out:
            try:
                os.rename(old / n, target / n)
            except OSError:
                pass
        if moved_out:
            old = None   # not every entry could be put back: keep the rest in the scratch folder
        raise StoreError(f"cannot write the synthetic capture: {e.strerror or e}", path=root) from None
    finally:
        for d in (new, old):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
    return root


def _scratch(parent: Path, prefix: str) -> Path:
    """A new folder ``parent/PREFIX<PID>-<RANDOM>`` (the umask's permissions, as ``mkdir``)."""
    while True:
        p = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(p)
            return p
        except FileExistsError:
            continue


# A 2-stage pipeline of a decoder-only model: stage 0 runs the embedding and 4 layers, stage 1
# runs 6 layers, the output projection and the loss (other families and more calls: other kernel
# signatures, and about 1.5x stage 0's Computing)
_EMBEDDING = ("aclnnEmbedding_GatherV2AiCore_GatherV2", "GatherV2", "AI_VECTOR_CORE", 1, 40.0)
_HEAD = (("aclnnLogSoftmax_LogSoftmaxV2AiCore_LogSoftmaxV2", "LogSoftmaxV2", "AI_VECTOR_CORE", 1, 90.0),
         ("aclnnCrossEntropyLoss_CrossEntropyLossAiCore_CrossEntropyLoss", "CrossEntropyLoss", "AI_VECTOR_CORE",
          1, 60.0))


def _layers(scale: float) -> tuple:
    """The default families with their calls per step × ``scale`` (layers on the stage)."""
    return tuple((n, t, c, max(1, int(round(k * scale))), m) for n, t, c, k, m in DEFAULT_FAMILIES)


PIPELINE_STAGE_FAMILIES = ((_EMBEDDING,) + _layers(1.0), _layers(1.5) + _HEAD)


def pipeline_spec(dp: int = 2, **kw) -> SynthSpec:
    """A pipeline-parallel job of ``len(PIPELINE_STAGE_FAMILIES)`` (2) stages with ``dp``
    data-parallel ranks each (ranks 0..dp-1 stage 0), its layout recorded in every rank's
    profiler_metadata.json; ``kw``: any other :class:`SynthSpec` field (``slowdown`` with
    ``inject_ranks`` slows one stage)."""
    kw.setdefault("stage_families", PIPELINE_STAGE_FAMILIES)
    kw.setdefault("pipeline_layout", True)
    return SynthSpec(ranks=dp * len(kw["stage_families"]), **kw)


def write_demo_pair(out_dir) -> tuple[Path, Path]:
    """The bundled default: a 2-rank baseline capture and a candidate in which Cast is called
    twice as often and MatMulV3 runs 1.4x slower (a count and a step-time regression), in
    ``out_dir/baseline`` and ``out_dir/candidate``; an earlier pair there is replaced wholesale
    (``write_capture(existing="replace")``: a folder holding anything but rank folders is
    refused, UsageError)."""
    out = Path(out_dir)
    base = write_capture(out / "baseline", SynthSpec(seed=1), existing="replace")
    cand = write_capture(out / "candidate", SynthSpec(
        seed=2, extra_calls={"aclnnCast_CastAiCore_Cast": 2},
        slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.4}), existing="replace")
    return base, cand
