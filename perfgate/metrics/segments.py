"""Model structure: each step's kernel sequence cut into head | layers | tail, each layer into
blocks (attention | ffn | moe | aicpu | other), with class signatures and a lossless check.

Per rank and step the rows are put in time order (``start_ns``, then source row; all streams,
so a communication task sits where it started). Layers are cut at recurring anchor kernels
(rules in ``perfgate/policies/segments.yaml``, see :mod:`perfgate.policy.knowledge`): the layer count is
what the anchors find, never a configured number. A layer runs from its (lead-adjusted)
anchor to the kernel before the next layer; the last layer is as long as the one before it
and ends early at an optimizer (``tail``) kernel. Rows before the first layer are the head,
rows after the last layer the tail.

Class signatures: a layer / block / step is identified by the ordered kernel families of
its rows on the step's main stream (the stream with most compute rows; all compute rows when
Stream ID is absent), plus ``Input Shapes`` when the rules say ``signature: {shapes: true}``
and the table carries them (the DB export does, the text reader skips them), and the multiset of the
families on other streams and of communication rows (their position among main-stream
kernels depends on timing, not on structure: the DSA mask kernel of the real level1 capture
moves by seven places between its text and DB twins). Equal signature -> equal class id
(``L…``, ``B<kind>:…``, ``S…``, 8 hex digits of SHA-1), stable across captures.

Tables (pandas DataFrames, one row each):

* layers: ``step, layer`` (1-based), ``anchor`` (rule name), ``first_row, last_row`` (source
  rows of the first / last kernel in time order), ``rows`` (kernels), ``class_id``,
  ``kinds`` (block kinds, ``+``-joined), ``companion`` (no attention block while other layers
  of the step have one), ``wall_us`` (last end − first start), ``sum_dur_us`` (ΣDuration),
  ``comm_us`` (ΣDuration of communication rows), ``fam_us`` / ``cat_us`` ({family or
  category: ΣDuration µs}, the five largest).
* blocks: ``step, layer, block`` (1-based within the layer), ``kind, class_id, first_row,
  last_row, rows, wall_us, sum_dur_us, comm_us, fam_us, cat_us`` (as for layers).
* steps: ``step, anchor, layers, step_class, head_rows, tail_rows, rows``.

Times are µs (ΣDuration caliber for ``sum_dur_us`` / ``comm_us``; ``wall_us`` is a span).
Pure over the kernel table; never mutates it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.metrics import kernels as km

HEAD, LAYER, TAIL = "head", "layer", "tail"
UNSTRUCTURED = "unstructured"   # block-share bucket: head, tail and layers of non-recurring classes
UNIQUE = "unique"               # class-count bucket: layers whose class occurs once per step


@dataclass(frozen=True)
class RankSegments:
    """Segmentation of one rank: ``layers``, ``blocks``, ``steps`` tables (see module doc)."""
    layers: pd.DataFrame
    blocks: pd.DataFrame
    steps: pd.DataFrame


def match_mask(df: pd.DataFrame, matches) -> np.ndarray:
    """Rows matching any of ``matches`` (:class:`perfgate.policy.knowledge.Match`; all regexes of one
    match must hit). Columns: ``name``, ``family``, ``op_type``, ``core_type``. Regexes run once
    per distinct value."""
    out = np.zeros(len(df), dtype=bool)
    cols = {"name": "name", "family": "family", "type": "op_type", "core": "core_type"}
    for m in matches:
        hit = np.ones(len(df), dtype=bool)
        for f, col in cols.items():
            rx = getattr(m, f)
            if rx is not None:
                hit &= km._matches(df[col], rx)
        out |= hit
    return out


def check_lossless(step: str, rows: np.ndarray, segments: list, path=None) -> None:
    """Every row of the step in exactly one segment.

    Args:
        rows: source row numbers in time order (position i -> ``rows[i]``).
        segments: ``(label, first_pos, last_pos)`` inclusive position ranges.

    Raises:
        InvalidCaptureError: a row outside every segment, a row in two segments, or a range
            outside the step; the message names the rows (and segments).
    """
    n = len(rows)
    cover = np.zeros(n + 1, dtype=np.int64)
    for label, a, b in segments:
        if not (0 <= a <= b < n):
            raise InvalidCaptureError(f"step {step}: segment {label} spans positions {a}-{b} outside the "
                                      f"step's {n} kernel rows", path=path)
        cover[a] += 1
        cover[b + 1] -= 1
    cnt = np.cumsum(cover)[:n]
    outside = rows[cnt == 0]
    if len(outside):
        raise InvalidCaptureError(
            f"step {step}: segmentation is not lossless: {len(outside)} kernel row(s) belong to no segment "
            f"(rows {', '.join(map(str, outside[:10].tolist()))})", path=path, row=int(outside[0]))
    double = np.flatnonzero(cnt > 1)
    if len(double):
        p = int(double[0])
        owners = [label for label, a, b in segments if a <= p <= b]
        raise InvalidCaptureError(
            f"step {step}: segments {' and '.join(owners)} overlap: {len(double)} kernel row(s) in two "
            f"segments (rows {', '.join(map(str, rows[double[:10]].tolist()))})", path=path, row=int(rows[p]))


def _hashes(cat: pd.Series) -> np.ndarray:
    """Stable 64-bit hash per row of a categorical (by its text), NaN -> 0."""
    c = cat if isinstance(cat.dtype, pd.CategoricalDtype) else cat.astype("category")
    table = np.array([int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little")
                      for v in c.cat.categories] + [0], dtype=np.uint64)
    return table[c.cat.codes.to_numpy()]


def _sig(h: np.ndarray, side: np.ndarray, a: int, b: int) -> str:
    """Signature of positions a..b: ordered main-stream hashes | sorted side-row hashes."""
    s, c = h[a:b + 1], side[a:b + 1]
    blob = s[~c].tobytes() + b"|" + np.sort(s[c]).tobytes()
    return hashlib.sha1(blob).hexdigest()[:8]


def _cuts(anchor, hit, unless, lead, tail, n, companion=None):
    """Layer (first_pos, last_pos) ranges for one anchor rule, or None when it does not apply.

    ``companion``: hits of the rule's ``companions`` anchors (e.g. a MoE dispatch). Such a hit
    starts a layer of its own only when the hit before it (of either kind) was also a
    companion hit: the dispatch after an attention kernel belongs to that attention's layer,
    a second dispatch with no attention in between starts a companion layer."""
    hits = np.flatnonzero(hit)
    if anchor.unless_after and len(hits):
        ua = np.flatnonzero(unless)
        if len(ua):
            i = np.searchsorted(ua, hits)  # ua[i-1] < hit
            prev = np.where(i > 0, ua[np.clip(i - 1, 0, None)], -10**9)
            hits = hits[(hits - prev) > anchor.within]
    if len(hits) < anchor.min_layers:
        return None
    if companion is not None and companion.any():
        sec = np.setdiff1d(np.flatnonzero(companion), hits)
        both = np.concatenate([hits, sec])
        is_sec = np.concatenate([np.zeros(len(hits), bool), np.ones(len(sec), bool)])
        order = np.argsort(both, kind="stable")
        both, is_sec = both[order], is_sec[order]
        keep = ~is_sec | np.concatenate([[True], is_sec[:-1]])
        hits = both[keep]
    starts = []
    for i, h in enumerate(hits):
        lo = int(hits[i - 1]) + 1 if i else 0
        start = int(h)
        if anchor.lead_max:
            win = np.flatnonzero(lead[max(lo, h - anchor.lead_max):h])
            if len(win):
                q = max(lo, h - anchor.lead_max) + int(win[-1])
                while q - 1 >= lo and lead[q - 1]:
                    q -= 1
                start = q
        starts.append(start)
    ranges = [(starts[i], starts[i + 1] - 1) for i in range(len(starts) - 1)]
    last = starts[-1]
    length = (ranges[-1][1] - ranges[-1][0] + 1) if ranges else n - last
    end = min(n - 1, last + length - 1)
    t = np.flatnonzero(tail[int(hits[-1]) + 1:end + 1])
    if len(t):
        end = int(hits[-1]) + int(t[0])
    ranges.append((last, max(end, int(hits[-1]))))
    return ranges


def _blocks(rules, a, b, cut, aicpu, kind_masks):
    """Blocks of one layer: (kind, first_pos, last_pos), adjacent blocks of one kind merged."""
    bounds = {a}
    bounds.update(int(p) for p in np.flatnonzero(cut[a + 1:b + 1]) + a + 1)
    if aicpu is not None:
        ac = aicpu[a:b + 1].astype(np.int8)
        edges = np.flatnonzero(np.diff(ac)) + a + 1
        bounds.update(int(p) for p in edges if p <= b)
    pts = sorted(bounds) + [b + 1]
    out = []
    for s, e in zip(pts[:-1], pts[1:]):
        e -= 1
        if aicpu is not None and aicpu[s:e + 1].all():
            kind = "aicpu"
        else:
            kind = next((k for k, m in kind_masks if m[s:e + 1].any()), rules.default)
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1], e)
        else:
            out.append((kind, s, e))
    return out


def segment_rank(df: pd.DataFrame, rules, family_suffix, *, categories: pd.Series | None = None,
                 path=None) -> RankSegments:
    """Segment every step of one rank's kernel table (:mod:`perfgate.ingest.kernels` columns).

    Args:
        rules: :class:`perfgate.policy.knowledge.SegmentRules`.
        family_suffix: the policy's family regex.
        categories: optional category per row (policy rules, index aligned with ``df``); gives
            each layer its ΣDuration by category (``cat_us``), from which a class's bound
            category is taken.

    Raises:
        InvalidCaptureError: the lossless check failed (names the rows).
    """
    # only the columns segmentation reads, then one lexsort (step, start, row) and one take:
    # sorting the whole kernel table (PMU columns and all) cost ~0.6 s per 1M rows
    used = [c for c in ("row", "step", "name", "op_type", "core_type", "stream_id", "start_ns", "end_ns",
                        "dur_ns", "is_comm", "input_shapes") if c in df.columns]
    # (the step-assigned positions are sorted first and the columns taken once, in that order)
    keep = np.flatnonzero(df["step"].notna().to_numpy())
    step_key = df["step"].cat.codes.to_numpy() if isinstance(df["step"].dtype, pd.CategoricalDtype) else \
        pd.factorize(df["step"], sort=True)[0]
    pos = keep[np.lexsort((df["row"].to_numpy()[keep], df["start_ns"].to_numpy()[keep], step_key[keep]))]
    cols = [df.columns.get_loc(c) for c in used]
    k = df.iloc[pos, cols] if len(pos) < len(df) or (np.diff(pos) != 1).any() else df.iloc[:, cols]
    k = k.assign(family=km.family_of(k["name"], family_suffix))
    h = _hashes(k["family"])
    if getattr(rules, "shapes", False) and "input_shapes" in k:
        h = h ^ (_hashes(k["input_shapes"]) * np.uint64(0x9E3779B97F4A7C15))
    comm = k["is_comm"].to_numpy()
    stream = km.sorted_codes(k["stream_id"])
    side = comm.copy()
    by_name = {a.name: a for a in rules.anchors}
    anchor_masks = []
    for a in rules.anchors:
        comp = [by_name[c] for c in a.companions]
        lead = match_mask(k, a.lead + tuple(m for c in comp for m in c.lead))
        anchor_masks.append((a, match_mask(k, a.match), match_mask(k, a.unless_after), lead,
                             match_mask(k, tuple(m for c in comp for m in c.match)) if comp else None))
    tail = match_mask(k, rules.tail)
    cut = match_mask(k, rules.blocks.cut_before)
    aicpu = km._matches(k["core_type"], rules.blocks.aicpu_core) if rules.blocks.aicpu_core else None
    kinds = [(kind, match_mask(k, m)) for kind, m in rules.blocks.kinds]
    fam = km.str_values(k["family"])
    if categories is not None and categories.index.equals(df.index):
        cat = km.str_values(categories.iloc[pos])  # aligned with df: by position, no index lookup
    else:
        cat = km.str_values(categories.reindex(k.index)) if categories is not None else None
    rows_all, start, end, dur = (k[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns"))
    layers, blocks, steps = [], [], []
    codes = k["step"].cat.codes.to_numpy() if isinstance(k["step"].dtype, pd.CategoricalDtype) else None
    bounds = np.flatnonzero(np.diff(codes)) + 1 if codes is not None else []
    for lo, hi in zip([0, *bounds], [*bounds, len(k)]):
        if hi <= lo:
            continue
        step = str(k["step"].iloc[lo])
        n = hi - lo
        sl = slice(lo, hi)
        ranges, used = None, None
        for a, hit, unless, lead, comp in anchor_masks:
            ranges = _cuts(a, hit[sl], unless[sl], lead[sl], tail[sl], n, comp[sl] if comp is not None else None)
            if ranges:
                used = a.name
                break
        ranges = ranges or []
        segs = []
        if ranges and ranges[0][0] > 0:
            segs.append((HEAD, 0, ranges[0][0] - 1))
        segs += [(f"layer {i + 1}", a, b) for i, (a, b) in enumerate(ranges)]
        last = ranges[-1][1] if ranges else -1
        if last < n - 1:
            segs.append((TAIL if ranges else HEAD, last + 1, n - 1))
        rows = rows_all[sl]
        check_lossless(step, rows, segs, path)
        st = stream[sl][~comm[sl] & (stream[sl] >= 0)]
        if len(st):  # rows on other streams than the step's main compute stream are "side" rows
            main_stream = np.bincount(st).argmax()
            side[sl] = comm[sl] | ((stream[sl] >= 0) & (stream[sl] != main_stream))
        hs, cs = h[sl], side[sl]
        step_layers = []
        for i, (a, b) in enumerate(ranges):
            A, B = lo + a, lo + b
            blk = _blocks(rules.blocks, A, B, cut, aicpu, kinds)
            for j, (kind, s, e) in enumerate(blk):
                blocks.append({"step": step, "layer": i + 1, "block": j + 1, "kind": kind,
                               "class_id": f"B{kind}:{_sig(h, side, s, e)}",
                               "first_row": int(rows_all[s]), "last_row": int(rows_all[e]), "rows": e - s + 1,
                               "wall_us": (end[s:e + 1].max() - start[s:e + 1].min()) / 1000.0,
                               "sum_dur_us": dur[s:e + 1].sum() / 1000.0,
                               "comm_us": dur[s:e + 1][comm[s:e + 1]].sum() / 1000.0,
                               "fam_us": _by(fam[s:e + 1], dur[s:e + 1]),
                               "cat_us": _by(cat[s:e + 1], dur[s:e + 1]) if cat is not None else {}})
            step_layers.append({
                "step": step, "layer": i + 1, "anchor": used, "first_row": int(rows[a]), "last_row": int(rows[b]),
                "rows": b - a + 1, "class_id": "L" + _sig(hs, cs, a, b), "kinds": "+".join(x[0] for x in blk),
                "companion": False, "wall_us": (end[A:B + 1].max() - start[A:B + 1].min()) / 1000.0,
                "sum_dur_us": dur[A:B + 1].sum() / 1000.0,
                "comm_us": dur[A:B + 1][comm[A:B + 1]].sum() / 1000.0,
                "fam_us": _by(fam[A:B + 1], dur[A:B + 1]),
                "cat_us": _by(cat[A:B + 1], dur[A:B + 1]) if cat is not None else {}})
        if any("attention" in x["kinds"].split("+") for x in step_layers):
            for x in step_layers:
                x["companion"] = "attention" not in x["kinds"].split("+")
        layers.extend(step_layers)
        steps.append({"step": step, "anchor": used, "layers": len(ranges), "step_class": "S" + _sig(hs, cs, 0, n - 1),
                      "head_rows": ranges[0][0] if ranges else n, "tail_rows": n - 1 - last if ranges else 0,
                      "rows": n})
    lcols = ["step", "layer", "anchor", "first_row", "last_row", "rows", "class_id", "kinds", "companion",
             "wall_us", "sum_dur_us", "comm_us", "fam_us", "cat_us"]
    bcols = ["step", "layer", "block", "kind", "class_id", "first_row", "last_row", "rows", "wall_us", "sum_dur_us",
             "comm_us", "fam_us", "cat_us"]
    scols = ["step", "anchor", "layers", "step_class", "head_rows", "tail_rows", "rows"]
    return RankSegments(pd.DataFrame(layers, columns=lcols), pd.DataFrame(blocks, columns=bcols),
                        pd.DataFrame(steps, columns=scols))


def _by(keys: np.ndarray, dur_ns: np.ndarray, top: int = 5) -> dict:
    """{key: ΣDuration µs} of the ``top`` largest keys."""
    u, inv = np.unique(keys, return_inverse=True)
    w = np.bincount(inv, weights=dur_ns) / 1000.0
    return {str(u[i]): round(float(w[i]), 3) for i in np.argsort(-w, kind="stable")[:top]}


def _sum_dicts(ds) -> dict:
    out: dict = {}
    for d in ds:
        for key, v in d.items():
            out[key] = out.get(key, 0.0) + v
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def class_table(seg: RankSegments) -> pd.DataFrame:
    """Per layer class and block class (one row each): ``level`` (layer | block), ``class_id``,
    ``kind`` (layer: block kinds; block: its kind), ``members`` (all steps), ``per_step``
    (lower median of members per step), ``wall_p50_us`` / ``wall_p90_us`` (µs, over members),
    ``sum_dur_us`` (ΣDuration of all members), ``comm_share`` (ratio of ΣDuration on
    communication rows), ``top_families`` (the three families with the largest ΣDuration
    over the members, ``family (µs)``), ``bound`` (the policy category — FA, MatMul, Conv,
    Vector, Comm, ... — with the largest ΣDuration over the members when categories were
    given, else the top family), ``example_rows`` (first member's ``first_row-last_row``)."""
    out = []
    for level, t in (("layer", seg.layers), ("block", seg.blocks)):
        for cid, g in t.groupby("class_id", sort=False):
            per = g.groupby("step").size().reindex(seg.steps["step"].unique(), fill_value=0)
            w = g["wall_us"].to_numpy()
            rec = {"level": level, "class_id": cid,
                   "kind": g["kinds"].iloc[0] if level == "layer" else g["kind"].iloc[0],
                   "members": len(g), "per_step": km.median_low(per.to_numpy()) if len(per) else 0.0,
                   "wall_p50_us": float(np.percentile(w, 50)), "wall_p90_us": float(np.percentile(w, 90)),
                   "sum_dur_us": float(g["sum_dur_us"].sum()),
                   "comm_share": float(g["comm_us"].sum() / g["sum_dur_us"].sum()) if g["sum_dur_us"].sum() > 0
                   else None,
                   "top_families": "; ".join(f"{f} ({v:.3f})" for f, v in list(_sum_dicts(g["fam_us"]).items())[:3]),
                   "bound": next(iter(_sum_dicts(g["cat_us"])), None) or next(iter(_sum_dicts(g["fam_us"])), None),
                   "example_rows": f"{int(g['first_row'].iloc[0])}-{int(g['last_row'].iloc[0])}"}
            out.append(rec)
    cols = ["level", "class_id", "kind", "members", "per_step", "wall_p50_us", "wall_p90_us", "sum_dur_us",
            "comm_share", "top_families", "bound", "example_rows"]
    return pd.DataFrame(out, columns=cols)


def segment_metrics(seg: RankSegments, kfile: str, step_sum_us: pd.Series) -> dict:
    """Gate metrics from one rank's segmentation, in :func:`perfgate.metrics.fingerprint.rank_metrics`
    form ``{(name, labels): (value, evidence, context)}``; counts are lower medians over steps.

    * ``layer.count_per_step`` — layers per step (tier 1);
    * ``layer.class_count_per_step{class}`` — layers per step of each recurring class (a class
      with >= 2 layers in a step); layers of other classes under ``class=unique`` (tier 1);
    * ``block.count_per_step{kind}`` — blocks per step of each kind, in layers of recurring
      classes (tier 1);
    * ``block.share{kind}`` — ΣDuration of those blocks / ΣDuration of the step (ratio; head,
      tail and non-recurring layers under ``kind=unstructured``) (tier 2);
    * ``layer.wall_p50_us{class}`` — median layer wall (µs) per recurring class (tier 3).
    """
    out: dict = {}
    steps = list(seg.steps["step"])
    if not steps:
        return out
    lay = seg.layers
    cnt = lay.groupby("step").size().reindex(steps, fill_value=0)
    anchors = sorted({str(a) for a in seg.steps["anchor"].dropna()})
    ev = f"{kfile}: anchor {', '.join(anchors) or 'none found'}"
    if len(lay):
        ev += f", step {lay['step'].iloc[0]} layer 1 rows {lay['first_row'].iloc[0]}-{lay['last_row'].iloc[0]}"
    out[("layer.count_per_step", ())] = (km.median_low(cnt.to_numpy()), ev, {})
    if not len(lay):
        out[("block.share", (("kind", UNSTRUCTURED),))] = (1.0, f"{kfile}: no layer found", {})
        return out
    per_class = lay.groupby(["class_id", "step"]).size().unstack(fill_value=0).reindex(columns=steps, fill_value=0)
    recurring = [c for c in per_class.index if km.median_low(per_class.loc[c].to_numpy()) >= 2]
    rec = lay["class_id"].isin(recurring)
    for c in recurring:
        g = lay[lay["class_id"] == c]
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]}: {g['kinds'].iloc[0]})"
        out[("layer.class_count_per_step", (("class", c),))] = (km.median_low(per_class.loc[c].to_numpy()), e, {})
        out[("layer.wall_p50_us", (("class", c),))] = (float(g["wall_us"].median()), e, {"members": len(g)})
    uniq = lay[~rec].groupby("step").size().reindex(steps, fill_value=0)
    if (~rec).any():
        out[("layer.class_count_per_step", (("class", UNIQUE),))] = (
            km.median_low(uniq.to_numpy()), f"{kfile}: layers whose class occurs once per step", {})
    b = seg.blocks.merge(lay[["step", "layer", "class_id"]].rename(columns={"class_id": "layer_class"}),
                         on=["step", "layer"])
    b = b[b["layer_class"].isin(recurring)]
    total = step_sum_us.reindex(steps).astype(float)
    shares = {}
    for kind, g in b.groupby("kind"):
        per = g.groupby("step").size().reindex(steps, fill_value=0)
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]})"
        out[("block.count_per_step", (("kind", kind),))] = (km.median_low(per.to_numpy()), e, {})
        sh = (g.groupby("step")["sum_dur_us"].sum().reindex(steps, fill_value=0.0) / total).fillna(0.0)
        shares[kind] = sh
        out[("block.share", (("kind", kind),))] = (float(sh.median()), e, {})
    rest = (1.0 - sum(shares.values(), pd.Series(0.0, index=steps))).clip(lower=0.0)
    out[("block.share", (("kind", UNSTRUCTURED),))] = (float(rest.median()),
                                                       f"{kfile}: head, tail and non-recurring layers", {})
    return out
