"""Trend orchestration over the run history: which metric keys to watch (with the direction the
policy gives them), each key's kept runs split by job configuration (series key), and the
change points of every such series (:func:`perfgate.history.changepoints.change_points`, with the
policy's ``history:`` settings: ``penalty``, ``min_size``, ``alpha``, ``min_rel``, ``min_after``).

Used by ``perfgate history trend`` and ``perfgate history report``; nothing is printed here.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perfgate import terms
from perfgate.errors import PerfgateError
from perfgate.history.changepoints import change_points, trend_notes
from perfgate.model import parse_metric_key


@dataclass(frozen=True)
class Trend:
    """One metric's kept runs of one job configuration and their change points.

    ``series`` has the columns of :meth:`perfgate.history.store.HistoryStore.series` (one row per
    kept run, oldest first, value in the metric's unit); ``series_key`` is the job configuration
    (empty when all runs share one); ``change_points`` are
    :class:`perfgate.history.changepoints.ChangePoint`."""
    key: str
    series_key: str
    series: pd.DataFrame
    change_points: list

    def __iter__(self):  # (key, series_key, series, change points), as trend_notes expects
        return iter((self.key, self.series_key, self.series, self.change_points))


def gated_keys(hs, policy) -> list[tuple[str, str]]:
    """``[(metric key, direction)]`` for every recorded key whose policy rule is gated and whose
    view is one of the policy's ``gate_views``."""
    out = []
    for k in hs.keys():
        name, labels = parse_metric_key(k)
        rule = policy.rule_for(name, labels)
        if rule and rule.gated and terms.view_gated(labels.get("view"), policy.gate_views):
            out.append((k, rule.direction))
    return out


def require_metric(hs, metric: str) -> None:
    """Raise when ``metric`` was never recorded in ``hs`` (a p50 key is recorded too where runs of
    several pipeline stages record its stage p50s: :meth:`HistoryStore.series` reads its job-level value).

    Raises:
        PerfgateError (exit 2): naming up to 8 recorded keys of the same metric name."""
    if metric in hs.keys() or hs.has_key(metric):
        return
    close = [k for k in hs.keys(metric.split("{")[0])][:8]
    raise PerfgateError(f"no recorded metric {metric!r}" + (f"; similar: {close}" if close else ""))


def trends(hs, policy, keys, branch: str | None = None) -> list[Trend]:
    """Change points of every (key, series key) over the kept runs of ``branch`` (all branches
    when None), in the order of ``keys`` (``[(metric key, direction)]``). Parts of the step (shares,
    exposed-communication and underfeed ratios) are trended on run 0's own time plus the excess a
    check against run 0 would find (:mod:`perfgate.history.parts`): more is worse."""
    from perfgate.history.parts import is_part, normalised_part_series
    h = policy.history
    res, cache = [], {}
    for key, direction in keys:
        s = hs.series(key, branch=branch, with_set=True)
        s = s[s["status"] == "kept"]
        for sk, part in s.groupby("series_key", sort=False, dropna=False):
            part = part.reset_index(drop=True)
            if is_part(key):   # the part's own time relative to the device, as a check judges it
                part = normalised_part_series(hs, key, part, branch, cache)
                direction = terms.LOWER_IS_BETTER
            cps = change_points(part, key, direction=direction, penalty=float(h["penalty"]),
                                min_size=int(h["min_size"]), alpha=float(h["alpha"]),
                                min_rel=float(h["min_rel"]), min_after=int(h["min_after"]))
            res.append(Trend(key, sk, part, cps))
    return res


@dataclass(frozen=True)
class TrendReport:
    """What ``perfgate history trend`` shows: the keys examined (``[(key, direction)]``), one
    :class:`Trend` per series, and :func:`perfgate.history.changepoints.trend_notes` of them
    (``{"per_series": [note per trend], "summary": [lines]}``)."""
    metric: str | None
    keys: list
    trends: list
    notes: dict

    @property
    def change_point_count(self) -> int:
        return sum(len(t.change_points) for t in self.trends)


def trend_report(hs, policy, metric: str | None = None, branch: str | None = None) -> TrendReport:
    """Change points of one metric (``metric``; direction from its policy rule, else lower is
    better) or of every gated metric (``metric`` None).

    Raises:
        PerfgateError (exit 2): ``metric`` was never recorded (see :func:`require_metric`)."""
    if metric:
        name, labels = parse_metric_key(metric)
        rule = policy.rule_for(name, labels)
        keys = [(metric, rule.direction if rule else terms.LOWER_IS_BETTER)]
        require_metric(hs, metric)
    else:
        keys = gated_keys(hs, policy)
    results = trends(hs, policy, keys, branch)
    return TrendReport(metric, keys, results, trend_notes(results, policy.history))
