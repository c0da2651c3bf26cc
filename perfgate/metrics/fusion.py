"""Fusion candidates (informational): regions of the execution order that look like a known
decomposed pattern (an RMSNorm or rotary embedding spelled as element-wise kernels, a SwiGLU
split into split / sigmoid / mul, Conv2D + norm + activation) or a chain of element-wise
vector kernels between two matmuls. Candidates only: nothing here claims a gain.

Per rank and step the compute kernels (communication rows left out) are put in time order;
each kernel's operator is its Type, or, where Type is N/A (Level0), the last ``_`` part of its
family (``aclnnMul_MulAiCore_Mul`` -> ``Mul``). A pattern (``fusion.patterns`` in
``perfgate/policies/segments.yaml``) is an ordered list of operator regexes. A region is a run of
consecutive kernels each matching a later step of the pattern than the kernel before it:

* grade ``high``: every step of the pattern matched, in order, nothing in between;
* grade ``medium``: at least ``medium_min`` steps matched in order, nothing foreign in between;
* grade ``low``: ``low_min`` or more element-wise kernels (``fusion.elementwise``) and nothing
  else between two matmul kernels (``fusion.matmul``), not already inside a high / medium
  region.

Output: a DataFrame, one row per candidate: ``step, pattern, fused`` (the fused operator the
pattern corresponds to), ``grade``, ``first_row, last_row`` (source rows), ``kernels``,
``ops`` (the operators, ``→``-joined), ``evidence`` (a sentence stating why this grade).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.metrics import kernels as km

_COLS = ["step", "pattern", "fused", "grade", "first_row", "last_row", "kernels", "ops", "evidence"]
_RANK = {"high": 0, "medium": 1, "low": 2}


def _ops(k: pd.DataFrame, family_suffix) -> np.ndarray:
    fam = km.family_of(k["name"], family_suffix).astype(str).to_numpy()
    typ = k["op_type"].astype(object).to_numpy()
    return np.array([t if isinstance(t, str) and t else f.rsplit("_", 1)[-1] for t, f in zip(typ, fam)], dtype=object)


def _runs(mask: np.ndarray, min_len: int) -> list:
    """(first, last) of runs of True at least ``min_len`` long (vectorised)."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    keep = (ends - starts + 1) >= min_len
    return list(zip(starts[keep].tolist(), ends[keep].tolist()))


def _scan(hits: np.ndarray, pattern) -> list:
    """(first_pos, last_pos, matched_steps) regions of ``pattern`` (see module doc); ``hits``
    is a (kernels x pattern steps) bool matrix. Only runs of kernels that match some step,
    at least ``medium_min`` long, are walked."""
    out = []
    for lo, hi in _runs(hits.any(axis=1), pattern.medium_min):
        i = lo
        while i <= hi:
            cur, j = -1, i
            while j <= hi:
                nxt = np.flatnonzero(hits[j, cur + 1:])
                if not len(nxt):
                    break
                cur, j = cur + 1 + int(nxt[0]), j + 1
            m = j - i
            if m >= pattern.medium_min:
                out.append((i, j - 1, m))
                i = j
            else:
                i += 1
    return out


def fusion_candidates(df: pd.DataFrame, rules, family_suffix) -> pd.DataFrame:
    """Fusion candidates of one rank's kernel table (:mod:`perfgate.ingest.kernels` columns).

    Args:
        rules: :class:`perfgate.policy.knowledge.FusionRules` (``policy.segments.fusion``).
        family_suffix: the policy's family regex.

    Returns:
        the candidate table (module doc), sorted by step and first row.
    """
    k = df[df["step"].notna() & ~df["is_comm"]].sort_values(["step", "start_ns", "row"], kind="stable")
    if not len(k):
        return pd.DataFrame(columns=_COLS)
    ops_all = _ops(k, family_suffix)
    uniq, inv = np.unique(ops_all.astype(str), return_inverse=True)
    # every regex runs once per distinct operator
    tables = {p.name: np.array([[bool(rx.search(o)) for rx in p.steps] for o in uniq], dtype=bool).reshape(len(uniq), -1)
              for p in rules.patterns}
    ew_u = np.array([bool(rules.elementwise.search(o)) for o in uniq], dtype=bool)
    mm_u = np.array([bool(rules.matmul.search(o)) for o in uniq], dtype=bool)
    rows_all = k["row"].to_numpy()
    steps_all = k["step"].astype(str).to_numpy()
    out = []
    for step in pd.unique(steps_all):
        sel = np.flatnonzero(steps_all == step)
        ops = [str(o) for o in ops_all[sel]]
        codes = inv[sel]
        rows = rows_all[sel]
        found = []
        for p in rules.patterns:
            for a, b, m in _scan(tables[p.name][codes], p):
                grade = "high" if m == len(p.steps) else "medium"
                seq = "→".join(ops[a:b + 1])
                ev = (f"{seq}: {m} of {len(p.steps)} steps of the decomposed {p.name} in order, "
                      f"consecutive kernels with nothing else in between")
                if grade == "medium":
                    ev += f" (medium: at least {p.medium_min} but not all steps)"
                found.append((grade, a, b, p.name, p.fused, seq, ev))
        ew = ew_u[codes]
        mm = np.flatnonzero(mm_u[codes])
        for p, q in zip(mm[:-1], mm[1:]):
            n_between = q - p - 1
            if n_between >= rules.low_min and ew[p + 1:q].all():
                seq = "→".join(ops[p + 1:q])
                found.append(("low", p + 1, q - 1, "elementwise_chain", "a fused vector kernel", seq,
                              f"{n_between} element-wise kernels ({seq}) between the matmul kernels at rows "
                              f"{rows[p]} and {rows[q]}; no decomposed pattern recognised"))
        found.sort(key=lambda x: (_RANK[x[0]], -(x[2] - x[1]), x[1]))
        taken = np.zeros(len(ops), dtype=bool)
        for grade, a, b, name, fused, seq, ev in found:
            if taken[a:b + 1].any():
                continue
            taken[a:b + 1] = True
            out.append({"step": str(step), "pattern": name, "fused": fused, "grade": grade,
                        "first_row": int(rows[a]), "last_row": int(rows[b]), "kernels": b - a + 1,
                        "ops": seq, "evidence": ev})
    res = pd.DataFrame(out, columns=_COLS)
    return res.sort_values(["step", "first_row"], kind="stable").reset_index(drop=True)
