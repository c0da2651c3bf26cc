"""Oracles of the columnar structure metrics (tests/metrics/test_segment_metrics_columnar.py):
plain pandas group-by references for the ``bincount`` fast paths. ``segment_metrics`` is the pandas group-by form, kept in tests/segments_oracle.py (the
per-step segmentation's oracle, which holds it unchanged); ``class_aggregates`` is the
class-table group-by that perfgate.metrics.segments._class_aggregates computes with bincount."""
from __future__ import annotations

import numpy as np
import pandas as pd

from segments_oracle import segment_metrics  # noqa: F401 - the former form, re-exported


def class_aggregates(t, codes):
    """Members, median and 90th percentile wall, ΣDuration and communication sums per class code,
    as the former ``t.groupby(codes).agg(...)`` gave them."""
    g = t.groupby(pd.Series(codes, index=t.index), sort=True)   # (an array key would be str()-ed)
    agg = g.agg(members=("rows", "size"), wall_p50_us=("wall_us", "median"),
                wall_p90_us=("wall_us", lambda w: float(np.percentile(w, 90))),
                sum_dur_us=("sum_dur_us", "sum"), comm_us=("comm_us", "sum"))
    return tuple(agg[c].to_numpy() for c in ("members", "wall_p50_us", "wall_p90_us", "sum_dur_us", "comm_us"))
