"""Parts of the whole over history: the same judgement as a check (:mod:`perfgate.compare.composition`).

A share's series moves whenever any other part moves. ``history trend`` therefore segments,
for a part metric (``share.*``, ``block.share``, ``pipe.bound_share``), the part's own ΣDuration
relative to the device scale, expressed as a share of the first run's device ΣDuration::

    v_i = p_i · (D_i / D_0) / s_i,   s_i = median_f ( (T_i(f)/n_i(f)) / (T_0(f)/n_0(f)) )

with ``p`` the share, ``D`` the device ΣDuration per step (``device.time_us{caliber=sum_duration}``),
``T`` / ``n`` a kernel family's ΣDuration / calls per step in the same view, over the families
holding at least :data:`perfgate.compare.composition.MIN_FAMILY_SHARE` of run 0's ΣDuration
(the median-of-ratios scale of Anders & Huber 2010, run ``i`` against run 0 of the series).
An unchanged part keeps ``v`` constant however the others move; device-wide drift keeps every
``v`` constant; one family getting faster lowers only its own parts. Runs missing the inputs
keep their plain share (``v_i = p_i``). Reads the history database; no writes.
"""
from __future__ import annotations

import statistics

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.compare.composition import MIN_FAMILY_SHARE, PART_METRICS
from perfgate.model import metric_key, parse_metric_key


def is_part(key: str) -> bool:
    """Is metric ``key`` (``name{labels}``) a part of the whole (a share in ``PART_METRICS``),
    trended on its normalised series rather than its raw share?"""
    return parse_metric_key(key)[0] in PART_METRICS


def _by_run(hs, key: str, branch) -> dict:
    s = hs.series(key, branch=branch)
    return dict(zip(s["run_id"].astype(int), pd.to_numeric(s["value"], errors="coerce").astype(float)))


def normalised_part_series(hs, key: str, series: pd.DataFrame, branch=None, cache: dict | None = None) -> pd.DataFrame:
    """``series`` (one part metric, rows in time order with ``run_id`` and ``value``) with
    ``value`` replaced by the normalised part ``v_i`` of the module doc and the plain share kept
    in ``share``. ``cache`` ({key: {run_id: value}}) saves re-reading the family series."""
    cache = {} if cache is None else cache

    def get(k):
        if k not in cache:
            cache[k] = _by_run(hs, k, branch)
        return cache[k]

    view = parse_metric_key(key)[1].get("view")
    out = series.copy()
    out["share"] = out["value"]
    if out.empty:
        return out
    runs = [int(r) for r in out["run_id"]]
    dev = get(metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))
    fams = [k for k in hs.keys("kernel.time_us{") if parse_metric_key(k)[1].get("view") == view]
    ref = runs[0]
    d0 = dev.get(ref)
    if not d0 or not np.isfinite(d0):
        return out
    usable = []
    for k in fams:
        t = get(k)
        fam = parse_metric_key(k)[1].get("family")
        n = get(metric_key("kernel.calls_per_step", family=fam, view=view))
        t0, n0 = t.get(ref), n.get(ref)
        if t0 and n0 and np.isfinite(t0) and t0 / d0 >= MIN_FAMILY_SHARE:
            usable.append((t, n, t0 / n0))
    if len(usable) < 3:
        return out
    vals = []
    for r, p in zip(runs, out["value"]):
        d = dev.get(r)
        ratios = [(t[r] / n[r]) / pc0 for t, n, pc0 in usable
                  if t.get(r) and n.get(r) and np.isfinite(t[r]) and np.isfinite(n[r])]
        if not d or len(ratios) < 3 or not np.isfinite(p):
            vals.append(p)
            continue
        vals.append(float(p) * (d / d0) / float(statistics.median(ratios)))
    out["value"] = vals
    return out
