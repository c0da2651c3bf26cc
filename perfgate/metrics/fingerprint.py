"""Fingerprint: the quantities the gate trusts, per rank and across ranks.

Per rank every metric is computed per step and reduced over the steps (counts: the lower
median, an observed count; times and shares: the median). Across ranks each metric is then
reported in three views: ``rank0`` (the lowest rank id, normally 0), ``p50`` (median over
ranks) and ``max``. Cross-rank figures use per-rank durations only; absolute timestamps of
different devices are never compared (P17).
"""
from __future__ import annotations

import bisect
import contextlib
import datetime as _dt
import functools
import gc
import hashlib
import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.version import __version__
from perfgate.errors import InvalidCaptureError
from perfgate.metrics import collection
from perfgate.metrics import kernels as km
from perfgate.metrics import operators as opv
from perfgate.metrics import registry
from perfgate.metrics import stages
from perfgate.metrics import suggest
from perfgate.metrics.comm import (bandwidth, kind_of as comm_kind, kind_table, op_identity_checks, ops_vs_kernel_checks,
                                   ops_vs_step_trace_checks, wait_ratio)
from perfgate.metrics.intervals import segmented_union_ns
from perfgate.metrics.selfcheck import FAIL, overlap_per_step, run_self_checks, step_trace_sums
from perfgate.metrics.summary import RankSummary
from perfgate.metrics.steps import (confirm_recompile, cross_rank_findings, label_steps, step_table,
                                   step_time_records, table_records, warmup_findings)
from perfgate.model import FINGERPRINT_SCHEMA, Finding, Fingerprint, MetricValue, metric_key

_ANATOMY = {
    "step.wall_us": "wall_us", "step.bubble_us": "bubble_us", "step.underfeed_ratio": "underfeed_ratio",
    "step.prelaunch_gap_us": "prelaunch_us", "step.tail_gap_us": "tail_us",
    "step.internal_bubble_us": "internal_bubble_us", "step.largest_bubble_us": "largest_bubble_us",
}
_STEP_COLS = {
    "step.computing_us": "computing_us",
    "step.comm_us": "comm_us",
    "step.comm_not_overlapped_us": "comm_not_overlapped_us",
    "step.overlapped_us": "overlapped_us",
    "step.free_us": "free_us",
}


def _rel(path, root) -> str:
    """``path`` relative to the capture root (as text), else ``path`` itself. Remembered per
    (path, root, working directory): resolving costs file-system calls and is asked ~10 times
    per rank for the same few files."""
    import os
    return _rel_cached(path, root, os.getcwd())


@functools.lru_cache(maxsize=4096)
def _rel_cached(path, root, _cwd) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _rows_by(df: pd.DataFrame, key: str, kfile: str, limit: int = 5) -> dict:
    """{value of ``key``: evidence text naming its first ``limit`` rows and how many more}.

    Categorical keys (the kernel table's name / family / type columns) are grouped on their
    integer codes with one stable argsort, not a pandas groupby (1M rows: ~0.05 s vs ~0.2 s);
    rows stay in table order within a value, exactly as ``groupby().head()`` gives them.
    """
    col = df[key]
    if isinstance(col.dtype, pd.CategoricalDtype):
        return _rows_by_column(col, df["row"], kfile, limit)
    grouped = df.groupby(key, observed=True)["row"]
    first = grouped.head(limit).groupby(col, observed=True).agg(list).to_dict()
    sizes = grouped.size().to_dict()
    groups = ((val, rows, int(sizes.get(val, 0))) for val, rows in first.items())
    return _evidence_texts(groups, kfile)


def _rows_by_column(col: pd.Series, row: pd.Series, kfile: str, limit: int = 5) -> dict:
    """:func:`_rows_by` of a categorical column ``col`` with the data row numbers ``row`` (the
    same rows, in table order), without a frame holding both: the values are grouped on their
    integer codes with one stable argsort."""
    codes = col.cat.codes.to_numpy()
    idx = np.flatnonzero(codes >= 0)
    order = idx[np.argsort(codes[idx], kind="stable")]
    sc = codes[order]  # already sorted: runs of equal codes found by one diff, no second sort
    start = np.flatnonzero(np.concatenate(([True], sc[1:] != sc[:-1]))) if len(sc) else np.zeros(0, np.int64)
    uniq, count = sc[start], np.diff(np.append(start, len(sc)))
    rownum = row.to_numpy()
    cats = col.cat.categories.tolist()  # Python values once (an Arrow-backed Index is slow per element)
    return _evidence_texts(((cats[u], rownum[order[b:b + min(limit, n)]].tolist(), n)
                            for u, b, n in zip(uniq.tolist(), start.tolist(), count.tolist())), kfile)


def _evidence_texts(groups, kfile: str) -> dict:
    out = {}
    for val, rows, size in groups:
        extra = size - len(rows)
        out[val] = f"{kfile} rows {', '.join(map(str, rows))}" + (f" (+{extra} more)" if extra > 0 else "")
    return out


_median = km.median_nan   # median skipping NaN, as pd.Series.median


def _samples(values) -> dict:
    """Context entry carrying the per-step values (in step order) a median was taken over;
    :func:`_views` moves them into :attr:`MetricValue.samples` per view."""
    return {"samples": np.asarray(values, dtype=float).tolist()}   # Python floats, as float(x) each


def _view_samples(per_rank_samples: dict, ranks: list, r0) -> dict:
    """Per-step samples of each cross-rank view: rank0 = that rank's steps; p50 / max = the
    median / max over ranks step by step (only when every rank has the same step count,
    else None: the view is then compared by tolerance only)."""
    out = {terms.VIEW_RANK0: per_rank_samples.get(r0)}
    vecs = [per_rank_samples.get(r) for r in ranks]
    if all(v is not None for v in vecs) and len({len(v) for v in vecs}) == 1 and vecs and len(vecs[0]):
        arr = np.array(vecs, dtype=float)
        out[terms.VIEW_P50] = np.median(arr, axis=0).tolist()
        out[terms.VIEW_MAX] = arr.max(axis=0).tolist()
    return out


def _rows_text(rows, limit=5) -> str:
    rows = list(rows)
    shown = ", ".join(str(r) for r in rows[:limit])
    return f"rows {shown}" + (f" (+{len(rows) - limit} more)" if len(rows) > limit else "")


def _overlap_steps(rank, st_sums: pd.DataFrame | None = None) -> tuple[pd.DataFrame | None, str | None]:
    """Per-step Overlap Analysis figures (µs) from step_trace_time.csv, else from the trace.
    ``st_sums``: :func:`perfgate.metrics.selfcheck.step_trace_sums` of the rank when the
    caller has it already."""
    if rank.step_trace is not None:
        t = step_trace_sums(rank.step_trace) if st_sums is None else st_sums
        return t, "step_trace_time.csv"
    ov = overlap_per_step(rank)
    if ov is not None:
        ov = ov.drop(index="unassigned", errors="ignore")
        t = pd.DataFrame({"computing_us": ov["computing"], "comm_us": ov["comm"],
                          "comm_not_overlapped_us": ov["comm_not_overlapped"],
                          "free_us": ov["free"]})
        t["overlapped_us"] = t["comm_us"] - t["comm_not_overlapped_us"]
        return t, f"{rank.trace_path.name if rank.trace_path is not None else 'trace_view.json'} (Overlap Analysis)"
    return None, None


def _overlap_and_comm_metrics(rank, root, out: dict, overlap=None):
    """Add one rank's step metrics from step_trace_time.csv (else the trace's Overlap Analysis):
    ``step.*`` (us, busy-union caliber as msprof writes them, Free and the step time elapsed),
    step time = Computing + Communication(Not Overlapped) + Free (us), the
    exposed-communication ratio; and its
    communication.json metrics (``comm.elapse_us`` per step, ``comm.wait_ratio``,
    ``comm.bandwidth_gbps`` per link), to ``out`` ({(name, labels): (value, evidence, context)}).
    Full and partial ranks alike. Returns the per-step step time (a Series by step, us) or None.
    ``overlap``: :func:`_overlap_steps` of the rank when the caller has it already."""
    time = None
    st, st_src = overlap if overlap is not None else _overlap_steps(rank)
    if st is not None and len(st):
        src = _rel(rank.step_trace_path, root) if rank.step_trace_path else st_src
        cols = {c: st[c].to_numpy(dtype=float) for c in _STEP_COLS.values()}
        for name, col in _STEP_COLS.items():
            out[(name, ())] = (_median(cols[col]), src, _samples(cols[col]))
        t = cols["computing_us"] + cols["comm_not_overlapped_us"] + cols["free_us"]
        time = pd.Series(t, index=st.index)
        out[("step.time_us", ())] = (_median(t), f"{src} (Computing + Communication(Not "
                                     f"Overlapped) + Free)", _samples(t))
        if (cols["comm_us"] > 0).all():
            ratio = cols["comm_not_overlapped_us"] / cols["comm_us"]
            out[("step.exposed_comm_ratio", ())] = (_median(ratio), src, _samples(ratio))
    if rank.comm is not None and len(rank.comm.ops):
        cfile = _rel(rank.comm_path, root)
        out[("comm.elapse_us", ())] = (_comm_elapse_median(rank.comm.ops), cfile, {})
        wr = wait_ratio(rank.comm)
        if not np.isnan(wr):
            out[("comm.wait_ratio", ())] = (wr, f"{cfile} Wait/Transit Time(ms)", {})
        for link, bw in bandwidth(rank.comm).items():
            out[("comm.bandwidth_gbps", (("link", link),))] = (bw, f"{cfile} {link} Transit Size/Time", {})
    return time


def _comm_elapse_median(ops: pd.DataFrame) -> float:
    """Median over steps of the communication operations' summed Elapse Time (us), as
    ``float(ops.groupby("step")["elapse_us"].sum().median())``: a rank's few operations are
    summed per step by :func:`perfgate.metrics.kernels.group_sums` (the same compensated sums),
    a large or categorical table by that group-by."""
    if len(ops) > km.SMALL_GROUP_ROWS or isinstance(ops["step"].dtype, pd.CategoricalDtype):
        return float(ops.groupby("step")["elapse_us"].sum().median())
    sums = km.group_sums(ops["step"].tolist(), ops["elapse_us"].to_numpy(dtype=float).tolist())
    if sums is None:
        return float(ops.groupby("step")["elapse_us"].sum().median())
    return _median(np.array(list(sums.values()), dtype=float))


def rank_metrics(rank, policy, root, anatomy: pd.DataFrame | None = None,
                 kinds: pd.DataFrame | None = None, categories: pd.Series | None = None, *,
                 family: pd.Series | None = None, overlap=None, in_step: pd.DataFrame | None = None) -> dict:
    """Per-rank metrics: ``{(name, labels_tuple): (value, evidence, context)}``.

    ``labels_tuple`` is a sorted tuple of (label, value) pairs without the view label;
    ``anatomy`` is the rank's :func:`perfgate.metrics.steps.step_table` (computed if None);
    ``family`` the kernel family per row of the kernel table (:func:`kernels.family_of`,
    computed if None); ``overlap`` the rank's :func:`_overlap_steps` result (computed if None);
    ``in_step`` the step-assigned rows of the kernel table with that ``family`` column, as
    :func:`summarize_rank` builds it for the family view too (built here if None).
    Pure over ``rank``'s tables. Every (step × family / type / core / category) table is one
    bincount over integer codes into a numpy matrix (steps in step order), its medians taken
    over the step axis at once: no pandas frame per table, no median call per column.
    """
    out: dict = {}
    kt = rank.kernels
    kfile = _rel(kt.path, root)
    if in_step is not None:
        k = in_step
    else:
        fam_all = family if family is not None else km.family_of(kt.df["name"], policy.family_suffix)
        k = km.rows_where(kt.df.assign(family=fam_all), kt.df["step"].notna().to_numpy())
    step_cat = km.as_category(k["step"])
    present = km.present_values(step_cat)   # no blank step in ``k``
    steps = sorted(present, key=lambda s: (0, int(s)) if str(s).isdigit() else (1, s))
    nsteps = len(steps)
    out[("step.count", ())] = (float(nsteps), f"{kfile}: steps {', '.join(map(str, steps[:6]))}", {})
    out[("kernel.invalid_rows", ())] = (float(len(kt.invalid_rows)), f"{kfile} {_rows_text(kt.invalid_rows)}"
                                        if kt.invalid_rows else kfile, {})
    out[("kernel.unassigned_rows", ())] = (float(kt.unassigned_rows), f"{kfile} blank Step Id", {})
    # position of every row's step in ``steps`` (the matrices' row order)
    pos_of_code = km.positions_in(steps, step_cat.array.categories) if nsteps else np.zeros(0, np.int64)
    spos = pos_of_code[step_cat.array.codes].astype(np.int64) if nsteps else np.zeros(0, np.int64)
    dur = k["dur_ns"].to_numpy()
    dur_int = dur.dtype.kind in "iu"
    wide = _StepAxis(spos, nsteps, dur).wide

    def put_counts(name, key, label):
        mat, cols = wide(k[key])
        if mat is None:
            return
        srt = np.sort(mat, axis=0)
        med, lo, hi = srt[(len(srt) - 1) // 2], srt[0], srt[-1]
        evidence = _rows_by(k, key, kfile)
        for col, m, a, b in zip(cols.tolist(), med.tolist(), lo.tolist(), hi.tolist()):
            out[(name, ((label, str(col)),))] = (float(m), evidence.get(col, kfile),
                                                 {"per_step_min": int(a), "per_step_max": int(b)})

    put_counts("kernel.calls_per_step", "family", "family")
    if kt.type_available:
        put_counts("optype.calls_per_step", "op_type", "type")
    totals = np.bincount(spos, minlength=nsteps)
    out[("kernel.total_calls_per_step", ())] = (km.median_low(totals),
                                                f"{kfile} {len(k)} rows in {nsteps} step(s)", {})

    fam_dur, fam_cols = wide(k["family"], weighted=True)
    med_dur = np.median(fam_dur, axis=0) if fam_dur is not None else np.zeros(0)
    ranked = sorted(((str(f), float(v) / 1000.0) for f, v in zip(
        fam_cols.tolist() if fam_cols is not None else [], med_dur.tolist())), key=lambda fv: (-fv[1], fv[0]))
    out[("kernel.topn", ())] = (None, kfile, {"ranked": [f for f, _ in ranked],
                                              "sum_dur_us": [v for _, v in ranked]})
    for fam, v in ranked[: policy.top_n + policy.top_n_slack]:
        out[("kernel.time_us", (("family", fam),))] = (v, kfile, {})

    step_sum = np.bincount(spos, weights=dur.astype(np.float64), minlength=nsteps) if nsteps else np.zeros(0)
    if dur_int:
        step_sum = step_sum.astype(np.int64)
    den = np.where(step_sum == 0, np.nan, step_sum.astype(np.float64))[:, None]

    def put_shares(name, label, col, ev_of):
        mat, cols = wide(col, weighted=True)
        if mat is None:
            return
        sh = mat / den
        sh[np.isnan(sh)] = 0.0
        med = np.median(sh, axis=0)
        for i, (c, m) in enumerate(zip(cols.tolist(), med.tolist())):
            out[(name, ((label, str(c)),))] = (float(m), ev_of(c), {"samples": sh[:, i].tolist()})

    if kt.core_available:
        put_shares("share.core_type", "core_type", km.canonical_core(k), lambda c: f"{kfile} (Accelerator Core)")
    if kt.type_available and kt.core_available:
        cat = km.aligned(categories, k) if categories is not None else km.categorize(k, policy.categories)
        evidence = _rows_by_column(cat, k["row"], kfile) if isinstance(cat.dtype, pd.CategoricalDtype) \
            else _rows_by(k.assign(category=cat), "category", kfile)
        put_shares("share.category", "category", cat, lambda c: evidence.get(c, kfile))

    if not steps:
        return out
    sums, unions = _step_sums_and_unions(k, anatomy)
    out[("device.time_us", (("caliber", terms.SUM_DURATION),))] = (
        float(np.median(sums)), f"{kfile} Σ Duration(us)", dict(_samples(sums), caliber=terms.SUM_DURATION))
    out[("device.time_us", (("caliber", terms.BUSY_UNION),))] = (
        float(np.median(unions)), f"{kfile} merged intervals", dict(_samples(unions), caliber=terms.BUSY_UNION))

    _overlap_and_comm_metrics(rank, root, out, overlap)
    _anatomy_metrics(out, anatomy if anatomy is not None else step_table(rank, policy.findings), kfile)
    _comm_kind_metrics(out, k, kinds if kinds is not None else kind_table(k), steps, kfile)
    return out


@dataclass(frozen=True)
class _StepAxis:
    """The step axis of one rank's per-step matrices: ``spos`` (per row, its step's position in
    step order), ``nsteps``, ``dur`` (per row, Duration in ns)."""
    spos: np.ndarray
    nsteps: int
    dur: np.ndarray

    def wide(self, col: pd.Series, weighted: bool = False):
        """(steps x used values) matrix of counts or ΣDuration (ns) and the used values, as
        ``kernels.per_step_counts / per_step_sum_dur(...).reindex(index=steps, fill_value=0)``
        (None where that table is empty)."""
        spos, nsteps, dur = self.spos, self.nsteps, self.dur
        c = km.as_category(col)
        kc = c.array.codes.astype(np.int64)
        cats = c.array.categories
        keep = kc >= 0
        if not nsteps or not keep.any():
            return None, None
        allk = keep.all()
        sp, kcc = (spos, kc) if allk else (spos[keep], kc[keep])
        w = None if not weighted else (dur if allk else dur[keep]).astype(np.float64)
        nk = len(cats)
        flat = np.bincount(sp * nk + kcc, weights=w, minlength=nsteps * nk).reshape(nsteps, nk)
        used = np.bincount(kcc, minlength=nk) > 0
        flat = flat[:, used]
        if not weighted or dur.dtype.kind in "iu":
            flat = flat.astype(np.int64)
        return flat, cats[used]


def _anatomy_metrics(out: dict, anatomy: pd.DataFrame, kfile: str) -> None:
    """Into ``out``: the median over steps of each :data:`_ANATOMY` column of the rank's
    :func:`perfgate.metrics.steps.step_table` (steps where it is NaN left out)."""
    if not len(anatomy):
        return
    ev = f"{kfile} rows {int(anatomy['first_row'].min())}-{int(anatomy['last_row'].max())}"
    for name, col in _ANATOMY.items():
        v = anatomy[col].to_numpy(dtype=float)
        v = v[~np.isnan(v)]
        if len(v):
            out[(name, ())] = (float(np.median(v)), ev, _samples(v))


def _comm_kind_metrics(out: dict, k: pd.DataFrame, kinds: pd.DataFrame, steps: list, kfile: str) -> None:
    """Into ``out``: per communication kind of :func:`perfgate.metrics.comm.kind_table`
    ``kinds``, the median over ``steps`` of its calls, ΣDuration and exposed time (0 in a step
    without the kind)."""
    nsteps = len(steps)
    if len(kinds):
        kind_rows = _comm_rows_by_kind(k)
        step_pos = {str(s_): i for i, s_ in enumerate(steps)}
        kcol = kinds["kind"].to_numpy(dtype=object)
        kpos = np.array([step_pos.get(str(s_), -1) for s_ in kinds["step"].tolist()], dtype=np.int64)
        vals = {c: kinds[c].to_numpy() for c in ("calls", "sum_us", "exposed_us")}
        for kind in sorted(set(kcol.tolist())):  # kinds in sorted order, as groupby gives them
            m = (kcol == kind) & (kpos >= 0)
            per = {}
            for c, v in vals.items():  # the kind's value per step, 0 where the step has none
                a = np.zeros(nsteps, dtype=v.dtype)
                a[kpos[m]] = v[m]
                per[c] = a
            ev = f"{kfile} {_rows_text(kind_rows.get(kind, []))}"
            lab = (("kind", str(kind)),)
            out[("comm.calls_per_step", lab)] = (km.median_low(per["calls"]), ev, {})
            out[("comm.time_us", lab)] = (_median(per["sum_us"]), ev, {})
            out[("comm.exposed_us", lab)] = (_median(per["exposed_us"]), ev, {})


def _comm_rows_by_kind(k: pd.DataFrame) -> dict:
    """{communication kind: data row numbers of its communication rows, in table order}: the
    kind derived once per distinct kernel name (:func:`perfgate.metrics.comm.kind_of`; a row
    without a name is ``other``), the rows grouped by one stable sort, not one scan per kind."""
    comm = np.flatnonzero(k["is_comm"].to_numpy())
    if not len(comm):
        return {}
    names = km.as_category(k["name"])
    name_kind = np.array([comm_kind(str(n)) for n in names.cat.categories.tolist()] + [comm_kind("nan")],
                         dtype=object)
    kinds = name_kind[names.cat.codes.to_numpy()[comm]]  # code -1 (missing) -> the trailing entry
    uniq, inv = np.unique(kinds.astype(str), return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    rows = k["row"].to_numpy()[comm][order]
    return {str(u): rows[bounds[i]:bounds[i + 1]].tolist() for i, u in enumerate(uniq.tolist())}


def _step_sums_and_unions(k: pd.DataFrame, anatomy: pd.DataFrame | None = None) -> tuple[list, list]:
    """Per step of the step-assigned kernel rows ``k``, in order of the step's first row:
    ΣDuration and busy union (us). One pass over the step codes (integer sums per code,
    :func:`perfgate.metrics.intervals.segmented_union_ns`), not one merge per step.

    ``anatomy``: the rank's :func:`perfgate.metrics.steps.step_table` of the same rows, whose
    ``kernel_sum_us`` and ``busy_us`` are these figures (the same integer-ns sums, divided once):
    they are taken from it, ordered by ``first_row``, when ``k``'s row numbers rise with its
    positions (then the smallest row of a step is its first row). That saves a second sort of
    every row by (step, start) (~0.05 s per 1M rows)."""
    if anatomy is not None and len(anatomy) and len(k):
        row = k["row"].to_numpy()
        if len(row) < 2 or bool((row[1:] > row[:-1]).all()):
            order = np.argsort(anatomy["first_row"].to_numpy(), kind="stable")
            return ((anatomy["kernel_sum_us"].to_numpy()[order]).tolist(),
                    (anatomy["busy_us"].to_numpy()[order]).tolist())
    codes = km.as_category(k["step"]).cat.codes.to_numpy().astype(np.int64)
    ok = np.flatnonzero(codes >= 0)
    if not len(ok):
        return [], []
    c = codes[ok]
    _, first = np.unique(c, return_index=True)
    present = c[np.sort(first)]  # codes in order of their first row
    ncodes = int(c.max()) + 1
    tot = np.zeros(ncodes, dtype=np.int64)  # durations are integer ns (ingest): exact sums
    np.add.at(tot, c, k["dur_ns"].to_numpy()[ok].astype(np.int64))
    sums = (tot[present] / 1000.0).tolist()
    u = segmented_union_ns(c, k["start_ns"].to_numpy()[ok], k["end_ns"].to_numpy()[ok], ncodes)
    return sums, (u[present] / 1000.0).tolist()


@dataclass(frozen=True)
class _MetricRanks:
    """One metric's figures over the ranks its views are taken over (:func:`_views`): ``ranks``
    (ids ascending), ``values`` (one per rank: a tuple of the per-rank values, or a float array
    where absent ranks were filled), ``shown`` (the per-rank values of the first 8 ranks, as the
    ranks hold them, for the rank-skew evidence), ``r0_samples`` (the lowest rank's per-step
    samples, None when it lacks the metric) and ``all_samples`` (every rank's samples in rank
    order when every rank holds the metric, else None)."""
    name: str
    labels: tuple
    ranks: list
    values: object
    shown: tuple
    r0_samples: list | None
    all_samples: tuple | None


class _RankFill:
    """The ranks of one :func:`_views` call and how a metric some ranks lack is filled there.

    ``kernel.time_us`` is recorded per rank for its Top-N + slack families only: on a rank where a
    family ranks lower its value is the family's true ΣDuration in that rank's ``kernel.topn``
    ranking (0 only where the family does not run), over the ranks holding a ranking; never a 0
    that halves the p50 and makes a 200 % rank skew. Other absent-is-zero metrics count 0 on the
    ranks holding the kernel table (``kernel_ranks``, None = every rank). Fills are scattered into
    float arrays over the ranks (one numpy step per metric, not one dict step per rank)."""

    def __init__(self, per_rank: dict, ranks: list, kernel_ranks):
        self.per_rank, self.ranks, self.n = per_rank, ranks, len(ranks)
        holders = set(ranks if kernel_ranks is None else kernel_ranks)
        self.holders = np.array([r in holders for r in ranks], dtype=bool)
        self.n_holders = int(self.holders.sum())
        self.rank_ids = np.array(ranks)
        self._ranked = None

    def _rankings(self):
        """(family -> column, ΣDuration array ranks × families (0 where unranked), ranks holding a
        ranking, {rank: {family: ΣDuration}}) of the ranks' kernel.topn rankings, built once."""
        if self._ranked is None:
            ranked = {r: dict(zip(m[("kernel.topn", ())][2]["ranked"], m[("kernel.topn", ())][2]["sum_dur_us"]))
                      for r, m in self.per_rank.items() if ("kernel.topn", ()) in m}
            col = {f: j for j, f in enumerate(sorted({f for got in ranked.values() for f in got}))}
            mat = np.zeros((self.n, len(col)))
            for i, r in enumerate(self.ranks):
                got = ranked.get(r)
                if got:
                    mat[i, [col[f] for f in got]] = np.array(list(got.values()), dtype=float)
            self._ranked = (col, mat, np.array([r in ranked for r in self.ranks], dtype=bool), ranked)
        return self._ranked

    def ranked_at(self, r) -> bool:
        """Whether the kernel.topn rankings were read (a partial kernel.time_us) and rank ``r`` has one."""
        return self._ranked is not None and bool(self._ranked[3]) and r in self._ranked[3]

    def metric(self, key: tuple, have: list) -> _MetricRanks | None:
        """The :class:`_MetricRanks` of metric ``key`` from ``have`` ([(rank index, value,
        samples)] of the ranks holding it), None when no rank is left."""
        name, labels = key
        idx, kv, ks = zip(*have)
        complete = len(have) == self.n
        r0s = ks[0] if idx[0] == 0 else None
        alls = ks if complete else None
        if complete:
            return _MetricRanks(name, labels, self.ranks, kv, kv[:8], r0s, alls)
        at = np.array(idx, dtype=np.intp)
        if name == "kernel.time_us":
            col, mat, mask, ranked = self._rankings()
            fam = dict(labels).get("family")
            full = mat[:, col[fam]].copy() if fam in col else np.zeros(self.n)
            shown = lambda r: ranked[r].get(fam, 0.0)  # noqa: E731
        elif registry.get(name).absent_is_zero and self.holders[at].sum() < self.n_holders:
            full = np.zeros(self.n)
            mask = self.holders.copy()
            mask[at] = True
            shown = lambda r: 0.0  # noqa: E731
        else:
            return _MetricRanks(name, labels, self.rank_ids[at].tolist(), kv, kv[:8], r0s, alls)
        full[at] = np.array(kv, dtype=float)
        sel = np.flatnonzero(mask)
        if not len(sel):
            return None
        first = sel[:8].tolist()
        k = bisect.bisect_right(idx, first[-1])   # the held ranks up to the 8th of sel
        held = dict(zip(idx[:k], kv[:k]))
        shown_v = tuple(held[i] if i in held else shown(self.ranks[i]) for i in first)
        return _MetricRanks(name, labels, self.rank_ids[sel].tolist(), full[sel], shown_v, r0s, alls)


def _views(per_rank: dict[int, dict], policy, kernel_ranks=None) -> dict[str, MetricValue]:
    """Cross-rank views of every metric. A metric is computed over the ranks that hold its
    table: absent-is-zero metrics (kernel table counts) are filled with 0 only on ranks in
    ``kernel_ranks`` (None = every rank); when fewer ranks than the capture's contribute, the
    views' context names them (``over_ranks``), so a comparison can tell coverage apart.

    Cost: the per-rank dicts are transposed in one pass over their items (ranks in id order);
    the reductions over ranks (median, max, min, mean; the per-step p50 / max samples) then run
    as one numpy call per group of metrics of one length (:func:`_rank_stats`,
    :func:`_sample_views`), not one per metric."""
    ranks = sorted(per_rank)
    r0 = ranks[0]
    by_key: dict = {}   # (name, labels) -> [(index of the rank in ranks, value, samples)] in rank order
    for i, r in enumerate(ranks):
        for key, ent in per_rank[r].items():
            got = by_key.get(key)
            if got is None:
                by_key[key] = got = []
            got.append((i, ent[0], ent[2].get("samples")))
    fill = _RankFill(per_rank, ranks, kernel_ranks)
    rows: list = []   # per metric in key order: a _MetricRanks, or the key of kernel.topn
    for key in sorted(by_key):
        if key[0] == "kernel.topn":
            rows.append(key)
            continue
        m = fill.metric(key, by_key[key])
        if m is not None:
            rows.append(m)
    metrics = [m for m in rows if isinstance(m, _MetricRanks)]
    stats = iter(zip(_rank_stats(metrics), _sample_views(metrics)))
    out: dict[str, MetricValue] = {}
    for m in rows:
        if not isinstance(m, _MetricRanks):
            held = {r: x for r, x in per_rank.items() if m in x}
            out.update(_topn_views(held, policy, min(held)))
            continue
        ev0 = per_rank[r0].get((m.name, m.labels)) or (
            (None, per_rank[r0][("kernel.topn", ())][1], {}) if m.name == "kernel.time_us" and fill.ranked_at(r0)
            else (None, "absent on this rank", {}))
        _metric_views(out, m, ev0, next(stats), r0, len(ranks))
    return out


def _rank_stats(metrics: list) -> list:
    """(median, max, index of the max, min, index of the min, mean) of each metric's values over
    its ranks (:class:`_MetricRanks`), as Python floats / ints: metrics over the same number of
    ranks are stacked into one 2-D array reduced along its rows, which gives each row exactly
    what ``np.median`` / ``max`` / ``mean`` of that row alone gives."""
    out: list = [None] * len(metrics)
    by_n: dict = {}
    for i, m in enumerate(metrics):
        by_n.setdefault(len(m.values), []).append(i)
    for idx in by_n.values():
        arr = np.array([metrics[i].values for i in idx], dtype=float)
        cols = zip(np.median(arr, axis=1).tolist(), arr.max(axis=1).tolist(), arr.argmax(axis=1).tolist(),
                   arr.min(axis=1).tolist(), arr.argmin(axis=1).tolist(), arr.mean(axis=1).tolist())
        for i, c in zip(idx, cols):
            out[i] = c
    return out


def _sample_views(metrics: list) -> list:
    """Per metric, the per-step samples of its p50 and max views: the median / max over ranks
    step by step (as :func:`_view_samples`), only when every rank holds the metric with the same
    nonzero number of samples, else (None, None). Metrics of one step count are stacked into one
    (metrics, ranks, steps) array reduced along the ranks."""
    out: list = [(None, None)] * len(metrics)
    by_steps: dict = {}
    for i, m in enumerate(metrics):
        vecs = m.all_samples
        if vecs is not None and None not in vecs and len(lens := set(map(len, vecs))) == 1 and min(lens):
            by_steps.setdefault(min(lens), []).append(i)
    for idx in by_steps.values():
        arr = np.array([metrics[i].all_samples for i in idx], dtype=float)
        for i, p50, mx in zip(idx, np.median(arr, axis=1).tolist(), arr.max(axis=1).tolist()):
            out[i] = (p50, mx)
    return out


def _metric_views(out: dict, m: _MetricRanks, ev0: tuple, stats: tuple, r0: int, n_ranks: int) -> None:
    """Put one metric's rank0 / p50 / max views and its rank skew (:func:`_views`) into ``out``:
    ``ev0`` is the lowest rank's (value, evidence, context) entry, ``stats`` the metric's
    (:func:`_rank_stats`, :func:`_sample_views`) pair, ``r0`` the lowest rank of the views and
    ``n_ranks`` their number of ranks."""
    (med, mx, imax, mn, imin, mean), (s50, smax) = stats
    d = registry.get(m.name)
    name, labels_d, n = m.name, dict(m.labels), len(m.values)
    partial = {"over_ranks": list(m.ranks)} if n < n_ranks else {}
    caliber = d.caliber or labels_d.get("caliber")
    ev0 = (ev0[0], ev0[1], {k: v for k, v in ev0[2].items() if k != "samples"})
    views = {
        terms.VIEW_RANK0: (m.shown[0] if m.ranks[0] == r0 else None, f"rank {r0}: {ev0[1]}", dict(ev0[2], rank=r0),
                           m.r0_samples),
        terms.VIEW_P50: (med, f"median of {n} rank(s)", {"ranks": n, **partial}, s50),
        terms.VIEW_MAX: (mx, f"max over {n} rank(s)", {"rank": int(m.ranks[imax]), **partial}, smax),
    }
    for view, (val, ev, ctx, samples) in views.items():
        if val is None:
            continue
        key = metric_key(name, **labels_d, view=view)
        out[key] = MetricValue(key=key, name=name, labels=dict(labels_d, view=view),
                               value=float(val), unit=d.unit, caliber=caliber, tier=d.tier,
                               evidence=ev, context=ctx, samples=samples)
    if n >= 2 and mean > 0 and name != "step.count":
        sd = registry.get("rank.skew_ratio")
        slabels = dict(labels_d, metric=name)
        key = metric_key("rank.skew_ratio", **slabels)
        out[key] = MetricValue(
            key=key, name="rank.skew_ratio", labels=slabels, value=(mx - mn) / mean,
            unit=sd.unit, caliber=caliber, tier=sd.tier,
            evidence=f"(max − min) / mean of {n} rank(s): " + ", ".join(
                f"rank {r} {_skew_value(v, d.unit)}" for r, v in zip(m.ranks[:8], m.shown)),
            context={"min_rank": int(m.ranks[imin]), "max_rank": int(m.ranks[imax])})


def _skew_value(v: float, unit: str) -> str:
    """One rank's value in a rank-skew evidence, in its metric's unit as the reports show it: a
    ratio as percent (``45.21%``, was ``0.452131``, beside a skew shown in %), else ``{v:g} unit``."""
    return f"{v * 100:.4g}%" if unit == "ratio" else f"{v:g} {unit}"


def _topn_views(per_rank, policy, r0) -> dict[str, MetricValue]:
    d = registry.get("kernel.topn")
    depth = policy.top_n + policy.top_n_slack
    r0ctx = per_rank[r0][("kernel.topn", ())][2]
    # ranks × families array of ΣDuration (0 where a rank does not rank the family): one median
    # over its columns, not one np.median per family
    ctxs = [m[("kernel.topn", ())][2] for m in per_rank.values()]
    families = sorted(set().union(*[c["ranked"] for c in ctxs]))
    col = {f: j for j, f in enumerate(families)}
    mat = np.zeros((len(ctxs), len(families)))
    for i, ctx in enumerate(ctxs):
        got = dict(zip(ctx["ranked"], ctx["sum_dur_us"]))
        mat[i, [col[f] for f in got]] = np.array(list(got.values()), dtype=float)
    p50 = sorted(zip(np.median(mat, axis=0).tolist(), families), key=lambda x: (-x[0], x[1]))
    rankings = {terms.VIEW_RANK0: (r0ctx["ranked"], r0ctx["sum_dur_us"], f"rank {r0}"),
                terms.VIEW_P50: ([f for _, f in p50], [v for v, _ in p50],
                                 f"median ΣDuration over {len(per_rank)} rank(s)")}
    out = {}
    for view, (ranked, durs, ev) in rankings.items():
        key = metric_key("kernel.topn", view=view)
        out[key] = MetricValue(
            key=key, name="kernel.topn", labels={"view": view}, value=sorted(ranked[: policy.top_n]),
            unit="set", caliber=d.caliber, tier=d.tier, evidence=ev,
            context={"ranked": list(ranked[:depth]), "sum_dur_us": [round(x, 3) for x in durs[:depth]],
                     "n": policy.top_n, "slack": policy.top_n_slack})
    return out


def _step_time(rank, st: pd.DataFrame | None, anatomy: pd.DataFrame) -> dict:
    """{(rank, step): gated step time (us)}: Computing + Communication(Not Overlapped) + Free per
    step of ``st`` (:func:`_overlap_steps`), else the device wall of ``anatomy`` (step_table).
    Column arithmetic, not one row Series per step."""
    if st is not None:
        t = (st["computing_us"].to_numpy(dtype=float) + st["comm_not_overlapped_us"].to_numpy(dtype=float)
             + st["free_us"].to_numpy(dtype=float))
        return {(rank.rank, str(s_)): v for s_, v in zip(st.index.tolist(), t.tolist())}
    return {(rank.rank, s_): float(v) for s_, v in zip(anatomy["step"].tolist(), anatomy["wall_us"].tolist())}


GC_PAUSE_ROWS = 200_000   # ranks up to this many kernel rows are summarized with the cyclic GC paused


@contextlib.contextmanager
def _gc_paused(rows: int):
    """Pause Python's cyclic garbage collector while one small rank is summarized (at most
    :data:`GC_PAUSE_ROWS` kernel rows), then restore it. The ~100 small pandas / numpy calls
    of a rank allocate thousands of short-lived objects, and every few hundred allocations the
    collector walks the young objects -- and periodically every live object, including the
    summaries of the ranks done before (a 1,024-rank capture holds them all): ~5 ms of the
    ~55 ms CPU per 1,000-row rank (64 ranks, gc on vs off). The work creates no reference
    cycles worth collecting mid-rank (its frames are freed by reference counting), and the
    garbage of a small rank is bounded; large ranks keep the collector running (their memory
    matters more). Nothing changes when the collector is already off (another rank in another
    thread paused it: that rank's owner turns it back on)."""
    if rows > GC_PAUSE_ROWS or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


GC_PAUSE_BYTES = 64 << 20   # kernel_details.csv + trace_view.json up to this size: a small rank


def small_rank_gc_paused(loc):
    """:func:`_gc_paused` around reading *and* summarizing one rank (``loc``: its
    :class:`perfgate.ingest.RankLocation`) when its ``kernel_details.csv`` and
    ``trace_view.json`` together hold at most :data:`GC_PAUSE_BYTES` bytes (~200k kernel rows):
    reading makes as many short-lived objects as summarizing (categoricals, Arrow tables, small
    frames), and with 1,024 ranks the collections they trigger walk the finished ranks'
    summaries too. A larger rank, or one without a kernel_details.csv (msprof op_summary
    slices, the DB export, a partial rank), keeps the collector running while it is read
    (:func:`summarize_rank` still pauses it by row count)."""
    try:
        size = (loc.output_dir / "kernel_details.csv").stat().st_size
        try:
            size += (loc.output_dir / "trace_view.json").stat().st_size
        except OSError:   # no timeline (or an unreadable one: its reader says so)
            pass
    except (OSError, AttributeError, TypeError):
        size = None
    return _gc_paused(0 if size is not None and size <= GC_PAUSE_BYTES else GC_PAUSE_ROWS + 1)


@contextlib.contextmanager
def finished_ranks_out_of_gc():
    """Keep the summaries of finished ranks out of the cyclic garbage collector's walks while
    many ranks are summarized in this process. Yields ``keep``: called after each rank, it
    collects the youngest generation (that rank's own cyclic garbage) and moves every object
    the collector tracks into its permanent generation (``gc.freeze``); leaving the block puts
    them back (``gc.unfreeze``: the oldest generation), so nothing is lost to later collections.

    Why: a summary holds ~1,000 objects the collector tracks (its metric tuples hold a context
    dict, so they are never untracked), and every full collection walks all of them: with
    1,024 ranks, ranks late in the run cost ~10 ms more than the first ones (64 -> 1,024 ranks
    50 -> 56 ms CPU per rank before). Nothing is done (``keep`` does nothing) when the collector
    is off or objects are already frozen (the caller's own ``gc.freeze``, e.g. before forking
    workers: unfreezing would undo it)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield lambda: None
        return
    used = []

    def keep():
        if gc.isenabled():
            gc.collect(0)
            gc.freeze()
            used[:] = [True]
    try:
        yield keep
    finally:
        if used:
            gc.unfreeze()


def summarize_rank(rank, policy, root, timeline_free=None) -> RankSummary:
    """Everything the fingerprint needs from one rank, as a picklable :class:`RankSummary`, so ranks
    can be processed in parallel (process pool or dask) and merged by
    :func:`fingerprint_from_summaries`. Pure over ``rank``'s tables. A partial rank (no kernel
    table) gives its step and communication metrics only (:func:`_partial_summary`). A small
    rank is summarized with the cyclic garbage collector paused (:func:`_gc_paused`).
    ``timeline_free``: :func:`timeline_free_part` of this rank's kernel table, made earlier
    (while its timeline was being scanned): the same summary, and any error it met is raised
    where this function would have met it."""
    if rank.kernels is None:
        return _partial_summary(rank, policy, root)
    with _gc_paused(len(rank.kernels.df)):
        return _summarize_kernel_rank(rank, policy, root, timeline_free)


class _TimelineFree(dict):
    """:func:`timeline_free_part`'s result: ``kernels`` (the table it was made from), ``cat``,
    ``segments`` and ``view``, or ``error`` with the ``stage`` that raised it (the stages after
    it are absent)."""

    def settle(self, stage: str) -> None:
        """Wait until ``stage`` is computed (nothing to wait for here: the stages are filled
        before the summary reads them)."""


#: a kernel table of at least this many rows has its structure stage computed in a thread
#: beside the rest of its rank's load and summary (:func:`structure_beside`); below it a thread
#: saves less than it costs (GIL hand-overs, ~1 ms)
STRUCTURE_BESIDE_ROWS = 100_000


class _StructureBeside(_TimelineFree):
    """``cat`` and ``segments`` of one rank's kernel table, computed in a thread of this process
    (:func:`structure_beside`); the summary waits for a stage it needs (:meth:`settle`). An
    error is kept with its stage, as :func:`timeline_free_part` keeps it."""

    STAGES = ("cat", "segments")

    def __init__(self, kernels, rank_id: int, policy, root):
        import threading
        super().__init__(kernels=kernels)
        self._cond = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(kernels, rank_id, policy, root),
                                        name=f"perfgate-structure-rank{rank_id}", daemon=True)
        self._thread.start()

    def _put(self, **kw) -> None:
        with self._cond:
            self.update(kw)
            self._cond.notify_all()

    def _run(self, kernels, rank_id, policy, root) -> None:
        stage = "cat"
        try:
            cat = (km.categorize(kernels.df, policy.categories)
                   if kernels.type_available and kernels.core_available else None)
            self._put(cat=cat)
            stage = "segments"
            self._put(segments=_segment_summary_of(kernels, rank_id, policy, root, cat))
        except Exception as e:  # noqa: BLE001 - re-raised by summarize_rank where it would have occurred
            self._put(error=e, stage=stage)
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def settle(self, stage: str) -> None:
        if stage not in self.STAGES:
            return
        with self._cond:
            self._cond.wait_for(lambda: self._done or stage in self or self.get("stage") == stage)

    def join(self) -> None:
        """Wait for the thread to end (a rank refused while it ran: nothing is left running)."""
        self._thread.join()


def structure_beside(kernels, rank_id: int, policy, root) -> _TimelineFree | None:
    """Start computing the row categories and the structure stage (:func:`_segment_summary_of`,
    the largest single stage of a summary) of a kernel table of at least
    :data:`STRUCTURE_BESIDE_ROWS` rows in a thread, while the calling thread reads the rank's
    other files and computes the rest of :func:`summarize_rank` (pass the result as its
    ``timeline_free``): the same summary and the same first error, on two CPUs instead of one
    (numpy releases the GIL in its array loops). None for a smaller table. The thread only reads
    the kernel table; call ``.join()`` on the result if the rank is refused before its summary.

    Measured (1M-row ranks, 2-core VM, paired): docs/performance.md "Structure stage beside the rest"."""
    if len(kernels.df) < STRUCTURE_BESIDE_ROWS:
        return None
    return _StructureBeside(kernels, rank_id, policy, root)


def timeline_free_part(kernels, rank_id: int, policy, root) -> _TimelineFree:
    """The parts of :func:`summarize_rank` that read only the kernel table (no timeline, no
    step_trace_time.csv, no communication.json): the category of every row
    (:func:`perfgate.metrics.kernels.categorize`) and the structure metrics and tables
    (:func:`_segment_summary_of`), the kernel families and the family view (:func:`_family_view`).
    Computed while another process scans the rank's timeline
    (:func:`perfgate.app.run._load_with_trace_ahead`); never raises (an error is kept)."""
    out = _TimelineFree(kernels=kernels)
    try:
        out["cat"] = (km.categorize(kernels.df, policy.categories)
                      if kernels.type_available and kernels.core_available else None)
    except Exception as e:  # noqa: BLE001 - re-raised by summarize_rank where it would have occurred
        out.update(error=e, stage="cat")
        return out
    for stage, make in (("segments", lambda: _segment_summary_of(kernels, rank_id, policy, root, out["cat"])),
                        ("view", lambda: _family_view(kernels, policy, root, out["cat"]))):
        try:
            out[stage] = make()
        except Exception as e:  # noqa: BLE001 - as above
            out.update(error=e, stage=stage)
            break
    return out


def _take(pre, rank, stage: str, compute):
    """The ``stage`` value of a :func:`timeline_free_part` made from this rank's kernel table
    (re-raising the error it kept for that stage), else ``compute()``."""
    if pre is not None and pre.get("kernels") is rank.kernels:
        pre.settle(stage)
        if pre.get("stage") == stage:
            raise pre["error"]
        if stage in pre:
            return pre[stage]
    return compute()


def _summarize_kernel_rank(rank, policy, root, pre=None) -> RankSummary:
    th = policy.findings
    anatomy = step_table(rank, th)
    st_sums = step_trace_sums(rank.step_trace) if rank.step_trace is not None else None
    checks = list(run_self_checks(rank, policy, st_sums))
    if rank.comm is not None:
        cfile = _rel(rank.comm_path, root)
        checks.extend(op_identity_checks(rank.comm, rank.rank, cfile,
                                         tol_us=policy.self_checks["comm_op_identity_abs_us"]))
        checks.extend(ops_vs_kernel_checks(rank.comm, rank.kernels, rank.rank, cfile, _rel(rank.kernels.path, root),
                                           tol=(policy.self_checks["abs_us_per_row"],
                                                policy.self_checks["abs_us_floor"])))
    overlap = _overlap_steps(rank, st_sums)
    step_time = _step_time(rank, overlap[0], anatomy)
    kinds = kind_table(rank.kernels.df)
    warnings = [f"rank {rank.rank}: {w}" for w in rank.warnings]
    warnings += [f"rank {rank.rank}: {m} not present; metrics from it are not available" for m in rank.missing]
    k = rank.kernels.df
    cat = None
    if rank.kernels.type_available and rank.kernels.core_available:
        cat = _take(pre, rank, "cat", lambda: km.categorize(k, policy.categories))
        unknown = np.flatnonzero(km.equals_value(cat, km.UNKNOWN))  # positions, no copy of the frame
        if len(unknown):
            cores = sorted(map(str, k["core_type"].iloc[unknown].dropna().unique()))[:5]
            warnings.append(
                f"rank {rank.rank}: {len(unknown)} kernel row(s) match no category rule and are in the "
                f"'unknown' bucket (core types {cores or ['N/A']}, e.g. {k['name'].iloc[unknown[0]]!r}, "
                f"row {int(k['row'].iloc[unknown[0]])}); add a rule to the policy")
    def segments():
        return _take(pre, rank, "segments", lambda: _segment_summary_of(rank.kernels, rank.rank, policy, root, cat))
    # the family view before the structure stage, which may still be running beside
    # (structure_beside); an error is still the one a serial run meets first (structure's)
    try:
        family, kk, steps, (op_metrics, op_detail) = _take(pre, rank, "view",
                                                           lambda: _family_view(rank.kernels, policy, root, cat))
    except Exception:
        segments()
        raise
    seg_metrics, seg_detail = segments()
    metrics = rank_metrics(rank, policy, root, anatomy, kinds, cat, family=family, overlap=overlap, in_step=kk)
    metrics.update(op_metrics)
    metrics.update(seg_metrics)
    return RankSummary(**{
        "rank": rank.rank,
        "metrics": metrics,
        "segments": seg_detail,
        "operators": dict(op_detail, rank=rank.rank),
        "anatomy": anatomy,
        "checks": checks,
        "findings": confirm_recompile(label_steps(anatomy, th, _rel(rank.kernels.path, root)), k)
        + _bubble_note_rank(rank)
        + _lost_task_findings(rank, root),
        "step_time": step_time,
        "kinds": _with_rank(kinds, rank.rank),
        "warnings": warnings,
        "info": dict(rank.location.info, kernel_span_ns=_kernel_span(k)),
        "has_comm": rank.comm is not None,
        "has_trace": rank.trace is not None and rank.trace.has_overlap,
        "has_step_trace": rank.step_trace is not None,
        "type_available": rank.kernels.type_available,
        "core_available": rank.kernels.core_available,
        "variant": rank.kernels.variant,
        "kernel_file": _rel(rank.kernels.path, root),
        "kernel_columns": {c: rank.kernels.columns.get(c) for c in ("op_type", "core_type")},
        "steps": steps,
        "rank_dir": _rel(rank.location.rank_dir, root),
        "output_dir": _rel(rank.location.output_dir, root),
        "rank_source": rank.location.rank_source,
        "tables": list(rank.tables),
        "meta": _job_meta(rank),
    })


def _with_rank(kinds: pd.DataFrame, rank_id: int) -> pd.DataFrame:
    """``kinds`` with a first column ``rank`` (int64), as
    ``kinds.assign(rank=rank_id)[["rank", *kinds.columns]]`` builds it, by one insert into a
    shallow copy (~0.08 ms instead of ~0.6 ms per rank)."""
    out = kinds.copy(deep=False)
    out.insert(0, "rank", rank_id)
    return out


LOST_TASKS = "DEVICE_TASKS_LOST"


def _lost_task_findings(rank, root) -> list:
    """DEVICE_TASKS_LOST per step whose host launches have no device task
    (:func:`perfgate.ingest.validity.lost_launches`): the step is incomplete; such a capture is
    refused as a baseline and its count metrics are not compared."""
    out = []
    for step, d in sorted(getattr(rank, "lost_launches", {}).items()):
        n = d["async_npu"] + d["HostToDevice"]
        out.append(Finding(
            LOST_TASKS, "warn", rank.rank, step,
            f"rank {rank.rank} step {step}: {n} host launch(es) never reached the device ({d['async_npu']} "
            f"async_npu + {d['HostToDevice']} HostToDevice flow starts without an end in "
            f"{_rel(rank.trace_path, root)}, first at {d['first_ts_ns'] / 1000:.3f} us): device tasks were lost "
            f"(Ascend/pytorch#167), the step is incomplete and its counts are not compared",
            _rel(rank.trace_path, root), float(n), 0.0))
    return out


def _job_meta(rank) -> dict:
    """What this rank's folder records about the job: its size (``world_size``, ``source``), and
    its pipeline stage (``pipeline``, :func:`perfgate.metrics.stages.pipeline_position`, or None)."""
    if rank.location.layout != "torch_npu":
        return {"world_size": None, "source": None, "pipeline": None}
    return dict(_job_size(rank), pipeline=stages.pipeline_position(rank.location.rank_dir))


def _job_size(rank) -> dict:
    """What this rank's folder records about the job's size: ``profiler_metadata.json``
    ``distributed_args.world_size`` else its communication groups (``parallel_group_info``)."""
    from perfgate.ingest.discover import group_world_size, read_profiler_metadata
    try:
        ws = read_profiler_metadata(rank.location.rank_dir)["world_size"]
    except InvalidCaptureError:
        ws = None
    if ws is not None:
        return {"world_size": ws, "source": "profiler_metadata.json distributed_args.world_size"}
    ws = group_world_size(rank.location.rank_dir)
    if ws is not None:
        return {"world_size": ws, "source": "profiler_metadata.json parallel_group_info (communication groups)"}
    return {"world_size": None, "source": None}


def _partial_summary(rank, policy, root) -> RankSummary:
    """Summary of a partial rank: Overlap Analysis step metrics from step_trace_time.csv and the
    communication.json metrics; no kernel, anatomy, operator or structure figures."""
    out: dict = {}
    checks = []
    step_time = {}
    steps = []
    time = _overlap_and_comm_metrics(rank, root, out)
    if time is not None:
        for s_, v in time.items():
            step_time[(rank.rank, str(s_))] = float(v)
        steps = sorted(map(str, time.index))
    if rank.comm is not None and len(rank.comm.ops):
        cfile = _rel(rank.comm_path, root)
        checks.extend(op_identity_checks(rank.comm, rank.rank, cfile,
                                         tol_us=policy.self_checks["comm_op_identity_abs_us"]))
        if rank.step_trace is not None:
            checks.extend(ops_vs_step_trace_checks(rank.comm, rank.step_trace, rank.rank, cfile,
                                                   _rel(rank.step_trace_path, root),
                                                   (policy.self_checks["abs_us_per_row"],
                                                    policy.self_checks["abs_us_floor"])))
        if not steps:
            steps = sorted(map(str, pd.unique(rank.comm.ops["step"].dropna())))
    warnings = [f"rank {rank.rank}: {w}" for w in rank.warnings]
    return RankSummary(**{
        "rank": rank.rank, "metrics": out, "segments": {}, "operators": {}, "anatomy": pd.DataFrame(),
        "checks": checks, "findings": [], "step_time": step_time,
        "kinds": pd.DataFrame(), "warnings": warnings, "info": dict(rank.location.info),
        "has_comm": rank.comm is not None, "has_trace": False, "has_step_trace": rank.step_trace is not None,
        "type_available": None, "core_available": None, "variant": None, "steps": steps,
        "rank_dir": _rel(rank.location.rank_dir, root), "output_dir": _rel(rank.location.output_dir, root),
        "rank_source": rank.location.rank_source, "tables": list(rank.tables), "meta": _job_meta(rank),
        "partial": True,
    })


def _step_sum_us(k: pd.DataFrame) -> pd.Series:
    """ΣDuration per step (us; index: the step text, name ``step``; blank steps left out), as
    ``k.groupby("step", observed=True)["dur_ns"].sum() / 1000`` with its index as str gives it:
    one bincount over the step codes when the durations are integer ns whose total is exact in
    float64 (the kernel table's), else that group-by."""
    step, dur = k["step"], k["dur_ns"].to_numpy()
    if isinstance(step.dtype, pd.CategoricalDtype) and dur.dtype.kind in "iu" and len(dur) \
            and int(np.abs(dur).sum()) < 2 ** 53:
        codes = step.array.codes
        ok = codes >= 0
        cats = step.array.categories
        n = len(cats)
        tot = np.bincount(codes[ok], weights=dur[ok], minlength=n).astype(np.int64)
        used = np.bincount(codes[ok], minlength=n) > 0
        idx = cats[used].astype(str)
        idx.name = "step"
        return pd.Series(tot[used] / 1000.0, index=idx, name="dur_ns")
    out = k.groupby("step", observed=True)["dur_ns"].sum() / 1000.0  # blank steps dropped by groupby
    out.index = out.index.astype(str)
    return out


def _family_view(kernels, policy, root, cat):
    """``(family, in-step rows with their family, steps, (metrics, detail))``: every row's
    kernel family, the rows inside a step (one frame for :func:`rank_metrics` and the family
    view) and the rank's family view (:func:`perfgate.metrics.operators.rank_family_view`)."""
    k = kernels.df
    family = km.family_of(k["name"], policy.family_suffix)
    in_step = k["step"].notna().to_numpy()
    kk = km.rows_where(k.assign(family=family), in_step)
    steps = sorted(map(str, km.present_values(k["step"])))   # the family view's steps too (the same rows)
    view = opv.rank_family_view(
        kk, policy, categories=km.rows_where(cat, in_step) if cat is not None else None,
        kfile=_rel(kernels.path, root), path=kernels.path, variant=kernels.variant, steps=steps)
    return family, kk, steps, view


def _segment_summary_of(kernels, rank_id: int, policy, root, categories=None) -> tuple[dict, dict]:
    """Structure metrics and the layer / block class tables of one rank's kernel table
    (:mod:`perfgate.metrics.segments`); nothing when the policy has ``segments: null``."""
    if getattr(policy, "segments", None) is None:
        return {}, {}
    from perfgate.metrics.segments import class_table, outline, segment_metrics, segment_rank
    k = kernels.df
    seg = segment_rank(k, policy.segments, policy.family_suffix, categories=categories, path=kernels.path)
    step_sum = _step_sum_us(k)
    kfile = _rel(kernels.path, root)
    return segment_metrics(seg, kfile, step_sum), {
        "rank": rank_id, "steps": km.records(seg.steps), "classes": km.records(class_table(seg)),
        "outline": outline(seg)}   # the first step's step -> micro-batch -> pass -> layer runs


def fingerprint_capture(capture, policy, provenance: dict | None = None) -> Fingerprint:
    """Fingerprint a loaded capture under a policy (ranks in this process).

    Args:
        capture: :class:`perfgate.ingest.Capture`.
        policy: :class:`perfgate.policy.Policy` (Top-N, family suffix, category rules,
            self-check tolerances, finding thresholds).
        provenance: extra provenance (commit, branch, runner) merged into the record.

    Returns:
        A :class:`Fingerprint`; its ``self_checks`` may contain failures — call
        :func:`require_valid` before trusting it.
    """
    sums = [summarize_rank(r, policy, capture.path) for r in capture.ranks]
    return fingerprint_from_summaries(sums, policy, capture.path, provenance, list(capture.warnings))


_AVAILABLE = (("type_available", "op_type", "operator Type", "Type / OP Type"),
              ("core_available", "core_type", "Accelerator Core", "Accelerator Core / Task Type"))


def refuse_uneven_columns(full: list, root) -> None:
    """Ranks of one profiler level and one kernel-table header generation (``variant``) carry the
    same columns: one capture's ranks are written by one profiler. A rank without operator Type or
    Accelerator Core values where such a sibling has them (a renamed or edited column) would
    count 0 in every share by category or core type and halve their cross-rank p50 (a baseline
    would store share.category{Comm} p50 0.461, the median of 0.92 and 0), while
    the comparison calls every core metric incomparable, pointing at Level0.

    Raises:
        InvalidCaptureError: naming the rank's kernel table, what it lacks (no column of that
            name in its header, or a column without values) and the sibling that has it."""
    from pathlib import Path
    groups: dict = {}
    for x in full:
        if x.get("variant") is not None:
            groups.setdefault((x["info"].get("profiler_level"), x["variant"]), []).append(x)
    for (level, variant), ranks in groups.items():
        for flag, col, what, headers in _AVAILABLE:
            have = [x for x in ranks if x.get(flag)]
            lack = [x for x in ranks if x.get(flag) is False]
            if have and lack:
                x, y = lack[0], have[0]
                why = ("its header has no " + headers + " column" if not (x.get("kernel_columns") or {}).get(col)
                       else f"its {(x.get('kernel_columns') or {}).get(col)!r} column holds no value on a compute row")
                raise InvalidCaptureError(
                    f"rank {x['rank']} has no {what} values ({why}), while rank {y['rank']}'s "
                    f"{y.get('kernel_file')} of the same profiler level ({level if level is not None else 'not recorded'}) "
                    f"and header generation ({variant}) has them: one capture's ranks are written by one profiler",
                    path=Path(root) / str(x.get("kernel_file")) if x.get("kernel_file") else root,
                    hint="a renamed or edited column, or ranks of two exports in one folder: re-export the capture")


def fingerprint_from_summaries(sums: list[RankSummary], policy, root, provenance: dict | None = None,
                               warnings: list | None = None) -> Fingerprint:
    """Merge per-rank summaries (:func:`summarize_rank`) into one fingerprint: cross-rank
    views (rank0 / p50 / max / skew, within each pipeline stage), warm-up and cross-rank
    findings, config (with the profiler's collection options of every rank,
    ``config["collection"]``: :func:`perfgate.metrics.collection.collection_section`), provenance.

    Runs with the cyclic garbage collector paused (:func:`_merge_gc_paused`)."""
    with _merge_gc_paused():
        return _merged(sums, policy, root, provenance, warnings)


def _merge_gc_paused():
    """Pause Python's cyclic garbage collector during the merge, then restore it
    (:func:`_gc_paused`). The merge makes millions of short-lived tuples and dicts (4 per metric
    and rank) while the process holds every rank's summary (~1,000 tracked objects each): each
    collection they trigger walks those summaries too, ~35 % of the merge's CPU at 1,024 ranks
    (0.82-1.23 s with the collector on, 0.77 s off). The merge makes no reference cycles worth
    collecting while it runs; its garbage is collected after."""
    return _gc_paused(0)


def _merged(sums: list[RankSummary], policy, root, provenance: dict | None,
            warnings: list | None) -> Fingerprint:
    """:func:`fingerprint_from_summaries`, with the collector as its caller left it."""
    from pathlib import Path
    sums = sorted(sums, key=lambda x: x.rank)
    th = policy.findings
    full = [x for x in sums if not x.get("partial")]
    if not full:
        raise InvalidCaptureError(
            f"no rank holds a kernel table (ranks {[x['rank'] for x in sums]} are partial: "
            f"step_trace_time.csv / communication.json only): nothing to fingerprint the kernels from",
            path=root, hint="profile at least one rank fully (kernel_details.csv)")
    refuse_uneven_columns(full, root)
    layout = stages.find_stages(sums)
    metrics = _cross_rank_views(sums, full, policy, layout)
    checks = [c for x in sums for c in x["checks"]]
    findings = [f for x in sums for f in x["findings"]]
    tables = pd.concat([x["anatomy"] for x in sums if len(x["anatomy"])] or [pd.DataFrame(columns=["rank", "step"])],
                       ignore_index=True)
    findings.extend(warmup_findings(tables, th, "kernel_details.csv"))
    step_time = {k: v for x in sums for k, v in x.step_time.items()}
    findings.extend(cross_rank_findings(tables, step_time, {x.rank: x.info for x in sums}, th))
    have = [x.rank for x in sums if x.has_comm]
    for x in sums:
        if not x.has_comm and have:
            findings.append(Finding(
                "COMM_JSON_MISSING", "warn", x.rank, None,
                f"rank {x.rank} has no communication.json while rank(s) {have[:6]} do: communication.json "
                f"figures are not comparable for this capture", x.output_dir))
    kinds = pd.concat([x.kinds for x in sums if len(x.kinds)] or [pd.DataFrame()], ignore_index=True)
    # per-step records by columns (steps.table_records / step_time_records give what km.records
    # gives, without a Python call per row)
    detail = {"steps": table_records(tables), "comm_kinds": table_records(kinds)}
    # per rank and step: the gated step time (Computing + Communication(Not Overlapped) + Free, or the
    # device wall when no step_trace / Overlap Analysis exists), for per-rank plots
    detail["step_time"] = step_time_records(step_time)
    if any(x.get("segments") for x in sums):
        detail["segments"] = [x["segments"] for x in sums if x.get("segments")]
    detail.update(_operator_detail(full, metrics, policy))
    warns = list(warnings or [])
    from perfgate.ingest.discover import mixed_levels_warning
    mixed = mixed_levels_warning({x["info"].get("profiler_level") for x in full})
    if mixed and not any("different levels" in w for w in warns):
        warns.append(mixed)
    for x in sums:
        warns.extend(x.warnings)
    prov = {
        "source": str(Path(root).resolve()),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ranks": [x.rank for x in sums],
        "rank_dirs": {str(x.rank): x.rank_dir for x in sums},
        "rank_sources": {str(x.rank): x.rank_source for x in sums},
        "steps": {str(x.rank): x.steps for x in sums},
        "perfgate_version": __version__,
    }
    prov.update(provenance or {})
    config = _config_from_summaries(sums, policy)
    if layout is not None:   # several pipeline stages: the stage of each rank and how it was found
        config["stages"] = layout.to_config()
        warns.extend(stages.unplaced_warning(layout))
    config["collection"] = collection.collection_section({x.rank: x.info for x in sums})
    differ = collection.ranks_differ_warning(config["collection"])
    if differ:
        warns.append(differ)
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version=__version__, provenance=prov,
                       config=config, metrics=metrics,
                       self_checks=tuple(checks), warnings=tuple(warns),
                       policy_digest=policy.fingerprint_digest(), findings=tuple(findings), detail=detail)


def _cross_rank_views(sums, full, policy, layout) -> dict[str, MetricValue]:
    """The cross-rank views of the ranks' metrics: pooled over every rank (:func:`_views`) for a
    capture of one stage (``layout`` None), else within each pipeline stage
    (:func:`perfgate.metrics.stages.stage_views`)."""
    per_rank = {x["rank"]: x["metrics"] for x in sums}
    kernel_ranks = [x["rank"] for x in full]
    if layout is None:
        return _views(per_rank, policy, kernel_ranks=kernel_ranks)
    return stages.stage_views(layout, per_rank, lambda sub, held: _views(sub, policy, kernel_ranks=held),
                              kernel_ranks)


def _operator_detail(sums, metrics, policy) -> dict:
    """The family view of the lowest rank (families, categories, phases, pipe bound, MFU
    classes) and the policy's suggestions evaluated on the cross-rank metrics; consecutive
    kernel runs are taken from the rank with the longest run."""
    ops = [x.operators for x in sums if x.operators]
    if not ops:
        return {}
    runs = {}
    for o in ops:
        for rid, (n, row) in o.get("runs", {}).items():
            if rid not in runs or n > runs[rid][0]:
                runs[rid] = (n, row, o["rank"])
    return {"operators": ops[0], "suggestions": suggest.evaluate(metrics, policy.suggestions, runs)}


def _operator_digest(policy) -> str:
    blob = json.dumps({"family_suffix": policy.family_suffix.pattern, "phases": policy.raw.get("phases")},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _mfu_digest(policy) -> str | None:
    if policy.mfu is None:
        return None
    m = policy.mfu
    blob = json.dumps({"chip": m.chip, "peaks": m.peaks, "dtype": m.default_dtype, "python": m.python,
                       "rules": [(r.matcher.describe(), r.formula) for r in m.rules]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def coverage_config(sums) -> dict:
    """The capture's rank coverage (part of the fingerprint's config): ``job_world_size`` (the
    job's world size as recorded, :func:`_job_meta`; None when no rank records it, never guessed
    from the ranks present), ``world_size_source`` (which file / field said so), ``coverage``
    ({rank id as str: tables it holds: kernels / step_trace / comm / trace}). ``world_size``
    stays the number of ranks profiled.

    Raises:
        InvalidCaptureError: ranks record different world sizes."""
    sizes = {x["meta"]["world_size"]: x["meta"]["source"] for x in sums
             if x.get("meta") and x["meta"]["world_size"] is not None}
    if len(sizes) > 1:
        raise InvalidCaptureError(f"the ranks record different job world sizes {sorted(sizes)}: ranks of "
                                  f"different jobs in one capture")
    ws, src = next(iter(sizes.items())) if sizes else (None, None)
    return {"job_world_size": ws, "world_size_source": src,
            "coverage": {str(x["rank"]): list(x.get("tables", ())) for x in sums}}


def _kernel_span(k) -> tuple[int, int] | None:
    """(first start, last end) of a rank's kernel rows, int ns on the capture's clock (epoch
    wall clock in torch_npu exports), or None without rows: the fallback of
    RANKS_FROM_DIFFERENT_RUNS for ranks without a recorded collection end
    (:func:`perfgate.metrics.steps.cross_rank_findings`)."""
    if not len(k):
        return None
    return int(k["start_ns"].min()), int(k["end_ns"].max())


def _config_from_summaries(sums, policy) -> dict:
    cover = coverage_config(sums)
    sums = [x for x in sums if not x.get("partial")] or sums

    def one(key):
        vals = sorted({str(x.info.get(key)) for x in sums if x.info.get(key) is not None})
        return vals[0] if len(vals) == 1 else (",".join(vals) if vals else None)

    return {
        "world_size": len(cover["coverage"]),
        "ranks": [int(r) for r in cover["coverage"]],
        "profiler_level": one("profiler_level"),
        "aic_metrics": one("aic_metrics"),
        "export_type": one("export_type"),
        "torch_npu_version": one("torch_npu_version"),
        "cann_version": one("cann_version"),
        "type_available": all(x["type_available"] for x in sums),
        "core_available": all(x["core_available"] for x in sums),
        "has_trace": all(x["has_trace"] for x in sums),
        "has_step_trace": all(x["has_step_trace"] for x in sums),
        "has_comm_json": all(x["has_comm"] for x in sums),
        **cover,
        "kernel_variants": sorted({x["variant"] for x in sums}),
        "family_suffix": policy.family_suffix.pattern,
        "top_n": policy.top_n,
        "categories_digest": policy.category_digest(),
        "operator_digest": _operator_digest(policy),
        "mfu_digest": _mfu_digest(policy),
        "pipe_available": all(x.get("operators", {}).get("pipe_available") for x in sums),
        "steps_per_rank": {str(x["rank"]): len(x["steps"]) for x in sums},  # ranks with a kernel table
        "segments_digest": policy.segments.digest if getattr(policy, "segments", None) else None,
    }


_SENDRECV = re.compile(r"(?i)batchsendrecv|hcom_send")


def _bubble_note_rank(r) -> list:
    """step_trace Bubble counts only hcom_receive rows: a PP run using batchSendRecv shows 0."""
    k = r.kernels.df
    sendrecv = k["is_comm"].to_numpy() & km.matches(k["name"], _SENDRECV)
    if sendrecv.any() and r.step_trace is not None and (r.step_trace["bubble_us"].fillna(0) == 0).all():
        return [Finding(
            "BUBBLE_UNRELIABLE", "info", r.rank, None,
            f"rank {r.rank}: {int(sendrecv.sum())} send/batchSendRecv row(s) but step_trace_time.csv Bubble is 0: "
            f"torch_npu counts only hcom_receive as Bubble, so pipeline bubbles are not measured here",
            f"{r.kernels.path.name} row {int(k['row'].to_numpy()[sendrecv][0])}")]
    return []


def failed_checks(fp: Fingerprint) -> list:
    """The self-checks of ``fp`` with status ``fail`` (any one makes the capture invalid)."""
    return [c for c in fp.self_checks if c.status == FAIL]


def blocking_findings(fp: Fingerprint, fail_closed=()) -> list:
    """Findings whose code is in ``fail_closed`` (policy ``findings.fail_closed``)."""
    return [f for f in fp.findings if f.code in set(fail_closed)]


#: findings that make a capture invalid whatever the policy's ``findings.fail_closed`` says: steps
#: whose warm-up was not stripped, and device tasks the profiler lost (host launches that never reached
#: the device, Ascend/pytorch#167). A lost task shortens the step and removes a call: compared, it
#: would read as a family with fewer calls and a step that got faster, or blame a family whose time
#: did not change. Neither can be a baseline, a history run or a checked candidate (exit 3).
ALWAYS_FAIL_CLOSED = frozenset({"WARMUP_NOT_STRIPPED", "DEVICE_TASKS_LOST"})


def fail_closed_of(policy) -> frozenset:
    """The finding codes that make a capture invalid under ``policy``: its
    ``findings.fail_closed`` and :data:`ALWAYS_FAIL_CLOSED` (what ``fail_closed`` of
    :func:`require_valid` is given by every command that saves, records, checks or sweeps)."""
    return frozenset(policy.fail_closed) | ALWAYS_FAIL_CLOSED


def require_valid(fp: Fingerprint, fail_closed=(), path=None) -> Fingerprint:
    """Fail closed: raise if any self-check failed or a finding in ``fail_closed`` is present.

    ``path``: where the error says the problem is — the capture as the user gave it (relative
    stays relative, as every ingest error and the self-checks' evidence are relative to it);
    default the fingerprint's ``provenance.source`` (the resolved, absolute capture folder).

    Raises:
        InvalidCaptureError: naming the first failed check or blocking finding (all of them
            are in ``problems``).
    """
    where = fp.provenance.get("source") if path is None else str(path)
    bad = failed_checks(fp)
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more failed self-check(s))" if len(bad) > 1 else ""
        raise InvalidCaptureError(
            f"self-check {first.name} failed on rank {first.rank}{'' if first.step is None else f' step {first.step}'}: "
            f"{first.message}{more}",
            path=where,
            problems=[c.to_dict() for c in bad])
    block = blocking_findings(fp, fail_closed)
    if block:
        first = block[0]
        more = f" (and {len(block) - 1} more)" if len(block) > 1 else ""
        raise InvalidCaptureError(f"{first.code}: {first.message}{more}", path=where,
                                  hint="the policy's findings.fail_closed lists this finding",
                                  problems=[f.to_dict() for f in block])
    return fp
