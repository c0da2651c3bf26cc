"""Family-level comparison of two fingerprints' family views (kernel families). Pure (no I/O).

Per kernel family (the lowest rank of each side, ``Fingerprint.detail["operators"]``):
calls-per-step delta (exact), share delta in percentage points, ΣDuration ratio
(candidate / baseline, informational: single-kernel time drifts between devices),
``appeared`` / ``disappeared`` families, and *moves*: a family whose core type, op_type class
or category differs between the two sides is reported as moved (e.g. a MatMul family from
AI_CORE to MIX_AIC after a toolchain upgrade), not as removed + added; per category, a change
of the core type carrying most of its ΣDuration is a category move. The gate verdicts stay
with :mod:`perfgate.compare` (``share.family``, ``share.category``, ``kernel.calls_per_step``);
this table explains them.

*Renames* (informational): a family that disappeared while exactly one family appeared with
the same calls per step, core type and op_type class (and no other disappeared family shares
that key) is one renamed family (e.g. a kernel whose name gained a build tag the policy's
``family_volatile`` rules do not strip), reported as status ``renamed`` with ``renamed_from``,
not as disappeared + appeared.
"""
from __future__ import annotations

_MOVE_FIELDS = ("core_type", "op_class", "category")
_RENAME_KEY = ("calls_per_step", "core_type", "op_class")


def _renames(b: dict, c: dict) -> dict:
    """{new family: old family} for families gone on one side and new on the other that
    share calls per step (> 0), core type and op_type class, one to one."""
    def keyed(src, other):
        acc: dict = {}
        for fam, f in src.items():
            if fam not in other and (f.get("calls_per_step") or 0) > 0:
                acc.setdefault(tuple(f.get(k) for k in _RENAME_KEY), []).append(fam)
        return acc
    gone, new = keyed(b, c), keyed(c, b)
    return {new[k][0]: gone[k][0] for k in gone if len(gone[k]) == 1 and len(new.get(k, ())) == 1}


def _category_cores(fams: list) -> dict:
    """{category: core type with the largest ΣDuration in it}."""
    acc: dict = {}
    for f in fams:
        acc.setdefault(f["category"], {}).setdefault(f["core_type"], 0.0)
        acc[f["category"]][f["core_type"]] += f["sum_dur_us"] or 0.0
    return {c: max(sorted(d.items()), key=lambda kv: kv[1])[0] for c, d in acc.items()}


def compare_operators(base: dict | None, cand: dict | None, min_share: float = 0.01) -> dict:
    """Compare two family views.

    Args:
        base, cand: ``detail["operators"]`` of the baseline and candidate fingerprints.
        min_share: families below this share (ratio) on both sides and unchanged in calls,
            presence and placement are left out of ``families``.

    Returns:
        ``{"available": bool, "note": str | None, "families": [...], "moves": [...],
        "category_moves": [...], "renames": [...]}``. A family row: ``family``, ``status`` (same /
        appeared / disappeared / renamed, the latter with ``renamed_from``), ``calls_per_step_base`` /
        ``_cand``, ``count_delta``, ``share_base`` /
        ``share_cand`` (ratios), ``share_delta_pp``, ``dur_ratio`` (None when a side is 0),
        ``category``, and the moved fields. Sorted by |share delta|, then name.
    """
    if not base or not cand:
        side = "baseline" if not base else "candidate"
        return {"available": False, "families": [], "moves": [], "category_moves": [], "renames": [],
                "note": f"the {side} has no family view (recorded by an older perfgate or from history): "
                        f"family-level comparison skipped"}
    b = {f["family"]: f for f in base.get("families", [])}
    c = {f["family"]: f for f in cand.get("families", [])}
    rows, moves = [], []
    for fam in sorted(set(b) | set(c)):
        fb, fc = b.get(fam), c.get(fam)
        status = "same" if fb and fc else ("appeared" if fc else "disappeared")
        sb = (fb or {}).get("share") or 0.0
        sc = (fc or {}).get("share") or 0.0
        nb = (fb or {}).get("calls_per_step") or 0.0
        nc = (fc or {}).get("calls_per_step") or 0.0
        db = (fb or {}).get("sum_dur_us") or 0.0
        dc = (fc or {}).get("sum_dur_us") or 0.0
        moved = {}
        if fb and fc:
            for fld in _MOVE_FIELDS:
                if fb.get(fld) != fc.get(fld):
                    moved[fld] = (fb.get(fld), fc.get(fld))
                    moves.append({"family": fam, "field": fld, "from": fb.get(fld), "to": fc.get(fld),
                                  "share_cand": sc})
        if status == "same" and not moved and nb == nc and max(sb, sc) < min_share:
            continue
        ref = fc or fb
        rows.append({"family": fam, "status": status, "calls_per_step_base": nb, "calls_per_step_cand": nc,
                     "count_delta": nc - nb, "share_base": sb, "share_cand": sc,
                     "share_delta_pp": round((sc - sb) * 100.0, 6),
                     "dur_ratio": (dc / db) if db and dc else None,
                     "category": ref.get("category"), "core_type": ref.get("core_type"),
                     "moved": {k: list(v) for k, v in moved.items()}})
    ren = _renames(b, c)
    if ren:
        gone = set(ren.values())
        rows = [r for r in rows if r["family"] not in gone]
        for r in rows:
            if r["family"] in ren:
                old, fb = ren[r["family"]], b[ren[r["family"]]]
                nb, sb, db = fb.get("calls_per_step") or 0.0, fb.get("share") or 0.0, fb.get("sum_dur_us") or 0.0
                dc = (c[r["family"]].get("sum_dur_us") or 0.0)
                r.update(status="renamed", renamed_from=old, calls_per_step_base=nb,
                         count_delta=r["calls_per_step_cand"] - nb, share_base=sb,
                         share_delta_pp=round((r["share_cand"] - sb) * 100.0, 6),
                         dur_ratio=(dc / db) if db and dc else None)
    rows.sort(key=lambda r: (-abs(r["share_delta_pp"]), r["family"]))
    cb, cc = _category_cores(list(b.values())), _category_cores(list(c.values()))
    cat_moves = [{"category": cat, "from": cb[cat], "to": cc[cat]}
                 for cat in sorted(set(cb) & set(cc)) if cb[cat] != cc[cat]]
    return {"available": True, "note": None, "families": rows, "moves": moves, "category_moves": cat_moves,
            "renames": [{"from": o, "to": n} for n, o in sorted(ren.items())]}
