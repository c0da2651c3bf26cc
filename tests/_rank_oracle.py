"""Oracles: plain pandas references for the per-rank numpy forms (the pipe metrics and the
communication elapse median), so tests/metrics/test_rank_fixed_cost.py can compare them on real and replicated
captures and on random tables."""
from __future__ import annotations

import numpy as np
import pandas as pd


def pipe_metrics(fam: pd.DataFrame, min_share: float, kfile: str, metrics: dict) -> dict:
    """The pipe block of ``operators.rank_family_view`` before the small-table form (a pandas group-by over
    the bound column, one record dict per family)."""
    bs = fam.groupby("bound")["share"].sum()
    bound_shares = {str(b): float(v) for b, v in bs.items()}
    for b, v in bound_shares.items():
        metrics[("pipe.bound_share", (("bound", b),))] = (
            v, f"{kfile} PipeUtilization columns, families bound by {b}", {})
    for r in fam[fam["share"] > min_share].to_dict("records"):
        if np.isfinite(r["memory_bound"]):
            metrics[("pipe.memory_bound", (("family", r["family"]),))] = (
                float(r["memory_bound"]), f"{kfile} {r['family']}: mte2 / max(mac, vec) ratios", {})
    return bound_shares


def comm_elapse_median(ops: pd.DataFrame) -> float:
    """``comm.elapse_us`` of ``fingerprint._overlap_and_comm_metrics`` before the small-table form."""
    per = ops.groupby("step")["elapse_us"].sum()
    return float(per.median())
