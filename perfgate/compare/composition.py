"""Parts of the whole: judge a share by its part's own time relative to the device's speed.

A ΣDuration share (``share.family`` / ``share.category`` / ``share.core_type`` /
``share.phase`` / ``share.phase_category`` / ``block.share`` / ``pipe.bound_share``) sums to
100 % with the other parts, so one part moving moves every other share. A share says where
time went, not which part got worse. Each part is therefore judged by its own ΣDuration per
step relative to a capture-level scale factor, in every cross-rank view separately.

**Scale factor** (median-of-ratios normalisation of compositional data: Anders & Huber 2010,
*Differential expression analysis for sequence count data*, Genome Biology 11:R106, the size
factors of DESeq/DESeq2)::

    s = median_f ( (T_c(f) / n_c(f)) / (T_b(f) / n_b(f)) )

the median ratio of ΣDuration per call (``T`` = ``kernel.time_us``, ΣDuration per step in us;
``n`` = ``kernel.calls_per_step``): the device's speed, not its amount of work, so a model with a
layer more (every family called more often) has ``s`` = 1. Over the kernel families ``f`` with
``kernel.time_us`` on both sides
and at least :data:`MIN_FAMILY_SHARE` of the baseline's ΣDuration (families with enough time to
be measured). The median is unweighted on purpose: a time-weighted mean is dominated by the
family that holds most of the time, which is exactly the family that may have changed.

**A part** with baseline / candidate shares ``p_b`` / ``p_c`` and device ΣDuration per step
``D_b`` / ``D_c`` (``device.time_us{caliber=sum_duration}``) has the own-time ratio
``r = (p_c·D_c) / (p_b·D_b)`` and, relative to the device, ``q = r / s``. Its change in share
units is ``Δ* = p_b·q / (p_b·q + 1 − p_b) − p_b = p_b (1 − p_b)(q − 1) / (p_b·q + 1 − p_b)``:
exactly how far its share would have moved had only this part changed (so a part that did move
alone is judged on its observed share change, as before, and the test is no stricter than the
plain share comparison for it). The part is judged by :meth:`perfgate.terms.Direction.judge` on
``Δ*`` against the policy tolerance of the share (``Tolerance.allowance(p_b)``: a pp tolerance
in share units, plus any learned noise band), and it regresses only when its share also grew
(improves only when its share also fell); otherwise it is ``unchanged``, a consequence of
other parts moving. Shares whose direction is ``exact`` are judged as ``lower_is_better``
here: a part using less of the device's time is faster, not different. Consequences:

- a part that did not change stays unchanged, however much the others moved (``r/s = 1``);
- device-wide drift (every family ×k) gives ``s = k`` and ``r = k``: no part changes;
- counts (calls per step) are never normalised: they stay exact comparisons.

**The part's own time must agree** (``r`` beyond :data:`OWN_CHANGE` of 1, the way its share
moved), or the verdict is ``unchanged``, a consequence:

- an *improvement* needs the part's own ΣDuration per step to have fallen: compute ×1.5 with
  communication as it was gives ``s`` = 1.5 and communication ``r/s`` = 0.67, "faster than the
  device", yet its time did not move: its share fell because the rest grew, a side effect, never
  a gain;
- a *communication* part (:func:`is_comm_part`) *regresses* only when its own ΣDuration per step
  grew: communication time is set by the links and by the other ranks, not by this device's
  compute speed, so compute ×0.67 with communication as it was (``r/s`` = 1.5) is compute that
  got faster, not communication that got slower (the step-time and Computing metrics say so).
  A compute part keeps the relative judgement both ways for regressions: a family as slow as
  before while every other family got ×0.5 on a faster device is the regression the scale
  factor exists to see.

**Repeated captures.** When the two-gate test (:mod:`perfgate.compare.stats`) gave the share
change an interval ``[lo, hi]`` (share units), the part is judged on that interval less the
change the other parts caused, ``[lo − e, hi − e]`` with ``e = ĥ − Δ*`` (``ĥ`` the interval's
Hodges-Lehmann shift, so the adjusted interval is centred on ``Δ*``), against the
statistics tolerance of the metric (``statistics.tolerances``) by the same ``Direction.judge``:
beyond it a regression / improvement, inside it unchanged, straddling it ``unsure``.

**When it cannot work.** The median is the ratio of an unchanged family only while fewer than
half of the measured families changed. When fewer than half of them lie within
:data:`SCALE_AGREEMENT` of ``s`` (or fewer than :data:`MIN_FAMILIES` are measured, or
``device.time_us`` is missing), the scale is not identified: ``s`` falls back to ``D_c / D_b``,
which makes ``Δ* = p_c − p_b``, the plain share comparison, and a note says so.

Exposed communication (``step.exposed_comm_ratio``, ``step.comm_not_overlapped_us``) that grew
only because compute got shorter (Computing improved beyond its tolerance in the same view,
communication time ``step.comm_us`` unchanged within its tolerance, step time did not
regress) is likewise a consequence: the communication lost the compute that hid it; and
symmetrically, less exposure because Computing got longer is no improvement.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from perfgate import terms
from perfgate.compare.attribution import COMM_FAMILY
from perfgate.model import Comparison, Fingerprint, metric_key

PART_METRICS = ("share.family", "share.category", "share.core_type", "share.phase",
                "share.phase_category", "block.share", "pipe.bound_share")
MIN_FAMILY_SHARE = 0.001   # of the baseline ΣDuration per step (0.1 %): families that enter the scale
MIN_FAMILIES = 3
SCALE_AGREEMENT = 0.05     # a family "did not change" when its ratio is within ±5 % of s
#: a part's own ΣDuration per step "did not move" when its ratio r is within ±5 % of 1
OWN_CHANGE = 0.05
_EXPOSURE = ("step.exposed_comm_ratio", "step.comm_not_overlapped_us")


@dataclass(frozen=True)
class Scale:
    """The capture-level scale factor of one view: ``value`` (candidate / baseline ΣDuration of
    an unchanged family), ``device`` (D_c / D_b, None when unknown), ``ratios`` ({family:
    T_c/T_b} of the measured families), ``identified`` (False: fell back to ``device``) and
    ``why`` (a sentence when not identified)."""
    view: str | None
    value: float
    device: float | None
    ratios: dict = field(default_factory=dict)
    identified: bool = True
    why: str = ""

    @property
    def agreeing(self) -> int:
        return sum(1 for r in self.ratios.values() if abs(r / self.value - 1.0) <= SCALE_AGREEMENT)

    def describe(self) -> str:
        if not self.identified:
            return f"device scale not identified ({self.why}): judged as plain shares"
        return (f"device scale ×{self.value:.3f} = median of {len(self.ratios)} kernel families' "
                f"ΣDuration ratios ({self.agreeing} within ±{SCALE_AGREEMENT:.0%} of it)")


def _value(fp: Fingerprint, key: str) -> float | None:
    m = fp.metrics.get(key)
    try:
        return float(m.value) if m is not None else None
    except (TypeError, ValueError):
        return None


def scale_factor(base: Fingerprint, cand: Fingerprint, view: str | None) -> Scale:
    """The :class:`Scale` of ``view`` (see the module doc for the estimator and its limits)."""
    db = _value(base, metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))
    dc = _value(cand, metric_key("device.time_us", caliber=terms.SUM_DURATION, view=view))
    device = dc / db if db and dc else None
    ratios = {}
    for key, m in base.metrics.items():
        if m.name != "kernel.time_us" or m.labels.get("view") != view:
            continue
        tb, tc = _value(base, key), _value(cand, key)
        if not tb or not tc or tb <= 0 or tc <= 0:
            continue
        if db and tb / db < MIN_FAMILY_SHARE:
            continue
        fam = m.labels.get("family")
        ck = metric_key("kernel.calls_per_step", family=fam, view=view)
        nb, nc = _value(base, ck), _value(cand, ck)
        per_call = (nc / nb) if nb and nc and nb > 0 and nc > 0 else 1.0
        ratios[fam] = tc / tb / per_call
    if device is None:
        return Scale(view, 1.0, None, ratios, False, "no device ΣDuration per step on both sides")
    if len(ratios) < MIN_FAMILIES:
        return Scale(view, device, device, ratios, False,
                     f"only {len(ratios)} kernel {'family' if len(ratios) == 1 else 'families'} with ≥ "
                     f"{MIN_FAMILY_SHARE:.1%} of ΣDuration on both sides")
    s = Scale(view, float(statistics.median(ratios.values())), device, ratios)
    if 2 * s.agreeing <= len(ratios):
        return Scale(view, device, device, ratios, False,
                     f"only {s.agreeing} of {len(ratios)} kernel families lie within ±{SCALE_AGREEMENT:.0%} of the "
                     f"median ratio: more than half of the families changed")
    return s


def _direction(rule) -> terms.Direction:
    d = terms.Direction(rule.direction)
    return terms.Direction.LOWER_IS_BETTER if d is terms.Direction.EXACT else d


def judge_part(c: Comparison, rule, scale: Scale, base: Fingerprint, cand: Fingerprint,
               noise: float = 0.0, stat_tolerance=None) -> Comparison:
    """Re-judge one part share ``c`` (see the module doc). ``c`` keeps its verdict when it is
    not a value comparison or the device ΣDuration is unknown. Adds ``composition`` to
    ``c.stats``: ``ratio`` (r), ``scale`` (s), ``relative`` (r/s), ``normalised_delta`` (Δ*,
    a share), ``identified``."""
    interval = c.stats.get("ci") if c.stats.get("effect_kind") == "diff" else None
    judged = (terms.REGRESSION, terms.IMPROVEMENT, terms.UNCHANGED) + ((terms.UNSURE,) if interval else ())
    if rule is None or c.verdict not in judged or scale.device is None or c.delta is None:
        return c
    pb, pc = float(c.baseline or 0.0), float(c.candidate or 0.0)
    if pb <= 0 and pc <= 0:
        return c
    direction = _direction(rule)
    if pb <= 0:   # a new part: all of its time is new
        rel, nd = float("inf"), pc
    else:
        r = pc / pb * scale.device
        rel = r / scale.value
        nd = pb * (1.0 - pb) * (rel - 1.0) / (pb * rel + 1.0 - pb)   # the share it alone would move
    tol = (stat_tolerance or rule.tolerance) if interval else rule.tolerance
    allow = tol.allowance(pb) + noise + 1e-12
    if interval:
        # repeated captures: the two-gate interval of the share change, minus the part of the
        # change that other parts caused (observed change − Δ*), judged like the interval itself.
        # The observed change is the interval's own estimate (the Hodges-Lehmann shift), not the
        # difference of the medians: mixing the two shifted the interval off Δ* (seventh audit
        # round: 0.13 pp of bias made a uniform 1.04x device drift UNSURE)
        effect = c.stats.get("effect")
        side = (float(effect) if effect is not None else pc - pb) - nd
        own = direction.judge(interval[0] - side, interval[1] - side, allow)
    else:
        own = direction.judge(nd, allowance=allow)
    share_up, share_down = pc > pb, pc < pb
    worse_up = direction is terms.Direction.LOWER_IS_BETTER
    moved = own in (terms.REGRESSION, terms.IMPROVEMENT)
    agrees = moved and ((nd > 0 and share_up) or (nd < 0 and share_down))
    verdict = own if agrees else terms.UNCHANGED
    if own == terms.UNSURE:
        verdict = terms.UNSURE
    r_own = None if pb <= 0 else pc / pb * scale.device
    own_moved = r_own is None or (share_down and r_own < 1.0 - OWN_CHANGE) or (share_up and r_own > 1.0 + OWN_CHANGE)
    consequence = ""
    if verdict == terms.IMPROVEMENT and not own_moved:
        consequence = (f"its own ΣDuration per step did not move (×{r_own:.3f}): its share moved because other "
                       f"parts changed (a consequence, not a gain)")
    elif verdict == terms.REGRESSION and not own_moved and is_comm_part(c):
        consequence = (f"communication's own ΣDuration per step did not move (×{r_own:.3f}): its share moved "
                       f"because compute changed (a consequence; communication time is set by the links and the "
                       f"other ranks, not by the device's compute speed)")
    elif verdict == terms.UNSURE and r_own is not None:
        # the interval straddles the tolerance: only the outcomes the part's own time allows are
        # open (an improvement needs its own ΣDuration fallen; a communication part's regression
        # its own ΣDuration grown). None left: unchanged, a consequence (seventh audit round: the
        # Comm share was unsure under MatMul 1.06x with its own ΣDuration x0.992, and
        # unsure_fails would have failed the check on it)
        lo, hi = interval[0] - side, interval[1] - side
        up_open, down_open = hi > allow, lo < -allow
        may_regress = up_open if worse_up else down_open
        may_improve = down_open if worse_up else up_open
        comm = is_comm_part(c)
        if not (may_improve and own_time_backs(terms.IMPROVEMENT, r_own, comm, worse_up)) and \
                not (may_regress and own_time_backs(terms.REGRESSION, r_own, comm, worse_up)):
            consequence = (f"its own ΣDuration per step ×{r_own:.3f} allows neither a gain nor "
                           f"{'a communication regression' if comm else 'a regression'} the interval "
                           f"leaves open: its share moved because other parts changed (a consequence)")
    if consequence:
        verdict = terms.UNCHANGED
    if c.stats.get("q") is not None and c.verdict == terms.UNCHANGED:
        verdict = terms.UNCHANGED      # repeated captures: not significant stays unchanged
    rel_text = "new" if rel == float("inf") else f"×{rel:.3f}"
    own_text = (f"own ΣDuration {rel_text} relative to the {scale.describe()}: "
                f"{nd * 100:+.2f} pp had it alone changed")
    if consequence:
        tail = f"{own_text}; {consequence}"
    elif verdict == terms.UNSURE:
        tail = (f"{own_text}; the share's interval less the other parts' effect straddles {tol.describe(c.unit)}: "
                f"unsure")
    elif verdict == terms.UNCHANGED and moved:
        tail = (f"{own_text}, but its share moved the other way: unchanged")
    elif verdict == terms.UNCHANGED and c.verdict != terms.UNCHANGED:
        tail = f"{own_text}, within {c.tolerance}: its share moved because other parts changed (a consequence)"
    elif verdict == terms.UNCHANGED:
        tail = f"{own_text}, within {c.tolerance}"
    else:
        tail = f"{own_text}, beyond {c.tolerance}: " + ("slower than the device" if (nd > 0) == worse_up
                                                         else "faster than the device")
    head = c.reason.split(ATTR_SPLIT)[0]
    head = head.replace("; informational", "")
    reason = f"{head}; {tail}" + ("" if c.gated else "; informational")
    stats = dict(c.stats, composition={"ratio": None if pb <= 0 else pc / pb * scale.device,
                                       "scale": scale.value, "relative": None if pb <= 0 else rel,
                                       "normalised_delta": nd, "identified": scale.identified})
    return replace(c, verdict=verdict, fails=c.gated and verdict == terms.REGRESSION, reason=reason,
                   stats=stats, attribution=c.attribution if verdict == terms.REGRESSION else [])


ATTR_SPLIT = ". Kernel families that grew most: "


def own_time_backs(outcome: str, r_own: float, comm: bool, worse_up: bool = True) -> bool:
    """Whether a part's own ΣDuration per step ratio ``r_own`` (candidate / baseline) allows
    ``outcome`` (module doc, "The part's own time must agree"): an improvement needs it beyond
    :data:`OWN_CHANGE` in the better direction; a communication part's (``comm``) regression
    needs it beyond OWN_CHANGE in the worse direction; a compute part's regression is always
    allowed (relative to the device). ``worse_up``: more own time is worse (shares)."""
    grew, fell = r_own > 1.0 + OWN_CHANGE, r_own < 1.0 - OWN_CHANGE
    better, worse = (fell, grew) if worse_up else (grew, fell)
    if outcome == terms.IMPROVEMENT:
        return better
    if outcome == terms.REGRESSION:
        return worse or not comm
    return True


def is_comm_part(c: Comparison) -> bool:
    """Is the part of share comparison ``c`` communication: a communication family
    (``hcom_*`` / HCCL), category ``Comm``, core type ``HCCL`` / ``COMMUNICATION``, or the
    ``communication`` bound."""
    fam = c.labels.get("family")
    return bool(fam and COMM_FAMILY.match(str(fam))) or c.labels.get("category") == "Comm" \
        or c.labels.get("core_type") in ("HCCL", terms.COMM_CORE) or c.labels.get("bound") == "communication"


def _exposure_consequence(c: Comparison, by_key: dict) -> Comparison:
    """A change of exposed communication that only followed the compute around it (module doc):
    more exposed because Computing got shorter, or less exposed because Computing got longer,
    while communication time itself did not move beyond its tolerance."""
    if c.name not in _EXPOSURE or c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT):
        return c
    view = c.labels.get("view")
    computing = by_key.get(metric_key("step.computing_us", view=view))
    comm = by_key.get(metric_key("step.comm_us", view=view))
    step = by_key.get(metric_key("step.time_us", view=view))
    opposite = terms.IMPROVEMENT if c.verdict == terms.REGRESSION else terms.REGRESSION
    if not computing or computing.verdict != opposite or comm is None or comm.verdict != terms.UNCHANGED:
        return c
    if c.verdict == terms.REGRESSION and step is not None and step.verdict == terms.REGRESSION:
        return c
    how = "shorter, so less of it is hidden" if c.verdict == terms.REGRESSION else "longer, so more of it is hidden"
    reason = (f"{c.reason.split(' HCCL kinds that grew')[0].rstrip('.')}; communication time itself is "
              f"unchanged ({comm.reason_tail().split(', within')[0]}) while Computing got {how}: "
              f"a consequence of the compute change, not a change of communication")
    return replace(c, verdict=terms.UNCHANGED, fails=False, reason=reason, attribution=[])


def judge_parts(comparisons: list, base: Fingerprint, cand: Fingerprint, rules: dict,
                noise: dict | None = None, stat_tolerances: dict | None = None) -> tuple[list, list]:
    """Re-judge every part share in ``comparisons`` relative to its view's scale factor, and
    exposure consequences. Returns ``(comparisons, notes)``; a note per view whose scale was
    not identified, and one sentence naming the scale of each view otherwise."""
    scales: dict = {}
    out = []
    for c in comparisons:
        if c.name in PART_METRICS:
            view = c.labels.get("view")
            if view not in scales:
                scales[view] = scale_factor(base, cand, view)
            c = judge_part(c, rules.get(c.key), scales[view], base, cand, (noise or {}).get(c.key, 0.0),
                           (stat_tolerances or {}).get(c.name))
        out.append(c)
    by_key = {c.key: c for c in out}
    out = [_exposure_consequence(c, by_key) for c in out]
    notes = []
    for view, s in sorted(scales.items(), key=lambda kv: str(kv[0])):
        if s.device is None:
            continue
        if not s.identified:
            notes.append(f"shares [{view}]: {s.describe()}")
    return out, notes
