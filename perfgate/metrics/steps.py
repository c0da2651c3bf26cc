"""Per-step, per-rank anatomy and host-bound analysis (pure functions over one rank's tables).

For each step of a rank (device tasks from kernel_details.csv, host window from the trace's
``ProfilerStep#N`` event when present), in microseconds:

* ``wall_us`` = last task end − first task start (device span);
* ``busy_us`` = busy union of the tasks; ``kernel_sum_us`` = ΣDuration;
* ``bubble_us`` = wall − busy union (all device idle inside the span);
  ``underfeed_ratio`` = bubble / wall;
* ``prelaunch_us`` = first device task − host step start (torch_npu "Preparing"; from
  step_trace_time.csv when there is no trace); ``tail_us`` = host step end − last task end;
* ``internal_bubble_us`` = Σ idle gaps inside the span longer than ``bubble_min_us`` (shorter
  gaps are launch jitter); ``largest_bubble_us`` and the row that ends it;
* ``comm_sum_us`` (ΣDuration of communication rows), ``exposed_comm_us`` = *uncovered
  communication* (per communication row, its Duration minus the part the compute busy union
  covers, summed: ΣDuration-based, not msprof's busy-union Communication(Not Overlapped); the
  column keeps its recorded name, see :mod:`perfgate.terms`) and ``exposed_comm_ratio`` =
  uncovered / comm_sum.

Labels (policy ``findings`` thresholds; "step" is the host window, or the wall without one):
DEVICE_IDLE_GAP_HEAVY (underfeed ≥ 0.30), PRELAUNCH_GAP_HEAVY / TAIL_GAP_HEAVY /
INTERNAL_BUBBLE_HEAVY (≥ max(1 ms, 10 % of the step)), RECOMPILE_SUSPECTED (wall / ΣDuration
> 10, one gap ≥ half the wall, and the task after it waited ≥ half that gap; kept only with
evidence of recompilation, :func:`confirm_recompile`, else IDLE_GAP_UNEXPLAINED),
EXPOSED_COMM_SIGNIFICANT (uncovered ratio > 30 %) and COMM_WELL_HIDDEN (< 10 %), WARMUP_NOT_STRIPPED (first of
several steps longer than 1.5x the median of the others).

Cost: columnar, independent of the number of steps beyond the rows themselves. The
kernel rows are sorted once by (step, start); every per-step figure is a segmented reduction over
that order (:func:`perfgate.metrics.intervals.segmented_merge`, ``np.add.at`` / ``reduceat``), the
labels are conditions on whole columns, and Python runs once per finding, not once per step. The
plain per-step loops in ``tests/_steps_oracle.py`` are the test oracles of these reductions.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter, eq, itemgetter

import numpy as np
import pandas as pd

from perfgate.metrics.intervals import merge, segmented_merge
from perfgate.model import Finding, from_columns
from perfgate.policy.sections import FindingThresholds

STEP_COLUMNS = ["rank", "step", "first_row", "last_row", "kernels", "step_us", "wall_us", "busy_us",
                "kernel_sum_us", "bubble_us", "underfeed_ratio", "prelaunch_us", "tail_us",
                "internal_bubble_us", "largest_bubble_us", "largest_bubble_row", "wait_after_gap_us",
                "comm_sum_us", "exposed_comm_us", "exposed_comm_ratio"]

#: the policy's ``findings:`` defaults (written once, in :class:`perfgate.policy.sections.FindingThresholds`)
DEFAULT_THRESHOLDS = dict(FindingThresholds())


def covered_ns(seg_s: np.ndarray, seg_e: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per interval [start, end): length covered by the disjoint sorted segments (ns)."""
    if len(seg_s) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(seg_e - seg_s)])

    def upto(t):  # covered length in (-inf, t)
        i = np.searchsorted(seg_s, t, side="right")  # segments starting before t
        full = cum[np.maximum(i - 1, 0)]
        last_s = seg_s[np.maximum(i - 1, 0)]
        last_e = seg_e[np.maximum(i - 1, 0)]
        part = np.clip(np.minimum(t, last_e) - last_s, 0, None)
        return np.where(i > 0, full + part, 0)

    return upto(np.asarray(ends)) - upto(np.asarray(starts))


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


def _step_key(x):
    return (0, int(x)) if str(x).isdigit() else (1, 0)


def numeric_first_order(labels, by_text: bool) -> list:
    """Positions of ``labels`` in the order ``sorted(range(n), key=...)`` gives with the key
    ``(0, int(x))`` for a label whose text is all digits, else ``(1, str(x))`` (``by_text``) or
    ``(1, 0)`` (other labels keep their order): the step orders of the step table and the
    self-checks. The keys are built by C-level passes and compared by ``sorted`` itself, not by a
    Python key function called once per label."""
    labels = list(labels)
    n = len(labels)
    strs = list(map(str, labels))
    dig = np.fromiter(map(str.isdigit, strs), dtype=bool, count=n)
    vals = np.empty(n, dtype=object)
    if by_text:
        vals[:] = strs
    else:
        vals[:] = 0
    di = np.flatnonzero(dig)
    if len(di):
        obj = np.empty(n, dtype=object)
        obj[:] = labels
        ints = np.empty(len(di), dtype=object)
        ints[:] = list(map(int, obj[di].tolist()))
        vals[di] = ints
    keys = list(zip((~dig).astype(np.int64).tolist(), vals.tolist()))
    return sorted(range(n), key=keys.__getitem__)


def _group_sum(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sum of ``values`` per group id ``0..n-1`` (0 for an empty group)."""
    out = np.zeros(n, dtype=np.int64)
    if len(values):
        np.add.at(out, group, values)
    return out


def _uncovered_ns(gid, s, e, dur, is_comm, ngroups) -> np.ndarray:
    """Per communication row (``is_comm``): its duration minus the part the busy union of its
    own group's compute rows covers (ns). Rows sorted by (group, start). The compute rows are
    merged group by group in one pass (:func:`perfgate.metrics.intervals.segmented_merge`), then
    each group's times are moved into a band of their own (``group × width``) so that no group
    meets another, and one coverage lookup serves every communication row; group by group when
    the bands would overflow int64."""
    comp = ~is_comm
    d = dur[is_comm]
    lo = int(min(s.min(), e.min()))
    width = int(max(s.max(), e.max())) - lo + 1
    if width * (ngroups + 1) < 2 ** 62:
        gc = gid[comp]
        heads, cs, ce = segmented_merge(gc, s[comp], e[comp])
        off_c = gc[heads] * width - lo
        off_m = gid[is_comm] * width - lo
        return d - covered_ns(cs + off_c, ce + off_c, s[is_comm] + off_m, e[is_comm] + off_m)
    comm_idx, comp_idx = np.flatnonzero(is_comm), np.flatnonzero(comp)
    out = np.empty(len(comm_idx), dtype=np.int64)
    for g in np.unique(gid[comm_idx]):
        m = gid[comm_idx] == g
        c = comp_idx[gid[comp_idx] == g]
        cs, ce = merge(s[c], e[c])
        out[m] = d[m] - covered_ns(cs, ce, s[comm_idx[m]], e[comm_idx[m]])
    return out


_STR_ONLY = frozenset({str})


def _last_window_of(window_labels: np.ndarray, labels) -> np.ndarray:
    """Per label: the position of the last window of that label among ``window_labels``, -1
    without one. A dict of the last positions when every window label and label is a str (the
    trace reader's always are); otherwise the pandas form it equals: the windows kept by
    ``~Index.duplicated(keep="last")``, ``get_indexer`` on them, mapped back to positions."""
    wl, lab = window_labels.tolist(), list(labels)
    if _STR_ONLY.issuperset(map(type, wl)) and _STR_ONLY.issuperset(map(type, lab)):   # C-level type tests
        last = dict(zip(wl, range(len(wl))))   # a repeated label: its last position stays
        return np.fromiter(map(last.get, lab, repeat(-1)), dtype=np.intp, count=len(lab))
    idx = pd.Index(window_labels)
    keep = np.flatnonzero(~idx.duplicated(keep="last"))
    at = pd.Index(idx[keep]).get_indexer(pd.Index(labels))
    return np.where(at >= 0, keep[np.maximum(at, 0)], -1) if len(keep) else np.full(len(lab), -1, dtype=np.intp)


def _host_windows(rank, labels: np.ndarray, t_first: np.ndarray, t_last: np.ndarray) -> tuple:
    """Per step (``labels``; first task start / last task end ``t_first`` / ``t_last``, ns): the
    host step time, prelaunch and tail (µs, NaN where unknown). From the trace's
    ``ProfilerStep#N`` window (the last window of a label wins) when the host clock is usable;
    for a step without one, prelaunch is step_trace_time.csv's Preparing (the step's first
    non-missing value, as a group-by ``first()`` gives it)."""
    ng = len(labels)
    step_us = np.full(ng, np.nan)
    pre = np.full(ng, np.nan)
    tail = np.full(ng, np.nan)
    have_win = np.zeros(ng, dtype=bool)
    if rank.trace is not None and not rank.trace.steps.empty and getattr(rank, "host_clock_ok", True):
        w = rank.trace.steps
        wi = _last_window_of(w["step"].astype(str).to_numpy(dtype=object), labels)
        have_win = wi >= 0
        ws = w["start_ns"].to_numpy().astype(np.int64)[wi[have_win]]
        we = w["end_ns"].to_numpy().astype(np.int64)[wi[have_win]]
        step_us[have_win] = (we - ws) / 1000.0
        pre[have_win] = (t_first[have_win] - ws) / 1000.0
        tail[have_win] = (we - t_last[have_win]) / 1000.0
    if rank.step_trace is not None and not have_win.all():
        # Preparing of every step label at once
        st_ = rank.step_trace
        ok = ~np.asarray(pd.isna(st_["step"].array), dtype=bool)   # no Series of the mask
        keys = st_["step"].to_numpy(dtype=object)[ok]
        vals = st_["preparing_us"].to_numpy(dtype=float)[ok]
        nn = ~np.isnan(vals)
        uk, first_at = np.unique(keys[nn].astype(str), return_index=True)
        from perfgate.metrics import kernels as km
        at = km.positions_in(uk.astype(object).tolist(), labels)   # uk distinct (np.unique)
        pv = np.where(at >= 0, vals[nn][first_at][np.maximum(at, 0)] if len(uk) else np.nan, np.nan)
        pre[~have_win] = pv[~have_win]
    return step_us, pre, tail


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
        ar = np.empty(ng, dtype=object)
        ar[:] = after_row
        ar[gsel] = list(map(int, row[pos].tolist()))
        after_row = ar.tolist()
    step_us, pre, tail = _host_windows(rank, labels, t_first, t_last)
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
    perm = appear[numeric_first_order(labels[appear].tolist(), by_text=False)]
    out = {c: (list(map(v.__getitem__, perm.tolist())) if isinstance(v, list) else v[perm]) for c, v in cols.items()}
    # a list column is typed as pd.Series(list) types it; its array (not the Series) goes in, so
    # the frame aligns no index (~0.2 ms per rank)
    return pd.DataFrame({c: pd.Series(v).array if isinstance(v, list) else v for c, v in out.items()},
                        columns=STEP_COLUMNS)


def round6(values, nonfinite: str = "none") -> list:
    """``[round(float(v), 6) for v in values]`` as Python floats, non-finite values as None
    (``nonfinite="none"``, the records' rule) or kept (``"keep"``, as ``round`` keeps them).

    Exact, not ``np.round``: where ``p = v * 1e6`` (one rounding) is farther than one ulp from a
    half-integer and ``|p| < 2**52``, ``rint(p)`` is the integer ``round`` picks and ``rint(p) / 1e6``
    (one correctly rounded division) is the double nearest that decimal, which is ``round``'s
    result; the few other values (ties, huge values) go through ``round`` itself. One numpy pass
    and one ``tolist`` instead of one ``round`` call per value."""
    a = np.asarray(values, dtype=np.float64)
    fin = np.isfinite(a)
    with np.errstate(invalid="ignore", over="ignore"):
        p = a * 1e6
        r = np.rint(p)
        y = r / 1e6
        safe = fin & (np.abs(p) < 2.0 ** 52) & (np.abs(np.abs(p - r) - 0.5) > np.spacing(np.abs(p)))
    out = np.empty(len(a), dtype=object)
    out[:] = y.tolist()
    slow = np.flatnonzero(fin & ~safe)
    if len(slow):
        out[slow] = list(map(round, a[slow].tolist(), repeat(6)))
    if not fin.all():
        bad = np.flatnonzero(~fin)
        if nonfinite == "none":
            out[bad] = None
        else:
            out[bad] = a[bad].tolist()
    return out.tolist()


def table_records(df: pd.DataFrame) -> list[dict]:
    """:func:`perfgate.metrics.kernels.records` of ``df`` (same keys, values and types: numpy
    integers -> int, floats rounded to 6 decimals, NaN / ±inf / ``pd.NA`` -> None), built by
    columns: float columns rounded by :func:`round6`, and the row dicts made by one C-level
    ``map``, so a table of one row per step costs no Python-level call per row. Used
    for the fingerprint's ``detail.steps`` and ``detail.comm_kinds``."""
    from perfgate.metrics import kernels as km
    names = list(df.columns)
    cols = []
    for j, (_, col) in enumerate(df.items()):   # positional: duplicate names are kept
        kind = col.dtype.kind if isinstance(col.dtype, np.dtype) else None
        if kind == "f":
            cols.append(round6(col.to_numpy()))
            continue
        values = col.tolist()
        if kind in ("i", "u", "b") or set(map(type, values)) <= km._PLAIN:
            cols.append(values)
            continue
        cols.append(list(map(itemgetter(names[j]), km.records(df.iloc[:, [j]]))))   # odd objects: as records cleans them
    if not names:
        return [{} for _ in range(len(df))]
    return list(map(dict, map(zip, repeat(names), zip(*cols))))


def step_time_records(step_time: dict) -> list[dict]:
    """The fingerprint's ``detail.step_time``: ``{"rank": int, "step": str, "time_us":
    round(v, 6)}`` per ``(rank, step)`` key of ``step_time``, sorted by (rank, step text) (stable),
    built by columns (no Python call per step)."""
    keys = list(step_time)
    if not keys:
        return []
    rk = list(map(itemgetter(0), keys))
    st_ = list(map(str, map(itemgetter(1), keys)))
    sort_keys = list(zip(rk, st_))
    order = sorted(range(len(keys)), key=sort_keys.__getitem__)
    vals = round6(np.array(list(step_time.values()), dtype=float), nonfinite="keep")
    rows = zip(map(int, map(rk.__getitem__, order)), map(st_.__getitem__, order), map(vals.__getitem__, order))
    return list(map(dict, map(zip, repeat(("rank", "step", "time_us")), rows)))


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
    f = {c: table[c].to_numpy(dtype=float) for c in names}  # per column: no sub-frame (~0.3 ms per rank)
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
    ev_pre = f"{evidence} rows "
    order = np.lexsort((slot, rows))
    rows, slot = rows[order], slot[order]
    nf = len(rows)
    if not nf:
        return []
    # the firing rows' values as Python objects (as a row of iterrows gives them): one column
    # conversion each, then every finding's fields and message as columns, one format map per label
    at = np.unique(rows)
    pos = np.searchsorted(at, rows)
    col = {}
    for c in _LABEL_COLUMNS:
        if c in table:
            v = np.empty(len(at), dtype=object)
            v[:] = table[c].to_numpy()[at].tolist()
            col[c] = v[pos]
    rk = np.empty(nf, dtype=object)
    rk[:] = list(map(int, col["rank"].tolist()))
    st_ = np.empty(nf, dtype=object)
    st_[:] = list(map(str, col["step"].tolist()))
    ev = list(map(str.strip, map("{}{}-{}".format, repeat(ev_pre), col["first_row"].tolist(),
                                 col["last_row"].tolist())))
    code = np.empty(nf, dtype=object)
    sev = np.empty(nf, dtype=object)
    msg = np.empty(nf, dtype=object)
    value = np.empty(nf, dtype=object)
    thr = np.empty(nf, dtype=object)

    def fill(s_, code_, sev_, template, args, val, th_val):
        sel = np.flatnonzero(slot == s_)
        if not len(sel):
            return
        code[sel] = code_
        sev[sel] = sev_
        cols = [a[sel].tolist() if isinstance(a, np.ndarray) else repeat(a) for a in (rk, st_) + args]
        msg[sel] = list(map(template.format, *cols))
        value[sel] = list(map(float, val[sel].tolist()))
        thr[sel] = list(map(float, th_val[sel].tolist())) if isinstance(th_val, np.ndarray) else float(th_val)

    fill(0, "DEVICE_IDLE_GAP_HEAVY", "warn",
         "rank {} step {}: device idle {:.1%} of its span ({:,.1f} of {:,.1f} us) ≥ {:.0%}: the host does not "
         "feed the device fast enough", (col["underfeed_ratio"], col["bubble_us"], col["wall_us"],
                                         th["underfeed_ratio"]), col["underfeed_ratio"], th["underfeed_ratio"])
    lim_at = np.asarray(lim[rows], dtype=float)
    for j, (code_, c, what) in enumerate(_GAP_LABELS):
        if c == "internal_bubble_us":   # not every gap: the step table's bubble column counts them all
            what = f"in idle gaps longer than {th['bubble_min_us']:g} us (findings.bubble_min_us) inside the step"
        li = np.empty(nf, dtype=object)
        li[:] = lim_at.tolist()
        fill(1 + j, code_, "warn", "rank {} step {}: {:,.1f} us {} ≥ {:,.1f} us (max({:g} us, {:.0%} of the step, elapsed: its host ProfilerStep window, else its device span))",
             (col[c], what, li, th["gap_min_us"], th["gap_step_ratio"]), col[c], li)
    if (slot == 4).any():
        ratio = np.empty(nf, dtype=object)
        sel = slot == 4
        ratio[sel] = (np.asarray(col["wall_us"][sel].tolist()) / np.asarray(col["kernel_sum_us"][sel].tolist())).tolist()
        fill(4, "RECOMPILE_SUSPECTED", "warn",
             "rank {} step {}: wall {:,.1f} us is {:.1f}x ΣDuration; one idle gap of {:,.1f} us ends at row {} whose "
             "Wait Time is {:,.1f} us (graph recompilation or host stall suspected)",
             (col["wall_us"], ratio, col["largest_bubble_us"], col["largest_bubble_row"], col["wait_after_gap_us"]),
             ratio, th["recompile_wall_ratio"])
    x = col["exposed_comm_ratio"]
    fill(5, "EXPOSED_COMM_SIGNIFICANT", "info",
         "rank {} step {}: {:.1%} of communication time is not hidden by compute (> {:.0%})",
         (x, th["exposed_significant"]), x, th["exposed_significant"])
    fill(6, "COMM_WELL_HIDDEN", "info", "rank {} step {}: only {:.1%} of communication time is exposed (< {:.0%})",
         (x, th["exposed_hidden"]), x, th["exposed_hidden"])
    return from_columns(Finding, code.tolist(), sev.tolist(), rk.tolist(), st_.tolist(), msg.tolist(), ev,
                        value.tolist(), thr.tolist())


_LABEL_COLUMNS = ("rank", "step", "first_row", "last_row", "underfeed_ratio", "bubble_us", "wall_us",
                  "prelaunch_us", "tail_us", "internal_bubble_us", "kernel_sum_us", "largest_bubble_us",
                  "largest_bubble_row", "wait_after_gap_us", "exposed_comm_ratio")
_GAP_LABELS = (("PRELAUNCH_GAP_HEAVY", "prelaunch_us", "before the first device task"),
               ("TAIL_GAP_HEAVY", "tail_us", "after the last device task"),
               ("INTERNAL_BUBBLE_HEAVY", "internal_bubble_us", "in idle gaps inside the step"))


def warmup_findings(table: pd.DataFrame, thresholds: dict | None = None, evidence: str = "") -> list[Finding]:
    """WARMUP_NOT_STRIPPED per rank: several steps, and the first one longer than
    ``warmup_ratio`` x the median of the others (host window, or device wall without one).

    ``table``: the concatenated :func:`step_table` of the ranks (column ``rank``); each rank's
    rows in table order, ranks ascending. Columns are read once and each rank is a slice of one
    stable sort by rank (was a group-by with a pandas ``where`` per rank, ~1 ms per rank)."""
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    out = []
    if not len(table):
        return out
    rank = table["rank"].to_numpy()
    if rank.dtype.kind not in "iu":   # unusual rank labels: the group-by form
        return _warmup_findings_grouped(table, th, evidence)
    step_us = table["step_us"].to_numpy(dtype=float)
    dur_all = np.where(np.isnan(step_us), table["wall_us"].to_numpy(dtype=float), step_us)
    order = np.argsort(rank, kind="stable")
    rs = rank[order]
    cut = np.flatnonzero(np.concatenate([[True], rs[1:] != rs[:-1], [True]]))
    step_col = table["step"].to_numpy(dtype=object)
    fr, lr = table["first_row"].tolist(), table["last_row"].tolist()
    for a, b in zip(cut[:-1].tolist(), cut[1:].tolist()):
        if b - a < 2:
            continue
        idx = order[a:b]
        dur = dur_all[idx]
        rest = float(np.median(dur[1:]))
        if rest > 0 and dur[0] > th["warmup_ratio"] * rest:
            i0 = int(idx[0])
            rk = int(rs[a])
            out.append(Finding(
                "WARMUP_NOT_STRIPPED", "fail", rk, str(step_col[i0]),
                f"rank {rk}: first step {step_col[i0]} takes {dur[0]:,.1f} us, {dur[0] / rest:.2f}x the median "
                f"of the other {b - a - 1} step(s) ({rest:,.1f} us): warm-up was not stripped (use the "
                f"profiler schedule's warmup/skip_first)", f"{evidence} rows {fr[i0]}-{lr[i0]}",
                float(dur[0] / rest), float(th["warmup_ratio"])))
    return out


def _warmup_findings_grouped(table: pd.DataFrame, th: dict, evidence: str) -> list[Finding]:
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


def cross_rank_findings(tables: pd.DataFrame, step_time: dict, infos: dict,
                        thresholds: dict | None = None) -> list[Finding]:
    """Findings across ranks.

    Args:
        tables: concatenated ``step_table`` of every rank.
        step_time: {(rank, step): step time us} (step_trace_time.csv step time, else wall).
        infos: {rank: profiler_info facets} (for ``collection_end_ns``).

    SLOW_RANK: a rank's step time exceeds the p50 over ranks of that step by more than
    ``slow_rank_ratio`` (msprof-analyze advisor uses 5 %). RANK_STEP_MISMATCH: ranks hold
    different steps; RANKS_WITHOUT_COMMON_STEP (fail) when no step is held by two ranks (one run's
    ranks profile the same steps; ranks that lost some steps still share the others). RANKS_FROM_DIFFERENT_RUNS (fail): collection ended more than
    ``max_collection_spread_s`` apart (host wall clock, not device timestamps); where a rank has no
    recorded collection end, when one rank's kernels (``info["kernel_span_ns"]``) end more than
    that before another's begin.
    """
    th = dict(DEFAULT_THRESHOLDS, **(thresholds or {}))
    out = []
    ranks = sorted({r for r, _ in step_time})
    out.extend(_slow_ranks(step_time, th))
    per_rank = {r: tuple(sorted(g.tolist())) for r, g in tables.groupby("rank", sort=False)["step"]} \
        if len(tables) else {}
    sets = {r: per_rank.get(r, ()) for r in ranks
            if r in per_rank or not len(tables)}  # partial ranks hold no kernel steps
    if len(set(sets.values())) > 1:
        desc = "; ".join(f"rank {r}: {len(v)} step(s) {list(v)[:4]}" for r, v in sets.items())
        from collections import Counter
        shared = Counter(x for v in sets.values() for x in set(v))
        if all(sets.values()) and max(shared.values()) == 1:   # no step held by two ranks
            # every rank of one run profiles the same steps (one schedule): no step in common is a
            # rank folder of another run, whatever its clock says (rank 1 of step 51 beside rank 0
            # of step 50 would otherwise pass and be saved as a baseline)
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
    spans = {r: i.get("kernel_span_ns") for r, i in infos.items() if i.get("kernel_span_ns")}
    if len(ends) < len(infos) and len(spans) > 1:
        # a rank without profiler_info's collection end: one run's ranks execute together, so their
        # kernel spans overlap; a gap between two of them beyond the same limit is another run
        # (e.g. one run's rank 1 folder, captured ~1 h later, beside another run's rank 0)
        early = min(spans, key=lambda r: spans[r][1])
        late = max(spans, key=lambda r: spans[r][0])
        gap = (spans[late][0] - spans[early][1]) / 1e9
        if gap > th["max_collection_spread_s"]:
            out.append(Finding("RANKS_FROM_DIFFERENT_RUNS", "fail", late, None,
                               f"rank {early}'s kernels end {gap:,.0f} s before rank {late}'s begin "
                               f"(> {th['max_collection_spread_s']:g} s; one run's ranks execute together): the "
                               f"rank folders come from different runs", "kernel_details.csv Start Time(us) "
                               "(no profiler_info collection end on every rank)", gap,
                               th["max_collection_spread_s"]))
    return out


def _slow_ranks(step_time: dict, th: dict) -> list[Finding]:
    """SLOW_RANK findings (see :func:`cross_rank_findings`): steps in order of their label
    (text), ranks ascending within a step. The p50 of every step over ranks comes from one
    (step, value) sort of all entries, not one ``np.median`` per step; it equals
    ``np.median`` (mean of the two middle values for an even count, NaN when a value is NaN)."""
    if not step_time:
        return []
    keys = list(step_time)
    labels = list(map(str, map(itemgetter(1), keys)))
    uniq, first = np.unique(np.asarray(labels, dtype=object), return_index=True)  # steps sorted by text
    sid = np.searchsorted(uniq, np.asarray(labels, dtype=object))
    rk = np.array(list(map(itemgetter(0), keys)))
    val = np.array(list(step_time.values()), dtype=float)
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
    # a step's label keeps its first spelling (as a dict keyed by step keeps it); ranks ascending
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
    out = list(findings)
    ctx = None
    # only RECOMPILE_SUSPECTED findings are looked at (one C-level scan finds them)
    hit = np.flatnonzero(np.fromiter(map(eq, map(attrgetter("code"), out), repeat("RECOMPILE_SUSPECTED")),
                                     dtype=bool, count=len(out))).tolist()
    for i in hit:
        f = out[i]
        if ctx is None:
            ctx = _EvidenceIndex(kernels)
        ev = ctx.evidence(f)
        if ev:
            out[i] = Finding(f.code, f.severity, f.rank, f.step, f"{f.message}; evidence: {ev}", f.evidence,
                             f.value, f.threshold)
        else:
            msg = f.message.replace("(graph recompilation or host stall suspected)",
                                    "(no AI CPU or compile task in the step tells recompilation apart from input "
                                    "setup or a host stall)")
            out[i] = Finding("IDLE_GAP_UNEXPLAINED", "info", f.rank, f.step, msg, f.evidence, f.value, f.threshold)
    return out


class _EvidenceIndex:
    """The kernel table's rows per step label (table order) and, per row, whether its name /
    type is a compile task: built once for all RECOMPILE_SUSPECTED findings of a rank."""

    def __init__(self, k: pd.DataFrame):
        from perfgate.metrics import kernels as km
        self.k = k
        self.by_step = {str(label): idx for label, idx in km.step_groups(k)}
        self.rownum = k["row"].to_numpy()
        self.compile = {c: km.matches(k[c], _COMPILE) for c in ("name", "op_type")}

    def evidence(self, f) -> str | None:
        import re
        k = self.k
        idx = self.by_step.get(str(f.step), np.zeros(0, dtype=np.int64))
        m = re.search(r"ends at row (\d+)", f.message)
        if m:
            after = idx[self.rownum[idx] == int(m.group(1))]
            if len(after) and (str(k["core_type"].iloc[after[0]]).upper() in ("AI_CPU", "AICPU")
                               or "aicpu" in str(k["name"].iloc[after[0]]).lower()):
                return f"row {m.group(1)} after the gap runs on the AI CPU"
        for col in ("name", "op_type"):
            hit = idx[self.compile[col][idx]]
            if len(hit):
                j = int(hit[0])
                return f"row {int(self.rownum[j])} {col} {k[col].iloc[j]!r} is a compile task"
        return None
