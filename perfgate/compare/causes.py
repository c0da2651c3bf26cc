"""Causes, not symptoms: group the gated findings of one check into the changes that explain them.

A *cause* is one of

- a **kernel family** whose calls per step changed (including a family that is new or gone), or
  whose ΣDuration per step changed relative to the device's scale factor
  (:mod:`perfgate.compare.composition`, judged through its ``share.family`` comparison);
  communication families (``hcom_*``) are named *communication* causes;
- a **communication kind** whose collectives per step (``comm.calls_per_step{kind}``) changed;
- a **part of the step anatomy** (device idle / underfeed, free time, exposed communication)
  that moved while no kernel family explains it;
- the **capture quality**: kernel rows left out (N/A or empty Duration) or outside every step
  (blank Step Id) whose count changed.

One family, communication kind or anatomy part is one cause whatever the signs of its symptoms
(issue: a family with fewer calls but more ΣDuration was listed as an improvement, and as two
causes). Its ``verdict`` is what it did to the step: the sign of its ΣDuration change per step in
the first gated view (below max(1 us, 5 %) = none), else of its calls-per-step change; a cause
explaining a failing metric is a regression. A family with calls per step in the baseline and none
in the candidate (first gated view) has verdict ``gone`` ("no longer runs", never an improvement:
its ΣDuration did not shrink, it is absent), one only the candidate runs has verdict ``new``; either
is a regression only when it explains a failing gated metric. A family whose ΣDuration and calls
per step did not move, whose symptoms are improvements only (its share fell because the rest of the
step grew: compute ×1.5 made every collective's share fall), has verdict ``side_effect``: named,
never called an improvement (third audit round).

A *symptom* is a gated comparison judged ``regression`` or ``improvement``. It is explained by
exactly one cause among those it follows from (of the symptom's sign when there is one, then the
one that changed most: calls for call counts, ΣDuration per step otherwise):

============================================  =========================================
symptom                                        explained by
============================================  =========================================
``kernel.calls_per_step{family}``, ``share.family{family}``, ``mfu.ratio{family}``  that family
``kernel.total_calls_per_step``, ``optype.calls_per_step``  families whose calls changed
``share.category`` / ``share.core_type`` / ``share.phase*`` / ``block.share``  families of the scope that changed (Comm parts: communication families; others: compute families); when none of them changed (ΣDuration within max(1 us, 5 %), same calls), the families outside it that did: the share moved because the rest of the step did
``step.computing_us``                          compute families
``step.exposed_comm_ratio``, ``comm.*``        communication families and kinds
``step.time_us``, ``device.time_us``           the largest cause of that sign
``kernel.topn``                                families that entered or left
``step.underfeed_ratio``, ``step.free_us``     the step-anatomy cause
``kernel.invalid_rows``, ``kernel.unassigned_rows``  a *capture quality* cause (rows the capture
                                               could not give a time or a step: its data changed)
============================================  =========================================

Symptoms no cause explains are returned as ``unexplained``. Views (rank0 / p50 / max) are
columns of one cause, never separate causes. Each cause says what changed (calls per step,
ΣDuration per step and its ratio to the device scale, in the first gated view), its evidence
rows, the gated metric keys it explains, and how much of the step-time change it accounts
for: ``ΔΣDuration per step of the cause / Δ step time`` (ΣDuration and busy-union calibers
differ, so with overlap the figure can exceed 100 %; it is a share of the explanation, not a
decomposition). Pure.
"""
from __future__ import annotations

from perfgate import terms
from perfgate.compare.attribution import COMM_FAMILY
from perfgate.compare.composition import OWN_CHANGE, is_comm_part
from perfgate.model import Comparison, Fingerprint, metric_key

MOVED = (terms.REGRESSION, terms.IMPROVEMENT)
GONE = "gone"   # cause verdict: a family of the baseline that no longer runs in the candidate (not a gain)
#: cause verdict: a family whose own ΣDuration and calls per step did not move (below max(1 us,
#: 5 %)) while its share improved because the rest of the step changed: a side effect, never a gain
SIDE_EFFECT = "side_effect"
NEW = "new"     # cause verdict: a family only the candidate runs (a regression only when a gated metric fails)
_FAMILY_SYMPTOMS = ("kernel.calls_per_step", "share.family", "mfu.ratio", "pipe.memory_bound")
_CALL_SYMPTOMS = ("kernel.total_calls_per_step", "optype.calls_per_step")
_PART_SYMPTOMS = ("share.category", "share.core_type", "share.phase", "share.phase_category", "block.share",
                  "pipe.bound_share")
_ANATOMY = ("step.underfeed_ratio", "step.free_us", "step.bubble_us", "step.internal_bubble_us",
            "step.prelaunch_gap_us", "step.tail_gap_us")
_COMM_SYMPTOMS = ("step.exposed_comm_ratio", "step.comm_us", "step.comm_not_overlapped_us")
# counts of kernel rows a rank could not use: the change is in the capture's data, not its performance
_QUALITY = {"kernel.invalid_rows": "kernel rows left out (N/A or empty Duration)",
            "kernel.unassigned_rows": "kernel rows outside every step (blank Step Id)"}


def _num(fp: Fingerprint, key: str) -> float | None:
    m = fp.metrics.get(key)
    if m is None:
        return None
    try:
        return float(m.value)
    except (TypeError, ValueError):
        return None


def _sign(verdict) -> int:
    return 1 if verdict == terms.REGRESSION else -1


def _us(v) -> str:
    return "n/a" if v is None else f"{v:,.1f}"


def _us0(v) -> str:
    return "n/a" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}")


def _family_change(base, cand, fam: str, view) -> dict:
    cb = _num(base, metric_key("kernel.calls_per_step", family=fam, view=view)) or 0.0
    cc = _num(cand, metric_key("kernel.calls_per_step", family=fam, view=view)) or 0.0
    tb = _num(base, metric_key("kernel.time_us", family=fam, view=view))
    tc = _num(cand, metric_key("kernel.time_us", family=fam, view=view))
    if tb is None and cb == 0:
        tb = 0.0
    if tc is None and cc == 0:
        tc = 0.0
    return {"calls_base": cb, "calls_cand": cc, "sum_dur_base_us": tb, "sum_dur_cand_us": tc,
            "delta_us": (tc - tb) if tb is not None and tc is not None else None}


def _presence(ch: dict) -> str | None:
    """``gone`` (calls per step > 0 in the baseline, 0 in the candidate), ``new`` (the reverse), else None."""
    if ch["calls_base"] > 0 and ch["calls_cand"] == 0:
        return GONE
    if ch["calls_base"] == 0 and ch["calls_cand"] > 0:
        return NEW
    return None


def _family_text(ch: dict, rel: float | None) -> str:
    presence = _presence(ch)
    if presence == GONE:   # no ratio, no percentage: it did not get faster, it no longer runs
        tb = ch["sum_dur_base_us"]
        return (f"gone: no longer runs in the candidate ({ch['calls_base']:g} calls/step"
                + (f", ΣDuration {_us0(tb)} us/step" if tb else "") + " in the baseline)")
    if presence == NEW:
        tc = ch["sum_dur_cand_us"]
        return (f"new: runs only in the candidate ({ch['calls_cand']:g} calls/step"
                + (f", ΣDuration {_us0(tc)} us/step" if tc else "") + "; absent from the baseline)")
    bits = []
    if ch["calls_base"] != ch["calls_cand"]:
        bits.append(f"calls {ch['calls_base']:g} -> {ch['calls_cand']:g}/step")
    tb, tc = ch["sum_dur_base_us"], ch["sum_dur_cand_us"]
    if tb is not None and tc is not None and (tb or tc):
        pct = f" ({tc / tb - 1:+.0%})" if tb else ""
        bits.append(f"ΣDuration {_us0(tb)} -> {_us0(tc)} us/step{pct}")
    if rel is not None and abs(rel - 1.0) > 1e-3:
        bits.append(f"×{rel:.2f} vs the device")
    return "; ".join(bits) or "changed"


def _between_ranks(base, cand, fam: str, view, ch: dict) -> str:
    """For the p50 view of an even number of ranks, a call count that is the mean of the two
    middle ranks' counts may be no count any rank ran ("calls 12 -> 18/step" when rank 1 of 2
    went 12 -> 24): say so, with the rank0 and max views' counts (and, for two ranks, the other
    rank's, which is 2 x p50 - rank0). Empty when the p50 is rank0's or max's count on both
    sides, or the number of ranks is odd (seventh audit round)."""
    if view != terms.VIEW_P50:
        return ""

    def calls(fp, v):
        return _num(fp, metric_key("kernel.calls_per_step", family=fam, view=v))
    m = cand.metrics.get(metric_key("kernel.calls_per_step", family=fam, view=view))
    n = (m.context or {}).get("ranks") if m is not None else None
    r0 = (calls(base, terms.VIEW_RANK0), calls(cand, terms.VIEW_RANK0))
    mx = (calls(base, terms.VIEW_MAX), calls(cand, terms.VIEW_MAX))
    p50 = (ch["calls_base"], ch["calls_cand"])
    fractional = not all(float(v).is_integer() for v in p50)
    observed = all(v in (a, b) for v, a, b in zip(p50, r0, mx) if a is not None and b is not None)
    if not fractional and (not isinstance(n, int) or n % 2 or observed):
        return ""
    if n == 2 and None not in r0:   # the other rank's count: 2 x median - rank0's
        views = (("rank0", r0), ("the other rank", (2 * p50[0] - r0[0], 2 * p50[1] - r0[1])))
    else:
        views = (("rank0", r0), ("max", mx))
    seen = [f"{name} {a:g} -> {b:g}" for name, (a, b) in views if a is not None and b is not None]
    claim = ", no rank's count" if fractional or n == 2 else ""
    return f" (median of {n or 'an even number of'} ranks{claim}" + (f": {'; '.join(seen)}" if seen else "") + ")"


def find_causes(comparisons, base: Fingerprint, cand: Fingerprint, gate_views=(terms.VIEW_RANK0, terms.VIEW_P50)
                ) -> tuple[list[dict], list[str]]:
    """Group gated findings into causes (module doc).

    Returns:
        ``(causes, unexplained)``: causes as dicts — ``kind`` (kernel family | communication |
        step anatomy), ``subject``, ``verdict`` (regression | improvement | gone | new | side_effect), ``fails`` (explains
        a failing metric), ``what`` (text, first gated view), ``views`` ({view: short text}),
        ``evidence`` (list of evidence strings), ``explains`` (gated metric keys),
        ``step_delta_us`` (ΣDuration change per step, us, or None; for a step-anatomy part its
        own figure's change, in the caliber ``step_delta_caliber`` names: "busy union", "elapsed"), ``step_time_delta_us``
        (step.time_us change, elapsed, us), ``step_fraction`` (their quotient or None) —
        failing causes first, then by |step_delta_us|; ``unexplained``: keys of gated moved
        metrics no cause explains.
    """
    symptoms = [c for c in comparisons if c.gated and c.verdict in MOVED]
    by_key = {c.key: c for c in comparisons}
    views = [v for v in gate_views if any(c.labels.get("view") == v for c in symptoms)] or [None]
    first = views[0]
    causes: dict[tuple, dict] = {}
    owner: dict[str, dict] = {}   # symptom key -> the one cause that explains it

    def cause(kind, subject, verdict) -> dict:
        k = (kind, subject)   # one cause per thing that changed, whatever the signs of its symptoms
        if k not in causes:
            causes[k] = {"kind": kind, "subject": subject, "verdict": str(verdict), "fails": False, "what": "",
                         "views": {}, "evidence": [], "explains": [], "step_delta_us": None,
                         "step_time_delta_us": None, "step_fraction": None, "_own_time": False}
        return causes[k]

    # 1. family causes: calls changed, or own time relative to the device (share.family judged)
    for c in symptoms:
        fam = c.labels.get("family")
        if c.name in ("kernel.calls_per_step", "share.family") and fam:
            kind = "communication" if COMM_FAMILY.match(fam) else "kernel family"
            x = cause(kind, fam, c.verdict)
            x["_own_time"] = x["_own_time"] or c.name == "share.family"
        elif c.name == "comm.calls_per_step":
            cause("communication", c.labels.get("kind", "?"), c.verdict)
        elif c.name == "kernel.topn":
            for fam in set(c.candidate or []) ^ set(c.baseline or []):
                cause("communication" if COMM_FAMILY.match(fam) else "kernel family", fam, c.verdict)
    fam_causes = [v for v in causes.values() if v["kind"] in ("kernel family", "communication")]
    for x in fam_causes:   # the verdict follows what the change did to the step (module doc)
        x["_d_us"], x["_d_calls"] = _own_change(base, cand, x, first)
        own = [c.verdict for c in symptoms if c.labels.get("family") == x["subject"]
               or (c.name == "comm.calls_per_step" and c.labels.get("kind") == x["subject"])]
        x["verdict"] = str(_verdict_of(x, own or [x["verdict"]]))

    def explain(cs: list[dict], c: Comparison) -> bool:
        """``c`` is explained by one cause of ``cs``: of the same verdict if any, then the one that
        changed most (calls for a call-count symptom, ΣDuration per step otherwise); a later call
        re-assigns it."""
        if not cs:
            return False
        calls = c.name in _COUNT_SYMPTOMS
        best = max(cs, key=lambda x: (x["verdict"] == str(c.verdict), abs(x.get("_d_calls") or 0.0) if calls else 0.0,
                                      abs(x.get("_d_us") or 0.0)))
        prev = owner.get(c.key)
        if prev is not None and prev is not best:
            prev["explains"].remove(c.key)
        if c.key not in best["explains"]:
            best["explains"].append(c.key)
        owner[c.key] = best
        return True

    parts = _family_parts(base, cand)

    def in_part(x: dict, c: Comparison) -> bool:
        """Does family cause ``x`` belong to the part of symptom ``c`` (category / core type /
        phase / bound, from the family view of either side; unknown families: by scope)."""
        known = parts.get(x["subject"])
        if known is None:
            return (x["kind"] == "communication") == is_comm_part(c)
        return all(known.get(k) == v for k, v in c.labels.items() if k in _PART_LABELS and k in known)

    for c in symptoms:
        same = [x for x in fam_causes if x["verdict"] == str(c.verdict)]
        comm = [x for x in same if x["kind"] == "communication"]
        compute = [x for x in same if x["kind"] == "kernel family"]
        fam = c.labels.get("family")
        if c.name in _FAMILY_SYMPTOMS and fam:
            hit = explain([x for x in fam_causes if x["subject"] == fam], c)
        elif c.name == "comm.calls_per_step":
            hit = explain([x for x in fam_causes if x["subject"] == c.labels.get("kind")], c)
        elif c.name == "kernel.topn":
            moved = set(c.candidate or []) ^ set(c.baseline or [])
            movers = [x for x in fam_causes if x["subject"] in moved]
            # a family that is gone or new moved the others in or out of the Top-N: it is the cause
            present = [x for x in movers
                       if _presence(_family_change(base, cand, x["subject"], c.labels.get("view"))) is not None]
            hit = explain(present or movers, c)
        elif c.name in _CALL_SYMPTOMS:
            # families whose calls moved the way the count did (whatever their time did)
            sign = (c.delta or 0.0) > 0
            callers = [x for x in fam_causes if _calls_changed(base, cand, x, c.labels.get("view"))
                       and (_family_change(base, cand, x["subject"], c.labels.get("view"))["calls_cand"]
                            > _family_change(base, cand, x["subject"], c.labels.get("view"))["calls_base"]) == sign]
            hit = explain(callers, c)
        elif c.name in _PART_SYMPTOMS:
            mine = [x for x in same if in_part(x, c)]
            moved = [x for x in mine if x.get("_d_us") or x.get("_d_calls")]
            rest = [x for x in fam_causes if not in_part(x, c) and (x.get("_d_us") or x.get("_d_calls"))]
            # a part whose own families did not change (ΣDuration within max(1 us, 5 %), same calls)
            # moved its share because the rest of the step did: those families are the cause
            hit = explain(moved or rest or mine, c)
            if not hit and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT):
                # no family symptom gated (repeated captures judge the part's share against the
                # statistics tolerance, a family's share against the single-capture one): the part
                # is still explained by its largest family of the same sign (docs/verdicts.md)
                fam = _largest_family_in_part(c, base, cand, parts)
                if fam is not None:
                    x = cause("communication" if COMM_FAMILY.match(fam) else "kernel family", fam, c.verdict)
                    x["_d_us"], x["_d_calls"] = _own_change(base, cand, x, first)
                    fam_causes.append(x)
                    hit = explain([x], c)
        elif c.name == "step.computing_us":
            hit = explain(compute, c)
            if not hit and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT):
                # no family symptom gated (a family of one kernel per step is context, seventh audit
                # round): Computing is still explained by the compute family that moved it most
                fam = _largest_family_in_part(c, base, cand, {f: v for f, v in parts.items()
                                                               if not COMM_FAMILY.match(f)}, any_part=True,
                                              beyond_device=True)
                if fam is not None:
                    x = cause("kernel family", fam, c.verdict)
                    x["_d_us"], x["_d_calls"] = _own_change(base, cand, x, first)
                    fam_causes.append(x)
                    hit = explain([x], c)
        elif c.name in _COMM_SYMPTOMS or c.name.startswith("comm."):
            hit = explain(comm, c)
        elif c.name == "step.time_us" and (part := _larger_idle_or_exposed(c, by_key, same)):
            # exposed communication or idle time moved the step more than any family of its sign
            hit = explain([cause("step anatomy", part, c.verdict)], c)
        elif c.name in ("step.time_us", "device.time_us"):
            hit = explain(same, c)
        elif c.name in _QUALITY:
            hit = explain([cause("capture quality", _QUALITY[c.name], c.verdict)], c)
        else:
            hit = False
        if not hit and c.name in _ANATOMY + _COMM_SYMPTOMS + ("step.time_us", "step.computing_us", "device.time_us"):
            hit = explain([cause("step anatomy", _anatomy_subject(c, by_key), c.verdict)], c)

    _fold_into_structure(causes, symptoms, explain, base, cand, first)
    explained = {k for x in causes.values() for k in x["explains"]}
    unexplained = [c.key for c in symptoms if c.key not in explained]
    for x in causes.values():   # fails / evidence from the symptoms it explains; a failing cause is a regression
        mine = [by_key[k] for k in x["explains"]]
        x["fails"] = any(c.fails for c in mine)
        x["evidence"] = []
        for c in mine:
            if c.evidence and len(x["evidence"]) < 4 and c.evidence not in x["evidence"]:
                x["evidence"].append(c.evidence)
        if x["kind"] not in ("kernel family", "communication", "model structure") and mine:
            x["verdict"] = str(_verdict_of({"_d_us": None, "_d_calls": None}, [c.verdict for c in mine]))
        if x["kind"] == "kernel family" or (x["kind"] == "communication" and COMM_FAMILY.match(x["subject"])):
            presence = _presence(_family_change(base, cand, x["subject"], first))
            if presence is not None:   # gone / new is what it did, whatever its time did to the step
                x["verdict"] = presence
        if x["fails"]:
            x["verdict"] = terms.REGRESSION
        elif x["kind"] == "step anatomy" and x["verdict"] == terms.IMPROVEMENT and not _own_part_fell(x, by_key, first):
            # its symptoms improved (a ratio, another view) while its own time did not fall where the
            # cause is measured: a consequence of the rest of the step, never a gain
            x["verdict"] = SIDE_EFFECT

    # 2. what changed, per view; step-time accounting
    for x in causes.values():
        for view in views:
            st = by_key.get(metric_key("step.time_us", view=view))
            st_delta = st.delta if st is not None and st.delta is not None else None
            if x["kind"] == "model structure":
                d_us = sum(_family_change(base, cand, f, view)["delta_us"] or 0.0 for f in x["_families"]) \
                    if x["_families"] else None
                text = x["what"] + (f"; ΣDuration of its families {d_us:+,.0f} us/step" if d_us is not None else "")
            elif x["kind"] == "step anatomy":
                text, d_us = _anatomy_text(x, by_key, view)
                if x["verdict"] == SIDE_EFFECT:
                    text += ("; not a gain: it fell only as Computing grew over the same communication"
                             if (d_us or 0) < 0 and x["subject"] == "exposed communication" else
                             "; its own time did not fall by more than max(1 us, 5 %): not a gain")
                if view == first:   # the anatomy figure's own caliber (busy union, elapsed), not ΣDuration
                    part = _anatomy_part(x["subject"], by_key, view)
                    x["step_delta_caliber"] = terms.CALIBER_LABEL.get(part.caliber) if part is not None else None
            elif x["kind"] == "capture quality":
                q = by_key[x["explains"][0]]
                text, d_us = f"{q.baseline:g} -> {q.candidate:g} row(s)" + (f" ({q.evidence})" if q.evidence else ""), None
            elif x["kind"] == "communication" and not COMM_FAMILY.match(x["subject"]):
                cb = _num(base, metric_key("comm.calls_per_step", kind=x["subject"], view=view))
                cc = _num(cand, metric_key("comm.calls_per_step", kind=x["subject"], view=view))
                tb = _num(base, metric_key("comm.time_us", kind=x["subject"], view=view))
                tc = _num(cand, metric_key("comm.time_us", kind=x["subject"], view=view))
                d_us = (tc - tb) if tb is not None and tc is not None else None
                text = (f"{x['subject']} collectives {_us(cb) if cb is None else f'{cb:g}'} -> "
                        f"{'n/a' if cc is None else f'{cc:g}'} per step; ΣDuration {_us(tb)} -> {_us(tc)} us")
            else:
                ch = _family_change(base, cand, x["subject"], view)
                share = by_key.get(metric_key("share.family", family=x["subject"], view=view))
                rel = ((share.stats or {}).get("composition") or {}).get("relative") if share else None
                text, d_us = _family_text(ch, rel), ch["delta_us"]
                # right after the counts it explains: "calls 7 -> 10.5/step (median of 2 ranks: ...)"
                text = text.replace("/step", "/step" + _between_ranks(base, cand, x["subject"], view, ch), 1)
                if x["verdict"] == SIDE_EFFECT:
                    text += "; own ΣDuration and calls within 5 %: its share fell as the rest of the step grew"
            x["views"][str(view)] = text
            if view == first:
                x["what"] = text
                x["step_delta_us"] = d_us
                x["step_time_delta_us"] = st_delta
                if d_us is not None and st_delta and abs(st_delta) >= MIN_STEP_DELTA_US:
                    x["step_fraction"] = d_us / st_delta   # no fraction of a step time that did not move
    out = sorted(causes.values(), key=lambda x: (not x["fails"], x["kind"] != "model structure", x["verdict"] != terms.REGRESSION,
                                                 -abs(x["step_delta_us"] or 0.0), -len(x["explains"]),
                                                 x["subject"]))
    out = [{k: v for k, v in x.items() if not k.startswith("_")} for x in out if x["explains"]]
    return out, unexplained


_PART_LABELS = ("category", "core_type", "phase", "bound")
MATERIAL = OWN_CHANGE   # a ΣDuration change within ±5 % of the larger side is no change of time (ratio)


def _immaterial(delta: float, before: float, after: float) -> bool:
    """A change of time ``delta`` (us) from ``before`` to ``after`` below max(1 us, 5 % of the
    larger side): no change (:data:`MIN_STEP_DELTA_US`, :data:`MATERIAL`)."""
    return abs(delta) < max(MIN_STEP_DELTA_US, MATERIAL * max(abs(before), abs(after)))


def _own_change(base, cand, x: dict, view) -> tuple[float | None, float | None]:
    """(ΣDuration change per step in us, calls-per-step change) of family or communication-kind
    cause ``x`` in ``view``; None where unknown. A ΣDuration change below max(1 us, 5 %) is 0."""
    if x["kind"] == "communication" and not COMM_FAMILY.match(x["subject"]):
        tb = _num(base, metric_key("comm.time_us", kind=x["subject"], view=view))
        tc = _num(cand, metric_key("comm.time_us", kind=x["subject"], view=view))
        cb = _num(base, metric_key("comm.calls_per_step", kind=x["subject"], view=view))
        cc = _num(cand, metric_key("comm.calls_per_step", kind=x["subject"], view=view))
    else:
        ch = _family_change(base, cand, x["subject"], view)
        tb, tc, cb, cc = ch["sum_dur_base_us"], ch["sum_dur_cand_us"], ch["calls_base"], ch["calls_cand"]
    d = None
    if tb is not None and tc is not None:
        d = tc - tb
        if _immaterial(d, tb, tc):
            d = 0.0
    return d, ((cc - cb) if cb is not None and cc is not None else None)


def _verdict_of(x: dict, symptom_verdicts) -> str:
    """A cause's verdict: the sign of its ΣDuration change per step (what it did to the step);
    when that did not move, the sign of its calls-per-step change; else its symptoms' (a regression
    among them wins)."""
    if x.get("_d_us"):
        return terms.REGRESSION if x["_d_us"] > 0 else terms.IMPROVEMENT
    if x.get("_d_calls"):
        return terms.REGRESSION if x["_d_calls"] > 0 else terms.IMPROVEMENT
    if terms.REGRESSION in [str(v) for v in symptom_verdicts]:
        return terms.REGRESSION
    # its own time and calls were measured and did not move: the share fell because the rest of
    # the step changed (a side effect, never a gain); unknown own figures keep the symptoms' sign
    return SIDE_EFFECT if x.get("_d_us") == 0.0 and not x.get("_d_calls") else terms.IMPROVEMENT


def _largest_family_in_part(c: Comparison, base: Fingerprint, cand: Fingerprint, parts: dict,
                            any_part: bool = False, beyond_device: bool = False) -> str | None:
    """The kernel family of part share ``c`` (category / core type / phase / bound, from the
    family view; ``any_part``: of ``parts`` whatever ``c``'s labels) whose ΣDuration per step
    changed most in ``c``'s direction, in ``c``'s view, by more than max(1 us, 5 %); with
    ``beyond_device`` only a family whose ΣDuration ratio differs from the view's device scale
    (:func:`perfgate.compare.composition.scale_factor`) by more than 5 % (every family x1.5 is the
    device, Computing as a whole, not one family). None when no family moved that way."""
    view = c.labels.get("view")
    up = (c.delta or 0.0) > 0
    best, best_d = None, 0.0
    scale = None
    if beyond_device:
        from perfgate.compare.composition import scale_factor
        sc = scale_factor(base, cand, view)
        scale = sc.value if sc.identified else 1.0
    for fam, labels in parts.items():
        if not any_part:
            if not all(labels.get(k) == v for k, v in c.labels.items() if k in _PART_LABELS and k in labels):
                continue
            if not any(k in labels for k in c.labels if k in _PART_LABELS):
                continue
        ch = _family_change(base, cand, fam, view)
        if ch["delta_us"] is None or _immaterial(ch["delta_us"], ch["sum_dur_base_us"] or 0.0, ch["sum_dur_cand_us"] or 0.0):
            continue
        if scale is not None and ch["sum_dur_base_us"] and ch["sum_dur_cand_us"] and \
                abs(ch["sum_dur_cand_us"] / ch["sum_dur_base_us"] / scale - 1.0) <= OWN_CHANGE:
            continue   # moved with the device
        d = _family_change(base, cand, fam, view)["delta_us"]
        if d is not None and (d > 0) == up and abs(d) > abs(best_d):
            best, best_d = fam, d
    return best


def _family_parts(base: Fingerprint, cand: Fingerprint) -> dict:
    """{family: {category, core_type, phase, bound}} from the family view (``detail.operators
    .families``) of the baseline and the candidate; families below its share cut are absent."""
    out: dict = {}
    for fp in (base, cand):
        for f in ((fp.detail or {}).get("operators") or {}).get("families") or []:
            if f.get("family"):
                out.setdefault(f["family"], {k: f[k] for k in _PART_LABELS if f.get(k) is not None})
    return out


MIN_STEP_DELTA_US = 1.0   # a step-time change below this is no change to apportion (us)
_LAYOUT = ("layer.count", "microbatch.count_per_step", "pass.count_per_step")   # the model itself changed
_STRUCTURE = ("layer.count", "microbatch.count_per_step", "pass.count_per_step", "layer.class_count",
              "block.count")   # issue 17's structure metrics
_COUNT_SYMPTOMS = ("kernel.calls_per_step", "kernel.total_calls_per_step", "optype.calls_per_step",
                   "comm.calls_per_step")


def _fold_into_structure(causes: dict, symptoms: list, explain, base, cand, view) -> None:
    """A changed model layout (layer, micro-batch or pass count) is one *model structure* cause; it
    explains the structure metrics and every call-count symptom of the same sign (a layer more adds calls of every
    family in it). Family causes that only explained call counts fold into it (named in its
    evidence). When only layer classes or block counts moved (the layout is the same) and some
    family's calls changed, those families are the causes and the class changes their symptoms;
    so too when the layout moved but only one or two families changed calls while at least four
    times as many kept theirs (:func:`_few_movers`: a doubled FlashAttention, the layer anchor,
    cuts every layer in two)."""
    struct = sorted((c for c in symptoms if c.name in _STRUCTURE), key=lambda c: _STRUCTURE.index(c.name))
    if not struct:
        return
    movers = [y for y in causes.values() if y["kind"] in ("kernel family", "communication")
              and _calls_changed(base, cand, y, view)]
    if movers and (not any(c.name in _LAYOUT for c in struct) or _few_movers(base, cand, movers, view)):
        # layers and passes are as many as before, only their classes / block counts moved; or the
        # layer count moved while one or two families' calls changed and most families' did not (a
        # doubled layer anchor, FlashAttention, cuts every layer in two): a family whose calls
        # changed reshaped the layers it sits in; it is the cause, the structure metrics its symptoms
        for c in struct:
            explain(movers, c)
        return
    cache: list = []

    def scale():   # the view's device scale, computed once for every family folded below
        if not cache:
            from perfgate.compare.composition import scale_factor
            cache.append(scale_factor(base, cand, view))
        return cache[0]
    for verdict in {c.verdict for c in struct}:
        mine = [c for c in struct if c.verdict == verdict]
        first = mine[0]
        texts = []
        for c in mine:
            t = f"{c.subject_text().split(' [')[0]} {c.baseline:g} -> {c.candidate:g}"
            if t not in texts:
                texts.append(t)
        x = {"kind": "model structure", "subject": texts[0], "verdict": str(verdict), "fails": False,
             "what": "; ".join(texts[1:4]) or texts[0], "views": {}, "evidence": [], "explains": [], "step_delta_us": None,
             "step_time_delta_us": None, "step_fraction": None, "_families": [], "_own_time": False}
        causes[("model structure", x["subject"], str(verdict))] = x
        explain([x], first)
        for c in mine[1:]:
            explain([x], c)
        counts = [c for c in symptoms if c.name in _COUNT_SYMPTOMS and c.verdict == verdict]
        for c in counts:
            explain([x], c)
        folded = []
        for k, y in list(causes.items()):
            if y is x or y["kind"] not in ("kernel family", "communication") or y["verdict"] != str(verdict):
                continue
            if not y["_own_time"] or _per_call_unchanged(base, cand, y["subject"], view, scale()):
                # its calls changed and its time per call did not: the structure change explains it
                folded.append(y["subject"])
                for key in list(y["explains"]):
                    c = next(c for c in symptoms if c.key == key)
                    explain([x], c)
                del causes[k]
        x["_families"] = folded
        if folded:
            x["evidence"].insert(0, f"kernel families with more or fewer calls per step: {', '.join(sorted(folded)[:8])}"
                                    + (f" (+{len(folded) - 8} more)" if len(folded) > 8 else ""))


def _few_movers(base, cand, movers: list, view) -> bool:
    """At most two families changed calls per step while at least four times as many kept them
    (``kernel.calls_per_step`` equal on both sides in ``view``): more layers would change the calls
    of every family inside them, so such a layout change is those families' doing."""
    if len(movers) > 2:
        return False
    same = 0
    for k, m in base.metrics.items():
        if m.name == "kernel.calls_per_step" and m.labels.get("view") == view:
            c = cand.metrics.get(k)
            same += c is not None and c.value == m.value
    return same >= 4 * len(movers)


def _per_call_unchanged(base, cand, fam: str, view, scale) -> bool:
    """Family ``fam``'s ΣDuration per call moved with the device ``scale``
    (:func:`perfgate.compare.composition.scale_factor` of ``view``) within ±5 %: its own-time
    change is its call-count change."""
    from perfgate.compare.composition import SCALE_AGREEMENT
    ch = _family_change(base, cand, fam, view)
    nb, nc, tb, tc = ch["calls_base"], ch["calls_cand"], ch["sum_dur_base_us"], ch["sum_dur_cand_us"]
    if not (nb and nc and tb and tc) or nb == nc:
        return False
    return abs((tc / nc) / (tb / nb) / scale.value - 1.0) <= SCALE_AGREEMENT


def _calls_changed(base, cand, x: dict, view) -> bool:
    if x["kind"] == "communication" and not COMM_FAMILY.match(x["subject"]):
        return False
    ch = _family_change(base, cand, x["subject"], view)
    return ch["calls_base"] != ch["calls_cand"]


_COMPUTING = "Computing (no kernel family explains it)"   # every family as the device: compute as a whole
_DEVICE = "device time (no kernel family explains it)"      # device busy union where no step time is (rules.step_time_stand_in)
_ANATOMY_SUBJECT = {"step.underfeed_ratio": "device idle (underfeed)", "step.free_us": "device idle (free time)",
                    "step.bubble_us": "device idle (bubbles)", "step.internal_bubble_us": "device idle (bubbles)",
                    "step.prelaunch_gap_us": "pre-launch gap", "step.tail_gap_us": "tail gap",
                    "step.exposed_comm_ratio": "exposed communication",
                    "step.comm_not_overlapped_us": "exposed communication", "step.comm_us": "communication time",
                    "step.time_us": "step time (no kernel family explains it)",
                    "step.computing_us": _COMPUTING, "device.time_us": _DEVICE}


def _material(c: Comparison | None) -> int | None:
    """+1 / -1 when ``c`` moved by more than max(1 us, 5 %) up / down, 0 when it did not, None
    when unknown."""
    if c is None or c.delta is None or c.baseline is None or c.candidate is None:
        return None
    if _immaterial(c.delta, c.baseline, c.candidate):
        return 0
    return 1 if c.delta > 0 else -1


def _own_part_fell(x: dict, by_key: dict, view) -> bool:
    """Whether the step-anatomy cause ``x``'s own time (:data:`_ANATOMY_METRIC` of its subject,
    in ``view``) fell by more than max(1 us, 5 %): what an improvement of it needs. Exposed
    communication that fell only because Computing grew (more compute to hide the same
    communication under: ``step.comm_us`` not fallen) did not fall by itself: a slower kernel
    is no gain. Unknown (the metric absent) counts as fallen, leaving the symptoms' verdict."""
    own = _material(_anatomy_part(x["subject"], by_key, view))
    if own is None:
        return True
    if own >= 0:
        return False
    if x["subject"] == "exposed communication":
        computing = _material(by_key.get(metric_key("step.computing_us", view=view)))
        comm = _material(by_key.get(metric_key("step.comm_us", view=view)))
        if computing == 1 and comm != -1:
            return False
    return True


def _larger_idle_or_exposed(c: Comparison, by_key: dict, families: list) -> str | None:
    """The step-anatomy subject (exposed communication, device idle) that changed step time
    ``c`` more than every kernel family cause in ``families`` (same verdict): its own figure
    (``step.comm_not_overlapped_us``, ``step.free_us``, busy union / elapsed) moved the step's
    way by more than max(1 us, 5 %) and by more than the largest family's ΣDuration change per
    step; None when a family is the largest ("step time by the largest cause of its sign",
    docs/verdicts.md: exposed communication +2,917 us was passed over for MatMul's +793 us)."""
    if c.delta is None or not c.delta:
        return None
    view = c.labels.get("view")
    fam = max((abs(x.get("_d_us") or 0.0) for x in families), default=0.0)
    best, best_d = None, fam
    for name, subject in (("step.comm_not_overlapped_us", "exposed communication"),
                          ("step.free_us", "device idle (free time)")):
        o = by_key.get(metric_key(name, view=view))
        if o is None or o.delta is None or (o.delta > 0) != (c.delta > 0) or _material(o) in (0, None):
            continue
        if abs(o.delta) > best_d:
            best, best_d = subject, abs(o.delta)
    return best


def _anatomy_subject(c: Comparison, by_key: dict) -> str:
    if c.name != "step.time_us":
        return _ANATOMY_SUBJECT.get(c.name, c.name)
    view = c.labels.get("view")
    best, best_d = None, 0.0
    for name in ("step.free_us", "step.comm_not_overlapped_us", "step.computing_us"):
        o = by_key.get(metric_key(name, view=view))
        if o is not None and o.delta is not None and abs(o.delta) > abs(best_d):
            best, best_d = name, o.delta
    return {"step.free_us": "device idle (free time)", "step.comm_not_overlapped_us": "exposed communication",
            "step.computing_us": _COMPUTING}.get(best, _ANATOMY_SUBJECT[c.name])


#: the step metrics an anatomy cause's subject is measured by, the first one compared wins: device
#: idle is step_trace_time.csv's Free time, else the kernel table's bubbles (raw msprof output and
#: a bare kernel_details.csv have no Free column: an underfeed "gain" there was judged by nothing)
_ANATOMY_METRIC = {"device idle (underfeed)": ("step.free_us", "step.bubble_us"),
                   "device idle (free time)": ("step.free_us",),
                   "device idle (bubbles)": ("step.bubble_us",), "pre-launch gap": ("step.prelaunch_gap_us",),
                   "tail gap": ("step.tail_gap_us",), "exposed communication": ("step.comm_not_overlapped_us",),
                   "communication time": ("step.comm_us",), _COMPUTING: ("step.computing_us",),
                   _DEVICE: ("device.time_us",)}


def _anatomy_part(subject: str, by_key: dict, view) -> Comparison | None:
    """The comparison of the metric that measures anatomy cause ``subject`` in ``view``
    (:data:`_ANATOMY_METRIC`; ``device.time_us`` in its busy-union caliber), or None."""
    for name in _ANATOMY_METRIC.get(subject, ("step.time_us",)):
        labels = {"caliber": terms.BUSY_UNION} if name == "device.time_us" else {}
        c = by_key.get(metric_key(name, view=view, **labels))
        if c is not None and c.delta is not None:
            return c
    return None


def _anatomy_text(x: dict, by_key: dict, view) -> tuple[str, float | None]:
    c = _anatomy_part(x["subject"], by_key, view)
    if c is None:
        # the part's own time is measured by nothing this capture holds: say what moved
        mine = [by_key[k] for k in x["explains"] if k in by_key and by_key[k].labels.get("view") == view]
        m = mine[0] if mine else None
        if m is None or m.delta is None:
            return "its own time is not measured in this capture", None
        if m.unit == "ratio":
            return f"{m.subject_text()} {m.baseline:.2%} -> {m.candidate:.2%} ({m.delta * 100:+.2f} pp)", None
        return f"{m.subject_text()} {_us(m.baseline)} -> {_us(m.candidate)} {m.unit}", None
    name = c.name
    what = name.split('.', 1)[1].removesuffix('_us').replace('_', ' ')
    what = "step time" if what == "time" else what   # step.time_us: "time" alone names nothing
    what = "device busy union" if name == "device.time_us" else what
    cal = terms.CALIBER_LABEL.get(c.caliber)
    return (f"{what} {_us(c.baseline)} -> {_us(c.candidate)} us per step ({c.delta:+,.1f} us"
            + (f", {cal}" if cal else "") + ")"), c.delta
