"""Communication analysis: HCCL op kinds, uncovered time per kind, communication.json figures.

Kinds come from op names (``hcom_allReduce__586_0_1`` -> ``allreduce``): allreduce,
allgather, reducescatter, alltoall (incl. alltoallv), broadcast, send_recv (send, receive,
batchSendRecv), barrier, reduce, other. communication.json figures (msprof-analyze
cluster_analyse communication_analysis): wait ratio = Σ wait / (Σ wait + Σ transit);
bandwidth per link type = Σ Transit Size (MB) / Σ Transit Time (ms) = GB/s.
"""
from __future__ import annotations

import functools
import re
from itertools import repeat

import numpy as np
import pandas as pd

from perfgate.metrics.intervals import merge, segmented_union_ns
from perfgate.metrics.steps import covered_ns
from perfgate.model import SelfCheck, from_columns

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


@functools.lru_cache(maxsize=65536)
def _kind_of_text(name: str) -> str:
    """:func:`kind_of` remembered per name text (the same HCCL op names recur in every rank)."""
    return kind_of(name)


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
    name_codes = names.cat.codes.to_numpy()
    # the kind of each distinct name that communication rows use (not of every kernel name), once
    used = np.unique(name_codes[is_comm])
    used = used[used >= 0]
    name_kind = np.full(len(names.cat.categories) + 1, "other", dtype=object)
    name_kind[used] = list(map(_kind_of_text, map(str, names.cat.categories[used].tolist())))
    start, end, dur = (kernels[c].to_numpy() for c in ("start_ns", "end_ns", "dur_ns"))
    comm_idx = np.flatnonzero(is_comm)
    comp_idx = np.flatnonzero(~kernels["is_comm"].to_numpy() & (codes >= 0))
    uncovered = _uncovered_per_row(codes, start, end, dur, comm_idx, comp_idx)
    d = dur[comm_idx].astype(np.int64)
    kinds = name_kind[name_codes[comm_idx]]  # code -1 (no name) -> "other" as kind_of("nan") would
    # one group-by over (step, kind): steps in order of their first communication row, kinds sorted
    kind_names, kind_idx = np.unique(kinds.astype(str), return_inverse=True)
    ccodes = codes[comm_idx]
    step_order, first = np.unique(ccodes, return_index=True)
    rank_of = np.empty(int(step_order.max()) + 1, dtype=np.int64)
    rank_of[step_order] = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    key = rank_of[ccodes] * len(kind_names) + kind_idx
    groups, inv = np.unique(key, return_inverse=True)
    calls = np.bincount(inv, minlength=len(groups))
    sums = np.zeros(len(groups), dtype=np.int64)
    np.add.at(sums, inv, d)
    exp = np.zeros(len(groups), dtype=np.int64)
    np.add.at(exp, inv, uncovered.astype(np.int64))
    code_at_rank = step_order[np.argsort(rank_of[step_order], kind="stable")]
    cats = np.empty(len(step_cat.cat.categories), dtype=object)
    cats[:] = list(map(str, step_cat.cat.categories.tolist()))
    nk = len(kind_names)
    # one frame from columns (was one dict per (step, kind) group)
    return pd.DataFrame({"step": cats[code_at_rank[groups // nk]],
                         "kind": np.asarray([str(x) for x in kind_names.tolist()], dtype=object)[groups % nk],
                         "calls": calls.astype(np.int64), "sum_us": sums / 1000.0, "exposed_us": exp / 1000.0},
                        columns=cols)


def _uncovered_per_row(codes, start, end, dur, comm_idx, comp_idx) -> np.ndarray:
    """Uncovered communication per communication row (``comm_idx``): its duration minus the
    part covered by the busy union of its own step's compute rows (ns). All steps in one pass: each step's times are
    moved into a band of their own (``code × width``), so no step's intervals meet another's,
    then one merge and one coverage lookup; per step when the bands would overflow int64."""
    d = dur[comm_idx].astype(np.int64)
    idx = np.concatenate([comm_idx, comp_idx])
    lo = int(min(start[idx].min(), end[idx].min()))
    width = int(max(start[idx].max(), end[idx].max())) - lo + 1
    ncodes = int(codes[idx].max()) + 1
    if width * (ncodes + 1) < 2 ** 62:
        def band(i):
            off = codes[i].astype(np.int64) * width - lo
            return start[i].astype(np.int64) + off, end[i].astype(np.int64) + off
        cs, ce = merge(*band(comp_idx))
        return d - covered_ns(cs, ce, *band(comm_idx))
    out = np.empty(len(comm_idx), dtype=np.int64)
    comp_codes, comm_codes = codes[comp_idx], codes[comm_idx]
    for code in np.unique(comm_codes):
        m = comm_codes == code
        comp = comp_idx[comp_codes == code]
        cs, ce = merge(start[comp], end[comp])
        out[m] = d[m] - covered_ns(cs, ce, start[comm_idx[m]], end[comm_idx[m]])
    return out


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
    el, tr, wa, idl = (ops[c].to_numpy(dtype=float) for c in ("elapse_us", "transit_us", "wait_us", "idle_us"))
    parts = tr + wa + idl
    absd = np.abs(el - parts)
    # per step at once (steps in sorted order, as a sorted group-by gives them; a blank step is
    # left out): op count, largest |difference| (NaN skipped), ops off, the first worst op off
    codes, steps = pd.factorize(ops["step"], sort=True)
    ns = len(steps)
    ok = codes >= 0
    c = codes[ok]
    a = absd[ok]
    n = np.bincount(c, minlength=ns)
    fin = ~np.isnan(a)
    mx = np.full(ns, -np.inf)
    np.maximum.at(mx, c[fin], a[fin])
    mx[np.bincount(c[fin], minlength=ns) == 0] = np.nan
    off = a > tol_us
    nbad = np.bincount(c[off], minlength=ns)
    pos = np.flatnonzero(ok)  # row position of each kept op
    worst = np.full(ns, -1)
    if off.any():
        wmax = np.full(ns, -np.inf)
        np.maximum.at(wmax, c[off], a[off])
        hit = np.flatnonzero(off & (a == wmax[c]))
        first = np.unique(c[hit], return_index=True)
        worst[first[0]] = pos[hit[first[1]]]
    op_names, kinds = ops["op"].to_numpy(dtype=object), ops["kind"].to_numpy(dtype=object)
    # one check per step as columns: one format map per status, SelfChecks by model.from_columns
    labels = np.empty(ns, dtype=object)
    labels[:] = list(map(str, steps.tolist()))
    fail = nbad > 0
    msg = np.empty(ns, dtype=object)
    ev = np.full(ns, rel_path, dtype=object)
    exp = np.full(ns, None, dtype=object)
    obs = np.full(ns, None, dtype=object)
    tol = np.full(ns, None, dtype=object)
    p = np.flatnonzero(~fail)
    if len(p):
        msg[p] = list(map("{} op(s): Elapse = Transit + Wait + Idle (largest difference {:.6f} us)".format,
                          n[p].tolist(), mx[p].tolist()))
    f = np.flatnonzero(fail)
    if len(f):
        i = worst[f]
        e, t = el[i], parts[i]
        names_f, kinds_f = op_names[i].tolist(), kinds[i].tolist()
        msg[f] = list(map("{}: Elapse {:.6f} ms ≠ Transit + Wait + Idle {:.6f} ms ({} op(s) off by more than {} us, "
                          "self_checks.comm_op_identity_abs_us)".format, names_f, (e / 1000).tolist(),
                          (t / 1000).tolist(), nbad[f].tolist(), repeat(tol_us)))
        exp[f], obs[f] = e.tolist(), t.tolist()
        tol[f] = tol_us
        ev[f] = list(map("{} step{}.{}.{}".format, repeat(rel_path), labels[f].tolist(), kinds_f, names_f))
    out.extend(from_columns(SelfCheck, repeat("comm_op_identity"), repeat(rank_id), labels.tolist(),
                            np.where(fail, "fail", "pass").tolist(), msg.tolist(), exp.tolist(), obs.tolist(),
                            tol.tolist(), ev.tolist()))
    return out


def wait_ratio(comm) -> float:
    """Σ wait / (Σ wait + Σ transit) over all ops of the rank (NaN without ops)."""
    w, t = comm.ops["wait_us"].sum(), comm.ops["transit_us"].sum()
    return float(w / (w + t)) if (w + t) > 0 else np.nan


def bandwidth(comm) -> dict:
    """{link type: GB/s} = Σ Transit Size (MB) / Σ Transit Time (ms), links with time > 0."""
    if comm.links.empty:
        return {}
    from perfgate.metrics import kernels as km
    links = comm.links
    sizes = times = None
    keys = links["link"].tolist()
    if (len(keys) <= km.SMALL_GROUP_ROWS and links["size_mb"].dtype == np.float64
            and links["time_us"].dtype == np.float64
            and all(type(k) is str or k is None or (type(k) is float and k != k) for k in keys)):
        # a small rank's few dozen link rows: pandas' own group sums without its group-by set-up
        sizes = km.group_sums(keys, links["size_mb"].tolist())
        times = km.group_sums(keys, links["time_us"].tolist())
    if sizes is None or times is None:   # the group-by itself (another key type, an unknown pandas sum)
        g = links.groupby("link")[["size_mb", "time_us"]].sum()
        sizes, times = g["size_mb"].to_dict(), g["time_us"].to_dict()
    return {str(link): float(sizes[link] / (times[link] / 1000.0)) for link in sizes if times[link] > 0}


def _ops_without_rows(ops, df, rank_id, comm_file: str, kernel_file: str) -> list[SelfCheck]:
    """``comm_ops_vs_kernels`` of a kernel table with no communication row at all: each step of
    the table in which communication.json holds ops fails (their HCCL tasks are missing from the
    table: lost by the device, or the files are not from one capture). Every fixture with both
    files has a communication row per op; [] when no op lies in a step the table has rows in."""
    from perfgate.ingest.kernels import IMPLICIT_STEP
    from perfgate.metrics import kernels as km
    held = set(map(str, km.present_values(df["step"])))
    if df["step"].isna().any():
        held.add(IMPLICIT_STEP)
    j_step = ops["step"].astype("string").fillna(IMPLICIT_STEP).astype(str)
    inside = j_step.isin(held).to_numpy()
    if not inside.any():
        return []
    out = []
    for step, group in ops[inside].groupby(j_step[inside].to_numpy(), sort=False):
        el = group["elapse_us"].to_numpy(dtype=float)
        out.append(SelfCheck(
            "comm_ops_vs_kernels", rank_id, str(step), "fail",
            f"{comm_file} holds {len(group)} op(s) in this step (e.g. {group['op'].iloc[0]}) but {kernel_file} has "
            f"no communication row at all: their HCCL tasks are missing from the kernel table (lost by the device, "
            f"or the files are not from one capture)", 0.0, float(np.nansum(el)), 0.0, f"{comm_file}; {kernel_file}"))
    return out


def ops_vs_kernel_checks(comm, kernels, rank_id, comm_file: str, kernel_file: str,
                         tol: tuple[float, float] = (0.001, 0.01)) -> list[SelfCheck]:
    """``comm_ops_vs_kernels`` per step: communication.json's ops are the kernel table's
    communication rows (``is_comm``), the same names as often, and Σ Elapse equals Σ Duration
    within ``per_row × ops + floor`` us (policy ``self_checks.abs_us_per_row`` /
    ``abs_us_floor``: kernel_details writes Duration with 3 decimals of us).

    Source: msprof-analyze's communication analysis times each op from its HCCL task, so both
    files hold one entry per task. Measured on every fixture with both files (5 ranks, 4-15 ops
    a step): the same name multiset in every step, each op's Elapse within 0.001 us of its row's
    Duration and its start within 0.25 us. A step where they differ means communication.json
    was altered (an op lost under a duplicated key, a step counted under two spellings, an
    unknown kind, another rank's or run's file): fail closed, as the other self-checks.

    Steps: an op's ``step`` label; a kernel row without a Step Id pairs with a bare ``"step"``
    key (:data:`perfgate.ingest.kernels.IMPLICIT_STEP`). Only the steps the kernel table has rows
    in are compared (a step it lacks is ``steps_present``'s: a table cut short). A kernel table
    with no communication row at all fails in each of its steps where communication.json holds
    ops (:func:`_ops_without_rows`: the HCCL tasks were lost). One ``skipped`` check for the rank
    (nothing compared) when no op lies in a step of such a table, or when no op name of
    communication.json is among the kernel table's (another naming: they cannot be paired).
    Returns [] when neither file holds a communication op. A communication.json without any op
    beside a kernel table with communication rows fails in each of their steps."""
    from perfgate.ingest.kernels import IMPLICIT_STEP
    from perfgate.metrics import kernels as km
    ops = comm.ops
    df = kernels.df
    is_comm = df["is_comm"].to_numpy().astype(bool)
    comm_at = np.flatnonzero(is_comm)
    if ops.empty and not len(comm_at):
        return []
    k_names = df["name"].iloc[comm_at].to_numpy(dtype=object).astype(str)
    j_names = ops["op"].to_numpy(dtype=object).astype(str)

    def skipped(why):
        return [SelfCheck("comm_ops_vs_kernels", rank_id, None, "skipped", why,
                          evidence=f"{comm_file}; {kernel_file}")]
    if not len(k_names):
        return _ops_without_rows(ops, df, rank_id, comm_file, kernel_file) or skipped(
            f"{kernel_file} has no communication row to pair communication.json's {len(j_names)} op(s) with")
    if len(j_names) and not np.isin(j_names, k_names).any():
        return skipped(f"no op name of {comm_file} (e.g. {j_names[0]}) is among the communication rows of "
                       f"{kernel_file} (e.g. {k_names[0]}): the files name ops differently and cannot be paired")
    # the kernel table's steps as its category codes (a row without a Step Id: one code more),
    # so no per-row text is made of its million rows
    step_cat = km.as_category(df["step"])
    labels_k = [str(c) for c in step_cat.cat.categories] + [IMPLICIT_STEP]
    codes = step_cat.cat.codes.to_numpy().astype(np.int64)
    codes = np.where(codes < 0, len(labels_k) - 1, codes)
    present = np.bincount(codes, minlength=len(labels_k)) > 0
    k_step = np.asarray(labels_k, dtype=object)[codes[comm_at]]
    j_step = _step_texts(ops["step"], IMPLICIT_STEP)
    k_dur = df["dur_ns"].to_numpy()[comm_at].astype(np.float64) / 1000.0
    j_el = ops["elapse_us"].to_numpy(dtype=float)
    # a step the kernel table has no row in is the steps_present check's (a table cut short):
    # only the steps of the kernel table are compared
    jc = _positions(labels_k, j_step)
    keep = (jc >= 0) & present[np.maximum(jc, 0)]
    if not keep.all():
        j_step, j_names, j_el = j_step[keep], j_names[keep], j_el[keep]
        if not len(j_step):
            return skipped(f"no op of {comm_file} is in a step of {kernel_file}")
    # per step: counts and sums of both sides; per (step, name): json count − kernel count
    steps_codes, steps = pd.factorize(np.concatenate([j_step, k_step]), sort=False)
    nj = len(j_step)
    sj, sk = steps_codes[:nj], steps_codes[nj:]
    ns = len(steps)
    n_j = np.bincount(sj, minlength=ns)
    n_k = np.bincount(sk, minlength=ns)
    sum_j = np.bincount(sj, weights=j_el, minlength=ns)
    sum_k = np.bincount(sk, weights=k_dur, minlength=ns)
    name_codes, names = pd.factorize(np.concatenate([j_names, k_names]), sort=False)
    pair_codes, pairs = pd.factorize(steps_codes.astype(np.int64) * len(names) + name_codes, sort=False)
    cnt_j = np.bincount(pair_codes[:nj], minlength=len(pairs))   # per (step, name): ops in communication.json
    cnt_k = np.bincount(pair_codes[nj:], minlength=len(pairs))   # ... and rows in the kernel table
    delta = cnt_j - cnt_k
    pair_step, pair_name = pairs // len(names), pairs % len(names)
    off = np.flatnonzero(delta != 0)
    first_off = np.full(ns, -1)
    if len(off):
        st_off, at = np.unique(pair_step[off], return_index=True)
        first_off[st_off] = off[at]
    per_row, floor = tol
    tol_us = per_row * np.maximum(n_j, n_k) + floor
    sums_off = ~(np.abs(sum_j - sum_k) <= tol_us)
    names_off = first_off >= 0
    fail = names_off | sums_off
    labels = list(map(str, np.asarray(steps, dtype=object).tolist()))
    # the messages: one format map over the passing steps, one message per failing step
    msg = np.empty(ns, dtype=object)
    ok = np.flatnonzero(~fail)
    msg[ok] = list(map(("{} op(s) of " + comm_file.replace("{", "{{").replace("}", "}}") + " are the communication "
                        "rows of " + kernel_file.replace("{", "{{").replace("}", "}}") +
                        " by name; Σ Elapse {:.3f} us = Σ Duration {:.3f} us").format,
                       n_j[ok].tolist(), sum_j[ok].tolist(), sum_k[ok].tolist()))
    for i in np.flatnonzero(fail).tolist():
        if names_off[i]:
            p = first_off[i]
            msg[i] = (f"op {names[pair_name[p]]} is in {comm_file} {int(cnt_j[p])} "
                      f"time(s) but among the communication rows of {kernel_file} "
                      f"{int(cnt_k[p])} time(s) ({int(n_j[i])} op(s) against "
                      f"{int(n_k[i])} row(s)); the files are not from one capture or communication.json was altered")
        else:
            msg[i] = (f"Σ Elapse of {int(n_j[i])} op(s) in {comm_file} is {sum_j[i]:.3f} us but Σ Duration "
                      f"of the same communication rows of {kernel_file} is {sum_k[i]:.3f} us (difference "
                      f"{sum_j[i] - sum_k[i]:+.3f} us, tolerance {tol_us[i]:.3f} us): the files are not from one "
                      f"capture or communication.json was altered")
    msg = msg.tolist()
    return from_columns(SelfCheck, repeat("comm_ops_vs_kernels"), repeat(rank_id), labels,
                        np.where(fail, "fail", "pass").tolist(), msg, sum_k.tolist(), sum_j.tolist(),
                        tol_us.tolist(), repeat(f"{comm_file}; {kernel_file}"))


_STR_ONLY = frozenset({str})


def _step_texts(step: pd.Series, missing: str) -> np.ndarray:
    """``step.astype("string").fillna(missing).to_numpy(dtype=object)``: the values themselves
    when every one is a str (communication.json's step labels always are; ~0.2 ms less per
    rank), else that conversion."""
    values = step.tolist()
    if _STR_ONLY.issuperset(map(type, values)):   # C-level: no Python call per value
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return step.astype("string").fillna(missing).to_numpy(dtype=object)


def _positions(labels: list, values: np.ndarray) -> np.ndarray:
    """``pd.Index(labels).get_indexer(values)`` (position of each value among the distinct str
    ``labels``, -1 where absent) by a dict when ``labels`` are distinct strs and every value is
    a str; otherwise that call (which refuses repeated labels)."""
    pos = dict(zip(labels, range(len(labels))))
    vals = values.tolist()
    if len(pos) != len(labels) or not _STR_ONLY.issuperset(map(type, labels)) \
            or not _STR_ONLY.issuperset(map(type, vals)):
        return pd.Index(labels).get_indexer(values)
    return np.fromiter(map(pos.get, vals, repeat(-1)), dtype=np.intp, count=len(vals))


def ops_vs_step_trace_checks(comm, step_trace, rank_id, cfile: str, stfile: str, tol: tuple) -> list[SelfCheck]:
    """``comm_ops_vs_step_trace`` per step of a *partial* rank (no kernel table, so
    ``comm_ops_vs_kernels`` cannot link its communication.json to anything): the busy union of
    the step's ops (``[Start Timestamp, + Elapse Time)``, µs) equals step_trace_time.csv's
    Communication within ``abs_us_per_row * ops + abs_us_floor`` (``tol``). torch_npu writes
    Communication as the union of the step's communication tasks, which communication.json's
    ops are (the 2024-2025 captures: equal within 0.001 µs per op). A difference warns: the
    2023-era files (msinsight server test_data) differ by ~0.9 % on every rank, so it cannot
    fail closed; a copy of another rank's file is refused by
    :func:`perfgate.ingest.discover.refuse_copied_rank_files`, since this check passes one
    (rank 0's file in rank 1's folder: 420,174 us against rank 1's Communication 441,708 us).
    Steps in only one file are left to the step checks of ingest."""
    ops = comm.ops
    if ops.empty or step_trace is None or not len(step_trace):
        return []
    st = step_trace.dropna(subset=["step"]).groupby(step_trace["step"].astype(str))["comm_us"].sum()
    steps = sorted(set(map(str, ops["step"])) & set(st.index), key=lambda x: (len(x), x))
    if not steps:
        return []
    code = {s_: i for i, s_ in enumerate(steps)}
    keep = ops["step"].astype(str).isin(code).to_numpy()
    seg = np.array([code[x] for x in ops["step"].astype(str).to_numpy()[keep]], dtype=np.int64)
    start = np.round(ops["start_us"].to_numpy(dtype=float)[keep] * 1000).astype(np.int64)
    end = start + np.round(ops["elapse_us"].to_numpy(dtype=float)[keep] * 1000).astype(np.int64)
    union_us = segmented_union_ns(seg, start, end, len(steps)) / 1000.0
    nops = np.bincount(seg, minlength=len(steps))
    out = []
    for i, step in enumerate(steps):
        want = float(st[step])
        allow = tol[0] * int(nops[i]) + tol[1]
        ok = abs(union_us[i] - want) <= allow
        msg = (f"busy union of {int(nops[i])} op(s) in {cfile} {union_us[i]:,.3f} us "
               + ("equals" if ok else "differs from") + f" {stfile} Communication {want:,.3f} us"
               + ("" if ok else f" (difference {union_us[i] - want:+,.3f} us, tolerance {allow:.3f} us): another "
                                f"rank's or run's communication.json, or an export generation whose Communication "
                                f"is not the ops' union (2023 files differ by ~0.9 %)"))
        out.append(SelfCheck("comm_ops_vs_step_trace", rank_id, step, "pass" if ok else "warn", msg,
                             want, float(union_us[i]), allow, f"{cfile}; {stfile}"))
    return out
