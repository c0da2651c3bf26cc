"""Causes, not symptoms: the changes that explain one check's gated findings, ranked by what they
did to the step.

The step is a sum of parts (:mod:`perfgate.compare.parts`)::

    Δ step time = Δ Computing + Δ exposed communication + Δ idle           (step_trace_time.csv)
    Δ Computing = (s − 1) · Computing_b  +  Σ_f E_f  +  other compute        (s: device scale)

with ``E_f = T_c(f) − s · T_b(f)`` a compute family's ΣDuration per step beyond the device's
speed and *other compute* the rest (overlap between streams: Computing is a busy union, the
families ΣDuration). Exposed communication and idle time count only their excess beyond the range
the device explains (:func:`perfgate.compare.parts.range_of`); the rest of their change is the
device's, with ``(s − 1) · Computing_b``. :func:`waterfall` writes this decomposition; its items
add up to the step-time change exactly.

A *cause* is one of

- a **kernel family** (``kernel family``; ``communication`` for an ``hcom_*`` / HCCL family) whose
  calls per step changed (new, gone, more, fewer) or whose own time per step moved beyond the
  device (its ``share.family`` judged through its excess);
- a **communication kind** whose collectives per step changed (``communication``);
- the **device** (``device``): every part moved with the device scale. Its subject is
  ``Computing`` when the compute kernels did and the collectives did not, ``device-wide`` when
  both did; it is named only when it explains a step-level change no part explains as much;
- a **step-anatomy** part (``step anatomy``): ``exposed communication`` when no communication
  family explains its excess, ``idle time`` (host-bound gaps);
- the **model structure** (layer / micro-batch / pass counts) absorbing families whose calls moved
  with it; the **capture quality** (rows left out or outside every step).

Each gated symptom (a comparison judged regression or improvement) is explained by exactly one
cause: a family's own counts and share by that family; an aggregate share (category, core type,
phase, block) by the family inside it whose excess is largest with the symptom's sign, among those
whose own part moved that way first; total and
operator-type call counts by the family whose calls moved most that way; exposed communication by
a communication family that regressed, else by itself; step time, Computing and the device busy
union by the largest contribution of the symptom's sign in the waterfall (Computing: compute
families or the device only), among the parts judged to have changed that way and the device
first; a part whose own change is within its noise or unsure only when none of those moved the
step that way. A part that got faster never explains a regression.

Each cause carries ``kind``, ``subject``, ``verdict`` (regression | improvement | new | gone |
renamed), ``fails`` (explains a failing metric), ``what`` and ``views`` (text), ``evidence``,
``explains`` (metric keys), ``step_delta_us`` (its contribution to the step-time change, us per
step, first gated view; the same figure in the waterfall), ``step_time_delta_us`` and
``step_fraction`` (their quotient). Causes are sorted failing first, then by contribution. Pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from perfgate import terms
from perfgate.compare.parts import (SCALE_AGREEMENT, excess, family_time, is_comm_family, part_of, range_of,
                                    scale_factor, share_time_runs, value_of)
from perfgate.metrics.stages import cause_view
from perfgate.model import Comparison, Fingerprint, metric_key

MOVED = (terms.REGRESSION, terms.IMPROVEMENT)
GONE = "gone"       # cause verdict: a family of the baseline that no longer runs (not a gain)
NEW = "new"         # cause verdict: a family only the candidate runs
RENAMED = "renamed"  # cause verdict: a family under another name (perfgate.compare.renames)
DEVICE = "device"
COMPUTING = "Computing"
DEVICE_WIDE = "device-wide"
EXPOSED = "exposed communication"
IDLE = "idle time"
MIN_STEP_DELTA_US = 1.0   # a step-time change below this is no change to apportion (us)

_FAMILY_SYMPTOMS = ("kernel.calls_per_step", "share.family", "mfu.ratio", "pipe.memory_bound")
_CALL_SYMPTOMS = ("kernel.total_calls_per_step", "optype.calls_per_step")
_PART_SYMPTOMS = ("share.category", "share.core_type", "share.phase", "share.phase_category", "block.share",
                  "pipe.bound_share")
_STEP_SYMPTOMS = ("step.time_us", "step.computing_us", "device.time_us")
_PART_LABELS = ("category", "core_type", "phase", "bound")
_QUALITY = {"kernel.invalid_rows": "kernel rows left out (N/A or empty Duration)",
            "kernel.unassigned_rows": "kernel rows outside every step (blank Step Id)"}
_LAYOUT = ("layer.count", "microbatch.count_per_step", "pass.count_per_step")   # the model itself changed
_STRUCTURE = ("layer.count", "microbatch.count_per_step", "pass.count_per_step", "layer.class_count",
              "block.count")
_COUNT_SYMPTOMS = ("kernel.calls_per_step", "kernel.total_calls_per_step", "optype.calls_per_step",
                   "comm.calls_per_step")


def _us(v) -> str:
    return "n/a" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}")


# ---------------------------------------------------------------- the waterfall

def _comm_ratio(base: Fingerprint, cand: Fingerprint, view) -> float:
    """The collectives' ΣDuration per step, candidate / baseline (1 when there are none)."""
    fams = {m.labels["family"] for m in base.metrics.values() if m.name == "share.family"
            and m.labels.get("view") == view and is_comm_family(m.labels.get("family"))}
    tb = sum(family_time(base, f, view) for f in fams)
    tc = sum(family_time(cand, f, view) for f in fams)
    return tc / tb if tb > 0 else 1.0


def _comm_followed(base: Fingerprint, cand: Fingerprint, view, s: float) -> bool:
    """Did the collectives' ΣDuration per step move with the device scale ``s``? Their ratio must lie
    nearer ``s`` than 1, ``s`` beyond ±:data:`SCALE_AGREEMENT` of 1, and over repeated captures the
    interval of that ratio must exclude 1 (collectives drift far more between runs than compute
    kernels: a ratio near ``s`` by chance is no evidence)."""
    if abs(s - 1.0) <= SCALE_AGREEMENT:
        return False
    keys = [k for k, m in base.metrics.items() if m.name == "share.family" and m.labels.get("view") == view
            and is_comm_family(m.labels.get("family"))]
    tb = sum(family_time(base, base.metrics[k].labels["family"], view) for k in keys)
    tc = sum(family_time(cand, base.metrics[k].labels["family"], view) for k in keys)
    if tb <= 0 or tc <= 0:
        return False
    r = tc / tb
    if abs(math.log(r / s)) >= abs(math.log(r)):
        return False
    runs = [[share_time_runs(fp, k, view) for k in keys] for fp in (base, cand)]
    if any(x is None for side in runs for x in side):
        return True   # a single capture (or runs that cannot be aligned): the point decides
    from perfgate.compare.stats import effect_ci
    xb, xc = ([sum(v) for v in zip(*side)] for side in runs)
    if min(xb) <= 0 or min(xc) <= 0:
        return True
    lo, hi = effect_ci(xb, xc, "rel", confidence=0.98)   # one-sided 99 %: the subject needs strong evidence
    return lo > 0 if s > 1 else hi < 0


def family_excess(base: Fingerprint, cand: Fingerprint, view, s: float) -> dict:
    """``{family: T_c − s·T_b}`` (us per step, ΣDuration) of every family either side runs in ``view``;
    a new family's whole time, a gone family's whole time negative."""
    fams = {m.labels["family"] for fp in (base, cand) for m in fp.metrics.values()
            if m.name == "share.family" and m.labels.get("view") == view}
    return {f: family_time(cand, f, view) - s * family_time(base, f, view) for f in fams}


def waterfall(base: Fingerprint, cand: Fingerprint, view, scale=None, top: int = 5) -> dict | None:
    """The step-time change of ``view`` as contributions that add up to it (module doc), or None
    when a side lacks step time, Computing, exposed communication or idle time
    (``step.time_us`` / ``step.computing_us`` / ``step.comm_not_overlapped_us`` / ``step.free_us``).

    Returns ``{"view", "scale", "comm_followed", "step_base_us", "step_cand_us", "step_delta_us",
    "items": [{"part", "kind", "us"}]}``: ``kind`` is device | family | communication | compute |
    anatomy; the ``top`` compute families by |excess| are items of their own, the rest join
    "other compute"."""
    def fig(fp, name):
        return value_of(fp, metric_key(name, view=view))
    names = ("step.time_us", "step.computing_us", "step.comm_not_overlapped_us", "step.free_us")
    b = [fig(base, n) for n in names]
    c = [fig(cand, n) for n in names]
    if None in b or None in c:
        return None
    scale = scale or scale_factor(base, cand, view)
    s = scale.value
    followed = _comm_followed(base, cand, view, s)
    (sb, cb, xb, ib), (sc, cc, xc, ic) = b, c
    # exposed communication and idle time beyond what the device explains (parts.range_of): the rest
    # of their change is the device's, like Computing's (s - 1) * Computing_b
    exposed = excess(xc, *range_of("step.exposed_comm_ratio", xb, s, comm=fig(base, "step.comm_us"),
                                   overlap=fig(base, "step.overlapped_us")))
    busy = value_of(base, metric_key("device.time_us", caliber=terms.BUSY_UNION, view=view))
    idle = excess(ic, *range_of("step.underfeed_ratio", ib, s, busy=busy))
    device = (s - 1.0) * cb + (xc - xb - exposed) + (ic - ib - idle)
    ex = {f: e for f, e in family_excess(base, cand, view, s).items() if not is_comm_family(f)}
    ranked = sorted((f for f in ex if abs(ex[f]) >= MIN_STEP_DELTA_US), key=lambda f: (-abs(ex[f]), f))[:top]
    items = []
    if abs(device) >= MIN_STEP_DELTA_US:   # labelled by what it is: the device's speed, not one part
        items.append({"part": f"device ×{s:.3f}", "kind": DEVICE, "us": device})
    items += [{"part": f, "kind": "family", "us": ex[f]} for f in ranked]
    other = (cc - cb) - (s - 1.0) * cb - sum(ex[f] for f in ranked)
    items.append({"part": "other compute (smaller families, overlap between streams)", "kind": "compute",
                  "us": other})
    items.append({"part": EXPOSED, "kind": "anatomy", "us": exposed})
    items.append({"part": IDLE, "kind": "anatomy", "us": idle})
    # step = Computing + exposed communication + idle (msprof); a capture's own rounding is "other"
    rest = (sc - sb) - sum(i["us"] for i in items)
    items[-3]["us"] += rest
    return {"view": view, "scale": s, "comm_followed": followed, "step_base_us": sb, "step_cand_us": sc,
            "step_delta_us": sc - sb, "items": items}


# ---------------------------------------------------------------- causes

class _Book:
    """The causes found so far and which one explains each symptom."""

    def __init__(self):
        self.causes: dict[tuple, dict] = {}
        self.owner: dict[str, dict] = {}

    def cause(self, kind: str, subject: str) -> dict:
        k = (kind, subject)   # one cause per thing that changed, whatever the signs of its symptoms
        if k not in self.causes:
            self.causes[k] = {"kind": kind, "subject": subject, "verdict": "", "fails": False, "what": "",
                              "views": {}, "evidence": [], "explains": [], "step_delta_us": None,
                              "step_time_delta_us": None, "step_fraction": None}
        return self.causes[k]

    def family(self, fam: str) -> dict:
        return self.cause("communication" if is_comm_family(fam) else "kernel family", fam)

    def explain(self, x: dict, c: Comparison) -> None:
        prev = self.owner.get(c.key)
        if prev is not None and prev is not x:
            prev["explains"].remove(c.key)
        if c.key not in x["explains"]:
            x["explains"].append(c.key)
        self.owner[c.key] = x


def _calls(fp, fam, view) -> float:
    return value_of(fp, metric_key("kernel.calls_per_step", family=fam, view=view)) or 0.0


def _family_parts(base: Fingerprint, cand: Fingerprint) -> dict:
    """{family: {category, core_type, phase, bound}} from the family view (``detail.operators
    .families``) of both sides; families below its share cut are absent."""
    out: dict = {}
    for fp in (base, cand):
        for f in ((fp.detail or {}).get("operators") or {}).get("families") or []:
            if f.get("family"):
                out.setdefault(f["family"], {k: f[k] for k in _PART_LABELS if f.get(k) is not None})
    return out


def _in_part(fam: str, c: Comparison, parts: dict) -> bool:
    """Does family ``fam`` belong to the part of share ``c``? From the family view; a family the
    view does not list belongs to the communication part when it is a communication family."""
    known = _comm_core(parts.get(fam))
    want = _comm_core({k: v for k, v in c.labels.items() if k in _PART_LABELS})
    if known is None or not any(k in known for k in want):
        comm_part = c.labels.get("category") == "Comm" or c.labels.get("core_type") in ("HCCL", terms.COMM_CORE)
        return bool(want) and is_comm_family(fam) == comm_part and comm_part
    return all(known.get(k) == v for k, v in want.items() if k in known)


def _comm_core(labels: dict | None) -> dict | None:
    """``labels`` with a communication core type named one way: the family view writes HCCL where
    the core-type share says COMMUNICATION (one set of collectives, two spellings across exports)."""
    if labels and labels.get("core_type") in ("HCCL", terms.COMM_CORE):
        return dict(labels, core_type=terms.COMM_CORE)
    return labels


def _presence(base, cand, fam, view) -> str | None:
    cb, cc = _calls(base, fam, view), _calls(cand, fam, view)
    return GONE if cb > 0 and cc == 0 else NEW if cb == 0 and cc > 0 else None


def _sign(c: Comparison) -> int:
    return 1 if c.verdict == terms.REGRESSION else -1


@dataclass(frozen=True)
class _Judged:
    """What one check's causes are found from: its gated ``symptoms`` (metrics judged regression or
    improvement), every comparison ``by_key``, both fingerprints, the ``views`` explained (the
    first gated view first), and per view the device scale, the :func:`waterfall` (None without
    step_trace_time.csv figures) and each family's ΣDuration excess beyond the device
    (:func:`family_excess`); ``parts``: each family's category / core type / phase / bound."""
    symptoms: list
    by_key: dict
    base: Fingerprint
    cand: Fingerprint
    views: list
    scales: dict
    falls: dict
    excess: dict
    parts: dict

    @property
    def first(self):
        return self.views[0]

    def ex(self, fam: str, view) -> float | None:
        """Family ``fam``'s ΣDuration per step beyond the device in ``view`` (us); in a view not
        explained, its plain change."""
        return self.excess.get(view, {}).get(fam) if view in self.excess else \
            family_time(self.cand, fam, view) - family_time(self.base, fam, view)

    def contribution(self, x: dict, view) -> float | None:
        """What cause ``x`` did to the step in ``view`` (us per step, the waterfall's figure)."""
        wf = self.falls.get(view)
        if x["kind"] == DEVICE:
            return next((i["us"] for i in wf["items"] if i["kind"] == DEVICE), 0.0) if wf else None
        if x["kind"] == "step anatomy":
            return next((i["us"] for i in wf["items"] if i["part"] == x["subject"]), None) if wf else None
        if x["kind"] == "model structure":
            return sum(self.ex(f, view) or 0.0 for f in x.get("_families", ())) or None
        if x["kind"] == "communication" and is_comm_family(x["subject"]):
            own = self.ex(x["subject"], view) or 0.0
            if not wf:
                return own
            # the exposed communication item, shared among the collectives that grew by their growth
            exposed = next(i["us"] for i in wf["items"] if i["part"] == EXPOSED)
            grown = sum(max(0.0, e) for f, e in self.excess.get(view, {}).items() if is_comm_family(f))
            return exposed * own / grown if grown > 0 and own > 0 and exposed > 0 else 0.0
        if x["kind"] in ("kernel family",):
            return self.ex(x["subject"], view)
        return None

    def grown_comm(self, view, sign) -> list:
        """Communication families whose own time moved beyond what the device explains, and beyond
        their noise band, the symptom's way (their ``share.family`` part): what exposed communication
        is made of, named before exposed communication itself (lost overlap)."""
        out = []
        for f in self.excess.get(view, {}):
            p = part_of(self.by_key.get(metric_key("share.family", family=f, view=view))) if is_comm_family(f) else None
            if p is not None and p["excess_us"] * sign > p["band_us"]:
                out.append(f)
        return out

    def decided(self, x: dict, view, sign) -> bool:
        """Whether cause ``x`` is a change judged on its own in ``view`` the symptom's way: a family
        or structure whose own symptoms moved that way, a part (a family's share, exposed
        communication, idle time) judged a regression / improvement, or the device."""
        if x["kind"] == DEVICE:
            return True
        by_key = self.by_key
        want = terms.REGRESSION if sign > 0 else terms.IMPROVEMENT
        if x["kind"] == "step anatomy":
            key = metric_key("step.exposed_comm_ratio" if x["subject"] == EXPOSED else "step.underfeed_ratio", view=view)
            return getattr(by_key.get(key), "verdict", None) == want
        if any(by_key[k].verdict == want for k in x["explains"] if by_key[k].labels.get("view") in (view, None)
               and by_key[k].name not in _STEP_SYMPTOMS):
            return True
        share = by_key.get(metric_key("share.family", family=x["subject"], view=view))
        return getattr(share, "verdict", None) == want


def _judged(comparisons, base: Fingerprint, cand: Fingerprint, gate_views, falls: dict | None) -> _Judged:
    """The symptoms of ``comparisons`` and what they are explained from (:class:`_Judged`): the
    gated views holding a symptom (else the first gated view), their device scales, waterfalls
    (``falls`` reused where given) and family excesses."""
    symptoms = [c for c in comparisons if c.gated and c.verdict in MOVED]
    views = [v for v in gate_views if any(c.labels.get("view") == v for c in symptoms)] or list(gate_views[:1]) or [None]
    scales = {v: scale_factor(base, cand, v) for v in views}
    falls = {v: (falls or {})[v] if v in (falls or {}) else waterfall(base, cand, v, scales[v]) for v in views}
    return _Judged(symptoms=symptoms, by_key={c.key: c for c in comparisons}, base=base, cand=cand, views=views,
                   scales=scales, falls=falls,
                   excess={v: family_excess(base, cand, v, scales[v].value) for v in views},
                   parts=_family_parts(base, cand))


def find_causes(comparisons, base: Fingerprint, cand: Fingerprint, gate_views=(terms.VIEW_RANK0, terms.VIEW_P50),
                falls: dict | None = None) -> tuple[list[dict], list[str]]:
    """Group gated findings into causes (module doc). ``falls`` ({view: :func:`waterfall` or None})
    reuses waterfalls the caller already made; the others are made here.

    Returns:
        ``(causes, unexplained)``: the cause dicts described in the module doc, failing first, then
        by contribution to the step-time change; ``unexplained``: keys of gated moved metrics no
        cause explains.
    """
    from perfgate.compare.renames import find_renames
    j = _judged(comparisons, base, cand, gate_views, falls)
    book = _Book()
    # in this order: the model structure takes over the symptoms of the families it absorbs, and the
    # step-level symptoms are weighed against every cause named before them
    _explain_own_symptoms(j, book)
    _explain_structure(book, j.symptoms, base, cand, j.first, j.scales[j.first].value if j.first in j.scales else 1.0)
    _explain_anatomy(j, book)
    _explain_step_symptoms(j, book)
    return _finish(j, book, find_renames(base, cand, j.views))


def _explain_own_symptoms(j: _Judged, book: _Book) -> None:
    """Symptoms that name their cause or point into a part: a family's own metrics, a communication
    kind's calls, the Top-N list, an aggregate share, total / operator-type call counts and the
    capture-quality counts."""
    for c in j.symptoms:
        view = c.labels.get("view")
        fam = c.labels.get("family")
        if c.name in _FAMILY_SYMPTOMS and fam:
            book.explain(book.family(fam), c)
        elif c.name == "comm.calls_per_step":
            book.explain(book.cause("communication", c.labels.get("kind", "?")), c)
        elif c.name == "kernel.topn":
            moved = sorted(set(c.candidate or []) - set(c.baseline or [])) or \
                sorted(set(c.baseline or []) - set(c.candidate or []))
            if moved:
                book.explain(book.family(max(moved, key=lambda f: abs(j.ex(f, view) or 0.0))), c)
        elif c.name in _PART_SYMPTOMS:
            fam = _part_family(j, c)
            if fam is not None:
                book.explain(book.family(fam), c)
        elif c.name in _CALL_SYMPTOMS:
            fam = _call_family(j, c)
            if fam is not None:
                book.explain(book.family(fam), c)
        elif c.name in _QUALITY:
            book.explain(book.cause("capture quality", _QUALITY[c.name]), c)


def _part_family(j: _Judged, c: Comparison) -> str | None:
    """The family inside aggregate share ``c``'s part whose excess is largest with the symptom's
    sign, among those whose own part was judged to move that way first; None when none moved so."""
    view, sign = c.labels.get("view"), _sign(c)
    # a block kind's families are not listed per kernel family: any compute family may be in a
    # layer block, any family in the unstructured rest
    if c.name == "block.share":
        member = (lambda f: True) if c.labels.get("kind") == "unstructured" else \
            (lambda f: not is_comm_family(f))
    else:
        member = (lambda f: _in_part(f, c, j.parts))
    mine = [f for f in j.excess.get(view, {}) if member(f) and (j.ex(f, view) or 0.0) * sign > 0]
    # families whose own part was judged to move that way first (a family within its noise
    # explains a part only when none did)
    judged = [f for f in mine if getattr(j.by_key.get(metric_key("share.family", family=f, view=view)),
                                         "verdict", None) == c.verdict]
    mine = judged or mine
    return max(mine, key=lambda f: abs(j.ex(f, view))) if mine else None


def _call_family(j: _Judged, c: Comparison) -> str | None:
    """The family whose calls per step moved most the way of call-count symptom ``c`` (total, or of
    ``c``'s operator type); None when none moved so."""
    view, sign = c.labels.get("view"), _sign(c)
    base, cand = j.base, j.cand
    fams = {m.labels["family"] for fp in (base, cand) for m in fp.metrics.values()
            if m.name == "kernel.calls_per_step" and m.labels.get("view") == view}
    if c.name == "optype.calls_per_step":
        ops = {f: r.get("op_type") for fp in (base, cand)
               for r in ((fp.detail or {}).get("operators") or {}).get("families") or () if (f := r.get("family"))}
        fams = {f for f in fams if ops.get(f) in (None, c.labels.get("type"))}
    moved = [(_calls(cand, f, view) - _calls(base, f, view), f) for f in fams]
    moved = [(d, f) for d, f in moved if d * sign > 0]
    return max(moved, key=lambda x: (abs(x[0]), x[1]))[1] if moved else None


def _explain_anatomy(j: _Judged, book: _Book) -> None:
    """Exposed communication: a communication family that grew the symptom's way explains it, else
    exposed communication itself (lost overlap); idle time (host-bound gaps) explains itself."""
    for c in j.symptoms:
        if c.name == "step.exposed_comm_ratio":
            comm = j.grown_comm(c.labels.get("view"), _sign(c))
            book.explain(book.family(max(comm, key=lambda f: abs(j.ex(f, c.labels.get("view")))))
                         if comm else book.cause("step anatomy", EXPOSED), c)
        elif c.name == "step.underfeed_ratio":
            book.explain(book.cause("step anatomy", IDLE), c)


def _explain_step_symptoms(j: _Judged, book: _Book) -> None:
    """Step time, Computing and the device busy union: the largest contribution of the symptom's
    sign in the waterfall (Computing: compute families or the device only), among the parts judged
    to have changed that way and the device first."""
    for c in j.symptoms:
        if c.name not in _STEP_SYMPTOMS:
            continue
        view, sign = c.labels.get("view"), _sign(c)
        wf = j.falls.get(view)
        subject = DEVICE_WIDE if wf and wf["comm_followed"] else COMPUTING
        scored = _scored_step_causes(j, book, c, subject)
        if scored:
            _, best, _ = max(scored, key=lambda t: t[0])
            book.explain(book.cause(*best) if isinstance(best, tuple) else best, c)
            continue
        # nothing named moved the step that way (no step_trace_time.csv for a waterfall, or only
        # "other compute" did): the compute family beyond the device that moved most that way, else
        # the device as a whole
        moved = [f for f in j.excess.get(view, {}) if not is_comm_family(f) and (j.ex(f, view) or 0.0) * sign > 0]
        book.explain(book.family(max(moved, key=lambda f: abs(j.ex(f, view)))) if moved else
                     book.cause(DEVICE, subject), c)


def _scored_step_causes(j: _Judged, book: _Book, c: Comparison, subject: str) -> list:
    """``(contribution × sign, cause or (kind, subject), decided)`` of every cause that could explain
    step-level symptom ``c`` and moved the step its way: the causes found so far, the device
    (``subject``: Computing or device-wide) and, unless ``c`` is Computing, the communication
    families that grew and the step-anatomy parts. Those judged to have changed (or the device)
    only, when any is."""
    view, sign = c.labels.get("view"), _sign(c)
    compute_only = c.name == "step.computing_us"
    pool = [x for x in book.causes.values()
            if x["kind"] in ("kernel family", "model structure") or
            (not compute_only and x["kind"] in ("communication", "step anatomy"))]
    extra = [(DEVICE, subject)]
    if not compute_only:
        extra += [("communication", f) for f in j.grown_comm(view, sign)
                  if ("communication", f) not in book.causes]
        extra += [("step anatomy", EXPOSED), ("step anatomy", IDLE)]
        if any(k == "communication" for k, _ in extra) or \
                any(x["kind"] == "communication" and (j.contribution(x, view) or 0.0) * sign > 0 for x in pool):
            extra.remove(("step anatomy", EXPOSED))   # the communication families own it
    scored = [((j.contribution(x, view) or 0.0) * sign, x, j.decided(x, view, sign)) for x in pool]
    for kind, subj in extra:
        probe = {"kind": kind, "subject": subj, "_families": (), "explains": []}
        scored.append(((j.contribution(probe, view) or 0.0) * sign, (kind, subj), j.decided(probe, view, sign)))
    scored = [t for t in scored if t[0] > 0]
    # a part judged to have changed (or the device) explains it before a part whose own change is
    # within its noise or unsure; only when none moved the step that way does the largest move do
    return [t for t in scored if t[2]] or scored


def _finish(j: _Judged, book: _Book, renames) -> tuple[list[dict], list[str]]:
    """The causes that explain something, each with its verdict, evidence and per-view text and
    contribution, plus the renamed families; sorted failing first, then by contribution. Also the
    keys of symptoms no cause explains."""
    by_key, base, cand, first = j.by_key, j.base, j.cand, j.first
    explained = {k for x in book.causes.values() for k in x["explains"]}
    unexplained = [c.key for c in j.symptoms if c.key not in explained]
    for x in book.causes.values():
        _set_verdict(x, j)
    out = [x for x in book.causes.values() if x["explains"]]
    out += [_renamed(r) for r in renames]
    for x in out:
        own = cause_view(x["explains"], j.views, first)   # a cause of one pipeline stage: that stage's view
        for view in j.views:
            st = by_key.get(metric_key("step.time_us", view=view))
            st_delta = st.delta if st is not None and st.delta is not None else None
            d_us = j.contribution(x, view) if x["verdict"] != RENAMED else None
            text = x["what"] if x["verdict"] == RENAMED else _what(x, base, cand, view, d_us, by_key)
            x["views"][str(view)] = text
            if view == own:
                x["what"] = text
                x["step_delta_us"] = d_us
                # the device's and the anatomy parts' figures are step_trace_time.csv's (Computing and
                # exposed communication are busy unions, idle is elapsed); families' are ΣDuration
                x["step_delta_caliber"] = ("busy union" if x["kind"] == DEVICE or x["subject"] == EXPOSED
                                           else "elapsed" if x["subject"] == IDLE else None)
                x["step_time_delta_us"] = st_delta
                if d_us is not None and st_delta and abs(st_delta) >= MIN_STEP_DELTA_US:
                    x["step_fraction"] = d_us / st_delta
    out.sort(key=lambda x: (not x["fails"], x["verdict"] != terms.REGRESSION, -(x["step_delta_us"] or 0.0)
                            if x["verdict"] == terms.REGRESSION else -abs(x["step_delta_us"] or 0.0),
                            -len(x["explains"]), x["subject"]))
    return [{k: v for k, v in x.items() if not k.startswith("_")} for x in out], unexplained


def _set_verdict(x: dict, j: _Judged) -> None:
    """Cause ``x``'s ``fails``, ``evidence`` (up to four of its symptoms') and ``verdict``: regression
    when it explains a failing metric, else new / gone for a family only one side runs, else
    regression when any of its symptoms is one, else improvement."""
    mine = [j.by_key[k] for k in x["explains"]]
    x["fails"] = any(c.fails for c in mine)
    for c in mine:
        if c.evidence and len(x["evidence"]) < 4 and c.evidence not in x["evidence"]:
            x["evidence"].append(c.evidence)
    presence = (_presence(j.base, j.cand, x["subject"], j.first)
                if x["kind"] in ("kernel family", "communication") else None)
    if x["fails"]:
        x["verdict"] = terms.REGRESSION
    elif presence:
        x["verdict"] = presence
    elif any(c.verdict == terms.REGRESSION for c in mine):
        x["verdict"] = terms.REGRESSION
    else:
        x["verdict"] = terms.IMPROVEMENT


def _renamed(r) -> dict:
    """The cause of a family found under another name (:func:`perfgate.compare.renames.find_renames`):
    it explains no symptom and fails nothing."""
    return {"kind": "communication" if is_comm_family(r.new) else "kernel family", "subject": r.new,
            "verdict": RENAMED, "renamed_from": r.old, "fails": False,
            "what": (f"renamed from {r.old}: same calls ({r.calls_per_step:g}/step), Type and core; ΣDuration "
                     f"{_us(r.time_base_us)} -> {_us(r.time_cand_us)} us/step"),
            "views": {}, "evidence": [], "explains": [], "step_delta_us": None,
            "step_time_delta_us": None, "step_fraction": None}


def _what(x: dict, base, cand, view, d_us, by_key) -> str:
    """One line of what cause ``x`` changed in ``view``."""
    kind, subj = x["kind"], x["subject"]
    if kind == DEVICE:
        sc = scale_factor(base, cand, view)
        comp = by_key.get(metric_key("step.computing_us", view=view))
        head = (f"every compute kernel ×{sc.value:.3f} (the device scale: {sc.agreeing} of {len(sc.ratios)} compute "
                f"families within ±{SCALE_AGREEMENT:.0%} of it)"
                + ("; the collectives moved with it" if subj == DEVICE_WIDE else
                   f"; the collectives ×{_comm_ratio(base, cand, view):.3f}, not shown to follow it"))
        if comp is not None and comp.delta is not None:
            head += f"; Computing {_us(comp.baseline)} -> {_us(comp.candidate)} us/step"
        return head + (f"; {d_us:+,.0f} us/step of the step" if d_us is not None else "")
    if kind == "step anatomy":
        name = "step.comm_not_overlapped_us" if subj == EXPOSED else "step.free_us"
        b, c = value_of(base, metric_key(name, view=view)), value_of(cand, metric_key(name, view=view))
        cal = "busy union" if subj == EXPOSED else "elapsed"
        return (f"{subj} {_us(b)} -> {_us(c)} us/step ("
                + (f"{d_us:+,.0f} us/step beyond the device, " if d_us is not None else "") + f"{cal})")
    if kind == "capture quality":
        q = by_key[x["explains"][0]]
        return f"{q.baseline:g} -> {q.candidate:g} row(s)" + (f" ({q.evidence})" if q.evidence else "")
    if kind == "model structure":
        return x["what"] + (f"; ΣDuration of its families {d_us:+,.0f} us/step" if d_us is not None else "")
    if kind == "communication" and not is_comm_family(subj):
        cb = value_of(base, metric_key("comm.calls_per_step", kind=subj, view=view))
        cc = value_of(cand, metric_key("comm.calls_per_step", kind=subj, view=view))
        return f"{subj} collectives {_us(cb)} -> {_us(cc)} per step"
    cb, cc = _calls(base, subj, view), _calls(cand, subj, view)
    tb, tc = family_time(base, subj, view), family_time(cand, subj, view)
    presence = _presence(base, cand, subj, view)
    if presence == GONE:
        return f"gone: no longer runs in the candidate ({cb:g} calls/step, ΣDuration {_us(tb)} us/step in the baseline)"
    if presence == NEW:
        return f"new: runs only in the candidate ({cc:g} calls/step, ΣDuration {_us(tc)} us/step)"
    bits = []
    if cb != cc:
        bits.append(f"calls {cb:g} -> {cc:g}/step{_between_ranks(base, cand, subj, view, cb, cc)}")
    bits.append(f"ΣDuration {_us(tb)} -> {_us(tc)} us/step" + (f" ({tc / tb - 1:+.0%})" if tb else ""))
    share = by_key.get(metric_key("share.family", family=subj, view=view))
    p = part_of(share)
    if p is not None:
        bits.append(f"excess {p['excess_us']:+,.0f} us/step beyond the device ×{p['scale']:.3f} "
                    f"(bound {p['bound_us']:,.0f})")
    return "; ".join(bits)


def _between_ranks(base, cand, fam: str, view, cb: float, cc: float) -> str:
    """For the p50 view of an even number of ranks, a call count that is the mean of the two
    middle ranks' counts may be no count any rank ran ("calls 12 -> 18/step" when rank 1 of 2 went
    12 -> 24): say so, with the rank0 and max views' counts (for two ranks, the other rank's,
    which is 2 × p50 − rank0). Empty when the p50 is an observed count."""
    if view != terms.VIEW_P50:
        return ""
    m = cand.metrics.get(metric_key("kernel.calls_per_step", family=fam, view=view))
    n = (m.context or {}).get("ranks") if m is not None else None
    r0 = (_calls(base, fam, terms.VIEW_RANK0), _calls(cand, fam, terms.VIEW_RANK0))
    mx = (_calls(base, fam, terms.VIEW_MAX), _calls(cand, fam, terms.VIEW_MAX))
    p50 = (cb, cc)
    fractional = not all(float(v).is_integer() for v in p50)
    observed = all(v in (a, b) for v, a, b in zip(p50, r0, mx))
    if not fractional and (not isinstance(n, int) or n % 2 or observed):
        return ""
    views = ((("rank0", r0), ("the other rank", (2 * p50[0] - r0[0], 2 * p50[1] - r0[1]))) if n == 2
             else (("rank0", r0), ("max", mx)))
    seen = [f"{name} {a:g} -> {b:g}" for name, (a, b) in views]
    claim = ", no rank's count" if fractional or n == 2 else ""
    return f" (median of {n or 'an even number of'} ranks{claim}: {'; '.join(seen)})"


def _explain_structure(book: _Book, symptoms, base, cand, view, s: float) -> None:
    """A changed model layout (layer, micro-batch or pass count) is one *model structure* cause: it
    explains the structure metrics and every call-count symptom of the same sign (a layer more adds
    calls of every family in it), and absorbs the family causes whose calls changed while their time
    per call moved with the device. When only layer classes or block counts moved, or the layout
    moved while only one or two families changed calls and at least four times as many kept theirs
    (a doubled FlashAttention, the layer anchor, cuts every layer in two), those families are the
    cause and the structure metrics their symptoms."""
    struct = sorted((c for c in symptoms if c.name in _STRUCTURE), key=lambda c: _STRUCTURE.index(c.name))
    if not struct:
        return
    fams = [x for x in book.causes.values() if x["kind"] in ("kernel family", "communication")
            and is_comm_family(x["subject"]) == (x["kind"] == "communication")
            and _calls(base, x["subject"], view) != _calls(cand, x["subject"], view)]
    if fams and (not any(c.name in _LAYOUT for c in struct) or _few_movers(base, cand, fams, view)):
        top = max(fams, key=lambda x: abs(_calls(cand, x["subject"], view) - _calls(base, x["subject"], view)))
        for c in struct:
            book.explain(top, c)
        return
    for verdict in sorted({c.verdict for c in struct}):
        mine = [c for c in struct if c.verdict == verdict]
        texts = []
        for c in mine:
            t = f"{c.subject_text().split(' [')[0]} {c.baseline:g} -> {c.candidate:g}"
            if t not in texts:
                texts.append(t)
        x = book.cause("model structure", texts[0])
        x["what"] = "; ".join(texts[1:4]) or texts[0]
        x.setdefault("_families", [])
        for c in mine:
            book.explain(x, c)
        for c in symptoms:
            if c.name in _COUNT_SYMPTOMS and c.verdict == verdict:
                book.explain(x, c)
        for k, y in list(book.causes.items()):
            if y is x or y["kind"] not in ("kernel family", "communication"):
                continue
            if _per_call_moved_with_device(base, cand, y["subject"], view, s):
                for key in list(y["explains"]):
                    book.explain(x, next(c for c in symptoms if c.key == key))
                x["_families"].append(y["subject"])
                del book.causes[k]
        if x["_families"]:
            folded = sorted(x["_families"])
            x["evidence"].insert(0, f"kernel families with more or fewer calls per step: {', '.join(folded[:8])}"
                                    + (f" (+{len(folded) - 8} more)" if len(folded) > 8 else ""))


def _few_movers(base, cand, movers: list, view) -> bool:
    """At most two families changed calls per step while at least four times as many kept them."""
    if len(movers) > 2:
        return False
    same = sum(1 for k, m in base.metrics.items() if m.name == "kernel.calls_per_step" and m.labels.get("view") == view
               and k in cand.metrics and cand.metrics[k].value == m.value)
    return same >= 4 * len(movers)


def _per_call_moved_with_device(base, cand, fam: str, view, s: float) -> bool:
    """Family ``fam``'s calls per step changed and its ΣDuration per call moved with the device scale
    ``s`` (within ±:data:`SCALE_AGREEMENT`): its own-time change is its call-count change."""
    nb, nc = _calls(base, fam, view), _calls(cand, fam, view)
    tb, tc = family_time(base, fam, view), family_time(cand, fam, view)
    if not (nb and nc and tb and tc) or nb == nc:
        return False
    return abs((tc / nc) / (tb / nb) / s - 1.0) <= SCALE_AGREEMENT
