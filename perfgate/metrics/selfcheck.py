"""Capture self-checks: prove the files come from one capture and the parser reads them right.

Every check compares two *independently written* files of one rank (kernel_details.csv vs the
trace's Overlap Analysis events / step_trace_time.csv). kernel_details.csv and op_summary are
the same rows under two headers and are never used to confirm each other.

Checks, per rank and step (status pass | fail | warn | skipped):

* ``comm_equality``: Σ Duration of communication rows (core HCCL/COMMUNICATION or ``hcom_``
  names) == the trace's Overlap Analysis ``Communication`` total. If communication ops
  overlap each other (concurrent groups) the trace holds their union, so the busy union of
  the rows is accepted too, and the message says so.
* ``compute_union``: busy union of non-communication rows == trace ``Computing``
  (merged compute intervals).
* ``overlap_gap``: ΣDuration − busy union of all rows, decomposed (see
  :mod:`perfgate.metrics.intervals`); its compute∩comm part == trace ``Overlapped``
  (= Communication − Communication(Not Overlapped)).
* ``trace_vs_step_trace``: per-step sums of the trace's Overlap Analysis events equal the
  step_trace_time.csv columns (torch_npu derives the latter from the former).
* ``steps_present`` (only when failing): no kernel row has a step, or a step the reference
  (trace Overlap Analysis / step_trace_time.csv) lists with device activity has no kernel row;
  a kernel table cut after a complete row is named "truncated or altered" (:func:`diagnose_cut`).
* ``time_base`` (only when failing): the trace's Overlap Analysis Computing / Communication events
  start where kernel rows start (one export, one clock); a table shifted against the trace fails
  (:func:`time_base`, policy ``self_checks.time_base_abs_us``).
* ``step_trace_identities`` (P16): Overlapped = Communication − Comm(Not Overlapped) (fail);
  Stage ≈ Computing + Comm(Not Overlapped) + Free and Comm(Not Overlapped and Exclude
  Receive) = Comm(Not Overlapped) − Bubble (warn).

Tolerance: kernel_details writes start and duration with 3 decimals (1 ns), so each row may
differ from the trace's float timestamps by up to ~0.001 µs; the tolerance is
``abs_us_per_row * rows + abs_us_floor`` (policy ``self_checks``). On the real level1 rank0
capture the observed differences are 0.002 µs (4 comm rows) and 0.019 µs (187 compute rows).

Cost: columnar, the Python work independent of the number of steps. Every step's
figures come from one segmented pass over the step codes (:meth:`_Stats.per_code`); statuses are
conditions on whole columns; messages are formatted by one ``str.format`` map per message form and
the :class:`perfgate.model.SelfCheck` objects built by :func:`perfgate.model.from_columns`. The
trace's Overlap Analysis events are summed per (step window, kind) code before the group-by.
Plain per-step loops in ``tests/_selfcheck_oracle.py`` are the test oracle of these columns.
"""
from __future__ import annotations

import re
from collections import deque, namedtuple
from dataclasses import replace
from pathlib import Path
from itertools import chain, compress, repeat
from operator import attrgetter, eq, is_not, ne
from functools import partial

import numpy as np
import pandas as pd

from perfgate.ingest.kernels import IMPLICIT_STEP
from perfgate.metrics import kernels as km
from perfgate.metrics.intervals import busy_union_ns, segmented_union_ns
from perfgate.metrics.steps import numeric_first_order
from perfgate.model import SelfCheck, from_columns

PASS, FAIL, WARN, SKIPPED = "pass", "fail", "warn", "skipped"
UNASSIGNED = "unassigned"


def assign_steps(starts: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Step label for each start (ns) from ProfilerStep windows ``[start_ns, end_ns)``;
    ``"unassigned"`` outside every window, ``"implicit"`` when there are no windows."""
    if windows is None or windows.empty:
        return np.full(len(starts), IMPLICIT_STEP, dtype=object)
    w = windows.sort_values("start_ns")
    ws, we = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
    idx = np.searchsorted(ws, starts, side="right") - 1
    ok = (idx >= 0) & (starts < we[np.clip(idx, 0, None)])
    labels = w["step"].to_numpy(dtype=object)
    out = np.full(len(starts), UNASSIGNED, dtype=object)
    out[ok] = labels[idx[ok]]
    return out


def overlap_per_step(rank) -> pd.DataFrame | None:
    """Trace Overlap Analysis sums per step (µs): columns computing, comm,
    comm_not_overlapped, free; index step label. None without a trace or its Overlap process.
    Without host ProfilerStep windows the one implicit step spans the device tasks: events are
    clipped to [first kernel start, last kernel end] of the kernel table."""
    tr = rank.trace
    if tr is None or not tr.has_overlap:
        return None
    ov = tr.overlap
    if tr.steps.empty and rank.kernels is not None and len(rank.kernels.df):
        # no host step windows: the implicit step spans the device tasks, not the timeline (a raw
        # msprof timeline's Overlap Analysis Free also covers host setup before the first kernel, Q11)
        k = rank.kernels.df
        lo, hi = int(k["start_ns"].min()), int(k["end_ns"].max())
        s_, e_ = np.maximum(ov["start_ns"].to_numpy(), lo), np.minimum(ov["end_ns"].to_numpy(), hi)
        ov = ov.assign(start_ns=s_, dur_ns=np.maximum(e_ - s_, 0))
    if ov["kind"].dtype != object or ov["dur_ns"].dtype.kind not in "iu":   # unusual: the group-by over every event
        steps = assign_steps(ov["start_ns"].to_numpy(), tr.steps)
        t = ov.assign(step=steps).groupby(["step", "kind"])["dur_ns"].sum().unstack(fill_value=0)
    else:
        # columnar: a window code per event, the durations summed per (window, kind) code pair, then
        # the same group-by over those few sums (labels, NaN keys and sort order as over the events)
        code, labels = _window_codes(ov["start_ns"].to_numpy(), tr.steps)
        kcode, kinds = pd.factorize(ov["kind"], sort=False)
        keep = kcode >= 0
        nk = max(len(kinds), 1)
        key = code[keep].astype(np.int64) * nk + kcode[keep]
        dur = ov["dur_ns"].to_numpy()[keep]
        nkey = len(labels) * nk
        uk = np.flatnonzero(np.bincount(key, minlength=nkey))   # the (window, kind) pairs with events
        if len(dur) and (dur >= 0).all() and float(dur.sum(dtype=np.float64)) < 2.0 ** 52:
            # every partial sum is an integer below 2**53: float64 bincount sums are exact
            sums = np.bincount(key, weights=dur, minlength=nkey)[uk].astype(dur.dtype)
        else:
            sums = np.zeros(nkey, dtype=dur.dtype)
            np.add.at(sums, key, dur)
            sums = sums[uk]
        t = _step_kind_table(labels[uk // nk], np.asarray(kinds, dtype=object)[uk % nk], sums)
    for c in ("computing", "comm", "comm_not_overlapped", "free"):
        if c not in t:
            t[c] = 0
    return t / 1000.0


_STR_ONLY = frozenset({str})   # type sets tested at C level: no Python call per value


def _step_kind_table(step: np.ndarray, kind: np.ndarray, sums: np.ndarray) -> pd.DataFrame:
    """The few (step label, kind, ΣDuration ns) sums as the wide table
    ``DataFrame({"step", "kind", "dur_ns"}).groupby(["step", "kind"])["dur_ns"].sum().unstack(fill_value=0)``:
    index ``step`` (sorted labels), columns ``kind`` (sorted), 0 where a pair has no event. Built
    directly when every label and kind is a str (always, from the trace reader: a pandas group-by
    and unstack cost ~1 ms per rank on these ~20 values); any other value (None, a number) takes
    that group-by, which defines the result. Exact: integer sums (a label on two windows adds in
    int64 as the group-by does) and str order, which is code-point order in Python and in pandas'
    Arrow-backed strings alike."""
    step_l, kind_l = step.tolist(), kind.tolist()
    if not step_l or sums.dtype != np.int64 or not _STR_ONLY.issuperset(map(type, step_l + kind_l)):
        small = pd.DataFrame({"step": step, "kind": kind, "dur_ns": sums})
        return small.groupby(["step", "kind"])["dur_ns"].sum().unstack(fill_value=0)
    rows, cols = sorted(set(step_l)), sorted(set(kind_l))
    ri = dict(zip(rows, range(len(rows))))
    ci = dict(zip(cols, range(len(cols))))
    wide = np.zeros((len(rows), len(cols)), dtype=sums.dtype)
    np.add.at(wide, (np.fromiter(map(ri.__getitem__, step_l), np.int64, len(step_l)),
                     np.fromiter(map(ci.__getitem__, kind_l), np.int64, len(kind_l))), sums)
    return pd.DataFrame(wide, index=pd.Index(rows, name="step"), columns=pd.Index(cols, name="kind"))


def _window_codes(starts: np.ndarray, windows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """:func:`assign_steps` as codes: ``(code per start, labels)`` with ``labels[code]`` the
    label :func:`assign_steps` gives (windows sorted the same way; the last code is
    ``"unassigned"``, or the only one ``"implicit"`` without windows)."""
    if windows is None or windows.empty:
        return np.zeros(len(starts), dtype=np.int64), np.array([IMPLICIT_STEP], dtype=object)
    w = windows.sort_values("start_ns")
    ws, we = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
    idx = np.searchsorted(ws, starts, side="right") - 1
    ok = (idx >= 0) & (starts < we[np.clip(idx, 0, None)])
    labels = np.append(w["step"].to_numpy(dtype=object), np.array([UNASSIGNED], dtype=object))
    return np.where(ok, idx, len(ws)).astype(np.int64), labels


def _pylist(values) -> list:
    """The values as a list of Python objects by one C-level conversion (iterating an Arrow-backed
    array or index runs a Python generator step per element)."""
    return np.asarray(values, dtype=object).tolist()


def _tol_params(policy) -> tuple:
    """(µs per row, µs floor) of the kernel-vs-trace tolerance, read from the policy once."""
    sc = policy.self_checks
    return sc["abs_us_per_row"], sc["abs_us_floor"]


def _written_resolution_us(dur_ns: np.ndarray) -> float:
    """The coarsest decimal step (µs) every duration is a whole multiple of: 0.001 for the
    profiler's 3 decimals, 0.01 for a table rounded to 2 (1 µs at most; 0.001 when empty)."""
    d = np.asarray(dur_ns, dtype=np.int64)
    step = 1
    for coarser in (10, 100, 1000):    # in units of 0.001 us = 1 ns
        if not len(d) or np.any(d % coarser):
            break
        step = coarser
    return step / 1000.0


def _tol(params: tuple, rows: int) -> float:
    per_row, floor = params
    return per_row * rows + floor


def _align(kernel_steps, ref_index) -> tuple[tuple | None, list]:
    """What to compare: ``(("all", kernel step labels, reference step labels), [])`` when the
    steps cannot be paired (an implicit step, or no label in common), else ``(None, labels)``:
    the labels both sides hold, numeric ones first in number order, then the others by text."""
    ks = list(filter(partial(is_not, None), kernel_steps))
    ref = list(compress(ref_index, map(ne, ref_index, repeat(UNASSIGNED))))
    common = set(ks) & set(ref)
    if IMPLICIT_STEP in ks or IMPLICIT_STEP in ref or not common:
        return ("all", ks, ref), []
    common = list(common)
    return None, list(map(common.__getitem__, numeric_first_order(common, by_text=True)))


STEP_TRACE_SUMS = ["computing_us", "comm_us", "comm_not_overlapped_us", "overlapped_us", "free_us"]


def step_trace_sums(st: pd.DataFrame) -> pd.DataFrame:
    """step_trace_time.csv Overlap Analysis columns summed per step (µs): index ``step``
    (sorted), columns :data:`STEP_TRACE_SUMS`. Computed once per rank and shared by the
    self-checks and the fingerprint's ``step.*`` metrics.

    The usual table has one row per step and finite values: then the sums are the values
    themselves, sorted by step, taken with numpy (a pandas group-by on a handful of
    Arrow-string keys costs ~5 ms per rank) and equal to ``st.groupby("step")[...].sum()``.
    Repeated or missing step labels, a missing value or a -0.0 (whose sign the group-by keeps
    or drops depending on its code path) take that group-by."""
    step = st["step"]
    if len(st) == 0 or step.isna().any() or not step.is_unique:
        return st.groupby("step")[STEP_TRACE_SUMS].sum()
    v = np.column_stack([st[c].to_numpy(dtype=float) for c in STEP_TRACE_SUMS])
    if np.isnan(v).any() or ((v == 0) & np.signbit(v)).any():
        return st.groupby("step")[STEP_TRACE_SUMS].sum()
    labels = step.to_numpy(dtype=object)
    order = np.argsort(labels.astype(str), kind="stable")
    return pd.DataFrame({c: v[order, j] for j, c in enumerate(STEP_TRACE_SUMS)},
                        index=pd.Index(labels[order], dtype=step.dtype, name="step"))


def run_self_checks(rank, policy, st_sums: pd.DataFrame | None = None) -> list[SelfCheck]:
    """All self-checks of one rank (see module docstring). Pure: reads ``rank``'s tables.
    ``st_sums``: :func:`step_trace_sums` of the rank's step_trace table when the caller has
    it already (never modified)."""
    out: list[SelfCheck] = []
    k = rank.kernels.df
    kfile = rank.kernels.path.name
    ov = overlap_per_step(rank)
    st = rank.step_trace
    st_by_step = None
    if st is not None:
        st_by_step = step_trace_sums(st) if st_sums is None else st_sums
    tfile = (rank.trace_path.name if rank.trace_path is not None else
             "msprof_*.json timeline" if rank.location.layout == "msprof" else "trace_view.json")
    trace_name = ("OVERLAP_ANALYSIS table" if rank.trace_path is not None and rank.trace_path.suffix == ".db"
                  else f"{tfile} Overlap Analysis")
    st_name = ("analysis.db StepTraceTime" if rank.step_trace_path is not None
               and rank.step_trace_path.suffix == ".db" else "step_trace_time.csv")
    if ov is not None:
        ref, ref_name = ov.rename(columns={"computing": "computing_us", "comm": "comm_us",
                                           "comm_not_overlapped": "comm_not_overlapped_us",
                                           "free": "free_us"}), trace_name
        ref["overlapped_us"] = ref["comm_us"] - ref["comm_not_overlapped_us"]
    elif st_by_step is not None:
        ref, ref_name = st_by_step, f"{st_name} (derived from the trace by torch_npu)"
    else:
        ref, ref_name = None, None

    kernel_steps = km.present_values(k["step"])
    if not kernel_steps:
        out.append(SelfCheck(
            "steps_present", rank.rank, None, FAIL,
            f"all {len(k)} rows of {kfile} have a blank Step Id: no kernel falls in a profiled step, "
            f"so nothing on this rank can be compared (partial capture)", evidence=kfile))
    elif ref is None:
        why = (f"no {tfile} with an Overlap Analysis process and no step_trace_time.csv: "
               f"cannot cross-check {kfile}")
        status = FAIL if policy.self_checks.get("require_trace") else SKIPPED
        for name in ("comm_equality", "compute_union", "overlap_gap"):
            out.append(SelfCheck(name, rank.rank, None, status, why))
    else:
        cat = k["step"] if isinstance(k["step"].dtype, pd.CategoricalDtype) else k["step"].astype("category")
        codes = cat.cat.codes.to_numpy()
        arrays = {c: k[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns", "is_comm")}
        # row positions of each step code in file order: one stable sort instead of a boolean
        # mask over the whole table per step
        every, labels = _align(kernel_steps, _pylist(ref.index))
        tolp = _tol_params(policy)
        if every is not None:
            label, ksteps, rsteps = every
            sel = np.flatnonzero(cat.cat.categories.isin(ksteps))
            idx = np.flatnonzero(np.isin(codes, sel))
            one = _Stats.of(_Rows({c: a[idx] for c, a in arrays.items()}))
            r = ref.loc[[s for s in rsteps if s in ref.index]].sum()
            stats = {f: np.array([v]) for f, v in zip(_Stats._fields, one)}
            refs = {c: np.array([float(r[c])]) for c in ("comm_us", "computing_us", "overlapped_us")}
            out.extend(_kernel_vs_reference(rank.rank, [label], stats, refs, ref_name, kfile, tolp))
        else:
            # one step per label: every per-step figure from one columnar pass (segmented sums and
            # busy unions over the step codes), then the three checks of every step as columns
            per = _Stats.per_code(codes, arrays, len(cat.cat.categories))
            at = km.positions_in(cat.cat.categories.tolist(), labels)   # categories are distinct
            stats = {f: np.asarray(col)[at] for f, col in zip(_Stats._fields, per)}
            refv = ref.reindex(labels)
            refs = {c: refv[c].to_numpy(dtype=float) for c in ("comm_us", "computing_us", "overlapped_us")}
            out.extend(_kernel_vs_reference(rank.rank, labels, stats, refs, ref_name, kfile, tolp))

    if st_by_step is not None and ov is None:
        required = bool(policy.self_checks.get("require_trace"))
        out.append(SelfCheck("trace_vs_step_trace", rank.rank, None, FAIL if required else SKIPPED,
                             f"no trace Overlap Analysis events to compare {st_name} with ({tfile} "
                             f"or the OVERLAP_ANALYSIS table absent or not read)"
                             + ("; the policy requires the trace (self_checks.require_trace: true)" if required
                                else "")))
    if ov is not None and st_by_step is not None:
        out.extend(_trace_vs_step_trace(rank.rank, ov, st_by_step, policy.self_checks["step_trace_abs_us"],
                                        st_name, trace_name, tfile))
    if st is not None:
        out.extend(_step_trace_identities(rank.rank, st, policy))
    if ref is not None and kernel_steps:
        out = diagnose_cut(out, rank, ref, trace_name if ov is not None else st_name, kfile, trace_name)
        out = diagnose_left_out(out, rank, kfile)
    tb = time_base(rank, policy.self_checks.get("time_base_abs_us", 1.0), kfile, tfile, trace_name)
    if tb is not None:
        out.append(tb)
    out.extend(op_statistic_checks(rank, _tol_params(policy)))
    return name_rank_files(out, rank)


def _pairs_joined(mine: tuple, stat: pd.DataFrame) -> tuple:
    """The kernel table's (OP Type, Core Type) pairs ``mine`` = (types, cores, rows, ΣDuration ns)
    outer-joined with op_statistic's rows ``stat``, in pandas' outer-join order (the union of
    the pairs sorted): ``(pairs, rows, sum_ns, count, total_us, stat_row)``, 0 where a side
    lacks the pair (``stat_row`` NaN). By dicts when each side names each pair once (always, in
    practice: a small rank's fixed cost), else by the pandas group-by and join it equals."""
    types, cores, nrows, sums = mine
    pairs = list(zip(types, cores))
    theirs = list(zip(stat["op_type"].tolist(), stat["core_type"].tolist()))
    if len(set(pairs)) == len(pairs) and len(set(theirs)) == len(theirs):
        m = dict(zip(pairs, zip(nrows.tolist(), sums.tolist())))
        t = dict(zip(theirs, zip(stat["count"].tolist(), stat["total_us"].tolist(), stat["row"].tolist())))
        keys = sorted(m.keys() | t.keys())
        return (keys, np.array([m[k][0] if k in m else 0 for k in keys], dtype=np.int64),
                np.array([m[k][1] if k in m else 0.0 for k in keys], dtype=np.float64),
                np.array([t[k][0] if k in t else 0 for k in keys], dtype=np.int64),
                np.array([t[k][1] if k in t else 0.0 for k in keys], dtype=np.float64),
                np.array([t[k][2] if k in t else np.nan for k in keys], dtype=np.float64))
    grouped = pd.DataFrame({"op_type": types, "core_type": cores, "rows": nrows, "sum_ns": sums}).groupby(
        ["op_type", "core_type"], sort=False).sum()   # two codes may name one text (never in practice)
    both = grouped.join(stat.set_index(["op_type", "core_type"])[["count", "total_us", "row"]], how="outer")
    return (list(both.index), both["rows"].fillna(0).astype("int64").to_numpy(),
            both["sum_ns"].fillna(0).to_numpy(dtype=float), both["count"].fillna(0).astype("int64").to_numpy(),
            both["total_us"].fillna(0).to_numpy(dtype=float), both["row"].to_numpy(dtype=float))


def op_statistic_checks(rank, tolp: tuple) -> list[SelfCheck]:
    """``op_statistic_vs_kernels``: op_statistic.csv (:mod:`perfgate.ingest.opstat`) counts the
    kernel table's compute rows per (OP Type, Core Type), and its Total Time(us) is their
    ΣDuration within the row tolerance (``abs_us_per_row * Count + abs_us_floor``, µs); either
    differing fails (exit 3), naming the pair, op_statistic's row and both figures. Both files
    come from one export of the same tasks, so this proves the table intact, not its parsing:
    a compute row deleted (or added) after the export was saved as a baseline while the step
    time checks' tolerance swallowed a short kernel (e.g. st/level2 with its row 895 deleted).
    Equal counts with another ΣDuration are the same workload's tasks timed elsewhere: another
    rank's op_statistic copied beside this table (rank 0's file in rank 1's folder of
    text/level2: every one of its 33 pairs off, by 0.04 to 25.3 µs, e.g. (AdaptiveAvgPool3d,
    AI_VECTOR_CORE) 19.220 µs against rank 1's own 16.700 µs; the smallest, (OnesLike,
    AI_VECTOR_CORE) 0.040 µs over 2 tasks, is 3.3× its tolerance), another run's, or
    Durations edited after the export.

    Measured margin: each real rank's own file (text/level1 and level2 ranks 0 and 1, st/level2
    rank 0, the raw msprof vllm_ascend capture; text/level0 exports none) agrees with its own
    table within 0.007 µs per pair (at most 0.0004 µs per task, relative ≤ 7.9e-5; st/level2
    exactly): each row's Duration and each Total are rounded to 0.001 µs, so the sums differ
    by < 0.0005 µs per task + 0.0005 µs, and the tolerance (0.001 µs per task + 0.01 µs by
    default) is at least 7× every measured difference. A kernel table whose Durations are all
    written to a coarser decimal (re-saved rounded to 2 decimals) is allowed half that step per
    task instead (0.005 µs): the rounding its writer added.
    Communication rows are left out (the export does not count them). Empty when the rank has no
    op_statistic file; ``skipped`` when the kernel table left rows out (N/A Duration, exact
    duplicates: the file counts them) or has no Type / core column values."""
    stat = getattr(rank, "op_statistic", None)
    if stat is None or rank.kernels is None:
        return []
    kt = rank.kernels
    sname, kfile = rank.op_statistic_path.name, kt.path.name
    why = None
    if kt.invalid_rows or kt.duplicate_rows:
        why = (f"{kfile} left {len(kt.invalid_rows) + len(kt.duplicate_rows)} row(s) out (N/A Duration or exact "
               f"duplicates) that {sname} counts")
    elif not (kt.type_available and kt.core_available):
        why = f"{kfile} has no Type / core type values to group its rows by"
    if why:
        return [SelfCheck("op_statistic_vs_kernels", rank.rank, None, SKIPPED, why, evidence=sname)]
    k = kt.df
    compute = ~k["is_comm"].to_numpy()
    # one bincount over (type code, core code) pairs: no Python object per row (1M-row ranks)
    tcat, ccat = k["op_type"].array, k["core_type"].array
    tnames = [str(x) for x in tcat.categories.tolist()] + ["N/A"]    # code -1 (no value): "N/A"
    cnames = [str(x) for x in ccat.categories.tolist()] + ["N/A"]
    tc = np.where(tcat.codes < 0, len(tnames) - 1, tcat.codes).astype(np.int64)[compute]
    cc = np.where(ccat.codes < 0, len(cnames) - 1, ccat.codes).astype(np.int64)[compute]
    pair = tc * len(cnames) + cc
    size = len(tnames) * len(cnames)
    nrows = np.bincount(pair, minlength=size)
    sums = np.bincount(pair, weights=k["dur_ns"].to_numpy()[compute].astype(np.float64), minlength=size)
    used = np.flatnonzero(nrows)
    mine = ([tnames[i // len(cnames)] for i in used.tolist()], [cnames[i % len(cnames)] for i in used.tolist()],
            nrows[used], sums[used])
    keys, rows, sum_ns, count, total, stat_row = _pairs_joined(mine, stat)
    sum_us = sum_ns / 1000.0
    # each row's Duration as written is rounded to its last decimal: a table re-saved with 2
    # decimals is off by up to 0.005 us a row, not 0.001 (the profiler writes 3)
    per_row = max(tolp[0], _written_resolution_us(k["dur_ns"].to_numpy()[compute]) / 2)
    tol = np.array([_tol((per_row, tolp[1]), int(n)) for n in np.maximum(rows, count)])
    off_count = rows != count
    off_time = ~off_count & (np.abs(sum_us - total) > tol)
    bad = np.flatnonzero(off_count | off_time)
    if not len(bad):
        return [SelfCheck("op_statistic_vs_kernels", rank.rank, None, PASS,
                          f"{sname}: {len(stat)} (OP Type, Core Type) pair(s), {int(count.sum()):,} task(s), equal "
                          f"{kfile}'s {int(rows.sum()):,} compute row(s) in count and ΣDuration",
                          float(total.sum()), float(sum_us.sum()), float(tol.sum()), sname)]
    texts = []
    for i in bad[:4]:
        op, core = keys[i]
        at = f" (its data row {int(stat_row[i])}, line {int(stat_row[i]) + 1})" if np.isfinite(stat_row[i]) else ""
        texts.append(f"({op}, {core}): {count[i]:,} task(s) {total[i]:,.3f} us in {sname}{at}, "
                     f"{rows[i]:,} row(s) {sum_us[i]:,.3f} us in {kfile}")
    more = f"; {len(bad) - 4} more pair(s)" if len(bad) > 4 else ""
    i = bad[0]
    if not off_count.any():
        # the same tasks, other times: another rank's or run's file of the same workload beside
        # this table (a data-parallel rank's op_statistic copied), or Durations edited after the export
        return [SelfCheck("op_statistic_vs_kernels", rank.rank, None, FAIL,
                          f"{kfile}'s compute rows are the tasks {sname} counts, but their ΣDuration differs "
                          f"beyond their rounding to 0.001 us: {'; '.join(texts)}{more}: {sname} is not this rank's "
                          f"export of these tasks (another rank's or run's file), or Durations were edited "
                          f"after the export", float(total[i]), float(sum_us[i]), float(tol[i]),
                          f"{kfile}; {sname}")]
    sliced = (f" (the table is {len(kt.slices)} op_summary slices, {kt.slices[0]} to {kt.slices[-1]}: a slice "
              f"lost?)" if kt.slices else "")
    return [SelfCheck("op_statistic_vs_kernels", rank.rank, None, FAIL,
                      f"{kfile}'s compute rows and the tasks {sname} counts differ: {'; '.join(texts)}{more}: a row "
                      f"was lost or added after the export, or the files are from different exports{sliced}",
                      float(total[i]), float(sum_us[i]), float(tol[i]), f"{kfile}; {sname}")]


TIME_BASE_SAMPLE = 4096     # Overlap Analysis events paired with kernel starts (evenly spread)
TIME_BASE_ANCHORS = 8       # earliest / latest events and rows whose differences are the candidate offsets
_TB_FIRST_PASS = 256        # candidates are ranked on this many sampled events, the best confirmed on all


def _nearest(sorted_starts: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index in ``sorted_starts`` of the start nearest to each value of ``x`` (ties: the earlier)."""
    j = np.searchsorted(sorted_starts, x)
    lo = np.clip(j - 1, 0, len(sorted_starts) - 1)
    hi = np.clip(j, 0, len(sorted_starts) - 1)
    return np.where(np.abs(sorted_starts[hi] - x) < np.abs(x - sorted_starts[lo]), hi, lo)


def _us(ns: int) -> str:
    """Exact µs text of an integer ns value (``1736408883704643.212``), no float rounding."""
    sign, v = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{v // 1000}.{v % 1000:03d}"


def time_base(rank, tol_us: float, kfile: str = "kernel_details.csv", tfile: str = "trace_view.json",
              trace_name: str = "trace_view.json Overlap Analysis") -> SelfCheck | None:
    """``time_base`` (only when failing): the kernel table and the trace are on one time base.

    Every Overlap Analysis ``Computing`` / ``Communication`` event of a torch_npu timeline is a
    merged interval of device tasks, so it starts exactly where a kernel row starts (start_ns,
    ns): measured on the 6 real text ranks that hold both files, all 191 events of each start
    within 1 ns of a row start (the table and the trace round to 0.001 us). A table whose Start
    Time(us) column was shifted against the trace (another capture's table, an edited file)
    passes every duration check; here it fails.

    Method (numpy, no per-task loop): up to :data:`TIME_BASE_SAMPLE` Computing / Communication
    events evenly spread over the trace's Overlap Analysis frame are paired with the nearest
    kernel start (one sort of the table's starts, one ``searchsorted``). At offset 0, when at
    least half of them lie within ``tol_us`` of a row start, the files agree: None. Otherwise
    the candidate offsets are the differences between the :data:`TIME_BASE_ANCHORS` earliest
    (and latest) rows and events; when one of them pairs at least half the sampled events, the
    files are on different time bases: a failed check naming both files, the median offset (us)
    over the paired events, how many paired, and one example pair (data row, kernel name and
    start; event kind, start, duration). When no constant offset pairs half of them, nothing is
    claimed here (the busy-union and ΣDuration checks judge the contents).

    Only with a trace that was read and holds Overlap Analysis (not ``--trace never``, nor a
    timeline skipped by ``--trace auto``), and only while the trace's host ``ProfilerStep``
    windows overlap the table's device tasks (``rank.host_clock_ok``): a whole trace on another
    clock (torch_npu writing trace timestamps relative to the first event, Ascend/pytorch
    #155/#156, case Q02) is already told apart by
    :func:`perfgate.ingest.validity.host_clock_mismatch`, its host − device figures left out with
    a warning and the duration checks still judging the contents. A smaller offset is the one
    that would be combined silently (a tail gap moved by the shift): that one fails here. Cost on a 1M-row rank: one sort of the start column
    (skipped when already in order) and a few ``searchsorted`` of <= 4,096 values.
    """
    tr = rank.trace
    if tr is None or not tr.has_overlap or rank.kernels is None or not len(rank.kernels.df) \
            or not getattr(rank, "host_clock_ok", True):
        return None
    k = rank.kernels.df
    ov = tr.overlap
    start = k["start_ns"].to_numpy()
    s = start if bool((start[1:] >= start[:-1]).all()) else np.sort(start)
    ev_start = ov["start_ns"].to_numpy()
    kind = ov["kind"].to_numpy(dtype=object)
    n = len(ev_start)
    # the sample: evenly spread positions, then the Computing / Communication ones among them
    pos = np.unique(np.linspace(0, n - 1, min(n, 3 * TIME_BASE_SAMPLE)).astype(np.int64))
    kk = kind[pos]
    pos = pos[(kk == "computing") | (kk == "comm")][:TIME_BASE_SAMPLE]
    if not len(pos):
        return None
    e = ev_start[pos]
    tol = int(round(tol_us * 1000))

    def paired(delta: int, x: np.ndarray) -> np.ndarray:
        return np.abs(s[_nearest(s, x + delta)] - (x + delta)) <= tol

    if 2 * int(paired(0, e).sum()) >= len(e):
        return None
    # candidate offsets: the earliest / latest rows minus the earliest / latest events (a few
    # dozen; the events found by partition, no full sort of the frame)
    a = min(TIME_BASE_ANCHORS, n)
    first = np.argpartition(ev_start, a - 1)[:a] if a < n else np.arange(n)
    last = np.argpartition(ev_start, n - a)[n - a:] if a < n else np.arange(n)
    cands = []
    for ends, rows in ((first, s[:TIME_BASE_ANCHORS]), (last, s[-TIME_BASE_ANCHORS:])):
        kinds = kind[ends]
        ends = ends[(kinds == "computing") | (kinds == "comm")]
        if len(ends):
            cands.append((rows[:, None] - ev_start[ends][None, :]).ravel())
    if not cands:
        return None
    cands = np.unique(np.concatenate(cands))
    cands = cands[np.abs(cands) > tol]
    if not len(cands):
        return None
    probe = e[np.unique(np.linspace(0, len(e) - 1, min(len(e), _TB_FIRST_PASS)).astype(np.int64))]
    score = np.array([int(paired(int(d), probe).sum()) for d in cands.tolist()])
    best = int(cands[int(np.argmax(score))])
    ok = paired(best, e)
    if 2 * int(ok.sum()) < len(e):
        return None
    j = _nearest(s, e[ok] + best)
    offs = s[j] - e[ok]
    med_us = float(np.median(offs)) / 1000.0
    if abs(med_us) <= tol_us:
        return None
    i0 = int(np.flatnonzero(ok)[0])
    ev = int(pos[i0])
    row_at = int(np.flatnonzero(start == s[int(j[0])])[0])
    kname = k["name"].iat[row_at]
    row = int(k["row"].iat[row_at])
    what = {"computing": "Computing", "comm": "Communication"}.get(kind[ev], str(kind[ev]))
    side = "later" if med_us > 0 else "earlier"
    msg = (f"{kfile} and {tfile} are not on one time base (files from different captures?): the kernel starts "
           f"lie a median {abs(med_us):,.3f} us {side} than the {trace_name} Computing / Communication events "
           f"they pair with ({int(ok.sum())} of {len(e)} sampled events pair at that offset, fewer than half at "
           f"offset 0; tolerance {tol_us:.3f} us), e.g. {kfile} data row {row} ({kname} starts at "
           f"{_us(int(s[int(j[0])]))} us) and the {what} event at {_us(int(ev_start[ev]))} us (duration "
           f"{_us(int(ov['dur_ns'].iat[ev]))} us); one export writes every such event where a kernel row starts")
    return SelfCheck("time_base", rank.rank, None, FAIL, msg, 0.0, med_us, float(tol_us),
                     f"{kfile}, {tfile}")


CUT_CAUSE = ": the files are not from one capture or a row was altered"
_SUMMED = ("comm_equality", "compute_union", "overlap_gap")
CUT_SLACK_NS = 1_000   # trace activity starting > 1 us after the kernel table's last task ends in a step


def _activity_after(rank, label, k: pd.DataFrame) -> tuple[float, float] | None:
    """``(µs, count)``: how long after the end of the last kernel row of step ``label`` the trace's
    Computing / Communication Overlap Analysis events of that step's ProfilerStep window still
    start, and how many start then (more than :data:`CUT_SLACK_NS` after it); None without those
    events or when none starts that late. Device work the kernel table lacks at the end of a
    step: a duration edited shorter moves no event's start, rows cut off the end do."""
    tr = rank.trace
    if tr is None or not tr.has_overlap or tr.steps is None or tr.steps.empty:
        return None
    w = tr.steps[tr.steps["step"].astype(str).to_numpy() == str(label)]
    in_step = (k["step"].astype(object) == label).to_numpy()
    if w.empty or not in_step.any():
        return None
    lo, hi = int(w["start_ns"].min()), int(w["end_ns"].max())
    k_end = int(k["end_ns"].to_numpy()[in_step].max())
    ov = tr.overlap
    st = ov["start_ns"].to_numpy()
    late = np.isin(ov["kind"].to_numpy(dtype=object), ("computing", "comm")) & (st >= lo) & (st < hi) \
        & (st > k_end + CUT_SLACK_NS)
    if not late.any():
        return None
    return (int(ov["end_ns"].to_numpy()[late].max()) - k_end) / 1000.0, int(late.sum())


def diagnose_left_out(checks: list, rank, kfile: str) -> list:
    """Name the kernel rows the rank left out (N/A or empty Duration(us), P06) in its failed
    comm_equality / compute_union / overlap_gap checks: the reference (trace or
    step_trace_time.csv) counts their tasks, the kernel side cannot, so they are the first
    suspect (without this the failure would say only that the two sides differ). The rows'
    Step Id is unknown once left out, so every failed summed check of the rank says it."""
    left = tuple(getattr(rank.kernels, "invalid_rows", ()) or ())
    if not left:
        return checks
    shown = ", ".join(str(r) for r in left[:8]) + (f" (+{len(left) - 8} more)" if len(left) > 8 else "")
    why = (f"; {kfile} has {len(left)} row(s) with N/A or empty Duration(us) (rows {shown}), left out of the "
           f"kernel side: their time is in the reference, so the capture is incomplete there")
    return [replace(c, message=c.message + why) if c.status == FAIL and c.name in _SUMMED else c
            for c in checks]


def diagnose_cut(checks: list, rank, ref: pd.DataFrame, ref_src: str, kfile: str, trace_name: str = "") -> list:
    """What the files prove when the kernel table ends early (an export cut after a complete row:
    no malformed line is left for the reader to find).

    * A step ``ref`` lists with device activity (Computing or Communication > 0 us) that has no
      kernel row is a ``steps_present`` failure naming the step and its figures (before, such a
      step was left out of every comparison: a table cut at a step boundary passed).
    * When steps of ``ref`` after the step of the table's last data row have no kernel row, or
      the kernel figures fall short of ``ref`` in that last step alone (a comm_equality /
      compute_union failure there with the kernel side lower, every earlier step agreeing) AND
      the trace (``trace_name``) shows device work starting in that step after the table's last
      task ended (:func:`_activity_after`: rows cut off the end; a duration edited shorter moves
      no start), the failed checks of those steps say ``truncated or altered: kernel_details.csv
      stops at step N (data row R, its last) while step_trace_time.csv lists steps up to M`` /
      ``... ends at data row R (its last) while trace_view.json Overlap Analysis shows K device
      event(s) of step N starting after its last task, up to X us later`` instead of only "not
      from one capture or a row was altered". step_trace_time.csv alone holds no times: a
      shortfall there keeps the old words.

    ``ref``: the reference per step (index step label; ``computing_us``, ``comm_us``); ``ref_src``:
    its name (``step_trace_time.csv``, ``trace_view.json Overlap Analysis``). Only numeric step
    labels of a CSV kernel table are judged (an implicit step, a DB export: ``checks`` unchanged).
    Whole columns; the checks kept in order, the new ones after the rank's step checks."""
    k = rank.kernels.df
    if not len(k) or Path(str(rank.kernels.path)).suffix.lower() != ".csv":
        return checks
    last = int(np.argmax(k["row"].to_numpy()))
    last_row, last_step = int(k["row"].iat[last]), k["step"].iat[last]
    labels = _pylist(ref.index)
    if last_step is None or last_step != last_step or not str(last_step).isdigit() \
            or not all(map(str.isdigit, map(str, labels))):
        return checks
    n_last = int(last_step)
    present = set(km.present_values(k["step"]))
    active = (ref["computing_us"].to_numpy(dtype=float) + ref["comm_us"].to_numpy(dtype=float)) > 0
    lacking = [lab for lab, a in zip(labels, active.tolist()) if a and lab not in present]
    after = [lab for lab in lacking if int(lab) > n_last]
    name = np.array(list(map(attrgetter("name"), checks)), dtype=object)
    step = np.array(list(map(str, map(attrgetter("step"), checks))), dtype=object)
    fail = np.array(list(map(attrgetter("status"), checks)), dtype=object) == FAIL
    summed = fail & np.isin(name, _SUMMED)
    at_last = summed & (step == str(last_step))
    short = [c for c in compress(checks, at_last & np.isin(name, _SUMMED[:2]))
             if c.observed is not None and c.expected is not None and c.observed < c.expected]
    late = _activity_after(rank, last_step, k) if short and not after and not (summed & ~at_last).any() else None
    why = ""
    if after:
        why = (f"truncated or altered: {kfile} stops at step {last_step} (data row {last_row}, its last) while "
               f"{ref_src} lists steps up to {max(map(int, labels))}")
    elif late is not None:
        why = (f"truncated or altered: {kfile} ends at data row {last_row} (its last) while {trace_name} shows "
               f"{late[1]} device event(s) of step {last_step} starting after its last task, up to "
               f"{late[0]:.3f} us later" + (" (every earlier step agrees)" if len(present) > 1 else ""))
    out = list(checks)
    if why:
        for i in np.flatnonzero(at_last).tolist():
            c = out[i]
            msg = c.message[:-len(CUT_CAUSE)] if c.message.endswith(CUT_CAUSE) else c.message
            out[i] = SelfCheck(c.name, c.rank, c.step, c.status, f"{msg}: {why}", c.expected, c.observed,
                               c.tolerance, c.evidence)
    if lacking:
        at = ref.loc[lacking]
        out.extend(from_columns(
            SelfCheck, repeat("steps_present"), repeat(rank.rank), lacking, repeat(FAIL, len(lacking)),
            _texts(len(lacking), (np.ones(len(lacking), dtype=bool),
                                  "step {} is in {} (Computing {:.3f} us, Communication {:.3f} us) but {} has no "
                                  "row in it{}", (np.array(lacking + [None], dtype=object)[:-1], ref_src,
                                                  at["computing_us"].to_numpy(dtype=float),
                                                  at["comm_us"].to_numpy(dtype=float), kfile,
                                                  np.array([f": {why}" if why and lab in after else ""
                                                            for lab in lacking] + [None], dtype=object)[:-1]))),
            repeat(None), repeat(None), repeat(None), repeat(f"{kfile}, {ref_src}")))
    return out


def rank_files(rank) -> dict:
    """``{bare file name: rank-relative path}`` of the rank's kernel table, step_trace_time.csv,
    trace and op_statistic: the path below the folder that holds the rank's folder
    (``rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv``), which tells apart files that
    every rank has under the same name. Files the rank does not have, or outside its folder, are
    left out."""
    loc = getattr(rank, "location", None)
    base = loc.rank_dir.parent if loc is not None else None
    out = {}
    for p in (rank.kernels.path if rank.kernels is not None else None, rank.step_trace_path, rank.trace_path,
              getattr(rank, "op_statistic_path", None)):
        if p is None or base is None:
            continue
        try:
            out[p.name] = p.relative_to(base).as_posix()
        except ValueError:
            continue
    return out


def name_rank_files(checks: list, rank) -> list:
    """``checks`` with every *failed* check's message naming the rank's files by their
    rank-relative path (:func:`rank_files`) instead of the bare name (``kernel_details.csv row 40``
    -> ``rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv row 40``): where several ranks
    fail, each text says which file to open. Passing, warning and skipped texts and the evidence
    field keep the bare names: they are part of every fingerprint (the golden digests of
    tests/metrics/test_fingerprint_stable.py), and the check's ``rank`` names the rank there. Columnar:
    one C-level ``re.sub`` pass per file name over the failed messages, the changed checks built
    by :func:`perfgate.model.from_columns` (no Python-level call per check)."""
    if not checks:
        return checks
    failed = np.flatnonzero(np.fromiter(map(eq, map(attrgetter("status"), checks), repeat(FAIL)), dtype=bool,
                                        count=len(checks)))
    subs = rank_files(rank) if len(failed) else {}
    if not subs:
        return checks
    idx = failed.tolist()
    picked = list(map(checks.__getitem__, idx))
    msgs = list(map(attrgetter("message"), picked))
    for name, path in subs.items():
        pat = re.compile(r"(?<![\w./-])" + re.escape(name) + r"(?![\w-])")
        msgs = list(map(pat.sub, repeat(path.replace("\\", "\\\\")), msgs))
    cols = [msgs if f == "message" else list(map(attrgetter(f), picked)) for f in SelfCheck.__dataclass_fields__]
    out = list(checks)
    deque(map(out.__setitem__, idx, from_columns(SelfCheck, *cols)), maxlen=0)
    return out


class _Rows(dict):
    """Kernel columns (numpy arrays) of the rows of one comparison, with a row count."""

    def __len__(self):
        return len(self["row"])

    def where(self, mask) -> "_Rows":
        return _Rows({c: a[mask] for c, a in self.items()})


class _Stats(namedtuple("_StatsFields", ("n", "n_comm", "n_comp", "sum_comm", "sum_comp", "sum_all", "u_comm",
                                           "u_comp", "u_all", "row_min", "row_max"))):
    """The figures the kernel-vs-trace checks read of one step's rows: row counts (all,
    communication, compute), ΣDuration and busy unions in ns (communication, compute, all),
    first and last file row."""
    __slots__ = ()

    @classmethod
    def of(cls, rows: "_Rows") -> "_Stats":
        c = rows["is_comm"].astype(bool)
        st, en, du = rows["start_ns"], rows["end_ns"], rows["dur_ns"]
        n = len(rows)
        return cls._make((n, int(c.sum()), int(n - c.sum()), int(du[c].sum()), int(du[~c].sum()), int(du.sum()),
                    busy_union_ns(st[c], en[c]) if c.any() else 0,
                    busy_union_ns(st[~c], en[~c]) if (~c).any() else 0,
                    busy_union_ns(st, en) if n else 0,
                    int(rows["row"].min()) if n else 0, int(rows["row"].max()) if n else 0))

    @classmethod
    def per_code(cls, codes, arrays, ncodes: int) -> "_PerCode":
        """Every code's figures at once (codes ``-1``, rows without a step, are left out)."""
        ok = np.flatnonzero(codes >= 0)
        ok = ok[np.lexsort((arrays["start_ns"][ok], codes[ok]))]  # (step, start) order: one sort for the 3 unions
        code = codes[ok].astype(np.int64)
        c = arrays["is_comm"][ok].astype(bool)
        st, en, du, row = (arrays[k][ok].astype(np.int64) for k in ("start_ns", "end_ns", "dur_ns", "row"))
        cnt = np.bincount(code, minlength=ncodes)
        ncomm = np.bincount(code[c], minlength=ncodes)

        def isum(mask):
            out = np.zeros(ncodes, dtype=np.int64)
            np.add.at(out, code[mask], du[mask])
            return out
        rmin = np.full(ncodes, np.iinfo(np.int64).max)
        rmax = np.full(ncodes, np.iinfo(np.int64).min)
        np.minimum.at(rmin, code, row)
        np.maximum.at(rmax, code, row)
        return _PerCode(cnt, ncomm, cnt - ncomm, isum(c), isum(~c), isum(np.ones(len(code), dtype=bool)),
                        segmented_union_ns(code[c], st[c], en[c], ncodes, presorted=True),
                        segmented_union_ns(code[~c], st[~c], en[~c], ncodes, presorted=True),
                        segmented_union_ns(code, st, en, ncodes, presorted=True), rmin, rmax)


class _PerCode(tuple):
    """:class:`_Stats` columns for every step code; ``at(i)`` is one step's :class:`_Stats`."""

    def __new__(cls, *cols):
        return super().__new__(cls, cols)

    def at(self, i: int) -> _Stats:
        return _Stats._make(int(col[i]) for col in self)

    def all(self) -> list:
        """Every code's :class:`_Stats` (index = code), each column converted once."""
        return [_Stats._make(v) for v in zip(*(col.tolist() for col in self))]


def _texts(n: int, *cases) -> list:
    """``n`` strings built column-wise: each case ``(mask, template, args)`` formats the rows of
    ``mask`` with ``template.format`` (args: numpy columns, taken at those rows as Python values,
    or constants), one C-level ``map`` per case instead of an f-string per row."""
    out = np.empty(n, dtype=object)
    for mask, template, args in cases:
        idx = np.flatnonzero(mask)
        if len(idx):
            cols = [a[idx].tolist() if isinstance(a, np.ndarray) else repeat(a) for a in args]
            out[idx] = list(map(template.format, *cols))
    return out.tolist()


def _status(fail: np.ndarray, bad: str = FAIL) -> list:
    return np.where(fail, bad, PASS).tolist()


def _kernel_vs_reference(rank_id, labels: list, st: dict, ref: dict, ref_name, kfile, tolp: tuple) -> list[SelfCheck]:
    """comm_equality, compute_union and overlap_gap of every compared step, in that order per
    step. ``st``: :class:`_Stats` fields as int64 columns (one value per label); ``ref``: the
    reference's ``comm_us``, ``computing_us``, ``overlapped_us`` columns (µs). Each check's
    figures, statuses and messages are whole-column operations (a per-step loop in
    tests/_selfcheck_oracle.py is their test oracle)."""
    n = len(labels)
    per_row, floor = tolp

    def tol(rows):
        return per_row * rows + floor
    nn, nc, ncp = st["n"], st["n_comm"], st["n_comp"]
    rng = _texts(n, (nn != 0, "{} rows {}-{}", (kfile, st["row_min"], st["row_max"])), (nn == 0, "{}", (kfile,)))
    # comm equality
    sum_comm = st["sum_comm"] / 1000.0
    ref_comm = ref["comm_us"]
    tol_c = tol(nc)
    u_comm = st["u_comm"] / 1000.0
    ok1 = np.abs(sum_comm - ref_comm) <= tol_c
    ok2 = ~ok1 & (np.abs(u_comm - ref_comm) <= tol_c) & (nc != 0)
    fail = ~(ok1 | ok2)
    msg = _texts(n, (ok1, "Σ Duration of {} communication row(s) = {:.3f} us equals {} Communication {:.3f} us",
                     (nc, sum_comm, ref_name, ref_comm)),
                 (ok2, "communication ops overlap each other: their busy union {:.3f} us (ΣDuration {:.3f} us) "
                       "equals {} Communication {:.3f} us", (u_comm, sum_comm, ref_name, ref_comm)),
                 (fail, "Σ Duration of {} communication row(s) in {} is {:.3f} us but {} Communication is {:.3f} us "
                        "(difference {:+.3f} us, tolerance {:.3f} us): the files are not from one capture or a row "
                        "was altered", (nc, kfile, sum_comm, ref_name, ref_comm, sum_comm - ref_comm, tol_c)))
    ce = from_columns(SelfCheck, repeat("comm_equality"), repeat(rank_id), labels, _status(fail), msg,
                      ref_comm.tolist(), sum_comm.tolist(), np.asarray(tol_c).tolist(), rng)
    # compute union
    u_comp = st["u_comp"] / 1000.0
    ref_comp = ref["computing_us"]
    tol_p = tol(ncp)
    ok = np.abs(u_comp - ref_comp) <= tol_p
    msg = _texts(n, (ok, "busy union of {} compute row(s) {:.3f} us equals {} Computing {:.3f} us",
                     (ncp, u_comp, ref_name, ref_comp)),
                 (~ok, "busy union of {} compute row(s) in {} is {:.3f} us but {} Computing is {:.3f} us "
                       "(difference {:+.3f} us, tolerance {:.3f} us)",
                  (ncp, kfile, u_comp, ref_name, ref_comp, u_comp - ref_comp, tol_p)))
    cu = from_columns(SelfCheck, repeat("compute_union"), repeat(rank_id), labels, _status(~ok), msg,
                      ref_comp.tolist(), u_comp.tolist(), np.asarray(tol_p).tolist(), rng)
    # overlap gap: ΣDuration − busy union decomposed; its compute∩comm part is "Overlapped"
    sum_all = st["sum_all"] / 1000.0
    u_all = st["u_all"] / 1000.0
    inter = u_comp + u_comm - u_all
    self_comp = st["sum_comp"] / 1000.0 - u_comp
    self_comm = sum_comm - u_comm
    ref_ov = ref["overlapped_us"]
    tol_a = tol(nn)
    ok = (np.abs(inter - ref_ov) <= tol_a) & (sum_all + 1e-9 >= u_all)
    detail = ("ΣDuration {:.3f} us − busy union {:.3f} us = {:.3f} us = compute∩comm {:.3f} us + compute-compute "
              "{:.3f} us + comm-comm {:.3f} us; {} Overlapped {:.3f} us")
    args = (sum_all, u_all, sum_all - u_all, inter, self_comp, self_comm, ref_name, ref_ov)
    msg = _texts(n, (ok, detail, args),
                 (~ok, detail + " differs from compute∩comm by {:+.3f} us (tolerance {:.3f} us)",
                  args + (inter - ref_ov, tol_a)))
    og = from_columns(SelfCheck, repeat("overlap_gap"), repeat(rank_id), labels, _status(~ok), msg,
                      ref_ov.tolist(), inter.tolist(), np.asarray(tol_a).tolist(), rng)
    return list(chain.from_iterable(zip(ce, cu, og)))


def _trace_vs_step_trace(rank_id, ov: pd.DataFrame, st_by_step: pd.DataFrame, tol, st_name, trace_name,
                         tfile) -> list[SelfCheck]:
    """trace_vs_step_trace per step of ``st_by_step`` (:func:`step_trace_sums`): the worst of the
    four Overlap Analysis kinds (the first largest |difference|, as ``max`` over the kinds in
    order gives it) within ``tol`` µs; a step without trace events fails. Whole columns."""
    kinds = ("computing", "comm", "comm_not_overlapped", "free")
    labels = _pylist(st_by_step.index)
    n = len(labels)
    in_ov = np.asarray(pd.Index(labels, dtype=object).isin(_pylist(ov.index)), dtype=bool)  # hash look-ups in C
    implicit = np.fromiter(map(eq, labels, repeat(IMPLICIT_STEP)), dtype=bool, count=n)
    ov_at = ov.reindex(st_by_step.index)  # columns once, not one .loc per step
    ov_all = ov.sum()
    a = np.column_stack([st_by_step[f"{c}_us"].to_numpy(dtype=float) for c in kinds]) if n else np.zeros((0, 4))
    b = np.column_stack([np.where(implicit, float(ov_all[c]), ov_at[c].to_numpy(dtype=float)) for c in kinds]) \
        if n else np.zeros((0, 4))
    d = np.abs(a - b)
    worst = np.zeros(n, dtype=np.int64)
    best = d[:, 0].copy()
    for j in range(1, 4):   # max() keeps the first largest and never replaces by or with a NaN
        up = d[:, j] > best
        best = np.where(up, d[:, j], best)
        worst = np.where(up, j, worst)
    rows = np.arange(n)
    aw, bw = a[rows, worst], b[rows, worst]
    wname = np.array(kinds, dtype=object)[worst]
    ok = np.abs(aw - bw) <= tol
    missing = ~in_ov & ~implicit
    ev = f"{st_name}, {tfile}"
    cmp_ = ~missing
    msg = _texts(n, (cmp_ & ok, "{} and {} agree (largest difference {}: {:.3f} vs {:.3f} us)",
                     (st_name, trace_name, wname, aw, bw)),
                 (cmp_ & ~ok, "{} {} = {:.3f} us but the {} events sum to {:.3f} us: the files are not from one "
                              "capture", (st_name, wname, aw, trace_name, bw)),
                 (missing, "step {} is in step_trace_time.csv but no trace event falls in it",
                  (np.array(labels + [None], dtype=object)[:-1],)))
    exp = np.array(aw.tolist() + [None], dtype=object)[:-1]
    obs = np.array(bw.tolist() + [None], dtype=object)[:-1]
    tl = np.full(n + 1, tol, dtype=object)[:-1]
    exp[missing] = obs[missing] = tl[missing] = None
    return from_columns(SelfCheck, repeat("trace_vs_step_trace"), repeat(rank_id), labels,
                        _status(~ok | missing), msg, exp.tolist(), obs.tolist(), tl.tolist(), repeat(ev))


_ID_NAMES = ("step", "row", "comm_us", "comm_not_overlapped_us", "overlapped_us", "stage_us", "bubble_us",
             "computing_us", "free_us", "comm_not_overlapped_excl_recv_us")


def _step_trace_identities(rank_id, st: pd.DataFrame, policy) -> list[SelfCheck]:
    """step_trace_identities per step_trace_time.csv row (P16): Overlapped = Communication −
    Comm(Not Overlapped) (pass / fail), then, when they do not hold, the Stage and Exclude Receive
    identities (warn). Whole columns; a per-row loop in tests/_selfcheck_oracle.py is the test
    oracle."""
    tol = policy.self_checks["step_trace_abs_us"]
    n = len(st)
    c = {name: st[name].to_numpy() if name in st else np.full(n, np.nan) for name in _ID_NAMES}
    if not n:
        return []
    for name in _ID_NAMES[2:]:   # the readers give float64; an object column is read as floats
        if c[name].dtype.kind not in "fiu":
            c[name] = c[name].astype(float)
    step = c["step"].tolist()
    row = c["row"]
    ov_calc = c["comm_us"] - c["comm_not_overlapped_us"]
    ovl = c["overlapped_us"]
    ok = np.abs(ov_calc - ovl) <= tol
    ev = _texts(n, (np.ones(n, dtype=bool), "step_trace_time.csv row {}", (row,)))
    msg = _texts(n, (ok, "Overlapped {:.3f} us = Communication − Comm(Not Overlapped) {:.3f} us", (ovl, ov_calc)),
                 (~ok, "step_trace_time.csv row {}: Overlapped {:.3f} us but Communication − "
                       "Communication(Not Overlapped) = {:.3f} us", (row, ovl, ov_calc)))
    objs = [from_columns(SelfCheck, repeat("step_trace_identities"), repeat(rank_id), step, _status(~ok), msg,
                         ov_calc.astype(float).tolist(), ovl.astype(float).tolist(), repeat(tol), ev)]
    at = [np.arange(n)]
    slot = [np.zeros(n, dtype=np.int64)]
    stage, bubble_raw = c["stage_us"], c["bubble_us"]
    bubble = np.where(np.isnan(bubble_raw), 0.0, bubble_raw)
    with np.errstate(invalid="ignore"):
        expect = c["computing_us"] + c["comm_not_overlapped_us"] + c["free_us"] - bubble
        lim = np.where(1e-3 * expect > tol, 1e-3 * expect, tol)   # max(tol, 1e-3 * expect)
        w1 = ~np.isnan(stage) & (np.abs(expect - stage) > lim)
        excl = c["comm_not_overlapped_excl_recv_us"]
        calc = c["comm_not_overlapped_us"] - bubble_raw
        w2 = ~np.isnan(excl) & ~np.isnan(bubble_raw) & (np.abs(calc - excl) > tol)
    for slot_no, w, template, args in (
            (1, w1, "step_trace_time.csv row {}: Stage {:.3f} us differs from Computing + Comm(Not Overlapped) "
                    "+ Free − Bubble = {:.3f} us", (row, stage, expect)),
            (2, w2, "step_trace_time.csv row {}: Comm(Not Overlapped and Exclude Receive) {:.3f} us ≠ "
                    "Comm(Not Overlapped) − Bubble {:.3f} us", (row, excl, calc))):
        idx = np.flatnonzero(w)
        if not len(idx):
            continue
        m = len(idx)
        objs.append(from_columns(SelfCheck, repeat("step_trace_identities"), repeat(rank_id),
                                 list(map(step.__getitem__, idx.tolist())), repeat(WARN, m),
                                 _texts(m, (np.ones(m, dtype=bool), template, tuple(x[idx] for x in args))),
                                 repeat(None), repeat(None), repeat(None), list(map(ev.__getitem__, idx.tolist()))))
        at.append(idx)
        slot.append(np.full(m, slot_no, dtype=np.int64))
    if len(objs) == 1:
        return objs[0]
    allobj = list(chain.from_iterable(objs))
    order = np.lexsort((np.concatenate(slot), np.concatenate(at)))
    return list(map(allobj.__getitem__, order.tolist()))
