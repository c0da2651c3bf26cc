"""Parts of the whole over history: the same judgement as a check (:mod:`perfgate.compare.composition`).

A share's series moves whenever any other part moves. ``history trend`` therefore segments,
for a part metric (``share.*``, ``block.share``, ``pipe.bound_share``), the part's own ΣDuration
relative to the device scale, expressed as the share it would have had in run 0 had only it
changed (the check's ``Δ*`` with run 0 as the baseline)::

    q_i = (p_i · D_i) / (p_0 · D_0) / s_i,   v_i = p_0 · q_i / (p_0 · q_i + 1 − p_0),
    s_i = median_f ( (T_i(f)/n_i(f)) / (T_0(f)/n_0(f)) )

with ``p`` the share, ``D`` the device ΣDuration per step (``device.time_us{caliber=sum_duration}``),
``T`` / ``n`` a kernel family's ΣDuration / calls per step in the same view, over the families
holding at least :data:`perfgate.compare.composition.MIN_FAMILY_SHARE` of run 0's ΣDuration
(the median-of-ratios scale of Anders & Huber 2010, run ``i`` against run 0 of the series).
An unchanged part keeps ``v`` constant however the others move; device-wide drift keeps every
``v`` constant; one family getting faster lowers only its own parts. Runs missing the inputs
keep their plain share (``v_i = p_i``). A change point the part's own time does not back (an
improvement whose own ΣDuration did not fall, a communication part's regression whose own
ΣDuration did not grow: :func:`own_time_disagrees`) is a consequence of other parts and is not
reported, as a check calls it unchanged (seventh audit round: compute ×0.7 made the Comm shares
"confirmed" regressions in ``history trend``). Reads the history database; no writes.
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
    p0 = float(out["value"].iloc[0])
    if not np.isfinite(p0) or p0 <= 0:
        return out
    vals, own = [], []
    for r, p in zip(runs, out["value"]):
        d = dev.get(r)
        ratios = [(t[r] / n[r]) / pc0 for t, n, pc0 in usable
                  if t.get(r) and n.get(r) and np.isfinite(t[r]) and np.isfinite(n[r])]
        if not d or len(ratios) < 3 or not np.isfinite(p):
            vals.append(p)
            own.append(np.nan)
            continue
        r_own = float(p) * d / (p0 * d0)          # own ΣDuration per step against run 0's
        q = r_own / float(statistics.median(ratios))
        vals.append(p0 * q / (p0 * q + 1 - p0))   # run 0's share had only this part changed
        own.append(r_own)
    out["value"] = vals
    out["own"] = own
    return out


def own_time_disagrees(key: str, series: pd.DataFrame, cp) -> bool:
    """Whether change point ``cp`` of part ``key`` on its normalised ``series`` (with ``own``,
    :func:`normalised_part_series`) is a consequence of other parts, as a check judges it
    (:mod:`perfgate.compare.composition`): an improvement whose own ΣDuration per step did not
    fall by more than ``OWN_CHANGE`` (5 %), or a regression of a communication part whose own
    ΣDuration did not grow by as much (communication time is set by the links and the other
    ranks, not by this device's speed). Medians of ``own`` over the runs the change point
    compares; False when ``own`` is unknown there."""
    from types import SimpleNamespace

    from perfgate.compare.composition import is_comm_part, own_time_backs
    if "own" not in series:
        return False
    own = pd.to_numeric(series["own"], errors="coerce").to_numpy(dtype=float)
    before = own[max(0, cp.index - cp.n_before):cp.index]
    after = own[cp.index:cp.index + cp.n_after]
    before, after = before[np.isfinite(before)], after[np.isfinite(after)]
    if not len(before) or not len(after) or float(np.median(before)) <= 0:
        return False
    ratio = float(np.median(after)) / float(np.median(before))
    comm = is_comm_part(SimpleNamespace(labels=parse_metric_key(key)[1]))
    return not own_time_backs(cp.direction, ratio, comm)


def exposure_consequence(hs, key: str, series: pd.DataFrame, cp, policy, branch=None, cache: dict | None = None) -> bool:
    """Whether change point ``cp`` of exposed communication (``step.exposed_comm_ratio``,
    ``step.comm_not_overlapped_us``) only followed the compute around it, as a check judges it
    (:func:`perfgate.compare.composition._exposure_consequence`): over the same runs (medians
    before / after, by run id), Computing (``step.computing_us``) moved the other way beyond its
    policy tolerance while communication time (``step.comm_us``) stayed within its own, and a
    regression's step time (``step.time_us``) did not regress beyond its tolerance. False when a
    series is missing."""
    from perfgate.compare.composition import _EXPOSURE
    name, labels = parse_metric_key(key)
    if name not in _EXPOSURE or cp.direction not in (terms.REGRESSION, terms.IMPROVEMENT):
        return False
    cache = {} if cache is None else cache
    view = labels.get("view")
    runs = [int(r) for r in series["run_id"]]
    before_runs = runs[max(0, cp.index - cp.n_before):cp.index]
    after_runs = runs[cp.index:cp.index + cp.n_after]

    def moved(metric: str):
        """(relative change of the medians, the policy allowance of that change) or None."""
        k = metric_key(metric, view=view)
        if k not in cache:
            cache[k] = _by_run(hs, k, branch)
        vals = cache[k]
        b = [vals[r] for r in before_runs if r in vals and np.isfinite(vals[r])]
        a = [vals[r] for r in after_runs if r in vals and np.isfinite(vals[r])]
        rule = policy.rule_for(metric, {"view": view})
        if not b or not a or rule is None or not float(np.median(b)):
            return None
        mb, ma = float(np.median(b)), float(np.median(a))
        return ma - mb, rule.tolerance.allowance(mb)

    computing, comm = moved("step.computing_us"), moved("step.comm_us")
    if computing is None or comm is None or abs(comm[0]) > comm[1] or abs(computing[0]) <= computing[1]:
        return False
    if (computing[0] < 0) != (cp.direction == terms.REGRESSION):   # Computing moved the other way
        return False
    if cp.direction == terms.REGRESSION:
        step = moved("step.time_us")
        if step is not None and step[0] > step[1]:
            return False
    return True
