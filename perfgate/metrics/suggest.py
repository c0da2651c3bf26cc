"""Suggestions: the policy's rule table (``suggestions:``) evaluated on a fingerprint.

Each rule yields at most one suggestion ``{id, priority (P0 / P1 / P2), text, evidence,
value, threshold}`` with the evidence that triggered it (the metric key and value, or the
kernel run and its first row). Suggestions are informational: they are never gated.
"""
from __future__ import annotations

from perfgate import terms
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
    staged = None   # {metric name: [(key, value)] in a stage view}, made at the first rule that needs it
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
        if key not in metrics and staged is None:
            staged = _stage_values(metrics)
        for k in ([key] if key in metrics else _stage_keys(staged, r.metric, r.labels, r.view)):
            m = metrics[k]
            if m.value is None or isinstance(m.value, list):
                continue
            v = float(m.value)
            hit = v > r.above if r.above is not None else v < r.below
            if hit:
                thr = r.above if r.above is not None else r.below
                op = ">" if r.above is not None else "<"
                out.append({"id": r.id, "priority": r.priority, "text": r.text, "value": v, "threshold": thr,
                            "evidence": f"{k} = {_fmt(v, m.unit)} {op} {_fmt(thr, m.unit)} ({m.evidence})"})
                break   # one suggestion per rule: the first stage where it holds
    return sorted(out, key=lambda s: (_ORDER[s["priority"]], s["id"]))


def _stage_values(metrics: dict) -> dict:
    """{metric name: [(key, value)]} of the values in a pipeline stage's view (``stage1.p50``)."""
    out: dict = {}
    for k, m in metrics.items():
        if terms.view_stage(m.labels.get("view")) is not None:
            out.setdefault(m.name, []).append((k, m))
    return out


def _stage_keys(staged: dict, name: str, labels: dict, view: str) -> list:
    """The keys of metric ``name`` with ``labels`` in ``view`` within each pipeline stage
    (``stage0.p50``, ``stage1.p50``, ...: a capture of several stages has no pooled p50), sorted."""
    want = dict(labels)
    return sorted(k for k, m in staged.get(name, ()) if terms.base_view(m.labels.get("view")) == view
                  and {a: b for a, b in m.labels.items() if a != "view"} == want)
