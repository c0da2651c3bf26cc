"""Interval arithmetic on integer-nanosecond task intervals (vectorised with numpy).

ΣDuration counts every task's duration, so two overlapping tasks (e.g. an allreduce on the
communication stream under a MatMul on the compute stream) are counted twice. The *busy
union* merges intervals first and counts every busy nanosecond once. Hence for any set of
tasks ΣDuration >= busy union, and for compute tasks C and communication tasks M:

    ΣDuration(C ∪ M) − union(C ∪ M) = [Σ(C) − union(C)] + [Σ(M) − union(M)] + |C ∩ M|

where |C ∩ M| = union(C) + union(M) − union(C ∪ M) is the overlapped communication time
(msprof "Overlapped" = Communication − Communication(Not Overlapped)).
"""
from __future__ import annotations

import numpy as np


def merge(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Merge possibly overlapping intervals ``[start, end)``.

    Args:
        starts, ends: equal-length integer arrays (ns); ``ends >= starts``.

    Returns:
        ``(seg_starts, seg_ends)``: disjoint, sorted intervals covering the same time.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    if (e >= s).all():
        # every interval ends at or after its start, so a segment's largest end exceeds every
        # earlier segment's end (which lies before the segment's first start): the running
        # maximum at the segment's last interval is the segment's end (no reduceat)
        return s[idx], reach[np.append(idx[1:], s.size) - 1]
    return s[idx], np.maximum.reduceat(e, idx)


def busy_union_ns(starts, ends) -> int:
    """Length (ns) of the union of intervals ``[start, end)``: the busy-union caliber."""
    seg_s, seg_e = merge(starts, ends)
    return int((seg_e - seg_s).sum())


def subtract(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """Parts of union(A) not covered by union(B), as disjoint sorted segments.

    Exposed communication is this: union(comm) minus union(compute)
    (msprof "Communication(Not Overlapped)", see :mod:`perfgate.terms`).
    """
    as_, ae = merge(a_starts, a_ends)
    bs, be = merge(b_starts, b_ends)
    out_s, out_e = [], []
    j = 0
    for s, e in zip(as_.tolist(), ae.tolist()):
        cur = s
        while j < len(bs) and be[j] <= cur:
            j += 1
        k = j
        while k < len(bs) and bs[k] < e:
            if bs[k] > cur:
                out_s.append(cur)
                out_e.append(int(bs[k]))
            cur = max(cur, int(be[k]))
            if cur >= e:
                break
            k += 1
        if cur < e:
            out_s.append(cur)
            out_e.append(e)
    return np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


def gaps(starts, ends, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle segments of ``[lo, hi)`` not covered by any interval (msprof "Free")."""
    return subtract(np.array([lo]), np.array([hi]), starts, ends)


def segmented_union_ns(seg, starts, ends, nseg: int, presorted: bool = False) -> np.ndarray:
    """Busy union (ns) of the intervals ``[start, end)`` of each segment ``0..nseg-1`` at once.

    ``seg``: int array, the segment of each interval (e.g. a step code). Returns an int64 array
    of length ``nseg``, each entry equal to :func:`busy_union_ns` of that segment's intervals
    (exact integers; an empty segment is 0). One lexsort and one running maximum over the
    whole table instead of one merge per segment: a later interval adds
    ``max(0, end − max(start, reach))`` where ``reach`` is the largest end before it in its
    segment (intervals in start order). ``presorted=True``: the intervals are already in
    (segment, start) order (the sort is skipped).
    """
    seg = np.asarray(seg, dtype=np.int64)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    out = np.zeros(nseg, dtype=np.int64)
    if s.size == 0:
        return out
    if not presorted:
        order = np.lexsort((s, seg))
        seg, s, e = seg[order], s[order], e[order]
    lo = int(min(s.min(), e.min()))
    width = int(max(s.max(), e.max())) - lo + 1
    if width * (nseg + 1) >= 2 ** 62:  # offsets would overflow: merge segment by segment
        bounds = np.searchsorted(seg, np.arange(nseg + 1))
        for i in range(nseg):
            a, b = bounds[i], bounds[i + 1]
            if b > a:
                out[i] = busy_union_ns(s[a:b], e[a:b])
        return out
    # running max of end within each segment: offset every segment above all earlier ones
    key = seg * width + (e - lo)
    reach = np.maximum.accumulate(key) - seg * width + lo
    prev = np.empty_like(reach)
    prev[0] = s[0]
    prev[1:] = reach[:-1]
    first = np.ones(s.size, dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    prev[first] = s[first]
    add = np.maximum(0, e - np.maximum(s, prev))
    heads = np.flatnonzero(first)
    out[seg[heads]] = np.add.reduceat(add, heads)
    return out


def segmented_running_max(seg, values) -> np.ndarray:
    """Running maximum of ``values`` restarted at every segment (``seg`` non-decreasing):
    ``out[i] = max(values[j] for j <= i in i's segment)``, exact for int64.

    One ``np.maximum.accumulate`` over keys that put each segment above all earlier ones
    (``segment index × width + value``); when those keys would overflow int64 the values are
    replaced by their dense ranks first (one extra sort)."""
    seg = np.asarray(seg)
    v = np.asarray(values, dtype=np.int64)
    n = v.size
    if n == 0:
        return v.copy()
    first = np.ones(n, dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    g = np.cumsum(first, dtype=np.int64) - 1
    lo = int(v.min())
    width = int(v.max()) - lo + 1
    if width * (int(g[-1]) + 2) < 2 ** 62:
        off = g * width
        return np.maximum.accumulate(off + (v - lo)) - off + lo
    uniq, inv = np.unique(v, return_inverse=True)
    off = g * len(uniq)
    return uniq[np.maximum.accumulate(off + inv.ravel()) - off]


def segmented_merge(seg, starts, ends) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`merge` of every segment at once.

    Args:
        seg: segment of each interval, non-decreasing (e.g. step codes after a sort).
        starts, ends: int64 ns, ``starts`` non-decreasing within each segment.

    Returns:
        ``(heads, seg_starts, seg_ends)``: ``heads`` are the positions of the intervals that
        open a merged segment (so ``seg[heads]`` is each merged segment's segment); the merged
        segments of one segment equal ``merge`` of that segment's intervals, in order.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    seg = np.asarray(seg)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64), s, e
    reach = segmented_running_max(seg, e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = (s[1:] > reach[:-1]) | (seg[1:] != seg[:-1])
    heads = np.flatnonzero(new)
    return heads, s[heads], np.maximum.reduceat(e, heads)
