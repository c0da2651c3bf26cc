"""Change points over a metric's recorded series (pure; input is the series table).

Method: the series is standardised robustly (median, and sigma = 1.4826 x MAD of the first
differences / √2, so a step does not inflate the noise estimate), then segmented with
ruptures' PELT (Killick et al. 2012; cost ``l2``, penalty ``penalty x ln(n)``, segments of at
least ``min_size`` runs). Every candidate is tested against its neighbouring segments with a
two-sided Mann-Whitney U test (scipy) and kept only when p < ``alpha`` AND the median shift
is at least ``min_rel`` (significance and size, as asv and Otava do). A change point with
fewer than ``min_after`` runs after it is reported as unconfirmed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import ruptures
from scipy.stats import mannwhitneyu

from perfgate import terms


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
    s = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2)
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

    Returns change points in time order (empty for a series too short to segment).
    """
    y = series["value"].astype(float).to_numpy()
    n = len(y)
    if n < 2 * min_size:
        return []
    sigma = robust_sigma(y)
    if sigma == 0:
        return []
    z = (y - np.median(y)) / sigma
    bkps = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(z).predict(pen=penalty * np.log(n))
    cuts = [b for b in bkps if b < n]
    out = []
    bounds = [0] + cuts + [n]
    for i, c in enumerate(cuts):
        left = y[bounds[i]:c]
        right = y[c:bounds[i + 2]]
        if len(left) < 2 or len(right) < 1:
            continue
        p = float(mannwhitneyu(left, right, alternative="two-sided").pvalue) if len(right) > 1 else 1.0
        before, after = float(np.median(left)), float(np.median(right))
        rel = (after - before) / abs(before) if before else float("inf")
        if not (p < alpha and abs(rel) >= min_rel):
            continue
        if direction == terms.EXACT:
            kind = "change"
        else:
            worse = (after > before) == (direction == terms.LOWER_IS_BETTER)
            kind = terms.REGRESSION if worse else terms.IMPROVEMENT
        row = series.iloc[c]
        out.append(ChangePoint(key=key, index=int(c), run_id=int(row["run_id"]),
                               commit=row.get("commit") if isinstance(row.get("commit"), str) else None,
                               before=before, after=after, rel_change=float(rel), direction=kind, p_value=p,
                               n_before=len(left), n_after=len(right), confirmed=(n - c) >= min_after))
    return out
