"""Attribution: which kernel families make up the delta of a regressed aggregate.

For a regression of a step aggregate (step time, Computing, device time, a ΣDuration share,
exposed communication, the step anatomy) the comparison gets the kernel families whose
per-step ΣDuration grew most in the same cross-rank view, with their calls per step and
ΣDuration per step on both sides, so the PR comment says *what* got slower. Communication
families (``hcom_*``) explain only communication aggregates and the Comm share; compute
families only Computing and the other shares; step and device time may be either.

Inputs are the fingerprints' ``kernel.calls_per_step{family}`` (calls, the median over steps)
and ``kernel.time_us{family}`` (ΣDuration per step in us, the median over steps; kept for the
Top-N + slack families only, so a family beyond that depth shows its count change with
``delta_us`` None). A family absent on one side counts 0 calls / 0 us. Pure.
"""
from __future__ import annotations

import re
from dataclasses import replace

from perfgate import terms
from perfgate.model import Comparison, Fingerprint

AGGREGATE_PREFIXES = ("step.", "share.", "device.")
TOP = 3
COMM_FAMILY = re.compile(r"(?i)^hcom_|hccl")
_COMPUTE_ONLY = ("step.computing_us",)
_COMM_ONLY = ("step.exposed_comm_ratio", "step.comm_us", "step.comm_not_overlapped_us")


def _scope(c: Comparison) -> str:
    """Which families can explain this metric: ``compute`` (Computing, non-Comm shares),
    ``comm`` (communication aggregates, the Comm share) or ``all`` (step time, device time)."""
    if c.name in _COMM_ONLY or c.labels.get("category") == "Comm" or c.labels.get("core_type") in (
            "HCCL", terms.COMM_CORE):
        return "comm"
    if c.name in _COMPUTE_ONLY or c.name.startswith("share."):
        return "compute"
    return "all"


def family_deltas(base: Fingerprint, cand: Fingerprint, view: str | None) -> list[dict]:
    """Per kernel family in ``view``: ``family``, ``calls_base``, ``calls_cand`` (calls per
    step), ``sum_dur_base_us``, ``sum_dur_cand_us`` (ΣDuration per step, us; None when not in
    the fingerprint) and ``delta_us`` (candidate − baseline ΣDuration, None if unknown),
    sorted by ``delta_us`` then by the change of calls, largest growth first."""
    fams: dict[str, dict] = {}
    for side, fp in (("base", base), ("cand", cand)):
        for m in fp.metrics.values():
            if m.labels.get("view") != view or "family" not in m.labels:
                continue
            rec = fams.setdefault(m.labels["family"], {"family": m.labels["family"]})
            if m.name == "kernel.calls_per_step":
                rec[f"calls_{side}"] = float(m.value)
            elif m.name == "kernel.time_us":
                rec[f"sum_dur_{side}_us"] = float(m.value)
    out = []
    for rec in fams.values():
        rec.setdefault("calls_base", 0.0)
        rec.setdefault("calls_cand", 0.0)
        has_b, has_c = "sum_dur_base_us" in rec, "sum_dur_cand_us" in rec
        if has_b or has_c:
            # a family below the Top-N depth on one side but with calls there is unknown, not 0
            if not has_b and rec["calls_base"] > 0 or not has_c and rec["calls_cand"] > 0:
                rec["delta_us"] = None
            else:
                rec["delta_us"] = rec.get("sum_dur_cand_us", 0.0) - rec.get("sum_dur_base_us", 0.0)
        else:
            rec["delta_us"] = None
        rec.setdefault("sum_dur_base_us", None)
        rec.setdefault("sum_dur_cand_us", None)
        out.append(rec)
    out.sort(key=lambda r: (-(r["delta_us"] or 0.0), -(r["calls_cand"] - r["calls_base"]), r["family"]))
    return out


def _text(r: dict) -> str:
    def us(v):
        return "n/a" if v is None else f"{v:,.1f}"
    calls = f"calls {r['calls_base']:g} -> {r['calls_cand']:g}"
    dur = f"ΣDuration {us(r['sum_dur_base_us'])} -> {us(r['sum_dur_cand_us'])} us/step"
    d = f" ({r['delta_us']:+,.1f} us)" if r["delta_us"] is not None else ""
    return f"{r['family']} {calls}, {dur}{d}"


#: Joins a regression's reason and its attribution text (reports may split on it).
ATTRIBUTION_LEAD = ". Kernel families that grew most: "


_PART_LABELS = ("category", "core_type", "phase")   # share labels that a family's detail row carries


def _family_parts(fp: Fingerprint) -> dict:
    """{family: {"category": .., "core_type": .., "phase": ..}} from the fingerprint's family
    table (``detail["operators"]["families"]``, the lowest rank's; families folded below its
    ``fold_below`` share are not in it)."""
    ops = (fp.detail or {}).get("operators") or {}
    return {r["family"]: {k: r.get(k) for k in _PART_LABELS}
            for r in ops.get("families") or () if isinstance(r, dict) and "family" in r}


def _part_members(c: Comparison, base: Fingerprint, cand: Fingerprint) -> set | None:
    """For a share of one part (``share.family{family}``, ``share.category{category}``,
    ``share.core_type{core_type}``, ``share.phase{phase}``, ``share.phase_category``): the
    families inside that part, the only ones whose growth raises its share (a family outside it
    that grew lowers it). ``share.family`` is its own family; the others come from either
    side's family table. None for any other metric, or when no family table says."""
    if not c.name.startswith("share."):
        return None
    if c.name == "share.family":
        return {c.labels["family"]} if "family" in c.labels else None
    want = {k: c.labels[k] for k in _PART_LABELS if k in c.labels}
    if not want:
        return None
    parts = {**_family_parts(base), **_family_parts(cand)}
    if not parts:
        return None
    return {f for f, p in parts.items() if all(p.get(k) == v for k, v in want.items())}


def attribute_families(c: Comparison, base: Fingerprint, cand: Fingerprint, top: int = TOP) -> Comparison:
    """Attach to a regressed aggregate the ``top`` families that grew most (ΣDuration up or
    more calls), in ``attribution`` and appended to the reason. For a share of one part (a
    family, a category, a core type, a phase) that rose, only the families inside that part
    count: a family outside it that grew lowers the share, it cannot explain a rise (a
    communication family's own share rising was once "explained" by the MatMul family that grew
    beside it); for one that fell (``exact`` direction), only the families outside it.
    Other comparisons unchanged."""
    if c.verdict != terms.REGRESSION or not c.name.startswith(AGGREGATE_PREFIXES):
        return c
    rows = family_deltas(base, cand, c.labels.get("view"))
    scope = _scope(c)
    members = _part_members(c, base, cand)
    if members is not None:   # a share that rose: families inside its part; one that fell: outside it
        rose = (c.delta or 0.0) > 0
        rows = [r for r in rows if (r["family"] in members) == rose]
    elif scope == "compute":
        rows = [r for r in rows if not COMM_FAMILY.match(r["family"])]
    elif scope == "comm":
        rows = [r for r in rows if COMM_FAMILY.match(r["family"])]
    grew = [r for r in rows if (r["delta_us"] or 0.0) > 0 or r["calls_cand"] > r["calls_base"]][:top]
    if not grew:
        return c
    return replace(c, attribution=grew,
                   reason=c.reason + ATTRIBUTION_LEAD + "; ".join(_text(r) for r in grew))
