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
* ``step_trace_identities`` (P16): Overlapped = Communication − Comm(Not Overlapped) (fail);
  Stage ≈ Computing + Comm(Not Overlapped) + Free and Comm(Not Overlapped and Exclude
  Receive) = Comm(Not Overlapped) − Bubble (warn).

Tolerance: kernel_details writes start and duration with 3 decimals (1 ns), so each row may
differ from the trace's float timestamps by up to ~0.001 µs; the tolerance is
``abs_us_per_row * rows + abs_us_floor`` (policy ``self_checks``). On the real level1 rank0
capture the observed differences are 0.002 µs (4 comm rows) and 0.019 µs (187 compute rows).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.ingest.kernels import IMPLICIT_STEP
from perfgate.metrics.intervals import busy_union_ns
from perfgate.model import SelfCheck

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
    steps = assign_steps(ov["start_ns"].to_numpy(), tr.steps)
    t = ov.assign(step=steps).groupby(["step", "kind"])["dur_ns"].sum().unstack(fill_value=0)
    for c in ("computing", "comm", "comm_not_overlapped", "free"):
        if c not in t:
            t[c] = 0
    return t / 1000.0


def _tol(policy, rows: int) -> float:
    sc = policy.self_checks
    return sc["abs_us_per_row"] * rows + sc["abs_us_floor"]


def _align(kernel_steps, ref_index) -> list[tuple[str, list, list]]:
    """Pairs (label, kernel step labels, reference step labels) to compare."""
    ks = [s for s in kernel_steps if s is not None]
    ref = [s for s in ref_index if s != UNASSIGNED]
    if IMPLICIT_STEP in ks or IMPLICIT_STEP in ref or not set(ks) & set(ref):
        return [("all", ks, ref)]
    return [(s, [s], [s]) for s in sorted(set(ks) & set(ref), key=_step_sort)]


def _step_sort(s):
    return (0, int(s)) if str(s).isdigit() else (1, str(s))


def run_self_checks(rank, policy) -> list[SelfCheck]:
    """All self-checks of one rank (see module docstring). Pure: reads ``rank``'s tables."""
    out: list[SelfCheck] = []
    k = rank.kernels.df
    kfile = rank.kernels.path.name
    ov = overlap_per_step(rank)
    st = rank.step_trace
    st_by_step = None
    if st is not None:
        st_by_step = st.groupby("step")[["computing_us", "comm_us", "comm_not_overlapped_us",
                                         "overlapped_us", "free_us"]].sum()
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

    kernel_steps = list(pd.unique(k["step"].dropna()))
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
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(cat.cat.categories) + 1))
        for label, ksteps, rsteps in _align(kernel_steps, list(ref.index)):
            sel = np.flatnonzero(cat.cat.categories.isin(ksteps))
            parts = [order[bounds[i]:bounds[i + 1]] for i in sel]
            idx = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts or [order[:0]]))
            rows = _Rows({c: a[idx] for c, a in arrays.items()})
            r = ref.loc[[s for s in rsteps if s in ref.index]].sum()
            out.extend(_kernel_vs_reference(rank.rank, label, rows, r, ref_name, kfile, policy))

    if st_by_step is not None and ov is None:
        out.append(SelfCheck("trace_vs_step_trace", rank.rank, None, SKIPPED,
                             f"no trace Overlap Analysis events to compare {st_name} with ({tfile} "
                             f"or the OVERLAP_ANALYSIS table absent or not read)"))
    if ov is not None and st_by_step is not None:
        tol = policy.self_checks["step_trace_abs_us"]
        for s in st_by_step.index:
            if s not in ov.index and not (s == IMPLICIT_STEP):
                out.append(SelfCheck("trace_vs_step_trace", rank.rank, s, FAIL,
                                     f"step {s} is in step_trace_time.csv but no trace event falls in "
                                     f"it", evidence=f"{st_name}, {tfile}"))
                continue
            o = ov.sum() if s == IMPLICIT_STEP else ov.loc[s]
            diffs = {c: (float(st_by_step.loc[s, f"{c}_us"]), float(o[c]))
                     for c in ("computing", "comm", "comm_not_overlapped", "free")}
            worst = max(diffs, key=lambda c: abs(diffs[c][0] - diffs[c][1]))
            a, b = diffs[worst]
            ok = abs(a - b) <= tol
            out.append(SelfCheck(
                "trace_vs_step_trace", rank.rank, s, PASS if ok else FAIL,
                f"{st_name} and {trace_name} agree (largest difference "
                f"{worst}: {a:.3f} vs {b:.3f} us)" if ok else
                f"{st_name} {worst} = {a:.3f} us but the {trace_name} events "
                f"sum to {b:.3f} us: the files are not from one capture",
                expected=a, observed=b, tolerance=tol, evidence=f"{st_name}, {tfile}"))
    if st is not None:
        out.extend(_step_trace_identities(rank.rank, st, policy))
    return out


class _Rows(dict):
    """Kernel columns (numpy arrays) of the rows of one comparison, with a row count."""

    def __len__(self):
        return len(self["row"])

    def where(self, mask) -> "_Rows":
        return _Rows({c: a[mask] for c, a in self.items()})


def _kernel_vs_reference(rank_id, label, rows: _Rows, ref, ref_name, kfile, policy) -> list[SelfCheck]:
    out = []
    comm = rows.where(rows["is_comm"])
    comp = rows.where(~rows["is_comm"])
    rng = f"{kfile} rows {int(rows['row'].min())}-{int(rows['row'].max())}" if len(rows) else kfile
    # comm equality
    sum_comm = comm["dur_ns"].sum() / 1000.0
    ref_comm = float(ref["comm_us"])
    tol = _tol(policy, len(comm))
    if abs(sum_comm - ref_comm) <= tol:
        status, msg = PASS, (f"Σ Duration of {len(comm)} communication row(s) = {sum_comm:.3f} us "
                             f"equals {ref_name} Communication {ref_comm:.3f} us")
    else:
        u = busy_union_ns(comm["start_ns"], comm["end_ns"]) / 1000.0 if len(comm) else 0.0
        if abs(u - ref_comm) <= tol and len(comm):
            status, msg = PASS, (f"communication ops overlap each other: their busy union "
                                 f"{u:.3f} us (ΣDuration {sum_comm:.3f} us) equals {ref_name} "
                                 f"Communication {ref_comm:.3f} us")
        else:
            status, msg = FAIL, (f"Σ Duration of {len(comm)} communication row(s) in {kfile} is "
                                 f"{sum_comm:.3f} us but {ref_name} Communication is "
                                 f"{ref_comm:.3f} us (difference {sum_comm - ref_comm:+.3f} us, "
                                 f"tolerance {tol:.3f} us): the files are not from one capture or "
                                 f"a row was altered")
    out.append(SelfCheck("comm_equality", rank_id, label, status, msg, expected=ref_comm,
                         observed=sum_comm, tolerance=tol, evidence=rng))
    # compute union
    u_comp = busy_union_ns(comp["start_ns"], comp["end_ns"]) / 1000.0 if len(comp) else 0.0
    ref_comp = float(ref["computing_us"])
    tol = _tol(policy, len(comp))
    ok = abs(u_comp - ref_comp) <= tol
    out.append(SelfCheck(
        "compute_union", rank_id, label, PASS if ok else FAIL,
        (f"busy union of {len(comp)} compute row(s) {u_comp:.3f} us equals {ref_name} Computing "
         f"{ref_comp:.3f} us") if ok else
        (f"busy union of {len(comp)} compute row(s) in {kfile} is {u_comp:.3f} us but {ref_name} "
         f"Computing is {ref_comp:.3f} us (difference {u_comp - ref_comp:+.3f} us, tolerance "
         f"{tol:.3f} us)"),
        expected=ref_comp, observed=u_comp, tolerance=tol, evidence=rng))
    # overlap gap: ΣDuration − busy union decomposed; its compute∩comm part is "Overlapped"
    sum_all = rows["dur_ns"].sum() / 1000.0
    u_all = busy_union_ns(rows["start_ns"], rows["end_ns"]) / 1000.0 if len(rows) else 0.0
    u_comm = busy_union_ns(comm["start_ns"], comm["end_ns"]) / 1000.0 if len(comm) else 0.0
    inter = u_comp + u_comm - u_all
    self_comp = comp["dur_ns"].sum() / 1000.0 - u_comp
    self_comm = sum_comm - u_comm
    ref_ov = float(ref["overlapped_us"])
    tol = _tol(policy, len(rows))
    ok = abs(inter - ref_ov) <= tol and sum_all + 1e-9 >= u_all
    detail = (f"ΣDuration {sum_all:.3f} us − busy union {u_all:.3f} us = {sum_all - u_all:.3f} us "
              f"= compute∩comm {inter:.3f} us + compute-compute {self_comp:.3f} us + comm-comm "
              f"{self_comm:.3f} us")
    out.append(SelfCheck(
        "overlap_gap", rank_id, label, PASS if ok else FAIL,
        f"{detail}; {ref_name} Overlapped {ref_ov:.3f} us" + ("" if ok else
        f" differs from compute∩comm by {inter - ref_ov:+.3f} us (tolerance {tol:.3f} us)"),
        expected=ref_ov, observed=inter, tolerance=tol, evidence=rng))
    return out


def _step_trace_identities(rank_id, st: pd.DataFrame, policy) -> list[SelfCheck]:
    out = []
    tol = policy.self_checks["step_trace_abs_us"]
    for _, r in st.iterrows():
        s = r["step"]
        ov_calc = r["comm_us"] - r["comm_not_overlapped_us"]
        ok = abs(ov_calc - r["overlapped_us"]) <= tol
        out.append(SelfCheck(
            "step_trace_identities", rank_id, s, PASS if ok else FAIL,
            f"Overlapped {r['overlapped_us']:.3f} us = Communication − Comm(Not Overlapped) "
            f"{ov_calc:.3f} us" if ok else
            f"step_trace_time.csv row {r['row']}: Overlapped {r['overlapped_us']:.3f} us but "
            f"Communication − Communication(Not Overlapped) = {ov_calc:.3f} us",
            expected=ov_calc, observed=float(r["overlapped_us"]), tolerance=tol,
            evidence=f"step_trace_time.csv row {r['row']}"))
        if not np.isnan(r["stage_us"]):
            bubble = 0.0 if np.isnan(r["bubble_us"]) else r["bubble_us"]
            expect = r["computing_us"] + r["comm_not_overlapped_us"] + r["free_us"] - bubble
            if abs(expect - r["stage_us"]) > max(tol, 1e-3 * expect):
                out.append(SelfCheck(
                    "step_trace_identities", rank_id, s, WARN,
                    f"step_trace_time.csv row {r['row']}: Stage {r['stage_us']:.3f} us differs from "
                    f"Computing + Comm(Not Overlapped) + Free − Bubble = {expect:.3f} us",
                    evidence=f"step_trace_time.csv row {r['row']}"))
        if not np.isnan(r["comm_not_overlapped_excl_recv_us"]) and not np.isnan(r["bubble_us"]):
            calc = r["comm_not_overlapped_us"] - r["bubble_us"]
            if abs(calc - r["comm_not_overlapped_excl_recv_us"]) > tol:
                out.append(SelfCheck(
                    "step_trace_identities", rank_id, s, WARN,
                    f"step_trace_time.csv row {r['row']}: Comm(Not Overlapped and Exclude Receive) "
                    f"{r['comm_not_overlapped_excl_recv_us']:.3f} us ≠ Comm(Not Overlapped) − Bubble "
                    f"{calc:.3f} us", evidence=f"step_trace_time.csv row {r['row']}"))
    return out
