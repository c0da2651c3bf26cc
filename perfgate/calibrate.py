"""Calibrate: learn per-metric tolerances from N repeated captures of one commit.

For every gated metric with per-step samples (step aggregates, shares) in a gated view, the
run-to-run noise is measured on the per-capture values (each the median over that capture's
steps): ``sigma = 1.4826 × MAD`` over the N captures (a robust standard deviation; MAD =
median absolute deviation from the median), relative to the median for ``rel`` tolerances,
in percentage points for ratio metrics. Per metric name the largest sigma over its labels and
views counts. Proposed tolerances:

* ``statistics.tolerances[name]`` (the effect-size gate for repeated captures):
  ``k × sigma``, at least the floor;
* ``metrics[name].tolerance`` (one capture against one capture): ``k × √2 × sigma`` (the
  difference of two single runs), at least the floor.

``k`` defaults to 3. A proposal below the current tolerance is reported as "could be
tightened", one above it as "tighter than the measured noise". Pure: returns data and YAML
text; :func:`perfgate.gate.calibrate` does the I/O.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import yaml

from perfgate.errors import UsageError
from perfgate.model import Fingerprint
from perfgate.policy import Policy, Tolerance

MIN_CAPTURES = 3
FLOOR = {"rel": 0.005, "pp": 0.05, "abs": 0.0}


def _sigma(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(1.4826 * np.median(np.abs(v - np.median(v))))


def _round_up(x: float, kind: str) -> float:
    step = 0.001 if kind == "rel" else 0.01
    return math.ceil(x / step - 1e-9) * step


def propose_tolerances(fps: list[Fingerprint], policy: Policy, k: float = 3.0) -> list[dict]:
    """Per gated metric name with samples: ``metric``, ``kind`` (rel / pp / abs), ``sigma``
    (in the tolerance's unit: fraction, pp or metric unit), ``worst_key`` (the label set / view
    with that sigma), ``captures``, ``current_stat`` / ``proposed_stat`` (effect gate of
    repeated captures) and ``current_single`` / ``proposed_single`` (single-capture tolerance),
    ``verdict_stat`` / ``verdict_single`` (``could be tightened`` / ``tighter than the measured
    noise`` / ``ok``).

    Raises:
        UsageError: fewer than :data:`MIN_CAPTURES` captures, or ``k`` not positive.
    """
    if len(fps) < MIN_CAPTURES:
        raise UsageError(f"calibrate needs at least {MIN_CAPTURES} repeated captures of one commit, got "
                         f"{len(fps)}", hint="profile the same commit several times (5-10 runs)")
    if not k > 0:
        raise UsageError(f"k must be positive, got {k}")
    stat_tols = (policy.statistics or {}).get("tolerances", {})
    worst: dict[str, tuple[float, str, str]] = {}
    for key in sorted(set.intersection(*[set(fp.metrics) for fp in fps])):
        ms = [fp.metrics[key] for fp in fps]
        m = ms[0]
        rule = policy.rule_for(m.name, m.labels)
        view = m.labels.get("view")
        if rule is None or not rule.gated or (view is not None and view not in policy.gate_views):
            continue
        if not all(x.samples for x in ms):
            continue
        tol = stat_tols.get(m.name, rule.tolerance)
        vals = [float(x.value) for x in ms]
        s = _sigma(vals)
        if tol.kind == "rel":
            med = abs(float(np.median(vals)))
            s = s / med if med else 0.0
        elif tol.kind == "pp":
            s = s * 100.0
        if m.name not in worst or s > worst[m.name][0]:
            worst[m.name] = (s, key, tol.kind)
    out = []
    for name, (s, key, kind) in sorted(worst.items()):
        rule = policy.rule_for(name, {})
        cur_stat = stat_tols.get(name, rule.tolerance)
        cur_single = rule.tolerance
        p_stat = max(_round_up(k * s, kind), FLOOR[kind])
        p_single = max(_round_up(k * math.sqrt(2) * s, kind), FLOOR[kind])

        def judge(cur: Tolerance, prop: float) -> str:
            if cur.kind != kind:
                return "ok"
            if prop < cur.value - 1e-12:
                return "could be tightened"
            if prop > cur.value + 1e-12:
                return "tighter than the measured noise"
            return "ok"
        out.append({"metric": name, "kind": kind, "sigma": s, "worst_key": key, "captures": len(fps), "k": k,
                    "current_stat": cur_stat.value if cur_stat.kind == kind else None,
                    "proposed_stat": p_stat, "verdict_stat": judge(cur_stat, p_stat),
                    "current_single": cur_single.value if cur_single.kind == kind else None,
                    "proposed_single": p_single, "verdict_single": judge(cur_single, p_single)})
    return out


def calibrated_policy_text(policy: Policy, proposals: list[dict], source_note: str = "") -> str:
    """The policy document with the proposed tolerances written in, as YAML text (comments of
    the original are not kept; a header says where the values came from)."""
    doc = copy.deepcopy(policy.raw) if policy.raw else {"version": 1}
    stats = doc.setdefault("statistics", {}) or {}
    doc["statistics"] = stats
    tols = stats.setdefault("tolerances", {}) or {}
    stats["tolerances"] = tols
    metrics = doc.setdefault("metrics", {})
    for p in proposals:
        tols[p["metric"]] = {p["kind"]: round(p["proposed_stat"], 6)}
        if p["metric"] in metrics:
            metrics[p["metric"]] = dict(metrics[p["metric"]], tolerance={p["kind"]: round(p["proposed_single"], 6)})
    head = ("# perfgate policy written by `perfgate calibrate`"
            + (f" from {source_note}" if source_note else "") + ".\n"
            "# Tolerances = k x robust sigma (1.4826 x MAD) of per-capture values over repeated captures of\n"
            "# one commit (statistics.tolerances), x sqrt(2) for single-capture comparisons (metrics).\n")
    return head + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
