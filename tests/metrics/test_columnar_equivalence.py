"""Columnar per-step computations equal the per-step loops they replaced, on random
tables: segmented busy unions, exposed communication per row, op identity checks."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from perfgate.metrics.comm import _uncovered_per_row, op_identity_checks
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
def test_uncovered_per_row_equals_per_step_coverage(seed, n, nseg):
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
    assert _uncovered_per_row(codes, s, e, dur, comm_idx, comp_idx).tolist() == want


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


def _records_by_to_dict(df, finite):
    """The row-wise ``to_dict("records")`` cleaning the column-wise records replaced."""
    out = []
    for rec in df.to_dict("records"):
        clean = {}
        for key, v in rec.items():
            if isinstance(v, np.integer):
                v = int(v)
            elif isinstance(v, (float, np.floating)):
                v = None if (not np.isfinite(v) if finite else np.isnan(v)) else round(float(v), 6)
            elif v is pd.NA or (finite and v is None):
                v = None
            clean[key] = v
        out.append(clean)
    return out


def _mixed_frame(seed, n):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=n) * 1e3
    f[rng.random(n) < 0.2] = np.nan
    if n:
        f[0] = np.inf if seed % 2 else f[0]
    return pd.DataFrame({
        "family": [f"fam{i % 5}" for i in range(n)],
        "calls": rng.integers(0, 1000, n),
        "share": f,
        "bound": pd.Categorical(rng.choice(["mac", "vec", "mte2"], n)),
        "flag": rng.random(n) < 0.5,
        "obj": pd.Series([np.int64(i) if i % 3 else np.float64(i / 7) for i in range(n)], dtype=object),
        "nullable": pd.array([None if i % 4 == 0 else i for i in range(n)], dtype="Int64"),
        # text columns: records passes str / int / bool / None through without the cleaning loop
        "text": pd.Series([None if i % 5 == 1 else f"t{i}" for i in range(n)], dtype="str"),
        "plain": pd.Series([None if i % 3 == 0 else (f"p{i}" if i % 2 else i) for i in range(n)], dtype=object),
        "allnan": np.full(n, np.nan),   # a pipe-stage column without pipe data
        "npstr": pd.Series([np.str_(f"s{i}") if i % 2 else True for i in range(n)], dtype=object),
    })


@FAST
@given(st.integers(0, 10**6), st.integers(0, 30))
def test_column_wise_records_equal_to_dict_records(seed, n):
    """metrics.kernels.records (column-wise, per-rank fixed cost; the one records helper of
    the family view, the fingerprint detail and the structure report) gives the same JSON-safe
    records as the to_dict("records") loop it replaced."""
    from perfgate.metrics.kernels import records
    df = _mixed_frame(seed, n)
    assert records(df) == _records_by_to_dict(df, finite=True)
    assert records(df, limit=3) == _records_by_to_dict(df.head(3), finite=True)


@FAST
@given(st.integers(0, 10**6), st.integers(1, 60), st.booleans())
def test_per_step_table_equals_the_loc_selection(seed, n, weighted):
    """metrics.kernels._per_step (rows/columns selected in numpy) equals the full bincount table
    selected with .loc (its former form): same index, columns, dtype and values."""
    from perfgate.metrics import kernels as km
    rng = np.random.default_rng(seed)
    steps = pd.Categorical(rng.choice(["1", "2", "10", None], n), categories=["1", "2", "3", "10"])
    fam = pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["a", "b", "c", "z"])
    df = pd.DataFrame({"step": steps, "family": fam, "dur_ns": rng.integers(0, 10**6, n)})
    got = km._per_step(df, "family", "dur_ns" if weighted else None)
    keep = df["step"].notna() & df["family"].notna()
    if not keep.any():
        assert got.empty
        return
    d = df[keep]
    sc, kc = d["step"].cat.codes.to_numpy(), d["family"].cat.codes.to_numpy()
    flat = np.bincount(sc * 4 + kc, weights=d["dur_ns"].to_numpy().astype(float) if weighted else None,
                       minlength=16).reshape(4, 4)
    full = pd.DataFrame(flat, index=pd.Index(df["step"].cat.categories.astype(str), name="step"),
                        columns=pd.Index(df["family"].cat.categories, name="family"))
    want = full.loc[np.bincount(sc, minlength=4) > 0, np.bincount(kc, minlength=4) > 0].astype(np.int64)
    pd.testing.assert_frame_equal(got, want)


def test_flat_to_dict_equals_asdict(text_captures):
    """SelfCheck / Finding.to_dict copy their fields shallowly (~31k self-checks in
    a 5,236-step result): the same dict, keys in field order, as dataclasses.asdict."""
    from dataclasses import asdict

    from perfgate.model import Finding, SelfCheck
    from perfgate.policy import load_policy
    from perfgate.app.run import fingerprint_path
    fp = fingerprint_path(text_captures / "level1", load_policy(), workers=1)
    objs = list(fp.self_checks) + list(fp.findings) + [
        SelfCheck("x", None, None, "pass", "m"), Finding("C", "info", 0, "1", "m", value=float("nan"))]
    assert len(fp.self_checks) > 5
    for o in objs:
        d = o.to_dict()
        assert repr(d) == repr(asdict(o))  # same keys in the same order, same values (NaN by repr)
        assert repr(type(o).from_dict(d)) == repr(o)
        assert d is not o.__dict__  # a copy: the caller may change it
