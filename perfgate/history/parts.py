"""Parts of the step over history: the same judgement as a check (:mod:`perfgate.compare.parts`).

A share's series (``share.*``, ``block.share``, ``pipe.bound_share``) moves whenever any other part
moves, and so do the step ratios ``step.exposed_comm_ratio`` and ``step.underfeed_ratio``.
``history trend`` therefore segments, for such a part, run 0's own time plus the excess a check of
run ``i`` against run 0 would find::

    v_i = T_0 + E_i,    E_i = excess of T_i beyond range_of(T_0, s_i)   (us per step)
    s_i = median over compute families f of (T_i(f) / n_i(f)) / (T_0(f) / n_0(f))

with ``T_i`` the part's own time in run ``i`` (a share times the device ΣDuration per step,
``device.time_us{caliber=sum_duration}``; exposed communication ``step.comm_not_overlapped_us``;
idle ``step.bubble_us``), ``s_i`` the check's device scale of run ``i`` against run 0 (families
holding at least :data:`perfgate.compare.parts.MIN_FAMILY_SHARE` of run 0's ΣDuration) and
:func:`perfgate.compare.parts.range_of` the own times the device's speed explains. A part that only
moved with the device keeps ``v = T_0``, so a change point of ``v`` is a change a check would call
one, and nothing has to be filtered afterwards. Runs missing the inputs keep ``v_i`` unknown (NaN).
Reads the history database; no writes.
"""
from __future__ import annotations

import statistics

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.compare.parts import (MIN_FAMILIES, MIN_FAMILY_SHARE, PART_METRICS, RATIO_PARTS, excess, is_comm_family,
                                    range_of)
from perfgate.model import metric_key, parse_metric_key


def is_part(key: str) -> bool:
    """Is metric ``key`` (``name{labels}``) a part of the step, trended on its own time rather than
    on its raw share or ratio?"""
    return parse_metric_key(key)[0] in PART_METRICS


def _by_run(hs, key: str, branch) -> dict:
    s = hs.series(key, branch=branch)
    return dict(zip(s["run_id"].astype(int), pd.to_numeric(s["value"], errors="coerce").astype(float)))


def normalised_part_series(hs, key: str, series: pd.DataFrame, branch=None, cache: dict | None = None) -> pd.DataFrame:
    """``series`` (one part metric, rows in time order with ``run_id`` and ``value``) with ``value``
    replaced by ``v_i`` of the module doc (run 0's own time plus run i's excess, us per step), the recorded share
    or ratio kept in ``share`` and the part's own time per step in ``own``. ``cache`` ({key: {run_id:
    value}}) saves re-reading the family series."""
    cache = {} if cache is None else cache

    def get(k):
        if k not in cache:
            cache[k] = _by_run(hs, k, branch)
        return cache[k]

    name, labels = parse_metric_key(key)
    view = labels.get("view")
    out = series.copy()
    out["share"] = out["value"]
    if out.empty:
        return out
    runs = [int(r) for r in out["run_id"]]
    dev = get(metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))
    if name in RATIO_PARTS:
        own_of = get(metric_key(RATIO_PARTS[name][0], view=view))
        own = [own_of.get(r, np.nan) for r in runs]
    else:
        own = [float(p) * dev[r] if r in dev and np.isfinite(p) else np.nan for r, p in zip(runs, out["value"])]
    ref = runs[0]
    d0 = dev.get(ref)
    usable = []
    if d0 and np.isfinite(d0):
        for k in hs.keys("share.family{"):
            kl = parse_metric_key(k)[1]
            if kl.get("view") != view or is_comm_family(kl.get("family")):
                continue
            p = get(k)
            n = get(metric_key("kernel.calls_per_step", family=kl.get("family"), view=view))
            p0, n0 = p.get(ref), n.get(ref)
            if p0 and n0 and np.isfinite(p0) and p0 >= MIN_FAMILY_SHARE:
                usable.append((p, n, p0 * d0 / n0))

    def first(metric, **labels):
        v = get(metric_key(metric, view=view, **labels)).get(ref)
        return v if v is not None and np.isfinite(v) else None
    parts = {"comm": first("step.comm_us"), "overlap": first("step.overlapped_us"),
             "busy": first("device.time_us", caliber=terms.BUSY_UNION)}
    t0 = own[0]
    vals = []
    for r, t in zip(runs, own):
        d = dev.get(r)
        ratios = [(p[r] * d / n[r]) / pc0 for p, n, pc0 in usable
                  if d and p.get(r) and n.get(r) and np.isfinite(p[r]) and np.isfinite(n[r])]
        s = float(statistics.median(ratios)) if len(ratios) >= MIN_FAMILIES else 1.0
        if not np.isfinite(t) or not np.isfinite(t0):
            vals.append(np.nan)
            continue
        lo, hi = range_of(name, t0, s, **parts)
        vals.append(t0 + excess(t, lo, hi))
    out["value"] = vals
    out["own"] = own
    return out
