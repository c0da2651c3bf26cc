"""Columnar per-step computations (issue 21) equal the per-step loops they replaced, on random
tables: segmented busy unions, exposed communication per row, op identity checks."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from perfgate.metrics.comm import _exposed_per_row, op_identity_checks
from perfgate.metrics.intervals import busy_union_ns, merge, segmented_union_ns
from perfgate.metrics.steps import covered_ns

FAST = settings(max_examples=80, deadline=None)
T0 = 1_736_408_883_704_643_212


def _table(seed, n, nseg):
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, nseg, n)
    s = T0 + seg * 10_000 + rng.integers(0, 3_000, n)
    e = s + rng.integers(0, 800, n)
    return seg, s, e, rng


@FAST
@given(st.integers(0, 10**6), st.integers(0, 80), st.integers(1, 7))
def test_segmented_union_equals_one_union_per_segment(seed, n, nseg):
    seg, s, e, _ = _table(seed, n, nseg)
    assert segmented_union_ns(seg, s, e, nseg).tolist() == [busy_union_ns(s[seg == i], e[seg == i])
                                                             for i in range(nseg)]


@FAST
@given(st.integers(0, 10**6), st.integers(1, 80), st.integers(1, 7))
def test_exposed_per_row_equals_per_step_coverage(seed, n, nseg):
    codes, s, e, rng = _table(seed, n, nseg)
    codes = codes.astype(np.int8)
    is_comm = rng.random(n) < 0.3
    comm_idx, comp_idx = np.flatnonzero(is_comm), np.flatnonzero(~is_comm)
    if not len(comm_idx):
        return
    dur = e - s
    want = []
    for i in comm_idx:
        comp = comp_idx[codes[comp_idx] == codes[i]]
        cs, ce = merge(s[comp], e[comp])
        want.append(int(dur[i] - covered_ns(cs, ce, s[i:i + 1], e[i:i + 1])[0]))
    assert _exposed_per_row(codes, s, e, dur, comm_idx, comp_idx).tolist() == want


class _Comm:
    def __init__(self, ops):
        self.ops = ops


@FAST
@given(st.integers(0, 10**6), st.integers(1, 40))
def test_op_identity_checks_equal_the_per_step_loop(seed, n):
    rng = np.random.default_rng(seed)
    ops = pd.DataFrame({"step": rng.choice(["1", "2", "10", "3"], n), "kind": "collective",
                        "op": [f"op{i}" for i in range(n)], "elapse_us": rng.uniform(0, 100, n),
                        "transit_us": rng.uniform(0, 30, n), "wait_us": rng.uniform(0, 30, n),
                        "idle_us": rng.uniform(0, 30, n)})
    exact = rng.random(n) < 0.6
    ops.loc[exact, "elapse_us"] = (ops["transit_us"] + ops["wait_us"] + ops["idle_us"])[exact]
    got = op_identity_checks(_Comm(ops), 0, "x", tol_us=1.0)
    diff = ops["elapse_us"] - (ops["transit_us"] + ops["wait_us"] + ops["idle_us"])
    want = []
    for step, d in diff.groupby(ops["step"]):  # the former loop
        bad = d[d.abs() > 1.0]
        want.append((str(step), "pass" if bad.empty else "fail", len(d) if bad.empty else len(bad),
                     float(d.abs().max()) if bad.empty else float(ops.loc[bad.abs().idxmax(), "elapse_us"])))
    assert [(c.step, c.status) for c in got] == [(w[0], w[1]) for w in want]
    for c, w in zip(got, want):
        if w[1] == "pass":
            assert c.message.startswith(f"{w[2]} op(s)") and f"{w[3]:.6f} us" in c.message
        else:
            assert c.expected == w[3] and f"({w[2]} op(s) off" in c.message
