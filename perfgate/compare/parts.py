"""One model of the step: every part is judged by its own time per step against the device's speed.

A step is a sum of parts. msprof's step_trace_time.csv writes it as
``step time = Computing + Communication(Not Overlapped) + Free`` (busy union of the compute
tasks, exposed communication, idle time); Computing's ΣDuration splits into kernel families,
communication's into HCCL kinds. A ΣDuration share (``share.family``, ``share.category``,
``share.core_type``, ``share.phase``, ``share.phase_category``, ``block.share``,
``pipe.bound_share``) and a ratio of step figures (``step.exposed_comm_ratio``,
``step.underfeed_ratio``) move whenever any other part moves: they say where time went, not which
part got worse. So each is judged through the time it stands for, and the raw share or ratio is
shown beside it and never fails on its own:

====================================  ==================================================
comparison                             own time per step (us) it is judged through
====================================  ==================================================
a ΣDuration share ``p``                ``p · D``, D = ``device.time_us{caliber=sum_duration}``
``step.exposed_comm_ratio``            ``step.comm_not_overlapped_us`` (exposed communication)
``step.underfeed_ratio``               ``step.bubble_us`` (device idle inside the step)
====================================  ==================================================

**Device scale** ``s`` (median-of-ratios normalisation of compositional data: Anders & Huber 2010,
*Differential expression analysis for sequence count data*, Genome Biology 11:R106, the size
factors of DESeq2)::

    s = median over compute families f of (T_c(f) / n_c(f)) / (T_b(f) / n_b(f))

with ``T`` a family's ΣDuration per step and ``n`` its calls per step, over the compute families
holding at least :data:`MIN_FAMILY_SHARE` of the baseline's ΣDuration. It is the typical change of
time per call, the device's speed, not its amount of work (a model with a layer more still has
``s = 1``). Unweighted on purpose: a time-weighted mean is dominated by the family that holds most
of the time, the one most likely to have changed. Collectives are left out: their time is set by
the links and the other ranks.

**Excess.** The device's speed explains any own time between ``T_b`` and ``s · T_b``, the range
``[min(1, s), max(1, s)] · T_b`` (:func:`explained_range`; exposed communication and idle time take
their range from the parts they are made of: communication less its overlap with compute, the
host's step less the device's busy time). A part's excess is what lies beyond that range, in us
per step: ``E = T_c − high`` above it (it cost more), ``T_c − low`` below it (it saved more), 0
inside it. Below the range is never a regression, above it never an improvement. So a part that
got faster is never a regression cause, and a part that kept its time while the device got faster
(collectives when every compute kernel ran ×0.7) is no regression either: nothing got slower. A
part regresses when ``E`` is beyond the **bound** ``max(noise band, material)``:

* noise band: :class:`perfgate.policy.PartSettings` ``band_compute`` / ``band_communication`` /
  ``band_idle`` × ``T_b`` (plus a learned history noise band, when ``--baseline history:``); with
  repeated baseline captures at least :data:`RUN_BAND_K` robust sigmas of the part's own time over
  them (a collective of a few calls drifts far more than collectives as a kind);
* material: ``min(material_computing × Computing_b, material_step × step_b)``, in the same view
  (defaults 2 % of Computing, 1 % of step time).

Improvements are symmetric. Counts are never scaled: they stay exact comparisons elsewhere.

**Repeated captures.** With more than one capture on a side, the part's own time per capture (its
share times the device ΣDuration of that capture, or the step figure) gives the Hodges-Lehmann ratio
of candidate to baseline and its Moses confidence interval (:func:`perfgate.compare.stats.effect_ci`,
one-sided at ``statistics.confidence``); the excess of its ends, ``T̃_b · (1 + lo)`` and
``T̃_b · (1 + hi)`` beyond the explained range, is the excess interval. Beyond the bound: a regression; at most the bound: unchanged; straddling it: ``unsure``. An interval that
only straddles the improvement bound is unchanged (it cannot be a regression).

Pure: no I/O.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from perfgate import terms
from perfgate.compare.attribution import COMM_FAMILY
from perfgate.model import Comparison, Fingerprint, metric_key

#: shares judged through their part's own ΣDuration per step
SHARE_METRICS = ("share.family", "share.category", "share.core_type", "share.phase",
                 "share.phase_category", "block.share", "pipe.bound_share")
#: step ratios judged through one step figure: {ratio metric: (own-time metric, kind)}
RATIO_PARTS = {"step.exposed_comm_ratio": ("step.comm_not_overlapped_us", "communication"),
               "step.underfeed_ratio": ("step.bubble_us", "idle")}
PART_METRICS = SHARE_METRICS + tuple(RATIO_PARTS)
MIN_FAMILY_SHARE = 0.001   # of the baseline ΣDuration per step (0.1 %): families that enter the scale
MIN_FAMILIES = 3
#: repeated captures: the band of a part is at least this many robust sigmas (1.4826 x MAD) of its
#: own time over the baseline's captures (as the history's band_k), from this many captures on
RUN_BAND_K = 3.0
MIN_RUNS_FOR_BAND = 3
SCALE_AGREEMENT = 0.05     # a family "moved with the device" when its per-call ratio is within ±5 % of s


@dataclass(frozen=True)
class Scale:
    """The device scale of one view: ``value`` (s), ``ratios`` ({compute family: per-call time
    ratio}) and ``why`` (set when fewer than :data:`MIN_FAMILIES` families are measured: s = 1)."""
    view: str | None
    value: float
    ratios: dict = field(default_factory=dict)
    why: str = ""

    @property
    def agreeing(self) -> int:
        return sum(1 for r in self.ratios.values() if abs(r / self.value - 1.0) <= SCALE_AGREEMENT)

    def describe(self) -> str:
        if self.why:
            return f"device scale 1 ({self.why})"
        return (f"device scale ×{self.value:.3f} (median per-call ratio of {len(self.ratios)} compute families, "
                f"{self.agreeing} within ±{SCALE_AGREEMENT:.0%} of it)")


def value_of(fp: Fingerprint, key: str) -> float | None:
    """The metric's value as a float, or None when absent or not a number."""
    m = fp.metrics.get(key)
    try:
        return float(m.value) if m is not None else None
    except (TypeError, ValueError):
        return None


def device_sum(fp: Fingerprint, view) -> float | None:
    """ΣDuration of every device task per step (us), ``device.time_us{caliber=sum_duration}``."""
    return value_of(fp, metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))


def family_time(fp: Fingerprint, family: str, view) -> float:
    """A family's ΣDuration per step (us): its ``share.family`` times the device ΣDuration (every
    family has a share; ``kernel.time_us`` is kept for the Top-N only), else its ``kernel.time_us``
    (a fingerprint without shares). 0 when it does not run."""
    p = value_of(fp, metric_key("share.family", family=family, view=view))
    d = device_sum(fp, view)
    if p is not None and d is not None:
        return p * d
    return value_of(fp, metric_key("kernel.time_us", family=family, view=view)) or 0.0


def is_comm_family(name: str) -> bool:
    return bool(COMM_FAMILY.match(name or ""))


def scale_factor(base: Fingerprint, cand: Fingerprint, view) -> Scale:
    """The :class:`Scale` of ``view`` (module doc)."""
    db, dc = device_sum(base, view), device_sum(cand, view)
    ratios = {}
    if db and dc:
        for key, m in base.metrics.items():
            if m.name != "share.family" or m.labels.get("view") != view or is_comm_family(m.labels.get("family")):
                continue
            fam = m.labels["family"]
            pb, pc = value_of(base, key), value_of(cand, key)
            if not pb or not pc or pb < MIN_FAMILY_SHARE or pc <= 0:
                continue
            ck = metric_key("kernel.calls_per_step", family=fam, view=view)
            nb, nc = value_of(base, ck), value_of(cand, ck)
            per_call = (nc / nb) if nb and nc and nb > 0 and nc > 0 else 1.0
            ratios[fam] = (pc * dc) / (pb * db) / per_call
    if len(ratios) < MIN_FAMILIES:
        return Scale(view, 1.0, ratios, f"only {len(ratios)} compute famil{'y' if len(ratios) == 1 else 'ies'} "
                                        f"with ≥ {MIN_FAMILY_SHARE:.1%} of ΣDuration on both sides")
    return Scale(view, float(statistics.median(ratios.values())), ratios)


def material_us(fp: Fingerprint, view, settings) -> float | None:
    """The material excess of ``view`` (us per step): ``min(material_computing × Computing,
    material_step × step time)`` of the baseline ``fp``; Computing is ``step.computing_us`` (busy
    union of the compute tasks) and step time ``step.time_us``, each falling back to the device busy
    union per step when the capture has no step_trace_time.csv / timeline. None when neither exists."""
    busy = value_of(fp, metric_key("device.time_us", caliber=terms.BUSY_UNION, view=view))
    comp = value_of(fp, metric_key("step.computing_us", view=view)) or busy
    step = value_of(fp, metric_key("step.time_us", view=view)) or busy
    bounds = [settings["material_computing"] * comp if comp else None,
              settings["material_step"] * step if step else None]
    bounds = [b for b in bounds if b]
    return min(bounds) if bounds else None


@dataclass(frozen=True)
class Part:
    """One part's judgement: own time per step (us) both sides, the device scale, the excess (a
    point, or an interval over repeated captures) and the bound it was judged against."""
    kind: str                 # compute | communication | idle
    base_us: float
    cand_us: float
    scale: float
    excess_us: float
    interval_us: tuple | None
    band_us: float
    material_us: float
    verdict: str
    explained_us: tuple = ()   # (low, high): the own times the device's speed explains

    @property
    def bound_us(self) -> float:
        return max(self.band_us, self.material_us)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "base_us": self.base_us, "cand_us": self.cand_us, "scale": self.scale,
                "explained_us": list(self.explained_us),
                "excess_us": self.excess_us, "interval_us": list(self.interval_us) if self.interval_us else None,
                "band_us": self.band_us, "material_us": self.material_us, "bound_us": self.bound_us}

    def text(self) -> str:
        r = f"×{self.cand_us / self.base_us:.3f}" if self.base_us > 0 else "new"
        span = (f"interval [{self.interval_us[0]:+,.1f}, {self.interval_us[1]:+,.1f}]"
                if self.interval_us else f"{self.excess_us:+,.1f}")
        lo, hi = self.explained_us or (self.base_us, self.base_us)
        return (f"own time {self.base_us:,.1f} -> {self.cand_us:,.1f} us/step ({r}), device ×{self.scale:.3f} "
                f"explains {lo:,.1f}..{hi:,.1f}: excess {span} us/step against the bound {self.bound_us:,.1f} "
                f"(max of noise band {self.band_us:,.1f}, material {self.material_us:,.1f})")


def excess(tc: float, lo: float, hi: float) -> float:
    """``tc``'s distance beyond the range ``[lo, hi]`` the device explains (us): positive above it,
    negative below it, 0 inside it."""
    return tc - hi if tc > hi else tc - lo if tc < lo else 0.0


def explained_range(c: Comparison, base: Fingerprint, tb: float, s: float) -> tuple[float, float]:
    """The own times (us per step) the device's speed explains for the part of ``c``: its
    :func:`range_of` with the baseline's components in the same view (``step.comm_us`` /
    ``step.overlapped_us`` for exposed communication, the device busy union for idle time)."""
    view = c.labels.get("view")
    return range_of(c.name, tb, s,
                    comm=value_of(base, metric_key("step.comm_us", view=view)),
                    overlap=value_of(base, metric_key("step.overlapped_us", view=view)),
                    busy=value_of(base, metric_key("device.time_us", caliber=terms.BUSY_UNION, view=view)))


def range_of(name: str, tb: float, s: float, *, comm=None, overlap=None, busy=None) -> tuple[float, float]:
    """The own times (us per step) the device's speed ``s`` explains for a part of metric ``name``
    whose baseline own time is ``tb`` (module doc):

    * a share's part: ``[min(1, s), max(1, s)] · T_b``;
    * exposed communication = communication − its overlap with compute (``comm``, ``overlap``: the
      baseline's, us per step), each of which the device explains within that range, so the
      exposed time moves by at most
      ``[(min(1, s) − 1) · comm − (max(1, s) − 1) · overlap, (max(1, s) − 1) · comm − (min(1, s) − 1) · overlap]``
      from ``T_b`` (compute twice as fast hides at most half the communication it used to). The
      range is anchored at ``T_b`` itself, as the idle rule is: the components only say how far
      the device's speed can move it, so at ``s`` = 1 the range is ``T_b`` even where the
      view's ``comm − overlap`` is not ``T_b`` (a p50 of each component is not the p50 of their
      difference; step_trace's columns need not subtract exactly);
    * idle = step − device busy union, the step being the host's time, which the device's speed does
      not move: ``[idle_b − (max(1, s) − 1) · busy, idle_b + (1 − min(1, s)) · busy]`` (kernels that run
      faster leave the device waiting for the host).

    A derived part whose components are unknown falls back to the share rule."""
    lo_s, hi_s = min(1.0, s), max(1.0, s)
    if name == "step.exposed_comm_ratio" and comm is not None and overlap is not None:
        return (max(0.0, tb + (lo_s - 1.0) * comm - (hi_s - 1.0) * overlap),
                tb + (hi_s - 1.0) * comm - (lo_s - 1.0) * overlap)
    if name == "step.underfeed_ratio" and busy is not None:
        return max(0.0, tb - (hi_s - 1.0) * busy), tb + (1.0 - lo_s) * busy
    return lo_s * tb, hi_s * tb


def judge_excess(e_lo: float, e_hi: float, bound: float) -> str:
    """Regression when the whole excess range lies above ``bound``, improvement when below
    ``-bound``; unsure when it straddles ``+bound``; unchanged otherwise (also when it only
    straddles ``-bound``: it cannot be a regression)."""
    if e_lo > bound:
        return terms.REGRESSION
    if e_hi < -bound:
        return terms.IMPROVEMENT
    if e_hi > bound:
        return terms.UNSURE
    return terms.UNCHANGED


def _run_times(fp: Fingerprint, c: Comparison) -> list | None:
    """The part's own time per capture (us/step) of a merged side, or None (one capture, or the
    runs cannot be aligned)."""
    view = c.labels.get("view")
    if c.name in RATIO_PARTS:
        m = fp.metrics.get(metric_key(RATIO_PARTS[c.name][0], view=view))
        vals = (m.context or {}).get("run_values") if m is not None else None
        return [float(v) for v in vals] if vals and len(vals) > 1 else None
    return share_time_runs(fp, c.key, view)


def share_time_runs(fp: Fingerprint, key: str, view) -> list | None:
    """A share's own time per capture (us/step): each capture's share times its device ΣDuration
    (``context["run_values"]`` of a merged side), or None for one capture or runs that cannot be
    aligned (the share absent from some captures)."""
    m = fp.metrics.get(key)
    d = fp.metrics.get(metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))
    if d is None:
        return None
    dv = (d.context or {}).get("run_values")
    runs = int(fp.config.get("captures", 1) or 1)
    if not dv or len(dv) != runs or runs < 2:
        return None
    if m is None:
        return [0.0] * runs
    pv = (m.context or {}).get("run_values")
    if not pv or len(pv) != runs:
        return None
    return [float(p) * float(x) for p, x in zip(pv, dv)]


def part_kind(c: Comparison) -> str:
    """compute, communication or idle: which noise band a part takes."""
    if c.name in RATIO_PARTS:
        return RATIO_PARTS[c.name][1]
    labels = c.labels
    if c.name == "block.share" and labels.get("kind") == "unstructured":
        return "communication"   # the kernels in no layer block: the collectives are among them
    if (is_comm_family(labels.get("family")) or labels.get("category") == "Comm"
            or labels.get("core_type") in ("HCCL", terms.COMM_CORE) or labels.get("bound") == "communication"):
        return "communication"
    return "compute"


def own_times(c: Comparison, base: Fingerprint, cand: Fingerprint) -> tuple[float, float] | None:
    """The part's own time per step (us) on both sides, or None when the device ΣDuration or the
    step figure is missing on a side."""
    view = c.labels.get("view")
    if c.name in RATIO_PARTS:
        key = metric_key(RATIO_PARTS[c.name][0], view=view)
        tb, tc = value_of(base, key), value_of(cand, key)
        return (tb, tc) if tb is not None and tc is not None else None
    db, dc = device_sum(base, view), device_sum(cand, view)
    if db is None or dc is None:
        return None
    return float(c.baseline or 0.0) * db, float(c.candidate or 0.0) * dc


def judge_part(c: Comparison, scale: Scale, base: Fingerprint, cand: Fingerprint, settings,
               confidence: float = 0.95, noise_us: float = 0.0) -> tuple[Comparison, Part | None]:
    """Re-judge one share / ratio comparison through its part's excess (module doc). Comparisons
    that are not value comparisons, or whose own time is unknown, are returned as they are."""
    if c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT, terms.UNCHANGED, terms.UNSURE) or c.delta is None:
        return c, None
    times = own_times(c, base, cand)
    view = c.labels.get("view")
    mat = material_us(base, view, settings)
    if times is None or mat is None:
        return c, None
    tb, tc = times
    kind = part_kind(c)
    band = settings[f"band_{kind}"] * tb + noise_us
    s = scale.value
    lo_r, hi_r = explained_range(c, base, tb, s)
    e = excess(tc, lo_r, hi_r)
    interval = None
    rb, rc = _run_times(base, c), _run_times(cand, c)
    if rb and len(rb) >= MIN_RUNS_FOR_BAND and tb > 0:
        # repeated baseline captures measure the part's own run-to-run noise: the band is at least
        # RUN_BAND_K robust sigmas of them (a collective with a few calls drifts far more than its kind)
        from perfgate.compare.stats import robust_sigma
        band = max(band, RUN_BAND_K * robust_sigma(rb) / float(statistics.median(rb)) * tb + noise_us)
    if (rb or rc) and tb > 0:
        from perfgate.compare.stats import effect_ci, interval_level
        xb, xc = rb or [tb], rc or [tc]
        if min(xb) > 0 and min(xc) > 0:
            level, _ = interval_level(confidence, terms.Direction.LOWER_IS_BETTER)
            lo, hi = effect_ci(xb, xc, "rel", confidence=level)
            base_mid = float(statistics.median(xb))
            interval = (excess(base_mid * (1 + lo), lo_r, hi_r), excess(base_mid * (1 + hi), lo_r, hi_r))
    lo_e, hi_e = interval if interval else (e, e)
    bound = max(band, mat)
    verdict = judge_excess(lo_e, hi_e, bound)
    part = Part(kind, tb, tc, s, e, interval, band, mat, verdict, (lo_r, hi_r))
    raw = c.reason.split("; informational")[0].split(", within tolerance")[0].split(", beyond tolerance")[0]
    outcome = {terms.REGRESSION: "beyond the bound: slower than the device explains",
               terms.IMPROVEMENT: "beyond the bound: faster than the device explains",
               terms.UNSURE: "the interval straddles the bound: unsure",
               terms.UNCHANGED: "within the bound"}[verdict]
    reason = (f"{raw}; judged by its {part.text()}: {outcome}"
              + ("" if c.gated else "; informational"))
    stats = dict(c.stats, part=part.to_dict())
    return replace(c, verdict=verdict, fails=c.gated and verdict == terms.REGRESSION, reason=reason, stats=stats,
                   tolerance=f"excess ≤ {part.bound_us:,.0f} us/step beyond the device",
                   attribution=c.attribution if verdict == terms.REGRESSION else []), part


def blocks_recut(base: Fingerprint, cand: Fingerprint, view) -> str | None:
    """Why ``block.share`` cannot be judged in ``view``, or None: a block kind's part is the set of
    kernels the layer segmentation put in its blocks, so its own time compares like with like only
    when both sides cut the same blocks (every ``block.count{kind, pass}`` equal). A layer anchor
    that stops running re-cuts the step (the st job's FlashAttentionScoreGrad gone: 14 attention
    blocks -> 0, every kernel "unstructured")."""
    def counts(fp):
        return {k: m.value for k, m in fp.metrics.items() if m.name == "block.count" and m.labels.get("view") == view}
    b, c = counts(base), counts(cand)
    if b == c:
        return None
    moved = sorted(k for k in set(b) | set(c) if b.get(k) != c.get(k))
    return (f"the layer segmentation cut other blocks ({len(moved)} block count(s) differ, e.g. {moved[0]}: "
            f"{b.get(moved[0], 0):g} -> {c.get(moved[0], 0):g}), so a block kind is another set of kernels on each side")


def step_band_us(base: Fingerprint, view, settings) -> float | None:
    """The noise band of one step time (us): the step is Computing + exposed communication + idle
    (step_trace_time.csv), each with its kind's band, and independent noise adds in quadrature:
    ``√((band_compute·C)² + (band_communication·X)² + (band_idle·I)²)`` of the baseline. None when
    a figure is missing."""
    figs = [value_of(base, metric_key(n, view=view))
            for n in ("step.computing_us", "step.comm_not_overlapped_us", "step.free_us")]
    if None in figs:
        return None
    c, x, i = figs
    return math.sqrt((settings["band_compute"] * c) ** 2 + (settings["band_communication"] * x) ** 2
                     + (settings["band_idle"] * i) ** 2)


def judge_step_time(c: Comparison, rule, base: Fingerprint, settings, noise: float = 0.0) -> Comparison:
    """A single capture's step time against ``max(tolerance, the step's own noise band)``
    (:func:`step_band_us`): a step made mostly of collectives drifts with them, and its tolerance
    cannot be tighter than the parts it is made of (repeated captures are judged by their interval)."""
    if rule is None or c.delta is None or c.stats or c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT,
                                                                       terms.UNCHANGED):
        return c
    band = step_band_us(base, c.labels.get("view"), settings)
    allow = rule.tolerance.allowance(float(c.baseline)) + noise
    if band is None or band <= allow:
        return c
    verdict = terms.Direction(rule.direction).judge(c.delta, allowance=band)
    head = c.reason.split(", within tolerance")[0].split(", beyond tolerance")[0]
    moved = "within" if verdict == terms.UNCHANGED else "beyond"
    reason = (f"{head}, {moved} the step's noise band ±{band:,.1f} us (its parts' bands: Computing "
              f"±{settings['band_compute']:.0%}, exposed communication ±{settings['band_communication']:.0%}, idle "
              f"±{settings['band_idle']:.0%}, in quadrature; wider than the tolerance {c.tolerance})"
              + ("" if c.gated else "; informational"))
    return replace(c, verdict=verdict, fails=c.gated and verdict == terms.REGRESSION, reason=reason,
                   tolerance=f"±{band:,.0f} us (the step's noise band)")


def judge_parts(comparisons: list, base: Fingerprint, cand: Fingerprint, settings, *, noise: dict | None = None,
                confidence: float = 0.95, rules: dict | None = None) -> tuple[list, dict]:
    """Re-judge every share and step ratio in ``comparisons`` through its part's excess.

    ``noise`` ({metric key: learned band, in the metric's unit}) widens a part's band: a share's
    band (a ratio) is converted to us with the baseline device ΣDuration.

    Returns ``(comparisons, scales)``: ``scales`` is ``{view: Scale}`` of the views judged."""
    scales: dict = {}
    out = []
    for c in comparisons:
        if c.name == "step.time_us":
            c = judge_step_time(c, (rules or {}).get(c.key), base, settings, (noise or {}).get(c.key, 0.0))
        elif c.name == "kernel.topn" and c.verdict == terms.REGRESSION:
            view = c.labels.get("view")
            if view not in scales:
                scales[view] = scale_factor(base, cand, view)
            c = judge_topn(c, scales[view], base, cand, settings)
        elif c.name in PART_METRICS:
            view = c.labels.get("view")
            if view not in scales:
                scales[view] = scale_factor(base, cand, view)
            why = blocks_recut(base, cand, view) if c.name == "block.share" else None
            if why and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT, terms.UNCHANGED, terms.UNSURE):
                out.append(replace(c, verdict=terms.INCOMPARABLE, fails=False,
                                   reason=f"{c.subject_text()}: not compared, {why}"))
                continue
            band = (noise or {}).get(c.key, 0.0)
            if band and c.name in SHARE_METRICS:
                band *= device_sum(base, view) or 0.0
            elif band and c.name in RATIO_PARTS:
                band = 0.0   # a learned band of a ratio says nothing of the time it is judged through
            c, _ = judge_part(c, scales[view], base, cand, settings, confidence, band)
        out.append(c)
    return out, scales


def judge_topn(c: Comparison, scale: Scale, base: Fingerprint, cand: Fingerprint, settings) -> Comparison:
    """A Top-N set that a family entered is a regression only when an entering family is new or its
    own ΣDuration per step grew beyond the range the device explains by more than its noise band: a
    ranking moves when any family moves, and a family that climbed only because another left or
    shrank took no more of the device than before."""
    view = c.labels.get("view")
    entered = sorted(set(c.candidate or ()) - set(c.baseline or ()))
    grew = []
    for fam in entered:
        tb, tc = family_time(base, fam, view), family_time(cand, fam, view)
        band = settings["band_communication" if is_comm_family(fam) else "band_compute"] * tb
        if tb <= 0 or excess(tc, min(1.0, scale.value) * tb, max(1.0, scale.value) * tb) > band:
            grew.append(fam)
    if grew:
        return c
    return replace(c, verdict=terms.UNCHANGED, fails=False,
                   reason=(f"{c.reason}; the families that entered ({', '.join(entered)}) kept their own time "
                           f"within the device's speed and their noise band: they climbed because others left or shrank"))


def part_of(c: Comparison) -> dict | None:
    """The part judgement a comparison carries (``stats["part"]``), or None."""
    return (c.stats or {}).get("part") if c is not None else None


def smallest_caught(comparisons) -> float | None:
    """The smallest kernel-family excess (us per step) a gated family part would have failed on in
    this check: the least bound over the gated ``share.family`` comparisons judged here."""
    bounds = [p["bound_us"] for c in comparisons if c.gated and c.name == "share.family"
              and (p := part_of(c)) is not None and math.isfinite(p["bound_us"])]
    return min(bounds) if bounds else None
