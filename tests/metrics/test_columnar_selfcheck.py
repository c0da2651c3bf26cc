"""The self-checks, step labels, per-step detail records and communication
readers are columnar. Each equals a per-step loop reference kept as an oracle
(tests/_selfcheck_oracle.py, tests/_steps_oracle.py, tests/_comm_oracle.py, tests/_fingerprint_oracle.py, perfgate.metrics.kernels.records): on every
real capture, on a replicated many-step capture, and on irregular ones (missing and partial
steps, values mutated so that every self-check kind fails or warns: failing findings are compared,
not only passing ones). The last tests count Python-level calls for 20 and many replicated steps:
they do not grow with the steps."""
from __future__ import annotations

import cProfile
import dataclasses
import math
import pstats
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import _comm_oracle as old_comm  # noqa: E402
import _fingerprint_oracle as old_fp  # noqa: E402
import _selfcheck_oracle as old_sc  # noqa: E402
import _steps_oracle as old_steps  # noqa: E402

from perfgate.ingest import load_capture  # noqa: E402
from perfgate.ingest.comm import _fast, read_communication  # noqa: E402
from perfgate.metrics import comm as cm  # noqa: E402
from perfgate.metrics import kernels as km  # noqa: E402
from perfgate.metrics import selfcheck as sc  # noqa: E402
from perfgate.metrics import steps  # noqa: E402
from perfgate.model import Finding, SelfCheck, from_columns  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402

FAST = settings(max_examples=80, deadline=None)
TIGHT_FINDINGS = dict(underfeed_ratio=0.0, gap_min_us=0.0, gap_step_ratio=0.0, recompile_wall_ratio=0.0,
                      recompile_gap_ratio=0.0, recompile_wait_ratio=0.0, exposed_significant=0.5,
                      exposed_hidden=0.9)


def _rep(x) -> list:
    return [repr(v.to_dict()) for v in x]


def _ranks(cap):
    return [r for r in cap.ranks if r.kernels is not None]


def _with(r, **kw):
    return dataclasses.replace(r, **kw)


def _mutated(cap):
    """Rank 0 of a replicated capture with every self-check made to fail or warn somewhere: step 3's
    communication rows twice as long (comm_equality), step 7's compute rows partly stretched
    (compute_union, overlap_gap), step 9 without kernel rows, step 11 without a step_trace row,
    step_trace rows with a wrong Overlapped (13), Stage (15), Exclude Receive (17), Computing (19),
    a NaN Stage (23), and no trace events in step 21."""
    r = cap.ranks[0]
    k = r.kernels.df.copy()
    stp = k["step"].astype(str).to_numpy()
    s, e, d = (k[c].to_numpy().copy() for c in ("start_ns", "end_ns", "dur_ns"))
    comm = k["is_comm"].to_numpy()
    m = (stp == "3") & comm
    d[m] *= 2
    e[m] = s[m] + d[m]
    seven = np.flatnonzero((stp == "7") & ~comm)[::2]
    d[seven] += 20_000
    e[seven] = s[seven] + d[seven]
    k = k.assign(start_ns=s, end_ns=e, dur_ns=d)
    k = k[stp != "9"].reset_index(drop=True)
    st_ = r.step_trace.copy()
    sst = st_["step"].astype(str).to_numpy()
    for step, col, delta in (("13", "overlapped_us", 5.0), ("15", "stage_us", 1000.0),
                             ("17", "comm_not_overlapped_excl_recv_us", 5.0), ("19", "computing_us", 10.0),
                             ("23", "stage_us", np.nan)):
        v = st_[col].to_numpy(dtype=float).copy()
        v[sst == step] = v[sst == step] + delta
        st_[col] = v
    st_ = st_[sst != "11"].reset_index(drop=True)
    out = _with(r, kernels=dataclasses.replace(r.kernels, df=k), step_trace=st_)
    if r.trace is not None:
        w = r.trace.steps
        lo, hi = (int(w.loc[w["step"].astype(str) == "21", c].iloc[0]) for c in ("start_ns", "end_ns"))
        ov = r.trace.overlap
        keep = ~((ov["start_ns"] >= lo) & (ov["start_ns"] < hi)).to_numpy()
        out = _with(out, trace=dataclasses.replace(r.trace, overlap=ov[keep].reset_index(drop=True)))
    return dataclasses.replace(cap, ranks=[out] + list(cap.ranks[1:]))


def _unpaired(cap):
    """No step label in common between kernel_details and step_trace_time (renamed 1001...): the
    single "all" comparison."""
    r = cap.ranks[0]
    st_ = r.step_trace.copy()
    st_["step"] = pd.array([str(1000 + int(x)) for x in st_["step"].astype(str)], dtype=st_["step"].dtype)
    return dataclasses.replace(cap, ranks=[_with(r, step_trace=st_)] + list(cap.ranks[1:]))


def _no_windows(cap):
    """A trace with Overlap Analysis events but no ProfilerStep windows and no step_trace: the implicit
    step, its events clipped to the device span."""
    r = cap.ranks[0]
    tr = dataclasses.replace(r.trace, steps=r.trace.steps.iloc[:0])
    return dataclasses.replace(cap, ranks=[_with(r, trace=tr, step_trace=None)] + list(cap.ranks[1:]))


@pytest.fixture(scope="module")
def captures(ascend, text_captures, tmp_path_factory):
    """name -> capture: every real capture (text levels with and without trace, db levels,
    st/level2), a 40-step 2-rank replica of level1 with and without trace, and irregular ones."""
    pt = text_captures.parent
    tmp = tmp_path_factory.mktemp("colsc")
    out = {}
    for lvl in ("level0", "level1", "level2"):
        out[f"real_{lvl}"] = load_capture(pt / "text" / lvl)
        out[f"real_{lvl}_no_trace"] = load_capture(pt / "text" / lvl, with_trace=False)
        out[f"real_db_{lvl}"] = load_capture(pt / "db" / lvl)
    out["real_st_level2"] = load_capture(pt.parents[1] / "st" / "level2")
    rep = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp / "r", steps=40, ranks=2)
    out["rep_40"] = load_capture(rep)
    out["rep_40_no_trace"] = load_capture(rep, with_trace=False)
    out["mutated"] = _mutated(out["rep_40"])
    out["mutated_no_trace"] = _mutated(out["rep_40_no_trace"])
    out["unpaired_no_trace"] = _unpaired(out["rep_40_no_trace"])
    out["no_windows"] = _no_windows(out["rep_40"])
    return out


NAMES = [f"real_{x}" for lvl in ("level0", "level1", "level2") for x in (lvl, f"{lvl}_no_trace", f"db_{lvl}")] + [
    "real_st_level2", "rep_40", "rep_40_no_trace", "mutated", "mutated_no_trace", "unpaired_no_trace", "no_windows"]


def _policies(policy):
    """The default policy, one with zero tolerances (every check fails where figures differ at
    all) and one with integer tolerances (int, not float, in the SelfCheck fields)."""
    zero = dataclasses.replace(policy, self_checks=dataclasses.replace(
        policy.self_checks, abs_us_per_row=0.0, abs_us_floor=0.0, step_trace_abs_us=0.0))
    ints = dataclasses.replace(policy, self_checks=dataclasses.replace(
        policy.self_checks, abs_us_per_row=0, abs_us_floor=1, step_trace_abs_us=2))
    return policy, zero, ints


@pytest.mark.parametrize("name", NAMES)
def test_self_checks_equal_the_per_step_loops(captures, name, policy):
    """run_self_checks (columns: one format map per message, SelfChecks by from_columns) and
    overlap_per_step (sums per (window, kind) code) equal the former per-step loops: the same
    checks (names, ranks, steps, statuses, messages, values, types, order) under the default,
    a zero and an integer tolerance."""
    for r in _ranks(captures[name]):
        for pol in _policies(policy):
            # op_statistic_vs_kernels came after the per-step loops (one check per rank, not per
            # step): the loops' checks are the rest, in the same order
            new = [c for c in sc.run_self_checks(r, pol) if c.name != "op_statistic_vs_kernels"]
            assert _rep(new) == _rep(old_sc.run_self_checks(r, pol))
        a, b = sc.overlap_per_step(r), old_sc.overlap_per_step(r)
        assert (a is None) == (b is None)
        if a is not None:
            pd.testing.assert_frame_equal(a, b)


def test_the_irregular_captures_fail_what_they_were_built_for(captures, policy):
    """The mutated capture really fails or warns in every check kind (so failing texts are
    compared above), the unpaired one takes the single "all" comparison, the window-less one
    the implicit step."""
    got = {}
    for c in sc.run_self_checks(captures["mutated"].ranks[0], policy):
        got.setdefault((c.name, c.status), set()).add(c.step)
    assert {"3"} <= got[("comm_equality", "fail")] and {"7"} <= got[("compute_union", "fail")]
    assert {"7"} <= got[("overlap_gap", "fail")] and {"13"} <= got[("step_trace_identities", "fail")]
    assert {"15", "17"} <= got[("step_trace_identities", "warn")]
    assert {"19", "21"} <= got[("trace_vs_step_trace", "fail")]
    assert "9" not in set().union(*got.values()) - got.get(("trace_vs_step_trace", "pass"), set()) - \
        got.get(("step_trace_identities", "pass"), set())
    nt = {(c.name, c.status) for c in sc.run_self_checks(captures["mutated_no_trace"].ranks[0], policy)}
    assert ("comm_equality", "fail") in nt and ("step_trace_identities", "warn") in nt
    un = sc.run_self_checks(captures["unpaired_no_trace"].ranks[0], policy)
    assert [c.step for c in un if c.name == "comm_equality"] == ["all"]
    nw = sc.run_self_checks(captures["no_windows"].ranks[0], policy)
    assert [c.step for c in nw if c.name == "comm_equality"] == ["all"]
    assert list(sc.overlap_per_step(captures["no_windows"].ranks[0]).index) == ["implicit"]


def test_overlap_per_step_equals_the_group_by_on_odd_tables(captures):
    """overlap_per_step equals the group-by over every event also when the sums exceed 2**52 ns
    (integer add.at instead of float bincount), with unknown and missing kinds, with duplicated
    window labels, and for a categorical kind column (the group-by form itself)."""
    r = captures["rep_40"].ranks[0]
    ov = r.trace.overlap
    kind = ov["kind"].to_numpy().copy()
    kind[::7] = "other_kind"
    kind[3::11] = None
    w = r.trace.steps.copy()
    w.loc[w.index[::5], "step"] = "5"
    variants = [ov.assign(dur_ns=ov["dur_ns"] * 10**7), ov.assign(kind=kind),
                ov.assign(kind=pd.Categorical(ov["kind"]))]
    for o in variants:
        rr = _with(r, trace=dataclasses.replace(r.trace, overlap=o))
        pd.testing.assert_frame_equal(sc.overlap_per_step(rr), old_sc.overlap_per_step(rr))
    rr = _with(r, trace=dataclasses.replace(r.trace, overlap=variants[1], steps=w))
    pd.testing.assert_frame_equal(sc.overlap_per_step(rr), old_sc.overlap_per_step(rr))


@pytest.mark.parametrize("name", NAMES)
def test_step_labels_equal_the_per_finding_loops(captures, name):
    """step_table, label_steps (fields and messages as columns) and confirm_recompile (only the
    RECOMPILE findings looked at) equal their round-2 forms, with the default and with
    thresholds that fire every label on every step."""
    for r in _ranks(captures[name]):
        for th in (None, TIGHT_FINDINGS):
            t, t_old = steps.step_table(r, th), old_steps.step_table(r, th)
            pd.testing.assert_frame_equal(t, t_old)
            f, f_old = steps.label_steps(t, th, "kd.csv"), old_steps.label_steps(t_old, th, "kd.csv")
            assert _rep(f) == _rep(f_old)
            assert _rep(steps.confirm_recompile(f, r.kernels.df)) == _rep(old_steps.confirm_recompile(f_old, r.kernels.df))


@pytest.mark.parametrize("name", NAMES)
def test_detail_records_equal_the_per_row_forms(captures, name, policy):
    """table_records equals kernels.records on the step and communication-kind tables (values,
    types, rounding), step_time_records the former sorted comprehension with round()."""
    from perfgate.metrics import fingerprint as fpm
    cap = captures[name]
    tables, step_time = [], {}
    for r in _ranks(cap):
        t = steps.step_table(r)
        tables.append(t)
        assert steps.table_records(t) == km.records(t)
        kinds = cm.kind_table(r.kernels.df)
        assert steps.table_records(kinds) == km.records(kinds)
        st_, _ = fpm._overlap_steps(r)
        step_time.update(fpm._step_time(r, st_, t))
    want = [{"rank": int(r), "step": str(s), "time_us": round(float(v), 6)}
            for (r, s), v in sorted(step_time.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]
    assert repr(steps.step_time_records(step_time)) == repr(want)
    both = pd.concat(tables, ignore_index=True)
    assert repr(steps.table_records(both)) == repr(km.records(both))


@pytest.mark.parametrize("name", NAMES)
def test_comm_tables_and_checks_equal_the_former_forms(captures, name):
    """kind_table equals its dict-per-group form; op_identity_checks its group-by form, also with
    a zero tolerance and a perturbed Elapse so that steps fail."""
    for r in _ranks(captures[name]):
        pd.testing.assert_frame_equal(cm.kind_table(r.kernels.df), old_fp.kind_table(r.kernels.df))
        if r.comm is None or r.comm.ops.empty:
            continue
        ops = r.comm.ops
        bumped = ops.assign(elapse_us=ops["elapse_us"] + np.where(np.arange(len(ops)) % 3 == 0, 7.0, 0.0))
        for o in (ops, bumped):
            c = dataclasses.replace(r.comm, ops=o)
            for tol in (1.0, 0.0):
                assert _rep(cm.op_identity_checks(c, r.rank, "c.json", tol)) == \
                    _rep(old_fp.op_identity_checks(c, r.rank, "c.json", tol))
        assert any(x.status == "fail" for x in cm.op_identity_checks(dataclasses.replace(r.comm, ops=bumped),
                                                                     r.rank, "c.json"))


def test_comm_gather_equals_the_former_gather(ascend, tmp_path, text_captures):
    """The fast path (msgspec records, C-level passes) gives the frames of its former form on every real
    communication.json and on a 300-step replica; also on documents with Total Op Info entries,
    leading-zero and bare step keys, missing start times and empty / None bandwidth."""
    files = sorted(ascend.rglob("communication.json"))
    rep = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp_path / "rep", steps=300, trace=False)
    files.append(next(rep.rglob("communication.json")))
    docs = [orjson.loads(f.read_bytes()) for f in files]
    odd = orjson.loads(files[0].read_bytes())
    first = next(iter(odd))
    odd["step007"] = odd[first]
    odd["step"] = {"collective": {}}
    odd["step000"] = {k: dict(v) for k, v in odd[first].items()}
    for kind in odd["step000"].values():
        for op, info in list(kind.items()):
            kind[op] = {**info, "Communication Time Info": {
                k: v for k, v in info.get("Communication Time Info", {}).items() if k != "Start Timestamp(us)"}}
            kind["Total Op Info"] = {"Communication Time Info": {"Elapse Time(ms)": 1.0}}
    docs.append(odd)
    none_bw = orjson.loads(files[0].read_bytes())
    for kinds in none_bw.values():
        for ops in kinds.values():
            for j, info in enumerate(ops.values()):
                if isinstance(info, dict):
                    info["Communication Bandwidth Info"] = None if j % 2 else {}
    docs.append(none_bw)
    for doc in docs:
        got, want = _fast(orjson.dumps(doc)), old_comm._gather(doc)
        assert (got[0] is None) == (want[0] is None)
        if got[0] is not None:
            pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
            pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)
    assert {"0", "7", "implicit"} & set(_fast(orjson.dumps(odd))[0]["step"]) == {"0", "7"}


@FAST
@given(st.lists(st.one_of(st.integers(0, 10**6).map(str), st.sampled_from(["implicit", "all", "x1", "007", "0"]),
                          st.integers(0, 99)), max_size=25), st.booleans())
def test_numeric_first_order_equals_a_key_function_sort(labels, by_text):
    """numeric_first_order gives sorted(range(n), key=...) with the former key functions
    (selfcheck._step_sort: (0, int) / (1, text); steps._step_key: (0, int) / (1, 0))."""
    def key(x):
        return (0, int(x)) if str(x).isdigit() else ((1, str(x)) if by_text else (1, 0))
    assert steps.numeric_first_order(labels, by_text) == sorted(range(len(labels)), key=lambda i: key(labels[i]))


@FAST
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-10**9, 10**9).map(lambda i: i / 1e6 + 5e-7),
                          st.integers(-10**12, 10**12).map(lambda i: i / 1024)), max_size=60))
def test_round6_equals_round(values):
    """round6 equals round(v, 6) value for value (sign of zero included), ties and huge values too;
    non-finite values become None or stay, as asked."""
    keep = steps.round6(np.array(values, dtype=float), nonfinite="keep")
    assert repr(keep) == repr([round(v, 6) for v in values])
    none = steps.round6(np.array(values, dtype=float))
    assert repr(none) == repr([round(v, 6) if math.isfinite(v) else None for v in values])


def test_from_columns_equals_the_constructor():
    """model.from_columns builds what the dataclass constructor builds (fields, to_dict, equality,
    hash, frozen), and refuses a wrong column count."""
    from itertools import repeat
    got = from_columns(Finding, ["A", "B"], repeat("warn"), [0, 1], ["1", None], ["m", "n"], repeat("ev"),
                       [0.5, None], repeat(1))
    want = [Finding("A", "warn", 0, "1", "m", "ev", 0.5, 1), Finding("B", "warn", 1, None, "n", "ev", None, 1)]
    assert got == want and _rep(got) == _rep(want) and list(map(hash, got)) == list(map(hash, want))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].code = "C"
    with pytest.raises(TypeError):
        from_columns(SelfCheck, ["x"])


# ---- Python-level calls do not grow with the number of steps ----

def _calls(fn) -> pstats.Stats:
    """cProfile of one call of ``fn``, with the cyclic collector paused: its callbacks (hypothesis
    installs one) run more often when more objects exist and are not the function's work."""
    import gc
    gc.collect()
    gc.disable()
    try:
        pr = cProfile.Profile()
        pr.enable()
        fn()
        pr.disable()
    finally:
        gc.enable()
    return pstats.Stats(pr)


def _growth(few: pstats.Stats, lots: pstats.Stats) -> list:
    """The functions called more often in ``lots`` than in ``few``, most grown first."""
    a = {k: v[1] for k, v in few.stats.items()}
    b = {k: v[1] for k, v in lots.stats.items()}
    return sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b) if b.get(k, 0) > a.get(k, 0)),
                  reverse=True)[:5]


def _work(cap, policy):
    """Every function this round made columnar, on rank 0 of ``cap``, with tolerances and
    thresholds that make every step fail a self-check and fire every label (so failing paths run)."""
    zero = _policies(policy)[1]
    r = cap.ranks[0]
    comm_path = next(Path(cap.path).rglob("communication.json"))
    out = {}
    out["read_communication"] = lambda: read_communication(comm_path)
    out["overlap_per_step"] = lambda: sc.overlap_per_step(r)
    out["run_self_checks"] = lambda: sc.run_self_checks(r, zero)
    out["step_table"] = lambda: steps.step_table(r, TIGHT_FINDINGS)
    table = steps.step_table(r, TIGHT_FINDINGS)
    found = steps.label_steps(table, TIGHT_FINDINGS, "kd.csv")
    out["label_steps"] = lambda: steps.label_steps(table, TIGHT_FINDINGS, "kd.csv")
    out["confirm_recompile"] = lambda: steps.confirm_recompile(found[1::2], r.kernels.df)
    out["table_records"] = lambda: steps.table_records(table)
    step_time = {(0, s): float(v) for s, v in zip(table["step"], table["wall_us"])}
    out["step_time_records"] = lambda: steps.step_time_records(step_time)
    out["warmup_and_cross_rank"] = lambda: (steps.warmup_findings(table), steps.cross_rank_findings(
        table, step_time, {0: {}}))
    out["kind_table"] = lambda: cm.kind_table(r.kernels.df)
    out["op_identity_checks"] = lambda: cm.op_identity_checks(r.comm, 0, "c.json", 0.0)
    return out, r


@pytest.mark.parametrize("many", [100, pytest.param(600, marks=pytest.mark.slow), pytest.param(2000, marks=pytest.mark.slow)])
def test_python_calls_do_not_grow_with_steps(text_captures, tmp_path, policy, many):
    """The real level1 rank (191 rows, 4 communication ops per step) replicated to 20 and to
    ``many`` steps: each columnar function makes the same number of Python-level calls (cProfile:
    Python functions and builtins called from Python; numpy / pandas / C-level map passes not
    counted) within 1 %, however many steps, while its output grows with the steps. The former
    forms (the oracles) made 2-43 calls more per step (run_self_checks 43, _gather 40, label_steps 30,
    kernels.records of the step table 28, kind_table 14; measured 20 vs 600 steps)."""
    src = text_captures / "level1" / "rank0_ascend_pt"
    few_cap = load_capture(replicate_rank(src, tmp_path / "few", steps=20))
    many_cap = load_capture(replicate_rank(src, tmp_path / "many", steps=many))
    few_work, r_few = _work(few_cap, policy)
    many_work, r_many = _work(many_cap, policy)
    for fn in [*few_work.values(), *many_work.values()]:   # warm-up: first-use imports and caches
        fn()
    zero = _policies(policy)[1]
    assert len(sc.run_self_checks(r_many, zero)) >= 4 * many
    assert len(cm.op_identity_checks(r_many.comm, 0, "c.json", 0.0)) == many
    grew = {}
    for name in few_work:
        few, lots = _calls(few_work[name]), _calls(many_work[name])
        if abs(lots.total_calls - few.total_calls) > max(0.01 * few.total_calls, 20):
            grew[name] = (few.total_calls, lots.total_calls, _growth(few, lots))
    assert not grew, grew
