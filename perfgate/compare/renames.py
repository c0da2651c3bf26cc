"""Renamed kernel families: one kernel under another name is not a new family plus a gone one.

A kernel's name can change while the kernel does not: a torch.compile rebuild gives a Triton
kernel a new name (an inductor hash the policy's ``family_volatile`` rules do not know, another
fused-op spelling), a library release renames an operator's kernel. The family comparison would
then see a family gone from the baseline and a family new in the candidate, and the gate would
fail on the new family's calls per step (0 -> n, an exact rule) and share.

:func:`find_renames` pairs such families. A family present only in the baseline (gone) and a
family present only in the candidate (new) are one renamed family when, in every gated view
present (``rank0``, ``p50``), they have

* equal calls per step (``kernel.calls_per_step{family, view}``, an exact count);
* the same operator Type and Accelerator Core (the family view of the fingerprint,
  ``detail["operators"]["families"]``: the lowest rank's families with the Type and core that
  carry most of their ΣDuration; a Type or core N/A on a row of a capture that records them is
  not "the same"; a capture that records none, as at profiler Level0, is matched without them);
* ΣDuration per step within noise: ``|T_new / T_old - 1| <= RENAME_TIME_NOISE`` with ``T`` =
  ``kernel.time_us{family, view}`` (us per step), or where a side does not record it (the family
  is outside that side's Top-N + slack) the estimate ``share.family{family, view}`` x
  ``device.time_us{caliber=sum_duration, view}`` on both sides;

and the pairing is one to one: a gone family that matches two new ones (or a new family that
matches two gone ones) is ambiguous and left as gone + new. No family is paired between
fingerprints whose families are not comparable at all (other ``family_suffix`` rules, another
rank count or other rank ids): there every family metric is "not compared" already.
:func:`apply_renames` then takes the verdicts on both families out of the gate. Pure (no I/O).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from perfgate import terms
from perfgate.model import Comparison, Fingerprint

RENAME_TIME_NOISE = 0.25
"""How far the ΣDuration per step of a renamed family may move, as |T_new / T_old - 1|.

The same kernel on the same work moves run to run: on the real text level1 / level2 captures
(two runs of one job) the robust spread of one compute kernel's duration between the runs is
about 4.5 % (sigma of the log ratio), and a family's ΣDuration on another device or after a
toolchain rebuild drifts further. A quarter is several times that spread, yet tight enough that
a kernel that was renamed and also got much slower or faster is not paired: its time is then
judged as a new family's, not waved through as a rename."""

_CALLS = "kernel.calls_per_step"
_TIME = "kernel.time_us"
_SHARE = "share.family"
_DEVICE = "device.time_us"
#: metrics whose count does not move when a family is renamed: never touched here
_UNMOVED = frozenset({"kernel.total_calls_per_step", "optype.calls_per_step"})
_UNKNOWN = (None, "", "n/a", "N/A")
_NOT_RECORDED = "not recorded by the capture"
#: config facets that must agree for two fingerprints' families to be the same kind of thing
_SAME_FAMILIES = ("family_suffix", "world_size", "ranks")


@dataclass(frozen=True)
class Rename:
    """A family gone from the baseline (``old``) that is the same kernel as a family new in the
    candidate (``new``). ``calls_per_step`` (calls) and ``time_base_us`` / ``time_cand_us``
    (ΣDuration per step, us; the estimate from the share where the fingerprint does not record
    the family's time) are those of the first gated view checked (``rank0`` by default)."""
    old: str
    new: str
    calls_per_step: float
    time_base_us: float
    time_cand_us: float


class _Side:
    """One fingerprint's per-family figures: {(metric, family, view): value} for calls, time and
    share, the device ΣDuration per view, the family view's Type / core per family and the
    families with calls."""

    def __init__(self, fp: Fingerprint):
        self.values: dict = {}
        self.device: dict = {}
        self.present: set = set()
        for m in fp.metrics.values():
            labels = m.labels or {}
            if m.name in (_CALLS, _TIME, _SHARE) and "family" in labels:
                self.values[(m.name, labels["family"], labels.get("view"))] = m.value
                if m.name == _CALLS and (m.value or 0) > 0:
                    self.present.add(labels["family"])
            elif m.name == _DEVICE and labels.get("caliber") == terms.SUM_DURATION:
                self.device[labels.get("view")] = m.value
        ops = (fp.detail or {}).get("operators") or {}
        self.kind = {}
        # a capture that records no Type / core at all (profiler Level0) leaves them out of the
        # match on both sides alike; an N/A on one row of a capture that records them is unknown
        no_type, no_core = fp.config.get("type_available") is False, fp.config.get("core_available") is False
        for f in ops.get("families") or ():
            if isinstance(f, dict) and "family" in f:
                t, core = f.get("op_type"), f.get("core_type")
                t = _NOT_RECORDED if t in _UNKNOWN and no_type else t
                core = _NOT_RECORDED if core in _UNKNOWN and no_core else core
                if t not in _UNKNOWN and core not in _UNKNOWN:
                    self.kind[f["family"]] = (t, core)

    def calls(self, fam: str, view: str):
        return self.values.get((_CALLS, fam, view))

    def time(self, fam: str, view: str):
        return self.values.get((_TIME, fam, view))

    def estimate(self, fam: str, view: str):
        """share x device ΣDuration per step (us), None where either is not recorded."""
        share, dev = self.values.get((_SHARE, fam, view)), self.device.get(view)
        if share is None or dev is None:
            return None
        return float(share) * float(dev)


def _within_noise(t_old: float, t_new: float) -> bool:
    if t_old <= 0 or t_new <= 0:
        return t_old <= 0 and t_new <= 0
    return abs(t_new / t_old - 1.0) <= RENAME_TIME_NOISE + 1e-12


def _match(b: _Side, c: _Side, old: str, new: str, views) -> tuple | None:
    """``(calls, T_old, T_new)`` of the first view checked when ``old`` (baseline) and ``new``
    (candidate) agree in every view present, else None."""
    first = None
    for v in views:
        nb, nc = b.calls(old, v), c.calls(new, v)
        if nb is None and nc is None:
            continue                      # the view is not recorded on either side
        nb, nc = float(nb or 0.0), float(nc or 0.0)   # an absent count is 0 calls
        if nb != nc:
            return None
        tb, tc = b.time(old, v), c.time(new, v)
        if tb is None or tc is None:      # outside a side's Top-N + slack: both sides estimated alike
            tb, tc = b.estimate(old, v), c.estimate(new, v)
            if tb is None or tc is None:
                return None
        tb, tc = float(tb), float(tc)
        if not _within_noise(tb, tc):
            return None
        if first is None:
            first = (nb, tb, tc)
    return first


def find_renames(base: Fingerprint, cand: Fingerprint, views) -> list[Rename]:
    """The renamed families between ``base`` and ``cand`` (module docstring: equal calls per
    step, same Type and core, ΣDuration per step within :data:`RENAME_TIME_NOISE`, in every view
    of ``views`` present; one to one), sorted by the old name.

    Args:
        views: the gated views, e.g. ``policy.gate_views`` (``("rank0", "p50")``).
    """
    views = tuple(views)
    if any(base.config.get(f) != cand.config.get(f) for f in _SAME_FAMILIES):
        return []
    b, c = _Side(base), _Side(cand)
    gone, new = sorted(b.present - c.present), sorted(c.present - b.present)
    if not gone or not new:
        return []

    def bucket(side: _Side, fam: str):
        kind = side.kind.get(fam)
        if kind is None:
            return None                   # Type or core unknown: never "the same"
        return kind + tuple(float(side.calls(fam, v) or 0.0) for v in views)

    by_key: dict = {}
    for fam in new:
        key = bucket(c, fam)
        if key is not None:
            by_key.setdefault(key, []).append(fam)
    found: dict = {}                      # (old, new) -> (calls, T_old, T_new)
    for old in gone:
        key = bucket(b, old)
        for fam in by_key.get(key, ()) if key is not None else ():
            got = _match(b, c, old, fam, views)
            if got is not None:
                found[(old, fam)] = got
    olds: dict = {}
    news: dict = {}
    for old, fam in found:
        olds[old] = olds.get(old, 0) + 1
        news[fam] = news.get(fam, 0) + 1
    return [Rename(old, fam, *found[(old, fam)]) for old, fam in sorted(found)
            if olds[old] == 1 and news[fam] == 1]


def _num(v: float) -> str:
    return f"{v:,.3f}"


def rename_text(r: Rename) -> str:
    """``renamed: OLD -> NEW (same calls, Type, core; ΣDuration a -> b us/step)``."""
    return (f"renamed: {r.old} -> {r.new} (same calls, Type, core; ΣDuration {_num(r.time_base_us)} -> "
            f"{_num(r.time_cand_us)} us/step)")


def apply_renames(comparisons: list[Comparison], renames) -> list[Comparison]:
    """The comparisons with renamed families taken out of the gate, in the same order.

    * Every comparison whose ``labels["family"]`` is one side of a pair (calls per step,
      ΣDuration per step, share, MFU, pipe figures, their rank skew, ...) becomes ``gated=False``,
      ``fails=False``, verdict ``unchanged``, its reason :func:`rename_text` followed by what was
      not judged (for one that was ``incomparable``, e.g. a ΣDuration recorded under one name
      only, also why it was not compared).
    * A ``kernel.topn`` comparison whose baseline set, with each renamed family replaced by its
      new name, is the candidate set becomes ``unchanged`` and not failing (it stays gated: the
      set is judged, and is the same).
    * ``kernel.total_calls_per_step`` / ``optype.calls_per_step`` carry no family and are left as
      they are: a rename does not move their counts.
    * Layer classes are named by a hash of the families in each layer, so a renamed family inside a
      repeated layer makes its class gone and another new. Within one pass and view, classes gone and
      classes new whose counts are the same multiset are those layers renamed
      (:func:`_renamed_layer_classes`): informational, like the families.
    """
    renames = list(renames or ())
    if not renames:
        return list(comparisons)
    by_family = {}
    for r in renames:
        by_family[r.old] = r
        by_family[r.new] = r
    to_new = {r.old: r.new for r in renames}
    classes = _renamed_layer_classes(comparisons)
    out = []
    for c in comparisons:
        fam = (c.labels or {}).get("family")
        r = by_family.get(fam) if fam is not None and c.name not in _UNMOVED else None
        if r is not None:
            side = "gone from the baseline" if fam == r.old else "new in the candidate"
            was = f" (before pairing not compared: {c.reason_tail()})" if c.verdict == terms.INCOMPARABLE else ""
            out.append(replace(c, verdict=terms.UNCHANGED, gated=False, fails=False,
                               reason=f"{rename_text(r)}: {c.subject_text()}, {side} under that name, "
                                      f"not judged as a new or gone family{was}"))
        elif c.key in classes and c.verdict != terms.UNCHANGED:   # idempotent: already paired
            names = ", ".join(f"{r.old} -> {r.new}" for r in renames)
            out.append(replace(c, verdict=terms.UNCHANGED, gated=False, fails=False,
                               reason=f"{c.subject_text()}: {c.baseline or 0:g} -> {c.candidate or 0:g}, a layer class "
                                      f"renamed with its kernel families ({names}): as many layers of a renamed "
                                      f"class are new as of the old one are gone"))
        elif c.name == "kernel.topn" and c.verdict != terms.INCOMPARABLE and _topn_explained(c, to_new):
            pairs = ", ".join(f"{o} -> {to_new[o]}" for o in sorted(set(c.baseline) & set(to_new)))
            out.append(replace(c, verdict=terms.UNCHANGED, fails=False,
                               reason=f"{c.subject_text()}: unchanged once renamed families are matched ({pairs})"))
        else:
            out.append(c)
    return out


def _renamed_layer_classes(comparisons) -> set:
    """Keys of ``layer.class_count`` comparisons that are layer classes renamed with their families:
    per (pass, view), the classes only the baseline has and those only the candidate has, when both
    groups hold the same multiset of counts (a renamed family changes the class hash of every layer
    it is in, not how many layers there are)."""
    groups: dict = {}
    for c in comparisons:
        if c.name != "layer.class_count" or c.delta is None:
            continue
        b, k = float(c.baseline or 0.0), float(c.candidate or 0.0)
        if (b == 0) == (k == 0):
            continue
        g = groups.setdefault((c.labels.get("pass"), c.labels.get("view")), {"gone": [], "new": []})
        g["new" if b == 0 else "gone"].append((k if b == 0 else b, c.key))
    keys = set()
    for g in groups.values():
        if g["gone"] and sorted(n for n, _ in g["gone"]) == sorted(n for n, _ in g["new"]):
            keys.update(k for _, k in g["gone"] + g["new"])
    return keys


def _topn_explained(c: Comparison, to_new: dict) -> bool:
    """The Top-N sets differ, and only by renamed families: the baseline set with each old name
    replaced by its new one is the candidate set."""
    if not isinstance(c.baseline, (list, tuple, set)) or not isinstance(c.candidate, (list, tuple, set)):
        return False
    b, cand = set(c.baseline), set(c.candidate)
    return b != cand and {to_new.get(f, f) for f in b} == cand
