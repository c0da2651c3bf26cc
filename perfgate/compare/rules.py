"""Compare: two fingerprints + a policy -> one verdict per metric. Pure (no I/O).

Rules, in order, for every metric key present on either side:

1. Comparability: a config facet the metric depends on differs (rank count or rank ids; Type /
   Accelerator Core values present on one side only, e.g. Level0 vs Level1; category rules;
   family rule; communication.json on one side only) -> ``incomparable`` with the reason.
   A toolchain change (CANN / torch_npu version) keeps per-kernel metrics comparable but
   informational (G07).
2. Presence: a kernel family / type / core / category absent on one side counts as 0 calls or
   0 share (``absent_is_zero``); any other metric present on one side only is ``new`` or
   ``missing`` and never fails the gate (P07).
3. Value: delta = candidate − baseline against the policy tolerance (abs in the metric unit,
   rel as a fraction of |baseline|, pp in percentage points for ratios); beyond it the
   metric's direction decides ``regression`` or ``improvement`` (``exact``: any change is a
   regression). Top-N sets use the policy's slack: a family only enters / leaves when it is
   beyond rank N + slack on the other side.

4. Repeated captures (either side merged from several runs): metrics with per-step samples
   are re-judged by the interval of their change (:mod:`perfgate.compare.stats`: the
   Hodges-Lehmann shift's confidence interval beyond, inside or straddling the tolerance), or
   ``unsure`` with the runs needed.
5. Parts of the step: a ΣDuration share and the exposed-communication / underfeed ratios are
   judged through the time they stand for, against the device's speed
   (:mod:`perfgate.compare.parts`); the raw share is shown and never fails on its own.
   Regressed aggregates get the kernel families beyond the device's speed
   (:mod:`perfgate.compare.attribution`).

Only gated metrics in gated views (policy ``gate_views``) can fail the gate.

A profiler-level or collection-option change (with_stack, record_shapes, profile_memory,
activities, ...: :mod:`perfgate.metrics.collection`) leaves every metric judged and is a note
at the top of the report (:func:`config_notes`), naming what it affects.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from perfgate import terms
from perfgate.metrics import registry
from perfgate.metrics import stages
from perfgate.metrics.collection import collection_notes
from perfgate.metrics.repeat import runs_of
from perfgate.metrics.segments import UNIQUE
from perfgate.metrics.workload import other_workload
from perfgate.model import Comparison, Fingerprint, metric_key
from perfgate.policy import Policy, Tolerance, significant
from perfgate.compare.stats import apply_statistics
from perfgate.compare.attribution import attribute_families
from perfgate.compare.parts import judge_parts
from perfgate.compare.renames import RENAME_TIME_NOISE, apply_renames, find_renames

_ORDER = {terms.REGRESSION: 0, terms.IMPROVEMENT: 1, terms.INCOMPARABLE: 2, terms.NEW: 3,
          terms.MISSING: 4, terms.UNCHANGED: 5, terms.UNSURE: 1}
_FACET_TEXT = {
    "type_available": "operator Type values (N/A at profiler Level0)",
    "core_available": "Accelerator Core values (N/A at profiler Level0)",
    "categories_digest": "category rules of the policy",
    "has_comm_json": "communication.json",
    "operator_digest": "family suffix and phase rules of the policy",
    "mfu_digest": "MFU FLOPs spec and peak table",
    "pipe_available": "PipeUtilization columns (aic_metrics=PipeUtilization)",
}
_FAMILY_METRICS = ("kernel.calls_per_step", "kernel.topn", "kernel.time_us")


def _rank_sets_differ(base: Fingerprint, cand: Fingerprint) -> bool:
    """True when both sides record their rank ids (``config["ranks"]``) and the sets differ
    (old baselines without the list are judged by rank count alone)."""
    br, cr = base.config.get("ranks"), cand.config.get("ranks")
    return bool(br) and bool(cr) and sorted(br) != sorted(cr)


def incompatibility(base: Fingerprint, cand: Fingerprint, comparisons) -> str | None:
    """Why the baseline cannot judge this candidate at all (None when it can): a different
    rank count or a different set of rank ids (a renumbered rank is a missing plus an extra
    one), another workload (:func:`_other_workload`), or no gated metric that could be
    compared. Such a check is never a pass."""
    bw, cw = base.config.get("world_size"), cand.config.get("world_size")
    if bw != cw or _rank_sets_differ(base, cand):
        return (f"the baseline has {bw} rank(s), ranks {base.config.get('ranks')}, but the candidate has {cw}, "
                f"ranks {cand.config.get('ranks')}: a missing or extra rank makes the captures different jobs")
    other = _other_workload(base, cand)
    if other:
        return other
    judged = [c for c in comparisons if c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT,
                                                                    terms.UNCHANGED, terms.UNSURE)]
    if not judged:
        return "no gated metric could be compared (all incomparable, new or missing)"
    return None


def _other_workload(base: Fingerprint, cand: Fingerprint) -> str | None:
    """Why the two sides are not the same workload (:func:`perfgate.metrics.workload.other_workload`:
    a baseline of another model or job, e.g. a CI matrix leg pointed at the wrong baseline
    name), or None. Judging such a pair metric by metric would report every family of each side
    as new or gone, a REGRESSION whose causes are all side effects of the mix-up. Not applied
    when the toolchain (CANN / torch_npu) changed, since kernel names may change with it."""
    if _toolchain_changed(base, cand):
        return None
    why = other_workload(base, cand)
    return f"{why}: a baseline of another model or job" if why else None


def config_notes(base: Fingerprint, cand: Fingerprint) -> list[str]:
    """Human sentences for every config facet that differs (toolchain, level, ranks, ...) and
    every profiler collection option (with_stack, record_shapes, profile_memory, activities,
    schedule, ...: :func:`perfgate.metrics.collection.collection_notes`). Like the level change,
    a changed collection option is a note at the top of the report, never a reason to leave a
    metric unjudged: :mod:`perfgate.metrics.collection` says which options change what is
    measured and what each affects. A side whose timeline was not read (``config.has_trace``
    false) is named too: lost device tasks are found only from trace_view.json's host launches
    (:func:`perfgate.ingest.validity.lost_launches`)."""
    notes = []
    for key, label in (("profiler_level", "profiler level"), ("aic_metrics", "aic_metrics"),
                       ("export_type", "export type"), ("cann_version", "CANN version"),
                       ("torch_npu_version", "torch_npu version"), ("world_size", "rank count"),
                       ("kernel_variants", "kernel table format (export / header)")):
        b, c = base.config.get(key), cand.config.get(key)
        if b != c:
            notes.append(f"{label} changed: baseline {terms.shown_value(b)} -> candidate {terms.shown_value(c)}")
    notes.extend(collection_notes(base.config, cand.config))
    unread = [side for side, fp in (("baseline", base), ("candidate", cand)) if fp.config.get("has_trace") is False]
    if unread:
        notes.append(f"lost device tasks not checked on the {' and '.join(unread)}: trace_view.json was not read "
                     f"(--trace never, a trace skipped by --trace auto, or none), and its host launches are "
                     f"the only witness of device tasks the profiler lost; without them a lost task reads as "
                     f"a call not made. --trace always reads it")
    if _toolchain_changed(base, cand):
        notes.append("toolchain changed: per-kernel metrics (families, types, shares, Top-N) are "
                     "reported but do not gate; step-level metrics still gate")
    br, cr = base.config.get("ranks"), cand.config.get("ranks")
    if br and cr and br != cr and len(br) == len(cr):
        notes.append(f"rank ids differ: baseline {br}, candidate {cr}; a missing or extra rank makes the "
                     f"captures different jobs, so nothing is compared")
    sb = base.provenance.get("steps", {})
    sc = cand.provenance.get("steps", {})
    nb = {len(v) for v in sb.values()}
    nc = {len(v) for v in sc.values()}
    if nb and nc and nb != nc and (runs_of(base) > 1 or runs_of(cand) > 1):
        notes.append(f"step count differs: baseline {sorted(nb)} step(s) per rank over {runs_of(base)} "
                     f"capture(s), candidate {sorted(nc)} over {runs_of(cand)}; metrics with per-step samples "
                     f"are judged by the interval of their shift over all pooled step samples (its runs bound counts "
                     f"captures, not steps), counts and metrics without samples by their medians")
    elif nb and nc and nb != nc:
        notes.append(f"step count differs: baseline {sorted(nb)} step(s) per rank, candidate "
                     f"{sorted(nc)}; per-step medians are compared")
    return notes


def _toolchain_changed(base, cand) -> bool:
    for key in ("cann_version", "torch_npu_version"):
        b, c = base.config.get(key), cand.config.get(key)
        if b and c and b != c:
            return True
    return False


def _lost_tasks_reason(base: Fingerprint, cand: Fingerprint) -> str | None:
    """Why counts are incomplete, or None: the first side (baseline, then candidate) holding a
    DEVICE_TASKS_LOST finding (host launches without a device task make the step incomplete),
    naming its first four (rank, step). One pass over each side's findings per comparison."""
    for side, fp in (("baseline", base), ("candidate", cand)):
        lost = [f for f in fp.findings if f.code == "DEVICE_TASKS_LOST"]
        if lost:
            where = ", ".join(f"rank {f.rank} step {f.step}" for f in lost[:4])
            return f"the {side} lost device tasks ({where}): its counts are incomplete"
    return None


def _incomplete_counts(ref, lost_reason: str | None) -> str | None:
    """Counts (unit ``calls``) are not compared when either side lost device tasks
    (``lost_reason`` from :func:`_lost_tasks_reason`, computed once per comparison)."""
    return lost_reason if ref.unit == "calls" else None


def _coverage_differs(b, c, base: Fingerprint, cand: Fingerprint) -> str | None:
    """A metric is computed over the ranks that hold its table (``context["over_ranks"]``, else
    every rank of the capture); when the two sides' rank sets differ it is not compared. The
    rank0 view is one rank's own value (its rank id is checked with the capture's rank set)."""
    if b is None or c is None or b.labels.get("view") == terms.VIEW_RANK0:
        return None
    rb = b.context.get("over_ranks") or base.config.get("ranks")
    rc = c.context.get("over_ranks") or cand.config.get("ranks")
    if rb and rc and sorted(rb) != sorted(rc):
        return (f"computed over ranks {sorted(rb)} in the baseline but ranks {sorted(rc)} in the candidate "
                f"(the ranks holding its table differ)")
    return None


def _rank0_not_held(b, c, base: Fingerprint, cand: Fingerprint) -> str | None:
    """The rank0 view of a metric measured on one side only, where that side's first rank is a
    partial rank (no kernel table: step_trace_time.csv / communication.json only): the metric
    was not measured there, it did not fall to 0. Without this an absent-is-zero count read
    "gone" (every family, 3 -> 0 calls) and the other direction "new" (level1 with rank 0 partial
    gave REGRESSION, 54 causes)."""
    if (b is None) == (c is None) or (b or c).labels.get("view") != terms.VIEW_RANK0:
        return None
    side, fp = ("baseline", base) if b is None else ("candidate", cand)
    cov = fp.config.get("coverage") or {}
    if not cov:
        return None
    r0 = min(cov, key=lambda r: int(r))
    if "kernels" in (cov[r0] or ()):
        return None
    return (f"rank {r0} holds no kernel table in the {side} (a partial rank: {', '.join(cov[r0]) or 'no table'}), "
            f"so its rank0 view is not measured there")


_LAYER_WALLS = ("layer.wall_p50_us",)
_UNIQUE_LIMIT = 0.5   # above this share of unique layers, a layer is not a repeated unit


def _unique_share(fp: Fingerprint, layer_pass: str, view: str) -> tuple[float, float] | None:
    """``(unique, all)``: layers per micro-batch pass of ``layer_pass`` whose class occurs once
    per micro-batch pass (``layer.class_count{class=unique}``), and of every class (Σ over
    ``layer.class_count`` in ``view``); None when the fingerprint holds no class counts."""
    unique = total = 0.0
    seen = False
    for m in fp.metrics.values():
        if m.name != "layer.class_count" or m.labels.get("pass") != layer_pass or m.labels.get("view") != view:
            continue
        seen = True
        total += float(m.value)
        if m.labels.get("class") == UNIQUE:
            unique += float(m.value)
    return (unique, total) if seen and total > 0 else None


def _layer_classes(fp: Fingerprint, layer_pass: str) -> set | None:
    """The layer class ids of ``layer_pass`` over every rank's structure detail
    (``detail["segments"][*]["classes"]``, level ``layer``), or None without that detail."""
    ranks = (fp.detail or {}).get("segments")
    if not ranks:
        return None
    return {c.get("class_id") for r in ranks for c in r.get("classes") or ()
            if c.get("level") == "layer" and c.get("pass") == layer_pass}


def _layers_not_repeated(name: str, labels: dict, base: Fingerprint, cand: Fingerprint) -> str | None:
    """A median layer wall (``layer.wall_p50_us``, and its rank skew) compares like with like only
    when both sides cut the same layers. Where the layers recur (at most half of the pass's layers
    per micro-batch pass in no recurring class, ``layer.class_count{class=unique}``) the repeated
    unit fixes the boundaries. Where most layers on a side belong to no recurring class, the
    boundaries fall wherever the kernel sequence puts them; they are the same only when both sides
    hold the same layer classes (the ordered kernel families of each layer, hashed), as two
    captures of one model at two profiler levels do. Otherwise the value is not compared, with the
    reason: the bundled demo's doubled Cast calls moved the first layer from row 15 to row 57 of
    the step and halved the "median layer wall" of a slower model. Fingerprints without class
    counts (older perfgates) compare as before."""
    if name == "rank.skew_ratio":
        if labels.get("metric") not in _LAYER_WALLS:
            return None
        view = terms.VIEW_P50
    elif name in _LAYER_WALLS:
        view = labels.get("view")
    else:
        return None
    layer_pass = labels.get("pass")
    for side, fp in (("baseline", base), ("candidate", cand)):
        got = _unique_share(fp, layer_pass, view)
        if not got or got[0] <= _UNIQUE_LIMIT * got[1]:
            continue
        lead = (f"the {layer_pass} layers do not repeat in the {side} ({got[0]:g} of {got[1]:g} layers per "
                f"micro-batch pass belong to no recurring class, {view} view)")
        bc, cc = _layer_classes(base, layer_pass), _layer_classes(cand, layer_pass)
        if bc is None or cc is None:
            return (f"{lead} and the {'baseline' if bc is None else 'candidate'} holds no layer classes to show "
                    f"that both sides cut the same layers")
        if bc != cc:
            return (f"{lead} and the layers differ between the sides ({len(bc - cc)} of {len(bc)} baseline layer "
                    f"classes absent from the candidate, {len(cc - bc)} new): the boundaries moved, and a "
                    f"median over other layers says nothing of the model's speed")
        return None
    return None


def _incomparable_reason(name: str, base: Fingerprint, cand: Fingerprint, view: str | None = None,
                         both: bool = False) -> str | None:
    """Why metric ``name`` cannot be compared between the two fingerprints, or None. ``both``:
    the metric was recorded on both sides (a family's calls and time do not depend on the policy's
    ``top_n``, only which families are recorded does: a top_n that differs makes the Top-N set and
    the families recorded on one side only incomparable)."""
    bw, cw = base.config.get("world_size"), cand.config.get("world_size")
    if bw != cw:
        return f"rank count changed ({bw} -> {cw}): per-rank work is not the same job"
    if _rank_sets_differ(base, cand):
        return (f"rank ids changed ({base.config.get('ranks')} -> {cand.config.get('ranks')}): per-rank work "
                f"is not the same job")
    d = registry.REGISTRY.get(name)
    for facet in (d.requires if d else ()):
        b, c = base.config.get(facet), cand.config.get(facet)
        if facet.endswith("_digest"):
            if b != c:
                return f"{_FACET_TEXT.get(facet, facet)} differ between baseline and candidate"
        elif not (b and c):
            side = "baseline" if not b else "candidate"
            if not b and not c:
                side = "both sides"
            return f"{_FACET_TEXT.get(facet, facet)} missing on {side}"
    if name in _FAMILY_METRICS:
        for facet in ("family_suffix", "top_n"):
            if facet == "top_n" and both and name != "kernel.topn":
                continue
            if base.config.get(facet) != cand.config.get(facet):
                return f"policy {facet} differs from the one the baseline was fingerprinted with"
    return None


def _allowance(base: float, tol: Tolerance, noise: float = 0.0) -> float:
    """The absolute amount a change of a metric with baseline ``base`` may move: the policy
    tolerance (:meth:`Tolerance.allowance`) plus a learned noise band, plus a float guard of
    1e-12 × max(1, |base|); a ``rel`` tolerance of a zero baseline without a band allows nothing."""
    if tol.kind == "rel" and base == 0 and not noise:
        return 0.0
    return tol.allowance(base) + noise + 1e-12 * max(1.0, abs(base))


def _fmt(v, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "ratio":
        return f"{v * 100:.2f}%"
    if unit in ("calls", "steps"):
        return f"{v:g}"
    if unit == "us":
        return f"{v:,.3f} us"
    if unit == "x":  # a dimensionless quotient (e.g. memory_bound), not a share
        return f"{v:.3f}x"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _subject(name: str, labels: dict) -> str:
    """The registry's text for one labelled value (:func:`perfgate.metrics.registry.subject`),
    with its cross-rank view as `` [view]``."""
    view = labels.get("view")
    what = registry.subject(name, {k: v for k, v in labels.items() if k not in ("view", "stage")})
    if labels.get("stage") is not None:   # a rank skew within one pipeline stage
        what = f"{what} [stage {labels['stage']}]"
    return f"{what} [{terms.view_text(view)}]" if view else what


def _compare_topn(key, name, labels, b, c, gated: bool) -> Comparison:
    bctx, cctx = b.context, c.context
    depth_b = set(bctx.get("ranked", []))
    depth_c = set(cctx.get("ranked", []))
    entered = sorted(set(c.value) - depth_b)
    left = sorted(set(b.value) - depth_c)
    swapped = set(c.value) ^ set(b.value)
    subject = f"Top-{bctx.get('n')} kernel families by ΣDuration [{labels.get('view')}]"
    # a family entering the set takes more of the device than the families it passed: a regression
    # (new or grown). One that only left runs less or not at all: reported, never a regression
    # (a dropped family is a change to review, not a slowdown).
    verdict = terms.REGRESSION if entered else terms.UNCHANGED
    if entered or left:
        parts = []
        if entered:
            parts.append("entered: " + ", ".join(entered))
        if left:
            parts.append("left: " + ", ".join(left))
        reason = (f"{subject}: changed ({'; '.join(parts)}), beyond the slack of {bctx.get('slack')} ranks"
                  + ("" if entered else "; a family that only left the set is reported, never a regression"))
    else:
        reason = (f"{subject}: unchanged"
                  + (f" (swaps near the cut within the slack: {', '.join(sorted(swapped))})"
                     if swapped else ""))
    return Comparison(key=key, name=name, labels=labels, verdict=verdict, gated=gated,
                      fails=gated and verdict == terms.REGRESSION, baseline=b.value, candidate=c.value,
                      unit="set", caliber=b.caliber, tier=b.tier, delta=None, delta_rel=None,
                      tolerance=f"slack {bctx.get('slack')}", reason=reason,
                      evidence=c.evidence,
                      subject=subject)


def step_time_stand_in(base: Fingerprint, cand: Fingerprint, policy: Policy) -> dict:
    """``{device.time_us busy-union key: view}`` for each gated view in which a side has no step
    time (``step.time_us``: no step_trace_time.csv and no timeline, as in raw msprof output or a
    bare kernel_details.csv) while both have the device busy union per step. There the busy union
    is judged with step time's rule (direction, tolerance, gated): without it no time figure was
    gated at all, and every kernel 3x slower passed (a baseline without step time against a
    candidate with it likewise). Empty when step time is not gated or both sides
    have it (a step time the candidate lost is also ``missing``, as any gated metric)."""
    out = {}
    for view in policy.gate_views:
        rule = policy.rule_for("step.time_us", {"view": view})
        if not (rule and rule.gated):
            continue
        if all(any(m.name == "step.time_us" and dict(m.labels).get("view") == view for m in fp.metrics.values())
               for fp in (base, cand)):
            continue
        keys = [k for k, m in base.metrics.items() if m.name == "device.time_us" and k in cand.metrics
                and dict(m.labels).get("view") == view and dict(m.labels).get("caliber") == terms.BUSY_UNION]
        out.update({k: view for k in keys})
    return out


@dataclass(frozen=True)
class _Pair:
    """One comparison's inputs: both fingerprints, the ``policy``, the history ``noise`` bands
    ({metric key: absolute amount} or None), the busy-union keys judged in step time's place
    (:func:`step_time_stand_in`), whether the toolchain changed (per-kernel metrics then inform
    only) and why counts are incomplete when the profiler lost device tasks."""
    base: Fingerprint
    cand: Fingerprint
    policy: Policy
    noise: dict | None
    stand_in: dict
    toolchain: bool
    lost_reason: str | None
    stage_change: str | None = None   # why the pipeline stages cannot be paired (stages.layout_change)


def compare_fingerprints(base: Fingerprint, cand: Fingerprint, policy: Policy,
                         noise: dict | None = None) -> tuple[list, list]:
    """Compare baseline and candidate fingerprints under ``policy``.

    ``noise`` ({metric key: absolute amount}) widens a metric's tolerance by a band learned
    from history (rolling baselines, :meth:`perfgate.history.store.HistoryStore.rolling_baseline`).

    Returns:
        ``(comparisons, notes)``: :class:`~perfgate.model.Comparison` list sorted with failing
        and regressed metrics first; notes are sentences about config differences.
    """
    policy = stages.with_stage_views(policy, base, cand)   # stage S p50 gated as p50 is
    notes = config_notes(base, cand) + stages.stage_notes(base, cand)
    toolchain = _toolchain_changed(base, cand)
    lost_reason = _lost_tasks_reason(base, cand)     # one scan of the findings, not one per count
    stand_in = step_time_stand_in(base, cand, policy)
    if stand_in:
        notes.append(_stand_in_note(base, cand, stand_in))
    pair = _Pair(base=base, cand=cand, policy=policy, noise=noise, stand_in=stand_in, toolchain=toolchain,
                 lost_reason=lost_reason, stage_change=stages.layout_change(base, cand))
    out: list[Comparison] = []
    rules: dict = {}
    for key in sorted(set(base.metrics) | set(cand.metrics)):
        rules[key], comparison = _compare_metric(key, pair)   # the rule resolved once per metric
        if comparison is not None:
            out.append(comparison)
    return _judge_together(out, pair, rules, notes)


def _stand_in_note(base: Fingerprint, cand: Fingerprint, stand_in: dict) -> str:
    """The note saying the device busy union is gated in step time's place, and in which views."""
    sides = sum(any(m.name == "step.time_us" for m in fp.metrics.values()) for fp in (base, cand))
    return (f"no step time on {'either side' if not sides else 'one side'} (no step_trace_time.csv, no "
            f"timeline): the device busy union per step (device.time_us, busy union) is gated in its "
            f"place, with step time's rule, in the {'/'.join(sorted(set(stand_in.values())))} view(s)")


def _compare_metric(key: str, pair: _Pair) -> tuple:
    """``(rule, comparison)`` of metric ``key`` on its own: incomparable (with why), the Top-N set,
    present on one side only, or its values judged by the rule's direction and tolerance (plus
    the history noise band). ``comparison`` is None for a Top-N set one side lacks."""
    base, cand, policy = pair.base, pair.cand, pair.policy
    b = base.metrics.get(key)
    c = cand.metrics.get(key)
    ref = c or b
    name, labels = ref.name, dict(ref.labels)
    d = registry.REGISTRY.get(name)
    rule = (policy.rule_for("step.time_us", {"view": pair.stand_in[key]}) if key in pair.stand_in
            else policy.rule_for(name, labels))
    view = labels.get("view")
    gated = bool(rule and rule.gated and (view is None or view in policy.gate_views))
    if pair.toolchain and d is not None and d.per_kernel:
        gated = False
    subject = _subject(name, labels)
    common = dict(key=key, name=name, labels=labels, unit=ref.unit, caliber=ref.caliber,
                  tier=ref.tier, evidence=(c or b).evidence, subject=subject)
    tol_text = rule.tolerance.describe(ref.unit) if rule else "not in policy"
    noise = pair.noise
    if noise and noise.get(key):
        band = noise[key] * 100 if ref.unit == "ratio" else noise[key]
        tol_text += f" + noise band {significant(band)}{' pp' if ref.unit == 'ratio' else ' ' + ref.unit}"
    why = (_incomparable_reason(name, base, cand, view, both=b is not None and c is not None)
           or stages.not_paired(name, labels, pair.stage_change)
           or _coverage_differs(b, c, base, cand)
           or _rank0_not_held(b, c, base, cand)
           or _incomplete_counts(ref, pair.lost_reason) or _layers_not_repeated(name, labels, base, cand))
    if why:
        return rule, Comparison(verdict=terms.INCOMPARABLE, gated=gated, fails=False,
                                baseline=b.value if b else None, candidate=c.value if c else None,
                                delta=None, delta_rel=None, tolerance=tol_text,
                                reason=f"{subject}: not compared, {why}", **common)
    if name == "kernel.topn":
        return rule, (_compare_topn(key, name, labels, b, c, gated) if b and c else None)
    if (b is None or c is None) and not (d and d.absent_is_zero):
        return rule, _one_sided(b, c, gated, tol_text, common)
    return rule, _compare_values(b, c, rule, gated, tol_text, common, (noise or {}).get(key, 0.0))


def _one_sided(b, c, gated: bool, tol_text: str, common: dict) -> Comparison:
    """A metric measured on one side only (and not read as 0 where absent): NEW (only in the
    candidate, not judged), MISSING (failing when gated: the gate cannot vouch for it), or
    INCOMPARABLE when the metric is recorded for some label values only and the other side's
    capture did not record it."""
    name, labels, subject, unit = common["name"], common["labels"], common["subject"], common["unit"]
    d = registry.REGISTRY.get(name)
    verdict = terms.NEW if b is None else terms.MISSING
    lost = verdict == terms.MISSING and gated
    # recorded for some label values only (the rank skew of such a metric likewise)
    rec_for = d.recorded_for if d is not None else None
    if name == "rank.skew_ratio":
        of = registry.REGISTRY.get(labels.get("metric"))
        rec_for = of.recorded_for if of is not None else None
    if rec_for and not lost:   # not recorded on one side: not compared
        verdict = terms.INCOMPARABLE
    reason = (f"{subject}: {_fmt((c or b).value, unit)} in the {'candidate' if b is None else 'baseline'}; "
              f"the {'baseline' if b is None else 'candidate'} records it only for {rec_for}, "
              f"not judged (not new, not gone)"
              if rec_for and not lost else
              f"{subject}: only in the candidate ({_fmt(c.value, unit)}), not judged"
              if b is None else
              f"{subject}: gated in the baseline ({_fmt(b.value, unit)}) but not measured in the "
              f"candidate: the gate cannot vouch for it (a file the baseline had is missing?)"
              if lost else
              f"{subject}: in the baseline ({_fmt(b.value, unit)}) but not measured in "
              f"the candidate, not judged")
    return Comparison(verdict=verdict, gated=gated, fails=lost,
                      baseline=b.value if b else None, candidate=c.value if c else None,
                      delta=None, delta_rel=None, tolerance=tol_text, reason=reason, **common)


def _compare_values(b, c, rule, gated: bool, tol_text: str, common: dict, noise_band: float) -> Comparison:
    """Judge a metric's two values (a side without it counts 0: the registry reads it so) by the
    rule's direction, its tolerance widened by ``noise_band``; a metric no rule covers is
    informational, any change a regression."""
    unit, subject, caliber = common["unit"], common["subject"], common["caliber"]
    bv = float(b.value) if b else 0.0
    cv = float(c.value) if c else 0.0
    delta = cv - bv
    rel = delta / abs(bv) if bv else None
    presence = ""
    if b is None:
        presence = " (new: absent from the baseline)"
    elif c is None:
        presence = " (gone: absent from the candidate)"
    if rule is None:
        verdict = terms.UNCHANGED if delta == 0 else terms.REGRESSION
        gated = False
    else:
        verdict = terms.Direction(rule.direction).judge(delta, allowance=_allowance(bv, rule.tolerance, noise_band))
    if unit == "ratio":
        dtext = f"{delta * 100:+.2f} pp"
    elif unit in ("calls", "steps"):
        dtext = f"{delta:+g}"
    else:
        dtext = f"{delta:+,.3f} {unit}" + (f", {rel:+.1%}" if rel is not None else "")
    moved = {terms.UNCHANGED: "within", terms.REGRESSION: "beyond",
             terms.IMPROVEMENT: "beyond"}[verdict]
    cal = f", {terms.CALIBER_LABEL[caliber]}" if caliber in terms.CALIBER_LABEL else ""
    reason = (f"{subject}{presence}: {_fmt(bv, unit)} -> {_fmt(cv, unit)} ({dtext}{cal}), "
              f"{moved} tolerance {tol_text}"
              + ("" if gated else "; informational"))
    return Comparison(verdict=verdict, gated=gated,
                      fails=gated and verdict == terms.REGRESSION, baseline=b.value if b else 0.0,
                      candidate=c.value if c else 0.0, delta=delta, delta_rel=rel,
                      tolerance=tol_text, reason=reason, **common)


def _judge_together(out: list, pair: _Pair, rules: dict, notes: list) -> tuple[list, list]:
    """The judgements that look at several comparisons at once, in order: gains that moved between
    ranks withheld, negligible rank skews, the statistics of repeated runs, the parts of the step
    beyond the device, the families behind each symptom, renamed families; then sorted failing
    and regressed first. Appends the parts' and renames' notes to ``notes``."""
    base, cand, policy, noise = pair.base, pair.cand, pair.policy, pair.noise
    out = withhold_moved_gains(out)
    out = negligible_skews(out, base, cand, getattr(getattr(policy, "operators", None), "family_min_share", None))
    out = apply_statistics(out, base, cand, policy, rules=rules)
    out, scales = judge_parts(out, base, cand, policy.parts, noise=noise, rules=rules,
                              confidence=float((getattr(policy, "statistics", None) or {}).get("confidence", 0.95)))
    notes.extend(f"parts [{view}]: {s.describe()}" for view, s in sorted(scales.items(), key=lambda kv: str(kv[0]))
                 if s.why)
    beyond = {(c.labels.get("family"), c.labels.get("view")) for c in out
              if c.name == "share.family" and c.verdict == terms.REGRESSION}
    out = [attribute_families(_attribute(c, base, cand), base, cand, scales=scales, beyond=beyond) for c in out]
    renames = find_renames(base, cand, policy.gate_views)
    out = apply_renames(out, renames)   # a family under another name is one family: informational
    notes.extend(f"kernel family renamed: {r.old} -> {r.new} (same calls per step, Type and core; ΣDuration "
                 f"within {RENAME_TIME_NOISE:.0%})" for r in renames)
    out.sort(key=lambda x: (not x.fails, _ORDER[x.verdict], not x.gated, x.key))
    return out, notes


def _moved_between_ranks(out: list) -> dict:
    """{metric key: text} for each improved comparison whose metric regressed in another view
    (same name and labels but the view), or, for ``rank.skew_ratio{metric=M, ...}``, whose M
    regressed in some view: the text names that view and its move."""
    worse: dict = {}
    for c in out:
        if c.verdict == terms.REGRESSION and c.labels.get("view") is not None:
            rest = tuple(sorted((k, str(v)) for k, v in c.labels.items() if k != "view"))
            worse.setdefault((c.name, rest), []).append(c)
    moved = {}
    for c in out:
        if c.verdict != terms.IMPROVEMENT:
            continue
        if c.name == "rank.skew_ratio":
            name = c.labels.get("metric")
            rest = tuple(sorted((k, str(v)) for k, v in c.labels.items() if k != "metric"))
        else:
            name = c.name
            rest = tuple(sorted((k, str(v)) for k, v in c.labels.items() if k != "view"))
        other = [w for w in worse.get((name, rest), ()) if w.labels.get("view") != c.labels.get("view")]
        if other:
            w = other[0]
            moved[c.key] = f"the {w.labels['view']} view of {name} moved the other way ({_delta_text(w)})"
    return moved


def _delta_text(c: Comparison) -> str:
    if c.delta is None:
        return "regression"
    if c.unit == "ratio":
        return f"{c.delta * 100:+.2f} pp"
    return f"{c.delta:+,.3f} {c.unit}" if c.unit == "us" else f"{c.delta:+g} {c.unit}"


def withhold_moved_gains(out: list) -> list:
    """An improvement in one cross-rank view while the same metric regressed in another is the
    metric moving between ranks, not a gain: on the real Level1 -> Level2 captures,
    ``comm.wait_ratio`` fell 21.6 pp on rank 0 because rank 1 took over the waiting (p50
    +21.3 pp), and the rank skew of it "improved" 171 % -> 53 % for the same reason. Such an
    informational improvement is not judged (``incomparable``, the reason naming the other view);
    a gated one keeps its verdict (improvements never decide the gate) with the same words in
    its reason."""
    moved = _moved_between_ranks(out)
    if not moved:
        return out
    res = []
    for c in out:
        why = moved.get(c.key)
        if why is None:
            res.append(c)
        elif c.gated:
            res.append(replace(c, reason=f"{c.reason}; but {why}: part of it moved between ranks"))
        else:
            res.append(replace(c, verdict=terms.INCOMPARABLE, fails=False,
                               reason=f"{c.reason}; not judged a gain: {why}, so it moved between ranks"))
    return res


def negligible_skews(out: list, base: Fingerprint, cand: Fingerprint, min_share: float | None) -> list:
    """The rank skew ((max − min) / mean) of a share that stays below ``min_share`` (the policy's
    ``operators.family_min_share``, 1 % by default) on every rank of both sides is not judged: a
    family at 0.018 % of the device's ΣDuration on rank 0 and 0.017 % on rank 1 has a 4 % skew,
    28 % in the baseline, and that was called an improvement. Such a skew comparison becomes
    ``incomparable`` with the reason (its values stay in the report); gated ones are left alone."""
    if not min_share:
        return out
    res = []
    for c in out:
        if (c.name != "rank.skew_ratio" or c.gated or c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT)
                or not str(c.labels.get("metric", "")).startswith("share.")):
            res.append(c)
            continue
        labels = {k: v for k, v in c.labels.items() if k != "metric"}
        key = metric_key(c.labels["metric"], **labels, view=terms.VIEW_MAX)
        highs = [fp.metrics[key].value for fp in (base, cand) if key in fp.metrics]
        if len(highs) == 2 and max(highs) < min_share:
            res.append(replace(c, verdict=terms.INCOMPARABLE, fails=False, reason=(
                f"{c.reason}; not judged: the share stays below operators.family_min_share "
                f"{min_share * 100:g}% on every rank (max {highs[0] * 100:.3f}% -> {highs[1] * 100:.3f}%), "
                f"where a rank skew is noise")))
        else:
            res.append(c)
    return res


_COMM_AGGREGATES = ("step.exposed_comm_ratio", "step.comm_not_overlapped_us", "step.comm_us")


def _attribute(c: Comparison, base: Fingerprint, cand: Fingerprint) -> Comparison:
    """Append to a communication regression the HCCL kinds whose uncovered time grew most
    (``comm.exposed_us{kind}``, uncovered communication, in the same view), so the report says
    what got slower."""
    if c.name not in _COMM_AGGREGATES or c.verdict != terms.REGRESSION:
        return c
    view = c.labels.get("view")
    grew = []
    for key in set(base.metrics) | set(cand.metrics):
        m = cand.metrics.get(key) or base.metrics.get(key)
        if m.name != "comm.exposed_us" or m.labels.get("view") != view:
            continue
        b = float(base.metrics[key].value) if key in base.metrics else 0.0
        v = float(cand.metrics[key].value) if key in cand.metrics else 0.0
        if v - b > 0:
            calls_key = metric_key("comm.calls_per_step", kind=m.labels["kind"], view=view)
            cb = base.metrics.get(calls_key)
            cc = cand.metrics.get(calls_key)
            calls = f", calls {cb.value:g} -> {cc.value:g}" if cb and cc else ""
            grew.append((v - b, f"{m.labels['kind']} uncovered {b:,.1f} -> {v:,.1f} us ({v - b:+,.1f} us{calls})"))
    if not grew:
        return c
    grew.sort(reverse=True)
    text = "; ".join(t for _, t in grew[:5])
    return replace(c, reason=f"{c.reason}. HCCL kinds that grew: {text}")


def summarize(comparisons) -> str:
    """``PASS``, ``REGRESSION`` or ``UNSURE`` from the comparisons (only gated regressions
    fail; a gated ``unsure`` without any regression makes the check ``UNSURE``)."""
    if any(c.fails for c in comparisons):
        return terms.Status.REGRESSION
    if any(c.gated and c.verdict == terms.UNSURE for c in comparisons):
        return terms.UNSURE_STATUS
    return terms.PASS
