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
