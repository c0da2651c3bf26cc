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
neighbours' label; pipeline / grad_sync labels are never passed on); the runs between a forward
chain and the backward chain right after it are the head + loss (final norm, LM head and loss
whose kernels carry no loss name, e.g. a vocab-parallel cross entropy): their ``other`` runs and
the collectives before the first gradient kernel (the cross entropy's all-reduces, the loss
average) are ``lm_head_loss``, one segment where they touch (:func:`_head_and_loss`).

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
Cost: one sort and O(rows) array passes over all steps at once (segmented reductions,
``searchsorted`` over the concatenated steps with step offsets in the keys); Python loops run
over rules, passes and distinct classes, never per step, layer, block or row.
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
#: a gradient kernel (``RmsNormGrad``, ``aclnnNLLLossBackward``, ``FlashAttentionScoreGrad``): the
#: backward has begun, so a collective after it may synchronise gradients (:func:`_head_and_loss`)
_GRADIENT = re.compile(r"(?i)grad|backward")
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


_MATCH_COLUMNS = {"name": "name", "family": "family", "type": "op_type", "core": "core_type"}


def _one_match(df, m) -> np.ndarray:
    hit = np.ones(len(df), dtype=bool)
    for f, col in _MATCH_COLUMNS.items():
        rx = getattr(m, f)
        if rx is not None:
            hit &= km.matches(df[col], rx)
    return hit


class _Matcher:
    """The match columns of one rank's (sorted) kernel frame, each read once, and each
    :class:`perfgate.policy.knowledge.Match`'s row mask computed once per rank: segmentation
    asks ~20 masks of the same frame, several for the same Match (anchors, companions, regions,
    block kinds), and in pandas 3 every ``df[col]`` builds a new Series."""

    def __init__(self, df: pd.DataFrame):
        self.n = len(df)
        self._df = df
        self._cols: dict = {}
        self._hits: dict = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, col):
        got = self._cols.get(col)
        if got is None:
            got = self._cols[col] = self._df[col]
        return got

    def hit(self, m) -> np.ndarray:
        """Rows matching ``m`` (read-only: shared by every caller on this rank)."""
        got = self._hits.get(id(m))
        if got is None or got[0] is not m:
            got = self._hits[id(m)] = (m, _one_match(self, m))
            got[1].flags.writeable = False
        return got[1]


def match_mask(df: pd.DataFrame, matches) -> np.ndarray:
    """Rows matching any of ``matches`` (:class:`perfgate.policy.knowledge.Match`; all regexes of one
    match must hit). Columns: ``name``, ``family``, ``op_type``, ``core_type``. Regexes run once
    per distinct value. ``df``: a frame, or a :class:`_Matcher` of one (masks remembered)."""
    out = np.zeros(len(df), dtype=bool)
    for m in matches:
        out |= df.hit(m) if isinstance(df, _Matcher) else _one_match(df, m)
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
            self.mpos = np.flatnonzero(~side)                      # main rows; ordinal = index here
            n = len(self.mpos) + 1
            pw = np.cumprod(np.full(n, _M, dtype=np.uint64)) * _MINV  # M**0 .. M**(n-1)
            self.ipw = np.cumprod(np.full(n, _MINV, dtype=np.uint64)) * _M
            self.main = np.concatenate([[np.uint64(0)], np.cumsum(h[self.mpos] * pw[:n - 1], dtype=np.uint64)])
            self.spos = np.flatnonzero(multiset)
            self.side = np.concatenate([[np.uint64(0)], np.cumsum(_mix(h[self.spos]), dtype=np.uint64)])

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """uint64 signature per inclusive range [a, b] (arrays of positions)."""
        with np.errstate(over="ignore"):
            oa = np.searchsorted(self.mpos, a)                     # main rows before a
            m = (self.main[np.searchsorted(self.mpos, b, side="right")] - self.main[oa]) * self.ipw[oa]
            s = self.side[np.searchsorted(self.spos, b, side="right")] - self.side[np.searchsorted(self.spos, a)]
            return _mix(_mix(m) ^ (s * _M))


def _hex(v: np.ndarray) -> np.ndarray:
    """8 hex digits (the high 32 bits) per uint64, formatted once per distinct value."""
    if not len(v):
        return np.array([], dtype=object)
    u, inv = np.unique(v, return_inverse=True)
    return np.array([f"{int(x) >> 32:08x}" for x in u], dtype=object)[inv.reshape(-1)]


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


class _Steps:
    """Step layout of the concatenated main-stream rows of all steps: ``lo`` / ``hi`` (per step,
    first / last position), ``of`` (per position, its step). A per-step "none" is ``lo - 1``
    (before the step) or ``hi + 1`` (after it), so every per-step rule reads the same as on one
    step's own arrays shifted by ``lo``."""

    def __init__(self, of: np.ndarray, nsteps: int):
        self.of = of
        self.lo = np.searchsorted(of, np.arange(nsteps), side="left").astype(np.int64)
        self.hi = np.searchsorted(of, np.arange(nsteps), side="right").astype(np.int64) - 1

    def prev_at(self, where: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Per position ``at``: the last position <= it in its step in the sorted positions
        ``where`` (else the step's lo - 1)."""
        i = np.searchsorted(where, at, side="right") - 1
        v = where[np.maximum(i, 0)] if len(where) else np.zeros(len(at), dtype=np.int64)
        lo = self.lo[self.of[at]]
        return np.where((i >= 0) & (v >= lo), v, lo - 1)

    def next_at(self, where: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Per position ``at``: the first position >= it in its step in the sorted positions
        ``where`` (else the step's hi + 1)."""
        i = np.searchsorted(where, at, side="left")
        v = where[np.minimum(i, len(where) - 1)] if len(where) else np.zeros(len(at), dtype=np.int64)
        hi = self.hi[self.of[at]]
        return np.where((i < len(where)) & (v <= hi), v, hi + 1)


class _FamIndex:
    """Positions of the learned rules' kernel families in one sorted key array (family * B +
    position), so "the k-th row of family f before position p" and "rows of family f in
    [x, y)" are one ``searchsorted`` for all steps at once."""

    def __init__(self, fam: np.ndarray, families: np.ndarray):
        """Index of the rows of ``families`` (only those may be asked for)."""
        self.B = np.int64(len(fam) + 1)
        rows = np.flatnonzero(np.isin(fam, families))
        self.order = rows[np.argsort(fam[rows], kind="stable")]   # by family, then position
        self.keys = fam[self.order].astype(np.int64) * self.B + self.order

    def rank(self, f: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Index in the key array of the first row of family ``f`` at position >= ``p``."""
        return np.searchsorted(self.keys, f.astype(np.int64) * self.B + p, side="left")

    def count(self, f, x, y) -> np.ndarray:
        """Rows of family ``f`` at positions [x, y) (0 when y <= x)."""
        return np.maximum(self.rank(f, y) - self.rank(f, x), 0)


def _ragged(lo: np.ndarray, n: np.ndarray) -> tuple:
    """Concatenated ranges [lo[g], lo[g] + n[g]) (n < 0 counts as empty): (positions, group)."""
    n = np.maximum(n, 0)
    g = np.repeat(np.arange(len(lo)), n)
    off = np.cumsum(n) - n
    return np.arange(int(n.sum()), dtype=np.int64) - off[g] + lo[g], g


def _group_pick(g: np.ndarray, v: np.ndarray, ngroups: int, default, last: bool) -> np.ndarray:
    """Per group (``g`` sorted): the first (``last=False``) or last value ``v`` of it, else ``default``."""
    out = np.full(ngroups, default, dtype=np.int64)
    if len(g):
        edge = np.concatenate([[True], g[1:] != g[:-1]]) if not last else np.concatenate([g[1:] != g[:-1], [True]])
        out[g[edge]] = v[edge]
    return out


@dataclass
class _Rule:
    """Learned boundary rule of one pass, per step (see :func:`_learn`); ``has`` False where the
    step has no run to learn from."""
    has: np.ndarray
    f: np.ndarray
    k: np.ndarray
    off: np.ndarray
    tail: np.ndarray
    length: np.ndarray
    fx: "_FamIndex | None" = None


@dataclass(frozen=True)
class _Hits:
    """Anchor hits of every step in time order: ``pos`` (position in the concatenated
    main-stream rows), ``code`` (0 forward, 1 backward hit), ``step`` (the hit's step,
    nondecreasing)."""
    pos: np.ndarray
    code: np.ndarray
    step: np.ndarray


@dataclass(frozen=True)
class _Fences:
    """Per hit: the last pipeline row (``pipe``) and the last embedding / loss row
    (``region``) at or before it in its step (else the step's lo - 1); no layer spans them."""
    pipe: np.ndarray
    region: np.ndarray


@dataclass(frozen=True)
class _MainRows:
    """Per position of the concatenated main-stream rows, what the layer cuts read: ``fam``
    (family code), ``lead`` (a lead kernel of its step's anchor rule), ``stop`` (a tail /
    optimizer row), ``pipe`` (a pipeline row comes right before it), ``region_stop`` (an
    embedding / loss row)."""
    fam: np.ndarray
    lead: np.ndarray
    stop: np.ndarray
    pipe: np.ndarray
    region_stop: np.ndarray


def _learn(fam, hits: _Hits, nsteps, lead, fences: _Fences, lower, p) -> _Rule:
    """Boundary rule of pass ``p`` (0 forward, 1 backward) in every step, from the step's first
    two consecutive hits (same pass, no pipeline / region-stop row between): the first layer
    starts where the kernel sequence stops repeating backwards (``fam[q] == fam[q + P]``, P = the
    distance to the next hit; not before ``lower``), moved forward to the first ``lead`` kernel
    (forward pass: the input norm); later layers start at the k-th kernel of that first layer's
    starting family before their anchor (k = how many the first layer has before its anchor).

    Per step: family, k, ``off`` (kernels from the first layer's start to its anchor), ``tail``
    (kernels after the anchor to the layer's end), ``length`` (the first layer's kernels).
    ``fx``: the positions of the rules' families (:class:`_FamIndex`), for :func:`_apply`."""
    code, hstep, pp, sph = hits.code, hits.step, fences.pipe, fences.region
    z = np.zeros(nsteps, dtype=np.int64)
    rule = _Rule(np.zeros(nsteps, dtype=bool), z.copy(), z.copy(), z.copy(), z.copy(), z.copy())
    if len(hits.pos) < 2:
        return rule
    a1 = hits.pos[:-1]
    ok = (code[:-1] == p) & (code[1:] == p) & (hstep[:-1] == hstep[1:]) & (pp[1:] <= a1) & (sph[1:] <= a1)
    cand = np.flatnonzero(ok)
    if not len(cand):
        return rule
    cs = hstep[cand]
    i0 = cand[np.concatenate([[True], cs[1:] != cs[:-1]])]       # the first pair of each step
    a1, a2 = hits.pos[i0], hits.pos[i0 + 1]
    P = a2 - a1
    lo = np.maximum(lower[i0], a1 - P + 1)
    q, g = _ragged(lo, a1 - lo)
    bad = fam[q] != fam[q + P[g]]
    lastbad = _group_pick(g[bad], q[bad], len(i0), -1, last=True)
    s = np.where(lastbad >= 0, lastbad + 1, lo)
    if lead is not None:
        nx = _next_true(lead, len(lead))[np.minimum(s, len(lead) - 1)]
        s = np.where((s <= a1) & (nx <= a1), nx, s)
    s = np.minimum(s, a1)
    f = fam[s]
    rule.fx = fx = _FamIndex(fam, np.unique(f))
    k = fx.count(f, s, a1)
    s2 = a2 - (a1 - s)
    later = fx.count(f, a1 + 1, a2)
    use = (k > 0) & (later >= k)
    kth = fx.order[np.clip(fx.rank(f, a2) - k, 0, len(fx.order) - 1)]
    s2 = np.where(use, kth, s2)
    st = hstep[i0]
    rule.has[st] = True
    rule.f[st], rule.k[st], rule.off[st], rule.tail[st], rule.length[st] = f, k, a1 - s, s2 - 1 - a1, s2 - s
    return rule


def _apply(rule: _Rule, hit_pos, hstep, m, lower, prev_hit, prev_same, lo_of_step):
    """Starts of the hits ``m`` under their step's learned rule (see :func:`_learn`): the k-th
    kernel of the rule's family before the anchor when it lies at or after ``lower``; else
    right after the previous layer's anchor + tail (previous hit of the same pass), else
    anchor − offset."""
    st = hstep[m]
    fx = rule.fx
    f, kk, off, tail = rule.f[st], rule.k[st], rule.off[st], rule.tail[st]
    hp = hit_pos[m]
    idx = fx.rank(f, hp) - kk
    valid = (kk > 0) & (idx >= fx.rank(f, lo_of_step[st]))
    cand = fx.order[np.clip(idx, 0, len(fx.order) - 1)]
    fb = np.where(prev_same[m], prev_hit[m] + tail + 1, hp - off)
    s = np.where(valid & (cand >= lower[m]), cand, fb)
    return np.minimum(np.maximum(s, lower[m]), hp)


def _layer_cuts(rows: _MainRows, hits: _Hits, lead_max, sp: "_Steps"):
    """Layer ranges of every step at once: (starts, ends) aligned with ``hits.pos``, positions
    in the concatenated main-stream rows (``sp``: its step layout; ``lead_max`` per step).
    Start rule per step and pass from :func:`_learn` (forward first: a backward layer right
    after a forward one starts after that forward layer's learned length); a layer ends where
    the next one of its step starts, except the last layer before a non-layer region (a
    pipeline row, a tail / optimizer row, the step end, or the next pass), which is as long as
    the layer before it, no longer than the repeating part (``fam[q] == fam[q - P]``) and stops
    before a stop row."""
    hit_pos, hstep = hits.pos, hits.step
    fences = _Fences(sp.prev_at(np.flatnonzero(rows.pipe), hit_pos),          # no layer spans a
                     sp.prev_at(np.flatnonzero(rows.region_stop), hit_pos))   # pipeline / loss row
    first = np.concatenate([[True], hstep[1:] != hstep[:-1]])
    prev_hit = np.concatenate([[0], hit_pos[:-1]])
    prev_hit[first] = sp.lo[hstep][first] - 1
    starts, rules = _layer_starts(rows, hits, lead_max, sp, fences, prev_hit)
    ends = np.empty(len(hit_pos), dtype=np.int64)
    ends[:-1] = starts[1:] - 1
    lastin = np.concatenate([hstep[1:] != hstep[:-1], [True]])
    ends[lastin] = sp.hi[hstep][lastin]
    _cap_last_layers(rows, hits, sp, fences, (starts, ends), rules)
    return starts, ends


def _layer_starts(rows: _MainRows, hits: _Hits, lead_max, sp: "_Steps", fences: _Fences, prev_hit) -> tuple:
    """Start of every hit's layer (see :func:`_layer_cuts`) and the learned rule of each pass
    ({0: forward, 1: backward} :class:`_Rule`, passes without hits left out)."""
    fam, lead, hit_pos, code, hstep = rows.fam, rows.lead, hits.pos, hits.code, hits.step
    pp, sph = fences.pipe, fences.region
    nsteps = len(sp.lo)
    first = np.concatenate([[True], hstep[1:] != hstep[:-1]])
    prev_code = np.concatenate([[-1], code[:-1]])
    prev_code[first] = -1
    prev_same = (prev_code == code) & (pp <= prev_hit) & (sph <= prev_hit)
    lower = np.maximum(np.maximum(prev_hit + 1, sph + 1), np.maximum(pp, sp.lo[hstep]))
    starts = hit_pos.copy()
    rules = {}
    for p in (0, 1):
        m = code == p
        if not m.any():
            continue
        with_p = np.bincount(hstep[m], minlength=nsteps) > 0
        if p == 1 and 0 in rules:   # after a forward layer: past its length
            fr = rules[0]
            idx = np.flatnonzero((prev_code == 0) & (pp <= prev_hit) & fr.has[hstep] & with_p[hstep])
            lower[idx] = np.maximum(lower[idx], starts[idx - 1] + fr.length[hstep[idx]])
        r = _learn(fam, hits, nsteps, lead if p == 0 else None, fences, lower, p)
        rules[p] = r
        learned = m & r.has[hstep]
        if learned.any():
            starts[learned] = _apply(r, hit_pos, hstep, learned, lower, prev_hit, prev_same, sp.lo)
        rest = np.flatnonzero(m & ~r.has[hstep])
        if p == 1:   # no run to learn from: right after the layer / segment before it
            starts[rest] = np.minimum(lower[rest], hit_pos[rest])
        else:        # no run to learn from: the run of lead kernels nearest before the anchor
            rest = rest[lead_max[hstep[rest]] > 0]
            if not len(rest):
                continue
            q = _prev_true(lead)[hit_pos[rest]]
            near = q >= np.maximum(lower[rest], hit_pos[rest] - lead_max[hstep[rest]])
            rest, q = rest[near], q[near]
            run0 = _prev_true(~lead)[q] + 1                      # first of the lead run holding q
            starts[rest] = np.maximum(run0, lower[rest])
    return starts, rules


def _cap_last_layers(rows: _MainRows, hits: _Hits, sp: "_Steps", fences: _Fences, cuts: tuple, rules: dict) -> None:
    """Shorten, in ``cuts`` (starts, ends), the last layer before a non-layer region (a pipeline
    or loss row after it, the next pass, or the step end): as long as the layer before it of the
    same pass, no longer than where the kernel sequence stops repeating that layer, and before
    the next stop row; the first layer of a run gets its pass's learned length instead."""
    fam, hit_pos, code, hstep = rows.fam, hits.pos, hits.code, hits.step
    pp, sph = fences.pipe, fences.region
    starts, ends = cuts
    hhi = sp.hi[hstep]
    first = np.concatenate([[True], hstep[1:] != hstep[:-1]])
    lastin = np.concatenate([hstep[1:] != hstep[:-1], [True]])
    nxt_pass_change = np.concatenate([code[1:] != code[:-1], [True]])
    pipe_between = np.concatenate([(pp[1:] > hit_pos[:-1]) | (sph[1:] > hit_pos[:-1]), [True]])
    last = nxt_pass_change | pipe_between | lastin
    lengths = ends - starts + 1
    L = np.flatnonzero(last)
    a = hit_pos[L]
    cap = ends[L]
    inside = a + 1 <= hhi[L]
    stop_next = sp.next_at(np.flatnonzero(rows.stop | rows.pipe | rows.region_stop),
                           np.minimum(a + 1, len(fam) - 1))
    cap = np.where(inside, np.minimum(cap, stop_next - 1), cap)
    prevL = np.maximum(L - 1, 0)
    same_prev = ~first[L] & ~last[prevL] & (code[prevL] == code[L])
    P = a - hit_pos[prevL]
    cap = np.where(same_prev, np.minimum(cap, starts[L] + lengths[prevL] - 1), cap)
    hi = np.minimum(cap, hhi[L])
    sel = np.flatnonzero(same_prev & (hi > a))
    q, g = _ragged(a[sel] + 1, hi[sel] - a[sel])
    bad = fam[q] != fam[q - P[sel][g]]
    firstbad = _group_pick(g[bad], q[bad], len(sel), -1, last=False)
    cap[sel] = np.where(firstbad >= 0, firstbad - 1, cap[sel])
    ruled = ~same_prev
    for p, r in rules.items():
        m = ruled & (code[L] == p) & r.has[hstep[L]]
        cap = np.where(m, np.minimum(cap, starts[L] + r.length[hstep[L]] - 1), cap)
    ends[L] = np.maximum(cap, a)


def _step_names(step: pd.Series, at: np.ndarray) -> list:
    """``[str(x) for x in step.iloc[at]]``; for a categorical (the kernel table's step column)
    from its categories' Python values and the codes at ``at`` (no Series ``iloc``, ~0.4 ms per
    rank). Every row at ``at`` holds a step (blank-step rows are not segmented)."""
    if isinstance(step.dtype, pd.CategoricalDtype):
        codes = step.array.codes[at]
        if (codes >= 0).all():
            cats = step.array.categories.tolist()
            return [str(cats[c]) for c in codes.tolist()]
    return [str(x) for x in step.iloc[at]]


def _rows_of(df: pd.DataFrame, pos: np.ndarray, used: list) -> pd.DataFrame:
    """``df.iloc[pos, [columns used]]`` (the same frame: columns, dtypes, index) built from
    each column's array ``take`` (~0.3 ms instead of ~0.5 ms on a small rank). Columns named
    twice keep the ``iloc`` form."""
    if df.columns.has_duplicates:
        return df.iloc[pos, [df.columns.get_loc(c) for c in used]]
    return pd.DataFrame({c: df[c].array.take(pos) for c in used}, index=df.index.take(pos), copy=False)


@dataclass(frozen=True)
class _StepBounds:
    """The steps of one rank's time-ordered kernel rows: ``names`` (step label text), ``lo`` /
    ``hi`` (first / last row position of each step), ``of`` (per row, its step number)."""
    names: list
    lo: np.ndarray
    hi: np.ndarray
    of: np.ndarray


@dataclass(frozen=True)
class _RankRows:
    """One rank's kernel rows in (step, start, row) order: the frame ``k`` (with its ``family``
    column) and its :class:`_Matcher` ``mk``; per row ``fam`` (family code), ``h`` (signature
    hash), ``comm`` (communication row), ``side`` (off its step's main stream), ``rows``
    (source row number), ``start`` / ``end`` / ``dur`` (ns)."""
    k: pd.DataFrame
    mk: _Matcher
    fam: np.ndarray
    h: np.ndarray
    comm: np.ndarray
    side: np.ndarray
    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray


@dataclass(frozen=True)
class _Regions:
    """Per row, the non-layer rules: ``tail`` (tail / optimizer rows), ``pipe`` (pipeline rows),
    ``code`` (``regions`` label code into ``names``, ``names[0] == ""``), ``attach`` (side rows
    in no named region, which may join the next layer), ``stop`` (embedding / loss rows, which
    no layer spans), ``grad`` (gradient kernels, :data:`_GRADIENT`)."""
    tail: np.ndarray
    pipe: np.ndarray
    code: np.ndarray
    names: np.ndarray
    attach: np.ndarray
    stop: np.ndarray
    grad: np.ndarray


@dataclass(frozen=True)
class _Chosen:
    """Per row, the masks of its step's chosen anchor rule: ``hit`` (anchor hits), ``bwd``
    (backward hits), ``lead`` (lead kernels), ``companion`` (companion-rule hits); per step,
    ``lead_max`` (0: none) and ``anchor`` (the rule's name, None: no rule)."""
    hit: np.ndarray
    bwd: np.ndarray
    lead: np.ndarray
    companion: np.ndarray
    lead_max: np.ndarray
    anchor: np.ndarray


@dataclass(frozen=True)
class _Layers:
    """The layers of every step in time order: ``lo`` / ``hi`` (first / last row position),
    ``step``, ``pass`` (forward | recompute | backward), ``microbatch``, ``model_layer``."""
    lo: np.ndarray
    hi: np.ndarray
    step: np.ndarray
    passes: np.ndarray
    microbatch: np.ndarray
    model_layer: np.ndarray


@dataclass(frozen=True)
class _Segs:
    """Every segment of the rank in row order (layers and non-layer runs): ``lo`` / ``hi``
    (first / last row position), ``kind``, ``passes`` (layers; "" otherwise), ``step`` (step
    number), ``anchor`` (layers: the anchor rule's name), ``microbatch``, ``model_layer``
    (layers; 0 otherwise)."""
    lo: np.ndarray
    hi: np.ndarray
    kind: np.ndarray
    passes: np.ndarray
    step: np.ndarray
    anchor: np.ndarray
    microbatch: np.ndarray
    model_layer: np.ndarray


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

    Cost: one sort and O(rows) array passes for all steps at once; no Python loop per step,
    layer, block or row (see the module doc).
    """
    k, pos = _time_ordered(df, family_suffix)
    if not len(k):
        return _empty()
    bounds = _step_bounds(k["step"])
    rr = _rank_rows(k, rules, bounds)
    regions = _regions(rr, rules)
    chosen = _chosen_anchor(rr, rules, bounds)
    layers = _layer_ranges(rr, bounds, regions, chosen)
    segs = _segments(layers, regions, bounds, chosen)
    _check_all(segs.lo, segs.hi, bounds, rr.rows, segs.kind, path)
    cats = _category_codes(categories, df, pos, k)
    return _tables(rr, rules, segs, bounds, cats)


def _time_ordered(df: pd.DataFrame, family_suffix) -> tuple:
    """The step-assigned rows of ``df`` in (step, start, source row) order, with their kernel
    ``family`` column, and their positions in ``df``. The table itself (no copy) when it is in
    that order already."""
    used = [c for c in ("row", "step", "name", "op_type", "core_type", "stream_id", "start_ns", "end_ns",
                        "dur_ns", "is_comm", "input_shapes") if c in df.columns]
    keep = np.flatnonzero(df["step"].notna().to_numpy())
    step_key = df["step"].cat.codes.to_numpy() if isinstance(df["step"].dtype, pd.CategoricalDtype) else \
        pd.factorize(df["step"], sort=True)[0]
    pos = keep[np.lexsort((df["row"].to_numpy()[keep], df["start_ns"].to_numpy()[keep], step_key[keep]))]
    if len(pos) < len(df) or (np.diff(pos) != 1).any():
        k = _rows_of(df, pos, used)
    else:   # rows already in (step, start, row) order: the table itself (columns read by name only)
        k = df
    return k.assign(family=km.family_of(k["name"], family_suffix)), pos


def _step_bounds(step: pd.Series) -> _StepBounds:
    """Where each step's rows begin and end in the time-ordered rows (steps are contiguous)."""
    N = len(step)
    scode = pd.factorize(step.astype(str) if not isinstance(step.dtype, pd.CategoricalDtype)
                         else step.cat.codes, sort=False)[0]
    cuts = np.flatnonzero(np.diff(scode)) + 1
    lo = np.concatenate([[0], cuts]).astype(np.int64)
    hi = np.concatenate([cuts - 1, [N - 1]]).astype(np.int64)
    return _StepBounds(_step_names(step, lo), lo, hi, np.repeat(np.arange(len(lo)), hi - lo + 1))


def _rank_rows(k: pd.DataFrame, rules, bounds: _StepBounds) -> _RankRows:
    """The per-row arrays of the time-ordered rows (see :class:`_RankRows`). A step's main
    stream is the stream with most compute rows; rows on other streams and communication rows
    are side rows (so their timing cannot move a layer boundary)."""
    mk = _Matcher(k)   # the match columns read once, each rule's mask computed once
    fam = mk["family"].cat.codes.to_numpy().astype(np.int64)
    h = _hashes(mk["family"])
    if getattr(rules, "shapes", False) and "input_shapes" in k:
        h = h ^ (_hashes(k["input_shapes"]) * _M)
    comm = k["is_comm"].to_numpy().astype(bool)
    stream = km.sorted_codes(k["stream_id"]) if "stream_id" in k else np.full(len(k), -1)
    sidx, nsteps = bounds.of, len(bounds.lo)
    side = comm.copy()
    ok = ~comm & (stream >= 0)
    if ok.any():
        ns = int(stream.max()) + 1
        cnt = np.bincount(sidx[ok] * ns + stream[ok], minlength=nsteps * ns).reshape(nsteps, ns)
        has = cnt.sum(axis=1) > 0
        main = cnt.argmax(axis=1)
        side = comm | ((stream >= 0) & has[sidx] & (stream != main[sidx]))
    rows, start, end, dur = (k[c].to_numpy() for c in ("row", "start_ns", "end_ns", "dur_ns"))
    return _RankRows(k, mk, fam, h, comm, side, rows, start, end, dur)


def _regions(rr: _RankRows, rules) -> _Regions:
    """The tail, pipeline and ``regions`` rule matches of every row (see :class:`_Regions`)."""
    N = len(rr.rows)
    tail = match_mask(rr.mk, rules.tail)
    pipe = match_mask(rr.mk, rules.pipeline) if rules.pipeline else np.zeros(N, dtype=bool)
    region, rnames = _region_labels(rr.mk, rules, N)          # int codes; rnames[0] == ""
    attach = rr.side & (region == 0)
    stop = np.isin(region, [i for i, x in enumerate(rnames) if x in ("embedding", LM_HEAD_LOSS)])
    grad = km.matches(rr.mk["name"], _GRADIENT) | km.matches(rr.mk["op_type"], _GRADIENT)
    return _Regions(tail, pipe, region, rnames, attach, stop, grad)


def _anchor_masks(mk: _Matcher, rules, sidx: np.ndarray) -> list:
    """Per anchor rule: (rule, hit, backward hit, lead, companion-hit mask or None). A hit
    within ``within`` rows after an ``unless_after`` row of its step does not count."""
    N = len(mk)
    by_name = {a.name: a for a in rules.anchors}
    masks = []
    for a in rules.anchors:
        comp = [by_name[c] for c in a.companions]
        bwd = match_mask(mk, a.backward) if a.backward else np.zeros(N, dtype=bool)
        fwd = match_mask(mk, a.match) & ~bwd
        hit = fwd | bwd
        if a.unless_after:
            ua = match_mask(mk, a.unless_after)
            pu = _prev_true(np.concatenate([[False], ua[:-1]]))    # last unless row strictly before
            near = (pu >= 0) & (np.arange(N) - pu <= a.within)
            near &= sidx[np.clip(pu, 0, None)] == sidx
            hit &= ~near
        lead = match_mask(mk, a.lead + tuple(m for c in comp for m in c.lead))
        cmask = match_mask(mk, tuple(m for c in comp for m in c.match)) & ~hit if comp else None
        masks.append((a, hit, bwd, lead, cmask))
    return masks


def _chosen_anchor(rr: _RankRows, rules, bounds: _StepBounds) -> _Chosen:
    """Per step, the first anchor rule with enough hits (:func:`_select_anchor`), and its masks
    on the step's rows (see :class:`_Chosen`)."""
    N, sidx = len(rr.rows), bounds.of
    masks = _anchor_masks(rr.mk, rules, sidx)
    choice = _select_anchor(rules, masks, sidx, len(bounds.lo))
    ch = choice[sidx]
    hit_s, bwd_s, lead_s, cm_s = (np.zeros(N, dtype=bool) for _ in range(4))
    for i, (a, hit, bwd, lead, cmask) in enumerate(masks):
        r = ch == i
        hit_s |= hit & r
        bwd_s |= bwd & r
        lead_s |= lead & r
        if cmask is not None:
            cm_s |= cmask & r
    lead_max = np.array([a.lead_max or 0 for a, *_ in masks] + [0], dtype=np.int64)[choice]
    anchor_name = np.array([a.name for a, *_ in masks] + [None], dtype=object)[choice]
    return _Chosen(hit_s, bwd_s, lead_s, cm_s, lead_max, anchor_name)


def _layer_ranges(rr: _RankRows, bounds: _StepBounds, regions: _Regions, chosen: _Chosen) -> _Layers:
    """The layers of every step at once (see the module doc). Cuts are made on the concatenated
    main-stream rows, so side rows cannot move a boundary; then side rows in no named region
    right before a layer's first main-stream row (e.g. a MoE combine alltoall) join that layer,
    and side rows between touching layers join the earlier one."""
    mi = np.flatnonzero(~rr.side)
    sp = _Steps(bounds.of[mi], len(bounds.lo))
    u = np.flatnonzero((chosen.hit | chosen.companion)[mi])      # anchor and companion hits
    flag = chosen.companion[mi[u]]
    ustep = sp.of[u]
    ufirst = np.concatenate([[True], ustep[1:] != ustep[:-1]])
    keepm = ~flag | ufirst | np.concatenate([[True], flag[:-1]])   # a companion right after a hit: same layer
    hits = _Hits(u[keepm], chosen.bwd[mi[u[keepm]]].astype(np.int64), sp.of[u[keepm]])
    if not len(hits.pos):
        z = np.zeros(0, dtype=np.int64)
        return _Layers(z, z, hits.step, np.zeros(0, dtype=object), z, z)
    pm = _pipeline_before(regions.pipe, mi, sp, bounds.of)
    main = _MainRows(rr.fam[mi], chosen.lead[mi], regions.tail[mi], pm, regions.stop[mi])
    sm, em = _layer_cuts(main, hits, chosen.lead_max, sp)
    hstep = hits.step
    lastin = np.concatenate([hstep[1:] != hstep[:-1], [True]])
    touch = np.concatenate([(em[:-1] + 1 == sm[1:]) & ~pm[sm[1:]], [False]]) & ~lastin
    hpass, mb, model = _recompute(hits.code, touch, hstep)
    starts, ends = mi[sm], mi[em]
    lo = bounds.lo[hstep]
    prev_end = np.concatenate([[0], ends[:-1]])
    hfirst = np.concatenate([[True], hstep[1:] != hstep[:-1]])
    prev_end[hfirst] = lo[hfirst] - 1
    p_ = np.maximum(starts - 1, lo)
    cand = np.maximum(_prev_true(~regions.attach)[p_], lo - 1) + 1    # after the last non-attachable row <= p_
    starts = np.where((starts > lo) & regions.attach[p_], np.maximum(cand, prev_end + 1), starts)
    ends[touch] = starts[np.flatnonzero(touch) + 1] - 1
    return _Layers(starts, ends, hstep, hpass, mb, model)


def _pipeline_before(pipe: np.ndarray, mi: np.ndarray, sp: "_Steps", sidx: np.ndarray) -> np.ndarray:
    """Per main-stream position j: a pipeline row of the same step comes right before main row j."""
    pq = np.flatnonzero(pipe)
    pj = np.searchsorted(mi, pq)
    pok = pj < len(mi)
    pok[pok] = sp.of[pj[pok]] == sidx[pq[pok]]
    pm = np.zeros(len(mi), dtype=bool)
    pm[pj[pok]] = True
    return pm


def _segments(layers: _Layers, regions: _Regions, bounds: _StepBounds, chosen: _Chosen) -> _Segs:
    """The layers and the non-layer runs (rows outside layers, cut at layers, at step ends and
    where the ``regions`` label changes; see :func:`_fill_labels`), in row order. An unnamed run
    between a forward chain and the backward chain right after it is the head + loss."""
    N = len(bounds.of)
    cov = np.bincount(layers.lo, minlength=N + 1) - np.bincount(layers.hi + 1, minlength=N + 1)
    free = np.flatnonzero(np.cumsum(cov)[:N] <= 0)
    fstep = bounds.of[free]
    grp = np.concatenate([[True], (np.diff(free) != 1) | (fstep[1:] != fstep[:-1])]) if len(free) else \
        np.zeros(0, dtype=bool)
    lab = _fill_labels(regions.code[free], grp, regions.names, OTHER)
    fs = np.flatnonzero(np.concatenate([[True], grp[1:] | (lab[1:] != lab[:-1])])) if len(free) else \
        np.zeros(0, dtype=np.int64)
    fe = np.concatenate([fs[1:] - 1, [len(free) - 1]]) if len(free) else fs
    nl, nf = len(layers.lo), len(fs)
    a_lo = np.concatenate([layers.lo, free[fs]]).astype(np.int64)
    o = np.argsort(a_lo, kind="stable")
    seg = _Segs(
        a_lo[o], np.concatenate([layers.hi, free[fe]]).astype(np.int64)[o],
        np.concatenate([np.full(nl, LAYER, dtype=object), regions.names[lab[fs]]])[o],
        np.concatenate([layers.passes.astype(object), np.full(nf, "", dtype=object)])[o],
        np.concatenate([layers.step, fstep[fs]]).astype(np.int64)[o],
        np.concatenate([chosen.anchor[layers.step], np.full(nf, None, dtype=object)])[o],
        np.concatenate([layers.microbatch, np.zeros(nf, dtype=np.int64)]).astype(np.int64)[o],
        np.concatenate([layers.model_layer, np.zeros(nf, dtype=np.int64)]).astype(np.int64)[o])
    return _head_and_loss(seg, regions.grad)


def _head_and_loss(seg: _Segs, grad: np.ndarray) -> _Segs:
    """Name the head + loss: the non-layer runs between a forward layer and the backward layer
    right after it in one step (the last pipeline stage's final norm, LM head and loss, and their
    backward), when every run there is unnamed (``other``), gradient sync or ``lm_head_loss`` and
    one of them holds compute rows (``other`` / ``lm_head_loss``). Its ``other`` runs become
    ``lm_head_loss``, and so do its gradient-sync runs that start before its first gradient kernel
    (``grad``: name or type matching :data:`_GRADIENT`): no gradient exists there yet to
    synchronise, so such a collective is the loss's own (a vocab-parallel cross entropy's
    all-reduces of the logits' max, the target logit and the exp sum; the loss averaged over the
    data-parallel ranks). A collective after the first gradient kernel stays ``grad_sync`` (a DDP
    bucket fired by the head's weight gradient). Touching ``lm_head_loss`` runs are then one
    segment."""
    kind, n = seg.kind, len(seg.kind)
    lay = kind == LAYER
    if n < 3 or not lay.any():
        return seg
    pl, nl = _prev_true(lay), _next_true(lay, n)           # the layers before / after each run
    plc, nlc = np.clip(pl, 0, n - 1), np.clip(nl, 0, n - 1)
    inside = ~lay & (pl >= 0) & (nl < n)
    key = np.where(inside, pl, n)                          # a gap between two layers: the layer before it
    foreign = np.bincount(key[inside & ~np.isin(kind, (OTHER, GRAD_SYNC, LM_HEAD_LOSS))], minlength=n + 1)
    compute = np.bincount(key[inside & np.isin(kind, (OTHER, LM_HEAD_LOSS))], minlength=n + 1)
    head = inside & (seg.passes[plc] == FORWARD) & (seg.passes[nlc] == BACKWARD) & \
        (seg.step[plc] == seg.step[nlc]) & (foreign[key] == 0) & (compute[key] > 0)
    first_grad = np.concatenate([_next_true(grad, len(grad)), [len(grad)]])[seg.hi[plc] + 1]
    named = head & ((kind == OTHER) | ((kind == GRAD_SYNC) & (seg.lo < first_grad)))
    if not named.any():
        return seg
    kind = kind.copy()
    kind[named] = LM_HEAD_LOSS
    joined = np.concatenate([[False], (kind[1:] == LM_HEAD_LOSS) & (kind[:-1] == LM_HEAD_LOSS)
                             & (seg.lo[1:] == seg.hi[:-1] + 1) & (seg.step[1:] == seg.step[:-1])])
    keep = np.flatnonzero(~joined)
    last = np.concatenate([keep[1:] - 1, [n - 1]])         # the last run each kept segment absorbs
    return _Segs(seg.lo[keep], seg.hi[last], kind[keep], seg.passes[keep], seg.step[keep], seg.anchor[keep],
                 seg.microbatch[keep], seg.model_layer[keep])


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


def _recompute(code: np.ndarray, touch: np.ndarray, hstep: np.ndarray) -> tuple:
    """Passes and micro-batch numbers of the layers of every step (``code``: 0 forward,
    1 backward hit; ``hstep``: the layer's step, sorted).

    Layers that touch (``touch[i]``: layer i + 1 starts right after layer i in the same step,
    no pipeline row or other non-layer row between) form a chain; a chain of forward
    layers only is one forward micro-batch, a chain holding backward layers is one backward
    micro-batch, and forward layers inside such a chain are the ``recompute`` pass (activation
    checkpointing re-runs the forward inside the backward). Per step, forward chains are numbered
    1, 2, ... in time order, backward chains too (1F1B runs them in the same order).

    Returns (passes, microbatch, model layer): the model layer of a forward layer
    is its place in the chain, of a backward layer its place counted from the chain's end
    (backward runs the layers in reverse), of a recompute layer its place among the chain's
    recompute layers, or, for a lone recompute layer right before a backward layer (per-layer
    checkpointing), that backward layer's."""
    n = len(code)
    if not n:
        z = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=object), z, z
    brk = np.concatenate([[True], ~touch[:-1] | (hstep[1:] != hstep[:-1])])
    chain = np.cumsum(brk) - 1
    nchain = int(chain[-1]) + 1
    first = np.flatnonzero(brk)
    has_bwd = np.bincount(chain, weights=(code == 1), minlength=nchain) > 0
    out = np.where(code == 1, 2, np.where(has_bwd[chain], 1, 0))   # 0 forward, 1 recompute, 2 backward
    fwd_chain = ~has_bwd
    cstep = hstep[first]
    cfirst = np.flatnonzero(np.concatenate([[True], cstep[1:] != cstep[:-1]]))
    cgid = np.cumsum(np.concatenate([[True], cstep[1:] != cstep[:-1]])) - 1

    def per_step_cumsum(x):
        c = np.cumsum(x)
        return c - np.concatenate([[0], c])[cfirst][cgid]

    mb_of_chain = np.where(fwd_chain, per_step_cumsum(fwd_chain), per_step_cumsum(~fwd_chain))
    mb = mb_of_chain[chain]
    model = np.zeros(n, dtype=np.int64)
    for p in (0, 2, 1):
        m = out == p
        cnt = np.cumsum(m) - m                                    # earlier layers of pass p (all chains)
        base = np.concatenate([[0], np.cumsum(m)])[first][chain]  # ... before the chain starts
        place = cnt - base + 1
        tot = np.bincount(chain[m], minlength=nchain)[chain]
        model = np.where(m, tot - place + 1 if p == 2 else place, model)
    # per-layer recompute (R_n B_n R_n-1 B_n-1 ...): a lone recompute layer re-runs the layer whose
    # backward follows it
    rc = out == 1
    prev_rc = np.concatenate([[False], rc[:-1]]) & ~np.concatenate([[True], hstep[1:] != hstep[:-1]])
    lone = rc & ~prev_rc & ~np.concatenate([rc[1:], [False]]) & np.concatenate([out[1:] == 2, [False]]) & touch
    model[lone] = model[np.flatnonzero(lone) + 1]
    return np.array([FORWARD, RECOMPUTE, BACKWARD], dtype=object)[out], mb, model


def _fill_labels(lab: np.ndarray, grp_start: np.ndarray, names: np.ndarray, default: str) -> np.ndarray:
    """Unlabelled (code 0) rows of a non-layer run (runs start where ``grp_start``) take the label
    of the nearest labelled row before them in the same run, else after them, else ``default``;
    ``pipeline`` and ``grad_sync`` labels are never passed on (only the communication rows
    themselves are the pipeline / gradient-sync segments). ``lab``: codes into ``names``
    (``names[0] == ""``); returns codes into ``names``, which holds ``default``."""
    if not len(lab):
        return np.zeros(0, dtype=np.int64)
    lab = lab.astype(np.int64)
    gs = _prev_true(grp_start)
    has = (lab != 0) & ~np.isin(lab, [i for i, x in enumerate(names) if x in (PIPELINE, GRAD_SYNC)])
    pv = _prev_true(has)
    ok = (pv >= gs) & (pv >= 0)
    out = np.where((lab == 0) & ok, lab[np.clip(pv, 0, None)], lab)
    ge = np.concatenate([np.flatnonzero(grp_start)[1:] - 1, [len(lab) - 1]])
    gid = np.cumsum(grp_start) - 1
    nx = _next_true(has, len(lab))
    ok2 = (out == 0) & (nx <= ge[gid]) & (nx < len(lab))
    out = np.where(ok2, lab[np.clip(nx, 0, len(lab) - 1)], out)
    return np.where(out == 0, int(np.flatnonzero(names == default)[0]), out)


def _region_labels(k: pd.DataFrame, rules, n: int) -> tuple:
    """Per row: the code of the first ``regions`` rule it matches (pipeline, embedding, ...) or 0,
    and the names of the codes (object array: ``""``, the distinct region names, ``other``)."""
    names = [""] + list(dict.fromkeys(name for name, _ in rules.regions))
    if OTHER not in names:
        names.append(OTHER)
    lab = np.zeros(n, dtype=np.int8 if len(names) < 100 else np.int64)
    for name, matches in reversed(rules.regions):
        lab = np.where(match_mask(k, matches), names.index(name), lab).astype(lab.dtype)
    return lab, np.array(names, dtype=object)


def _check_all(a_lo, a_hi, bounds: _StepBounds, rows_all, kind, path):
    """Every row in exactly one segment and no segment across two steps (else
    :func:`check_lossless` names the rows of the first failing step)."""
    step_lo, step_hi, step_names = bounds.lo, bounds.hi, bounds.names
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


_STR_DTYPE: list = []
_STRS_MIN_ROWS = 4096


def _strs(values: np.ndarray, codes: np.ndarray | None = None, names: np.ndarray | None = None):
    """A column of Python strings (object array ``values``, or ``names[codes]``) as pandas would
    store it (its default string dtype), built from the distinct strings with one pyarrow
    ``take`` instead of one conversion per row; ``values`` unchanged when pandas keeps strings
    as objects, when a value is not a string, or when there are fewer than ``_STRS_MIN_ROWS``
    (the frame then converts them itself into the same column, faster: 80-140 µs against
    150-190 µs per column of 10-1,000 strings, the break-even near 5,000)."""
    if not _STR_DTYPE:
        _STR_DTYPE.append(pd.Series(["x"]).dtype)
    dt = _STR_DTYPE[0]
    if dt == object or len(values) < _STRS_MIN_ROWS:
        return values
    if codes is None:
        codes, names = pd.factorize(values)
    if pd.api.types.infer_dtype(names, skipna=False) != "string" or (codes < 0).any():
        return values
    import pyarrow as pa
    try:
        return pd.array(pa.array(list(names), type=pa.large_string()).take(pa.array(codes)), dtype=dt)
    except (TypeError, ValueError):   # a dtype that cannot hold arrow strings: let pandas convert
        return values


def _top_by(owner: np.ndarray, key: np.ndarray, dur_ns: np.ndarray, labels, top: int) -> dict:
    """{owner: [(label, ΣDuration µs), ...] the ``top`` largest, ties by key} in one pass over
    rows (``owner``, ``key``: int codes per row). Integer durations are summed by ``bincount``
    (float sums of integers below 2**53 ns are exact, as a pandas group-by's are);
    others through a pandas group-by."""
    if not len(owner):
        return {}
    key = np.asarray(key, dtype=np.int64)
    kmin = int(key.min())
    nk = int(key.max()) - kmin + 1
    pair = owner.astype(np.int64) * nk + (key - kmin)
    exact = np.issubdtype(np.asarray(dur_ns).dtype, np.integer) and int(np.abs(dur_ns).sum()) < 2 ** 53
    M = (int(owner.max()) + 1) * nk
    if exact and M <= 1 << 22:   # few (owner, key) pairs: index them directly
        uniq = np.flatnonzero(np.bincount(pair, minlength=M))
        d = np.bincount(pair, weights=dur_ns.astype(np.float64), minlength=M)[uniq]
    elif exact:
        codes, uniq = pd.factorize(pair)
        d = np.bincount(codes, weights=dur_ns.astype(np.float64), minlength=len(uniq))
    else:
        codes, uniq = pd.factorize(pair)
        d = pd.Series(np.asarray(dur_ns, dtype=float)).groupby(codes, sort=False).sum().to_numpy()
    o, kk = uniq // nk, uniq % nk + kmin
    srt = np.lexsort((kk, -d, o))
    o, kk, d = o[srt], kk[srt], d[srt]
    grp = np.concatenate([[True], o[1:] != o[:-1]])
    rank = np.arange(len(o)) - np.flatnonzero(grp)[np.cumsum(grp) - 1]
    sel = rank < top
    out: dict = {}
    for oo, k_, dd in zip(o[sel].tolist(), kk[sel].tolist(), d[sel].tolist()):
        out.setdefault(oo, []).append((labels[k_] if labels is not None else k_, dd / 1000.0))
    return out


@dataclass(frozen=True)
class _SegIndex:
    """Numbering of the segments: ``is_layer``, ``rows`` (row count per segment), ``of_row``
    (per row, its segment), ``step_name`` (per segment, its step's label), ``seg_no`` /
    ``layer_no`` (1-based within the step; layers counted among layers)."""
    is_layer: np.ndarray
    rows: np.ndarray
    of_row: np.ndarray
    step_name: np.ndarray
    seg_no: np.ndarray
    layer_no: np.ndarray


@dataclass(frozen=True)
class _Blocks:
    """The blocks of every layer in row order, as indexes into ``lp`` (the positions of the rows
    inside layers): ``bs`` / ``be`` (first / last row), ``kind``, ``layer`` (its segment),
    ``first`` (index of each layer's first block), ``no`` (1-based within the layer)."""
    lp: np.ndarray
    bs: np.ndarray
    be: np.ndarray
    kind: np.ndarray
    layer: np.ndarray
    first: np.ndarray
    no: np.ndarray


@dataclass(frozen=True)
class _Figures:
    """Per segment or block (µs): ``wall`` (last end − first start), ``sum_dur`` (ΣDuration),
    ``comm`` (ΣDuration of its communication rows)."""
    wall: np.ndarray
    sum_dur: np.ndarray
    comm: np.ndarray


@dataclass(frozen=True)
class _SegColumns:
    """The per-segment columns the layer and segment tables share: ``figures``, ``class_id``
    (layers: ``L…``; "" otherwise), ``kinds`` (layers: block kinds ``+``-joined), ``companion``."""
    figures: _Figures
    class_id: np.ndarray
    kinds: np.ndarray
    companion: np.ndarray


@dataclass(frozen=True)
class _ClassRows:
    """Per row, what a class's summary reads: ``fam`` (family code, names ``fam_names``),
    ``dur`` (ns), ``cat_codes`` / ``cat_names`` (policy category; None without categories)."""
    fam: np.ndarray
    fam_names: np.ndarray
    dur: np.ndarray
    cat_codes: np.ndarray | None
    cat_names: np.ndarray | None


def _category_codes(categories: pd.Series | None, df: pd.DataFrame, pos: np.ndarray, k: pd.DataFrame) -> tuple:
    """Per time-ordered row (``k``, rows ``pos`` of ``df``): the code of its category and the
    category names, codes in order of first appearance; (None, None) without ``categories``.
    A categorical aligned with ``df`` is read by its small codes, not its strings."""
    if categories is None:
        return None, None
    same = categories.index.equals(df.index)
    cc = categories.cat.codes.to_numpy()[pos] if same and isinstance(categories.dtype, pd.CategoricalDtype) \
        else None
    if cc is not None and (cc >= 0).all():    # factorize the small codes, not 1M strings
        seen = pd.unique(cc)                  # categories in order of first appearance
        remap = np.full(len(categories.cat.categories), -1, dtype=np.int64)
        remap[seen] = np.arange(len(seen))
        return remap[cc], np.asarray(categories.cat.categories.astype(str), dtype=object)[seen]
    cv = categories.iloc[pos] if same else categories.reindex(k.index)
    return pd.factorize(cv.astype(str).to_numpy())


def _tables(rr: _RankRows, rules, segs: _Segs, bounds: _StepBounds, cats: tuple) -> RankSegments:
    """The rank's tables (module doc) from its segments (at least one: every row of a non-empty
    rank is in one). ``cats``: :func:`_category_codes`."""
    idx = _seg_index(segs, bounds)
    blk = _cut_blocks(rr, rules, segs, idx)
    layer_kinds, kinv, kuniq = _layer_kinds(blk, len(segs.lo))
    sig = _Sig(rr.h, rr.side, rr.comm)
    lsig = sig(segs.lo, segs.hi)
    cls = np.full(len(segs.lo), "", dtype=object)
    is_layer = idx.is_layer
    cls[is_layer] = "L" + _hex(lsig[is_layer]).astype(object) if is_layer.any() else cls[is_layer]
    cols = _SegColumns(_span_figures(segs.lo, rr.start, rr.end, rr.dur, rr.comm), cls, layer_kinds,
                       _companions(blk, segs, idx, len(bounds.names)))
    snames = np.array(bounds.names, dtype=object)
    seg_tab = _segment_frame(segs, idx, cols, rr.rows, snames)
    layers = _layer_frame(segs, idx, cols, rr.rows, snames)
    bs, lp = blk.bs, blk.lp
    bsig = sig(lp[bs], lp[blk.be]) if len(bs) else np.zeros(0, dtype=np.uint64)
    bcls = np.array([f"B{x}:" for x in kuniq], dtype=object)[kinv] + _hex(bsig) if len(bs) else \
        np.zeros(0, dtype=object)
    blocks = _block_frame(blk, segs, idx, bcls, rr, snames)
    steps = _step_table(bounds, sig(bounds.lo, bounds.hi), segs, is_layer)
    fam_names = np.asarray(rr.k["family"].cat.categories.astype(str), dtype=object)
    classes = _classes(layers, blocks, segs, idx, blk, _ClassRows(rr.fam, fam_names, rr.dur, *cats),
                       len(bounds.names))
    return RankSegments(layers, blocks, steps, seg_tab, classes)


def _seg_index(segs: _Segs, bounds: _StepBounds) -> _SegIndex:
    """Per-step numbering of the segments and of the layers among them (see :class:`_SegIndex`)."""
    st_ = segs.step
    nseg = len(st_)
    rows_n = segs.hi - segs.lo + 1
    is_layer = segs.kind == LAYER
    first_in_step = np.concatenate([[True], st_[1:] != st_[:-1]])
    fi = np.flatnonzero(first_in_step)
    gid = np.cumsum(first_in_step) - 1
    lcum = np.cumsum(is_layer)
    lbase = np.concatenate([[0], lcum])[fi][gid]
    return _SegIndex(is_layer, rows_n, np.repeat(np.arange(nseg), rows_n),
                     np.array(bounds.names, dtype=object)[st_], np.arange(nseg) - fi[gid] + 1, lcum - lbase)


def _span_figures(at: np.ndarray, start, end, dur, comm) -> _Figures:
    """:class:`_Figures` of the consecutive ranges of rows starting at ``at`` (each up to the
    next start, the last to the end of the arrays)."""
    if not len(at):
        return _Figures(np.zeros(0), np.zeros(0), np.zeros(0))
    return _Figures((np.maximum.reduceat(end, at) - np.minimum.reduceat(start, at)) / 1000.0,
                    np.add.reduceat(dur.astype(np.float64), at) / 1000.0,
                    np.add.reduceat(np.where(comm, dur, 0).astype(np.float64), at) / 1000.0)


def _cut_blocks(rr: _RankRows, rules, segs: _Segs, idx: _SegIndex) -> _Blocks:
    """Blocks inside layers: cut at a layer's start, before ``cut_before`` kernels (norms) and
    where AI_CPU runs begin or end; typed by :func:`_block_kinds`; default-kind blocks next to an
    attention block join it (its prologue / epilogue: QKV, q/k norm); adjacent blocks of one kind
    in one layer merged."""
    N = len(rr.rows)
    in_layer = idx.is_layer[idx.of_row]
    cut = match_mask(rr.mk, rules.blocks.cut_before)
    aicpu = km.matches(rr.mk["core_type"], rules.blocks.aicpu_core) if rules.blocks.aicpu_core else np.zeros(N, bool)
    seg_start = np.zeros(N, dtype=bool)
    seg_start[segs.lo] = True
    edge = np.concatenate([[True], aicpu[1:] != aicpu[:-1]])
    lp = np.flatnonzero(in_layer)
    bs = np.flatnonzero((seg_start | cut | edge)[lp])           # block starts, index into lp
    bk = _block_kinds(rr.mk, rules.blocks, aicpu[lp], lp, bs)
    blayer = idx.of_row[lp[bs]] if len(bs) else np.zeros(0, dtype=np.int64)
    if len(bs):
        bk = _absorb(bk, blayer, rules.blocks.default, "attention")
    keepb = np.concatenate([[True], (bk[1:] != bk[:-1]) | (blayer[1:] != blayer[:-1])]) if len(bs) else bs.astype(bool)
    bs, bk, blayer = bs[keepb], bk[keepb], blayer[keepb]
    be = np.concatenate([bs[1:] - 1, [len(lp) - 1]]) if len(bs) else bs
    bfirst = np.concatenate([[True], blayer[1:] != blayer[:-1]]) if len(bs) else bs.astype(bool)
    bfi = np.flatnonzero(bfirst)
    bno = np.arange(len(bs)) - bfi[np.cumsum(bfirst) - 1] + 1 if len(bs) else bs
    return _Blocks(lp, bs, be, bk, blayer, bfi, bno)


def _block_kinds(mk: _Matcher, blocks, aicpu_l: np.ndarray, lp: np.ndarray, bs: np.ndarray) -> np.ndarray:
    """Per block (starts ``bs`` into the layer rows ``lp``): ``aicpu`` when all its rows run on
    AI_CPU, else the first ``kinds`` rule any of its rows matches, else the default kind."""
    if not len(bs):
        return np.zeros(0, dtype=object)
    out = np.full(len(bs), blocks.default, dtype=object)
    done = np.zeros(len(bs), dtype=bool)
    allcpu = np.logical_and.reduceat(aicpu_l, bs)
    out[allcpu] = "aicpu"
    done |= allcpu
    for kd, m in blocks.kinds:
        anyk = np.logical_or.reduceat(match_mask(mk, m)[lp], bs) & ~done
        out[anyk] = kd
        done |= anyk
    return out


def _layer_kinds(blk: _Blocks, nseg: int) -> tuple:
    """Per segment, its layer's block kinds ``+``-joined ("" for non-layers), built once per
    distinct kind sequence; per block, the code of its kind among the sorted distinct kinds;
    and those kinds."""
    bk, bfi = blk.kind, blk.first
    kinv, kuniq = pd.factorize(bk) if len(bk) else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    korder = np.argsort(np.asarray(kuniq, dtype=object))          # the few distinct kinds, sorted
    kuniq = np.asarray(kuniq, dtype=object)[korder]
    kinv = np.argsort(korder)[kinv]
    kcode = (kinv + 1).astype(np.uint64)                          # kinds in sorted order, 1-based
    ksig = _Sig(kcode, np.zeros(len(bk), dtype=bool))(bfi, np.concatenate([bfi[1:] - 1, [len(bk) - 1]])) \
        if len(bk) else np.zeros(0, np.uint64)
    uk, first_of = np.unique(ksig, return_index=True)
    kstr = {}
    for key, f in zip(uk, first_of):
        e = bfi[f + 1] if f + 1 < len(bfi) else len(bk)
        kstr[key] = "+".join(bk[bfi[f]:e])
    layer_kinds = np.full(nseg, "", dtype=object)
    if len(ksig):
        layer_kinds[blk.layer[bfi]] = np.array([kstr[x] for x in uk], dtype=object)[np.searchsorted(uk, ksig)]
    return layer_kinds, kinv, kuniq


def _companions(blk: _Blocks, segs: _Segs, idx: _SegIndex, nsteps: int) -> np.ndarray:
    """Per segment: a layer without an attention block in a step where other layers have one."""
    has_att = np.zeros(len(segs.lo), dtype=bool)
    if len(blk.bs):
        has_att[np.unique(blk.layer[blk.kind == "attention"])] = True
    step_att = np.bincount(segs.step[has_att], minlength=nsteps) > 0
    return idx.is_layer & ~has_att & step_att[segs.step]


def _segment_frame(segs: _Segs, idx: _SegIndex, cols: _SegColumns, rows_all, snames) -> pd.DataFrame:
    """The segments table (module doc)."""
    f = cols.figures
    return pd.DataFrame({
        "step": _strs(idx.step_name, segs.step, snames), "seg": idx.seg_no, "kind": _strs(segs.kind),
        "pass": _strs(segs.passes), "microbatch": segs.microbatch, "model_layer": segs.model_layer,
        "first_row": rows_all[segs.lo], "last_row": rows_all[segs.hi],
        "rows": idx.rows, "class_id": _strs(cols.class_id), "wall_us": f.wall, "sum_dur_us": f.sum_dur,
        "comm_us": f.comm})


def _layer_frame(segs: _Segs, idx: _SegIndex, cols: _SegColumns, rows_all, snames) -> pd.DataFrame:
    """The layers table (module doc)."""
    m, f = idx.is_layer, cols.figures
    return pd.DataFrame({
        "step": _strs(idx.step_name[m], segs.step[m], snames), "layer": idx.layer_no[m],
        "pass": _strs(segs.passes[m]), "microbatch": segs.microbatch[m], "model_layer": segs.model_layer[m],
        "anchor": _strs(segs.anchor[m]),
        "first_row": rows_all[segs.lo[m]], "last_row": rows_all[segs.hi[m]], "rows": idx.rows[m],
        "class_id": _strs(cols.class_id[m]), "kinds": _strs(cols.kinds[m]), "companion": cols.companion[m],
        "wall_us": f.wall[m], "sum_dur_us": f.sum_dur[m], "comm_us": f.comm[m]})


def _block_frame(blk: _Blocks, segs: _Segs, idx: _SegIndex, bcls, rr: _RankRows, snames) -> pd.DataFrame:
    """The blocks table (module doc)."""
    bs, be, lp, bl = blk.bs, blk.be, blk.lp, blk.layer
    f = _span_figures(bs, rr.start[lp], rr.end[lp], rr.dur[lp], rr.comm[lp])
    some = len(bs) > 0
    return pd.DataFrame({
        "step": _strs(idx.step_name[bl], segs.step[bl], snames) if some else [],
        "layer": idx.layer_no[bl] if some else [],
        "block": blk.no, "kind": _strs(blk.kind), "class_id": _strs(bcls),
        "first_row": rr.rows[lp[bs]] if some else [], "last_row": rr.rows[lp[be]] if some else [],
        "rows": be - bs + 1 if some else [], "wall_us": f.wall, "sum_dur_us": f.sum_dur, "comm_us": f.comm})


def _step_table(bounds: _StepBounds, ssig: np.ndarray, segs: _Segs, is_layer: np.ndarray) -> pd.DataFrame:
    """The steps table (module doc) from the sorted segment arrays, all steps at once (``ssig``:
    each step's signature)."""
    step_names, step_lo, step_hi = bounds.names, bounds.lo, bounds.hi
    nsteps = len(step_names)
    lay_idx = np.flatnonzero(is_layer)
    ls = segs.step[lay_idx]                                      # nondecreasing: segments in row order
    ar = np.arange(nsteps)
    f_i = np.searchsorted(ls, ar, side="left")
    l_i = np.searchsorted(ls, ar, side="right") - 1
    nlay = l_i - f_i + 1
    has = nlay > 0
    first = lay_idx[np.clip(f_i, 0, max(len(lay_idx) - 1, 0))] if len(lay_idx) else np.zeros(nsteps, dtype=np.int64)
    last = lay_idx[np.clip(l_i, 0, max(len(lay_idx) - 1, 0))] if len(lay_idx) else np.zeros(nsteps, dtype=np.int64)
    pl, mbl = segs.passes[lay_idx], segs.microbatch[lay_idx]
    mb = {}
    for p in (FORWARD, BACKWARD):
        m = pl == p
        mb[p] = (np.bincount(ls[m], minlength=nsteps) > 0, np.zeros(nsteps, dtype=np.int64))
        np.maximum.at(mb[p][1], ls[m], mbl[m])
    nmb = np.where(mb[FORWARD][0], mb[FORWARD][1], np.where(mb[BACKWARD][0], mb[BACKWARD][1], 0))
    bits = np.zeros(nsteps, dtype=np.int64)
    for i, p in enumerate(PASSES):
        bits |= (np.bincount(ls[pl == p], minlength=nsteps) > 0).astype(np.int64) << i
    names = np.array(["+".join(p for i, p in enumerate(PASSES) if b >> i & 1) for b in range(2 ** len(PASSES))],
                     dtype=object)
    anchor = np.where(has, segs.anchor[first] if len(lay_idx) else None, None).astype(object)
    rows = step_hi - step_lo + 1
    return pd.DataFrame({
        "step": np.array(step_names, dtype=object), "anchor": anchor, "layers": nlay.astype(np.int64),
        "microbatches": nmb.astype(np.int64), "passes": names[bits],
        "step_class": "S" + _hex(ssig).astype(object) if nsteps else np.zeros(0, dtype=object),
        "head_rows": np.where(has, segs.lo[first] - step_lo if len(lay_idx) else 0, rows).astype(np.int64),
        "tail_rows": np.where(has, step_hi - segs.hi[last] if len(lay_idx) else 0, 0).astype(np.int64),
        "rows": rows.astype(np.int64)}, columns=STEP_COLS)


def _lower_median_per_group(g: np.ndarray, n: np.ndarray, ngroups: int, total: int) -> np.ndarray:
    """Per group: the lower median of ``total`` values of which the pairs (``g``, ``n``) are the
    non-zero ones (each group's other values are 0), as :func:`perfgate.metrics.kernels.median_low`."""
    o = np.lexsort((n, g))
    g, n = g[o], n[o]
    present = np.bincount(g, minlength=ngroups)
    start = np.concatenate([[0], np.cumsum(present)[:-1]])
    want = (total - 1) // 2 - (total - present)
    return np.where(want >= 0, n[np.clip(start + want, 0, max(len(n) - 1, 0))] if len(n) else 0, 0).astype(float)


def _class_aggregates(t: pd.DataFrame, codes: np.ndarray, nc: int) -> tuple:
    """Per class code ``0..nc-1`` of the rows of ``t`` (a layer or block table): members (rows),
    median and 90th percentile of ``wall_us`` (pandas' group median: NaN skipped; numpy's
    linear percentile over all the class's values) and the sums of ``sum_dur_us`` and
    ``comm_us`` (pandas' own group sums, :func:`perfgate.metrics.kernels.group_sums`), as
    ``t.groupby(codes).agg(size, median, percentile, sum, sum)`` gives them, without the
    group-by's set-up (~15 ms per call in a fresh process). A missing code (-1) takes the group-by."""
    if len(codes) and int(codes.min()) < 0:
        g = t.groupby(pd.Series(codes, index=t.index), sort=True)   # (an array key would be str()-ed)
        agg = g.agg(members=("rows", "size"), wall_p50_us=("wall_us", "median"),
                    wall_p90_us=("wall_us", lambda w: float(np.percentile(w, 90))),
                    sum_dur_us=("sum_dur_us", "sum"), comm_us=("comm_us", "sum"))
        return tuple(agg[c].to_numpy() for c in ("members", "wall_p50_us", "wall_p90_us", "sum_dur_us", "comm_us"))
    codes = np.asarray(codes, dtype=np.int64)
    members = np.bincount(codes, minlength=nc)
    wall = t["wall_us"].to_numpy(dtype=float)
    order = np.argsort(codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(members)])
    p50, p90 = np.empty(nc), np.empty(nc)
    for c in range(nc):
        w = wall[order[bounds[c]:bounds[c + 1]]]
        p50[c] = km.median_nan(w)
        p90[c] = float(np.percentile(w, 90))
    sums = []
    for col in ("sum_dur_us", "comm_us"):
        v = t[col].to_numpy(dtype=float)
        got = km.group_sums(codes.tolist(), v.tolist()) if len(v) <= km.SMALL_GROUP_ROWS else None
        if got is None:   # a large table, or an unknown pandas summation: pandas' own group-by
            got = pd.Series(v).groupby(codes).sum().to_dict()
        sums.append(np.asarray([got.get(c, 0.0) for c in range(nc)], dtype=float))
    return members, p50, p90, sums[0], sums[1]


def _classes(layers, blocks, segs: _Segs, idx: _SegIndex, blk: _Blocks, crow: _ClassRows,
             nsteps: int) -> pd.DataFrame:
    """The classes table (:func:`class_table`): one group-by over int class codes per level."""
    if not len(layers) and not len(blocks):   # no layer (and so no block): the empty table
        return _empty_classes()
    is_layer, seg_of_row, lp, bs, be = idx.is_layer, idx.of_row, blk.lp, blk.bs, blk.be
    lstep = segs.step[is_layer]
    bstep = segs.step[blk.layer] if len(bs) else np.zeros(0, dtype=np.int64)
    fam, fam_names, dur, cat_codes, cat_names = crow.fam, crow.fam_names, crow.dur, crow.cat_codes, crow.cat_names
    out = []
    blk_of_row = np.repeat(np.arange(len(bs)), be - bs + 1) if len(bs) else np.zeros(0, dtype=np.int64)
    seg_code = np.full(len(is_layer), -1, dtype=np.int64)
    lcodes, lids = pd.factorize(layers["class_id"].to_numpy(dtype=object))
    seg_code[is_layer] = lcodes
    bcodes, bids = pd.factorize(blocks["class_id"].to_numpy(dtype=object))
    owners = {  # per layer row: its class code; per table row: its class code and step; the class ids
        "layer": (seg_code[seg_of_row[lp]] if len(lp) else np.zeros(0, dtype=np.int64), lcodes, lstep, lids, layers),
        "block": (bcodes[blk_of_row] if len(bs) else np.zeros(0, dtype=np.int64), bcodes, bstep, bids, blocks)}
    fam_l, dur_l = fam[lp], dur[lp]
    cat_l = cat_codes[lp] if cat_codes is not None else None
    for level, (row_cls, codes, tstep, ids, t) in owners.items():
        if not len(t):
            continue
        nc = len(ids)
        tops = _top_by(row_cls, fam_l, dur_l, fam_names, 3)
        bound = _top_by(row_cls, cat_l, dur_l, cat_names, 1) if cat_l is not None else tops
        pair = codes.astype(np.int64) * nsteps + tstep
        if nc * nsteps <= 1 << 24:   # members per (class, step)
            full = np.bincount(pair, minlength=nc * nsteps)
            pu = np.flatnonzero(full)
            pcount = full[pu]
        else:
            pu, pcount = np.unique(pair, return_counts=True)
        per_step = _lower_median_per_group(pu // nsteps, pcount, nc, nsteps)
        members, p50, p90, sdur, cdur = _class_aggregates(t, codes, nc)
        first = np.unique(codes, return_index=True)[1]           # each class's first member
        kinds = t["kinds" if level == "layer" else "kind"].to_numpy(dtype=object)[first]
        frow, lrow = t["first_row"].to_numpy()[first], t["last_row"].to_numpy()[first]
        if level == "layer":   # the passes of its members, from the distinct (class, pass) pairs
            pcodes, pnames = pd.factorize(t["pass"].to_numpy(dtype=object))
            cp = np.unique(codes.astype(np.int64) * len(pnames) + pcodes)
            passes = [[] for _ in range(nc)]
            for c_, p_ in zip((cp // len(pnames)).tolist(), (cp % len(pnames)).tolist()):
                passes[c_].append(pnames[p_])
            passes = ["+".join(sorted(x)) for x in passes]
        for c in range(nc):
            out.append({"level": level, "class_id": ids[c], "kind": kinds[c],
                        "pass": passes[c] if level == "layer" else "",
                        "members": int(members[c]), "per_step": float(per_step[c]),
                        "wall_p50_us": float(p50[c]), "wall_p90_us": float(p90[c]), "sum_dur_us": float(sdur[c]),
                        "comm_share": float(cdur[c] / sdur[c]) if sdur[c] > 0 else None,
                        "top_families": "; ".join(f"{f} ({v:.3f})" for f, v in tops.get(c, [])),
                        "bound": (bound.get(c) or [(None,)])[0][0],
                        "example_rows": f"{int(frow[c])}-{int(lrow[c])}"})
    return pd.DataFrame(out, columns=CLASS_COLS) if out else _empty_classes()


_EMPTY_CLASSES: list = []


def _empty_classes() -> pd.DataFrame:
    """``pd.DataFrame([], columns=CLASS_COLS)`` as a copy of one such frame made once per
    process (~0.03 ms instead of ~0.6 ms: a rank without layers asks for it every time)."""
    if not _EMPTY_CLASSES:
        _EMPTY_CLASSES.append(pd.DataFrame([], columns=CLASS_COLS))
    return _EMPTY_CLASSES[0].copy()


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


def _codes(*cols) -> tuple[np.ndarray, int]:
    """Joint codes of equal-length key columns in order of first appearance (``groupby(sort=False)``
    order), -1 where any key is missing (a group-by drops such rows); and the number of codes."""
    joint = np.zeros(len(cols[0]), dtype=np.int64)
    bad = np.zeros(len(cols[0]), dtype=bool)
    for c in cols:
        k, u = pd.factorize(c)
        bad |= k < 0
        joint = joint * (len(u) + 1) + k
    joint[bad] = -1
    codes, uniq = pd.factorize(joint, use_na_sentinel=False)
    if bad.any():   # the -1 key is no group: renumber the others densely, in first-seen order
        keep = uniq != -1
        remap = np.full(len(uniq), -1, dtype=np.int64)
        remap[keep] = np.arange(int(keep.sum()))
        return remap[codes], int(keep.sum())
    return codes.astype(np.int64), len(uniq)


def _median_low_with_zeros(present_values: np.ndarray, units: int) -> float:
    """The lower median of ``units`` values of which ``present_values`` are given and the others 0
    (a class absent from a micro-batch pass counts 0 layers there), as the sorted-``cumcount``
    pick of a pandas group-by."""
    want = (units - 1) // 2 - (units - len(present_values))
    return float(np.sort(present_values)[want]) if want >= 0 else 0.0


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

    Columnar: the micro-batch passes, (pass, class) and (pass, kind) groups are joint integer
    codes over the layer and block tables in first-seen order, every count one ``bincount``;
    per-step block sums are pandas' own float sums (:func:`perfgate.metrics.kernels.group_sums`),
    so the figures equal the plain pandas group-bys (~30 ms per small rank) that
    tests/metrics/test_segment_metrics_columnar.py checks them against.
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
    l_step = lay["step"].to_numpy(dtype=object)
    l_pass = lay["pass"].to_numpy(dtype=object)
    l_mb = lay["microbatch"].to_numpy()
    l_cls = lay["class_id"].to_numpy(dtype=object)
    # micro-batch passes (step, pass, micro-batch), in first-seen order, with their layer counts
    units = _micro_batch_passes(l_step, l_pass, l_mb)
    unit, nu, unit_pass = units.of_layer, units.n, units.passes
    has_unit = unit >= 0
    unit_layers = np.bincount(unit[has_unit], minlength=nu)
    main = np.flatnonzero(unit_pass == FORWARD)
    if not len(main):
        main = np.flatnonzero(unit_pass == BACKWARD)
    if not len(main):
        main = np.arange(nu)
    out[("layer.count", ())] = (km.median_low(unit_layers[main]), ev + f"; {len(main)} micro-batch "
                                f"pass(es) of pass {unit_pass[main[0]]}", {})
    out[("microbatch.count_per_step", ())] = (
        km.median_low(seg.steps["microbatches"].to_numpy()),
        f"{kfile}: runs of touching forward layers per step (pipeline, embedding or loss segments between)", {})
    passes_text = [str(x) for x in seg.steps["passes"].tolist()]
    npass = [len([p for p in x.split("+") if p]) for x in passes_text]
    seen = sorted(set("+".join(passes_text).split("+")) - {""})
    out[("pass.count_per_step", ())] = (km.median_low(npass), f"{kfile}: passes {', '.join(seen)}", {})
    # layers per (micro-batch pass, class): the per-(step, pass, micro-batch, class) group sizes
    cls_code, cls_names = pd.factorize(l_cls)
    ok = has_unit & (cls_code >= 0)
    ncls = len(cls_names)
    pair_n = np.bincount(unit[ok] * ncls + cls_code[ok], minlength=nu * ncls) if nu * ncls <= 1 << 24 else None
    if pair_n is None:
        pu, pc = np.unique(unit[ok] * ncls + cls_code[ok], return_counts=True)
    else:
        pu = np.flatnonzero(pair_n)
        pc = pair_n[pu]
    pair_unit, pair_cls = pu // ncls, pu % ncls
    wall = lay["wall_us"].to_numpy(dtype=float)
    pass_order = list(dict.fromkeys(unit_pass.tolist()))   # passes in first-seen order of the units
    recurring = set()
    for p in pass_order:
        u_of_p = np.flatnonzero(unit_pass == p)
        nunits = len(u_of_p)
        in_p = unit_pass[pair_unit] == p
        cl, n_, un = pair_cls[in_p], pc[in_p], pair_unit[in_p]
        names = cls_names[cl] if len(cl) else np.zeros(0, dtype=object)
        by_class: dict = {}
        for name, n in zip(names.tolist(), n_.tolist()):
            by_class.setdefault(name, []).append(n)
        rec = []
        for c in sorted(by_class):
            v = _median_low_with_zeros(np.asarray(by_class[c], dtype=np.int64), nunits)
            if v >= 2:
                rec.append((c, v))
        recurring.update(c for c, _ in rec)
        for c, v in rec:
            f = int(np.argmax((l_pass == p) & (l_cls == c)))   # the first layer of the (pass, class)
            e = (f"{kfile} rows {lay['first_row'].iat[f]}-{lay['last_row'].iat[f]} (step {l_step[f]}, {p} micro-batch "
                 f"{l_mb[f]}, model layer {lay['model_layer'].iat[f]}: {lay['kinds'].iat[f]})")
            out[("layer.class_count", (("class", c), ("pass", p)))] = (float(v), e, {})
        rec_names = {c for c, _ in rec}
        rest = np.fromiter((x not in rec_names for x in names.tolist()), dtype=bool, count=len(names))
        if rest.any():
            tot = np.zeros(nu, dtype=np.int64)
            np.add.at(tot, un[rest], n_[rest])
            out[("layer.class_count", (("class", UNIQUE), ("pass", p)))] = (
                km.median_low(tot[u_of_p]), f"{kfile}: {p} layers whose class occurs once per micro-batch pass", {})
        w = wall[l_pass == p]
        out[("layer.wall_p50_us", (("pass", p),))] = (km.median_nan(w), ev, {"members": int(len(w))})
    layer_recurring = np.append(np.isin(cls_names.astype(object), list(recurring)), False)[cls_code]
    _block_metrics(out, seg, units, layer_recurring, kfile, step_sum_us)
    return out


@dataclass(frozen=True)
class _Units:
    """The micro-batch passes (step, pass, micro-batch) of a layer table, in first-seen order:
    ``of_layer`` (per layer, its unit; -1 where a key is missing), ``n`` (units), ``passes``
    (per unit, its pass)."""
    of_layer: np.ndarray
    n: int
    passes: np.ndarray


def _micro_batch_passes(l_step: np.ndarray, l_pass: np.ndarray, l_mb: np.ndarray) -> _Units:
    """:class:`_Units` of the layers with these steps, passes and micro-batches."""
    unit, nu = _codes(l_step, l_pass, l_mb)
    has_unit = unit >= 0
    first_of_unit = np.full(nu, len(unit), dtype=np.int64)
    np.minimum.at(first_of_unit, unit[has_unit], np.flatnonzero(has_unit))
    return _Units(unit, nu, l_pass[first_of_unit])


SMALL_JOIN_ROWS = 4096   # blocks joined to their layers by a dict up to this many (a small rank's fixed cost)


def _blocks_in_layers(blocks: pd.DataFrame, lay: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(block row, layer row) positions of the blocks whose (step, layer) is a layer's, in block
    order: the inner merge of the two tables on (step, layer). By a dict when the tables are
    small, their keys plain str steps and int layers, and each layer's key unique; else by the
    merge itself."""
    b_keys = list(zip(blocks["step"].tolist(), blocks["layer"].tolist()))
    l_keys = list(zip(lay["step"].tolist(), lay["layer"].tolist()))
    if (len(b_keys) <= SMALL_JOIN_ROWS and len(l_keys) <= SMALL_JOIN_ROWS and len(set(l_keys)) == len(l_keys)
            and all(type(s) is str and type(n) is int for s, n in b_keys)
            and all(type(s) is str and type(n) is int for s, n in l_keys)):
        at = dict(zip(l_keys, range(len(l_keys))))
        pairs = [(b, at[k]) for b, k in enumerate(b_keys) if k in at]
        return (np.array([b for b, _ in pairs], dtype=np.int64), np.array([li for _, li in pairs], dtype=np.int64))
    m = blocks[["step", "layer"]].assign(_b=np.arange(len(blocks))).merge(
        lay[["step", "layer"]].assign(_l=np.arange(len(lay))), on=["step", "layer"])
    return m["_b"].to_numpy(), m["_l"].to_numpy()


def _block_metrics(out, seg, units: _Units, layer_recurring, kfile, step_sum_us) -> None:
    """``block.count`` and ``block.share`` of :func:`segment_metrics` into ``out``: the blocks of
    layers of recurring classes (matched to their layer by (step, layer), as an inner merge)."""
    blocks, lay, steps = seg.blocks, seg.layers, list(seg.steps["step"])
    unit, unit_pass, nu = units.of_layer, units.passes, units.n
    bi, li = _blocks_in_layers(blocks, lay)
    keep = layer_recurring[li]   # (the -1 code of a missing class id reads the trailing False)
    bi, li = bi[keep], li[keep]
    kind = blocks["kind"].to_numpy(dtype=object)[bi]
    b_first = blocks["first_row"].to_numpy()[bi]
    b_step = blocks["step"].to_numpy(dtype=object)[bi]
    b_layer = blocks["layer"].to_numpy()[bi]
    b_pass = lay["pass"].to_numpy(dtype=object)[li]
    b_unit = unit[li]

    def evidence(i):
        return f"{kfile} rows {b_first[i]}-{blocks['last_row'].iat[int(bi[i])]} (step {b_step[i]}, layer {b_layer[i]})"

    if len(bi):
        grp, ng = _codes(b_pass, kind)
        firsts = np.full(ng, len(grp), dtype=np.int64)
        np.minimum.at(firsts, grp[grp >= 0], np.flatnonzero(grp >= 0))
        for gi in range(ng):
            i = int(firsts[gi])
            p = b_pass[i]
            sel = (grp == gi) & (b_unit >= 0)
            cnt = np.bincount(b_unit[sel], minlength=nu)[np.flatnonzero(unit_pass == p)]
            out[("block.count", (("kind", kind[i]), ("pass", p)))] = (km.median_low(cnt), evidence(i), {})
    total = step_sum_us.reindex(steps).astype(float).to_numpy()
    dur = blocks["sum_dur_us"].to_numpy(dtype=float)[bi]
    rest = np.zeros(len(steps))
    kcode, knames = pd.factorize(kind)
    for kc in sorted(range(len(knames)), key=lambda i: knames[i]):   # kinds in sorted order
        k = knames[kc]
        at = np.flatnonzero(kcode == kc)
        sums = km.group_sums(b_step[at].tolist(), dur[at].tolist()) if len(at) <= km.SMALL_GROUP_ROWS else None
        if sums is None:   # pandas' own group-by: a large table, or an unknown pandas summation
            sums = pd.Series(dur[at]).groupby(b_step[at]).sum().to_dict()
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = np.asarray([sums.get(s, 0.0) for s in steps], dtype=float) / total
        sh[np.isnan(sh)] = 0.0
        rest = rest + sh
        out[("block.share", (("kind", k),))] = (km.median_nan(sh), evidence(int(at[0])), {})
    out[("block.share", (("kind", UNSTRUCTURED),))] = (km.median_nan(np.clip(1.0 - rest, 0.0, None)),
                                                       f"{kfile}: non-layer segments and non-recurring layers", {})


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
    at = np.flatnonzero(t["step"].to_numpy(dtype=object) == step)
    if not len(at):
        return []
    # columns pulled once (Python values, as .iloc gives them), runs cut where kind / pass /
    # micro-batch change (as comparing their "kind|pass|microbatch" text); one dict per run
    col = {c: t[c].to_numpy()[at] for c in ("kind", "pass", "microbatch", "model_layer", "first_row",
                                           "last_row", "rows", "class_id", "wall_us", "sum_dur_us")}
    kind, pas, mb = (col[c].tolist() for c in ("kind", "pass", "microbatch"))
    key = [f"{a}|{b}|{c}" for a, b, c in zip(kind, pas, mb)]
    cut = [0] + [i for i in range(1, len(key)) if key[i] != key[i - 1]] + [len(key)]
    fr, lr, cls, ml = (col[c].tolist() for c in ("first_row", "last_row", "class_id", "model_layer"))
    lay = seg.layers
    lay_step = np.flatnonzero(lay["step"].to_numpy(dtype=object) == step)
    lay_first = lay["first_row"].to_numpy()[lay_step].tolist()
    lay_kinds = lay["kinds"].to_numpy(dtype=object)[lay_step].tolist()
    kinds_at = {}
    dup = len(set(lay_first)) < len(lay_first)   # a repeated first row: .loc would give a Series
    for f, kd in zip(lay_first, lay_kinds):
        kinds_at.setdefault(f, kd)
    out = []
    for a, b in zip(cut[:-1], cut[1:]):
        r = {"kind": kind[a], "pass": pas[a] or None,
             "microbatch": int(mb[a]) or None, "segments": b - a,
             "rows": int(col["rows"][a:b].sum()), "first_row": int(fr[a]),
             "last_row": int(lr[b - 1]), "wall_us": round(float(col["wall_us"][a:b].sum()), 3),
             "sum_dur_us": round(float(col["sum_dur_us"][a:b].sum()), 3)}
        if r["kind"] == LAYER:
            r["model_layers"] = f"{int(ml[a])}-{int(ml[b - 1])}" if b - a > 1 else str(int(ml[a]))
            counts: dict = {}
            for c in cls[a:b]:   # value_counts(sort=False): first-seen order, missing values dropped
                if c is None or c is pd.NA or (isinstance(c, float) and c != c):
                    continue
                counts[str(c)] = counts.get(str(c), 0) + 1
            r["classes"] = counts
            if dup:
                lay_i = lay.iloc[lay_step].set_index("first_row")
                r["kinds"] = str(lay_i.loc[fr[a], "kinds"]) if fr[a] in lay_i.index else ""
            else:
                r["kinds"] = str(kinds_at[fr[a]]) if fr[a] in kinds_at else ""
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
