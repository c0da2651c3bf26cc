"""Kernel-level tables: families, categories and per-step aggregates.

All functions take the kernel table of :mod:`perfgate.ingest.kernels` (columns ``step``,
``name``, ``op_type``, ``core_type``, ``start_ns``, ``dur_ns``, ``end_ns``, ``is_comm``) and
return new frames; inputs are never mutated.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd

from perfgate import terms

UNKNOWN = "unknown"


def family_of(names: pd.Series, suffix: re.Pattern) -> pd.Series:
    """Kernel family: the name with volatile numeric suffixes removed (policy regex).

    ``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``; ``trans_TransData_12`` ->
    ``trans_TransData``; names that would become empty keep their full text.
    """
    fam = names.astype("string").str.replace(suffix.pattern, "", regex=True)
    return fam.where(fam.str.len() > 0, names)


def canonical_core(df: pd.DataFrame) -> pd.Series:
    """Core type with communication rows folded to ``COMMUNICATION`` (HCCL <= 2025-01
    and COMMUNICATION later name the same thing); <NA> where the cell was N/A."""
    core = df["core_type"].astype("string")
    return core.where(~df["is_comm"], terms.COMM_CORE)


def categorize(df: pd.DataFrame, rules) -> pd.Series:
    """Category per row from the policy's ordered rules (first match wins), else ``unknown``.

    A rule matches when every given regex (``name`` over Name, ``type`` over Type, ``core``
    over Accelerator Core) finds a match (``re.search``); N/A cells never match.
    """
    out = pd.Series(UNKNOWN, index=df.index, dtype="object")
    todo = pd.Series(True, index=df.index)
    cols = {"name": df["name"].astype("string"), "type": df["op_type"].astype("string"),
            "core": df["core_type"].astype("string")}
    for rule in rules:
        m = todo.copy()
        for field in ("name", "type", "core"):
            rx = getattr(rule, field)
            if rx is not None:
                with warnings.catch_warnings():  # groups in a user regex are harmless here
                    warnings.simplefilter("ignore", UserWarning)
                    hit = cols[field].str.contains(rx.pattern, regex=True)
                m &= hit.fillna(False).astype(bool)
        out[m] = rule.category
        todo &= ~m
        if not todo.any():
            break
    return out


def per_step_counts(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Calls per (step, key) as a wide frame: index step, columns key values, 0 where absent."""
    d = df[df["step"].notna() & df[key].notna()]
    if d.empty:
        return pd.DataFrame()
    return d.groupby(["step", key], observed=True).size().unstack(fill_value=0)


def per_step_sum_dur(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """ΣDuration (ns) per (step, key) as a wide frame, 0 where absent."""
    d = df[df["step"].notna() & df[key].notna()]
    if d.empty:
        return pd.DataFrame()
    return d.groupby(["step", key], observed=True)["dur_ns"].sum().unstack(fill_value=0)


def median_low(values) -> float:
    """Median that is always an observed value (lower middle for even counts): a count
    stays an integer that some step really had."""
    v = np.sort(np.asarray(values, dtype=float))
    return float(v[(len(v) - 1) // 2]) if len(v) else float("nan")
