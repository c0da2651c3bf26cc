"""Per-rank fixed cost: the small-table forms that replaced per-rank pandas group-bys
and record dicts (metrics.kernels.group_sums, operators.pipe_metrics,
fingerprint._comm_elapse_median) equal the pandas forms they replaced (kept in
tests/_rank_oracle.py) on every real text capture, on the real st/level2 capture, on a
replicated many-step capture (30 steps, 2 ranks) and on random tables."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import _rank_oracle as old  # noqa: E402

from perfgate.ingest import load_capture  # noqa: E402
from perfgate.metrics import kernels as km  # noqa: E402
from perfgate.metrics import operators as opv  # noqa: E402
from perfgate.metrics.fingerprint import _comm_elapse_median  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402

FAST = settings(max_examples=120, deadline=None)


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN (a median of nothing), same type."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@pytest.fixture(scope="module")
def captures(text_captures, tmp_path_factory):
    st2 = text_captures.parents[2] / "st" / "level2"
    tmp = tmp_path_factory.mktemp("rankcost")
    out = {f"real_{lvl}": load_capture(text_captures / lvl, with_trace=False, pmu=True)
           for lvl in ("level0", "level1", "level2")}
    out["real_st_level2"] = load_capture(st2, with_trace=False, pmu=True)
    out["rep_level1_30"] = load_capture(replicate_rank(text_captures / "level1" / "rank0_ascend_pt",
                                                       tmp / "r1", steps=30, ranks=2), with_trace=False, pmu=True)
    out["rep_st_level2_30"] = load_capture(replicate_rank(st2 / "rank_0_ascend_pt", tmp / "r2", steps=30),
                                           with_trace=False, pmu=True)
    return out


def _family_tables(cap, policy):
    """Each kernel rank's family table, its columns built as operators.rank_family_view does."""
    for r in cap.ranks:
        if r.kernels is None:
            continue
        k = r.kernels.df
        k = k.assign(family=km.family_of(k["name"], policy.family_suffix))
        k = km.rows_where(k, k["step"].notna().to_numpy())
        cat = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available \
            else pd.Series(pd.Categorical(["n/a"] * len(k)), index=k.index)
        kk = k.assign(category=cat, phase=opv.assign_phases(k, policy.phases), op_class=opv.op_type_class(k))
        yield r, opv.family_table(kk, policy.operators.mixed_within)


def test_pipe_metrics_equal_the_group_by_and_records(captures, policy):
    """pipe.bound_share / pipe.memory_bound from column arrays and the compensated small-table
    sums: the same keys, values (bit for bit), evidence and order as the group-by and
    to_dict("records") form, on real and replicated captures (with PipeUtilization columns)."""
    seen_pipe = 0
    for name, cap in captures.items():
        for r, fam in _family_tables(cap, policy):
            for floor in (policy.operators.family_min_share, 0.0, 0.2):
                want_m, got_m = {}, {}
                want = old.pipe_metrics(fam, floor, "k.csv", want_m)
                got = opv.pipe_metrics(fam, floor, "k.csv", got_m)
                assert list(got.items()) == list(want.items()), (name, r.rank)
                assert list(got_m.items()) == list(want_m.items()), (name, r.rank)
                arrays_m = {}   # the family view passes the table's arrays (no MFU spec)
                got = opv.pipe_metrics({c: fam[c].to_numpy() for c in fam.columns}, floor, "k.csv", arrays_m)
                assert list(got.items()) == list(want.items()), (name, r.rank)
                assert list(arrays_m.items()) == list(want_m.items()), (name, r.rank)
            seen_pipe += opv.pipe_available(r.kernels.df)
    assert seen_pipe, "no capture with PipeUtilization data: the memory_bound branch was not compared"


def test_comm_elapse_median_equals_the_group_by(captures):
    n = 0
    for name, cap in captures.items():
        for r in cap.ranks:
            if r.comm is not None and len(r.comm.ops):
                assert _same(_comm_elapse_median(r.comm.ops), old.comm_elapse_median(r.comm.ops)), (name, r.rank)
                n += 1
    assert n


_KEYS = ["cube", "vector", "aic_mte", "mixed", "unknown", "10", "2", None]


def _values(rng, n):
    kind = rng.integers(0, 4)
    v = rng.random(n)
    if kind == 1:
        v = v * 10.0 ** rng.integers(-12, 12, n)   # wide magnitudes: compensation matters
    elif kind == 2:
        v = rng.standard_normal(n) * 1e6
        v[rng.random(n) < 0.15] = np.nan
    elif kind == 3:
        v[rng.random(n) < 0.05] = np.inf
    return v


def test_sum_mode_probe_discriminates():
    """The probe of km._pandas_sum_mode tells the algorithms apart: on its values the
    compensated sum and np.add.reduceat differ in both groups, and the installed pandas is
    recognised (else group_sums would always fall back to the group-by)."""
    vals = np.random.default_rng(1).random(64) / 10
    mono = np.array([0] * 32 + [1] * 32)
    k, r = km._kahan(mono.tolist(), vals.tolist(), 2), km._reduceat(mono, vals, 2)
    assert k[0] != r[0] and k[1] != r[1]
    assert km._pandas_sum_mode() in ("kahan", "reduceat")


@FAST
@given(st.integers(0, 10**6), st.integers(0, 120), st.integers(0, 2))
def test_group_sums_equal_pandas_group_by_sum(seed, n, order):
    """Sums per key (pandas' algorithm: compensated, or reduceat on rows already in key order
    without NaN), NaN skipped, NaN-only groups 0.0, missing keys dropped, keys sorted: bit for
    bit pandas' ``groupby(keys).sum()``; rows in random order, in key order with missing keys
    first (pandas' sorted-ids path) and with missing keys last."""
    rng = np.random.default_rng(seed)
    keys = [_KEYS[i] for i in rng.integers(0, len(_KEYS), n)]
    if order:
        present = sorted(k for k in keys if k is not None)
        missing = [None] * (len(keys) - len(present))
        keys = missing + present if order == 1 else present + missing
    v = _values(rng, n)
    want = pd.Series(v, dtype=float).groupby(pd.Series(keys, dtype=object)).sum()
    got = km.group_sums(keys, v.tolist())
    assert list(got) == [str(x) for x in want.index]
    assert all(_same(a, float(b)) for a, b in zip(got.values(), want.tolist()))


@FAST
@given(st.integers(0, 10**6), st.integers(0, 80))
def test_pipe_metrics_equal_on_random_family_tables(seed, n):
    rng = np.random.default_rng(seed)
    share = rng.random(n) / max(n, 1)
    mem = rng.random(n) * 3
    mem[rng.random(n) < 0.3] = np.nan
    fam = pd.DataFrame({"family": [f"f{i}" for i in range(n)], "share": share,
                        "bound": rng.choice(["cube", "vector", "aic_mte", "mixed", "communication"], n),
                        "memory_bound": mem})
    want_m, got_m = {}, {}
    assert list(opv.pipe_metrics(fam, 0.01, "k", got_m).items()) == list(old.pipe_metrics(fam, 0.01, "k", want_m).items())
    assert list(got_m.items()) == list(want_m.items())


@FAST
@given(st.integers(0, 10**6), st.integers(1, 60))
def test_comm_elapse_median_equals_on_random_operations(seed, n):
    rng = np.random.default_rng(seed)
    steps = pd.Series([None if x == 0 else str(x) for x in rng.integers(0, 6, n)], dtype="str")
    ops = pd.DataFrame({"step": steps, "elapse_us": _values(rng, n)})
    assert _same(_comm_elapse_median(ops), old.comm_elapse_median(ops))


def _canon(x):
    """Metrics dict as comparable text (NaN-safe, type-exact for floats vs ints)."""
    return {repr(k): repr(v) for k, v in x.items()}


def test_rank_metrics_on_the_shared_frame_equal_the_pandas_form(captures, policy):
    """rank_metrics given summarize_rank's step-assigned frame (``in_step``: one frame with the
    family column for it and the family view; the category column read without a frame of its
    own) gives exactly the metrics of its former pandas form (tests/_fingerprint_oracle.py)."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import fingerprint as fpm
    for name, cap in captures.items():
        for r in cap.ranks:
            if r.kernels is None:
                continue
            k = r.kernels.df
            cat = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available \
                else None
            fam = km.family_of(k["name"], policy.family_suffix)
            kk = km.rows_where(k.assign(family=fam), k["step"].notna().to_numpy())
            want = old_fp.rank_metrics(r, policy, cap.path, None, None, cat)
            got = fpm.rank_metrics(r, policy, cap.path, None, None, cat, family=fam,
                                   overlap=fpm._overlap_steps(r), in_step=kk)
            assert _canon(got) == _canon(want), (name, r.rank)


def test_kinds_with_rank_equal_the_assign_form(captures):
    from perfgate.metrics.comm import kind_table
    from perfgate.metrics.fingerprint import _with_rank
    for cap in captures.values():
        for r in cap.ranks:
            if r.kernels is None:
                continue
            kinds = kind_table(r.kernels.df)
            want = kinds.assign(rank=r.rank)[["rank", *kinds.columns]]
            pd.testing.assert_frame_equal(_with_rank(kinds, r.rank), want, check_exact=True)
            assert list(kinds.columns) == [c for c in want.columns if c != "rank"]   # the input is untouched


def test_family_records_from_arrays_equal_the_frame_records(captures, policy):
    """The family view's ``families`` detail, built from the family table's arrays
    (km.column_records), equals km.records of the family table frame, on every capture (limit
    500 and a limit below the table's length) and with no limit."""
    n = 0
    for name, cap in captures.items():
        for r, fam in _family_tables(cap, policy):
            k = r.kernels.df
            k = k.assign(family=km.family_of(k["name"], policy.family_suffix))
            k = km.rows_where(k, k["step"].notna().to_numpy())
            cat = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available \
                else pd.Series(pd.Categorical(["n/a"] * len(k)), index=k.index)
            kk = k.assign(category=cat, phase=opv.assign_phases(k, policy.phases), op_class=opv.op_type_class(k))
            cols = opv._family_columns(kk, policy.operators.mixed_within)
            pd.testing.assert_frame_equal(pd.DataFrame(cols), fam, check_exact=True)
            for limit in (500, 3, None):
                assert km.column_records(cols, limit) == km.records(fam, limit), (name, r.rank, limit)
            n += 1
    assert n


@FAST
@given(st.integers(0, 10**6), st.integers(0, 30))
def test_column_records_equal_frame_records_on_random_columns(seed, n):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=n) * 1e3
    f[rng.random(n) < 0.2] = np.nan
    if n and seed % 2:
        f[0] = np.inf
    cols = {"family": np.array([f"fam{i % 5}" for i in range(n)], dtype=object),
            "calls": rng.integers(0, 1000, n), "share": f, "flag": rng.random(n) < 0.5,
            "stage": np.array([None if i % 3 == 0 else f"s{i}" for i in range(n)], dtype=object),
            "allnan": np.full(n, np.nan), "f32": rng.random(n).astype(np.float32)}
    df = pd.DataFrame(cols)
    assert km.column_records(cols) == km.records(df)
    assert km.column_records(cols, 4) == km.records(df, 4)


def test_gc_paused_restores_the_collector():
    """summarize_rank's GC pause: off inside for a small rank, back on after (also when the
    rank raises), untouched for a rank above GC_PAUSE_ROWS and when the collector was off."""
    import gc
    from perfgate.metrics import fingerprint as fpm
    assert gc.isenabled()
    with fpm._gc_paused(1000):
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        with fpm._gc_paused(1000):
            1 / 0
    assert gc.isenabled()
    with fpm._gc_paused(fpm.GC_PAUSE_ROWS + 1):
        assert gc.isenabled()
    gc.disable()
    try:
        with fpm._gc_paused(10):
            assert not gc.isenabled()
        assert not gc.isenabled()   # was off: stays off
    finally:
        gc.enable()


def test_summarize_rank_with_the_collector_paused_is_unchanged(captures, policy):
    """The same summary with the GC paused (small ranks: all of these) as with it forced on."""
    import pickle
    from perfgate.metrics import fingerprint as fpm
    cap = captures["rep_level1_30"]
    r = cap.ranks[0]
    paused = fpm.summarize_rank(r, policy, cap.path)
    old_rows = fpm.GC_PAUSE_ROWS
    fpm.GC_PAUSE_ROWS = -1
    try:
        running = fpm.summarize_rank(r, policy, cap.path)
    finally:
        fpm.GC_PAUSE_ROWS = old_rows
    assert _canon(paused["metrics"]) == _canon(running["metrics"])
    assert pickle.dumps(paused["operators"]) == pickle.dumps(running["operators"])


def test_match_masks_through_the_matcher_equal_the_frame_masks(captures, policy):
    """segments.match_mask through a _Matcher (columns read once, each Match's mask remembered
    per rank) equals match_mask over the frame, for every Match of the policy's segment rules
    (anchors, companions' leads, tail, regions, block cuts and kinds), asked twice."""
    from perfgate.metrics import segments as sg
    rules = policy.segments
    groups = [rules.tail, rules.pipeline, rules.blocks.cut_before]
    for a in rules.anchors:
        groups += [a.match, a.backward or (), a.lead, a.unless_after or ()]
    groups += [ms for _, ms in rules.regions] + [m for _, m in rules.blocks.kinds]
    for cap in captures.values():
        for r in cap.ranks:
            if r.kernels is None:
                continue
            k = r.kernels.df.assign(family=km.family_of(r.kernels.df["name"], policy.family_suffix))
            mk = sg._Matcher(k)
            for _ in range(2):
                for ms in groups:
                    got = sg.match_mask(mk, ms)
                    assert got.flags.writeable   # callers may change the result in place
                    assert np.array_equal(got, sg.match_mask(k, ms))
