# Test oracle: a per-step / per-pass loop reference for perfgate.metrics.segments' batched
# segment_rank, segment_metrics and outline (the fast path segments one step axis at once).
# tests/metrics/test_segments_equivalence.py compares every RankSegments table and error of the
# module against it. Do not "fix" it to follow the module: it guards the batched path.
"""Model structure: each step's kernel sequence cut into step -> micro-batch -> pass (forward /
backward / recompute) -> layer -> block, plus named non-layer segments (pipeline, embedding,
lm_head_loss, grad_sync, optimizer, other); lossless: every row in exactly one segment.

Per rank and step the rows are put in time order (``start_ns``, then source row; all streams).
Layers are found on the step's main-stream compute rows (the stream with most compute rows;
communication and other streams are side rows, so their timing cannot move a boundary) at
recurring anchor kernels (rules in ``perfgate/policies/segments.yaml``, see
:mod:`perfgate.policy.knowledge`); the layer count is what the anchors find, never a
configured number. An anchor hit matching the rule's ``backward`` kernels (e.g.
FlashAttentionScoreGrad) is a backward layer, any other a forward one.

Boundaries are the model's own, learned per step and pass from the first two consecutive
hits: the first layer starts where the kernel sequence stops repeating backwards from its
anchor (for the forward pass, moved to the first ``lead`` kernel: a decoder layer starts at
its input norm); every later layer starts at the same kernel family counted the same number
of times back from its anchor (falling back to the previous anchor + the first layer's tail,
e.g. a dense layer after MoE layers in the backward). A layer ends where the next one starts;
the last one before a non-layer region (pipeline send/recv, optimizer, loss, step end) is as
long as the layer before it. Pipeline rows are never inside a layer.

Layers that touch form a chain: a chain of forward layers is one forward micro-batch, a
chain holding backward layers one backward micro-batch, and forward layers inside such a
chain are the recompute pass. Model layers: forward 1..n, backward n..1. Rows outside layers
are grouped into runs, cut where the ``regions`` label changes (unlabelled rows take their
neighbours' label; pipeline / grad_sync labels are never passed on); between a forward chain
and the backward chain right after it, runs left ``other`` and collectives before the first
gradient kernel are ``lm_head_loss`` (final norm, LM head and loss whose kernels carry no loss
name, e.g. a vocab-parallel cross entropy with its all-reduces), merged where they touch.

Class signatures: a layer / block / step is identified by the ordered kernel families of its
main-stream rows, plus ``Input Shapes`` when the rules say ``signature: {shapes: true}`` and
the table carries them, and the multiset of its communication rows (compute rows on other
streams do not count: their place depends on timing — the DSA mask kernel of the real level1
capture moves by seven places between its text and DB twins). Equal signature -> equal class
id (``L…``, ``B<kind>:…``, ``S…``, 8 hex digits of a 64-bit polynomial hash), stable across
captures.

Tables (pandas DataFrames, one row each):

* segments: ``step, seg`` (1-based), ``kind`` (layer | pipeline | embedding | lm_head_loss |
  grad_sync | optimizer | other), ``pass, microbatch, model_layer`` (layers), ``first_row,
  last_row`` (source rows, time order), ``rows``, ``class_id`` (layers), ``wall_us``,
  ``sum_dur_us``, ``comm_us``.
* layers: ``step, layer`` (1-based within the step), ``pass, microbatch, model_layer,
  anchor, first_row, last_row, rows, class_id``, ``kinds`` (block kinds, ``+``-joined),
  ``companion`` (no attention block while other layers of the step have one), ``wall_us``
  (last end − first start), ``sum_dur_us`` (ΣDuration), ``comm_us`` (ΣDuration of
  communication rows).
* blocks: ``step, layer, block`` (1-based within the layer), ``kind, class_id, first_row,
  last_row, rows, wall_us, sum_dur_us, comm_us``.
* steps: ``step, anchor, layers, microbatches, passes, step_class, head_rows, tail_rows, rows``.
* classes: see :func:`class_table`.

Times are µs (ΣDuration caliber for ``sum_dur_us`` / ``comm_us``; ``wall_us`` is a span).
Cost: one sort and O(rows) array passes; Python loops run per step and pass, never per layer.
Pure over the kernel table; never mutates it.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.metrics import kernels as km

HEAD, LAYER, TAIL, OTHER, PIPELINE, GRAD_SYNC = "head", "layer", "tail", "other", "pipeline", "grad_sync"
LM_HEAD_LOSS = "lm_head_loss"
GRADIENT = re.compile(r"(?i)grad|backward")   # a gradient kernel's name or type
FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"
PASSES = (FORWARD, RECOMPUTE, BACKWARD)
UNSTRUCTURED = "unstructured"   # block-share bucket: non-layer segments and layers of non-recurring classes
UNIQUE = "unique"               # class-count bucket: layers whose class occurs once per micro-batch pass
STEP_COLS = ["step", "anchor", "layers", "microbatches", "passes", "step_class", "head_rows", "tail_rows", "rows"]
CLASS_COLS = ["level", "class_id", "kind", "pass", "members", "per_step", "wall_p50_us", "wall_p90_us", "sum_dur_us",
              "comm_share", "top_families", "bound", "example_rows"]


@dataclass(frozen=True)
class RankSegments:
    """Segmentation of one rank: ``layers``, ``blocks``, ``steps``, ``segments`` (every
    segment, layers and named non-layer regions) and ``classes`` tables (see module doc)."""
    layers: pd.DataFrame
    blocks: pd.DataFrame
    steps: pd.DataFrame
    segments: pd.DataFrame = None
    classes: pd.DataFrame = None


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
                hit &= km.matches(df[col], rx)
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


_M = np.uint64(0x9E3779B97F4A7C15)            # odd: invertible mod 2**64
_MINV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 2 ** 64))


def _hashes(cat: pd.Series) -> np.ndarray:
    """Stable 64-bit hash per row of a categorical (by its text), NaN -> 0."""
    c = cat if isinstance(cat.dtype, pd.CategoricalDtype) else cat.astype("category")
    table = np.array([int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little")
                      for v in c.cat.categories] + [0], dtype=np.uint64)
    return table[c.cat.codes.to_numpy()]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (uint64 -> uint64), so sums of mixed hashes do not cancel."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Sig:
    """Segment signatures in O(rows + segments): the ordered hashes of main-stream rows
    (polynomial hash over their main-stream ordinal, so side rows moving does not change it)
    and the multiset of the ``multiset`` rows' hashes (sum of mixed hashes; communication
    rows), for any [a, b] ranges. Other side rows (compute on other streams) do not count."""

    def __init__(self, h: np.ndarray, side: np.ndarray, multiset: np.ndarray | None = None):
        multiset = side if multiset is None else multiset
        with np.errstate(over="ignore"):
            main = ~side
            ordinal = np.cumsum(main) - main                       # main rows before each row
            n = int(main.sum()) + 1
            pw = np.cumprod(np.full(n, _M, dtype=np.uint64)) * _MINV  # M**0 .. M**(n-1)
            ipw = np.cumprod(np.full(n, _MINV, dtype=np.uint64)) * _M
            term = np.where(main, h * pw[ordinal], np.uint64(0))
            self.main = np.concatenate([[np.uint64(0)], np.cumsum(term, dtype=np.uint64)])
            self.side = np.concatenate([[np.uint64(0)], np.cumsum(np.where(multiset, _mix(h), np.uint64(0)),
                                                                  dtype=np.uint64)])
            self.ordinal, self.ipw = ordinal, ipw

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """uint64 signature per inclusive range [a, b] (arrays of positions)."""
        with np.errstate(over="ignore"):
            m = (self.main[b + 1] - self.main[a]) * self.ipw[self.ordinal[a]]
            s = self.side[b + 1] - self.side[a]
            return _mix(_mix(m) ^ (s * _M))


def _hex(v: np.ndarray) -> np.ndarray:
    return np.array([f"{int(x) >> 32:08x}" for x in v], dtype=object) if len(v) else np.array([], dtype=object)


def _prev_true(mask: np.ndarray) -> np.ndarray:
    """Per position: the last position <= it where ``mask`` holds (-1 when none)."""
    idx = np.where(mask, np.arange(len(mask)), -1)
    return np.maximum.accumulate(idx) if len(idx) else idx


def _next_true(mask: np.ndarray, n: int) -> np.ndarray:
    """Per position: the first position >= it where ``mask`` holds (n when none)."""
    idx = np.where(mask, np.arange(len(mask)), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if len(idx) else idx


def _select_anchor(rules, masks, step_code, nsteps):
    """Per step, the index of the first anchor rule with >= ``min_layers`` hits (-1: none)."""
    choice = np.full(nsteps, -1)
    for i, (a, hit, *_rest) in enumerate(masks):
        cnt = np.bincount(step_code[hit], minlength=nsteps)
        choice = np.where((choice < 0) & (cnt >= a.min_layers), i, choice)
    return choice


def _learn(fam, hits, passes, lead, pipe_prev, lower, pass_name, stop_prev=None):
    """Boundary rule of one pass in one step, from its first two consecutive hits (same pass,
    no pipeline row between): the first layer starts where the kernel sequence stops repeating
    backwards (``fam[p] == fam[p + P]``, P = the distance to the next hit; not before
    ``lower``), moved forward to the first ``lead`` kernel (forward pass: the input norm);
    later layers start at the k-th kernel of that first layer's starting family before their
    anchor (k = how many the first layer has before its anchor).

    Returns (family, k, offset, tail, length) — ``offset``: kernels from the first layer's
    start to its anchor; ``tail``: kernels after the anchor to the layer's end; ``length``:
    the first layer's kernels — or None."""
    sel = np.flatnonzero(passes == pass_name)
    for j in range(len(sel) - 1):
        i0, i1 = sel[j], sel[j + 1]
        if i1 != i0 + 1:
            continue
        a1, a2 = int(hits[i0]), int(hits[i1])
        if pipe_prev[a2] > a1 or (stop_prev is not None and stop_prev[a2] > a1):
            continue
        lo = max(int(lower[i0]), a1 - (a2 - a1) + 1)
        eq = fam[lo:a1] == fam[lo + (a2 - a1):a2]
        bad = np.flatnonzero(~eq)
        s = lo + (int(bad[-1]) + 1 if len(bad) else 0)
        if lead is not None:
            ld = np.flatnonzero(lead[s:a1 + 1])
            if len(ld):
                s = s + int(ld[0])
        s = min(s, a1)
        f = fam[s]
        k = int((fam[s:a1] == f).sum())
        s2 = a2 - (a1 - s)
        if k:
            fp = np.flatnonzero(fam[a1 + 1:a2] == f) + a1 + 1
            if len(fp) >= k:
                s2 = int(fp[-k])
        return f, k, a1 - s, s2 - 1 - a1, s2 - s
    return None


def _apply(rule, fam, hit_pos, m, lower, prev_hit, prev_same, step_lo, step_hi):
    """Starts of the hits ``m`` under a learned rule (see :func:`_learn`): the k-th kernel of
    the rule's family before the anchor when it lies after ``lower``; else right after the
    previous layer's anchor + tail (previous hit of the same pass), else anchor − offset."""
    f, kk, off, tail, _ = rule
    hp = hit_pos[m]
    fpos = np.flatnonzero(fam[step_lo:step_hi + 1] == f) + step_lo
    idx = np.searchsorted(fpos, hp, side="left") - kk
    cand = fpos[np.clip(idx, 0, len(fpos) - 1)] if len(fpos) else np.full(len(hp), -1)  # kk = 0: idx may be len(fpos)
    cand = np.where((idx >= 0) & (kk > 0), cand, -1)
    fb = np.where(prev_same[m], prev_hit[m] + tail + 1, hp - off)
    s = np.where(cand >= lower[m], cand, fb)
    return np.minimum(np.maximum(s, lower[m]), hp)


def _layer_cuts(k_fam, hit_pos, hit_pass, lead_mask, stop_mask, pipe, step_lo, step_hi, lead_max, region_stop=None):
    """Layer ranges of one step: (starts, ends) arrays aligned with ``hit_pos``, in the step's
    main-stream row index (``pipe[j]``: a pipeline row comes right before main row j). Start
    rule per pass from :func:`_learn` (forward first: a backward layer right after a forward
    one starts after that forward layer's learned length); a layer ends where the next one
    starts, except the last layer before a non-layer region (a pipeline row, a tail /
    optimizer row, the step end, or the next pass), which is as long as the layer before it,
    no longer than the repeating part (``fam[p] == fam[p - P]``) and stops before a stop row."""
    n = len(hit_pos)
    pipe_prev = _prev_true(pipe)
    if region_stop is None:
        region_stop = np.zeros(len(k_fam), dtype=bool)
    stop_prev = _prev_true(region_stop)     # embedding / loss rows: no layer spans them
    prev_hit = np.concatenate([[step_lo - 1], hit_pos[:-1]])
    prev_pass = np.concatenate([[""], hit_pass[:-1]]).astype(object)
    prev_same = (prev_pass == hit_pass) & (pipe_prev[hit_pos] <= prev_hit) & (stop_prev[hit_pos] <= prev_hit)
    lower = np.maximum(np.maximum(prev_hit + 1, stop_prev[hit_pos] + 1), np.maximum(pipe_prev[hit_pos], step_lo))
    starts = hit_pos.copy()
    rules = {}
    for p in (FORWARD, BACKWARD):
        m = hit_pass == p
        if not m.any():
            continue
        if p == BACKWARD and rules.get(FORWARD) is not None:   # after a forward layer: past its length
            after_f = (prev_pass == FORWARD) & (pipe_prev[hit_pos] <= prev_hit)
            idx = np.flatnonzero(after_f)
            lower[idx] = np.maximum(lower[idx], starts[idx - 1] + rules[FORWARD][4])
        r = _learn(k_fam, hit_pos, hit_pass, lead_mask if p == FORWARD else None, pipe_prev, lower, p, stop_prev)
        rules[p] = r
        if r is not None:
            starts[m] = _apply(r, k_fam, hit_pos, m, lower, prev_hit, prev_same, step_lo, step_hi)
        elif p == BACKWARD:   # no run to learn from: right after the layer / segment before it
            starts[m] = np.minimum(lower[m], hit_pos[m])
        elif p == FORWARD and lead_max and lead_mask is not None:  # no run to learn from: nearest leads
            lp = _prev_true(lead_mask)
            for i in np.flatnonzero(m):
                q = int(lp[hit_pos[i]])
                if q >= max(lower[i], hit_pos[i] - lead_max):
                    while q - 1 >= lower[i] and lead_mask[q - 1]:
                        q -= 1
                    starts[i] = q
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = starts[1:] - 1
    ends[-1] = step_hi
    # the last layer before a non-layer region
    nxt_pass_change = np.concatenate([hit_pass[1:] != hit_pass[:-1], [True]])
    pipe_between = np.concatenate([(pipe_prev[hit_pos[1:]] > hit_pos[:-1]) | (stop_prev[hit_pos[1:]] > hit_pos[:-1]),
                                   [True]])
    last = nxt_pass_change | pipe_between
    stop_next = _next_true(stop_mask | pipe | region_stop, len(stop_mask))
    lengths = ends - starts + 1
    for i in np.flatnonzero(last):
        a = int(hit_pos[i])
        cap = int(ends[i])
        cap = min(cap, int(stop_next[a + 1]) - 1 if a + 1 < len(stop_mask) else cap)
        same_prev = i > 0 and not last[i - 1] and hit_pass[i - 1] == hit_pass[i]
        if same_prev:
            P = a - int(hit_pos[i - 1])
            cap = min(cap, int(starts[i]) + int(lengths[i - 1]) - 1)
            hi = min(cap, len(k_fam) - 1)
            if hi > a:
                eq = k_fam[a + 1:hi + 1] == k_fam[a + 1 - P:hi + 1 - P]
                bad = np.flatnonzero(~eq)
                if len(bad):
                    cap = a + int(bad[0])
        elif rules.get(hit_pass[i]) is not None:
            cap = min(cap, int(starts[i]) + rules[hit_pass[i]][4] - 1)
        ends[i] = max(cap, a)
    return starts, ends


def _typical_length(starts, ends, passes, last, p):
    m = (passes == p) & ~last
    if not m.any():
        return 0
    return int(np.median(ends[m] - starts[m] + 1))


def segment_rank(df: pd.DataFrame, rules, family_suffix, *, categories: pd.Series | None = None,
                 path=None) -> RankSegments:
    """Segment every step of one rank's kernel table (:mod:`perfgate.ingest.kernels` columns).

    Args:
        rules: :class:`perfgate.policy.knowledge.SegmentRules`.
        family_suffix: the policy's family regex (or :class:`perfgate.policy.FamilyRules`).
        categories: optional category per row (policy rules, index aligned with ``df``); gives
            each class its bound category.

    Raises:
        InvalidCaptureError: the lossless check failed (names the rows).

    Cost: one sort and O(rows) array passes; Python loops run per step and per run of layers
    of one pass (micro-batch), never per layer or per row.
    """
    used = [c for c in ("row", "step", "name", "op_type", "core_type", "stream_id", "start_ns", "end_ns",
                        "dur_ns", "is_comm", "input_shapes") if c in df.columns]
    keep = np.flatnonzero(df["step"].notna().to_numpy())
    step_key = df["step"].cat.codes.to_numpy() if isinstance(df["step"].dtype, pd.CategoricalDtype) else \
        pd.factorize(df["step"], sort=True)[0]
    pos = keep[np.lexsort((df["row"].to_numpy()[keep], df["start_ns"].to_numpy()[keep], step_key[keep]))]
    cols = [df.columns.get_loc(c) for c in used]
    k = df.iloc[pos, cols] if len(pos) < len(df) or (np.diff(pos) != 1).any() else df.iloc[:, cols]
    k = k.assign(family=km.family_of(k["name"], family_suffix))
    N = len(k)
    if not N:
        return _empty()
    fam = k["family"].cat.codes.to_numpy().astype(np.int64)
    h = _hashes(k["family"])
    if getattr(rules, "shapes", False) and "input_shapes" in k:
        h = h ^ (_hashes(k["input_shapes"]) * _M)
    comm = k["is_comm"].to_numpy().astype(bool)
    stream = km.sorted_codes(k["stream_id"]) if "stream_id" in k else np.full(N, -1)
    rows_all, start, end, dur = (k[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns"))
    scode = pd.factorize(k["step"].astype(str) if not isinstance(k["step"].dtype, pd.CategoricalDtype)
                         else k["step"].cat.codes, sort=False)[0] if N else np.zeros(0, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(scode)) + 1
    step_lo = np.concatenate([[0], bounds]).astype(np.int64) if N else np.zeros(0, dtype=np.int64)
    step_hi = np.concatenate([bounds - 1, [N - 1]]).astype(np.int64) if N else np.zeros(0, dtype=np.int64)
    step_names = [str(x) for x in k["step"].iloc[step_lo]] if N else []
    nsteps = len(step_lo)
    sidx = np.repeat(np.arange(nsteps), step_hi - step_lo + 1)

    # main stream per step: the stream with most compute rows; other streams and comm are side rows
    side = comm.copy()
    ok = ~comm & (stream >= 0)
    if ok.any():
        ns = int(stream.max()) + 1
        cnt = np.bincount(sidx[ok] * ns + stream[ok], minlength=nsteps * ns).reshape(nsteps, ns)
        has = cnt.sum(axis=1) > 0
        main = cnt.argmax(axis=1)
        side = comm | ((stream >= 0) & has[sidx] & (stream != main[sidx]))

    # anchor hits, per step the first rule with enough hits
    by_name = {a.name: a for a in rules.anchors}
    masks = []
    for a in rules.anchors:
        comp = [by_name[c] for c in a.companions]
        bwd = match_mask(k, a.backward) if a.backward else np.zeros(N, dtype=bool)
        fwd = match_mask(k, a.match) & ~bwd
        hit = fwd | bwd
        if a.unless_after:
            ua = match_mask(k, a.unless_after)
            pu = _prev_true(np.concatenate([[False], ua[:-1]]))    # last unless row strictly before
            near = (pu >= 0) & (np.arange(N) - pu <= a.within)
            near &= sidx[np.clip(pu, 0, None)] == sidx
            hit &= ~near
        lead = match_mask(k, a.lead + tuple(m for c in comp for m in c.lead))
        cmask = match_mask(k, tuple(m for c in comp for m in c.match)) & ~hit if comp else None
        masks.append((a, hit, bwd, lead, cmask))
    choice = _select_anchor(rules, masks, sidx, nsteps) if nsteps else np.zeros(0, dtype=int)
    tail = match_mask(k, rules.tail)
    pipe = match_mask(k, rules.pipeline) if rules.pipeline else np.zeros(N, dtype=bool)
    region = _region_labels(k, rules, N)
    attach = side & (region == "")          # side rows in no named region may join the next layer
    region_stop = (region == "embedding") | (region == LM_HEAD_LOSS)   # no layer spans these rows

    seg_lo, seg_hi, seg_kind, seg_pass, seg_step, seg_anchor, seg_companion = [], [], [], [], [], [], []
    seg_mb, seg_model = [], []
    for s in range(nsteps):
        lo, hi = int(step_lo[s]), int(step_hi[s])
        c = int(choice[s])
        hp = np.zeros(0, dtype=np.int64)
        mi = np.flatnonzero(~side[lo:hi + 1]) + lo          # main-stream rows: cuts ignore side rows
        if c >= 0 and len(mi):
            a, hit, bwd, lead, cmask = masks[c]
            hm = np.flatnonzero(hit[mi])
            is_comp = np.zeros(len(hm), dtype=bool)
            if cmask is not None and cmask[mi].any():
                sec = np.flatnonzero(cmask[mi])
                both = np.concatenate([hm, sec])
                flag = np.concatenate([np.zeros(len(hm), bool), np.ones(len(sec), bool)])
                o = np.argsort(both, kind="stable")
                both, flag = both[o], flag[o]
                keepm = ~flag | np.concatenate([[True], flag[:-1]])
                hm, is_comp = both[keepm], flag[keepm]
        if c >= 0 and len(mi) and len(hm):
            pq = np.flatnonzero(pipe[lo:hi + 1]) + lo
            pm = np.zeros(len(mi) + 1, dtype=bool)
            pm[np.searchsorted(mi, pq)] = True                   # pipeline row right before main row j
            pm = pm[:len(mi)]
            hpass = np.where(bwd[mi][hm], BACKWARD, FORWARD).astype(object)
            sm, em = _layer_cuts(fam[mi], hm, hpass, lead[mi], tail[mi], pm, 0, len(mi) - 1, a.lead_max,
                                 region_stop[mi])
            touch = np.concatenate([(em[:-1] + 1 == sm[1:]) & ~pm[sm[1:]], [False]])
            hpass, mb, _chain, model = _recompute(hpass, touch)
            starts, ends = mi[sm], mi[em]
            # side rows (e.g. a MoE combine alltoall) right before a layer's first main-stream row
            # and in no named region belong to that layer
            back = _prev_true(~attach[lo:hi + 1]) + lo               # last non-attachable row <= p
            prev_end = np.concatenate([[lo - 1], ends[:-1]])
            p_ = np.maximum(starts - 1, lo)
            cand = back[p_ - lo] + 1
            starts = np.where((starts > lo) & attach[p_], np.maximum(cand, prev_end + 1), starts)
            ends[touch] = starts[np.flatnonzero(touch) + 1] - 1     # side rows between touching layers
            hp = starts
            seg_mb.append(mb); seg_model.append(model)
            seg_lo.append(starts); seg_hi.append(ends)
            seg_kind.append(np.full(len(hp), LAYER, dtype=object)); seg_pass.append(hpass)
            seg_step.append(np.full(len(hp), s)); seg_anchor.append(np.full(len(hp), a.name, dtype=object))
            seg_companion.append(is_comp)
        # non-layer rows of the step: runs cut at layers and at region-label changes
        cov = np.zeros(hi - lo + 2, dtype=np.int64)
        if len(hp):
            np.add.at(cov, starts - lo, 1)
            np.add.at(cov, ends - lo + 1, -1)
        inlayer = np.cumsum(cov)[:-1] > 0
        free = np.flatnonzero(~inlayer) + lo
        if len(free):
            lab = _fill_labels(region[free], free, OTHER)
            brk = np.flatnonzero((np.diff(free) != 1) | (lab[1:] != lab[:-1])) + 1
            fs = np.concatenate([[0], brk])
            fe = np.concatenate([brk - 1, [len(free) - 1]])
            seg_lo.append(free[fs]); seg_hi.append(free[fe])
            seg_kind.append(lab[fs].astype(object)); seg_pass.append(np.full(len(fs), "", dtype=object))
            seg_step.append(np.full(len(fs), s)); seg_anchor.append(np.full(len(fs), None, dtype=object))
            seg_companion.append(np.zeros(len(fs), dtype=bool))
            seg_mb.append(np.zeros(len(fs), dtype=np.int64)); seg_model.append(np.zeros(len(fs), dtype=np.int64))
    cat_ = (lambda xs, dt=None: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt or np.int64))
    a_lo, a_hi = cat_(seg_lo, np.int64), cat_(seg_hi, np.int64)
    kind = cat_(seg_kind, object)
    ps, st_, anc, compn = cat_(seg_pass, object), cat_(seg_step, np.int64), cat_(seg_anchor, object), \
        cat_(seg_companion, bool)
    mbs, model = cat_(seg_mb, np.int64), cat_(seg_model, np.int64)
    o = np.argsort(a_lo, kind="stable")
    a_lo, a_hi, kind, ps, st_, anc, compn, mbs, model = (x[o] for x in (a_lo, a_hi, kind, ps, st_, anc, compn,
                                                                         mbs, model))
    grad = np.zeros(N, dtype=bool)
    for col in ("name", "op_type"):   # gradient kernels: the backward has begun
        grad |= k[col].astype(object).map(lambda v: isinstance(v, str) and bool(GRADIENT.search(v))).to_numpy(bool)
    a_lo, a_hi, kind, ps, st_, anc, compn, mbs, model = _head_and_loss(
        (a_lo, a_hi, kind, ps, st_, anc, compn, mbs, model), grad)
    _check_all(a_lo, a_hi, step_lo, step_hi, step_names, rows_all, kind, path)
    return _tables(k, rules, fam, h, side, comm, rows_all, start, end, dur, a_lo, a_hi, kind, ps, st_, anc,
                   compn, mbs, model, step_names, step_lo, step_hi, categories, df, pos)


LAYER_COLS = ["step", "layer", "pass", "microbatch", "model_layer", "anchor", "first_row", "last_row", "rows",
              "class_id", "kinds", "companion", "wall_us", "sum_dur_us", "comm_us"]
BLOCK_COLS = ["step", "layer", "block", "kind", "class_id", "first_row", "last_row", "rows", "wall_us", "sum_dur_us",
              "comm_us"]
SEGMENT_COLS = ["step", "seg", "kind", "pass", "microbatch", "model_layer", "first_row", "last_row", "rows",
                "class_id", "wall_us", "sum_dur_us", "comm_us"]


def _empty() -> RankSegments:
    return RankSegments(pd.DataFrame(columns=LAYER_COLS), pd.DataFrame(columns=BLOCK_COLS),
                        pd.DataFrame(columns=STEP_COLS), pd.DataFrame(columns=SEGMENT_COLS),
                        pd.DataFrame(columns=CLASS_COLS))


def _recompute(hpass: np.ndarray, touch: np.ndarray) -> tuple:
    """Passes and micro-batch numbers of one step's layers.

    Layers that touch (``touch[i]``: layer i + 1 starts right after layer i, no pipeline row
    or other non-layer row between) form a chain; a chain of forward
    layers only is one forward micro-batch, a chain holding backward layers is one backward
    micro-batch, and forward layers inside such a chain are the ``recompute`` pass (activation
    checkpointing re-runs the forward inside the backward). Forward chains are numbered
    1, 2, ... in time order, backward chains too (1F1B runs them in the same order).

    Returns (passes, microbatch, chain id, model layer): the model layer of a forward layer
    is its place in the chain, of a backward layer its place counted from the chain's end
    (backward runs the layers in reverse), of a recompute layer its place among the chain's
    recompute layers, or, for a lone recompute layer right before a backward layer (per-layer
    checkpointing), that backward layer's."""
    n = len(hpass)
    if not n:
        z = np.zeros(0, dtype=np.int64)
        return hpass, z, z, z
    brk = np.concatenate([[True], ~touch[:-1]])
    chain = np.cumsum(brk) - 1
    nchain = int(chain[-1]) + 1
    has_bwd = np.bincount(chain, weights=(hpass == BACKWARD), minlength=nchain) > 0
    out = hpass.copy()
    out[(hpass == FORWARD) & has_bwd[chain]] = RECOMPUTE
    fwd_chain = ~has_bwd
    mb_of_chain = np.where(fwd_chain, np.cumsum(fwd_chain), np.cumsum(~fwd_chain))
    mb = mb_of_chain[chain]
    first = np.flatnonzero(brk)
    idx = np.arange(n) - first[chain]                             # place in chain (0-based)
    model = np.zeros(n, dtype=np.int64)
    for p in (FORWARD, BACKWARD, RECOMPUTE):
        m = out == p
        cnt = np.cumsum(m) - m                                    # earlier layers of pass p (all chains)
        base = np.concatenate([[0], np.cumsum(m)])[first][chain]  # ... before the chain starts
        place = cnt - base + 1
        tot = np.bincount(chain[m], minlength=nchain)[chain]
        model = np.where(m, tot - place + 1 if p == BACKWARD else place, model)
    del idx
    # per-layer recompute (R_n B_n R_n-1 B_n-1 ...): a lone recompute layer re-runs the layer whose
    # backward follows it
    rc = out == RECOMPUTE
    lone = rc & ~np.concatenate([[False], rc[:-1]]) & ~np.concatenate([rc[1:], [False]]) \
        & np.concatenate([out[1:] == BACKWARD, [False]]) & touch
    model[lone] = model[np.flatnonzero(lone) + 1]
    return out, mb, chain, model


def _head_and_loss(cols: tuple, grad: np.ndarray) -> tuple:
    """The runs between two consecutive layers, a forward one and then a backward one of the same
    step, are the head + loss when each is ``other``, ``grad_sync`` or ``lm_head_loss`` and one is
    ``other`` or ``lm_head_loss``: there ``other`` becomes ``lm_head_loss``, and so does
    ``grad_sync`` starting before the gap's first gradient row (``grad``). Touching
    ``lm_head_loss`` runs of one step are then merged. ``cols``: the segment columns (lo, hi,
    kind, pass, step, then the rest), in row order; returns them the same way."""
    a_lo, a_hi, kind, ps, st_ = (np.array(c, copy=True) for c in cols[:5])
    layers = [j for j in range(len(kind)) if kind[j] == LAYER]
    for a, b in zip(layers, layers[1:]):
        gap = list(range(a + 1, b))
        if not gap or ps[a] != FORWARD or ps[b] != BACKWARD or st_[a] != st_[b]:
            continue
        kinds = {kind[j] for j in gap}
        if not kinds <= {OTHER, GRAD_SYNC, LM_HEAD_LOSS} or not kinds & {OTHER, LM_HEAD_LOSS}:
            continue
        at = np.flatnonzero(grad[a_hi[a] + 1:a_lo[b]])
        first = a_hi[a] + 1 + at[0] if len(at) else a_lo[b]
        for j in gap:
            if kind[j] == OTHER or (kind[j] == GRAD_SYNC and a_lo[j] < first):
                kind[j] = LM_HEAD_LOSS
    keep = []
    for j in range(len(kind)):
        i = keep[-1] if keep else None
        if i is not None and kind[i] == kind[j] == LM_HEAD_LOSS and a_lo[j] == a_hi[i] + 1 and st_[i] == st_[j]:
            a_hi[i] = a_hi[j]
            continue
        keep.append(j)
    rest = [np.asarray(c)[keep] for c in cols[5:]]
    return (a_lo[keep], a_hi[keep], kind[keep], ps[keep], st_[keep], *rest)


def _fill_labels(lab: np.ndarray, free: np.ndarray, default: str) -> np.ndarray:
    """Unlabelled ('') rows of a non-layer run take the label of the nearest labelled row
    before them in the same run, else after them, else ``default``; ``pipeline`` and
    ``grad_sync`` labels are never passed on (only the communication rows themselves are the
    pipeline / gradient-sync segments)."""
    grp_start = np.concatenate([[True], np.diff(free) != 1])
    gs = _prev_true(grp_start)
    has = (lab != "") & (lab != PIPELINE) & (lab != GRAD_SYNC)
    pv = _prev_true(has)
    out = np.where(lab != "", lab, "").astype(object)
    ok = (pv >= gs) & (pv >= 0)
    out = np.where((lab == "") & ok, lab[np.clip(pv, 0, None)], out)
    ge = np.concatenate([np.flatnonzero(grp_start)[1:] - 1, [len(free) - 1]])
    gid = np.cumsum(grp_start) - 1
    nx = _next_true(has, len(lab))
    ok2 = (out == "") & (nx <= ge[gid]) & (nx < len(lab))
    out = np.where(ok2, lab[np.clip(nx, 0, len(lab) - 1)], out)
    return np.where(out == "", default, out).astype(object)


def _region_labels(k: pd.DataFrame, rules, n: int) -> np.ndarray:
    """Per row: the first ``regions`` rule it matches (pipeline, embedding, ...) or ''."""
    lab = np.full(n, "", dtype=object)
    for name, matches in reversed(rules.regions):
        lab = np.where(match_mask(k, matches), name, lab)
    return lab


def _check_all(a_lo, a_hi, step_lo, step_hi, step_names, rows_all, kind, path):
    """Every row in exactly one segment and no segment across two steps (else
    :func:`check_lossless` names the rows of the first failing step)."""
    n = len(rows_all)
    cov = np.zeros(n + 1, dtype=np.int64)
    np.add.at(cov, a_lo, 1)
    np.add.at(cov, a_hi + 1, -1)
    cnt = np.cumsum(cov)[:n]
    s_of = np.searchsorted(step_lo, a_lo, side="right") - 1
    e_of = np.searchsorted(step_lo, a_hi, side="right") - 1
    bad = np.flatnonzero(cnt != 1)
    if not len(bad) and (s_of == e_of).all():
        return
    s = int(np.searchsorted(step_lo, bad[0], side="right") - 1) if len(bad) else \
        int(s_of[np.flatnonzero(s_of != e_of)[0]])
    lo, hi = int(step_lo[s]), int(step_hi[s])
    m = (a_lo <= hi) & (a_hi >= lo)
    check_lossless(step_names[s], rows_all[lo:hi + 1],
                   [(f"{kd} {i}", int(a) - lo, int(b) - lo) for i, (kd, a, b) in
                    enumerate(zip(kind[m], a_lo[m], a_hi[m]))], path)
    raise InvalidCaptureError(f"step {step_names[s]}: a segment crosses the step's end", path=path)  # pragma: no cover


def _absorb(bk: np.ndarray, blayer: np.ndarray, default: str, into: str) -> np.ndarray:
    """Blocks of kind ``default`` take kind ``into`` when the nearest non-default block after
    them in the same layer is ``into`` (else when the one before them is)."""
    n = len(bk)
    other = bk == default
    nxt = _next_true(~other, n)
    prv = _prev_true(~other)
    nk = np.where(nxt < n, bk[np.clip(nxt, 0, n - 1)], "")
    pk = np.where(prv >= 0, bk[np.clip(prv, 0, None)], "")
    same_n = (nxt < n) & (blayer[np.clip(nxt, 0, n - 1)] == blayer)
    same_p = (prv >= 0) & (blayer[np.clip(prv, 0, None)] == blayer)
    out = bk.copy()
    out[other & same_n & (nk == into)] = into
    out[other & ~(same_n & (nk == into)) & same_p & (pk == into)] = into
    return out


def _reduce(a_lo, x, fn):
    return fn.reduceat(x, a_lo) if len(a_lo) else np.zeros(0, dtype=x.dtype)


def _top_by(owner: np.ndarray, key: np.ndarray, dur_ns: np.ndarray, labels, top: int) -> dict:
    """{owner: [(label, ΣDuration µs), ...] the ``top`` largest} in one group-by over rows."""
    if not len(owner):
        return {}
    g = pd.DataFrame({"o": owner, "k": key, "d": dur_ns.astype(float)}).groupby(["o", "k"], sort=False)["d"].sum()
    g = g.reset_index().sort_values(["o", "d", "k"], ascending=[True, False, True], kind="stable")
    g = g[g.groupby("o").cumcount() < top]
    out: dict = {}
    for o, kk, d in zip(g["o"].to_numpy(), g["k"].to_numpy(), g["d"].to_numpy()):
        out.setdefault(o, []).append((labels[kk] if labels is not None else kk, d / 1000.0))
    return out


def _tables(k, rules, fam, h, side, comm, rows_all, start, end, dur, a_lo, a_hi, kind, ps, st_, anc, compn,
            mbs, model, step_names, step_lo, step_hi, categories, df, pos) -> RankSegments:
    N = len(rows_all)
    sig = _Sig(h, side, comm)
    nseg = len(a_lo)
    wall = (_reduce(a_lo, end, np.maximum) - _reduce(a_lo, start, np.minimum)) / 1000.0 if nseg else np.zeros(0)
    sdur = _reduce(a_lo, dur.astype(np.float64), np.add) / 1000.0
    cdur = _reduce(a_lo, np.where(comm, dur, 0).astype(np.float64), np.add) / 1000.0
    rows_n = a_hi - a_lo + 1
    is_layer = kind == LAYER
    seg_of_row = np.repeat(np.arange(nseg), rows_n)
    step_name = np.array(step_names, dtype=object)[st_] if nseg else np.zeros(0, dtype=object)
    # per-step numbering of segments and layers
    first_in_step = np.concatenate([[True], st_[1:] != st_[:-1]]) if nseg else np.zeros(0, bool)
    fi = np.flatnonzero(first_in_step)
    gid = np.cumsum(first_in_step) - 1
    seg_no = np.arange(nseg) - fi[gid] + 1 if nseg else np.zeros(0, dtype=np.int64)
    lcum = np.cumsum(is_layer)
    lbase = np.concatenate([[0], lcum])[fi][gid] if nseg else np.zeros(0, dtype=np.int64)
    layer_no = lcum - lbase
    # blocks: cut at norms and AI_CPU runs inside layers, adjacent blocks of one kind merged
    in_layer = is_layer[seg_of_row] if N else np.zeros(0, bool)
    cut = match_mask(k, rules.blocks.cut_before)
    aicpu = km.matches(k["core_type"], rules.blocks.aicpu_core) if rules.blocks.aicpu_core else np.zeros(N, bool)
    seg_start = np.zeros(N, dtype=bool)
    seg_start[a_lo] = True
    edge = np.concatenate([[True], aicpu[1:] != aicpu[:-1]]) if N else np.zeros(0, bool)
    lp = np.flatnonzero(in_layer)
    bmask = (seg_start | cut | edge)[lp]
    bs = np.flatnonzero(bmask)                                    # block starts, index into lp
    kinds_list = [kd for kd, _ in rules.blocks.kinds]
    kmask = [match_mask(k, m)[lp] for _, m in rules.blocks.kinds]

    def block_kinds(bs_):
        if not len(bs_):
            return np.zeros(0, dtype=object)
        out = np.full(len(bs_), rules.blocks.default, dtype=object)
        done = np.zeros(len(bs_), dtype=bool)
        allcpu = np.logical_and.reduceat(aicpu[lp], bs_)
        out[allcpu] = "aicpu"
        done |= allcpu
        for kd, m in zip(kinds_list, kmask):
            anyk = np.logical_or.reduceat(m, bs_) & ~done
            out[anyk] = kd
            done |= anyk
        return out

    bk = block_kinds(bs)
    blayer = seg_of_row[lp[bs]] if len(bs) else np.zeros(0, dtype=np.int64)
    if len(bs):  # default-kind blocks next to an attention block are its prologue / epilogue (QKV, q/k norm)
        bk = _absorb(bk, blayer, rules.blocks.default, "attention")
    keepb = np.concatenate([[True], (bk[1:] != bk[:-1]) | (blayer[1:] != blayer[:-1])]) if len(bs) else bs.astype(bool)
    bs, bk, blayer = bs[keepb], bk[keepb], blayer[keepb]
    be = np.concatenate([bs[1:] - 1, [len(lp) - 1]]) if len(bs) else bs
    blo, bhi = lp[bs], lp[be] if len(bs) else lp[bs]
    bsig = sig(blo, bhi) if len(bs) else np.zeros(0, dtype=np.uint64)
    bfirst = np.concatenate([[True], blayer[1:] != blayer[:-1]]) if len(bs) else bs.astype(bool)
    bfi = np.flatnonzero(bfirst)
    bno = np.arange(len(bs)) - bfi[np.cumsum(bfirst) - 1] + 1 if len(bs) else bs
    # a layer's block kinds, '+'-joined: built once per distinct kind sequence
    kc = {kd: i + 1 for i, kd in enumerate(sorted(set(bk.tolist())))}
    kcode = np.array([kc[x] for x in bk], dtype=np.uint64) if len(bk) else np.zeros(0, np.uint64)
    ksig = _Sig(kcode, np.zeros(len(bk), dtype=bool))(bfi, np.concatenate([bfi[1:] - 1, [len(bk) - 1]])) \
        if len(bk) else np.zeros(0, np.uint64)
    uk, first_of = np.unique(ksig, return_index=True)
    kstr = {}
    for key, f in zip(uk, first_of):
        e = bfi[f + 1] if f + 1 < len(bfi) else len(bk)
        kstr[key] = "+".join(bk[bfi[f]:e])
    lay_idx = np.flatnonzero(is_layer)
    layer_kinds = np.full(nseg, "", dtype=object)
    if len(ksig):
        layer_kinds[blayer[bfi]] = np.array([kstr[x] for x in ksig], dtype=object) if len(uk) < 2 else \
            pd.Series(ksig).map(kstr).to_numpy()
    has_att = np.zeros(nseg, dtype=bool)
    if len(bs):
        has_att[np.unique(blayer[bk == "attention"])] = True
    step_att = np.bincount(st_[has_att], minlength=len(step_names)) > 0 if nseg else np.zeros(0, bool)
    companion = is_layer & ~has_att & step_att[st_] if nseg else np.zeros(0, bool)
    # class ids
    lsig = sig(a_lo, a_hi) if nseg else np.zeros(0, dtype=np.uint64)
    cls = np.full(nseg, "", dtype=object)
    cls[is_layer] = "L" + _hex(lsig[is_layer]).astype(object) if is_layer.any() else cls[is_layer]
    bcls = np.array([f"B{x}:" for x in bk], dtype=object) + _hex(bsig) if len(bk) else np.zeros(0, dtype=object)
    bwall = (np.maximum.reduceat(end[lp], bs) - np.minimum.reduceat(start[lp], bs)) / 1000.0 if len(bs) else np.zeros(0)
    bsum = np.add.reduceat(dur[lp].astype(float), bs) / 1000.0 if len(bs) else np.zeros(0)
    bcomm = np.add.reduceat(np.where(comm[lp], dur[lp], 0).astype(float), bs) / 1000.0 if len(bs) else np.zeros(0)
    seg_tab = pd.DataFrame({
        "step": step_name, "seg": seg_no, "kind": kind, "pass": ps, "microbatch": mbs, "model_layer": model,
        "first_row": rows_all[a_lo] if nseg else [], "last_row": rows_all[a_hi] if nseg else [],
        "rows": rows_n, "class_id": cls, "wall_us": wall, "sum_dur_us": sdur, "comm_us": cdur})
    layers = pd.DataFrame({
        "step": step_name[is_layer], "layer": layer_no[is_layer], "pass": ps[is_layer],
        "microbatch": mbs[is_layer], "model_layer": model[is_layer], "anchor": anc[is_layer],
        "first_row": rows_all[a_lo[is_layer]], "last_row": rows_all[a_hi[is_layer]], "rows": rows_n[is_layer],
        "class_id": cls[is_layer], "kinds": layer_kinds[is_layer], "companion": companion[is_layer],
        "wall_us": wall[is_layer], "sum_dur_us": sdur[is_layer], "comm_us": cdur[is_layer]})
    blocks = pd.DataFrame({
        "step": step_name[blayer] if len(bs) else [], "layer": layer_no[blayer] if len(bs) else [],
        "block": bno, "kind": bk, "class_id": bcls, "first_row": rows_all[blo] if len(bs) else [],
        "last_row": rows_all[bhi] if len(bs) else [], "rows": be - bs + 1 if len(bs) else [],
        "wall_us": bwall, "sum_dur_us": bsum, "comm_us": bcomm})
    # steps
    ssig = sig(step_lo, step_hi) if len(step_lo) else np.zeros(0, np.uint64)
    steps = []
    lay_step = st_[is_layer]
    for s, name in enumerate(step_names):
        m = lay_step == s
        lo_s, hi_s = int(step_lo[s]), int(step_hi[s])
        lm = lay_idx[m]
        p_s = ps[lm]
        fwd_mb = mbs[lm][p_s == FORWARD]
        bwd_mb = mbs[lm][p_s == BACKWARD]
        nmb = int(fwd_mb.max()) if len(fwd_mb) else (int(bwd_mb.max()) if len(bwd_mb) else 0)
        steps.append({"step": name, "anchor": anc[lm[0]] if len(lm) else None, "layers": int(m.sum()),
                      "microbatches": nmb, "passes": "+".join(p for p in PASSES if (p_s == p).any()),
                      "step_class": "S" + _hex(ssig[s:s + 1])[0],
                      "head_rows": int(a_lo[lm[0]] - lo_s) if len(lm) else hi_s - lo_s + 1,
                      "tail_rows": int(hi_s - a_hi[lm[-1]]) if len(lm) else 0, "rows": hi_s - lo_s + 1})
    steps = pd.DataFrame(steps, columns=STEP_COLS)
    # classes: one group-by over the member rows
    fam_names = np.asarray(k["family"].cat.categories.astype(str), dtype=object)
    cat_codes, cat_names = None, None
    if categories is not None:
        cv = categories.iloc[pos] if categories.index.equals(df.index) else categories.reindex(k.index)
        cat_codes, cat_names = pd.factorize(cv.astype(str).to_numpy())
    classes = _classes(seg_tab, layers, blocks, is_layer, seg_of_row, lp, bs, be, blayer, fam, fam_names, dur,
                       cat_codes, cat_names, step_names)
    return RankSegments(layers, blocks, steps, seg_tab, classes)


def _classes(seg_tab, layers, blocks, is_layer, seg_of_row, lp, bs, be, blayer, fam, fam_names, dur, cat_codes,
             cat_names, step_names) -> pd.DataFrame:
    out = []
    cls_seg = seg_tab["class_id"].to_numpy()
    blk_of_row = np.repeat(np.arange(len(bs)), be - bs + 1) if len(bs) else np.zeros(0, dtype=np.int64)
    owners = {
        "layer": (cls_seg[seg_of_row[lp]] if len(lp) else np.zeros(0, dtype=object), lp, layers),
        "block": (blocks["class_id"].to_numpy()[blk_of_row] if len(bs) else np.zeros(0, dtype=object), lp, blocks)}
    for level, (row_cls, rpos, t) in owners.items():
        if not len(t):
            continue
        tops = _top_by(row_cls, fam[rpos], dur[rpos], fam_names, 3)
        bound = _top_by(row_cls, cat_codes[rpos], dur[rpos], cat_names, 1) if cat_codes is not None else tops
        g = t.groupby("class_id", sort=False)
        per = t.groupby(["class_id", "step"]).size().unstack(fill_value=0).reindex(columns=step_names, fill_value=0)
        agg = g.agg(members=("rows", "size"), wall_p50_us=("wall_us", "median"),
                    wall_p90_us=("wall_us", lambda w: float(np.percentile(w, 90))),
                    sum_dur_us=("sum_dur_us", "sum"), comm_us=("comm_us", "sum"),
                    first_row=("first_row", "first"), last_row=("last_row", "first"),
                    kind=("kinds" if level == "layer" else "kind", "first"))
        if level == "layer":
            agg["pass"] = g["pass"].agg(lambda x: "+".join(sorted(set(x))))
        for cid, r in agg.iterrows():
            out.append({"level": level, "class_id": cid, "kind": r["kind"], "pass": r.get("pass", ""),
                        "members": int(r["members"]), "per_step": km.median_low(per.loc[cid].to_numpy()),
                        "wall_p50_us": float(r["wall_p50_us"]), "wall_p90_us": float(r["wall_p90_us"]),
                        "sum_dur_us": float(r["sum_dur_us"]),
                        "comm_share": float(r["comm_us"] / r["sum_dur_us"]) if r["sum_dur_us"] > 0 else None,
                        "top_families": "; ".join(f"{f} ({v:.3f})" for f, v in tops.get(cid, [])),
                        "bound": (bound.get(cid) or [(None,)])[0][0],
                        "example_rows": f"{int(r['first_row'])}-{int(r['last_row'])}"})
    return pd.DataFrame(out, columns=CLASS_COLS)


def class_table(seg: RankSegments) -> pd.DataFrame:
    """Per layer class and block class (one row each): ``level`` (layer | block), ``class_id``,
    ``kind`` (layer: block kinds; block: its kind), ``pass`` (layers: the passes of its members),
    ``members`` (all steps), ``per_step`` (lower median of members per step), ``wall_p50_us`` /
    ``wall_p90_us`` (µs, wall span caliber, over members), ``sum_dur_us`` (ΣDuration of all
    members), ``comm_share`` (ratio of ΣDuration on communication rows), ``top_families`` (the
    three families with the largest ΣDuration over the members, ``family (µs)``), ``bound``
    (the policy category — FA, MatMul, Conv, Vector, Comm, ... — with the largest ΣDuration over
    the members when categories were given, else the top family), ``example_rows`` (first
    member's ``first_row-last_row``). Computed in :func:`segment_rank` (one group-by over rows)."""
    return seg.classes


def _units(lay: pd.DataFrame) -> pd.DataFrame:
    """One row per micro-batch pass (step, pass, microbatch) with its layer count."""
    return lay.groupby(["step", "pass", "microbatch"], sort=False).size().rename("layers").reset_index()


def segment_metrics(seg: RankSegments, kfile: str, step_sum_us: pd.Series) -> dict:
    """Gate metrics from one rank's segmentation, in :func:`perfgate.metrics.fingerprint.rank_metrics`
    form ``{(name, labels): (value, evidence, context)}``. Counts are lower medians over the
    micro-batch passes (one step, one pass, one micro-batch) or over steps, so changing the
    micro-batch count changes ``microbatch.count_per_step`` only.

    * ``layer.count`` — model layers on this rank: layers per forward micro-batch (per backward
      one when the capture has no forward layers) (tier 1);
    * ``microbatch.count_per_step`` — forward micro-batches per step (tier 1);
    * ``pass.count_per_step`` — passes per step: forward, backward, recompute (tier 1);
    * ``layer.class_count{pass,class}`` — layers per micro-batch pass of each recurring class
      (>= 2 per micro-batch pass); the layers of other classes under ``class=unique`` (tier 1);
    * ``block.count{pass,kind}`` — blocks per micro-batch pass of each kind, in layers of
      recurring classes (tier 1);
    * ``block.share{kind}`` — ΣDuration of those blocks / ΣDuration of the step (ratio;
      non-layer segments and non-recurring layers under ``kind=unstructured``) (tier 2);
    * ``layer.wall_p50_us{pass}`` — median layer wall (µs, wall-span caliber: last end − first
      start of the layer's rows, all streams) over all layers of the pass (tier 3).
    """
    out: dict = {}
    steps = list(seg.steps["step"])
    if not steps:
        return out
    lay = seg.layers
    anchors = sorted({str(a) for a in seg.steps["anchor"].dropna()})
    ev = f"{kfile}: anchor {', '.join(anchors) or 'none found'}"
    if len(lay):
        ev += f", step {lay['step'].iloc[0]} layer 1 rows {lay['first_row'].iloc[0]}-{lay['last_row'].iloc[0]}"
    if not len(lay):
        out[("layer.count", ())] = (0.0, ev, {})
        out[("block.share", (("kind", UNSTRUCTURED),))] = (1.0, f"{kfile}: no layer found", {})
        return out
    units = _units(lay)
    main = units[units["pass"] == FORWARD]
    if not len(main):
        main = units[units["pass"] == BACKWARD]
    if not len(main):
        main = units
    out[("layer.count", ())] = (km.median_low(main["layers"].to_numpy()), ev + f"; {len(main)} micro-batch "
                                f"pass(es) of pass {main['pass'].iloc[0]}", {})
    out[("microbatch.count_per_step", ())] = (
        km.median_low(seg.steps["microbatches"].to_numpy()),
        f"{kfile}: runs of touching forward layers per step (pipeline, embedding or loss segments between)", {})
    npass = seg.steps["passes"].map(lambda x: len([p for p in str(x).split("+") if p]))
    seen = sorted(set("+".join(seg.steps["passes"]).split("+")) - {""})
    out[("pass.count_per_step", ())] = (km.median_low(npass.to_numpy()), f"{kfile}: passes {', '.join(seen)}", {})
    # per micro-batch pass counts of each class
    key = ["step", "pass", "microbatch"]
    per = lay.groupby(key + ["class_id"], sort=False).size().rename("n").reset_index()
    recurring = set()
    firsts = lay.drop_duplicates(["pass", "class_id"]).set_index(["pass", "class_id"])
    for p, u in units.groupby("pass", sort=False):
        g = per[per["pass"] == p].sort_values(["class_id", "n"], kind="stable")
        nunits = len(u)
        present = g.groupby("class_id", sort=False)["n"].transform("size")
        want = (nunits - 1) // 2 - (nunits - present)          # lower median with absent units = 0
        pick = g[g.groupby("class_id", sort=False).cumcount() == want]
        med = pick.set_index("class_id")["n"].reindex(g["class_id"].unique(), fill_value=0)
        rec = med[med >= 2]
        recurring.update(rec.index)
        for c, v in rec.items():
            f = firsts.loc[(p, c)]
            e = (f"{kfile} rows {f['first_row']}-{f['last_row']} (step {f['step']}, {p} micro-batch "
                 f"{f['microbatch']}, model layer {f['model_layer']}: {f['kinds']})")
            out[("layer.class_count", (("class", c), ("pass", p)))] = (float(v), e, {})
        rest = g[~g["class_id"].isin(rec.index)]
        if len(rest):
            tot = rest.groupby(key)["n"].sum().reindex(pd.MultiIndex.from_frame(u[key]), fill_value=0)
            out[("layer.class_count", (("class", UNIQUE), ("pass", p)))] = (
                km.median_low(tot.to_numpy()), f"{kfile}: {p} layers whose class occurs once per micro-batch pass", {})
        w = lay.loc[lay["pass"] == p, "wall_us"]
        out[("layer.wall_p50_us", (("pass", p),))] = (float(w.median()), ev, {"members": int(len(w))})
    b = seg.blocks.merge(lay[["step", "layer", "class_id", "pass", "microbatch"]].rename(
        columns={"class_id": "layer_class"}), on=["step", "layer"])
    b = b[b["layer_class"].isin(recurring)]
    for (p, kind), g in b.groupby(["pass", "kind"], sort=False):
        u = units[units["pass"] == p]
        cnt = g.groupby(key).size().reindex(pd.MultiIndex.from_frame(u[key]), fill_value=0)
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]})"
        out[("block.count", (("kind", kind), ("pass", p)))] = (km.median_low(cnt.to_numpy()), e, {})
    total = step_sum_us.reindex(steps).astype(float)
    shares = {}
    for kind, g in b.groupby("kind"):
        sh = (g.groupby("step")["sum_dur_us"].sum().reindex(steps, fill_value=0.0) / total).fillna(0.0)
        shares[kind] = sh
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]})"
        out[("block.share", (("kind", kind),))] = (float(sh.median()), e, {})
    rest = (1.0 - sum(shares.values(), pd.Series(0.0, index=steps))).clip(lower=0.0)
    out[("block.share", (("kind", UNSTRUCTURED),))] = (float(rest.median()),
                                                       f"{kfile}: non-layer segments and non-recurring layers", {})
    return out


def outline(seg: RankSegments, step: str | None = None) -> list:
    """The hierarchy of one step (default: the first) as runs, in time order: consecutive
    segments of one kind, pass and micro-batch are one run. A run: ``kind`` (layer | pipeline |
    embedding | lm_head_loss | grad_sync | optimizer | other), ``pass`` and ``microbatch`` (layers),
    ``segments`` (count), ``rows``, ``first_row`` / ``last_row``, ``wall_us`` (µs, the sum of
    its segments' wall spans, each last end − first start) and ``sum_dur_us`` (ΣDuration), and for layer runs
    ``model_layers`` ("1-14" / "14-1"), ``classes`` ({class id: layers}) and ``kinds`` (the
    block kinds of its first layer)."""
    t = seg.segments
    if t is None or not len(t):
        return []
    step = str(seg.steps["step"].iloc[0]) if step is None else str(step)
    t = t[t["step"] == step]
    if not len(t):
        return []
    key = t["kind"].astype(str) + "|" + t["pass"].astype(str) + "|" + t["microbatch"].astype(str)
    run = (key != key.shift()).cumsum().to_numpy()
    lay = seg.layers[seg.layers["step"] == step].set_index("first_row")
    out = []
    for _, g in t.groupby(run, sort=True):
        r = {"kind": g["kind"].iloc[0], "pass": g["pass"].iloc[0] or None,
             "microbatch": int(g["microbatch"].iloc[0]) or None, "segments": int(len(g)),
             "rows": int(g["rows"].sum()), "first_row": int(g["first_row"].iloc[0]),
             "last_row": int(g["last_row"].iloc[-1]), "wall_us": round(float(g["wall_us"].sum()), 3),
             "sum_dur_us": round(float(g["sum_dur_us"].sum()), 3)}
        if r["kind"] == LAYER:
            ml = g["model_layer"].to_numpy()
            r["model_layers"] = f"{int(ml[0])}-{int(ml[-1])}" if len(ml) > 1 else str(int(ml[0]))
            r["classes"] = {str(c): int(n) for c, n in g["class_id"].value_counts(sort=False).items()}
            r["kinds"] = str(lay.loc[g["first_row"].iloc[0], "kinds"]) if g["first_row"].iloc[0] in lay.index else ""
        out.append(r)
    return out


def outline_text(runs: list, indent: str = "") -> list:
    """Text lines of an :func:`outline`: one line per run, layer runs under their micro-batch
    and pass (``step -> micro-batch -> pass -> layers -> blocks``)."""
    lines = []
    for r in runs:
        if r["kind"] == LAYER:
            cls = ", ".join(f"{c} x{n}" for c, n in r["classes"].items())
            lines.append(f"{indent}micro-batch {r['microbatch']} {r['pass']}: {r['segments']} layers "
                         f"(model layers {r['model_layers']}; classes {cls}; blocks {r['kinds']}) "
                         f"rows {r['first_row']}-{r['last_row']}, wall {r['wall_us'] / 1000:.3f} ms")
        else:
            lines.append(f"{indent}{r['kind']}: {r['rows']} rows {r['first_row']}-{r['last_row']}, "
                         f"wall {r['wall_us'] / 1000:.3f} ms")
    return lines
