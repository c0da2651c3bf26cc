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
  difference of two single runs), at least the floor, and at least the largest difference
  between two of the calibration captures themselves (``spread``): the robust sigma passes over
  one run far from the others, and a tolerance below the spread fails a check of one of the
  training runs against another. The printout says when the spread set it.

``k`` defaults to 3. A proposal below the current tolerance is reported as "could be
tightened", one above it as "tighter than the measured noise".

Power (how many runs to profile): for ``R`` runs per side the smallest true shift that the
interval rule of :mod:`perfgate.compare.stats` catches with probability ``power`` (default 0.99) is
estimated as ``proposed_stat + (z_c + z_power) · sigma · √(2/R)`` — the normal-approximation
minimum detectable effect of a difference of two means of ``R`` per-capture values each
(e.g. Cohen 1988, ch. 2), with ``z_c`` the quantile of the bound the verdict reads (one-sided
``confidence`` for metrics with a direction, two-sided for exact ones:
:func:`perfgate.compare.stats.interval_level`). It uses the per-capture sigma, so it does not assume
the steps of one capture are independent: conservative when they are. Pure: returns data and YAML
text; :func:`perfgate.app.gate.calibrate` does the I/O.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import yaml
from scipy.stats import norm

from perfgate import terms
from perfgate.errors import UsageError
from perfgate.metrics.collection import measured_difference
from perfgate.model import Fingerprint
from perfgate.policy import Policy, Tolerance
from perfgate.compare.stats import interval_level, robust_sigma, settings

MIN_CAPTURES = 3
#: the largest k: a tolerance of more robust sigmas than this lets any change through
MAX_K = 100.0
POWER_RUNS = (5, 10, 20)


def detectable_shift(tolerance: float, sigma: float, runs: int, *, z_bound: float, power: float = 0.99) -> float:
    """Minimum detectable effect: the smallest true shift (same unit as ``tolerance`` and
    ``sigma``: fraction for rel, pp, or the metric unit) whose interval verdict is a regression
    with probability ``power`` given ``runs`` captures per side, per-capture noise ``sigma``
    and the verdict's bound quantile ``z_bound``: ``tolerance + (z_bound + z_power)·sigma·√(2/runs)``.

    Raises:
        ValueError: ``runs`` < 1 or ``power`` not in (0, 1).
    """
    if runs < 1 or not 0 < power < 1:
        raise ValueError(f"runs must be >= 1 and power in (0, 1), got {runs}, {power}")
    return float(tolerance + (z_bound + norm.ppf(power)) * sigma * math.sqrt(2.0 / runs))
FLOOR = {"rel": 0.005, "pp": 0.05, "abs": 0.0}


def _round_up(x: float, kind: str) -> float:
    step = 0.001 if kind == "rel" else 0.01
    return math.ceil(x / step - 1e-9) * step


#: configuration facets repeated captures of one commit share (profiler level, export kind, rank
#: layout, and every facet :func:`perfgate.metrics.repeat.merge_fingerprints` requires)
SAME_JOB = ("profiler_level", "export_type", "aic_metrics", "world_size", "ranks", "type_available",
            "core_available", "has_comm_json", "family_suffix", "top_n", "categories_digest", "cann_version",
            "torch_npu_version")


def refuse_mixed(fps: list[Fingerprint]) -> None:
    """Refuse captures of different configurations as repeats (as ``check`` refuses to merge
    them): Level0 + Level1 + Level2 are three jobs, and their spread is not run-to-run noise.

    Raises:
        UsageError: the first facet of :data:`SAME_JOB` that differs, or the first collection
            option that changes what is measured
            (:func:`perfgate.metrics.collection.measured_difference`), naming both captures and values.
    """
    ref = fps[0]
    for i, fp in enumerate(fps[1:], start=2):
        for facet in SAME_JOB:
            a, b = ref.config.get(facet), fp.config.get(facet)
            if a != b:
                raise UsageError(
                    f"calibrate: capture {i} ({fp.provenance.get('source')}) differs from capture 1 "
                    f"({ref.provenance.get('source')}) in {facet}: {a!r} vs {b!r}; repeated captures of one "
                    f"commit must be the same job, or the tolerances would measure the configuration change",
                    hint="calibrate on captures of one configuration (same profiler level, export and ranks)")
        option = measured_difference(ref.config, fp.config)
        if option:
            raise UsageError(
                f"calibrate: capture {i} ({fp.provenance.get('source')}) differs from capture 1 "
                f"({ref.provenance.get('source')}) in the profiler collection option {option}; repeated "
                f"captures of one commit must be the same job, or the tolerances would measure the "
                f"configuration change",
                hint="calibrate on captures collected with the same profiler options")


def _in_tolerance_unit(amount: float, vals: list, kind: str) -> float:
    """An amount in a metric's unit in its tolerance's: relative to the median of ``vals`` for
    ``rel`` (0 for a zero median), percentage points for ``pp`` (a ratio x 100), else as is."""
    if kind == "rel":
        med = abs(float(np.median(vals)))
        return amount / med if med else 0.0
    return amount * 100.0 if kind == "pp" else amount


def propose_tolerances(fps: list[Fingerprint], policy: Policy, k: float = 3.0) -> list[dict]:
    """Per gated metric name with samples: ``metric``, ``kind`` (rel / pp / abs), ``sigma``
    (in the tolerance's unit: fraction, pp or metric unit), ``worst_key`` (the label set / view
    with that sigma), ``captures``, ``current_stat`` / ``proposed_stat`` (effect gate of
    repeated captures) and ``current_single`` / ``proposed_single`` (single-capture tolerance),
    ``verdict_stat`` / ``verdict_single`` (``could be tightened`` / ``tighter than the measured
    noise`` / ``ok``), ``detectable`` ({runs per side: minimum detectable shift at 99 % power,
    in the tolerance's unit} for :data:`POWER_RUNS`, see :func:`detectable_shift`), ``spread``
    (max − min of the per-capture values in the tolerance's unit, the largest over labels and
    views; ``spread_key`` where) and ``spread_sets_single`` (the spread, not ``k × √2 × sigma``,
    set ``proposed_single``).

    Raises:
        UsageError: fewer than :data:`MIN_CAPTURES` captures, ``k`` not in (0, :data:`MAX_K`], or captures of
            different configurations (:func:`refuse_mixed`).
    """
    if len(fps) < MIN_CAPTURES:
        raise UsageError(f"calibrate needs at least {MIN_CAPTURES} repeated captures of one commit, got "
                         f"{len(fps)}", hint="profile the same commit several times (5-10 runs)")
    if not 0 < k <= MAX_K:   # NaN and infinity too: a tolerance of more sigmas gates nothing
        raise UsageError(f"k must be a finite number in (0, {MAX_K:g}], got {k}",
                         hint="the tolerance is k x the robust sigma of the runs: 2-5 is usual")
    refuse_mixed(fps)
    stat_tols = (policy.statistics or {}).get("tolerances", {})
    worst: dict[str, tuple[float, str, str]] = {}
    spreads: dict[str, tuple[float, str]] = {}
    for key in sorted(set.intersection(*[set(fp.metrics) for fp in fps])):
        ms = [fp.metrics[key] for fp in fps]
        m = ms[0]
        rule = policy.rule_for(m.name, m.labels)
        view = m.labels.get("view")
        if rule is None or not rule.gated or (view is not None and not terms.view_gated(view, policy.gate_views)):
            continue
        if not all(x.samples for x in ms):
            continue
        tol = stat_tols.get(m.name, rule.tolerance)
        vals = [float(x.value) for x in ms]
        s = _in_tolerance_unit(robust_sigma(vals), vals, tol.kind)
        if m.name not in worst or s > worst[m.name][0]:
            worst[m.name] = (s, key, tol.kind, dict(m.labels))
        # the largest difference between two of the captures, in the tolerance's unit: a
        # single-capture tolerance below it fails a check of one calibration run against another
        spread = _in_tolerance_unit(max(vals) - min(vals), vals, tol.kind)
        if m.name not in spreads or spread > spreads[m.name][0]:
            spreads[m.name] = (spread, key)
    out = []
    for name, (s, key, kind, labels) in sorted(worst.items()):
        spread, spread_key = spreads[name]
        rule = policy.rule_for(name, {})
        cur_stat = stat_tols.get(name, rule.tolerance)
        cur_single = rule.tolerance
        p_stat = max(_round_up(k * s, kind), FLOOR[kind])
        p_single = max(_round_up(k * math.sqrt(2) * s, kind), FLOOR[kind])
        # at least the captures' own spread: the robust sigma passes over one run far from the
        # others (4 captures, exposed comm 10.45 / 3.79 / 3.91 / 3.86 %: sigma 0.09 pp, 0.39 pp
        # proposed, and a check of the first capture against the second failed)
        spread_wins = _round_up(spread, kind) > p_single + 1e-12
        p_single = max(p_single, _round_up(spread, kind))

        def judge(cur: Tolerance, prop: float) -> str:
            if cur.kind != kind:
                return "ok"
            if prop < cur.value - 1e-12:
                return "could be tightened"
            if prop > cur.value + 1e-12:
                return "tighter than the measured noise"
            return "ok"
        level, _ = interval_level(float(settings(policy)["confidence"]), policy.rule_for(name, labels).direction)
        z_bound = float(norm.ppf(0.5 + level / 2.0))
        detectable = {r: detectable_shift(p_stat, s, r, z_bound=z_bound) for r in POWER_RUNS}
        out.append({"metric": name, "kind": kind, "sigma": s, "worst_key": key, "captures": len(fps), "k": k,
                    "spread": spread, "spread_key": spread_key, "spread_sets_single": spread_wins,
                    "detectable": detectable,
                    "current_stat": cur_stat.value if cur_stat.kind == kind else None,
                    "proposed_stat": p_stat, "verdict_stat": judge(cur_stat, p_stat),
                    "current_single": cur_single.value if cur_single.kind == kind else None,
                    "proposed_single": p_single, "verdict_single": judge(cur_single, p_single)})
    return out


#: the smallest noise band calibrate writes (a fraction of a part's own time per step)
BAND_FLOOR = 0.01


def propose_part_bands(fps: list[Fingerprint], policy: Policy, k: float = 3.0) -> list[dict]:
    """The noise bands of the parts of the step (policy ``parts.band_compute`` /
    ``band_communication`` / ``band_idle``, :mod:`perfgate.compare.parts`) learned from repeated
    captures of one commit. For every gated part in a gated view, its own time per capture (a share
    times the device ΣDuration per step, or the step figure a ratio is judged through) gives what
    one capture may differ from another. A part is governed by ``max(band × T_baseline, material)``,
    so the band it needs is the largest of ``|T_b − T_a| / T_a`` over ordered pairs of captures whose
    difference is beyond materiality (every calibration capture passes against every other) and
    ``k × √2 × robust sigma / median`` when that is beyond materiality (0 when materiality covers it). Per kind the largest need, rounded up to 0.1 %, at
    least :data:`BAND_FLOOR`, at most the policy's ``BAND_MAX``.

    Returns ``[{"metric": "parts.band_<kind>", "kind": "band", "current", "proposed", "worst_key",
    "verdict"}]``, one per kind with a measured part (same input checks as :func:`propose_tolerances`)."""
    from types import SimpleNamespace

    from perfgate.compare.parts import PART_METRICS, RATIO_PARTS, device_sum, material_us, part_kind, value_of
    from perfgate.policy.sections import BAND_MAX
    from perfgate.model import metric_key
    need: dict[str, tuple[float, str]] = {}
    for key in sorted(set.intersection(*[set(fp.metrics) for fp in fps])):
        m = fps[0].metrics[key]
        if m.name not in PART_METRICS:
            continue
        rule = policy.rule_for(m.name, m.labels)
        view = m.labels.get("view")
        if rule is None or not rule.gated or (view is not None and not terms.view_gated(view, policy.gate_views)):
            continue
        if m.name in RATIO_PARTS:
            own = [value_of(fp, metric_key(RATIO_PARTS[m.name][0], view=view)) for fp in fps]
        else:
            own = [(value_of(fp, key) or 0.0) * (device_sum(fp, view) or float("nan")) for fp in fps]
        mats = [material_us(fp, view, policy.parts) for fp in fps]
        if any(x is None or not math.isfinite(x) for x in own) or None in mats:
            continue
        med = float(np.median(own))
        if med <= 0 or min(own) <= 0:
            continue
        # every calibration capture against every other passes: the need of each ordered pair
        # (baseline a, candidate b), and k x sqrt(2) x sigma for the runs to come
        noise = k * math.sqrt(2.0) * robust_sigma(own)
        band = noise / med if noise > float(np.median(mats)) else 0.0
        for a, b in ((a, b) for a in range(len(own)) for b in range(len(own)) if a != b):
            if abs(own[b] - own[a]) > mats[a]:   # beyond materiality, the band alone decides
                band = max(band, abs(own[b] - own[a]) / own[a])
        kind = part_kind(SimpleNamespace(name=m.name, labels=m.labels))
        if kind not in need or band > need[kind][0]:
            need[kind] = (band, key)
    out = []
    for kind, (band, key) in sorted(need.items()):
        name = f"band_{kind}"
        cur = float(policy.parts[name])
        prop = min(BAND_MAX, max(BAND_FLOOR, math.ceil(band * 1000 - 1e-9) / 1000))
        verdict = ("could be tightened" if prop < cur - 1e-12 else
                   "tighter than the measured noise" if prop > cur + 1e-12 else "ok")
        out.append({"metric": f"parts.{name}", "kind": "band", "current": cur, "proposed": prop,
                    "worst_key": key, "verdict": verdict})
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
        if p["kind"] == "band":   # parts.band_<kind> (propose_part_bands)
            parts = doc.setdefault("parts", {}) or {}
            doc["parts"] = parts
            parts[p["metric"].split(".", 1)[1]] = round(p["proposed"], 6)
            continue
        tols[p["metric"]] = {p["kind"]: round(p["proposed_stat"], 6)}
        if p["metric"] in metrics:
            metrics[p["metric"]] = dict(metrics[p["metric"]], tolerance={p["kind"]: round(p["proposed_single"], 6)})
    head = ("# perfgate policy written by `perfgate calibrate`"
            + (f" from {source_note}" if source_note else "") + ".\n"
            "# Tolerances = k x robust sigma (1.4826 x MAD) of per-capture values over repeated captures of\n"
            "# one commit (statistics.tolerances), x sqrt(2) for single-capture comparisons (metrics);\n"
            "# parts: the noise band each kind of part needs so that no capture fails against another.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


STABLE_CAPTURES = 5  # below this the MAD sigma is unstable (warning; MIN_CAPTURES stays 3)


def format_value(v, kind: str) -> str:
    """A calibrate figure in its tolerance's unit, one precision per unit so columns compare:
    ``rel`` as percent with 2 decimals (proposals step by 0.1 %), ``pp`` with 2 decimals
    (proposals step by 0.01 pp), ``abs`` with 3 decimals in the metric unit; None -> "-"."""
    if v is None:
        return "-"
    if kind == "rel":
        return f"{v * 100:.2f}%"
    if kind == "pp":
        return f"{v:.2f} pp"
    return f"{v:.3f}"


def stability_warning(captures: int) -> str | None:
    """A warning when fewer than :data:`STABLE_CAPTURES` captures were calibrated from, else None.

    The robust sigma 1.4826 × MAD of n per-capture values is itself noisy: for normal noise
    and n = 3 its median is 0.54 × the true sigma and its 5th-95th percentile range 0.04-1.78 ×
    (n = 5: 0.18-1.72 ×, n = 10: 0.42-1.51 ×; 200,000 simulated draws), i.e. off by ~2x."""
    if captures >= STABLE_CAPTURES:
        return None
    return (f"warning: noise sigma from only {captures} captures is unstable: a MAD sigma from 3 runs can be "
            f"off by ~2x (typically too low, so the proposed tolerances may be too tight); profile "
            f"{STABLE_CAPTURES}-10 runs of one commit for tolerances to rely on")


POWER_NOTE = ("note: the last column comes from the per-capture sigma (a test on per-capture values); "
              "check's interval pools the step samples as if the steps were independent. The figure is "
              "conservative when steps are independent and the right one when captures differ "
              "(steps of one capture share a device allocation).")


def render_table(proposals: list[dict], captures: int, k: float, path=None) -> list[str]:
    """The ``perfgate calibrate`` printout as lines: header, one row per proposal (sigma,
    repeated-capture and single-capture tolerance now -> proposed with verdicts, smallest
    shift caught 99 % of the time with :data:`POWER_RUNS` runs per side), the note on the power
    column, the stability warning when fewer than :data:`STABLE_CAPTURES` captures, and the
    written file. Numbers formatted by :func:`format_value`."""
    fmt = format_value
    bands = [p for p in proposals if p["kind"] == "band"]
    proposals = [p for p in proposals if p["kind"] != "band"]
    lines = [f"calibrated from {captures} captures (k = {k:g}):"]
    runs = sorted(proposals[0]["detectable"]) if proposals else []
    lines.append("  metric | noise sigma | repeated-capture tolerance now -> proposed | single-capture now -> proposed"
                 + (f" | smallest shift caught 99% of the time (proposed tolerance) with "
                    f"{' / '.join(map(str, runs))} runs per side" if runs else ""))
    for p in proposals:
        det = " / ".join(fmt(p["detectable"][r], p["kind"]) for r in runs)
        lines.append(f"  {p['metric']} | {fmt(p['sigma'], p['kind'])} | {fmt(p['current_stat'], p['kind'])} -> "
                     f"{fmt(p['proposed_stat'], p['kind'])} ({p['verdict_stat']}) | "
                     f"{fmt(p['current_single'], p['kind'])} -> {fmt(p['proposed_single'], p['kind'])} "
                     f"({p['verdict_single']}) | {det}")
    for p in proposals:
        if p.get("spread_sets_single"):
            lines.append(f"  note: {p['metric']}: the calibration captures differ by {fmt(p['spread'], p['kind'])} "
                         f"({p['spread_key']}), more than k x sqrt(2) x sigma "
                         f"({fmt(p['k'] * math.sqrt(2) * p['sigma'], p['kind'])}): the single-capture tolerance "
                         f"is set to that spread, so no calibration run fails against another; a run far from "
                         f"the others may be a bad capture: look at it before trusting the band")
    for p in bands:
        lines.append(f"  {p['metric']} (noise band of a part's own time) | {p['current']:.1%} -> {p['proposed']:.1%} "
                     f"({p['verdict']}; set by {p['worst_key']})")
    if runs:
        lines.append("  " + POWER_NOTE)
    warn = stability_warning(captures)
    if warn:
        lines.append("  " + warn)
    if path is not None:
        lines.append(f"  wrote {path}")
    return lines
