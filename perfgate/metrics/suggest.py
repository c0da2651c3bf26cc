"""Suggestions: the policy's rule table (``suggestions:``) evaluated on a fingerprint.

Each rule yields at most one suggestion ``{id, priority (P0 / P1 / P2), text, evidence,
value, threshold}`` with the evidence that triggered it (the metric key and value, or the
kernel run and its first row). Suggestions are informational: they are never gated.
"""
from __future__ import annotations

from perfgate.model import metric_key

_ORDER = {"P0": 0, "P1": 1, "P2": 2}


def _fmt(v: float, unit: str) -> str:
    return f"{v * 100:.1f}%" if unit == "ratio" else f"{v:g}"


def evaluate(metrics: dict, rules, runs: dict | None = None) -> list[dict]:
    """Suggestions for a fingerprint.

    Args:
        metrics: fingerprint metrics ``{key: MetricValue}`` (cross-rank views).
        rules: :class:`perfgate.policy.opspec.SuggestionRule` tuple from the policy.
        runs: ``{rule id: (longest run, data row of its first kernel, rank)}`` for
            ``consecutive`` rules (:func:`perfgate.metrics.operators.longest_run`).

    Returns:
        Suggestions sorted by priority (P0 first), then id. A metric rule whose metric is not
        in the fingerprint does not fire (nothing to judge).
    """
    out = []
    for r in rules:
        if r.consecutive is not None:
            n, row, rank = (runs or {}).get(r.id, (0, None, None))
            if n >= r.min_run:
                where = f" in phase {r.phase}" if r.phase else ""
                out.append({"id": r.id, "priority": r.priority, "text": r.text, "value": float(n),
                            "threshold": float(r.min_run),
                            "evidence": f"{n} consecutive kernels matching {r.consecutive.describe()}{where} "
                                        f"(rank {rank}, from kernel row {row}) >= {r.min_run}"})
            continue
        key = metric_key(r.metric, **r.labels, view=r.view)
        m = metrics.get(key)
        if m is None or m.value is None or isinstance(m.value, list):
            continue
        v = float(m.value)
        hit = v > r.above if r.above is not None else v < r.below
        if hit:
            thr = r.above if r.above is not None else r.below
            op = ">" if r.above is not None else "<"
            out.append({"id": r.id, "priority": r.priority, "text": r.text, "value": v, "threshold": thr,
                        "evidence": f"{key} = {_fmt(v, m.unit)} {op} {_fmt(thr, m.unit)} ({m.evidence})"})
    return sorted(out, key=lambda s: (_ORDER[s["priority"]], s["id"]))
