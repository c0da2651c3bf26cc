"""Oracle: pandas wide-table and per-(metric, rank) references (one median per column) for
fingerprint.rank_metrics, the family view and the views, so tests/metrics/test_columnar_steps.py
can compare the per-rank numpy path with them on every capture."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.metrics import kernels as km
from perfgate.metrics.comm import kind_table
from perfgate.metrics.fingerprint import (_ANATOMY, _comm_rows_by_kind, _overlap_and_comm_metrics, _rel, _rows_by,
                                          _rows_text, _samples, _step_sums_and_unions)
from perfgate.metrics.steps import step_table


def rank_metrics(rank, policy, root, anatomy: pd.DataFrame | None = None,
                 kinds: pd.DataFrame | None = None, categories: pd.Series | None = None) -> dict:
    """Per-rank metrics: ``{(name, labels_tuple): (value, evidence, context)}``.

    ``labels_tuple`` is a sorted tuple of (label, value) pairs without the view label;
    ``anatomy`` is the rank's :func:`perfgate.metrics.steps.step_table` (computed if None).
    Pure over ``rank``'s tables.
    """
    out: dict = {}
    kt = rank.kernels
    kfile = _rel(kt.path, root)
    k = kt.df.assign(family=km.family_of(kt.df["name"], policy.family_suffix))
    k = km.rows_where(k, k["step"].notna().to_numpy())
    steps = sorted(pd.unique(k["step"]), key=lambda s: (0, int(s)) if str(s).isdigit() else (1, s))
    nsteps = len(steps)
    out[("step.count", ())] = (float(nsteps), f"{kfile}: steps {', '.join(map(str, steps[:6]))}", {})
    out[("kernel.invalid_rows", ())] = (float(len(kt.invalid_rows)), f"{kfile} {_rows_text(kt.invalid_rows)}"
                                        if kt.invalid_rows else kfile, {})
    out[("kernel.unassigned_rows", ())] = (float(kt.unassigned_rows), f"{kfile} blank Step Id", {})

    def put_counts(name, key, label):
        wide = km.per_step_counts(k, key).reindex(index=steps, fill_value=0)
        if wide.empty:
            return
        srt = np.sort(wide.to_numpy(), axis=0)
        med, lo, hi = srt[(len(srt) - 1) // 2], srt[0], srt[-1]
        evidence = _rows_by(k, key, kfile)
        for i, col in enumerate(wide.columns):
            out[(name, ((label, str(col)),))] = (float(med[i]), evidence.get(col, kfile),
                                                 {"per_step_min": int(lo[i]), "per_step_max": int(hi[i])})

    put_counts("kernel.calls_per_step", "family", "family")
    if kt.type_available:
        put_counts("optype.calls_per_step", "op_type", "type")
    totals = k.groupby("step").size().reindex(steps, fill_value=0)
    out[("kernel.total_calls_per_step", ())] = (km.median_low(totals.to_numpy()),
                                                f"{kfile} {len(k)} rows in {nsteps} step(s)", {})

    fam_dur = km.per_step_sum_dur(k, "family").reindex(index=steps, fill_value=0)
    ranked = sorted(((str(f), float(v) / 1000.0) for f, v in fam_dur.median(axis=0).items()),
                    key=lambda fv: (-fv[1], fv[0]))
    fam_med = pd.Series(dict(ranked), dtype="float64")
    out[("kernel.topn", ())] = (None, kfile, {"ranked": list(fam_med.index),
                                              "sum_dur_us": [float(v) for v in fam_med.values]})
    for fam in list(fam_med.index[: policy.top_n + policy.top_n_slack]):
        out[("kernel.time_us", (("family", str(fam)),))] = (float(fam_med[fam]), kfile, {})

    step_sum = k.groupby("step")["dur_ns"].sum().reindex(steps, fill_value=0)
    if kt.core_available:
        core = k.assign(core=km.canonical_core(k))
        wide = km.per_step_sum_dur(core, "core").reindex(index=steps, fill_value=0)
        shares = wide.div(step_sum.replace(0, np.nan), axis=0).fillna(0.0)
        for col in shares.columns:
            out[("share.core_type", (("core_type", str(col)),))] = (
                float(shares[col].median()), f"{kfile} (Accelerator Core)", _samples(shares[col]))
    if kt.type_available and kt.core_available:
        cat = k.assign(category=categories.loc[k.index] if categories is not None
                       else km.categorize(k, policy.categories))
        wide = km.per_step_sum_dur(cat, "category").reindex(index=steps, fill_value=0)
        shares = wide.div(step_sum.replace(0, np.nan), axis=0).fillna(0.0)
        evidence = _rows_by(cat, "category", kfile)
        for col in shares.columns:
            out[("share.category", (("category", str(col)),))] = (
                float(shares[col].median()), evidence.get(col, kfile), _samples(shares[col]))

    if not steps:
        return out
    sums, unions = _step_sums_and_unions(k)
    out[("device.time_us", (("caliber", terms.SUM_DURATION),))] = (
        float(np.median(sums)), f"{kfile} Σ Duration(us)", dict(_samples(sums), caliber=terms.SUM_DURATION))
    out[("device.time_us", (("caliber", terms.BUSY_UNION),))] = (
        float(np.median(unions)), f"{kfile} merged intervals", dict(_samples(unions), caliber=terms.BUSY_UNION))

    _overlap_and_comm_metrics(rank, root, out)

    if anatomy is None:
        anatomy = step_table(rank, policy.findings)
    if len(anatomy):
        ev = f"{kfile} rows {int(anatomy['first_row'].min())}-{int(anatomy['last_row'].max())}"
        for name, col in _ANATOMY.items():
            v = anatomy[col].dropna()
            if len(v):
                out[(name, ())] = (float(v.median()), ev, _samples(v))
    if kinds is None:
        kinds = kind_table(k)
    kind_rows = _comm_rows_by_kind(k) if len(kinds) else {}
    for kind, g in kinds.groupby("kind"):
        per = g.set_index("step").reindex(steps, fill_value=0)
        ev = f"{kfile} {_rows_text(kind_rows.get(kind, []))}"
        lab = (("kind", str(kind)),)
        out[("comm.calls_per_step", lab)] = (km.median_low(per["calls"].to_numpy()), ev, {})
        out[("comm.time_us", lab)] = (float(per["sum_us"].median()), ev, {})
        out[("comm.exposed_us", lab)] = (float(per["exposed_us"].median()), ev, {})
    return out


# perfgate.metrics.operators before the per-rank numpy rewrite
def share_table(k: pd.DataFrame, keys: list) -> pd.DataFrame:
    """ΣDuration and share (ratio of the rank's ΣDuration) per combination of ``keys``
    (e.g. ``["phase", "category"]``) over all rows of ``k``; columns ``*keys, sum_dur_us, share``."""
    total = float(k["dur_ns"].sum())
    g = k.groupby(keys, observed=True)["dur_ns"].sum().reset_index()
    g["sum_dur_us"] = g["dur_ns"] / 1000.0
    g["share"] = g["dur_ns"] / total if total else 0.0
    for c in keys:
        g[c] = g[c].astype(str)
    return g.drop(columns="dur_ns").sort_values("sum_dur_us", ascending=False).reset_index(drop=True)


def per_step_shares(k: pd.DataFrame, key: str, steps) -> dict:
    """{value of ``key``: median over steps of its ΣDuration share of the step} (ratio)."""
    wide = km.per_step_sum_dur(k, key).reindex(index=list(steps), fill_value=0)
    if wide.empty:
        return {}
    step_sum = k.groupby("step", observed=True)["dur_ns"].sum().reindex(list(steps), fill_value=0)
    den = step_sum.to_numpy(dtype=float)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(den > 0, wide.to_numpy(dtype=float) / np.where(den > 0, den, 1.0), 0.0)
    med = np.median(shares, axis=0)
    return {str(c): float(v) for c, v in zip(wide.columns, med)}


from perfgate.metrics.operators import PIPE_STAGES, _bound, _dominant, _memory_bound, _MEMORY_STAGES, _stage_arrays  # noqa: E402


def family_table(k: pd.DataFrame, mixed_within: float = 0.10) -> pd.DataFrame:
    """One row per kernel family over all step-assigned rows of one rank.

    ``k`` needs columns ``family``, ``category``, ``phase``, ``op_class`` besides the kernel
    table's. Columns: ``family``, ``calls`` (rows), ``calls_per_step`` (lower median over
    steps), ``sum_dur_us`` (ΣDuration), ``share`` (of the rank's ΣDuration, ratio),
    ``category`` / ``phase`` / ``core_type`` / ``op_class`` (the value with the largest
    ΣDuration in the family), ``bound_stage``, ``bound``, ``memory_bound`` and one
    ``<stage>_us`` column per pipe stage (NaN without pipe data). Sorted by ΣDuration, then name.
    Aggregation is one bincount per column over the family codes.
    """
    cols = ["family", "calls", "calls_per_step", "sum_dur_us", "share", "category", "phase", "core_type",
            "op_class", "bound_stage", "bound", "memory_bound"] + [f"{s}_us" for s in PIPE_STAGES]
    if k.empty:
        return pd.DataFrame(columns=cols)
    fam = km.as_category(k["family"])
    codes = fam.cat.codes.to_numpy().astype(np.int64)
    nf = len(fam.cat.categories)
    w = k["dur_ns"].to_numpy(dtype=float)
    total = float(w.sum())
    calls = np.bincount(codes, minlength=nf)
    used = calls > 0
    w_fam = np.bincount(codes, weights=w, minlength=nf)  # ΣDuration (ns) per family
    out = {"family": np.array([str(x) for x in fam.cat.categories], dtype=object), "calls": calls,
           "sum_dur_us": w_fam / 1000.0}
    out["share"] = out["sum_dur_us"] * 1000.0 / total if total else np.zeros(nf)
    per_step = km.per_step_counts(k, "family")
    srt = np.sort(per_step.to_numpy(), axis=0)
    low = dict(zip(per_step.columns, srt[(len(srt) - 1) // 2])) if len(srt) else {}   # lower median
    out["calls_per_step"] = np.array([float(low.get(f, 0.0)) for f in fam.cat.categories], dtype=float)
    for col in ("category", "phase", "core_type", "op_class"):
        out[col] = _dominant(codes, nf, k[col], w)
    # per-stage sums straight from the columns' arrays (no frame of stage times); where every
    # value is finite the masks are skipped, which gives the same sums
    sums = np.full((nf, len(PIPE_STAGES)), np.nan)
    for j, (s, v) in enumerate(_stage_arrays(k).items()):
        ok = np.isfinite(v)
        if ok.all():
            sums[:, j] = np.where(used, np.bincount(codes, weights=v, minlength=nf), np.nan)
        elif ok.any():
            has = np.bincount(codes[ok], minlength=nf) > 0
            sums[:, j] = np.where(has, np.bincount(codes, weights=np.where(ok, v, 0.0), minlength=nf), np.nan)
    ratios = {}
    for s in _MEMORY_STAGES:  # the only ratios :func:`_memory_bound` reads
        if f"{s}_ratio" in k:
            r = k[f"{s}_ratio"].to_numpy(dtype=float)
            ok = np.isfinite(r)
            if ok.all():
                num = np.bincount(codes, weights=r * w, minlength=nf)
                den = w_fam
            else:
                num = np.bincount(codes, weights=np.where(ok, r * w, 0.0), minlength=nf)
                den = np.bincount(codes, weights=np.where(ok, w, 0.0), minlength=nf)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratios[s] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    stage, bound, mem = [], [], []
    for i, cls in enumerate(out["op_class"]):
        s_, b_ = _bound(sums[i], cls, mixed_within)
        stage.append(s_)
        bound.append(b_)
        mem.append(_memory_bound({s: r[i] for s, r in ratios.items()}) if b_ not in ("communication", "aicpu")
                   else float("nan"))
    out["bound_stage"], out["bound"], out["memory_bound"] = np.array(stage, dtype=object), np.array(bound, dtype=object), np.array(mem)
    for j, s in enumerate(PIPE_STAGES):
        out[f"{s}_us"] = sums[:, j]
    df = pd.DataFrame({c: out[c] for c in cols})[used]
    return df.sort_values(["sum_dur_us", "family"], ascending=[False, True]).reset_index(drop=True)


# perfgate.metrics.comm.op_identity_checks before the numpy rewrite (one pandas group-by)
from perfgate.model import SelfCheck  # noqa: E402


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
    # per step at once (steps in sorted order, as groupby gives them): op count, largest
    # |difference|, ops off, and the row of the worst op off
    absd = diff.abs()
    off = absd > tol_us
    per = pd.DataFrame({"step": ops["step"], "a": absd, "bad": off}).groupby("step", sort=True).agg(
        n=("a", "size"), mx=("a", "max"), nbad=("bad", "sum"))
    worst = absd[off].groupby(ops["step"][off]).idxmax()  # first row of the largest difference
    for step, n, mx, nbad in zip(per.index, per["n"].tolist(), per["mx"].tolist(), per["nbad"].tolist()):
        if not nbad:
            out.append(SelfCheck("comm_op_identity", rank_id, str(step), "pass",
                                 f"{n} op(s): Elapse = Transit + Wait + Idle (largest difference "
                                 f"{mx:.6f} us)", evidence=rel_path))
        else:
            i = worst[step]
            op = ops.loc[i]
            out.append(SelfCheck(
                "comm_op_identity", rank_id, str(step), "fail",
                f"{op['op']}: Elapse {op['elapse_us'] / 1000:.6f} ms ≠ Transit + Wait + Idle "
                f"{(op['transit_us'] + op['wait_us'] + op['idle_us']) / 1000:.6f} ms "
                f"({int(nbad)} op(s) off by more than {tol_us} us, self_checks.comm_op_identity_abs_us)",
                expected=float(op["elapse_us"]),
                observed=float(op["transit_us"] + op["wait_us"] + op["idle_us"]), tolerance=tol_us,
                evidence=f"{rel_path} step{step}.{op['kind']}.{op['op']}"))
    return out


# perfgate.metrics.comm.kind_table before its frame was built from columns (one dict per group)
from perfgate.metrics.comm import _uncovered_per_row, kind_of  # noqa: E402


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
    cats = step_cat.cat.categories
    out = [{"step": str(cats[code_at_rank[g // len(kind_names)]]), "kind": str(kind_names[g % len(kind_names)]),
            "calls": int(c), "sum_us": float(sm) / 1000.0, "exposed_us": float(ex) / 1000.0}
           for g, c, sm, ex in zip(groups.tolist(), calls.tolist(), sums.tolist(), exp.tolist())]
    return pd.DataFrame(out, columns=cols)


# --- fingerprint._views as one lookup and one reduction per metric ---------------------------
from perfgate.metrics import registry  # noqa: E402
from perfgate.metrics.fingerprint import _view_samples  # noqa: E402
from perfgate.model import MetricValue, metric_key  # noqa: E402


def _topn_views(per_rank, policy, r0) -> dict[str, MetricValue]:
    """fingerprint._topn_views before its ranks x families array: one np.median per family."""
    from collections import defaultdict
    d = registry.get("kernel.topn")
    depth = policy.top_n + policy.top_n_slack
    r0ctx = per_rank[r0][("kernel.topn", ())][2]
    med = defaultdict(list)
    families = set().union(*[set(mm[("kernel.topn", ())][2]["ranked"]) for mm in per_rank.values()])
    for r, m in per_rank.items():
        ctx = m[("kernel.topn", ())][2]
        got = dict(zip(ctx["ranked"], ctx["sum_dur_us"]))
        for fam in families:
            med[fam].append(got.get(fam, 0.0))
    p50 = sorted(((float(np.median(v)), f) for f, v in med.items()), key=lambda x: (-x[0], x[1]))
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

from perfgate.metrics.fingerprint import _skew_value  # noqa: E402


def _views_per_metric(per_rank: dict[int, dict], policy, kernel_ranks=None) -> dict[str, MetricValue]:
    """fingerprint._views before its reductions over ranks were batched: one np.median / max /
    mean per metric, absent ranks filled in dicts, one _view_samples per metric."""
    ranks = sorted(per_rank)
    r0 = ranks[0]
    holders = set(ranks if kernel_ranks is None else kernel_ranks)
    by_key: dict = {}   # (name, labels) -> [(rank, value, samples)] in rank order
    for r in ranks:
        for key, ent in per_rank[r].items():
            got = by_key.get(key)
            if got is None:
                by_key[key] = got = []
            got.append((r, ent[0], ent[2].get("samples")))
    out: dict[str, MetricValue] = {}
    ranked = None   # rank -> {family: ΣDuration per step (us)} of every family, for kernel.time_us
    for name, labels in sorted(by_key):
        d = registry.get(name)
        labels_d = dict(labels)
        if name == "kernel.topn":
            held = {r: m for r, m in per_rank.items() if (name, labels) in m}
            out.update(_topn_views(held, policy, min(held)))
            continue
        have = by_key[(name, labels)]
        samp = {r: sm for r, _, sm in have}
        if name == "kernel.time_us" and len(have) < len(ranks):
            # recorded per rank for its Top-N + slack families only: a rank where this family ranks
            # lower holds its true ΣDuration in its kernel.topn ranking (0 only where the family
            # does not run), never a 0 that halves the p50 and makes a 200 % rank skew
            if ranked is None:
                ranked = {r: dict(zip(m[("kernel.topn", ())][2]["ranked"], m[("kernel.topn", ())][2]["sum_dur_us"]))
                          for r, m in per_rank.items() if ("kernel.topn", ()) in m}
            held = {r: v for r, v, _ in have}
            fam = labels_d.get("family")
            vals = {r: held[r] if r in held else ranked[r].get(fam, 0.0) for r in ranks if r in ranked}
        elif d.absent_is_zero and len(have) < len(ranks) and any(r not in samp for r in holders):
            held = {r: v for r, v, _ in have}
            vals = {r: held.get(r, 0.0) for r in ranks if r in held or r in holders}
        else:
            vals = {r: v for r, v, _ in have}
        if not vals:
            continue
        partial = {"over_ranks": sorted(vals)} if len(vals) < len(ranks) else {}
        view_samples = _view_samples(samp, ranks, r0)
        caliber = d.caliber or labels_d.get("caliber")
        ev0 = per_rank[r0].get((name, labels)) or (
            (None, per_rank[r0][("kernel.topn", ())][1], {}) if name == "kernel.time_us" and ranked and r0 in ranked
            else (None, "absent on this rank", {}))
        ev0 = (ev0[0], ev0[1], {k: v for k, v in ev0[2].items() if k != "samples"})
        arr = np.array(list(vals.values()), dtype=float)
        views = {
            terms.VIEW_RANK0: (vals.get(r0), f"rank {r0}: {ev0[1]}", dict(ev0[2], rank=r0)),
            terms.VIEW_P50: (float(np.median(arr)), f"median of {len(vals)} rank(s)",
                             {"ranks": len(vals), **partial}),
            terms.VIEW_MAX: (float(arr.max()), f"max over {len(vals)} rank(s)",
                             {"rank": int(list(vals)[int(arr.argmax())]), **partial}),
        }
        for view, (val, ev, ctx) in views.items():
            if val is None:
                continue
            key = metric_key(name, **labels_d, view=view)
            out[key] = MetricValue(key=key, name=name, labels=dict(labels_d, view=view),
                                   value=float(val), unit=d.unit, caliber=caliber, tier=d.tier,
                                   evidence=ev, context=ctx, samples=view_samples.get(view))
        mean = float(arr.mean())
        if len(arr) >= 2 and mean > 0 and name != "step.count":
            sd = registry.get("rank.skew_ratio")
            slabels = dict(labels_d, metric=name)
            key = metric_key("rank.skew_ratio", **slabels)
            out[key] = MetricValue(
                key=key, name="rank.skew_ratio", labels=slabels, value=float((arr.max() - arr.min()) / mean),
                unit=sd.unit, caliber=caliber, tier=sd.tier,
                evidence=f"(max − min) / mean of {len(arr)} rank(s): " + ", ".join(
                    f"rank {r} {_skew_value(v, d.unit)}" for r, v in list(vals.items())[:8]),
                context={"min_rank": int(list(vals)[int(arr.argmin())]),
                         "max_rank": int(list(vals)[int(arr.argmax())])})
    return out
