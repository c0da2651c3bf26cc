"""The 1M-row fast paths give exactly what the plain formulation gives.

Each helper that replaced a per-row or per-frame operation (category lookups by code, step
groups from one stable sort, boolean filters that skip the copy, the vectorised longest run,
the duplicate scan without a sort, the family table's pipe sums) is checked against the
obvious implementation on small random tables (hypothesis), including missing values, blank
steps, unsorted start times and N/A PMU cells. The golden digests of
tests/metrics/test_fingerprint_stable.py check the same on whole captures.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.ingest.kernels import _exact_duplicates
from perfgate.metrics import kernels as km
from perfgate.metrics import operators as opv
from perfgate.policy.opspec import PIPE_STAGES, Matcher

FAST = settings(max_examples=60, deadline=None)


@FAST
@given(table=st.lists(st.booleans(), min_size=1, max_size=12),
       codes=st.lists(st.integers(-1, 10), max_size=50), missing=st.booleans())
def test_code_lookup_equals_fancy_indexing(table, codes, missing):
    t = np.array(table + [missing], dtype=bool)            # last entry = value of code -1
    c = np.array([x for x in codes if x < len(table)] or [0], dtype=np.int16)
    assert np.array_equal(km.code_lookup(t, c), t[c])


@FAST
@given(values=st.lists(st.sampled_from(["hcom_allReduce_1", "MatMulV2", "Cast", "Add", None]), min_size=1,
                       max_size=40),
       pattern=st.sampled_from([r"^hcom", "Mat|Cast", "nothing", ".", "Add|Cast|Mat|hcom"]))
def test_matches_is_re_search_per_row_and_na_never_matches(values, pattern):
    col = pd.Series(pd.Categorical(values))
    rx = re.compile(pattern)
    expect = np.array([v is not None and bool(rx.search(v)) for v in values])
    assert np.array_equal(km.matches(col, rx), expect)


@FAST
@given(values=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=30),
       value=st.sampled_from(["a", "b", "zz"]))
def test_equals_value_matches_str_values(values, value):
    col = pd.Series(pd.Categorical(values))
    assert np.array_equal(km.equals_value(col, value), km.str_values(col) == value)
    assert np.array_equal(km.equals_value(col.astype(object), value), km.str_values(col.astype(object)) == value)


@FAST
@given(steps=st.lists(st.sampled_from(["3", "1", "10", "2", None]), max_size=40), seed=st.integers(0, 99))
def test_step_groups_equal_groupby_in_first_appearance_order(steps, seed):
    cats = np.random.default_rng(seed).permutation(["1", "10", "2", "3", "7"])  # category order != appearance
    df = pd.DataFrame({"step": pd.Categorical(steps, categories=cats)})
    expect = [(s, list(g.index)) for s, g in df.groupby("step", observed=True, sort=False)]
    assert [(s, idx.tolist()) for s, idx in km.step_groups(df)] == expect


def test_rows_where_skips_the_copy_only_when_every_row_is_kept():
    df = pd.DataFrame({"a": [1, 2, 3]})
    assert km.rows_where(df, np.array([True, True, True])) is df
    part = km.rows_where(df, np.array([True, False, True]))
    assert part["a"].tolist() == [1, 3] and part.index.tolist() == [0, 2]


def _naive_longest_run(k, matcher):
    """Python loop over compute rows per step in (start, file) order."""
    best, best_row = 0, None
    comp = k[~k["is_comm"]]
    for _, g in comp.groupby("step", observed=True, sort=True):
        g = g.sort_values("start_ns", kind="stable")
        run, first = 0, None
        for _, r in g.iterrows():
            ok = all(getattr(matcher, f) is None or (pd.notna(r[c]) and getattr(matcher, f).search(str(r[c])))
                     for f, c in (("name", "name"), ("type", "op_type"), ("core", "core_type")))
            if ok:
                run, first = run + 1, (first if run else int(r["row"]))
                if run > best:
                    best, best_row = run, first
            else:
                run = 0
    return best, best_row


@FAST
@given(rows=st.lists(st.tuples(st.sampled_from(["1", "2"]), st.sampled_from(["Cast_1", "Cast_2", "Mat", "hcom_x"]),
                               st.integers(0, 30)), min_size=1, max_size=30))
def test_longest_run_equals_a_python_loop(rows):
    k = pd.DataFrame(rows, columns=["step", "name", "start_ns"])
    k["step"] = pd.Categorical(k["step"], categories=["1", "2"])
    k["name"] = k["name"].astype("category")
    k["op_type"] = pd.Categorical([None] * len(k))
    k["core_type"] = pd.Categorical(["AI_CORE"] * len(k))
    k["is_comm"] = k["name"].astype(str).str.startswith("hcom").to_numpy()
    k["row"] = np.arange(1, len(k) + 1)
    m = Matcher("run", name=re.compile("^Cast"))
    assert opv.longest_run(k, m) == _naive_longest_run(k, m)


@FAST
@given(rows=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.sampled_from(["a", "b"])), min_size=1,
                     max_size=25), seed=st.integers(0, 99))
def test_duplicate_scan_same_with_and_without_sorted_starts(rows, seed):
    """A table in start order takes the no-sort path; the same rows shuffled take the sort path:
    the duplicates found (as (start, dur, name) with their occurrence) must be the same."""
    df = pd.DataFrame(sorted(rows), columns=["start_ns", "dur_ns", "name"])
    df["name"] = df["name"].astype("category")
    df["stream_id"] = pd.Categorical(["1"] * len(df))
    shuffled = df.sample(frac=1, random_state=seed).reset_index(drop=True)
    naive = df.duplicated(subset=["start_ns", "dur_ns", "name", "stream_id"], keep="first").to_numpy()
    assert np.array_equal(_exact_duplicates(df), naive)
    naive_sh = shuffled.duplicated(subset=["start_ns", "dur_ns", "name", "stream_id"], keep="first").to_numpy()
    assert np.array_equal(_exact_duplicates(shuffled), naive_sh)


def _pmu_table(seed, nan_share):
    rng = np.random.default_rng(seed)
    n = 60
    k = pd.DataFrame({"family": pd.Categorical(rng.choice(["A", "B", "C"], n)),
                      "step": pd.Categorical(rng.choice(["1", "2"], n)),
                      "dur_ns": rng.integers(1000, 9000, n),
                      "category": pd.Categorical(["MatMul"] * n), "phase": pd.Categorical(["all"] * n),
                      "core_type": pd.Categorical(["AI_CORE"] * n), "op_class": pd.Categorical(["aic"] * n)})
    for s in PIPE_STAGES:
        r = rng.uniform(0, 1, n)
        r[rng.uniform(0, 1, n) < nan_share] = np.nan
        k[f"{s}_ratio"] = r
        c_rows = np.flatnonzero(k["family"].to_numpy() == "C")
        if 0 < nan_share < 1:
            r[c_rows[1:]] = np.nan  # family C: exactly one finite value per stage
        if s != "aiv_vec":  # one stage only as a ratio: its time is ratio x Duration
            t = r * k["dur_ns"].to_numpy() / 1000.0
            k[f"{s}_time_us"] = t
    return k


@pytest.mark.parametrize("nan_share", [0.0, 0.3, 1.0])
def test_family_table_pipe_sums_and_memory_bound_equal_the_formula(nan_share):
    k = _pmu_table(7, nan_share)
    fam = opv.family_table(k).set_index("family")
    dur_us = k["dur_ns"] / 1000.0
    for f, g in k.groupby("family", observed=True):
        for s in PIPE_STAGES:
            v = g[f"{s}_time_us"] if f"{s}_time_us" in g else g[f"{s}_ratio"] * dur_us[g.index]
            expect = v.sum() if v.notna().any() else np.nan
            assert fam.loc[f, f"{s}_us"] == pytest.approx(expect, rel=1e-12, nan_ok=True)

        def mean(s):
            ok = g[f"{s}_ratio"].notna()
            w = g["dur_ns"][ok]
            return (g[f"{s}_ratio"][ok] * w).sum() / w.sum() if w.sum() > 0 else np.nan
        mac, vec = (0.0 if np.isnan(x) else x for x in (mean("aic_mac"), mean("aiv_vec")))
        mte2 = mean("aic_mte2" if mac >= vec else "aiv_mte2")
        expect = mte2 / max(mac, vec) if max(mac, vec) > 0 and not np.isnan(mte2) else np.nan
        assert fam.loc[f, "memory_bound"] == pytest.approx(expect, rel=1e-12, nan_ok=True)


def _naive_merge(starts, ends):
    """Sort by start, then extend or open segments one interval at a time."""
    out = []
    for s, e in sorted(zip(starts, ends), key=lambda p: p[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


@FAST
@given(iv=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=30))
def test_merge_running_maximum_equals_interval_by_interval_merge(iv):
    from perfgate.metrics.intervals import merge
    starts = np.array([s for s, _ in iv], dtype=np.int64)
    ends = starts + np.array([d for _, d in iv], dtype=np.int64)
    seg_s, seg_e = merge(starts, ends)
    assert list(zip(seg_s.tolist(), seg_e.tolist())) == _naive_merge(starts.tolist(), ends.tolist())
