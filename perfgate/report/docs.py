"""Reference documentation generated from the code: ``docs/metrics.md``.

:func:`render_metrics_reference` renders every metric of :data:`perfgate.metrics.registry.REGISTRY`
(name, unit, caliber, tier, labels, what it needs, description with its formula, source) with the
default policy's setting for it (gated, direction, tolerance, label overrides). The committed
``docs/metrics.md`` must equal its output (``tests/package/test_docs.py``); regenerate it with::

    python3 -m perfgate.report.docs docs/metrics.md
"""
from __future__ import annotations

import sys
from pathlib import Path

from perfgate import terms
from perfgate.metrics import registry
from perfgate.policy import load_policy

REGENERATE = "python3 -m perfgate.report.docs docs/metrics.md"

TIER_TEXT = {
    terms.TIER_EXACT: "1 exact: counts and sets, identical for identical work",
    terms.TIER_SHARE: "2 share: aggregate time shares, within a fraction of a percentage point run to run",
    terms.TIER_STEP: "3 step: step aggregates, a few percent run to run",
    terms.TIER_CONTEXT: "4 context: single-kernel / single-collective times, never gated by default",
}


def caliber_text(d: registry.MetricDef) -> str:
    """The caliber column of one metric: ΣDuration / busy union / elapsed, else its ``caliber_note``.

    Raises:
        ValueError: a metric with neither (the registry must say what its figure is measured on).
    """
    if d.caliber in terms.CALIBER_LABEL:
        return terms.CALIBER_LABEL[d.caliber]
    if d.caliber_note:
        return d.caliber_note
    raise ValueError(f"metric {d.name} has no caliber and no caliber_note in perfgate/metrics/registry.py")


def _value(x) -> str:
    return str(getattr(x, "value", x))  # str-Enum members and plain strings alike


def _rule_text(rule, unit: str) -> str:
    if rule is None:
        return "not in the policy (reported, never gated)"
    gate = "gated" if rule.gated else "reported only"
    return f"{gate}, {_value(rule.direction)}, {rule.tolerance.describe(unit)}"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_metrics_reference(policy=None) -> str:
    """Markdown text of ``docs/metrics.md``: a summary table (metric, unit, caliber, tier,
    default policy) and one section per registry metric in registry order. ``policy``: the
    policy whose settings are shown (default: the bundled default policy). Pure over the
    registry and the policy; the same inputs give the same text byte for byte."""
    policy = policy or load_policy()
    out = [
        "# Metrics reference",
        "",
        f"<!-- generated from perfgate/metrics/registry.py and the default policy by "
        f"perfgate.report.docs.render_metrics_reference(); regenerate with `{REGENERATE}`; "
        f"tests/package/test_docs.py checks it is current -->",
        "",
        "Every quantity a fingerprint can hold. Each value is one metric with labels, written",
        "`name{label=value,...}`, in a cross-rank view: `rank0` (the lowest rank id), `p50` (median",
        "over ranks) or `max` (`gate_views` in the policy says which views gate; default rank0, p50).",
        "In a capture whose ranks run several programs (pipeline stages), `p50` / `max` are taken",
        "within each stage, `stage<S>.p50` / `stage<S>.max`, and gate as `p50` / `max` do",
        "([captures.md](captures.md#pipeline-stages)).",
        "Per rank, a metric is computed per step and reduced over the steps: counts take the lower",
        "median (an observed count), times and shares the median.",
        "",
        "* **unit**: `us` microseconds, `ratio` a fraction 0..1 (tolerances for ratios are in",
        "  percentage points, pp), `calls` / `rows` / `steps` / `layers` / `blocks` counts, `set` a set of names.",
        "* **caliber**: how a time figure was aggregated. *ΣDuration* is the plain sum of task",
        "  durations across streams (overlapped communication counted twice); *busy union* merges the",
        "  intervals first (each busy microsecond once); *elapsed* is wall-clock time on the device",
        "  timeline, idle time included (a step's time, its Free time and bubbles). Figures that are",
        "  not times of tasks say what they are measured on.",
        "* **tier**: how reproducible the quantity is between two captures of the same job:",
    ]
    out += [f"  {TIER_TEXT[t]};" for t in sorted(TIER_TEXT)]
    out += [
        "* **default policy**: the setting in the bundled default policy, `default.yaml` (gated or reported only,",
        "  direction, tolerance). See [policy.md](policy.md).",
        "",
        "| metric | unit | caliber | tier | default policy |",
        "|---|---|---|---|---|",
    ]
    for d in registry.REGISTRY.values():
        cal = caliber_text(d).split(" (")[0].split(":")[0]
        out.append(f"| [`{d.name}`](#{d.name.replace('.', '')}) | {d.unit} | {cal} | {d.tier} | "
                   f"{_md(_rule_text(policy.rule_for(d.name), d.unit))} |")
    overrides = {}
    for ov in policy.overrides:
        overrides.setdefault(ov.metric, []).append(ov.labels)
    for d in registry.REGISTRY.values():
        out += ["", f"## {d.name}", "", _md(d.description[:1].upper() + d.description[1:]) + ".", ""]
        out.append(f"* unit: {d.unit}")
        out.append(f"* caliber: {caliber_text(d)}")
        out.append(f"* tier: {TIER_TEXT[d.tier]}")
        labels = sorted(registry.label_keys(d.name))
        out.append(f"* labels: {', '.join(f'`{k}`' for k in labels) if labels else 'none'}")
        out.append(f"* source: {d.source}")
        if d.requires:
            out.append(f"* comparable only when both sides have: {', '.join(f'`{r}`' for r in d.requires)}")
        if d.absent_is_zero:
            out.append("* absent on one side counts as 0 there (e.g. a kernel family with no calls), "
                       "not as \"not measured\"")
        if d.recorded_for:
            out.append(f"* recorded only for {d.recorded_for}: a value absent on one side is not recorded there "
                       f"(not compared, never new / gone); within a side every rank holds its own value")
        if d.per_kernel:
            out.append("* per-kernel: informational when the CANN / torch_npu version changed")
        out.append(f"* default policy: {_rule_text(policy.rule_for(d.name), d.unit)}")
        for labels_ov in overrides.get(d.name, []):
            lab = ",".join(f"{k}={v}" for k, v in sorted(labels_ov.items()))
            out.append(f"  * `{d.name}{{{lab}}}`: {_rule_text(policy.rule_for(d.name, labels_ov), d.unit)}")
    return "\n".join(out) + "\n"


def write_metrics_reference(path="docs/metrics.md") -> Path:
    """Write :func:`render_metrics_reference` (default policy) to ``path`` (UTF-8); returns the path.

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(path)
    path.write_text(render_metrics_reference(), encoding="utf-8")
    return path


if __name__ == "__main__":
    write_metrics_reference(*sys.argv[1:2])
