"""The columnar per-step metrics of perfgate.metrics.steps / selfcheck / fingerprint
equal the per-step loops they replaced (kept verbatim in tests/_steps_oracle.py), on every real
text capture, on replicated many-step captures (30 steps of level1 and of st/level2) and on a
capture with irregular steps (a missing step, a step with a long gap ending at a waiting AI CPU
task, a warm-up-like first step, rows out of time order)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import _steps_oracle as old  # noqa: E402

from perfgate.ingest import load_capture  # noqa: E402
from perfgate.metrics import steps  # noqa: E402
from perfgate.metrics.intervals import merge, segmented_merge, segmented_running_max  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402

FAST = settings(max_examples=80, deadline=None)


def _ranks(cap):
    return [r for r in cap.ranks if r.kernels is not None]


@pytest.fixture(scope="module")
def captures(text_captures, tmp_path_factory):
    """name -> loaded capture: the real text captures (with and without trace), the real
    st/level2 capture, 30-step replicas of level1 (2 ranks) and st/level2, an irregular one."""
    st2 = text_captures.parents[2] / "st" / "level2"
    tmp = tmp_path_factory.mktemp("colsteps")
    out = {f"real_{lvl}": load_capture(text_captures / lvl) for lvl in ("level0", "level1", "level2")}
    out["real_level1_no_trace"] = load_capture(text_captures / "level1", with_trace=False)
    out["real_st_level2"] = load_capture(st2)
    out["rep_level1_30"] = load_capture(replicate_rank(text_captures / "level1" / "rank0_ascend_pt",
                                                       tmp / "r1", steps=30, ranks=2))
    out["rep_level1_30_no_trace"] = load_capture(tmp / "r1", with_trace=False)
    out["rep_st_level2_30"] = load_capture(replicate_rank(st2 / "rank_0_ascend_pt", tmp / "r2", steps=30))
    out["irregular"] = _irregular(out["rep_level1_30"])
    out["irregular_no_trace"] = _irregular(out["rep_level1_30_no_trace"])
    out["step_trace_gaps"] = _step_trace_gaps(out["rep_level1_30_no_trace"])
    return out


def _irregular(cap):
    """Rank 0 of a 30-step replica, changed in memory: step 5 missing (no kernel row), step 10
    with a 2 s gap in its middle whose next task runs on the AI CPU and waited for it, step 1
    three times longer (warm-up), and the rows of step 20 in reverse file order."""
    r = cap.ranks[0]
    k = r.kernels.df.copy()
    k = k[k["step"].astype(str) != "5"].reset_index(drop=True)
    st_ = k["step"].astype(str).to_numpy()
    s, e = k["start_ns"].to_numpy().copy(), k["end_ns"].to_numpy().copy()
    one = np.flatnonzero(st_ == "1")
    s[one] = s[one[0]] + (s[one] - s[one[0]]) * 3
    e[one] = s[one] + k["dur_ns"].to_numpy()[one]
    ten = np.flatnonzero(st_ == "10")
    half = ten[len(ten) // 2:]
    s[half] += 2 * 10**9
    e[half] += 2 * 10**9
    wait = k["wait_us"].to_numpy().copy()
    first_after = half[np.argmin(s[half])]
    wait[first_after] = 10**6
    core = k["core_type"].astype(object).to_numpy().copy()
    core[first_after] = "AI_CPU"
    k = k.assign(start_ns=s, end_ns=e, wait_us=wait, core_type=pd.Categorical(core))
    tw = np.flatnonzero(st_ == "20")
    perm = np.arange(len(k))
    perm[tw] = tw[::-1]
    k = k.iloc[perm].reset_index(drop=True)
    rank = dataclasses.replace(r, kernels=dataclasses.replace(r.kernels, df=k))
    return dataclasses.replace(cap, ranks=[rank] + list(cap.ranks[1:]))


def _step_trace_gaps(cap):
    """Rank 0 of a 30-step replica without trace whose step_trace_time.csv rows are doubled:
    the first copy of every third step has no Preparing, of every fifth step no step label."""
    r = cap.ranks[0]
    st_ = r.step_trace
    first = st_.copy()
    n = len(first)
    prep = first["preparing_us"].to_numpy(dtype=float).copy()
    prep[::3] = np.nan
    step = first["step"].astype(object).to_numpy().copy()
    step[::5] = None
    first = first.assign(preparing_us=prep, step=pd.array(step, dtype=st_["step"].dtype),
                         computing_us=first["computing_us"] / 2)
    doubled = pd.concat([first, st_], ignore_index=True)
    assert len(doubled) == 2 * n
    return dataclasses.replace(cap, ranks=[dataclasses.replace(r, step_trace=doubled)] + list(cap.ranks[1:]))


def _findings(fs):
    return [repr(f.to_dict()) for f in fs]


NAMES = ["real_level0", "real_level1", "real_level2", "real_level1_no_trace", "real_st_level2",
         "rep_level1_30", "rep_level1_30_no_trace", "rep_st_level2_30", "irregular",
         "irregular_no_trace", "step_trace_gaps"]


@pytest.mark.parametrize("name", NAMES)
def test_step_table_and_labels_equal_the_per_step_loops(captures, name):
    """step_table (segmented merge / gaps / banded coverage) and label_steps (conditions on
    whole columns) equal the former per-step loops: same frame (values, dtypes, order) and the
    same findings (texts, order), on every rank; also with a tight threshold set that fires
    every label."""
    tight = dict(underfeed_ratio=0.0, gap_min_us=0.0, gap_step_ratio=0.0, recompile_wall_ratio=0.0,
                 recompile_gap_ratio=0.0, recompile_wait_ratio=0.0, exposed_significant=0.5,
                 exposed_hidden=0.9)
    for r in _ranks(captures[name]):
        for th in (None, tight):
            want = old.step_table(r, th)
            got = steps.step_table(r, th)
            pd.testing.assert_frame_equal(got, want)
            assert _findings(steps.label_steps(got, th, "kd.csv")) == _findings(old.label_steps(want, th, "kd.csv"))


def test_the_irregular_capture_fires_what_it_was_built_for(captures):
    """The irregular capture really holds the irregular steps: no step 5, a RECOMPILE finding
    with AI CPU evidence on step 10, and step 1 flagged as warm-up (device wall: no host windows)."""
    r = captures["irregular_no_trace"].ranks[0]
    t = steps.step_table(r)
    assert "5" not in set(t["step"]) and len(t) == 29
    f = steps.confirm_recompile(steps.label_steps(t), r.kernels.df)
    rec = [x for x in f if x.code == "RECOMPILE_SUSPECTED"]
    assert [x.step for x in rec] == ["10"] and "AI CPU" in rec[0].message
    assert [x.step for x in steps.warmup_findings(t)] == ["1"]


@FAST
@given(st.integers(0, 10**6), st.integers(0, 60), st.integers(1, 6), st.booleans())
def test_segmented_merge_equals_one_merge_per_segment(seed, n, nseg, huge):
    """segmented_merge gives, segment by segment, the segments of intervals.merge; also when
    the values are so far apart that the running maximum falls back to dense ranks."""
    rng = np.random.default_rng(seed)
    seg = np.sort(rng.integers(0, nseg, n))
    s = rng.integers(0, 5_000, n) * (10**15 if huge else 1)
    e = s + rng.integers(0, 900, n) * (10**14 if huge else 1)
    order = np.lexsort((s, seg))
    seg, s, e = seg[order], s[order], e[order]
    heads, ms, me = segmented_merge(seg, s, e)
    for g in range(nseg):
        ws, we = merge(s[seg == g], e[seg == g])
        m = seg[heads] == g
        assert ms[m].tolist() == ws.tolist() and me[m].tolist() == we.tolist()
    want = [int(e[(seg == seg[i]) & (np.arange(n) <= i)].max()) for i in range(n)]
    assert segmented_running_max(seg, e).tolist() == want


@FAST
@given(st.integers(0, 10**6), st.integers(1, 60), st.integers(1, 6), st.booleans())
def test_banded_uncovered_equals_per_step_coverage(seed, n, nseg, huge):
    """steps._uncovered_ns (one banded coverage lookup; group by group when the bands would
    overflow) equals the former per-step merge + covered_ns of each communication row."""
    rng = np.random.default_rng(seed)
    gid = np.sort(rng.integers(0, nseg, n)).astype(np.int64)
    scale = 10**15 if huge else 1
    s = rng.integers(0, 3_000, n) * scale
    order = np.lexsort((s, gid))
    gid, s = gid[order], s[order]
    dur = rng.integers(0, 800, n) * scale
    e = s + dur
    is_comm = rng.random(n) < 0.3
    want = []
    for i in np.flatnonzero(is_comm):
        comp = (gid == gid[i]) & ~is_comm
        cs, ce = merge(s[comp], e[comp])
        want.append(int(dur[i] - steps.covered_ns(cs, ce, s[i:i + 1], e[i:i + 1])[0]))
    assert steps._uncovered_ns(gid, s, e, dur, is_comm, nseg).tolist() == want


@pytest.mark.parametrize("name", NAMES)
def test_rank_step_figures_equal_the_per_step_loops(captures, name):
    """fingerprint._step_sums_and_unions (device.time_us samples: one segmented pass) and
    fingerprint._step_time (gated step time: column arithmetic) equal the former loops over
    step groups and iterrows, value for value and in the same order."""
    from perfgate.metrics import fingerprint as fpm
    from perfgate.metrics import kernels as km
    for r in _ranks(captures[name]):
        k = km.rows_where(r.kernels.df, r.kernels.df["step"].notna().to_numpy())
        assert fpm._step_sums_and_unions(k) == old.step_sums_and_unions(k)
        anatomy = steps.step_table(r)
        # taken from the step table: the same figures in the same order; rows that do
        # not rise with position (no profiler writes them) take the segmented pass
        assert fpm._step_sums_and_unions(k, anatomy) == old.step_sums_and_unions(k)
        shuffled = k.iloc[::-1].reset_index(drop=True)
        assert fpm._step_sums_and_unions(shuffled, anatomy) == old.step_sums_and_unions(shuffled)
        st_, _ = fpm._overlap_steps(r)
        assert fpm._step_time(r, st_, anatomy) == old.step_time(r, st_, anatomy)
        assert fpm._step_time(r, None, anatomy) == old.step_time(r, None, anatomy)


@pytest.mark.parametrize("name", NAMES)
def test_self_check_step_figures_equal_one_pass_per_step(captures, name):
    """selfcheck._Stats.per_code (one (step, start) sort, three segmented unions) gives every
    step the figures _Stats.of computes from that step's rows alone (the per-step form)."""
    from perfgate.metrics.selfcheck import _Rows, _Stats
    for r in _ranks(captures[name]):
        k = r.kernels.df
        cat = k["step"].astype("category") if not isinstance(k["step"].dtype, pd.CategoricalDtype) else k["step"]
        codes = cat.cat.codes.to_numpy()
        arrays = {c: k[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns", "is_comm")}
        got = _Stats.per_code(codes, arrays, len(cat.cat.categories)).all()
        for i in np.unique(codes[codes >= 0]):
            idx = np.flatnonzero(codes == i)
            assert got[i] == _Stats.of(_Rows({c: a[idx] for c, a in arrays.items()}))


@pytest.mark.parametrize("name", NAMES)
def test_comm_rows_by_kind_equal_the_per_kind_scan(captures, name):
    """fingerprint._comm_rows_by_kind (kind once per distinct name, one stable sort) gives every
    communication kind the rows the former per-kind scan over all communication rows gave."""
    from perfgate.metrics import fingerprint as fpm
    from perfgate.metrics import kernels as km
    from perfgate.metrics.comm import kind_table
    for r in _ranks(captures[name]):
        k = km.rows_where(r.kernels.df, r.kernels.df["step"].notna().to_numpy())
        got = fpm._comm_rows_by_kind(k)
        kinds = set(kind_table(k)["kind"])
        assert kinds <= set(got) and all(got[x] == old.comm_rows_of_kind(k, x) for x in got)


@FAST
@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(1, 12), st.booleans())
def test_cross_rank_findings_equal_the_per_step_loop(seed, nranks, nsteps, with_nan):
    """cross_rank_findings (SLOW_RANK p50s from one sort; step sets from one group-by) gives the
    findings of the former per-step / per-rank loops: same texts, values and order, with even
    and odd rank counts, ranks missing steps, ties and NaN step times."""
    rng = np.random.default_rng(seed)
    step_time, rows = {}, []
    for r in rng.permutation(nranks).tolist():
        for s in rng.permutation(nsteps).tolist():
            if rng.random() < 0.2:
                continue
            v = float(rng.choice([100.0, 100.0, 104.0, 120.0, 0.0])) + float(rng.integers(0, 3))
            if with_nan and rng.random() < 0.1:
                v = float("nan")
            step_time[(r, str(s + 1))] = v
            if rng.random() < 0.9:
                rows.append({"rank": r, "step": str(s + 1)})
    tables = pd.DataFrame(rows, columns=["rank", "step"])
    infos = {r: {} for r in range(nranks)}
    assert _findings(steps.cross_rank_findings(tables, step_time, infos)) == \
        _findings(old.cross_rank_findings(tables, step_time, infos))


@pytest.mark.parametrize("name", NAMES)
def test_confirm_recompile_equals_the_per_finding_scan(captures, name):
    """confirm_recompile (rows grouped by step once, compile regex once per distinct value)
    gives the findings of the former scan of the whole table per finding: with RECOMPILE
    candidates on every step (tight thresholds), and with compile tasks planted by name and by
    type in some steps and an AI CPU task ending the gap in others."""
    tight = dict(recompile_wall_ratio=0.0, recompile_gap_ratio=0.0, recompile_wait_ratio=0.0)
    for r in _ranks(captures[name]):
        found = steps.label_steps(steps.step_table(r, tight), tight)
        k = r.kernels.df
        assert any(f.code == "RECOMPILE_SUSPECTED" for f in found)
        planted = k.copy()
        n = len(planted)
        name_ = planted["name"].astype(object).to_numpy().copy()
        typ = planted["op_type"].astype(object).to_numpy().copy()
        core = planted["core_type"].astype(object).to_numpy().copy()
        name_[n // 3] = "GraphCompileTask"
        typ[(2 * n) // 3] = "compile_op"
        for f in found[::2]:
            m = __import__("re").search(r"ends at row (\d+)", f.message)
            if m:
                core[np.flatnonzero(planted["row"].to_numpy() == int(m.group(1)))] = "AI_CPU"
        planted = planted.assign(name=pd.Categorical(name_), op_type=pd.Categorical(typ),
                                 core_type=pd.Categorical(core))
        for kk in (k, planted):
            assert _findings(steps.confirm_recompile(found, kk)) == _findings(old.confirm_recompile(found, kk))


def _canon(x):
    """Metrics dict as comparable text (NaN-safe, type-exact for floats vs ints)."""
    return {repr(k): repr(v) for k, v in x.items()}


@pytest.mark.parametrize("name", NAMES)
def test_rank_metrics_equal_the_pandas_form(captures, name, policy):
    """rank_metrics (numpy step matrices, medians over the step axis at once) gives exactly the
    metrics, evidence and per-step samples of its former pandas form (one wide frame per table,
    one median per column), kept in tests/_fingerprint_oracle.py."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import fingerprint as fpm
    from perfgate.metrics import kernels as km
    cap = captures[name]
    for r in _ranks(cap):
        cat = km.categorize(r.kernels.df, policy.categories) if r.kernels.type_available \
            and r.kernels.core_available else None
        want = old_fp.rank_metrics(r, policy, cap.path, None, None, cat)
        assert _canon(fpm.rank_metrics(r, policy, cap.path, None, None, cat)) == _canon(want)
        fam = km.family_of(r.kernels.df["name"], policy.family_suffix)
        got = fpm.rank_metrics(r, policy, cap.path, None, None, cat, family=fam, overlap=fpm._overlap_steps(r))
        assert _canon(got) == _canon(want)


@pytest.mark.parametrize("name", NAMES)
def test_share_tables_equal_the_group_by_form(captures, name, policy):
    """operators.share_table (one bincount over combination codes) and per_step_shares (one
    step x value matrix) equal their former group-by / wide-frame forms, for the keys the
    family view uses, and with steps missing from or added to the requested list."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import kernels as km
    from perfgate.metrics import operators as opv
    for r in _ranks(captures[name]):
        k = r.kernels.df
        cat = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available \
            else pd.Series(pd.Categorical(["n/a"] * len(k)), index=k.index)
        kk = k.assign(family=km.family_of(k["name"], policy.family_suffix), category=cat,
                      phase=opv.assign_phases(k, policy.phases), op_class=opv.op_type_class(k))
        kk = km.rows_where(kk, kk["step"].notna().to_numpy())
        for keys in (["category"], ["phase", "category"], ["family"], ["op_class", "core_type"]):
            pd.testing.assert_frame_equal(opv.share_table(kk, keys), old_fp.share_table(kk, keys))
            # the family view's detail records, built without the frame
            assert opv.share_records(kk, keys) == km.records(opv.share_table(kk, keys))
            for frame in (kk.iloc[:0], kk.assign(dur_ns=0), kk.assign(dur_ns=kk["dur_ns"] % 3)):   # ties
                assert opv.share_records(frame, keys) == km.records(opv.share_table(frame, keys))
        steps_ = sorted(map(str, pd.unique(kk["step"].dropna())))
        for st_list in (steps_, steps_[1:], steps_ + ["999"], []):
            for key in ("family", "category", "phase"):
                assert opv.per_step_shares(kk, key, st_list) == old_fp.per_step_shares(kk, key, st_list)


@pytest.mark.parametrize("name", NAMES)
def test_family_table_equals_the_per_family_loop(captures, name, policy):
    """operators.family_table (bound stage / family and memory-boundness of every family from
    whole arrays) equals its former form with one _bound / _memory_bound call per family; also
    with PipeUtilization columns planted (random, with N/A cells) so every bound is reached."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import kernels as km
    from perfgate.metrics import operators as opv
    from perfgate.policy.opspec import PIPE_STAGES
    rng = np.random.default_rng(7)
    for r in _ranks(captures[name]):
        k = r.kernels.df
        cat = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available \
            else pd.Series(pd.Categorical(["n/a"] * len(k)), index=k.index)
        kk = k.assign(family=km.family_of(k["name"], policy.family_suffix), category=cat,
                      phase=opv.assign_phases(k, policy.phases), op_class=opv.op_type_class(k))
        kk = km.rows_where(kk, kk["step"].notna().to_numpy())
        pipe = {}
        for j, stg in enumerate(PIPE_STAGES):
            v = rng.random(len(kk)) ** (j + 1)
            v[rng.random(len(kk)) < 0.1] = np.nan
            pipe[f"{stg}_ratio" if j % 2 else f"{stg}_time_us"] = v
        pipe["aic_mte2_ratio"], pipe["aiv_mte2_ratio"] = rng.random(len(kk)), rng.random(len(kk))
        for frame in (kk, kk.assign(**pipe)):
            for within in (0.1, 0.9):
                pd.testing.assert_frame_equal(opv.family_table(frame, within), old_fp.family_table(frame, within))


@FAST
@given(st.lists(st.sampled_from(["aclnnMatmul_1", "hcom_allReduce__5_0", "Compile", "x", None]), max_size=30),
       st.sampled_from(["a", "^h", "(?i)compile", r"_\d+$"]), st.sampled_from(["c", "o", "^x$"]))
def test_remembered_category_matches_equal_a_fresh_scan(values, p1, p2):
    """kernels.matches / family_of remember their per-category results per categories object:
    asked again, on the same or another column, with one regex or another, they give what a
    fresh per-row regex scan gives."""
    import re
    from perfgate.metrics import kernels as km
    col = pd.Series(pd.Categorical(values))
    other = pd.Series(pd.Categorical(list(reversed(values))))
    for rx in (re.compile(p1), re.compile(p2), re.compile(p1)):
        for c in (col, other, col):
            want = np.array([v is not None and bool(rx.search(v)) for v in c.astype(object).where(c.notna(), None)])
            assert km.matches(c, rx).tolist() == want.tolist()
    suffix = re.compile(r"(?:_+\d+)+$")
    fam = km.family_of(col, suffix)
    assert fam.astype(object).where(fam.notna(), None).tolist() == \
        [None if v is None else (suffix.sub("", v) or v) for v in values]


class _CountingRegex:
    """A regex stand-in counting its searches / substitutions (compiled patterns are immutable)."""
    def __init__(self, pattern):
        import re
        self.rx, self.pattern, self.flags, self.calls = re.compile(pattern), pattern, 0, 0

    def search(self, v):
        self.calls += 1
        return self.rx.search(v)

    def sub(self, repl, v):
        self.calls += 1
        return self.rx.sub(repl, v)


def test_policy_regexes_run_once_per_distinct_text_across_ranks():
    """Each rank's categories are new objects, yet a policy regex runs once per distinct text per
    process (kernels._search_all / family_of memo), not once per rank; results equal a fresh scan,
    and another regex (or other family rules) with the same text gets its own answers."""
    import re
    from perfgate.metrics import kernels as km
    from perfgate.policy.families import FamilyRules
    names = ["aclnnMatmul_12", "hcom_allReduce__5_0", "Compile", "zz_issue21_unique_3"]
    rx = _CountingRegex(r"(?i)zz_issue21_\w+")
    for rank in range(6):   # six "ranks": same texts, fresh categorical objects, shuffled order
        col = pd.Series(pd.Categorical(names[rank % 4:] + names[:rank % 4] + [None]))
        want = [v is not None and bool(re.search(r"(?i)zz_issue21_\w+", v)) for v in col.astype(object)
                .where(col.notna(), None)]
        assert km.matches(col, rx).tolist() == want
    assert rx.calls == len(names)
    suffix = _CountingRegex(r"(?:_+\d+)+$")
    rules = FamilyRules((("num", re.compile(r"_\d+_")),), re.compile(r"(?:_+\d+)+$"))
    for rank in range(4):
        col = pd.Series(pd.Categorical(list(reversed(names)) if rank % 2 else names))
        assert km.family_of(col, suffix).astype(str).tolist() == \
            [re.sub(r"(?:_+\d+)+$", "", v) or v for v in col.astype(str)]
        assert km.family_of(col, rules).astype(str).tolist() == [rules.sub("", v) or v for v in col.astype(str)]
    assert suffix.calls == len(names)


class _CommOps:
    def __init__(self, ops):
        self.ops = ops


@FAST
@given(st.integers(0, 10**6), st.integers(1, 40), st.booleans())
def test_op_identity_checks_equal_the_group_by_form(seed, n, shuffled_index):
    """comm.op_identity_checks (per-step counts, largest difference and first worst op from
    bincounts) equals its former pandas group-by / idxmax form: same checks, texts and order,
    with NaN times, tied worst ops, blank steps and a non-default row index."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics.comm import op_identity_checks
    rng = np.random.default_rng(seed)
    ops = pd.DataFrame({"step": rng.choice(["1", "2", "10", "3", None], n), "kind": "collective",
                        "op": [f"op{i}" for i in range(n)],
                        "elapse_us": rng.choice([10.0, 12.5, 30.0, np.nan], n),
                        "transit_us": rng.choice([5.0, 7.5], n), "wait_us": rng.choice([2.5, 5.0], n),
                        "idle_us": rng.choice([0.0, 2.5], n)})
    if shuffled_index:
        ops.index = rng.permutation(n) + 100
    for tol in (1.0, 0.0):
        got = op_identity_checks(_CommOps(ops), 0, "c.json", tol_us=tol)
        want = old_fp.op_identity_checks(_CommOps(ops), 0, "c.json", tol_us=tol)
        assert [repr(c.to_dict()) for c in got] == [repr(c.to_dict()) for c in want]


@pytest.mark.parametrize("name", NAMES)
def test_shared_step_trace_sums_change_nothing(captures, name, policy):
    """The step_trace sums computed once per rank and handed to run_self_checks and
    _overlap_steps give the same checks and tables as each computing its own."""
    from perfgate.metrics import fingerprint as fpm
    from perfgate.metrics.selfcheck import run_self_checks, step_trace_sums
    for r in _ranks(captures[name]):
        sums = step_trace_sums(r.step_trace) if r.step_trace is not None else None
        assert [repr(c.to_dict()) for c in run_self_checks(r, policy, sums)] == \
            [repr(c.to_dict()) for c in run_self_checks(r, policy)]
        a, b = fpm._overlap_steps(r, sums), fpm._overlap_steps(r)
        assert a[1] == b[1] and (a[0] is None) == (b[0] is None)
        if a[0] is not None:
            pd.testing.assert_frame_equal(a[0], b[0])


def test_unknown_rows_warning_equals_the_frame_copy_form(captures, policy):
    """summarize_rank's 'unknown bucket' warning (row positions, no frame copy) names the same
    count, core types, first kernel and row as the former boolean-selected frame."""
    from perfgate.metrics import fingerprint as fpm
    from perfgate.metrics import kernels as km
    cap = captures["rep_level1_30"]
    r = cap.ranks[0]
    k = r.kernels.df
    rng = np.random.default_rng(3)
    cat = km.categorize(k, policy.categories).astype(object).to_numpy().copy()
    cat[rng.random(len(k)) < 0.05] = km.UNKNOWN
    r2 = dataclasses.replace(r, kernels=dataclasses.replace(r.kernels, df=k))
    orig = km.categorize
    try:
        km.categorize = lambda df, rules: pd.Series(pd.Categorical(cat), index=df.index)
        got = [w for w in fpm.summarize_rank(r2, policy, cap.path).warnings if "unknown" in w]
    finally:
        km.categorize = orig
    ser = pd.Series(pd.Categorical(cat), index=k.index)
    unknown = k.loc[(ser == km.UNKNOWN).to_numpy()]
    cores = sorted(map(str, unknown["core_type"].dropna().unique()))[:5]
    want = (f"rank {r.rank}: {len(unknown)} kernel row(s) match no category rule and are in the "
            f"'unknown' bucket (core types {cores or ['N/A']}, e.g. {unknown['name'].iloc[0]!r}, "
            f"row {int(unknown['row'].iloc[0])}); add a rule to the policy")
    assert got == [want]


@pytest.mark.parametrize("name", NAMES)
def test_kind_table_equals_the_record_form(captures, name):
    """comm.kind_table built from columns equals its former one-dict-per-group form."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics.comm import kind_table
    for r in _ranks(captures[name]):
        pd.testing.assert_frame_equal(kind_table(r.kernels.df), old_fp.kind_table(r.kernels.df))


@FAST
@given(st.integers(0, 10**6), st.integers(0, 12), st.booleans(), st.booleans())
def test_step_trace_sums_equal_the_group_by(seed, n, repeat, blank):
    """selfcheck.step_trace_sums (one row per step: the values sorted by step, in numpy) equals
    the group-by sum it replaced: same index (dtype, name, order), values (NaN -> 0, -0.0 ->
    0.0), also with repeated or missing step labels (which take the group-by)."""
    from perfgate.metrics.selfcheck import STEP_TRACE_SUMS, step_trace_sums
    rng = np.random.default_rng(seed)
    labels = [str(x) for x in rng.permutation(40)[:n]]
    if repeat and n:
        labels[-1] = labels[0]
    if blank and n:
        labels[0] = None
    pool = [0.0, -0.0, 1.5, 1e-9, np.nan, 123456.789] if seed % 2 else [0.0, 1.5, 1e-9, 123456.789, np.inf]
    data = {c: rng.choice(pool, n) for c in STEP_TRACE_SUMS}
    st_ = pd.DataFrame({"step": pd.array(labels, dtype="string"), **data})
    got, want = step_trace_sums(st_), st_.groupby("step")[STEP_TRACE_SUMS].sum()
    pd.testing.assert_frame_equal(got, want)
    assert np.signbit(got.to_numpy()).tolist() == np.signbit(want.to_numpy()).tolist()  # -0.0 vs 0.0


@pytest.mark.parametrize("name", NAMES)
def test_step_trace_sums_on_captures(captures, name):
    """The same on every capture's step_trace_time.csv table."""
    from perfgate.metrics.selfcheck import STEP_TRACE_SUMS, step_trace_sums
    for r in captures[name].ranks:
        if r.step_trace is not None:
            pd.testing.assert_frame_equal(step_trace_sums(r.step_trace),
                                          r.step_trace.groupby("step")[STEP_TRACE_SUMS].sum())


def _drop_some(per_rank: dict, seed: int) -> dict:
    """A copy of per-rank metrics with about a third of each rank's metrics removed at random
    (absent-is-zero counts, partial coverage, a metric held by one rank only)."""
    rng = np.random.default_rng(seed)
    out = {}
    for r, m in per_rank.items():
        keys = list(m)
        keep = rng.random(len(keys)) > 0.33
        out[r] = {k: m[k] for k, ok in zip(keys, keep) if ok or k[0] == "kernel.topn"}
    return out


@pytest.mark.parametrize("name", NAMES)
def test_views_equal_the_per_rank_lookup(captures, name, policy):
    """fingerprint._views (per-rank dicts transposed in one pass, the reductions over ranks batched
    in numpy) gives exactly the views of its
    per-metric form (one lookup and one reduction per metric, tests/_fingerprint_oracle.py), with every rank
    holding the kernel table, with only some of them (kernel_ranks) and with metrics missing
    on some ranks."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import fingerprint as fpm
    cap = captures[name]
    per_rank = {r.rank: fpm.summarize_rank(r, policy, cap.path).metrics for r in _ranks(cap)}
    per_rank.update({r + 100: m for r, m in per_rank.items()})   # more ranks: 2 or 4
    ranks = sorted(per_rank)
    for pr in (per_rank, _drop_some(per_rank, 1), _drop_some(per_rank, 2)):
        for kr in (None, ranks[:1], ranks[1:]):
            want = old_fp._views_per_metric(pr, policy, kernel_ranks=kr)
            got = fpm._views(pr, policy, kernel_ranks=kr)
            assert list(got) == list(want)
            assert _canon(got) == _canon(want)


def test_views_equal_the_per_rank_lookup_many_ranks(tmp_path, policy):
    """The same on a 24-rank synthetic capture (perfgate.synth.scale), metrics dropped at random."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import fingerprint as fpm
    from perfgate.synth.scale import write_scaled
    cap = load_capture(write_scaled(tmp_path / "c", ranks=24, steps=3, kernels_per_step=60), with_trace=False)
    per_rank = {r.rank: fpm.summarize_rank(r, policy, cap.path).metrics for r in _ranks(cap)}
    assert len(per_rank) == 24
    for pr in (per_rank, _drop_some(per_rank, 3)):
        for kr in (None, sorted(pr)[::2]):
            got, want = fpm._views(pr, policy, kernel_ranks=kr), old_fp._views_per_metric(pr, policy, kernel_ranks=kr)
            assert list(got) == list(want) and _canon(got) == _canon(want)


def _edge_ranks(per_rank: dict) -> list:
    """Variants of per-rank metrics at the edges of the cross-rank fills: ranks without a Top-N
    ranking (their kernel.time_us kept), a lowest rank lacking most metrics, per-step samples of
    another length or absent on some ranks, a NaN value."""
    ranks = sorted(per_rank)
    no_topn = {r: ({k: v for k, v in m.items() if k[0] != "kernel.topn"} if r in ranks[1::3] else m)
               for r, m in _drop_some(per_rank, 4).items()}
    thin = dict(_drop_some(per_rank, 5))
    thin[ranks[0]] = dict(list(thin[ranks[0]].items())[:40])
    ragged = {r: dict(m) for r, m in per_rank.items()}
    for r in ranks[2:4]:
        ragged[r] = {k: (v[0], v[1], {**v[2], "samples": v[2]["samples"][:1]}) if v[2].get("samples") else v
                     for k, v in ragged[r].items()}
    ragged[ranks[4]] = {k: (v[0], v[1], {c: x for c, x in v[2].items() if c != "samples"})
                        for k, v in ragged[ranks[4]].items()}
    key = next(k for k in ragged[ranks[5]] if k[0] == "step.wall_us")
    ragged[ranks[5]][key] = (float("nan"),) + tuple(ragged[ranks[5]][key][1:])
    return [no_topn, thin, ragged]


def test_views_equal_the_per_metric_reductions(tmp_path, policy):
    """fingerprint._views (reductions over ranks batched per group of metrics, absent ranks filled
    by array scatter) gives exactly the views of its per-metric form (one np.median / max / mean per
    metric, tests/_fingerprint_oracle.py) on a 24-rank synthetic capture and at the edges of its
    fills (:func:`_edge_ranks`), with every rank, some and none holding the kernel table."""
    import _fingerprint_oracle as old_fp
    from perfgate.metrics import fingerprint as fpm
    from perfgate.synth.scale import write_scaled
    cap = load_capture(write_scaled(tmp_path / "c", ranks=24, steps=3, kernels_per_step=60), with_trace=False)
    per_rank = {r.rank: fpm.summarize_rank(r, policy, cap.path).metrics for r in _ranks(cap)}
    for pr in [per_rank] + _edge_ranks(per_rank):
        ranks = sorted(pr)
        for kr in (None, ranks[::2], ranks[1:], []):
            got, want = fpm._views(pr, policy, kernel_ranks=kr), old_fp._views_per_metric(pr, policy, kernel_ranks=kr)
            assert list(got) == list(want) and _canon(got) == _canon(want)


@pytest.mark.parametrize("name", NAMES)
def test_step_sum_equals_the_group_by(captures, name):
    """fingerprint._step_sum_us (one bincount over the step codes) equals the group-by it
    replaced (values, index text and dtype, names), also with blank steps and unused categories."""
    from perfgate.metrics import fingerprint as fpm

    def old(k):
        out = k.groupby("step", observed=True)["dur_ns"].sum() / 1000.0
        out.index = out.index.astype(str)
        return out
    for r in _ranks(captures[name]):
        k = r.kernels.df
        blank = k.assign(step=k["step"].cat.add_categories(["999"]).where(k.index % 7 != 3))
        for frame in (k, blank, k.iloc[:0], k.assign(dur_ns=k["dur_ns"].astype(float))):
            pd.testing.assert_series_equal(fpm._step_sum_us(frame), old(frame))


def _with_rank(t, rk):
    return t.assign(rank=rk)


def test_warmup_findings_equal_the_group_by(captures):
    """steps.warmup_findings (columns read once, each rank a slice of one stable sort) gives the
    findings of its former group-by form (tests/_steps_oracle.py), texts and order, on the step
    tables of every capture concatenated as many ranks (in shuffled rank order, host windows
    blanked on some, single-step ranks, a tight ratio that fires on most)."""
    tables = []
    for name in NAMES:
        for r in _ranks(captures[name]):
            tables.append(steps.step_table(r))
    rng = np.random.default_rng(11)
    parts = []
    for i, t in enumerate(tables * 3):
        t = t.copy()
        if i % 3 == 1:
            t["step_us"] = np.where(rng.random(len(t)) < 0.5, np.nan, t["step_us"])
        if i % 5 == 4:
            t = t.iloc[:1]
        parts.append(_with_rank(t, int(rng.permutation(1000)[0]) * 1000 + i))
    order = rng.permutation(len(parts))
    big = pd.concat([parts[j] for j in order], ignore_index=True)
    for th in (None, {"warmup_ratio": 1.01}, {"warmup_ratio": 0.5}):
        got = steps.warmup_findings(big, th, "kd.csv")
        assert _findings(got) == _findings(old.warmup_findings(big, th, "kd.csv"))
    assert len(steps.warmup_findings(big, {"warmup_ratio": 0.5}, "kd.csv")) > 10
    assert steps.warmup_findings(big.iloc[:0]) == old.warmup_findings(big.iloc[:0]) == []
