"""Communication analysis: HCCL op kinds, uncovered time per kind, communication.json figures.

Kinds come from op names (``hcom_allReduce__586_0_1`` -> ``allreduce``): allreduce,
allgather, reducescatter, alltoall (incl. alltoallv), broadcast, send_recv (send, receive,
batchSendRecv), barrier, reduce, other. communication.json figures (msprof-analyze
cluster_analyse communication_analysis): wait ratio = Σ wait / (Σ wait + Σ transit);
bandwidth per link type = Σ Transit Size (MB) / Σ Transit Time (ms) = GB/s.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfgate.metrics.intervals import merge
from perfgate.metrics.steps import covered_ns
from perfgate.model import SelfCheck

_KINDS = (
    ("alltoall", re.compile(r"alltoall")),
    ("allreduce", re.compile(r"allreduce")),
    ("allgather", re.compile(r"allgather")),
    ("reducescatter", re.compile(r"reduce_?scatter")),
    ("broadcast", re.compile(r"broadcast")),
    ("send_recv", re.compile(r"batchsendrecv|send|recv|receive")),
    ("barrier", re.compile(r"barrier")),
    ("reduce", re.compile(r"reduce")),
)


def kind_of(name: str) -> str:
    """HCCL op kind of a communication kernel / op name (lower-case, ``other`` if unknown)."""
    n = str(name).lower()
    n = n[5:] if n.startswith("hcom_") else n
    for kind, rx in _KINDS:
        if rx.search(n):
            return kind
    return "other"


def kind_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (step, kind): ``calls``, ``sum_us`` (ΣDuration) and ``exposed_us`` = *uncovered
    communication* (per row, its Duration minus the part the step's compute busy union covers,
    summed: ΣDuration-based; the column keeps its recorded name, see :mod:`perfgate.terms`), from
    the kernel table, us. Steps in order
    of their first communication row, kinds sorted; rows with a blank step are left out.
    The kind is derived once per distinct kernel name."""
    cols = ["step", "kind", "calls", "sum_us", "exposed_us"]
    step_cat = kernels["step"] if isinstance(kernels["step"].dtype, pd.CategoricalDtype) \
        else kernels["step"].astype("category")
    codes = step_cat.cat.codes.to_numpy()
    is_comm = kernels["is_comm"].to_numpy() & (codes >= 0)
    if not is_comm.any():
        return pd.DataFrame(columns=cols)
    names = kernels["name"] if isinstance(kernels["name"].dtype, pd.CategoricalDtype) \
        else kernels["name"].astype("category")
    name_kind = np.array([kind_of(str(n)) for n in names.cat.categories] + ["other"], dtype=object)
    name_codes = names.cat.codes.to_numpy()
    start, end, dur = (kernels[c].to_numpy() for c in ("start_ns", "end_ns", "dur_ns"))
    comm_idx = np.flatnonzero(is_comm)
    comp_idx = np.flatnonzero(~kernels["is_comm"].to_numpy() & (codes >= 0))
    comp_codes = codes[comp_idx]
    out = []
    for code in pd.unique(codes[comm_idx]):
        step = step_cat.cat.categories[code]
        comm = comm_idx[codes[comm_idx] == code]
        comp = comp_idx[comp_codes == code]
        cs, ce = merge(start[comp], end[comp])
        d = dur[comm]
        uncovered = d - covered_ns(cs, ce, start[comm], end[comm])
        kinds = name_kind[name_codes[comm]]  # code -1 (no name) -> "other" as kind_of("nan") would
        for kind in sorted(set(kinds)):
            m = kinds == kind
            out.append({"step": str(step), "kind": kind, "calls": int(m.sum()),
                        "sum_us": float(d[m].sum()) / 1000.0, "exposed_us": float(uncovered[m].sum()) / 1000.0})
    return pd.DataFrame(out, columns=cols)


def op_identity_checks(comm, rank_id, rel_path: str, tol_us: float = 1.0) -> list[SelfCheck]:
    """Per step: every communication.json op's Elapse = Transit + Wait + Idle within ``tol_us``.

    Source: msprof-analyze's communication analysis splits an op's elapsed time into transit,
    wait (synchronization is part of wait) and idle time (SCHEMAS.md §5). The file is in ms;
    ``comm.ops`` holds µs, and ``tol_us`` is µs (policy ``self_checks.comm_op_identity_abs_us``,
    default 1.0). Measured on every real communication.json in the fixtures (6 files, 72 ops):
    the largest difference is 1.1e-13 µs. One check per (rank, step); a failure names the op,
    both sides in ms and how many ops are off. ``Total Op Info`` is not an op and is not checked.
    """
    out = []
    ops = comm.ops
    if ops.empty:
        return out
    diff = ops["elapse_us"] - (ops["transit_us"] + ops["wait_us"] + ops["idle_us"])
    for step, d in diff.groupby(ops["step"]):
        bad = d[d.abs() > tol_us]
        if bad.empty:
            out.append(SelfCheck("comm_op_identity", rank_id, str(step), "pass",
                                 f"{len(d)} op(s): Elapse = Transit + Wait + Idle (largest difference "
                                 f"{d.abs().max():.6f} us)", evidence=rel_path))
        else:
            i = bad.abs().idxmax()
            op = ops.loc[i]
            out.append(SelfCheck(
                "comm_op_identity", rank_id, str(step), "fail",
                f"{op['op']}: Elapse {op['elapse_us'] / 1000:.6f} ms ≠ Transit + Wait + Idle "
                f"{(op['transit_us'] + op['wait_us'] + op['idle_us']) / 1000:.6f} ms "
                f"({len(bad)} op(s) off by more than {tol_us} us, self_checks.comm_op_identity_abs_us)",
                expected=float(op["elapse_us"]),
                observed=float(op["transit_us"] + op["wait_us"] + op["idle_us"]), tolerance=tol_us,
                evidence=f"{rel_path} step{step}.{op['kind']}.{op['op']}"))
    return out


def wait_ratio(comm) -> float:
    """Σ wait / (Σ wait + Σ transit) over all ops of the rank (NaN without ops)."""
    w, t = comm.ops["wait_us"].sum(), comm.ops["transit_us"].sum()
    return float(w / (w + t)) if (w + t) > 0 else np.nan


def bandwidth(comm) -> dict:
    """{link type: GB/s} = Σ Transit Size (MB) / Σ Transit Time (ms), links with time > 0."""
    if comm.links.empty:
        return {}
    g = comm.links.groupby("link")[["size_mb", "time_us"]].sum()
    return {str(link): float(r["size_mb"] / (r["time_us"] / 1000.0)) for link, r in g.iterrows() if r["time_us"] > 0}
