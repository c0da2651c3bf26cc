"""Oracle: fingerprint.rank_metrics as it was before the per-rank numpy rewrite (issue 21,
pandas wide tables and one median per column), kept so tests/test_columnar_steps.py can compare
old and new on every capture."""
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
