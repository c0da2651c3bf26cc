"""Change points over a metric's recorded series (pure; input is the series table).

Method: the series is standardised robustly (median, and sigma = 1.4826 x MAD of the first
differences / √2, so a step does not inflate the noise estimate), then segmented with
ruptures' PELT (Killick et al. 2012; cost ``l2``, penalty ``penalty x ln(n)``, segments of at
least ``min_size`` runs). Every candidate is tested against its neighbouring segments with a
two-sided Mann-Whitney U test (scipy) and kept only when p < ``alpha`` AND the median shift
is at least ``min_rel`` (significance and size, as asv and Otava do). A change point with
fewer than ``min_after`` runs after it is reported as unconfirmed; PELT never cuts a segment
shorter than ``min_size``, so that can only happen when ``min_after > min_size``.

Short histories: a change point needs at least ``max(min_size, 2)`` runs on each side, and
its p-value can never be below the exact two-sided Mann-Whitney U minimum for those sizes,
``2 / C(n1 + n2, n1)`` (complete separation, no ties; Mann & Whitney 1947). With the default
alpha 0.01 and min_size 3 that needs >= 10 runs (5 | 5) and, for a change in the last 3
runs, 9 runs before it (12 in all): :func:`runs_needed` computes it, :func:`describe` says it.

Only finite numbers are segmented: runs whose value is NaN / inf / not a number are left out
(and counted); a set metric (``kernel.topn``, stored as a JSON list) is never trended
numerically: :func:`set_changes` lists the runs where its membership changed instead.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import ruptures
from scipy.stats import mannwhitneyu

from perfgate import terms
from perfgate.compare.stats import min_exact_p, robust_sigma as _mad_sigma


@dataclass(frozen=True)
class ChangePoint:
    """A shift in a metric's series starting at run index ``index`` (0-based, first run of
    the new level) = run ``run_id`` / ``commit``."""
    key: str
    index: int
    run_id: int
    commit: str | None
    before: float
    after: float
    rel_change: float
    direction: str            # regression | improvement | change (exact metrics)
    p_value: float
    n_before: int
    n_after: int
    confirmed: bool

    def to_dict(self) -> dict:
        return asdict(self)


def robust_sigma(y: np.ndarray) -> float:
    """Noise scale of a series from its first differences: 1.4826 x MAD(diff) / sqrt(2)
    (robust to level shifts and outliers); the standard deviation when that is 0; 0 for fewer
    than two points."""
    d = np.diff(y)
    if len(d) == 0:
        return 0.0
    s = _mad_sigma(d) / np.sqrt(2)
    if s == 0:
        s = float(np.std(y)) or 0.0
    return s


def change_points(series: pd.DataFrame, key: str, *, direction: str = terms.LOWER_IS_BETTER,
                  penalty: float = 3.0, min_size: int = 3, alpha: float = 0.01, min_rel: float = 0.02,
                  min_after: int = 3) -> list[ChangePoint]:
    """Change points of one series.

    Args:
        series: rows in time order with columns ``run_id``, ``commit``, ``value``.
        key: metric key (for the records). direction: the metric's policy direction.

    Returns change points in time order (empty for a series too short to segment, with no
    finite value, or constant). Non-finite / non-numeric values are left out before
    segmenting; ``index`` still counts positions in ``series`` (every row).
    """
    full = numeric_values(series)
    pos = np.flatnonzero(np.isfinite(full))
    y = full[pos]
    n = len(y)
    if n < 2 * max(min_size, 1):
        return []
    sigma = robust_sigma(y)
    if not np.isfinite(sigma) or sigma == 0:
        return []
    z = (y - np.median(y)) / sigma
    bkps = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(z).predict(pen=penalty * np.log(n))
    cuts = [b for b in bkps if b < n]
    # each cut is tested between its neighbouring cuts; a cut that fails is dropped (the least
    # significant first) and the others are tested again over the merged segments, so a spurious
    # extra cut (a quiet series cut twice) cannot hide a real shift by shrinking its segment
    while True:
        tests = [_test_cut(y, a, c, b) for a, c, b in zip([0] + cuts[:-1], cuts, cuts[1:] + [n])]
        failed = [i for i, (p, rel, _, _) in enumerate(tests) if not (p < alpha and abs(rel) >= min_rel)]
        if not failed:
            break
        del cuts[max(failed, key=lambda i: (tests[i][0], -abs(tests[i][1])))]
    out = []
    for a, c, b, (p, rel, before, after) in zip([0] + cuts[:-1], cuts, cuts[1:] + [n], tests):
        left_n, right_n = c - a, b - c
        if direction == terms.EXACT:
            kind = "change"
        else:
            worse = (after > before) == (direction == terms.LOWER_IS_BETTER)
            kind = terms.REGRESSION if worse else terms.IMPROVEMENT
        row = series.iloc[int(pos[c])]
        commit = row.get("commit")
        out.append(ChangePoint(key=key, index=int(pos[c]), run_id=int(row["run_id"]),
                               commit=commit if isinstance(commit, str) and commit else None,
                               before=before, after=after, rel_change=float(rel), direction=kind, p_value=p,
                               n_before=left_n, n_after=right_n, confirmed=(n - c) >= min_after))
    return out


def _test_cut(y: np.ndarray, a: int, c: int, b: int) -> tuple[float, float, float, float]:
    """``(p, rel, before, after)`` of the cut at ``c`` between ``y[a:c]`` and ``y[c:b]``: the
    two-sided Mann-Whitney p-value (1.0 when a side is too short to test: < 2 before or < 2 after),
    the relative change of the medians and the medians."""
    left, right = y[a:c], y[c:b]
    if len(left) < 2 or len(right) < 2:
        return 1.0, 0.0, float("nan"), float("nan")
    p = float(mannwhitneyu(left, right, alternative="two-sided").pvalue)
    before, after = float(np.median(left)), float(np.median(right))
    rel = (after - before) / abs(before) if before else float("inf")
    return p, rel, before, after


def numeric_values(series: pd.DataFrame) -> np.ndarray:
    """``series["value"]`` as float64; anything that is not a number (None, text) becomes NaN."""
    return pd.to_numeric(series["value"], errors="coerce").astype(float).to_numpy()


def is_set_series(series: pd.DataFrame) -> bool:
    """True when the series holds a set metric (a ``set_value`` column with a JSON list)."""
    return "set_value" in series.columns and bool(series["set_value"].notna().any())


@dataclass(frozen=True)
class RunsNeeded:
    """How long a history must be before :func:`change_points` can ever report a change.

    ``total`` runs (split ``split`` = (before, after), the most balanced one) for a change
    anywhere; ``end_total`` runs (``end_before`` before the last ``end_after``) for a change
    in the last ``end_after`` runs, the fewest after which it is confirmed."""
    side: int
    total: int
    split: tuple
    end_after: int
    end_before: int
    end_total: int


def runs_needed(*, alpha: float, min_size: int, min_after: int, cap: int = 100000) -> RunsNeeded:
    """Fewest runs for which some split passes ``min_exact_p < alpha`` with at least
    ``max(min_size, 2)`` runs on each side (PELT's segment size, and the U test needs two).

    Raises:
        ValueError: alpha <= 0 (no history is ever long enough).
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    side = max(int(min_size), 2)
    total = split = None
    for n in range(2 * side, cap):
        k = n // 2  # the most balanced split has the smallest minimum p
        if min_exact_p(n - k, k) < alpha:
            total, split = n, (n - k, k)
            break
    after = max(side, int(min_after))
    before = side
    while min_exact_p(before, after) >= alpha and before < cap:
        before += 1
    return RunsNeeded(side=side, total=total or cap, split=split or (cap, cap), end_after=after,
                      end_before=before, end_total=before + after)


def describe(series: pd.DataFrame, cps: list, *, alpha: float, min_size: int, min_after: int) -> str:
    """One sentence about a series' trend, always non-empty: how many runs were used, why
    runs were left out, and, when no change point was found, whether the history could have
    shown one at all (:func:`runs_needed`)."""
    n_all = len(series)
    if is_set_series(series):
        ch = set_changes(series)
        where = ", ".join(f"run {c['run_id']} (+{len(c['added'])} -{len(c['removed'])})" for c in ch[:5])
        more = f", ... ({len(ch) - 5} more)" if len(ch) > 5 else ""
        return (f"set metric: its members are compared run to run, not trended numerically; membership "
                f"changed {len(ch)} time(s) in {n_all} run(s)" + (f": {where}{more}" if ch else ""))
    y = numeric_values(series)
    fin = y[np.isfinite(y)]
    n = len(fin)
    left_out = n_all - n
    drop = f" ({left_out} run(s) without a finite number left out)" if left_out else ""
    if n == 0:
        return f"no numeric value in {n_all} run(s): nothing to trend"
    if cps:
        return f"{len(cps)} change point(s) in {n} run(s){drop}"
    if n > 1 and np.all(fin == fin[0]):
        return f"no change point in {n} run(s){drop}: constant at {fin[0]:,.6g}"
    need = runs_needed(alpha=alpha, min_size=min_size, min_after=min_after)
    text = f"no change point in {n} run(s){drop}"
    if n < need.total:
        side = need.side
        if n < 2 * side:
            why = f"it cannot be split into two segments of >= {side} runs"
        else:
            best = min(min_exact_p(n - k, k) for k in range(side, n - side + 1))
            why = (f"with >= {side} runs on each side the smallest exact Mann-Whitney U p is {best:.3g} "
                   f"(>= alpha)")
        text += (f"; too short to ever show one at alpha={alpha:g}: {why}; at least {need.total} runs are needed "
                 f"({need.split[0]} | {need.split[1]}), and {need.end_total} to see a change in the last "
                 f"{need.end_after} runs ({need.end_before} before them)")
    elif n < need.end_total:
        text += (f"; a change in the last {need.end_after} runs can only show with at least {need.end_total} "
                 f"runs ({need.end_before} before them)")
    return text


def set_changes(series: pd.DataFrame) -> list[dict]:
    """Runs where a set metric's membership differs from the previous run with a value:
    ``[{index, run_id, commit, added, removed}]`` (``added`` / ``removed`` sorted lists)."""
    out, prev = [], None
    for i, (rid, commit, raw) in enumerate(zip(series["run_id"], series["commit"], series["set_value"])):
        if not isinstance(raw, str):
            continue
        try:
            cur = {json.dumps(x, sort_keys=True) if not isinstance(x, str) else x for x in json.loads(raw)}
        except (ValueError, TypeError):
            continue
        if prev is not None and cur != prev:
            out.append({"index": i, "run_id": int(rid), "commit": commit if isinstance(commit, str) else None,
                        "added": sorted(cur - prev), "removed": sorted(prev - cur)})
        prev = cur
    return out


def trend_notes(results: list, settings: dict) -> dict:
    """Notes for a trend run over several metrics.

    Args:
        results: ``[(key, series_key, series, change_points)]`` (one entry per metric and
            series, as ``perfgate history trend`` builds it).
        settings: the policy's ``history:`` block (``alpha``, ``min_size``, ``min_after``).

    Returns ``{"per_series": [describe(...) per entry], "summary": [lines]}``: the summary
    names every set metric with its membership changes, how many metrics had runs left out,
    and, when even the longest numeric series is too short to show a change point, the runs
    needed (see :func:`runs_needed`).
    """
    kw = {"alpha": float(settings["alpha"]), "min_size": int(settings["min_size"]),
          "min_after": int(settings["min_after"])}
    per = [describe(part, cps, **kw) for _key, _sk, part, cps in results]
    summary, longest, dropped = [], 0, 0
    split = len({sk for _key, sk, _part, _cps in results}) > 1   # one metric, several series
    for (key, sk, part, _cps), note in zip(results, per):
        if is_set_series(part):   # the series named when a metric has several: each line says whose it is
            summary.append(f"{key}{f' [series {sk}]' if split else ''}: {note}")
            continue
        y = numeric_values(part)
        n = int(np.isfinite(y).sum())
        longest = max(longest, n)
        dropped += n < len(y)
    if dropped:
        summary.append(f"{dropped} metric series had runs without a finite number (left out of the trend)")
    if results and longest:
        need = runs_needed(**kw)
        why = (f" (the runs fall into {len({sk for _k, sk, _p, _c in results})} series: split by rank count, "
               f"CANN / torch_npu version, aic_metrics, Type / Accelerator Core availability and profiler "
               f"level; values across a split are never compared)" if split else "")
        if longest < need.total:
            summary.append(f"history too short: the longest series has {longest} run(s){why}; at alpha={kw['alpha']:g} "
                           f"a change point needs at least {need.total} runs ({need.split[0]} | {need.split[1]}), "
                           f"and {need.end_total} to see a change in the last {need.end_after} runs")
        elif longest < need.end_total:
            summary.append(f"a change in the last {need.end_after} runs can only show with at least "
                           f"{need.end_total} runs (the longest series has {longest})")
    return {"per_series": per, "summary": summary}
