"""Oracle: perfgate.metrics.steps' step_table, label_steps, _slow_ranks and confirm_recompile as
they were between the per-step loops and the columnar forms (columnar figures, but Python work
per step or per finding), kept verbatim for tests/metrics/test_columnar_selfcheck.py."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.metrics.steps import DEFAULT_THRESHOLDS, STEP_COLUMNS, _group_sum, _uncovered_ns, _EvidenceIndex
from perfgate.metrics.intervals import segmented_merge
from perfgate.model import Finding


def _step_key(x):
    return (0, int(x)) if str(x).isdigit() else (1, 0)


def step_table(rank, thresholds: dict | None = None) -> pd.DataFrame:
    """One row per step of ``rank`` with the columns in ``STEP_COLUMNS`` (see module doc).

    ``rank`` is an :class:`perfgate.ingest.RankCapture`. Pure: nothing is read from disk.
    Columnar: the kernel rows are sorted once by (step, start) and every per-step figure is a
    segmented reduction over that order (busy union and idle gaps from
    :func:`perfgate.metrics.intervals.segmented_merge`, uncovered communication from one banded
    coverage lookup), so the cost does not grow with the number of steps beyond the rows.
    Rows are sorted by step (numeric steps first, in number order; others after them in order of
    their first kernel row).
    """
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    k = rank.kernels.df
    step = k["step"]
    cat = step if isinstance(step.dtype, pd.CategoricalDtype) else step.astype("category")
    codes = cat.cat.codes.to_numpy()
    valid = np.flatnonzero(codes >= 0)
    if not len(valid):
        t = pd.DataFrame([], columns=STEP_COLUMNS)
        return t.sort_values("step", key=lambda c: c.map(_step_key), kind="stable").reset_index(drop=True)
    start = k["start_ns"].to_numpy()
    order = valid[np.lexsort((start[valid], codes[valid]))]
    sc = codes[order].astype(np.int64)
    s = start[order].astype(np.int64)
    e = k["end_ns"].to_numpy()[order].astype(np.int64)
    dur = k["dur_ns"].to_numpy()[order].astype(np.int64)
    row = k["row"].to_numpy()[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sc[1:] != sc[:-1]
    gstart = np.flatnonzero(first)
    gid = np.cumsum(first, dtype=np.int64) - 1
    ng = len(gstart)
    labels = np.asarray(cat.cat.categories.astype(str), dtype=object)[sc[gstart]]
    count = np.diff(np.append(gstart, len(order)))
    t_first = s[gstart]  # sorted by start within the step
    t_last = np.maximum.reduceat(e, gstart)
    wall = t_last - t_first
    # busy union and idle gaps between the merged segments of each step
    heads, seg_s, seg_e = segmented_merge(gid, s, e)
    hg = gid[heads]
    busy = _group_sum(seg_e - seg_s, hg, ng)
    inner = np.flatnonzero(hg[1:] == hg[:-1])  # gap j lies between segments j and j + 1
    gap = seg_s[inner + 1] - seg_e[inner]
    gg = hg[inner + 1]
    internal = _group_sum(np.where(gap > th["bubble_min_us"] * 1000, gap, 0), gg, ng)
    largest = np.zeros(ng, dtype=np.int64)
    has_gap = np.zeros(ng, dtype=bool)
    has_gap[gg] = True
    if len(gap):
        mx = np.full(ng, np.iinfo(np.int64).min)
        np.maximum.at(mx, gg, gap)
        largest = np.where(has_gap, mx, 0)
    after_row = [None] * ng
    wait_after = np.full(ng, np.nan)
    hit = gap == largest[gg]
    hit &= largest[gg] > 0
    if hit.any():
        cand = np.flatnonzero(hit)
        gsel, fi = np.unique(gg[cand], return_index=True)  # the first largest gap of each step
        pos = heads[inner[cand[fi]] + 1]  # the first task (start order, then file order) after it
        wait = k["wait_us"].to_numpy()[order]
        wait_after[gsel] = wait[pos].astype(float)
        for g, r in zip(gsel.tolist(), row[pos].tolist()):
            after_row[g] = int(r)
    # host step windows (the trace's ProfilerStep#N; the last window of a label wins) or Preparing
    step_us = np.full(ng, np.nan)
    pre = np.full(ng, np.nan)
    tail = np.full(ng, np.nan)
    have_win = np.zeros(ng, dtype=bool)
    if rank.trace is not None and not rank.trace.steps.empty and getattr(rank, "host_clock_ok", True):
        w = rank.trace.steps
        wl = pd.Index(w["step"].astype(str).to_numpy(dtype=object))
        keep = ~wl.duplicated(keep="last")
        wi = pd.Index(wl[keep]).get_indexer(pd.Index(labels))
        have_win = wi >= 0
        ws = w["start_ns"].to_numpy()[keep].astype(np.int64)[wi[have_win]]
        we = w["end_ns"].to_numpy()[keep].astype(np.int64)[wi[have_win]]
        step_us[have_win] = (we - ws) / 1000.0
        pre[have_win] = (t_first[have_win] - ws) / 1000.0
        tail[have_win] = (we - t_last[have_win]) / 1000.0
    if rank.step_trace is not None and not have_win.all():
        # step_trace_time.csv Preparing: the first non-missing value of each step (as a
        # group-by first() gives it), looked up for every step label at once
        st_ = rank.step_trace
        ok = st_["step"].notna().to_numpy()
        keys = st_["step"].to_numpy(dtype=object)[ok]
        vals = st_["preparing_us"].to_numpy(dtype=float)[ok]
        nn = ~np.isnan(vals)
        uk, first_at = np.unique(keys[nn].astype(str), return_index=True)
        at = pd.Index(uk.astype(object), dtype=object).get_indexer(pd.Index(labels, dtype=object))
        pv = np.where(at >= 0, vals[nn][first_at][np.maximum(at, 0)] if len(uk) else np.nan, np.nan)
        pre[~have_win] = pv[~have_win]
    # uncovered communication: per communication row, its duration minus the part the step's
    # compute busy union covers (ΣDuration-based)
    is_comm = k["is_comm"].to_numpy()[order].astype(bool)
    comm_sum = _group_sum(dur[is_comm], gid[is_comm], ng) / 1000.0
    uncovered = np.zeros(ng)
    if is_comm.any():
        uncovered = _group_sum(_uncovered_ns(gid, s, e, dur, is_comm, ng), gid[is_comm], ng) / 1000.0
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(comm_sum != 0, uncovered / np.where(comm_sum != 0, comm_sum, 1.0), np.nan)
        underfeed = np.where(wall != 0, (wall - busy) / np.where(wall != 0, wall, 1), 0.0)
    cols = {
        "rank": [rank.rank] * ng, "step": labels.tolist(),
        "first_row": np.minimum.reduceat(row, gstart).astype(np.int64),
        "last_row": np.maximum.reduceat(row, gstart).astype(np.int64), "kernels": count.astype(np.int64),
        "step_us": step_us, "wall_us": wall / 1000.0, "busy_us": busy / 1000.0,
        "kernel_sum_us": np.add.reduceat(dur, gstart) / 1000.0, "bubble_us": (wall - busy) / 1000.0,
        "underfeed_ratio": underfeed, "prelaunch_us": pre, "tail_us": tail,
        "internal_bubble_us": internal / 1000.0, "largest_bubble_us": largest / 1000.0,
        "largest_bubble_row": after_row, "wait_after_gap_us": wait_after, "comm_sum_us": comm_sum,
        "exposed_comm_us": uncovered, "exposed_comm_ratio": ratio,
    }
    # steps in order of their first kernel row (file order), then numeric steps by number
    appear = np.argsort(_first_position(codes, sc[gstart]), kind="stable")
    keys = [_step_key(x) for x in labels[appear].tolist()]
    perm = appear[sorted(range(ng), key=keys.__getitem__)]
    out = {c: ([v[i] for i in perm] if isinstance(v, list) else v[perm]) for c, v in cols.items()}
    return pd.DataFrame({c: pd.Series(v) if isinstance(v, list) else v for c, v in out.items()},
                        columns=STEP_COLUMNS)


def _first_position(codes: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Position of the first row of each code in ``which`` (rows in file order)."""
    valid = np.flatnonzero(codes >= 0)
    u, first = np.unique(codes[valid], return_index=True)
    return valid[first][np.searchsorted(u, which)]


def label_steps(table: pd.DataFrame, thresholds: dict | None = None, evidence: str = "") -> list[Finding]:
    """Host-bound and communication labels for every (rank, step) row of ``step_table``.

    Findings come row by row (table order), within a row in this order: DEVICE_IDLE_GAP_HEAVY,
    PRELAUNCH_GAP_HEAVY, TAIL_GAP_HEAVY, INTERNAL_BUBBLE_HEAVY, RECOMPILE_SUSPECTED,
    EXPOSED_COMM_SIGNIFICANT / COMM_WELL_HIDDEN. Every condition is evaluated on whole columns;
    Python runs once per finding, not once per step."""
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    n = len(table)
    if not n:
        return []
    names = ("underfeed_ratio", "bubble_us", "wall_us", "step_us", "prelaunch_us", "tail_us", "internal_bubble_us",
             "kernel_sum_us", "largest_bubble_us", "wait_after_gap_us", "exposed_comm_ratio")
    m = table[list(names)].to_numpy(dtype=float)  # one 2-D conversion, not one per column
    f = {c: m[:, j] for j, c in enumerate(names)}
    step = np.where(np.isnan(f["step_us"]), f["wall_us"], f["step_us"])
    prod = th["gap_step_ratio"] * step
    lim = np.where(prod > th["gap_min_us"], prod, th["gap_min_us"])  # max(gap_min, ratio x step)
    hits = []  # (row, order within the row, code)
    hits.append((np.flatnonzero(f["underfeed_ratio"] >= th["underfeed_ratio"]), 0))
    for j, c in enumerate(("prelaunch_us", "tail_us", "internal_bubble_us")):
        v = f[c]
        hits.append((np.flatnonzero(~np.isnan(v) & (v >= lim)), 1 + j))
    ks, wall, lb, wait = f["kernel_sum_us"], f["wall_us"], f["largest_bubble_us"], f["wait_after_gap_us"]
    with np.errstate(invalid="ignore", divide="ignore"):
        rec = ((ks > 0) & (wall / np.where(ks > 0, ks, 1.0) > th["recompile_wall_ratio"])
               & (lb >= th["recompile_gap_ratio"] * wall) & ~np.isnan(wait)
               & (wait >= th["recompile_wait_ratio"] * lb))
    hits.append((np.flatnonzero(rec), 4))
    x = f["exposed_comm_ratio"]
    sig = ~np.isnan(x) & (x > th["exposed_significant"])
    hits.append((np.flatnonzero(sig), 5))
    hits.append((np.flatnonzero(~np.isnan(x) & ~sig & (x < th["exposed_hidden"])), 6))
    rows = np.concatenate([h for h, _ in hits])
    slot = np.concatenate([np.full(len(h), s) for h, s in hits])
    out: list[Finding] = []
    ev_pre = f"{evidence} rows "
    order = np.lexsort((slot, rows))
    rows, slot = rows[order], slot[order]
    # the firing rows' values as Python objects (as a row of iterrows gives them), one column
    # conversion each instead of one element access per finding and column
    at = np.unique(rows)
    pos = np.searchsorted(at, rows).tolist()
    vals = {c: table[c].to_numpy()[at].tolist() for c in _LABEL_COLUMNS if c in table}
    for i, p_, s in zip(rows.tolist(), pos, slot.tolist()):
        r = {c: v[p_] for c, v in vals.items()}
        ev = f"{ev_pre}{r['first_row']}-{r['last_row']}".strip()
        rk, st = int(r["rank"]), str(r["step"])
        if s == 0:
            out.append(Finding(
                "DEVICE_IDLE_GAP_HEAVY", "warn", rk, st,
                f"rank {rk} step {st}: device idle {r['underfeed_ratio']:.1%} of its "
                f"span ({r['bubble_us']:,.1f} of {r['wall_us']:,.1f} us) ≥ {th['underfeed_ratio']:.0%}: the host "
                f"does not feed the device fast enough", ev, float(r["underfeed_ratio"]), float(th["underfeed_ratio"])))
        elif s <= 3:
            code, c, what = _GAP_LABELS[s - 1]
            if c == "internal_bubble_us":   # the message names the gap threshold (wording only)
                what = f"in idle gaps longer than {th['bubble_min_us']:g} us (findings.bubble_min_us) inside the step"
            v, li = r[c], float(lim[i])
            out.append(Finding(code, "warn", rk, st, f"rank {rk} step {st}: {v:,.1f} us {what} ≥ {li:,.1f} us "
                               f"(max({th['gap_min_us']:g} us, {th['gap_step_ratio']:.0%} of the step, elapsed: its host ProfilerStep window, else its device span))", ev,
                               float(v), float(li)))
        elif s == 4:
            out.append(Finding(
                "RECOMPILE_SUSPECTED", "warn", rk, st, f"rank {rk} step {st}: wall {r['wall_us']:,.1f} us is "
                f"{r['wall_us'] / r['kernel_sum_us']:.1f}x ΣDuration; one idle gap of {r['largest_bubble_us']:,.1f} us "
                f"ends at row {r['largest_bubble_row']} whose Wait Time is {r['wait_after_gap_us']:,.1f} us "
                f"(graph recompilation or host stall suspected)", ev, float(r["wall_us"] / r["kernel_sum_us"]),
                float(th["recompile_wall_ratio"])))
        elif s == 5:
            xv = r["exposed_comm_ratio"]
            out.append(Finding("EXPOSED_COMM_SIGNIFICANT", "info", rk, st,
                               f"rank {rk} step {st}: {xv:.1%} of communication time is not "
                               f"hidden by compute (> {th['exposed_significant']:.0%})", ev, float(xv),
                               float(th["exposed_significant"])))
        else:
            xv = r["exposed_comm_ratio"]
            out.append(Finding("COMM_WELL_HIDDEN", "info", rk, st,
                               f"rank {rk} step {st}: only {xv:.1%} of communication time is exposed "
                               f"(< {th['exposed_hidden']:.0%})", ev, float(xv), float(th["exposed_hidden"])))
    return out


_LABEL_COLUMNS = ("rank", "step", "first_row", "last_row", "underfeed_ratio", "bubble_us", "wall_us",
                  "prelaunch_us", "tail_us", "internal_bubble_us", "kernel_sum_us", "largest_bubble_us",
                  "largest_bubble_row", "wait_after_gap_us", "exposed_comm_ratio")
_GAP_LABELS = (("PRELAUNCH_GAP_HEAVY", "prelaunch_us", "before the first device task"),
               ("TAIL_GAP_HEAVY", "tail_us", "after the last device task"),
               ("INTERNAL_BUBBLE_HEAVY", "internal_bubble_us", "in idle gaps inside the step"))


def _slow_ranks(step_time: dict, th: dict) -> list[Finding]:
    """SLOW_RANK findings (see :func:`cross_rank_findings`): steps in order of their label
    (text), ranks ascending within a step. The p50 of every step over ranks comes from one
    (step, value) sort of all entries, not one ``np.median`` per step; it equals
    ``np.median`` (mean of the two middle values for an even count, NaN when a value is NaN)."""
    if not step_time:
        return []
    keys = list(step_time)
    labels = [str(s) for _, s in keys]
    uniq, first = np.unique(np.asarray(labels, dtype=object), return_index=True)  # steps sorted by text
    sid = np.searchsorted(uniq, np.asarray(labels, dtype=object))
    rk = np.array([r for r, _ in keys])
    val = np.array([step_time[k] for k in keys], dtype=float)
    n = np.bincount(sid, minlength=len(uniq))
    order = np.lexsort((val, sid))  # NaN sorts last within its step
    sv = val[order]
    start = np.concatenate(([0], np.cumsum(n)[:-1]))
    lo = start + (n - 1) // 2
    hi = start + n // 2
    p50 = (sv[lo] + sv[hi]) / 2.0
    odd = n % 2 == 1
    p50[odd] = sv[lo[odd]]
    has_nan = np.bincount(sid, weights=np.isnan(val), minlength=len(uniq)) > 0
    p50[has_nan] = np.nan
    p = p50[sid]
    with np.errstate(invalid="ignore"):
        slow = (n[sid] >= 2) & (p > 0) & (val > p * (1 + th["slow_rank_ratio"]))
    hit = np.flatnonzero(slow)
    if not len(hit):
        return []
    # a step's label keeps its first spelling (the former dict of steps); ranks ascending
    hit = hit[np.lexsort((rk[hit], sid[hit]))]
    out = []
    for i in hit.tolist():
        r, s = keys[i]
        v, m, cnt = step_time[keys[i]], float(p[i]), int(n[sid[i]])
        out.append(Finding("SLOW_RANK", "warn", r, str(s),
                           f"rank {r} step {s}: step time {v:,.1f} us is {v / m - 1:+.1%} over the p50 "
                           f"of {cnt} ranks ({m:,.1f} us; threshold {th['slow_rank_ratio']:.0%})",
                           "step_trace_time.csv", float(v / m - 1), float(th["slow_rank_ratio"])))
    return out


_COMPILE = __import__("re").compile(r"(?i)compile")


def confirm_recompile(findings: list, kernels: pd.DataFrame) -> list:
    """RECOMPILE_SUSPECTED only where the kernel table holds evidence that tells recompilation
    apart from input setup or a host stall: the task ending the gap runs on the AI CPU (dynamic
    shape ops fall back there while graphs recompile; an AI CPU task elsewhere in the step is
    ordinary, e.g. NonZero) or a task of that step is a compile task by name or type. Without such evidence the finding becomes IDLE_GAP_UNEXPLAINED
    (info): the same gap figures, no claimed cause.

    ``findings``: from :func:`label_steps`; ``kernels``: the rank's kernel table
    (columns ``row``, ``step``, ``name``, ``op_type``, ``core_type``). The table is grouped by
    step once and the compile regex runs once per distinct name / type, however many steps
    carry the finding."""
    out = []
    ctx = None
    for f in findings:
        if f.code != "RECOMPILE_SUSPECTED":
            out.append(f)
            continue
        if ctx is None:
            ctx = _EvidenceIndex(kernels)
        ev = ctx.evidence(f)
        if ev:
            out.append(Finding(f.code, f.severity, f.rank, f.step, f"{f.message}; evidence: {ev}", f.evidence,
                               f.value, f.threshold))
        else:
            msg = f.message.replace("(graph recompilation or host stall suspected)",
                                    "(no AI CPU or compile task in the step tells recompilation apart from input "
                                    "setup or a host stall)")
            out.append(Finding("IDLE_GAP_UNEXPLAINED", "info", f.rank, f.step, msg, f.evidence, f.value, f.threshold))
    return out


