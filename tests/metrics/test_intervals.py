import numpy as np
from hypothesis import given, settings, strategies as st

from perfgate.metrics.intervals import busy_union_ns, gaps, merge, subtract



# test oracles: the plain formulas the interval identities are checked with
def sum_duration_ns(starts, ends) -> int:
    """ΣDuration (ns): plain sum of interval lengths, overlaps counted every time."""
    return int((np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64)).sum())


def intersection_ns(a_starts, a_ends, b_starts, b_ends) -> int:
    """Length (ns) of union(A) ∩ union(B) = union(A) + union(B) − union(A ∪ B)."""
    ua = busy_union_ns(a_starts, a_ends)
    ub = busy_union_ns(b_starts, b_ends)
    uab = busy_union_ns(np.concatenate([np.asarray(a_starts), np.asarray(b_starts)]),
                        np.concatenate([np.asarray(a_ends), np.asarray(b_ends)]))
    return ua + ub - uab

def test_union_hand_computed():
    # [0,10) [5,15) [20,25) [25,30) -> [0,15) + [20,30) = 25
    s = [0, 5, 20, 25]
    e = [10, 15, 25, 30]
    assert busy_union_ns(s, e) == 25
    assert sum_duration_ns(s, e) == 30
    ms, me = merge(s, e)
    assert ms.tolist() == [0, 20] and me.tolist() == [15, 30]


def test_nested_and_unsorted():
    assert busy_union_ns([50, 0, 10], [60, 100, 20]) == 100


def test_subtract_and_gaps():
    s, e = subtract([0, 50], [40, 90], [10, 60], [20, 70])
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 40), (50, 60), (70, 90)]
    gs, ge = gaps([10, 30], [20, 40], 0, 50)
    assert list(zip(gs.tolist(), ge.tolist())) == [(0, 10), (20, 30), (40, 50)]


def test_intersection():
    assert intersection_ns([0], [100], [50, 120], [110, 130]) == 50


intervals = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_sum_at_least_union_and_idempotent(iv):
    s = np.array([a for a, _ in iv])
    e = s + np.array([d for _, d in iv])
    u = busy_union_ns(s, e)
    assert sum_duration_ns(s, e) >= u
    ms, me = merge(s, e)
    assert busy_union_ns(ms, me) == u          # union is idempotent
    assert (ms[1:] > me[:-1]).all()            # disjoint and sorted


@settings(max_examples=200, deadline=None)
@given(intervals, intervals)
def test_gap_decomposition_identity(a, b):
    """ΣDuration − union = self-overlap(A) + self-overlap(B) + |A ∩ B| (module docstring)."""
    cs = np.array([x for x, _ in a]); ce = cs + np.array([d for _, d in a])
    ms = np.array([x for x, _ in b]); me = ms + np.array([d for _, d in b])
    alls, alle = np.concatenate([cs, ms]), np.concatenate([ce, me])
    lhs = sum_duration_ns(alls, alle) - busy_union_ns(alls, alle)
    rhs = (sum_duration_ns(cs, ce) - busy_union_ns(cs, ce)) + (sum_duration_ns(ms, me) - busy_union_ns(ms, me)) \
        + intersection_ns(cs, ce, ms, me)
    assert lhs == rhs
    ns, ne = subtract(ms, me, cs, ce)
    assert int((ne - ns).sum()) == busy_union_ns(ms, me) - intersection_ns(cs, ce, ms, me)
