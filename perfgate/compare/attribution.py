"""Attribution: which kernel families make up the change of a regressed aggregate.

For a regression of a step aggregate (step time, Computing, device time, a ΣDuration share,
exposed communication, the step anatomy) the comparison gets the kernel families whose
ΣDuration per step grew most *beyond the device's speed* in the same cross-rank view, with their
calls per step and ΣDuration per step on both sides, so the PR comment says *what* got slower and
never lists a family that only moved with the device. A family's excess is
``T_c − s · T_b`` (us per step; ``s`` the view's device scale, :func:`perfgate.compare.parts.scale_factor`;
``T`` its ``share.family`` times the device ΣDuration, so every family has one). Communication
families (``hcom_*``) explain only communication aggregates and the Comm share; compute families
only Computing and the other shares; step and device time may be either. A family absent on one
side counts 0 calls / 0 us. Pure.
"""
from __future__ import annotations

import re
from dataclasses import replace

from perfgate import terms
from perfgate.model import Comparison, Fingerprint, metric_key

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


def family_deltas(base: Fingerprint, cand: Fingerprint, view: str | None, scale: float = 1.0) -> list[dict]:
    """Per kernel family in ``view``: ``family``, ``calls_base``, ``calls_cand`` (calls per step),
    ``sum_dur_base_us``, ``sum_dur_cand_us`` (ΣDuration per step, us), ``delta_us`` (candidate −
    baseline) and ``excess_us`` (``T_c − scale · T_b``), sorted by excess, then by the change of
    calls, largest growth first."""
    from perfgate.compare.parts import family_time
    fams = sorted({m.labels["family"] for fp in (base, cand) for m in fp.metrics.values()
                   if m.labels.get("view") == view and m.name in ("share.family", "kernel.calls_per_step", "kernel.time_us")
                   and "family" in m.labels})
    out = []
    for fam in fams:
        def calls(fp):
            m = fp.metrics.get(metric_key("kernel.calls_per_step", family=fam, view=view))
            return float(m.value) if m is not None else 0.0
        tb, tc = family_time(base, fam, view), family_time(cand, fam, view)
        out.append({"family": fam, "calls_base": calls(base), "calls_cand": calls(cand), "sum_dur_base_us": tb,
                    "sum_dur_cand_us": tc, "delta_us": tc - tb, "excess_us": tc - scale * tb})
    out.sort(key=lambda r: (-r["excess_us"], -(r["calls_cand"] - r["calls_base"]), r["family"]))
    return out


def _text(r: dict) -> str:
    def us(v):
        return "n/a" if v is None else f"{v:,.1f}"
    calls = f"calls {r['calls_base']:g} -> {r['calls_cand']:g}"
    dur = f"ΣDuration {us(r['sum_dur_base_us'])} -> {us(r['sum_dur_cand_us'])} us/step"
    return f"{r['family']} {calls}, {dur} ({r['excess_us']:+,.1f} us beyond the device)"


#: Joins a regression's reason and its attribution text (reports may split on it).
ATTRIBUTION_LEAD = ". Kernel families beyond the device's speed: "


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


def attribute_families(c: Comparison, base: Fingerprint, cand: Fingerprint, top: int = TOP,
                       scales: dict | None = None, beyond: set | None = None) -> Comparison:
    """Attach to a regressed aggregate the ``top`` families whose ΣDuration grew most beyond the
    device's speed (or whose calls grew), in ``attribution`` and appended to the reason. For a share
    of one part (a family, a category, a core type, a phase) that rose, only the families inside
    that part count; for one that fell (``exact`` direction), only the families outside it. When
    every family moved with the device, nothing is attached: no family explains it. ``scales``
    ({view: Scale}) reuses the device scales already computed; ``beyond`` ({(family, view)}: the
    families whose own part regressed, :mod:`perfgate.compare.parts`) keeps the list
    to families that moved beyond their noise band as well. Other comparisons unchanged."""
    if c.verdict != terms.REGRESSION or not c.name.startswith(AGGREGATE_PREFIXES):
        return c
    view = c.labels.get("view")
    scale = (scales or {}).get(view)
    if scale is None:
        from perfgate.compare.parts import scale_factor
        scale = scale_factor(base, cand, view)
        if scales is not None:
            scales[view] = scale
    rows = family_deltas(base, cand, view, scale.value)
    scope = _scope(c)
    members = _part_members(c, base, cand)
    if members is not None:   # a share that rose: families inside its part; one that fell: outside it
        rose = (c.delta or 0.0) > 0
        rows = [r for r in rows if (r["family"] in members) == rose]
    elif scope == "compute":
        rows = [r for r in rows if not COMM_FAMILY.match(r["family"])]
    elif scope == "comm":
        rows = [r for r in rows if COMM_FAMILY.match(r["family"])]
    grew = [r for r in rows if r["calls_cand"] > r["calls_base"] or (
        r["excess_us"] >= MIN_EXCESS_US and (beyond is None or (r["family"], view) in beyond))][:top]
    if not grew:
        return c
    return replace(c, attribution=grew,
                   reason=c.reason + ATTRIBUTION_LEAD + "; ".join(_text(r) for r in grew))


#: an excess below this (us per step) is rounding, not a family that explains anything
MIN_EXCESS_US = 1.0
