"""Oracles: per-step and per-finding loop references for perfgate.metrics.steps' columnar
step_table, label_steps, cross_rank_findings, confirm_recompile and warm-up findings
(tests/metrics/test_columnar_steps.py, tests/metrics/test_columnar_selfcheck.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.metrics.intervals import merge
from perfgate.metrics.steps import DEFAULT_THRESHOLDS, STEP_COLUMNS, covered_ns
from perfgate.model import Finding

_COMPILE = __import__("re").compile(r"(?i)compile")


def step_slices(kernels: pd.DataFrame) -> tuple[list, dict]:
    """Group a kernel table by step without copying the frame.

    Returns ``(groups, cols)``: ``groups`` is a list of ``(step, idx)`` in order of first
    appearance, ``idx`` the positional row indices of that step sorted by start time (stable:
    rows with equal starts keep file order); rows with a blank step are left out. ``cols``
    holds the kernel columns as numpy arrays (``row``, ``start_ns``, ``end_ns``, ``dur_ns``,
    ``wait_us``, ``is_comm``).
    """
    step = kernels["step"]
    cat = step if isinstance(step.dtype, pd.CategoricalDtype) else step.astype("category")
    codes = cat.cat.codes.to_numpy()
    cols = {c: kernels[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns", "wait_us", "is_comm")
            if c in kernels}
    valid = np.flatnonzero(codes >= 0)
    vc = codes[valid]
    order = valid[np.lexsort((cols["start_ns"][valid], vc))]
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    parts = np.split(order, bounds) if len(order) else []
    by_code = {int(codes[p[0]]): p for p in parts}
    _, first = np.unique(vc, return_index=True) if len(vc) else (None, np.array([], dtype=int))
    appearance = vc[np.sort(first)] if len(vc) else []
    return [(cat.cat.categories[c], by_code[int(c)]) for c in appearance], cols


def step_table(rank, thresholds: dict | None = None) -> pd.DataFrame:
    """One row per step of ``rank`` with the columns in ``STEP_COLUMNS`` (see module doc).

    ``rank`` is an :class:`perfgate.ingest.RankCapture`. Pure: nothing is read from disk.
    """
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    windows = {}
    if rank.trace is not None and not rank.trace.steps.empty and getattr(rank, "host_clock_ok", True):
        for _, w in rank.trace.steps.iterrows():
            windows[str(w["step"])] = (int(w["start_ns"]), int(w["end_ns"]))
    preparing = {}
    if rank.step_trace is not None:
        preparing = rank.step_trace.groupby("step")["preparing_us"].first().to_dict()
    groups, c = step_slices(rank.kernels.df)
    rows = []
    for step, idx in groups:
        s = c["start_ns"][idx]
        e = c["end_ns"][idx]
        first, last = int(s.min()), int(e.max())
        wall = last - first
        seg_s, seg_e = merge(s, e)
        busy = int((seg_e - seg_s).sum())
        gap = seg_s[1:] - seg_e[:-1]
        internal = int(gap[gap > th["bubble_min_us"] * 1000].sum()) if len(gap) else 0
        largest = int(gap.max()) if len(gap) else 0
        after_row, wait_after = None, np.nan
        if largest > 0:
            gi = int(gap.argmax())
            nxt = int(np.flatnonzero(s == seg_s[gi + 1])[0])  # first task (file order) starting the segment
            after_row, wait_after = int(c["row"][idx[nxt]]), float(c["wait_us"][idx[nxt]])
        win = windows.get(str(step))
        if win:
            step_us = (win[1] - win[0]) / 1000.0
            pre = (first - win[0]) / 1000.0
            tail = (win[1] - last) / 1000.0
        else:
            step_us = np.nan
            pre = float(preparing.get(str(step), np.nan))
            tail = np.nan
        is_comm = c["is_comm"][idx]
        comm, comp = idx[is_comm], idx[~is_comm]
        cs, ce = merge(c["start_ns"][comp], c["end_ns"][comp])
        comm_dur = c["dur_ns"][comm]
        comm_cov = covered_ns(cs, ce, c["start_ns"][comm], c["end_ns"][comm])
        comm_sum = float(comm_dur.sum()) / 1000.0
        uncovered = float((comm_dur - comm_cov).sum()) / 1000.0  # uncovered communication (ΣDuration-based)
        row = c["row"][idx]
        rows.append({
            "rank": rank.rank, "step": str(step), "first_row": int(row.min()),
            "last_row": int(row.max()), "kernels": len(idx), "step_us": step_us,
            "wall_us": wall / 1000.0, "busy_us": busy / 1000.0,
            "kernel_sum_us": float(c["dur_ns"][idx].sum()) / 1000.0,
            "bubble_us": (wall - busy) / 1000.0, "underfeed_ratio": (wall - busy) / wall if wall else 0.0,
            "prelaunch_us": pre, "tail_us": tail, "internal_bubble_us": internal / 1000.0,
            "largest_bubble_us": largest / 1000.0, "largest_bubble_row": after_row,
            "wait_after_gap_us": wait_after, "comm_sum_us": comm_sum, "exposed_comm_us": uncovered,
            "exposed_comm_ratio": uncovered / comm_sum if comm_sum else np.nan,
        })
    t = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return t.sort_values("step", key=lambda c: c.map(lambda x: (0, int(x)) if str(x).isdigit() else (1, 0)),
                         kind="stable").reset_index(drop=True)


def _gap_limit(row, th) -> float:
    step = row["step_us"] if not np.isnan(row["step_us"]) else row["wall_us"]
    return max(th["gap_min_us"], th["gap_step_ratio"] * step)


def label_steps(table: pd.DataFrame, thresholds: dict | None = None, evidence: str = "") -> list[Finding]:
    """Host-bound and communication labels for every (rank, step) row of ``step_table``."""
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    out: list[Finding] = []
    for _, r in table.iterrows():
        ev = f"{evidence} rows {r['first_row']}-{r['last_row']}".strip()
        rk, st = int(r["rank"]), str(r["step"])

        def add(code, msg, value, threshold, severity="warn"):
            out.append(Finding(code, severity, rk, st, msg, ev, float(value), float(threshold)))

        if r["underfeed_ratio"] >= th["underfeed_ratio"]:
            add("DEVICE_IDLE_GAP_HEAVY", f"rank {rk} step {st}: device idle {r['underfeed_ratio']:.1%} of its "
                f"span ({r['bubble_us']:,.1f} of {r['wall_us']:,.1f} us) ≥ {th['underfeed_ratio']:.0%}: the host "
                f"does not feed the device fast enough", r["underfeed_ratio"], th["underfeed_ratio"])
        lim = _gap_limit(r, th)
        for code, col, what in (("PRELAUNCH_GAP_HEAVY", "prelaunch_us", "before the first device task"),
                                ("TAIL_GAP_HEAVY", "tail_us", "after the last device task"),
                                ("INTERNAL_BUBBLE_HEAVY", "internal_bubble_us",
                                 f"in idle gaps longer than {th['bubble_min_us']:g} us (findings.bubble_min_us) "
                                 f"inside the step")):
            v = r[col]
            if not np.isnan(v) and v >= lim:
                add(code, f"rank {rk} step {st}: {v:,.1f} us {what} ≥ {lim:,.1f} us "
                    f"(max({th['gap_min_us']:g} us, {th['gap_step_ratio']:.0%} of the step, elapsed: its host ProfilerStep window, else its device span))", v, lim)
        if (r["kernel_sum_us"] > 0 and r["wall_us"] / r["kernel_sum_us"] > th["recompile_wall_ratio"]
                and r["largest_bubble_us"] >= th["recompile_gap_ratio"] * r["wall_us"]
                and not np.isnan(r["wait_after_gap_us"])
                and r["wait_after_gap_us"] >= th["recompile_wait_ratio"] * r["largest_bubble_us"]):
            add("RECOMPILE_SUSPECTED", f"rank {rk} step {st}: wall {r['wall_us']:,.1f} us is "
                f"{r['wall_us'] / r['kernel_sum_us']:.1f}x ΣDuration; one idle gap of {r['largest_bubble_us']:,.1f} us "
                f"ends at row {r['largest_bubble_row']} whose Wait Time is {r['wait_after_gap_us']:,.1f} us "
                f"(graph recompilation or host stall suspected)", r["wall_us"] / r["kernel_sum_us"],
                th["recompile_wall_ratio"])
        x = r["exposed_comm_ratio"]
        if not np.isnan(x):
            if x > th["exposed_significant"]:
                add("EXPOSED_COMM_SIGNIFICANT", f"rank {rk} step {st}: {x:.1%} of communication time is not "
                    f"hidden by compute (> {th['exposed_significant']:.0%})", x, th["exposed_significant"], "info")
            elif x < th["exposed_hidden"]:
                add("COMM_WELL_HIDDEN", f"rank {rk} step {st}: only {x:.1%} of communication time is exposed "
                    f"(< {th['exposed_hidden']:.0%})", x, th["exposed_hidden"], "info")
    return out


def cross_rank_findings(tables: pd.DataFrame, step_time: dict, infos: dict,
                        thresholds: dict | None = None) -> list[Finding]:
    """Findings across ranks.

    Args:
        tables: concatenated ``step_table`` of every rank.
        step_time: {(rank, step): step time us} (step_trace_time.csv step time, else wall).
        infos: {rank: profiler_info facets} (for ``collection_end_ns``).

    SLOW_RANK: a rank's step time exceeds the p50 over ranks of that step by more than
    ``slow_rank_ratio`` (msprof-analyze advisor uses 5 %). RANK_STEP_MISMATCH: ranks hold
    different steps; RANKS_WITHOUT_COMMON_STEP (fail) when no step is held by two ranks.
    RANKS_FROM_DIFFERENT_RUNS (fail): collection ended more than
    ``max_collection_spread_s`` apart (host wall clock, not device timestamps).
    """
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    out = []
    ranks = sorted({r for r, _ in step_time})
    by_step: dict = {}
    for (r, s), v in step_time.items():
        by_step.setdefault(s, {})[r] = v
    for s, vals in sorted(by_step.items(), key=lambda kv: str(kv[0])):
        if len(vals) < 2:
            continue
        p50 = float(np.median(list(vals.values())))
        for r, v in sorted(vals.items()):
            if p50 > 0 and v > p50 * (1 + th["slow_rank_ratio"]):
                out.append(Finding("SLOW_RANK", "warn", r, str(s),
                                   f"rank {r} step {s}: step time {v:,.1f} us is {v / p50 - 1:+.1%} over the p50 "
                                   f"of {len(vals)} ranks ({p50:,.1f} us; threshold {th['slow_rank_ratio']:.0%})",
                                   "step_trace_time.csv", float(v / p50 - 1), float(th["slow_rank_ratio"])))
    sets = {r: tuple(sorted(tables.loc[tables["rank"] == r, "step"])) for r in ranks
            if (tables["rank"] == r).any() or not len(tables)}  # partial ranks hold no kernel steps
    if len(set(sets.values())) > 1:
        desc = "; ".join(f"rank {r}: {len(v)} step(s) {list(v)[:4]}" for r, v in sets.items())
        # a step loop: is any step held by two ranks? (every rank with steps, none shared: other runs)
        common = any(sum(step in set(v) for v in sets.values()) >= 2
                     for step in {x for v in sets.values() for x in v})
        if all(len(v) for v in sets.values()) and not common:
            out.append(Finding("RANKS_WITHOUT_COMMON_STEP", "fail", None, None,
                               f"the ranks share no profiled step ({desc}): one run's ranks profile the same "
                               f"steps, so these rank folders come from different runs",
                               "kernel_details.csv Step Id"))
        else:
            out.append(Finding("RANK_STEP_MISMATCH", "warn", None, None,
                               f"ranks hold different steps ({desc}); cross-rank views use the steps each rank has",
                               "kernel_details.csv Step Id"))
    ends = {r: i.get("collection_end_ns") for r, i in infos.items() if i.get("collection_end_ns")}
    if len(ends) > 1:
        spread = (max(ends.values()) - min(ends.values())) / 1e9
        if spread > th["max_collection_spread_s"]:
            lo = min(ends, key=ends.get)
            hi = max(ends, key=ends.get)
            out.append(Finding("RANKS_FROM_DIFFERENT_RUNS", "fail", hi, None,
                               f"rank {lo} and rank {hi} finished collecting {spread:,.0f} s apart "
                               f"(> {th['max_collection_spread_s']:g} s): the rank folders come from different "
                               f"runs", "profiler_info_<N>.json end_info.collectionTimeEnd", spread,
                               th["max_collection_spread_s"]))
    return out


def confirm_recompile(findings: list, kernels: pd.DataFrame) -> list:
    """RECOMPILE_SUSPECTED only where the kernel table holds evidence that tells recompilation
    apart from input setup or a host stall: the task ending the gap runs on the AI CPU (dynamic
    shape ops fall back there while graphs recompile; an AI CPU task elsewhere in the step is
    ordinary, e.g. NonZero) or a task of that step is a compile task by name or type. Without such evidence the finding becomes IDLE_GAP_UNEXPLAINED
    (info): the same gap figures, no claimed cause.

    ``findings``: from :func:`label_steps`; ``kernels``: the rank's kernel table
    (columns ``row``, ``step``, ``name``, ``op_type``, ``core_type``)."""
    out = []
    for f in findings:
        if f.code != "RECOMPILE_SUSPECTED":
            out.append(f)
            continue
        ev = _recompile_evidence(f, kernels)
        if ev:
            out.append(Finding(f.code, f.severity, f.rank, f.step, f"{f.message}; evidence: {ev}", f.evidence,
                               f.value, f.threshold))
        else:
            msg = f.message.replace("(graph recompilation or host stall suspected)",
                                    "(no AI CPU or compile task in the step tells recompilation apart from input "
                                    "setup or a host stall)")
            out.append(Finding("IDLE_GAP_UNEXPLAINED", "info", f.rank, f.step, msg, f.evidence, f.value, f.threshold))
    return out


def _recompile_evidence(f, k: pd.DataFrame) -> str | None:
    rows = k.loc[k["step"].astype(str) == str(f.step)]
    import re
    m = re.search(r"ends at row (\d+)", f.message)
    if m:
        after = rows.loc[rows["row"] == int(m.group(1))]
        if len(after) and (str(after["core_type"].iloc[0]).upper() in ("AI_CPU", "AICPU")
                           or "aicpu" in str(after["name"].iloc[0]).lower()):
            return f"row {m.group(1)} after the gap runs on the AI CPU"
    for col in ("name", "op_type"):
        hit = rows[col].astype(str).str.contains(_COMPILE, na=False)
        if hit.any():
            r = rows.loc[hit].iloc[0]
            return f"row {int(r['row'])} {col} {r[col]!r} is a compile task"
    return None


def step_sums_and_unions(k: pd.DataFrame) -> tuple[list, list]:
    """The former per-step loop of fingerprint.rank_metrics (device.time_us samples)."""
    from perfgate.metrics import kernels as km
    from perfgate.metrics.intervals import busy_union_ns
    sums, unions = [], []
    dur, start, end = (k[c].to_numpy() for c in ("dur_ns", "start_ns", "end_ns"))
    for _, idx in km.step_groups(k):
        sums.append(dur[idx].sum() / 1000.0)
        unions.append(busy_union_ns(start[idx], end[idx]) / 1000.0)
    return sums, unions


def step_time(rank, st, anatomy) -> dict:
    """The former per-row loop of fingerprint.summarize_rank (gated step time per step)."""
    step_time = {}
    if st is not None:
        for s_, row in st.iterrows():
            step_time[(rank.rank, str(s_))] = float(row["computing_us"] + row["comm_not_overlapped_us"] + row["free_us"])
    else:
        for _, row in anatomy.iterrows():
            step_time[(rank.rank, row["step"])] = float(row["wall_us"])
    return step_time


def comm_rows_of_kind(k: pd.DataFrame, kind: str) -> list:
    """The former per-kind scan of fingerprint.rank_metrics (evidence rows of comm.* metrics)."""
    from perfgate.metrics.comm import kind_of as comm_kind
    comm_rows = k.loc[k["is_comm"]]
    return comm_rows.loc[comm_rows["name"].astype(str).map(comm_kind) == kind, "row"].tolist()


# --- metrics.steps.warmup_findings before its columnar form (one group-by and pandas where per rank)
def warmup_findings(table: pd.DataFrame, thresholds: dict | None = None, evidence: str = "") -> list[Finding]:
    """WARMUP_NOT_STRIPPED per rank: several steps, and the first one longer than
    ``warmup_ratio`` x the median of the others (host window, or device wall without one)."""
    from perfgate.metrics.steps import DEFAULT_THRESHOLDS
    from perfgate.model import Finding
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    out = []
    for rk, t in table.groupby("rank"):
        if len(t) < 2:
            continue
        dur = t["step_us"].where(t["step_us"].notna(), t["wall_us"]).to_numpy()
        rest = float(np.median(dur[1:]))
        if rest > 0 and dur[0] > th["warmup_ratio"] * rest:
            first = t.iloc[0]
            out.append(Finding(
                "WARMUP_NOT_STRIPPED", "fail", int(rk), str(first["step"]),
                f"rank {rk}: first step {first['step']} takes {dur[0]:,.1f} us, {dur[0] / rest:.2f}x the median "
                f"of the other {len(t) - 1} step(s) ({rest:,.1f} us): warm-up was not stripped (use the "
                f"profiler schedule's warmup/skip_first)", f"{evidence} rows {first['first_row']}-{first['last_row']}",
                float(dur[0] / rest), float(th["warmup_ratio"])))
    return out
