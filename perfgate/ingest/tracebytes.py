"""Byte-level extractor for trace_view.json (numpy; no Python object per event).

The gate keeps, of a trace's millions of events, the ``Overlap Analysis`` X events
(name, pid, ts, dur), the ``ProfilerStep#N`` windows and the ``process_name`` metadata. This
module reads them straight from the bytes with vectorised numpy operations over blocks of
:data:`CHUNK` bytes cut at event boundaries:

1. *Structure* (every event): the unescaped quotes (a quote preceded by an odd run of
   backslashes is escaped), the braces and brackets outside strings (quotes and brackets
   found by one pass, the quote count before each bracket by a cumulative sum), their depth;
   no raw control character inside a string. The root
   must be one array whose items are all objects, separated by exactly one comma and
   whitespace, closed by ``]`` with only whitespace after it; brackets pair by kind (a block
   with no ``[`` / ``]`` outside strings needs no pairing check: the depth count proves it).
   This is the structure the exact scan (:mod:`perfgate.ingest.jsonscan`) checks.
2. *Candidates*: events holding a string whose raw bytes equal a kept name (``Computing``,
   ``Communication``, ``Communication(Not Overlapped)``, ``Free``, ``process_name``) or begin
   with ``ProfilerStep#``, or holding a ``\\u`` escape (the only way to spell those names
   otherwise). No other event can be kept. Events where a string is followed by a byte JSON
   does not allow there are parsed too (``json.loads`` names them invalid): the exact scan
   parses, and so refuses, such an event when a kept name in quotes appears in it (``"x"Free"``).
3. *Fast events*: a candidate with no nested value and no backslash is matched against a
   layout (its keys, in order, learned from one member by ``json.loads``) and every one of its
   bytes is verified (one anchor matrix of the events' braces and quotes, one gather of the
   fixed spans' 8-byte words, one comparison; the name's kind is its string's, found in
   step 2): key strings equal the layout's, only whitespace, one ``:`` and one
   ``,`` between members, ``name`` / ``ph`` / ``ts`` are strings of the expected form, every
   other value is a plain JSON number (``-?(0|[1-9]d*)(.d+)?``). ``ts`` and ``dur`` are
   converted to exact int64 ns from their decimal digits (round half up at 1 ns, as
   :func:`perfgate.ingest.csvread.exact_scaled_arrow`), never through float64.
4. *Other candidates* (ProfilerStep and metadata events, nested args, escapes, another
   layout): each parsed by ``json.loads`` (non-integer numbers kept as their text), as the
   exact scan does; there are a few per step.

5. *Flows*: strings ``async_npu`` / ``HostToDevice`` are read with their object by the rule of
   :func:`perfgate.ingest.validity.flow_event` (the rule lost_launches' own pass applies), so
   that the file is not read a second time for lost device tasks: vectorised over the block's
   hits (the object's ``cat`` / ``ph`` / ``id`` / ``ts`` keys from the string list, their values
   by SWAR on 8-byte loads, the ``(cat, id) -> ts`` entries made by C loops); a hit outside the
   common shape (a backslash or a brace inside a string in its object, a value beyond 32 bytes,
   ...) is handed to flow_event itself, in its place (none on the real captures).

6. *Template-first blocks*: after a block where most events take one flat layout, each later
   block first matches that layout's literal bytes at every ``{`` (a value ends at the first
   byte of the next literal), reads the matched events' values with the checks of step 3
   (:func:`_hole_values`), and runs steps 1-5 on the block with each run of matched events
   replaced by one ``{}`` (event indices mapped back by the runs' lengths). It is taken only
   when every run is a whole top-level item there; anything else reads the block as above
   (:func:`_block_tmpl`; tests/ingest/test_trace_template.py). Each value is read from one gathered
   window of 8-byte words per row (:func:`_template_events`, :class:`_Hole`): the literal
   before it right-aligned in the first words (one masked comparison), the value's bytes
   word-aligned after it, so its end (a kept name and its quote, ``X"``, the learned pid, the
   ts's digits and point, a number's first terminator by SWAR) and its digits are column
   operations on the window, not gathers; rows the window does not settle are read as the
   per-value matcher it replaced read them (:func:`_hole_slow`;
   tests/ingest/test_trace_template_window.py keeps that matcher as the oracle). The first block is
   :data:`_FIRST` bytes, so the per-layout read that learns the template runs on 1 MiB only.

Cost: per event kept, the quote scan, the layout's anchor matrix or the template's word
windows, and the ts / dur digit conversion; per flow hit, a few numpy element operations and
its dict / set entry (no :func:`flow_event` call, ~2.5 µs each). Blocks that would need more
than :data:`_MAX_PARSED` one-by-one parses go to the Arrow line scan instead. Per-block
temporaries are reused (:class:`_Scratch`): on this VM a fresh multi-MB array's page faults
cost more than the numpy pass that fills it. Memory: one reused block buffer (:data:`CHUNK`
plus the unfinished event carried over) and per-block index arrays, plus the kept events'
int64 columns: bounded by the block and the kept events, not by the file.

Why a scanner of its own and not a JSON library (``benchmarks/bench_json.py``; read_trace
CPU in child processes on the 2-core VM under load from other jobs; docs/performance.md,
"Reading JSON: which parser and why"): on the real level1 trace's events repeated to 500 MiB
(few events kept) it ran at 179 MiB/s CPU with +66 MiB of peak RSS over its imports, where
msgspec decoding ~8 MiB runs of whole events into a Struct of the needed fields (the fastest
library measured) ran at 174 MiB/s, orjson 66, ijson (yajl2_c) 51, pysimdjson 27; on the
level1 rank replicated over 5,236 steps (192 MiB, nearly every event kept) it ran at
203 MiB/s with +187 MiB, where every library makes a Python object per event and the gate's
Python work per kept event then dominates (msgspec 41 MiB/s with the kept ts / dur made exact
by perfgate's Arrow converter, ~0.9 GiB of RSS for the kept events' objects). The file is also read once for the lost-launch check (the flows), and ts /
dur are exact from their digits, which a library's float64 is not.

Anything it cannot prove it read exactly raises :class:`NoFastPath`; the caller then reads
the file with the older paths (Arrow line scan, exact scan), which give the same summary or
name the error.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from perfgate.ingest.aliases import OVERLAP_KINDS
from perfgate.ingest.jsonscan import ScanError, _check_pairs
from perfgate.ingest.validity import _FLOW_CATS, flow_event

CHUNK = 4 << 20                             # fits L2+L3 working set: ~10% faster than 2 or 8 MiB blocks
STEP_PREFIX = b"ProfilerStep#"
KIND_NAMES = tuple(OVERLAP_KINDS)           # kind code i -> the event name KIND_NAMES[i]
_KEPT = tuple(k.encode() for k in KIND_NAMES) + (b"process_name",)
_MAX_LAYOUTS = 16
_MAX_PARSED = 2000                          # events of one block parsed by json.loads, at most
_MAX_INT_DIGITS = 16                        # ts in µs: 16 integer digits (+ range check)
_WS = np.zeros(256, dtype=bool)
_WS[[32, 9, 10, 13]] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[48:58] = True


_DECODER = json.JSONDecoder(parse_float=str)
_PAD = 64                                   # zero bytes after each buffer: fixed-width windows
_HEAD = 16                                  # bytes kept before each block in scan's buffer (word windows)
_FIRST = 1 << 20


def _win(b: np.ndarray, w: int) -> np.ndarray:
    """Row i = b[i:i+w] (a strided view; indexing it copies only the rows asked for)."""
    return np.lib.stride_tricks.sliding_window_view(b, w)


class NoFastPath(Exception):
    """The byte-level extractor cannot prove it reads this file exactly."""


@dataclass
class Extract:
    """What :func:`scan` read. ``n``: every top-level event. Fast Overlap-named X events in file
    order: ``idx`` (event index), ``pid``, ``kind`` (code into :data:`KIND_NAMES`, int8),
    ``ts_ns``, ``dur_ns`` (int64). ``parsed``: ``(idx, event)`` for the candidates parsed by
    json.loads."""
    n: int
    idx: np.ndarray
    pid: np.ndarray
    kind: np.ndarray
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    parsed: list
    flows: tuple = None


def _concat(parts: list, dtype) -> np.ndarray:
    """The per-block arrays in one array (bytearray-backed: numpy marks its own allocations of
    4 MiB or more for huge pages, whose first touch may stall in compaction on this kind of VM)."""
    n = sum(len(p) for p in parts)
    out = np.frombuffer(bytearray(n * np.dtype(dtype).itemsize), dtype=dtype)
    if n:
        np.concatenate(parts, out=out)
    return out


def _i64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def _escaped_quotes(b: np.ndarray, q: np.ndarray, bs: np.ndarray) -> np.ndarray:
    """The quotes of ``q`` that are escaped (preceded by an odd run of backslashes ``bs``)."""
    if not len(bs) or not len(q):
        return bs[:0]
    after = bs[b[bs + 1] == 34] + 1                 # quotes right after a backslash (b is padded)
    if not len(after):
        return after
    new_run = np.ones(len(bs), dtype=bool)
    new_run[1:] = np.diff(bs) != 1
    run_first = np.maximum.accumulate(np.where(new_run, np.arange(len(bs)), 0))
    k = np.searchsorted(bs, after - 1)
    runlen = bs[k] - bs[run_first[k]] + 1
    return after[(runlen & 1) == 1]


_BELOW = np.array([(1 << k) - 1 for k in range(64)], dtype=np.uint64)   # the k low bits


def _count_before(words: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For each position p of ``pos``: how many bits below p are set in the bitmap ``words``
    (little-endian uint64 words of np.packbits(mask, bitorder="little")), int64. One popcount
    per word, an exclusive prefix sum, one masked popcount per position (replaces a binary
    search of every position in the set bits' index)."""
    cnt = np.bitwise_count(words)
    base = np.cumsum(cnt, dtype=np.int64)
    base -= cnt
    w = pos >> 6
    return base[w] + np.bitwise_count(words[w] & _BELOW[pos & 63])


class _Scratch:
    """Reused per-byte work arrays of one scan (no fresh 4 MiB temporaries per block: their
    first touch costs page faults). ``masks(n)``: three bool views of n bytes, the first
    rounded up to 64 bytes with a zero tail (for packbits), and one uint8 view."""

    def __init__(self):
        self.size = 0

    def masks(self, n: int):
        n64 = (n + 63) & ~63
        if n64 > self.size:
            self.size = n64
            self.m = [np.empty(n64, dtype=bool) for _ in range(3)]
            self.u8 = np.empty(n64, dtype=np.uint8)
        self.m[0][n:n64] = False
        return self.m[0][:n64], self.m[1][:n], self.m[2][:n], self.u8[:n]

    def ints(self, n: int):
        """Two reused int64 work arrays of at least n items."""
        if n > getattr(self, "n_int", -1):
            self.n_int = max(n, 1 << 16)
            self.i64 = [np.frombuffer(bytearray(8 * self.n_int), dtype=np.int64) for _ in range(2)]
        return self.i64


def _all_ws(b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per span [lo, hi): every byte is JSON whitespace (vectorised over span length)."""
    ok = np.ones(len(lo), dtype=bool)
    n = hi - lo
    if not len(n):
        return ok
    for k in range(int(n.max(initial=0))):
        live = np.flatnonzero(n > k)
        if not len(live):
            break
        ok[live] &= _WS[b[lo[live] + k]]
    return ok


def _skip_ws(b: np.ndarray, pos: np.ndarray, stop: np.ndarray, step: int) -> np.ndarray:
    pos = pos.copy()
    todo = np.flatnonzero((pos != stop) & _WS[b[np.clip(pos, 0, len(b) - 1)]])
    while len(todo):
        pos[todo] += step
        todo = todo[(pos[todo] != stop[todo]) & _WS[b[pos[todo]]]]
    return pos


def _number(b: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, json_number: bool):
    """Plain decimals ``b[lo:hi]`` -> (ok, has a point, ns) vectorised. ``json_number``: the
    JSON grammar ``-?(0|[1-9]d*)(.d+)?``; else ``-?d+(.d+)?`` (text exact_scaled_arrow reads
    as a plain decimal). ``ns`` = value × 1000, the 4th decimal rounding half up (exact, as
    exact_scaled_arrow). ok is False where the text is not of that form or out of int64 range
    (the caller then parses the event exactly). Tokens are grouped by (length, point
    position, sign) so that each group is one fixed-column digit matrix."""
    n = len(lo)
    L = hi - lo
    ok = (L > 0) & (L <= 40)
    dotted = np.zeros(n, dtype=bool)
    ns = np.zeros(n, dtype=np.int64)
    if not n:
        return ok, dotted, ns
    width = int(L[ok].max(initial=1)) if ok.any() else 1
    cols = np.arange(width)
    m = _win(b, width)[np.clip(lo, 0, len(b) - width)]
    isdot = (m == 46) & (cols[None, :] < L[:, None])
    dotted = isdot.any(axis=1)
    dot = np.where(dotted, np.argmax(isdot, axis=1), L)
    neg = m[:, 0] == 45
    key = (np.minimum(L, 41) * 64 + np.minimum(dot, 63)) * 2 + neg
    order = np.argsort(key.astype(np.int32), kind="stable")
    ks = key[order]
    bounds = np.flatnonzero(np.diff(ks)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [n]])
    limit = (2 ** 63 - 1 - 999) // 1000
    allcols = np.arange(41)
    for a, z in zip(starts.tolist(), ends.tolist()):
        rows = order[a:z]
        ln, dp, ng = int(L[rows[0]]), int(dot[rows[0]]), bool(neg[rows[0]])
        s = int(ng)
        nint = dp - s
        if not (0 < ln <= 40) or nint < 1 or nint > _MAX_INT_DIGITS or dp == ln - 1:
            ok[rows] = False
            continue
        d = m[rows, :ln] - np.uint8(48)             # digits 0..9; '.' wraps to 254
        good = ((d <= 9) | (allcols[:ln] == dp) | (allcols[:ln] < s)).all(axis=1)
        if json_number and nint > 1:
            good &= d[:, s] != 0
        pad = np.zeros((len(rows), 16), dtype=np.uint8)
        pad[:, 16 - nint:] = d[:, s:dp]
        w = pad.view("<u8")
        ip = (_eight(w[:, 0]) * np.uint64(10 ** 8) + _eight(w[:, 1])).astype(np.int64)
        good &= ip <= limit
        frac = np.zeros(len(rows), dtype=np.int64)
        for j, wt in ((1, 100), (2, 10), (3, 1)):
            if dp + j < ln:
                frac += d[:, dp + j].astype(np.int64) * wt
        if dp + 4 < ln:
            frac += d[:, dp + 4] >= 5
        v = np.where(good, ip, 0) * 1000 + frac
        ok[rows] &= good
        ns[rows] = -v if ng else v
    ns[~ok] = 0
    return ok, dotted, ns


def _eight(x: np.ndarray) -> np.ndarray:
    """Eight digit values 0..9 packed in a little-endian uint64 (first = most significant)
    -> their decimal value (SWAR, as simdjson's parse_eight_digits_unrolled)."""
    u = np.uint64
    x = (x * u(10)) + (x >> u(8))
    x = (((x & u(0x000000FF000000FF)) * u(100 + (1000000 << 32)))
         + (((x >> u(16)) & u(0x000000FF000000FF)) * u(1 + (10000 << 32)))) >> u(32)
    return x & u(0xFFFFFFFF)


_U = np.uint64
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2 ** 64 - 1], dtype=np.uint64)   # low k bytes
_ZEROS = np.array([int.from_bytes(b"0" * k, "little") for k in range(9)], dtype=np.uint64)  # '0' x k
_ZEROS_HI = np.array([int.from_bytes(b"0" * (8 - k), "little") << (8 * k) if k < 8 else 0
                      for k in range(9)], dtype=np.uint64)                                   # '0' above k


def _digits8(x: np.ndarray, value: bool = True):
    """Eight ASCII characters in a little-endian uint64 -> (all are digits, their value)."""
    ok = ((x & _U(0xF0F0F0F0F0F0F0F0)) | (((x + _U(0x0606060606060606)) & _U(0xF0F0F0F0F0F0F0F0)) >> _U(4))) \
        == _U(0x3333333333333333)
    if not value:
        return ok
    return ok, _eight(x - _U(0x3030303030303030)).astype(np.int64)


def _short_numbers(b, w64, lo, hi, json_number: bool):
    """Unsigned decimals of at most 8 characters (``ddd``, ``ddd.ddd``) -> (ok, dotted, ns),
    SWAR on one unaligned 8-byte load per token; ok False for anything else (the caller
    parses those with :func:`_number`). Same values and grammar as _number."""
    return _short_numbers_x(w64[lo], hi - lo, json_number)


def _short_numbers_x(x, L, json_number: bool):
    """:func:`_short_numbers` of tokens of length ``L`` whose first 8 bytes are the
    little-endian uint64 words ``x`` (bytes beyond L are ignored)."""
    ok = (L >= 1) & (L <= 8)
    Lc = np.where(ok, L, 1)
    x = x & _LOW[Lc]
    dx = x ^ _U(0x2E2E2E2E2E2E2E2E)
    zb = (dx - _U(0x0101010101010101)) & ~dx & _U(0x8080808080808080) & _LOW[Lc]
    dotted = zb != 0
    low = zb & (~zb + _U(1))                              # lowest '.' byte's high bit
    dp = np.where(dotted, np.bitwise_count(low - _U(1)).astype(np.int64) >> 3, Lc)
    nf = Lc - dp - 1                                      # decimals (when dotted)
    ok &= (dp >= 1) & (~dotted | (nf >= 1))
    ip_bytes = x & _LOW[dp]
    ipw = (ip_bytes << (_U(8) * (_U(8) - dp.astype(np.uint64)))) | _ZEROS[8 - dp]
    iok, ip = _digits8(np.where(dp == 0, _ZEROS[8], ipw))
    ok &= iok
    if json_number:
        ok &= ~(((x & _U(0xFF)) == _U(48)) & (dp > 1))
    fr = np.where(dotted, x >> (_U(8) * (dp.astype(np.uint64) + _U(1))), _U(0))
    nfc = np.clip(nf, 0, 8)
    frw = (fr & _LOW[nfc]) | _ZEROS_HI[nfc]
    fok, fv = _digits8(frw)                               # d1..d8 (padded with 0)
    ok &= fok | ~dotted
    fv = np.where(dotted, fv, 0)
    ns = ip * 1000 + fv // 100000 + ((fv // 10000) % 10 >= 5)
    return ok, dotted, np.where(ok, ns, 0)


_POW3 = np.array([1000, 100, 10, 1], dtype=np.int64)


def _short_dec3(x, L):
    """Unsigned JSON numbers of at most 8 characters with at most 3 decimals (``ddd.d`` ..
    ``ddd.ddd``, or an integer of at most 7 digits; ``0`` or no leading zero) whose first 8 bytes are the words
    ``x`` -> (ok, ns = value x 1000, exact). The point is removed by moving the integer
    digits up one byte, the digits right-aligned and read by one :func:`_eight`. ok False for
    any other token (the caller reads those with :func:`_number`): the values are those of
    :func:`_short_numbers` where ok."""
    ok = (L >= 1) & (L <= 8)
    Lc = np.where(ok, L, 1)
    x = x & _LOW[Lc]
    y = x ^ _U(0x2E2E2E2E2E2E2E2E)
    dp = _first_byte((y - _ONES) & ~y & _H)          # the first '.' (8: none)
    dotted = dp < 8
    nd = np.where(dotted, dp, Lc)                    # integer digits
    nf = np.where(dotted, Lc - dp - 1, 0)            # decimals
    ok &= (nd >= 1) & (nf <= 3) & (dotted | (Lc < 8)) & (~dotted | (nf >= 1))
    ok &= ((x & _U(0xFF)) != _U(48)) | (nd == 1)     # no leading zero
    keep = _LOW[np.minimum(nd + 1, 8)]
    y = ((x << _U(8)) & keep) | (x & ~keep)          # the integer digits moved over the point
    e = np.minimum(Lc + 1 - dotted, 8)               # the digits at bytes 1 .. e-1
    z = (y << (_U(8) * (_U(8) - e.astype(np.uint64)))) | _ZEROS[9 - e]
    d_ok, d = _digits8(z)
    ok &= d_ok
    return ok, np.where(ok, d * _POW3[np.minimum(nf, 3)], 0)


def _json_ints(w64, lo, hi) -> np.ndarray:
    """Tokens that are JSON integers of 1 to 8 digits (no sign): ``0`` or ``[1-9][0-9]*``."""
    return _json_ints_x(w64[lo], hi - lo)


def _json_ints_x(x, L) -> np.ndarray:
    """:func:`_json_ints` of tokens of length ``L`` whose first 8 bytes are the words ``x``."""
    ok = (L >= 1) & (L <= 8)
    Lc = np.where(ok, L, 1)
    ok &= _digits8((x & _LOW[Lc]) | _ZEROS_HI[Lc], value=False)
    ok &= ((x & _U(0xFF)) != _U(48)) | (Lc == 1)
    return ok


def _numbers(b, w64, lo, hi, json_number: bool, common: bool = False):
    """_number, with the short unsigned tokens parsed by SWAR first. ``common``: most tokens
    repeat the first one's bytes (a pid, a tid): those take its value after one comparison."""
    if common and len(lo):
        first = bytes(b[int(lo[0]):int(hi[0])])
        same = ((hi - lo) == len(first)) & _equals(w64, lo, first) if 0 < len(first) <= 40 else lo < 0
        if same.any():
            f_ok, f_dot, f_ns = _number(b, lo[:1], hi[:1], json_number=json_number)
            ok = same & f_ok[0]
            dotted = np.full(len(lo), bool(f_dot[0]))
            ns = np.where(ok, f_ns[0], 0)
            rest = np.flatnonzero(~same)
            if len(rest):
                r_ok, r_dot, r_ns = _numbers(b, w64, lo[rest], hi[rest], json_number)
                ok[rest], dotted[rest], ns[rest] = r_ok, r_dot, r_ns
            return ok, dotted, ns
    ok, dotted, ns = _short_numbers(b, w64, lo, hi, json_number)
    rest = np.flatnonzero(~ok)
    if len(rest):
        rok, rdot, rns = _number(b, lo[rest], hi[rest], json_number=json_number)
        ok[rest], dotted[rest], ns[rest] = rok, rdot, rns
    return ok, dotted, ns


def _fixed_ts(b, w64, lo, hi, rep_len: int, rep_dot: int):
    """Timestamps written like the layout's representative: 16 integer digits, a point,
    at most 8 decimals (``1736408883704643.212``) -> (ok, ns); the others ok False."""
    ok = (hi - lo) == rep_len
    if rep_dot != 16 or not 1 <= rep_len - 17 <= 8:
        return ok & False, np.zeros(len(lo), dtype=np.int64)
    return _fixed_ts_x(_gather(w64, lo, 4), ok, rep_len)    # the 32 bytes from lo: one gather


def _fixed_ts_x(x, ok, rep_len: int):
    """:func:`_fixed_ts` of tokens whose first 32 bytes are the rows of words ``x`` (n x 4),
    for the rows where ``ok`` (length rep_len already checked; rep_len - 17 in 1..8).
    Returns (ok &= the form, ns)."""
    ok = ok & ((x[:, 2] & _U(0xFF)) == _U(46))
    x0 = x[:, 0]
    if len(x0) and bool((x0 == x0[0]).all()):       # the leading 8 digits of one block's ts: one value
        a_ok, a = _digits8(x0[:1])
        a_ok, a = bool(a_ok[0]), int(a[0])
    else:
        a_ok, a = _digits8(x0)
    b_ok, bv = _digits8(x[:, 1])
    nf = rep_len - 17
    f17 = (x[:, 2] >> _U(8)) | (x[:, 3] << _U(56))   # the 8 bytes from lo + 17
    if nf <= 3:                                      # the decimals right-aligned: no rounding, no division
        f_ok, fv = _digits8(((f17 & _LOW[nf]) << _U(8 * (8 - nf))) | _ZEROS[8 - nf])
        fv *= 10 ** (3 - nf)
    else:
        f_ok, fv = _digits8((f17 & _LOW[nf]) | _ZEROS_HI[nf])
        fv = fv // 100000 + ((fv // 10000) % 10 >= 5)
    ok &= a_ok & b_ok & f_ok
    ip = a * 100_000_000 + bv
    ok &= ip <= (2 ** 63 - 1 - 999) // 1000
    ns = np.where(ok, ip, 0) * 1000 + fv
    return ok, ns


class _Float(str):
    """A JSON number that is not an integer (its text)."""


def _layout(b: np.ndarray, e_open: int, e_close: int):
    """The layout of one flat event: [(key bytes, is_string_value)], or None when the fast
    path does not take events of this form."""
    try:
        pairs = json.loads(b[e_open:e_close + 1].tobytes(), object_pairs_hook=list, parse_float=_Float)
    except (ValueError, RecursionError):
        return None
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys) or not {"name", "ph", "ts", "pid"} <= set(keys):
        return None
    out = []
    for k, v in pairs:
        if not k.isascii() or '"' in k or "\\" in k:
            return None
        if k in ("name", "ph"):
            if not isinstance(v, str):
                return None
            out.append((k.encode(), True))
        elif k == "ts":
            out.append((k.encode(), isinstance(v, str)))
        elif isinstance(v, (int, _Float)) and not isinstance(v, bool):
            out.append((k.encode(), False))
        else:
            return None
    return out


def _template(b: np.ndarray, e_open: int, e_close: int, layout):
    """A byte template of one flat event: its fixed spans (literal bytes between values) and
    its value holes, each bound given as (reference, offset) with reference a quote index
    within the event (or "eo" / "ec", its braces). Every other event of the same layout and
    spacing has the same fixed spans byte for byte."""
    ev = b[e_open:e_close + 1].tobytes()
    qs = [i for i, c in enumerate(ev) if c == 34]
    pos = {"eo": 0, "ec": len(ev) - 1}
    holes = []                          # (key, (ref, off) start, (ref, off) end)
    c = 0                               # string counter
    for key, is_str in layout:
        kclose = 2 * c + 1
        c += 1
        if is_str:
            holes.append((key, (2 * c, 1), (2 * c + 1, 0)))
            c += 1
            continue
        i = qs[kclose] + 1
        while ev[i] in b" \t\r\n:":
            i += 1
        j = i
        while ev[j] not in b" \t\r\n,}":
            j += 1
        nxt = (2 * c, qs[2 * c]) if 2 * c < len(qs) else ("ec", pos["ec"])
        holes.append((key, (kclose, i - qs[kclose]), (nxt[0], j - nxt[1])))

    def at(ref):
        r, off = ref
        return (pos[r] if isinstance(r, str) else qs[r]) + off

    spans, prev = [], ("eo", 0)
    for key, lo, hi in holes:
        spans.append((prev, lo, ev[at(prev):at(lo)]))
        prev = hi
    spans.append((prev, ("ec", 1), ev[at(prev):]))
    return spans, holes


def _plan(template, nq: int):
    """The template as column plans over the anchor matrix (columns: ``{``, the event's
    ``nq`` quotes, ``}``): span lengths as anchor differences, span bytes as 8-byte words
    at (column, offset) with a mask, holes as (column, offset) bounds."""
    spans, holes = template

    def col(ref):
        r, off = ref
        return (0 if r == "eo" else nq + 1 if r == "ec" else r + 1), off

    lo_c, hi_c, lens, w_c, w_o, w_v, w_m = [], [], [], [], [], [], []
    for lo_ref, hi_ref, lit in spans:
        (c0, o0), (c1, o1) = col(lo_ref), col(hi_ref)
        lo_c.append(c0)
        hi_c.append(c1)
        lens.append(len(lit) + o0 - o1)
        for j in range(0, len(lit), 8):
            part = lit[j:j + 8]
            w_c.append(c0)
            w_o.append(o0 + j)
            w_v.append(int.from_bytes(part.ljust(8, b"\0"), "little"))
            w_m.append((1 << (8 * len(part))) - 1)
    u = np.uint64
    return (np.array(lo_c), np.array(hi_c), np.array(lens, dtype=np.int64), np.array(w_c),
            np.array(w_o, dtype=np.int64), np.array(w_v, dtype=u), np.array(w_m, dtype=u),
            {key: (col(lo), col(hi)) for key, lo, hi in holes})


def _fast_events(blk: _BlockText, kq, eo, ec, layout, template):
    """Verify the events of the block ``blk`` (quote base ``kq``, braces ``eo``/``ec``) against
    ``template``: one anchor matrix (n x quotes + 2), one gather of every fixed span's 8-byte
    words, one comparison; the name's kind is its string's kind from :func:`_candidates`
    (``blk.skind``). Returns (conforming mask, kind code, pid, ts_ns, dur_ns)."""
    b, w64, q, skind = blk.bp, blk.w64, blk.q, blk.skind
    n = len(eo)
    nq = 2 * sum(2 if s else 1 for _, s in layout)
    lo_c, hi_c, lens, w_c, w_o, w_v, w_m, hole = _plan(template, nq)
    A = np.empty((n, nq + 2), dtype=np.int64)
    A[:, 0] = eo
    A[:, 1:nq + 1] = _win(q, nq)[kq]                  # each event's quotes: one row gather
    A[:, nq + 1] = ec
    ok = ((A[:, hi_c] - A[:, lo_c]) == lens).all(axis=1)
    P = A[:, w_c]
    P += w_o
    G = w64[P]
    G &= w_m
    ok &= (G == w_v).all(axis=1)
    vals = {key: (A[:, c0] + o0, A[:, c1] + o1) for key, ((c0, o0), (c1, o1)) in hole.items()}
    (name_col, _), _ = hole[b"name"]                  # the name value is string (col - 1) / 2
    kind = skind[kq // 2 + (name_col - 1) // 2].astype(np.int64)
    ok &= kind >= 0                                   # other names: parsed exactly (rare)
    ok, pid, ts, dur = _hole_values(b, w64, layout, vals, ok)
    return ok, kind, pid, ts, dur


def _hole_values(b, w64, layout, vals, ok):
    """The values of flat events whose bytes outside the holes are verified: ``vals`` maps each
    layout key to its value's (lo, hi) bounds (a string's without its quotes). ``ph`` must be
    ``X``, ``pid`` a JSON integer, ``ts`` a plain decimal (a JSON number when not a string),
    ``dur`` and every other value a JSON number. Returns (ok &= conforming, pid, ts_ns, dur_ns)
    (shared by :func:`_fast_events` and the template matcher's oracle, whose values
    :func:`_template_events` reproduces)."""
    n = len(ok)
    rep_lo, rep_hi = int(vals[b"ts"][0][0]), int(vals[b"ts"][1][0])
    rep_ts = (rep_hi - rep_lo, bytes(b[rep_lo:rep_hi]).find(b"."))
    lo, hi = vals[b"ph"]
    ok &= ((hi - lo) == 1) & (b[lo] == 88)            # ph other than "X": parsed exactly
    lo, hi = vals[b"pid"]
    pok, pdot, pid = _numbers(b, w64, lo, hi, json_number=True, common=True)
    ok &= pok & ~pdot
    pid = pid // 1000
    ts_string = dict(layout)[b"ts"]
    lo, hi = vals[b"ts"]
    tok, ts = _fixed_ts(b, w64, lo, hi, *rep_ts)
    rest = np.flatnonzero(~tok)
    if len(rest):
        rok, _, rts = _number(b, lo[rest], hi[rest], json_number=not ts_string)
        tok[rest], ts[rest] = rok, rts
    ok &= tok
    dur = np.zeros(n, dtype=np.int64)
    for key, (lo, hi) in vals.items():
        if key in (b"name", b"ph", b"pid", b"ts"):
            continue
        if key == b"dur":
            vok, _, dur = _numbers(b, w64, lo, hi, json_number=True)
        else:                                         # a value perfgate does not use: validated only
            vok = _DIGIT[b[lo]] if ((hi - lo) == 1).all() else _json_ints(w64, lo, hi)
            rest = np.flatnonzero(~vok)
            if len(rest):
                vok[rest] = _numbers(b, w64, lo[rest], hi[rest], json_number=True)[0]
        ok &= vok
    return ok, pid, ts, dur


def _gather(w64: np.ndarray, lo: np.ndarray, nw: int) -> np.ndarray:
    """Rows of ``nw`` little-endian 8-byte words from byte ``lo`` on (n x nw uint64, contiguous):
    one gather of ``8 nw``-byte items whatever nw (a gather costs per item, and the items of an
    unaligned uint64 view cost as much as 32-byte ones), from the buffer under ``w64`` (the
    unaligned word view of a block: its first byte is word 0's)."""
    base = w64.base
    while isinstance(base, np.ndarray):             # a view of the view: its buffer's owner
        base = base.base
    off = w64.__array_interface__["data"][0] - np.frombuffer(base, dtype=np.uint8).__array_interface__["data"][0]
    wide = np.ndarray((len(w64) + 8 - 8 * nw,), f"S{8 * nw}", buffer=base, offset=off, strides=(1,))
    return wide[lo].view("<u8").reshape(len(lo), nw)


def _equals(w64: np.ndarray, lo: np.ndarray, lit: bytes) -> np.ndarray:
    """b[lo:lo+len(lit)] == lit for every lo (8 bytes per unaligned uint64 load; one wide
    gather for a literal of more than 8 bytes)."""
    if len(lit) <= 8:
        word = np.uint64(int.from_bytes(lit.ljust(8, b"\0"), "little"))
        if len(lit) == 8:
            return w64[lo] == word
        return (w64[lo] & np.uint64((1 << (8 * len(lit))) - 1)) == word
    nw = (len(lit) + 7) // 8
    x = _gather(w64, lo, nw)
    ok = np.ones(len(lo), dtype=bool)
    for j in range(nw):
        part = lit[8 * j:8 * j + 8]
        word = np.uint64(int.from_bytes(part.ljust(8, b"\0"), "little"))
        if len(part) == 8:
            ok &= x[:, j] == word
        else:
            ok &= (x[:, j] & np.uint64((1 << (8 * len(part))) - 1)) == word
    return ok


_NOT_AFTER_STRING = np.ones(256, dtype=bool)    # bytes JSON does not allow right after a string
_NOT_AFTER_STRING[[32, 9, 10, 13, 44, 58, 125, 93]] = False
_FIRST_LEN = np.zeros(256 * 64, dtype=bool)     # (first byte, length) of a string that may be kept
for _k in _KEPT:
    _FIRST_LEN[_k[0] * 64 + len(_k)] = True
for _n in range(len(STEP_PREFIX), 64):
    _FIRST_LEN[STEP_PREFIX[0] * 64 + _n] = True


def _candidates(b, w64, qo, qc, first=None, work=None):
    """Indices (into the string list) of strings whose raw bytes equal a kept name or begin
    with ProfilerStep#; every string's (first byte, length) code; every string's kind code
    (into :data:`KIND_NAMES`, -1 for any other string). ``first``: each string's first byte
    (b[qo + 1]) when the caller has it; ``work``: two reused int64 arrays of at least len(qo)
    for the lengths and codes (valid until the next call)."""
    k = len(qo)
    ln = np.subtract(qc, qo, out=work[0][:k]) if work is not None else qc - qo
    ln -= 1
    np.minimum(ln, 63, out=ln)
    code = np.multiply(b[qo + 1] if first is None else first, 64, dtype=np.int64,
                       out=work[1][:k] if work is not None else None)
    code += ln
    sel = np.flatnonzero(_FIRST_LEN[code])
    ln, start = ln[sel], qo[sel] + 1
    hit = np.zeros(len(sel), dtype=bool)
    skind = np.full(len(qo), -1, dtype=np.int8)
    for i, kb in enumerate(_KEPT):
        m = np.flatnonzero(ln == len(kb))
        m = m[_equals(w64, start[m], kb)]
        hit[m] = True
        if i < len(KIND_NAMES):
            skind[sel[m]] = i
    m = np.flatnonzero(ln >= len(STEP_PREFIX))
    hit[m[_equals(w64, start[m], STEP_PREFIX)]] = True
    return sel[hit], code, skind


_FLOW_KEYS = (b"cat", b"ph", b"id", b"ts")
_FLOW_STATS = None                          # {"hits": 0, "slow": 0}: counts flow_event fallbacks (tests, bench)
_FS = 16                                    # strings of a flow's object searched for its keys
_FW = 32                                    # a flow value's end is looked for in its first _FW bytes
_STOP = np.zeros(256, dtype=bool)           # bytes that end a value (``[^",} ]*``)
_STOP[[34, 44, 125, 32]] = True
_H = _U(0x8080808080808080)
_L7 = _U(0x7F7F7F7F7F7F7F7F)
_BYTES = {c: _U(int.from_bytes(bytes([c]) * 8, "little")) for c in (0x3A, 0x20, 0x22, 0x2D, 0x7D)}


def _zero_bytes(x):
    """High bit of every byte of ``x`` (uint64) that is zero, exactly (no borrow between bytes)."""
    return ~(((x & _L7) + _L7) | x | _L7)


def _first_byte(m):
    """Index (0..7) of the lowest byte whose high bit is set in ``m``; 8 where none is."""
    return np.bitwise_count((m & (~m + _U(1))) - _U(1)).astype(np.int64) >> 3


def _flow_value(bp, w64, kc, hi):
    """The value :func:`perfgate.ingest.validity._field` reads after the key whose closing
    quote is at ``kc`` in the object ending at ``hi``: the first ``:`` after the key, then
    spaces and quotes skipped, up to a quote, comma, brace or space (raw bytes, as its regular
    expression), by SWAR over 8-byte loads. Returns (ok, length, value start); ok False where
    the ':' is not within 8 bytes of the key or lies beyond the object, the skipped run is 8
    bytes or more, the value's end is not within :data:`_FW` bytes, or the first byte below
    ``-`` (or a non-ASCII byte below 0xAD) in the value is not one of its four ends (the
    caller hands those hits to flow_event)."""
    kc = np.minimum(kc, len(w64) - 9 - _FW)          # rows of absent keys stay in the buffer (+ _PAD)
    ci = _first_byte(_zero_bytes(w64[kc + 1] ^ _BYTES[0x3A]))
    ok = (ci < 8) & (kc + 1 + ci < hi)
    p = kc + 2 + ci
    x = w64[p]
    k0 = _first_byte(~(_zero_bytes(x ^ _BYTES[0x20]) | _zero_bytes(x ^ _BYTES[0x22])) & _H)
    ok &= k0 < 8
    v = p + k0
    x = _win(bp, _FW)[v].view("<u8")                    # the value's first _FW bytes, 8 per word
    low = ~((x | _H) - _BYTES[0x2D]) & _H               # bytes < '-' (or 0x80..0xAC)
    j = _first_byte(low | _zero_bytes(x ^ _BYTES[0x7D]))
    hit = j < 8
    rows = np.arange(len(kc))
    word = np.argmax(hit, axis=1)                       # the first word with such a byte
    j = j[rows, word]
    ok &= hit[rows, word]
    ok &= _STOP[((x[rows, word] >> (j.astype(np.uint64) << _U(3))) & _U(0xFF)).astype(np.intp)]
    return ok, np.where(ok, word * 8 + j, 0), v


def _flow_texts(bp, lo, n, empty_from: int) -> list:
    """``bytes(bp[lo:lo+n])`` for every row, ``b"0"`` for the rows from ``empty_from`` on where
    n is 0 (a start without ts), made in C: a zero-padded fixed-width bytes array's tolist (the
    values hold no zero byte, see _flow_value)."""
    if not len(lo):
        return []
    w = max(int(n.max()), 1)
    m = _win(bp, w)[lo]
    m[np.arange(w)[None, :] >= n[:, None]] = 0
    if not n[empty_from:].all():
        m[empty_from + np.flatnonzero(n[empty_from:] == 0), 0] = 48
    return m.view(f"S{w}").ravel().tolist()


_KEY_OF_CODE = np.full(256 * 64, -1, dtype=np.int8)     # string code (see _candidates) -> flow key
for _i, _k in enumerate(_FLOW_KEYS):
    _KEY_OF_CODE[_k[0] * 64 + len(_k)] = _i
_KEY_MASK = np.array([(1 << (8 * len(k))) - 1 for k in _FLOW_KEYS], dtype=np.uint64)
_KEY_WORD = np.array([int.from_bytes(k, "little") for k in _FLOW_KEYS], dtype=np.uint64)
_KEY_LEN = np.array([len(k) for k in _FLOW_KEYS], dtype=np.int64)


@dataclass(frozen=True)
class _BlockText:
    """One block's bytes and its string index, shared by the passes that read events from it.
    ``buf`` / ``start``: the read buffer and the block's first byte in it; ``bp``: the block's
    bytes followed by :data:`_PAD` zero bytes; ``w64``: the unaligned 8-byte word view from
    bp's first byte; ``q``: the real (unescaped) quotes; ``qo`` / ``qc``: each string's
    opening / closing quote; ``code`` / ``skind``: each string's (first byte, length) code and
    kind code (:func:`_candidates`); ``bs``: the backslashes; ``odd_qc``: the closing quotes of
    strings followed by a byte JSON does not allow there; ``raw_br``: every bracket, in strings
    too; ``cut``: the end of the block's last whole item (byte offsets are the block's)."""
    buf: bytearray
    start: int
    bp: np.ndarray
    w64: np.ndarray
    q: np.ndarray
    qo: np.ndarray
    qc: np.ndarray
    code: np.ndarray
    skind: np.ndarray
    bs: np.ndarray
    odd_qc: np.ndarray
    raw_br: np.ndarray
    cut: int


@dataclass(frozen=True)
class _FlowHits:
    """The flow hits of one block, category 0's first (``n_cat0`` of them), each in file order:
    ``lo`` / ``hi`` the braces of the hit's object, ``slow`` the hits handed to flow_event,
    ``st`` / ``en`` the hits read here as flow starts / ends, ``s_ids`` / ``s_ts`` the starts'
    id and ts texts, ``e_ids`` the ends' id texts."""
    lo: np.ndarray
    hi: np.ndarray
    slow: np.ndarray
    n_cat0: int
    st: np.ndarray
    en: np.ndarray
    s_ids: list
    s_ts: list
    e_ids: list


def _flows(blk: _BlockText, flows) -> None:
    """Host -> device flow hits (strings ``async_npu`` / ``HostToDevice``), each read from its
    own object (the raw ``{`` before it to the raw ``}`` after it, as lost_launches' own pass
    takes it) with the rule of :func:`perfgate.ingest.validity.flow_event`, vectorised over the
    block's hits; ``flows`` = (starts, ended) gets them in file order per category.

    The rule's raw-byte searches for ``"cat"``, ``"ph"``, ``"id"``, ``"ts"`` find exactly the
    object's strings with that content (the first one of the object's first :data:`_FS`
    strings) when the object holds no backslash, its two braces lie outside strings and are
    the nearest brackets of the hit, and no string in it is followed by a byte JSON does not
    allow there; each value is then read by SWAR after its key (:func:`_flow_value`). Hits
    outside that shape, or whose key or value lies beyond those windows, are handed to
    :func:`flow_event` one by one (none on the real captures and replicated traces measured),
    in their place in file order, so ``starts`` gets the same insertion order and
    last-write-wins values. The dict and set entries are made by C loops (a bytes array's
    tolist, zip, update): no Python statement runs per flow event."""
    pos, n_cat0 = _flow_hits(blk)
    if not len(pos):
        return
    lo, hi, slow, n_cat0 = _flow_objects(blk, pos, n_cat0)
    _record_flows(blk, _read_flow_fields(blk, lo, hi, slow, n_cat0), flows)


def _flow_hits(blk: _BlockText):
    """The opening quotes of the block's category strings before ``cut`` (category 0's first,
    each in file order) and how many are category 0's."""
    code, qo, w64 = blk.code, blk.qo, blk.w64
    m = np.flatnonzero((code == _FLOW_CATS[0][0] * 64 + len(_FLOW_CATS[0]))
                       | (code == _FLOW_CATS[1][0] * 64 + len(_FLOW_CATS[1])))
    if not len(m):
        return m, 0
    hits = []
    for cat in _FLOW_CATS:
        h = m[_equals(w64, qo[m] + 1, cat)]
        hits.append(qo[h[qo[h] < blk.cut]])
    return np.concatenate(hits), len(hits[0])


def _flow_objects(blk: _BlockText, pos, n_cat0: int):
    """Each hit's object: the brackets either side of it when they are a ``{`` and a ``}``,
    else the raw braces found by a byte search (a hit with no object around it is dropped, as
    flow_event's caller drops it). Returns (lo, hi, slow: not the nearest brackets, n_cat0)."""
    b, raw_br, buf, start = blk.bp, blk.raw_br, blk.buf, blk.start
    size = len(b) - _PAD
    x = np.searchsorted(raw_br, pos)                    # the brackets either side of the hit
    nb = len(raw_br)
    lo = raw_br[np.maximum(x - 1, 0)] if nb else pos.copy()
    hi = raw_br[np.minimum(x, nb - 1)] if nb else pos.copy()
    near = (x > 0) & (x < nb) & (b[lo] == 123) & (b[hi] == 125)
    slow = ~near
    keep = np.ones(len(pos), dtype=bool)
    for r in np.flatnonzero(~near).tolist():            # another bracket between: the raw braces
        p = int(pos[r])
        o, c = buf.rfind(b"{", start, start + p), buf.find(b"}", start + p, start + size)
        if o < 0 or c < 0:
            keep[r] = False                             # no object around it: skipped, as before
        else:
            lo[r], hi[r] = o - start, c - start
    if not keep.all():
        n_cat0 = int(keep[:n_cat0].sum())
        lo, hi, slow = lo[keep], hi[keep], slow[keep]
    return lo, hi, slow, n_cat0


def _flow_keys(blk: _BlockText, lo, hi, slow):
    """Each object's first ``"cat"``, ``"ph"``, ``"id"``, ``"ts"`` string among its first
    :data:`_FS` strings: [(found, the byte after its closing quote)] in that order. ``slow``
    gets the objects outside the shape the string list reads exactly (a brace inside a string,
    a backslash, a string followed by a byte JSON does not allow there, a key not found among
    the first _FS strings of a longer object)."""
    qo, qc, bs, odd_qc = blk.qo, blk.qc, blk.bs, blk.odd_qc
    f = np.searchsorted(qo, lo)                         # the object's strings: f .. f + nstr - 1
    nstr = np.searchsorted(qo, hi) - f
    slow |= (f > 0) & (qc[np.maximum(f - 1, 0)] > lo)  # its '{' inside a string
    slow |= (nstr > 0) & (qc[np.maximum(f + nstr - 1, 0)] > hi)   # its '}' inside a string
    if len(bs):
        slow |= np.searchsorted(bs, lo) != np.searchsorted(bs, hi)
    if len(odd_qc):
        slow |= np.searchsorted(odd_qc, lo) != np.searchsorted(odd_qc, hi)
    cols = np.arange(_FS)
    idx = np.minimum(f[:, None] + cols, len(qo) - 1)
    key = _KEY_OF_CODE[blk.code[idx]]                   # which flow key each string may be
    key[cols >= nstr[:, None]] = -1
    cells = np.flatnonzero(key >= 0)
    kc = key.ravel()[cells]
    at = qo[idx.ravel()[cells]]
    key.ravel()[cells[(blk.w64[at + 1] & _KEY_MASK[kc]) != _KEY_WORD[kc]]] = -1
    rows = np.arange(len(lo))
    found = []
    for k in range(len(_FLOW_KEYS)):                    # each key's first string in the object
        mk = key == k
        j = np.argmax(mk, axis=1)
        has = mk[rows, j]
        slow |= ~has & (nstr > _FS)                     # not among the first _FS strings: unknown
        found.append((has, qo[idx[rows, j]] + _KEY_LEN[k] + 1))
    return found


def _read_flow_fields(blk: _BlockText, lo, hi, slow, n_cat0: int) -> _FlowHits:
    """The ph, id and ts values of each hit's object (:func:`_flow_value`), its flow start or
    end by flow_event's rule, and the id / ts texts of those read here."""
    b = blk.bp
    n = len(lo)
    (has_cat, _), (has_ph, ph_kc), (has_id, id_kc), (has_ts, ts_kc) = _flow_keys(blk, lo, hi, slow)
    v_ok, v_n, v_lo = _flow_value(b, blk.w64, np.concatenate([ph_kc, id_kc, ts_kc]), np.tile(hi, 3))
    ph_ok, id_ok, ts_ok = v_ok[:n], v_ok[n:2 * n], v_ok[2 * n:]
    live = has_cat & has_ph                             # no "cat" or no "ph": the hit adds nothing
    slow |= live & ~ph_ok
    ph_b = np.where(v_n[:n] == 1, b[v_lo[:n]], 0)
    ph_s = live & ph_ok & (ph_b == 115)
    ph_f = live & ph_ok & (ph_b == 102)
    slow |= (ph_s | ph_f) & has_id & ~id_ok
    slow |= ph_s & has_id & has_ts & ~ts_ok
    is_st = ph_s & has_id & ~slow
    is_en = ph_f & has_id & ~slow
    if _FLOW_STATS is not None:
        _FLOW_STATS["hits"] += n
        _FLOW_STATS["slow"] += int(slow.sum())
    en = np.flatnonzero(is_en)
    st = np.flatnonzero(is_st)
    t_ok = has_ts[st]                                   # no "ts" or an empty value: b"0", as flow_event
    texts = _flow_texts(b, np.concatenate([v_lo[n + en], v_lo[n + st], np.where(t_ok, v_lo[2 * n + st], 0)]),
                        np.concatenate([v_n[n + en], v_n[n + st], np.where(t_ok, v_n[2 * n + st], 0)]),
                        empty_from=len(en) + len(st))
    return _FlowHits(lo=lo, hi=hi, slow=slow, n_cat0=n_cat0, st=st, en=en,
                     e_ids=texts[:len(en)], s_ids=texts[len(en):len(en) + len(st)], s_ts=texts[len(en) + len(st):])


def _record_flows(blk: _BlockText, fh: _FlowHits, flows) -> None:
    """``flows`` = (starts, ended) gets the block's flow starts and ends per category in file
    order, each hit outside the shape read by :func:`flow_event` in its place."""
    starts, ended = flows
    en, st, s_ids, s_ts = fh.en, fh.st, fh.s_ids, fh.s_ts
    n = len(fh.lo)
    for c, cat in enumerate(_FLOW_CATS):
        a, z = (0, fh.n_cat0) if c == 0 else (fh.n_cat0, n)
        if a == z:
            continue
        e0, e1 = np.searchsorted(en, [a, z]).tolist()
        ended.update(zip(repeat(cat), fh.e_ids[e0:e1]))
        s0, s1 = np.searchsorted(st, [a, z]).tolist()
        done = s0
        for h in (np.flatnonzero(fh.slow[a:z]) + a).tolist():   # a rare hit outside the shape, in its place
            k = int(np.searchsorted(st, h))
            starts.update(zip(zip(repeat(cat), s_ids[done:k]), s_ts[done:k]))
            done = k
            obj = blk.buf[blk.start + int(fh.lo[h]):blk.start + int(fh.hi[h]) + 1]
            flow_event(bytes(obj), cat, starts, ended)
        starts.update(zip(zip(repeat(cat), s_ids[done:s1]), s_ts[done:s1]))


TEMPLATE_FIRST = True                       # blocks after the first try the learned template first
_TW = 40                                    # a template hole's end is looked for in its first _TW bytes
_BRACKETS = frozenset(b"{}[]")


@dataclass
class _Tmpl:
    """One flat layout with its spacing, learned from a block where most events take it:
    ``lits`` the literal bytes around the holes (``lits[0]`` begins with the event's ``{``,
    ``lits[-1]`` ends with its ``}``), ``layout`` the keys with their value kinds (see
    :func:`_layout`), one hole per key, in order."""
    lits: list
    layout: list
    lens: list
    holes: list = None                      # one :class:`_Hole` per key (see _plan_holes)
    rem: list = None                        # bytes an event holds at least from each value's start on


@dataclass
class _Hole:
    """How :func:`_template_events` reads one value of a template: a window of ``nw`` 8-byte
    words gathered from ``8 p`` bytes before the value's first byte, so that the literal
    before it (``o`` bytes) is right-aligned in words 0..p-1 (``lit`` words and masks) and the
    value's bytes begin word p. ``t``: the byte that ends the value (the next literal's first);
    ``g``: the learned event's value length. ``role``: name / ph / ts / pid / dur / other."""
    role: str
    is_str: bool
    o: int
    p: int
    nw: int
    lit: tuple
    t: int
    g: int
    nxt: int                                # the next literal's length
    kinds: list = None                      # name: (code, length, [(word, mask)] of name + t)
    common: tuple = None                    # pid: ([(word, mask)] of the learned pid + t, length, value)
    rep_dot: int = -1                       # ts: the learned ts's '.' offset


def _words(data: bytes, width: int, right: bool = False):
    """``data`` as little-endian 8-byte (word, mask) pairs over ``width`` words, left-aligned
    (or right-aligned in the last words when ``right``)."""
    pad = 8 * width - len(data)
    raw = (bytes(pad) + data) if right else (data + bytes(pad))
    known = (bytes(pad) + b"\xff" * len(data)) if right else (b"\xff" * len(data) + bytes(pad))
    return [(int.from_bytes(raw[8 * j:8 * j + 8], "little"), int.from_bytes(known[8 * j:8 * j + 8], "little"))
            for j in range(width)]


def _plan_holes(layout, lits, lens, ev: bytes):
    """The per-value plans (:class:`_Hole`) of a template learned from the event ``ev``."""
    holes, at = [], len(lits[0])
    for i, ((key, is_str), guess) in enumerate(zip(layout, lens)):
        value = ev[at:at + guess]
        lit, t = lits[i], lits[i + 1][0]
        role = {b"name": "name", b"ph": "ph", b"ts": "ts", b"pid": "pid", b"dur": "dur"}.get(key, "other")
        vw = {"name": 4, "ts": 4, "ph": 1}.get(role, 2)
        p = (len(lit) + 7) // 8
        h = _Hole(role=role, is_str=is_str, o=len(lit), p=p, nw=p + vw, lit=_words(lit, p, right=True), t=t,
                  g=guess, nxt=len(lits[i + 1]))
        if role == "name":
            h.kinds = [(c, len(k), _words(k.encode() + bytes([t]), vw)) for c, k in enumerate(KIND_NAMES)
                       if len(k) + 1 <= 8 * vw]
        elif role == "pid" and 0 < guess < 8 * vw:
            ok, dot, ns = _number(np.frombuffer(value + bytes(48), np.uint8), _i64([0]), _i64([guess]), json_number=True)
            if ok[0] and not dot[0]:
                h.common = (_words(value + bytes([t]), vw), guess, int(ns[0]) // 1000)
        elif role == "ts":
            h.rep_dot = value.find(b".")
        holes.append(h)
        at += guess + len(lits[i + 1])
    return holes


def _compile(layout, template, ev: bytes):
    """A :class:`_Tmpl` from a layout and its byte template (:func:`_template`), or None where
    the literals could be read another way: a bracket other than the event's own two, a key
    that is a flow category (the flow pass would look at it), or a literal that begins with a
    byte a value may hold."""
    spans, holes = template
    lits = [bytes(lit) for _, _, lit in spans]
    lens, at = [], len(lits[0])                     # the learned event's value lengths (first guesses)
    for lit in lits[1:]:
        hi = ev.find(lit[:1], at)
        if hi < 0 or ev[hi:hi + len(lit)] != lit:
            return None
        lens.append(hi - at)
        at = hi + len(lit)
    if at != len(ev) or not ev.startswith(lits[0]):
        return None
    if len(lits) != len(holes) + 1 or not lits[0].startswith(b"{") or not lits[-1].endswith(b"}"):
        return None
    if sum(c in _BRACKETS for lit in lits for c in lit) != 2 or any(b"\\" in lit for lit in lits):
        return None
    if any(k in _FLOW_CATS for k, _ in layout):
        return None
    for (key, is_str), lit in zip(layout, lits[1:]):
        if not lit or (lit[0] != 34 if is_str else lit[0] not in b" \t\r\n,}"):
            return None
    tm = _Tmpl(lits=lits, layout=list(layout), lens=lens)
    tm.holes = _plan_holes(tm.layout, lits, lens, ev)
    tm.rem = [sum(1 + len(lit) for lit in lits[i + 1:]) for i in range(len(tm.holes))]
    return tm


def _find_byte(w64, p, c: int, maxlen: int) -> np.ndarray:
    """Offset of the first byte ``c`` at or after each ``p`` (within ``maxlen`` bytes), -1 where
    there is none (SWAR over 8-byte loads, each word only for the rows still looking)."""
    off = np.full(len(p), -1, dtype=np.int64)
    todo = np.arange(len(p))
    cc = _U(int.from_bytes(bytes([c]) * 8, "little"))
    for k in range(0, maxlen, 8):
        j = _first_byte(_zero_bytes(w64[p[todo] + k] ^ cc))
        hit = j < 8
        off[todo[hit]] = j[hit] + k
        todo = todo[~hit]
        if not len(todo):
            break
    return off


_ONES = _U(0x0101010101010101)
_FULL = 2 ** 64 - 1


def _first_eq(x, c: int):
    """Index (0..7) of the first byte of the words ``x`` equal to ``c``; 8 where none is (the
    lowest flag of the has-zero test is exact: a borrow only flags bytes above a zero)."""
    y = x ^ _U(c * 0x0101010101010101)
    return _first_byte((y - _ONES) & ~y & _H)


def _match_words(x, pairs) -> np.ndarray:
    """Rows of the words ``x`` (n x k) whose first len(pairs) words equal the (word, mask) pairs."""
    ok = None
    for j, (w, m) in enumerate(pairs):
        if not m:
            continue
        col = x[:, j] if m == _FULL else x[:, j] & _U(m)
        e = col == _U(w)
        ok = e if ok is None else ok & e
    return np.ones(len(x), dtype=bool) if ok is None else ok


def _hole_slow(b, w64, h: _Hole, v):
    """A value read as the per-value matcher it replaced (tests/ingest/test_trace_template_window.py) reads it (its end the first ``h.t`` byte
    within :data:`_TW` bytes, then the checks of :func:`_hole_values`), for the rows the word
    window does not settle. Returns (ok, length, value: kind code / pid / ts_ns / dur_ns)."""
    off = _find_byte(w64, v, h.t, _TW)
    ok = off >= 0
    L = np.where(ok, off, 0)
    lo, hi = v, v + L
    val = np.zeros(len(v), dtype=np.int64)
    if h.role == "name":
        val -= 1
        for code, kname in enumerate(KIND_NAMES):
            kb = kname.encode()
            m = np.flatnonzero(L == len(kb))
            val[m[_equals(w64, lo[m], kb)]] = code
        ok &= val >= 0
    elif h.role == "ph":
        ok &= (L == 1) & (b[lo] == 88)
    elif h.role == "ts":
        tok, val = _fixed_ts(b, w64, lo, hi, h.g, h.rep_dot)
        rest = np.flatnonzero(~tok)
        if len(rest):
            tok[rest], val[rest] = _number(b, lo[rest], hi[rest], json_number=not h.is_str)[::2]
        ok &= tok
    elif h.role == "pid":
        pok, pdot, ns = _numbers(b, w64, lo, hi, json_number=True)
        ok &= pok & ~pdot
        val = ns // 1000
    elif h.role == "dur":
        vok, _, val = _numbers(b, w64, lo, hi, json_number=True)
        ok &= vok
    else:                                           # "other": validated only
        ok &= _numbers(b, w64, lo, hi, json_number=True)[0]
    return ok, L, val


def _hole_fast(b, w64, h: _Hole, V, v):
    """The value of each row from its window's value words ``V`` (n x k, the value's first
    byte first), with the rules of :func:`_hole_values` and the value ending at the first
    ``h.t`` byte. Returns (ok, length, value, unsettled: rows for :func:`_hole_slow`); a
    length or value the same for every row may be an int."""
    n = len(V)
    x0 = V[:, 0]
    none = v[:0]
    if h.role == "name":                            # the name and its closing quote equal a kept name's
        kind = np.full(n, -1, dtype=np.int64)
        L = np.zeros(n, dtype=np.int64)
        for code, ln, pairs in h.kinds:
            w, m = pairs[0]
            r = np.flatnonzero((x0 & _U(m)) == _U(w) if m != _FULL else x0 == _U(w))
            for j in range(1, len(pairs)):
                w, m = pairs[j]
                if m:
                    r = r[(V[r, j] & _U(m)) == _U(w)]
            kind[r] = code
            L[r] = ln
        return kind >= 0, L, kind, none
    if h.role == "ph":                              # "X" and its closing quote
        return (x0 & _U(0xFFFF)) == _U(88 | h.t << 8), 1, 0, none
    if h.role == "ts":
        g = h.g
        if h.rep_dot != 16 or not 18 <= g <= 25:
            return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.arange(n)
        ok = ((V[:, g >> 3] >> _U(8 * (g & 7))) & _U(0xFF)) == _U(h.t)
        ok, ts = _fixed_ts_x(V, ok, g)              # digits and the point: no t before byte g
        return ok, g, ts, np.flatnonzero(~ok)
    if h.role == "pid" and h.common is not None:
        pairs, ln, value = h.common
        ok = _match_words(V, pairs)
        return ok, ln, value, np.flatnonzero(~ok)
    if h.role == "pid":
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.arange(n)
    L = _first_eq(x0, h.t)                          # dur / other: the first t in the first 8 bytes
    far = np.flatnonzero(L == 8)
    if len(far):
        L[far] += _first_eq(V[far, 1], h.t)
    if h.role == "dur":
        ok, val = _short_dec3(x0, L)
    else:
        ok, val = _json_ints_x(x0, L), np.zeros(n, dtype=np.int64)
    rest = np.flatnonzero(~ok)                      # longer, signed, other forms: as _numbers does
    if len(rest):
        lo = v[rest]
        r_ok, _, r_val = _number(b, lo, lo + L[rest], json_number=True)
        ok[rest] = r_ok & (L[rest] < 16)
        if h.role == "dur":
            val[rest] = r_val
    return ok, L, val, rest[L[rest] == 16]


def _template_events(b, w64, so, tm: _Tmpl, head: int = 0):
    """The events beginning at the ``{`` positions ``so`` whose bytes are exactly the template's
    literals around conforming values (each value ends at the first byte that begins the next
    literal and passes the checks of :func:`_hole_values`): the same events and values as
    the per-value matcher it replaced (tests/ingest/test_trace_template_window.py), read value by value from one gathered window of words per
    value (the literal before it right-aligned, the value's bytes word-aligned after it;
    :class:`_Hole`), so that the literal check, the value's end and its digits are column
    operations on that window; rows the window does not settle (a value longer than it, or
    not of the learned form) are read by :func:`_hole_slow`. ``w64``: the unaligned word
    view of the block from ``head`` bytes before b's first byte (a window may begin there;
    those bytes are masked). Returns (the ``{`` positions taken, their ``}`` positions, kind,
    pid, ts_ns, dur_ns)."""
    n_b = len(b)
    room = len(w64) + 7                             # bytes under w64 (head, the block, its zero padding)
    v = so + tm.holes[0].o                          # each row's current value start
    rows = np.arange(len(so))
    got, end_done = {}, False
    for i, h in enumerate(tm.holes):
        if len(v) and int(v.max()) + tm.rem[i] > n_b:  # the rest of an event cannot lie in the block
            fit = v + tm.rem[i] <= n_b
            rows, v = rows[fit], v[fit]
            got = {k: a[fit] if isinstance(a, np.ndarray) else a for k, a in got.items()}
        ws = v + (head - 8 * h.p)
        lim = room - 8 * h.nw
        edge = np.flatnonzero((ws < 0) | (ws > lim)) if len(ws) and (ws.min() < 0 or ws.max() > lim) else ws[:0]
        W = _gather(w64, np.clip(ws, 0, lim) if len(edge) else ws, h.nw)
        lit_ok = _match_words(W, h.lit)
        ok, L, val, slow = _hole_fast(b, w64[head:], h, W[:, h.p:], v)
        ok &= lit_ok
        if len(slow):
            slow = slow[lit_ok[slow]]
        if len(edge):
            slow = np.union1d(slow, edge)
        if len(slow):
            s_ok, s_L, s_val = _hole_slow(b, w64[head:], h, v[slow])
            s_ok &= _equals(w64[head:], v[slow] - h.o, tm.lits[i])
            if not isinstance(L, np.ndarray):
                L = np.full(len(v), L, dtype=np.int64)
            if h.role in ("name", "pid", "ts", "dur") and not isinstance(val, np.ndarray):
                val = np.full(len(v), val, dtype=np.int64)
            ok[slow], L[slow] = s_ok, s_L
            if h.role in ("name", "pid", "ts", "dur"):
                val[slow] = s_val
        if h.role in ("name", "pid", "ts", "dur"):      # the values kept (an int: every row's)
            got[h.role] = val
        end_done = False
        if i + 1 == len(tm.holes) and not isinstance(L, np.ndarray) and (L & 7) + len(tm.lits[-1]) <= 8 \
                and h.p + (L >> 3) < h.nw:              # every row's value has one length: the last literal
            end = tm.lits[-1]                           # is in this window
            word = int.from_bytes(end, "little")
            ok &= ((W[:, h.p + (L >> 3)] >> _U(8 * (L & 7))) & _U((1 << (8 * len(end))) - 1)) == _U(word)
            end_done = True
        v += L
        if i + 1 < len(tm.holes):
            v += h.nxt
        if not ok.all():
            rows, v = rows[ok], v[ok]
            got = {k: a[ok] if isinstance(a, np.ndarray) else a for k, a in got.items()}
    end = tm.lits[-1]
    ok = v + len(end) <= n_b
    if not end_done:
        ok &= _equals(w64[head:], v, end)
    out = [so[rows[ok]], v[ok] + len(end) - 1]
    for role in ("name", "pid", "ts", "dur"):
        a = got.get(role, 0)
        out.append(a[ok] if isinstance(a, np.ndarray) else np.full(int(ok.sum()), a, dtype=np.int64))
    return tuple(out)


def _set_bytes(m: np.ndarray) -> np.ndarray:
    """np.flatnonzero(m) of a bool array whose length is a multiple of 8: the non-zero 8-byte
    words first (an eighth of the elements), then each word's set bytes (int64, increasing)."""
    u = m.view(np.uint64)
    w = np.flatnonzero(u != 0)
    x = u[w]
    pos = (w << 3) + _first_byte(x << _U(7))
    x &= x - _U(1)                                  # the lowest set byte cleared (each is 0x01)
    more = np.flatnonzero(x)
    if not len(more):
        return pos
    extra = []
    while len(more):                                # words holding two or more: rare
        w, x = w[more], x[more]
        extra.append((w << 3) + _first_byte(x << _U(7)))
        x &= x - _U(1)
        more = np.flatnonzero(x)
    extra = np.sort(np.concatenate(extra))
    return np.insert(pos, np.searchsorted(pos, extra), extra)


def _block_tmpl(buf: bytearray, start: int, end: int, first: bool, base_idx: int, out: dict):
    """:func:`_block` for a block where most events take the learned template (``out["tmpl"]``):
    the events that match it byte for byte (:func:`_template_events`) are read from their
    holes, and the block is then analysed by _block with each run of them (matched events
    separated by a comma and whitespace only) replaced by one ``{}`` (so the quote, bracket and
    candidate passes run over the other events' bytes only; event indices are mapped back by
    the runs' lengths). Taken only when every run is a whole top-level item of that compacted
    block; returns None
    (the caller runs _block on the block itself) otherwise, or where the compacted block is
    refused, or where few events match (the template is then dropped)."""
    tm = out["tmpl"]
    bp = np.frombuffer(buf, dtype=np.uint8, count=end + _PAD - start, offset=start)
    b = bp[:len(bp) - _PAD]
    n_b = len(b)
    head = min(start, _HEAD)                        # bytes before the block a word window may cover
    w64 = np.ndarray((len(bp) - 7 + head,), "<u8", buffer=buf, offset=start - head, strides=(1,))
    m0, _, _, _ = out["scratch"].masks(n_b)
    np.equal(b, 123, out=m0[:n_b])
    so = _set_bytes(m0)
    eo, ec, kind, pid, ts, dur = _template_events(b, w64, so, tm, head)
    if len(eo) * 2 < len(so):
        out["tmpl"] = None                          # few take it: back to _block (which may learn again)
        if not len(eo):
            return None
    # runs: matched events separated by a comma and whitespace only, each run one '{}' item
    g_lo, g_hi = ec[:-1] + 1, eo[1:]
    gl = g_hi - g_lo
    pure = gl <= 8
    sep = b[g_lo] == 44                             # "," or ", " (the writers' separators) at once
    sh = np.flatnonzero(pure & ~(sep & ((gl == 1) | ((gl == 2) & (b[g_lo + 1] == 32)))))
    if len(sh):
        lo, hi = g_lo[sh], g_hi[sh]
        pp = _skip_ws(b, lo, hi, 1)
        pure[sh] = (pp < hi) & (b[np.minimum(pp, n_b - 1)] == 44) & _all_ws(b, pp + 1, hi)
    first_of = np.flatnonzero(np.concatenate([[True], ~pure]))      # each run's first match
    last_of = np.concatenate([first_of[1:] - 1, [len(eo) - 1]])
    r_len = last_of - first_of + 1
    seg_lo = np.concatenate([[0], ec[last_of]])     # kept: each run's last '}' .. the next run's '{'
    seg_hi = np.concatenate([eo[first_of], [n_b - 1]])
    lens = seg_hi - seg_lo + 1
    ends = np.cumsum(lens)
    total = int(ends[-1])
    src = np.repeat(seg_lo - (ends - lens), lens) + np.arange(total)
    cb = bytearray(total + _PAD)
    np.frombuffer(cb, dtype=np.uint8, count=total)[:] = b[src]
    sub = {"idx": [], "pid": [], "kind": [], "ts": [], "dur": [], "parsed": [], "flows": ({}, set()),
           "scratch": out["scratch"]}
    try:
        used, ne, closed = _block(cb, 0, total, first, 0, sub)
    except NoFastPath:
        return None
    at = ends[:-1] - 1                              # each run's '{' in the compacted block
    s_eo, s_ec = sub.get("eo", at[:0]), sub.get("ec", at[:0])
    k = np.searchsorted(s_eo, at)
    if not len(s_eo) or (k >= len(s_eo)).any() or (s_eo[np.minimum(k, len(s_eo) - 1)] != at).any() \
            or (s_ec[np.minimum(k, len(s_ec) - 1)] != at + 1).any():
        return None                                 # not every run is a top-level item: read it as it is
    more = np.concatenate([[0], np.cumsum(r_len - 1)])   # events a run adds beyond its one item, before each run

    def real(t):                                    # compacted item index -> event index in the block
        return t + more[np.searchsorted(k, t)]
    cols = {"idx": base_idx + np.repeat(k + more[:-1] - first_of, r_len) + np.arange(len(eo)),
            "pid": pid, "kind": kind.astype(np.int8), "ts": ts, "dur": dur}
    if sub["idx"]:
        sub["idx"] = [real(t) + base_idx for t in sub["idx"]]
        cols = {c: np.concatenate([v] + sub[c]) for c, v in cols.items()}
        order = file_order(cols["idx"])
        if order is not None:
            cols = {c: v[order] for c, v in cols.items()}
    for c, v in cols.items():
        out[c].append(v)
    if sub["parsed"]:
        at_t = real(np.array([t for t, _ in sub["parsed"]], dtype=np.int64)) + base_idx
        out["parsed"].extend(zip(at_t.tolist(), (ev for _, ev in sub["parsed"])))
    starts, ended = out["flows"]
    starts.update(sub["flows"][0])
    ended.update(sub["flows"][1])
    return (int(src[used - 1]) + 1 if used else 0), ne + int(more[-1]), closed


@dataclass(frozen=True)
class _Items:
    """The top-level items (events) of one block: ``eo`` / ``ec`` their braces (byte offsets);
    ``top_open`` / ``top_close`` the same braces as indices into the brackets outside strings,
    whose real-quote counts are ``nq_before``; ``cut`` the end of the last whole item;
    ``closed`` whether the root's ``]`` is in the block."""
    eo: np.ndarray
    ec: np.ndarray
    top_open: np.ndarray
    top_close: np.ndarray
    nq_before: np.ndarray
    cut: int
    closed: bool


def _block(buf: bytearray, start: int, end: int, first: bool, base_idx: int, out: dict):
    """Analyse ``buf[start:end]``, which starts at an item start (or right after the root
    ``[``) and is followed by _PAD zero bytes. Returns (bytes consumed, items completed, root
    closed). Steps: the block's structure (quotes, brackets, items, separators), its candidate
    events and flow hits, the flat candidates by layout, the others parsed one by one."""
    bp = np.frombuffer(buf, dtype=np.uint8, count=end + _PAD - start, offset=start)
    scr = out.get("scratch") or _Scratch()
    q, bs, raw_br, br, nq_before = _quotes_and_brackets(buf, start, end, bp, scr)
    items = _top_items(bp[:len(bp) - _PAD], br, nq_before, first)
    if items is None:
        return 0, 0, False
    out["eo"], out["ec"] = items.eo, items.ec
    blk, cs = _string_index(buf, start, bp, q, bs, raw_br, items.cut, scr)
    cand_ev = _candidate_events(blk, cs, items.eo)
    _flows(blk, out["flows"])
    slow = _read_flat(blk, items, cand_ev, base_idx, out)
    _parse_one_by_one(buf, start, items, slow, base_idx, out)
    return items.cut, len(items.eo), items.closed


def _quotes_and_brackets(buf: bytearray, start: int, end: int, bp: np.ndarray, scr: _Scratch):
    """The block's real quotes (a quote after an odd run of backslashes is escaped), its
    backslashes, every bracket (in strings too, for the flow pass), and the brackets outside
    strings with the number of real quotes before each.

    Raises:
        NoFastPath: a raw control character inside a string.
    """
    b = bp[:len(bp) - _PAD]
    n_b = len(b)
    mq, m1, m2, u8 = scr.masks(n_b)
    np.equal(b, 34, out=mq[:n_b])                   # quotes (dense) and brackets (sparse) apart
    q = np.flatnonzero(mq)
    bs = np.flatnonzero(np.equal(b, 92, out=m1)) if buf.find(b"\\", start, end) >= 0 else q[:0]  # memchr first
    escaped = _escaped_quotes(bp, q, bs)            # escaped quotes are no quotes
    if len(escaped):
        keep = np.ones(len(q), dtype=bool)
        keep[np.searchsorted(q, escaped)] = False
        q = q[keep]
        mq[escaped] = False
    np.bitwise_or(b, 32, out=u8)                    # '[' / ']' | 32 are '{' / '}'
    np.equal(u8, 123, out=m1)
    m1 |= np.equal(u8, 125, out=m2)
    br = np.flatnonzero(m1)
    words = np.packbits(mq, bitorder="little").view("<u8")   # the real quotes as a bitmap
    if n_b and int(b.min()) < 32:                   # a raw control character inside a string
        ctl = np.flatnonzero(np.less(b, 32, out=m1))
        if ((_count_before(words, ctl) & 1) == 1).any():
            raise NoFastPath("a control character inside a string")
    nq_before = _count_before(words, br)            # real quotes before each bracket (int64)
    outside = (nq_before & 1) == 0
    return q, bs, br, br[outside], nq_before[outside]


def _top_items(b: np.ndarray, br, nq_before, first: bool) -> _Items | None:
    """The block's top-level items from its brackets outside strings (``br``), or None when
    the root is open and no item ends in the block: the root is one array of objects closed
    by ``]`` with only whitespace after it, brackets pair by kind, items are separated by one
    comma and whitespace.

    Raises:
        NoFastPath: any other structure.
    """
    ch = b[br]
    opener = (ch == 123) | (ch == 91)
    depth = 1 + np.cumsum(np.where(opener, 1, -1), dtype=np.int64)
    if len(depth) and depth.min() < 0:
        raise NoFastPath("unbalanced")
    root_end = _root_end(b, br, ch, depth)
    closed = root_end is not None
    if closed:
        z = int(np.searchsorted(br, root_end))
        br, ch, depth, opener = br[:z], ch[:z], depth[:z], opener[:z]
    top_open = np.flatnonzero(opener & (depth == 2))
    top_close = np.flatnonzero(~opener & (depth == 1))
    ne = len(top_close)
    if not closed and ne == 0:
        return None
    top_open = top_open[:ne] if len(top_open) > ne else top_open
    if len(top_open) != ne:
        raise NoFastPath("item structure")
    if ne and (ch[top_open] != 123).any():
        raise NoFastPath("an item is not an object")
    if ne and (ch[top_close] != 125).any():
        raise NoFastPath("brackets do not pair")
    eo, ec = br[top_open], br[top_close]
    cut = int(ec[-1]) + 1 if ne else 0
    nested = np.flatnonzero((top_close - top_open) != 1) if ne else top_open[:0]
    if len(nested) and (ch < 100).any():             # nested values: pair their brackets by kind
        _check_nested_pairs(br, ch, depth, opener, top_open[nested], top_close[nested], ne, cut)
    _check_separators(b, eo, ec, root_end, first)
    return _Items(eo=eo, ec=ec, top_open=top_open, top_close=top_close, nq_before=nq_before, cut=cut,
                  closed=closed)


def _root_end(b: np.ndarray, br, ch, depth) -> int | None:
    """The byte offset of the root's closing ``]`` when it is in the block (depth 0), else None.

    Raises:
        NoFastPath: the root closed by another bracket, or anything but whitespace after it.
    """
    zero = np.flatnonzero(depth == 0)
    if not len(zero):
        return None
    z = int(zero[0])
    if ch[z] != 93:
        raise NoFastPath("root not closed by ]")
    root_end = int(br[z])
    if not _all_ws(b, _i64([root_end + 1]), _i64([len(b)]))[0]:
        raise NoFastPath("data after the array")
    return root_end


def _check_nested_pairs(br, ch, depth, opener, n_open, n_close, ne: int, cut: int) -> None:
    """Brackets of the items holding nested values pair by kind (``n_open`` / ``n_close``:
    those items' first and last bracket indices; ``ne``, ``cut``: the block's item count and
    the end of its last item). Braces only need no
    check: the depth count alone proves their pairing, so the caller skips blocks with no
    ``[`` / ``]``.

    Raises:
        NoFastPath: a bracket closed by the other kind.
    """
    if len(n_open) * 4 < ne:                         # a few such events: their brackets only
        lens = n_close - n_open + 1
        inside = np.repeat(n_open - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    else:
        inside = np.flatnonzero(br < cut)
    try:
        _check_pairs(br[inside], ch[inside], depth[inside], opener[inside], 0)
    except ScanError:
        raise NoFastPath("brackets do not pair") from None


def _check_separators(b: np.ndarray, eo, ec, root_end: int | None, first: bool) -> None:
    """Whitespace before the first item, exactly one comma and whitespace between items,
    whitespace before the root's ``]``; an empty block closing the root only right after ``[``.

    Raises:
        NoFastPath: any other byte there (a trailing comma included).
    """
    ne = len(eo)
    if ne:
        if not _all_ws(b, _i64([0]), eo[:1])[0]:
            raise NoFastPath("before the first item")
        lo, hi = ec[:-1] + 1, eo[1:]
        p = _skip_ws(b, lo, hi, 1)
        if ((p >= hi) | (b[np.minimum(p, len(b) - 1)] != 44)).any() or not _all_ws(b, p + 1, hi).all():
            raise NoFastPath("item separator")
    if root_end is not None:
        tail_lo = int(ec[-1]) + 1 if ne else 0
        if not _all_ws(b, _i64([tail_lo]), _i64([root_end]))[0]:
            raise NoFastPath("before the closing ]")
        if ne == 0 and not first:
            raise NoFastPath("trailing comma")


def _string_index(buf: bytearray, start: int, bp: np.ndarray, q, bs, raw_br, cut: int, scr: _Scratch):
    """The block's strings (:class:`_BlockText`) and the candidate strings of
    :func:`_candidates` (a kept name or ProfilerStep#)."""
    qo, qc = q[0::2], q[1::2]
    after = bp[1:][q]                               # the byte after each quote (one gather)
    first_b, after_s = after[0::2], after[1::2]
    if len(qc) < len(qo):
        qo, first_b = qo[:len(qc)], first_b[:len(qc)]
    w64 = np.ndarray((len(bp) - 7,), "<u8", buffer=buf, offset=start, strides=(1,))
    cs, code, skind = _candidates(bp, w64, qo, qc, first_b, scr.ints(len(qo)))
    odd = np.flatnonzero(_NOT_AFTER_STRING[after_s])
    odd = odd[qc[odd] < cut]                        # (a string of the unfinished event: read with it next block)
    blk = _BlockText(buf=buf, start=start, bp=bp, w64=w64, q=q, qo=qo, qc=qc, code=code, skind=skind, bs=bs,
                     odd_qc=qc[odd], raw_br=raw_br, cut=cut)
    return blk, cs


def _candidate_events(blk: _BlockText, cs, eo) -> np.ndarray:
    """The items that may be kept, sorted: those holding a candidate string (``cs``), a ``\\u``
    escape, or a string followed by a byte JSON does not allow there (e.g. ``"x"Free"``: the
    parse names it invalid)."""
    ne = len(eo)
    qo, bs, cut = blk.qo, blk.bs, blk.cut
    cs = cs[qo[cs] < cut]
    cand_ev = np.searchsorted(eo, qo[cs], side="right") - 1
    if len(bs):
        b = blk.bp[:len(blk.bp) - _PAD]
        esc_u = bs[(b[np.minimum(bs + 1, len(b) - 1)] == 117) & (bs < cut)]
        cand_ev = np.concatenate([cand_ev, np.searchsorted(eo, esc_u, side="right") - 1])
    if len(blk.odd_qc):
        cand_ev = np.concatenate([cand_ev, np.searchsorted(eo, blk.odd_qc, side="right") - 1])
    cand_ev = cand_ev[(cand_ev >= 0) & (cand_ev < ne)]
    mark = np.zeros(ne, dtype=bool)
    mark[cand_ev] = True
    return np.flatnonzero(mark)


def _read_flat(blk: _BlockText, items: _Items, cand_ev, base_idx: int, out: dict) -> list:
    """The flat candidates (no nested value, no backslash) read by layout: up to
    :data:`_MAX_LAYOUTS` layouts, each learned from its first event and verified on every
    event of its quote count (:func:`_fast_events`); the kept events' columns go to ``out``,
    and the first layout most of the block's events take becomes the template of the blocks
    after it. Returns the candidates left for the one-by-one parse."""
    eo, ec, top_open, top_close, nq_before = items.eo, items.ec, items.top_open, items.top_close, items.nq_before
    b = blk.bp[:len(blk.bp) - _PAD]
    ne = len(eo)
    flat = (top_close[cand_ev] - top_open[cand_ev]) == 1
    if len(blk.bs):
        nb = np.searchsorted(blk.bs, ec[cand_ev]) - np.searchsorted(blk.bs, eo[cand_ev])
        flat &= nb == 0
    fast = cand_ev[flat]
    slow = list(cand_ev[~flat])
    if not len(fast):
        return slow
    kq = nq_before[top_open[fast]]
    nq = nq_before[top_close[fast]] - kq
    todo = np.arange(len(fast))
    for _ in range(_MAX_LAYOUTS):
        if not len(todo):
            break
        r = todo[0]
        e0, e1 = int(eo[fast[r]]), int(ec[fast[r]])
        lay = _layout(b, e0, e1)
        grp = todo[nq[todo] == 2 * sum(2 if s else 1 for _, s in lay)] if lay is not None else todo[:0]
        if not len(grp) or grp[0] != r:
            slow.append(fast[r])
            todo = todo[1:]
            continue
        okm, kind, pid, ts, dur = _fast_events(blk, kq[grp], eo[fast[grp]], ec[fast[grp]], lay,
                                               _template(b, e0, e1, lay))
        if not okm[0]:
            slow.append(fast[r])
        good = grp[okm]
        if "tmpl" in out and len(good) * 2 >= ne and out["tmpl"] is None:   # most events take it: learn
            out["tmpl"] = _compile(lay, _template(b, e0, e1, lay), b[e0:e1 + 1].tobytes()) if TEMPLATE_FIRST else None
        out["idx"].append(base_idx + fast[good])
        out["pid"].append(pid[okm])
        out["kind"].append(kind[okm].astype(np.int8))
        out["ts"].append(ts[okm])
        out["dur"].append(dur[okm])
        done = np.zeros(len(fast), dtype=bool)
        done[good] = True
        done[r] = True
        todo = todo[~done[todo]]
    slow.extend(fast[todo].tolist())
    return slow


def _parse_one_by_one(buf: bytearray, start: int, items: _Items, slow: list, base_idx: int, out: dict) -> None:
    """The candidates no layout read, each parsed by json.loads (non-integer numbers kept as
    their text), in file order, into ``out["parsed"]``.

    Raises:
        NoFastPath: more than :data:`_MAX_PARSED` (or a quarter of the block's events) to
            parse (the Arrow line scan is faster there), or an event json.loads refuses.
    """
    eo, ec = items.eo, items.ec
    if len(slow) > max(_MAX_PARSED, len(eo) // 4):
        raise NoFastPath("too many events to parse one by one")   # the Arrow line scan is faster here
    for e in sorted(int(i) for i in slow):
        try:                                        # json.loads(raw, parse_float=str) without its per-call decoder
            raw = buf[start + int(eo[e]):start + int(ec[e]) + 1]
            ev = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
        except (ValueError, RecursionError):   # RecursionError: nested ~1,000 deep
            raise NoFastPath("invalid event") from None
        out["parsed"].append((base_idx + e, ev))


def scan(path, start: int, size: int, chunk: int | None = None) -> Extract:
    """Read the bare event array whose ``[`` is at byte ``start`` (see module doc).

    Raises:
        NoFastPath: anything this extractor does not read exactly (the caller falls back).
    """
    chunk = chunk or CHUNK
    out = {"idx": [], "pid": [], "kind": [], "ts": [], "dur": [], "parsed": [], "flows": ({}, set()),
           "scratch": _Scratch(), "tmpl": None}
    n = 0
    ws = b" \t\r\n"
    with open(path, "rb") as f:
        f.seek(start)
        if f.read(1) != b"[":
            raise NoFastPath("no array")
        arr = bytearray(_HEAD + chunk + _PAD)   # reused block buffer (read into, no copy per block)
        plen = 0                        # bytes carried over after its _HEAD bytes (an unfinished event)
        first = True
        need_sep = False        # the last block ended with an event: a comma or the "]" comes next
        eof = False
        pad = bytes(_PAD)
        want = min(chunk, _FIRST)       # a small first block: it learns the template (if any) cheaply
        while True:
            if len(arr) < _HEAD + plen + want + _PAD:
                grown = bytearray(_HEAD + plen + want + _PAD)
                grown[_HEAD:_HEAD + plen] = arr[_HEAD:_HEAD + plen]
                arr = grown
            got = 0
            if not eof:
                with memoryview(arr) as mv:
                    got = f.readinto(mv[_HEAD + plen:_HEAD + plen + want])
            eof = eof or got < want
            end = _HEAD + plen + got
            arr[end:end + _PAD] = pad
            buf = arr
            start = _HEAD
            if need_sep:
                while start < end and buf[start] in ws:
                    start += 1
                if start == end:
                    if eof:
                        raise NoFastPath("truncated")
                    plen = 0
                    continue
                if buf[start] == 93:                   # "]"
                    if buf[start + 1:end].strip(ws) or any(more.strip(ws) for more in iter(lambda: f.read(chunk), b"")):
                        raise NoFastPath("data after the array")
                    break
                if buf[start] != 44:
                    raise NoFastPath("item separator")
                start += 1
                need_sep = False
            res = _block_tmpl(buf, start, end, first, n, out) if out["tmpl"] is not None else None
            used, ne, closed = res if res is not None else _block(buf, start, end, first, n, out)
            n += ne
            first = first and ne == 0
            if closed:
                if any(more.strip(ws) for more in iter(lambda: f.read(chunk), b"")):
                    raise NoFastPath("data after the array")
                break
            if ne == 0 and eof:
                raise NoFastPath("truncated")
            want = want * 2 if ne == 0 else chunk     # an event larger than a block: read on, doubling
            rest = buf[start + used:end]
            plen = len(rest)
            arr[_HEAD:_HEAD + plen] = rest
            need_sep = need_sep or ne > 0
    cols = {k: _concat(out[k], np.int8 if k == "kind" else np.int64) for k in ("idx", "pid", "kind")}
    total = len(cols["idx"])
    block = np.frombuffer(bytearray(24 * total), dtype=np.int64).reshape(3, total)   # ts, dur, (end)
    if total:
        np.concatenate(out["ts"], out=block[0])
        np.concatenate(out["dur"], out=block[1])
    cols["ts"], cols["dur"] = block[0], block[1]    # rows of one block: the summary's frame adds end_ns in place
    order = file_order(cols["idx"])
    if order is not None:
        cols = {k: v[order] for k, v in cols.items()}
    return Extract(n=n, idx=cols["idx"], pid=cols["pid"], kind=cols["kind"], ts_ns=cols["ts"],
                   dur_ns=cols["dur"], parsed=out["parsed"], flows=out["flows"])


def file_order(idx: np.ndarray):
    """The stable argsort of the event indices ``idx``, or None when they are already strictly
    increasing (one layout per block, the usual case: a 2M-event sort saved, ~0.1 s)."""
    if len(idx) < 2 or bool((idx[1:] > idx[:-1]).all()):
        return None
    return np.argsort(idx, kind="stable")
