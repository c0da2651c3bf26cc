"""The word-window template matcher of the byte-level trace scan
(perfgate.ingest.tracebytes._template_events): each value read from one gathered
window of 8-byte words (the literal before it right-aligned, the value word-aligned), with a slow
read for the rows the window does not settle. It must take exactly the events, and give exactly
the values, of the per-value matcher it replaced (kept below as the oracle), on crafted blocks:
escaped quotes, keys in another order, missing fields, non-ASCII names, values of every length
and form, the block's end inside an event, windows that reach before the block; on
hypothesis-mutated events; and every event it takes must be valid JSON with those values."""
from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from perfgate.ingest import tracebytes as tb
from perfgate.ingest.tracebytes import KIND_NAMES, _equals, _find_byte, _hole_values, _TW


def _template_events_oracle(b, w64, so, tm):
    """The matcher _template_events replaced, verbatim: each hole ends at the first
    byte that begins the next literal (the learned length tried first), literals compared word
    by word, values checked and converted by _hole_values."""
    lits, layout = tm.lits, tm.layout
    n_b = len(b)
    so = so[so + len(lits[0]) <= n_b]
    rows = np.flatnonzero(_equals(w64, so, lits[0]))
    p = so[rows] + len(lits[0])
    bounds = []
    for (key, _), lit, guess in zip(layout, lits[1:], tm.lens):
        hi = p + guess
        good = hi + len(lit) <= n_b
        good &= _equals(w64, np.where(good, hi, 0), lit)
        miss = np.flatnonzero(~good)
        if len(miss):
            pm = p[miss]
            off = _find_byte(w64, pm, lit[0], _TW)
            hm = pm + off
            gm = (off >= 0) & (hm + len(lit) <= n_b)
            gm &= _equals(w64, np.where(gm, hm, 0), lit)
            hi[miss] = hm
            good[miss] = gm
        if not good.all():
            rows, p, hi = rows[good], p[good], hi[good]
            bounds = [(lo[good], h[good]) for lo, h in bounds]
        bounds.append((p, hi))
        p = hi + len(lit)
    vals = {key: lh for (key, _), lh in zip(layout, bounds)}
    lo, hi = vals[b"name"]
    kind = np.full(len(rows), -1, dtype=np.int64)
    ln = hi - lo
    for code, kname in enumerate(KIND_NAMES):
        kb = kname.encode()
        m = np.flatnonzero(ln == len(kb))
        kind[m[_equals(w64, lo[m], kb)]] = code
    ok = kind >= 0
    if not len(rows):
        return so[rows], p, kind, kind, kind, kind
    ok, pid, ts, dur = _hole_values(b, w64, layout, vals, ok)
    return so[rows[ok]], p[ok] - 1, kind[ok], pid[ok], ts[ok], dur[ok]


def _learn(event: str):
    ev = event.encode()
    b = np.frombuffer(ev + bytes(tb._PAD), np.uint8)
    lay = tb._layout(b, 0, len(ev) - 1)
    assert lay is not None
    tm = tb._compile(lay, tb._template(b, 0, len(ev) - 1, lay), ev)
    assert tm is not None
    return tm


def _block(text: bytes, head: int):
    """``text`` as scan lays a block out: ``head`` bytes before it, _PAD zero bytes after it."""
    buf = bytearray(b"\x7f" * head + text + bytes(tb._PAD))
    bp = np.frombuffer(buf, dtype=np.uint8, offset=head)
    b = bp[:len(bp) - tb._PAD]
    w_head = np.ndarray((len(bp) - 7 + head,), "<u8", buffer=buf, strides=(1,))
    w64 = np.ndarray((len(bp) - 7,), "<u8", buffer=buf, offset=head, strides=(1,))
    return b, w_head, w64


def _ns(text) -> int:
    """A µs value's text -> int ns, rounded half up at 1 ns (exact_scaled_arrow's rule)."""
    return int((Decimal(str(text)) * 1000).to_integral_value(ROUND_HALF_UP))


def _compare(tm, text: bytes, head: int = tb._HEAD):
    """_template_events == the oracle on the block ``text``; every event taken is valid JSON
    whose name, pid, ts and dur are the values returned. Returns the events taken."""
    b, w_head, w64 = _block(text, head)
    so = np.flatnonzero(b == 123)
    got = tb._template_events(b, w_head, so, tm, head)
    want = _template_events_oracle(b, w64, so, tm)
    for g, w, what in zip(got, want, ("eo", "ec", "kind", "pid", "ts", "dur")):
        assert g.dtype.kind == "i" and np.array_equal(g, w), (what, g, w)
    for eo, ec, kind, pid, ts, dur in zip(*(a.tolist() for a in got)):
        ev = json.loads(text[eo:ec + 1], parse_float=Decimal)
        assert ev["name"] == KIND_NAMES[kind] and ev["pid"] == pid and type(ev["pid"]) is int
        assert _ns(ev["ts"]) == ts and _ns(ev.get("dur", 0)) == dur
    return got


BASE = '{"name":"Computing","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":53.742,"ph":"X"}'


def _ev(**kw) -> str:
    ev = json.loads(BASE)
    ev.update(kw)
    return json.dumps(ev, separators=(",", ":"), ensure_ascii=False)


ODD = [
    _ev(name="Free"), _ev(name="Communication"), _ev(name="Communication(Not Overlapped)"),
    _ev(name="Computing2"), _ev(name="Comput\u00e9ng"), _ev(name="Free\u4e2d"), _ev(name=""),
    '{"name":"Fr\\u0065e","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"name":"Free\\"","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"name":"a\\\\","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    _ev(pid=9), _ev(pid=-9), _ev(pid=31708208321), _ev(pid=0), '{"name":"Free","pid":03170820832,"tid":0,'
    '"ts":"1736408883704643.212","dur":1.5,"ph":"X"}', _ev(pid=1.5),
    _ev(tid=12345678), _ev(tid=123456789012345678), _ev(tid=-1), _ev(tid=2.5), _ev(tid="0"),
    '{"name":"Free","pid":3170820832,"tid":01,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    _ev(ts="1736408883704643.2125"), _ev(ts="1736408883704643.21249999"), _ev(ts="1736408883704643.123456789"),
    _ev(ts="1736408883704643"), _ev(ts="736408883704643.212"), _ev(ts="17364088837046431.2"), _ev(ts="-1.5"),
    _ev(ts="1736408883704643.2x2"), _ev(ts="1736408883704643,212"), _ev(ts=1736408883704643),
    _ev(ts="0736408883704643.212"), _ev(ts="1736408883704643.212 "),
    '{"name":"Free","pid":3170820832,"tid":0,"ts":0736408883704643.212,"dur":1.5,"ph":"X"}',
    _ev(dur=0), _ev(dur=7), _ev(dur=0.5), _ev(dur=1234.567), _ev(dur=12345.678), _ev(dur=123456789.123),
    _ev(dur=0.0005), _ev(dur=0.0004999), _ev(dur=-1.5), _ev(dur=1e3), _ev(dur="1.5"), _ev(dur=99999999),
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":01.5,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":.5,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.2.3,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":' + "1" * 41 + ',"ph":"X"}',
    _ev(ph="B"), _ev(ph="XX"), _ev(ph=""),
    '{"name":"Free", "pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"pid":3170820832,"name":"Free","tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","ph":"X"}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X","args":{}}',
    '{"name":"Free","pid":3170820832,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"} ',
    '{"name":"x{\\"name\\":\\"Free\\"}","pid":1,"tid":0,"ts":"1736408883704643.212","dur":1.5,"ph":"X"}',
    '{"name":"s","args":{"t":"{\\"name\\":\\"Free\\",\\"pid\\":1"}}',
]


@pytest.mark.parametrize("head", [0, 3, tb._HEAD])
def test_odd_events_among_template_events(head):
    """Every odd event, alone among template events: the same events and values as the oracle."""
    tm = _learn(BASE)
    plain = [_ev(name=KIND_NAMES[i % 4], tid=i % 3, dur=[53.742, 7, 0.5, 104.202, 1234.5678][i % 5],
                 ts=f"17364088837{i:05d}.{i % 1000:03d}") for i in range(40)]
    for odd in ODD:
        text = ",".join(plain[:20] + [odd] + plain[20:]).encode()
        got = _compare(tm, text, head)
        assert len(got[0]) >= 40


@pytest.mark.parametrize("event", [
    BASE,
    '{"ph": "X", "name": "Free", "pid": 9, "tid": 3, "ts": "1736408883704643.212", "dur": 1.5}',
    '{"name": "Free", "pid": 9, "ts": "1.5", "ph": "X"}',
    '{"name":"Free","ph":"X","ts":1736408883704643,"pid":9,"tid":1,"dur":5,"id":77}',
    '{"tid": 1, "name": "Communication(Not Overlapped)", "pid": -4, "ts": "17.5", "dur": 0.25, "ph": "X"}',
])
def test_other_layouts_and_every_cut(event):
    """Templates of other key orders, spacings and missing keys; the block's end at every byte of
    its last event (the unfinished event is never taken)."""
    tm = _learn(event)
    ev = json.loads(event)
    sep = ", " if ", " in event else ","
    kv = (sep, ": " if ": " in event else ":")
    evs = []
    for i in range(30):
        e = dict(ev, name=KIND_NAMES[i % 4])
        if "dur" in e:
            e["dur"] = [1.5, 12, 0.001, 104.202, 99999.9999][i % 5]
        evs.append(json.dumps(e, separators=kv))
    text = sep.join(evs).encode()
    full = _compare(tm, text)
    assert len(full[0]) == 30
    last = text.rfind(b"{")
    for cut in range(last, len(text) + 1):
        got = _compare(tm, text[:cut])
        assert len(got[0]) == (30 if cut == len(text) else 29)


MUTANTS = "0123456789.-eE \"X:,{}[]ab\\u\u00e9"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 120), st.sampled_from(MUTANTS)), max_size=3),
                min_size=1, max_size=60),
       st.sampled_from([0, 5, tb._HEAD]), st.integers(0, 40))
def test_mutated_events_equal_the_oracle(mutations, head, cut_back):
    """Template events with bytes replaced at random (every kind of broken value, literal and
    structure), the block cut short: the same events and values as the oracle, and every event
    taken is valid JSON holding them."""
    tm = _learn(BASE)
    evs = []
    for i, muts in enumerate(mutations):
        text = _ev(name=KIND_NAMES[i % 4], tid=i % 4, dur=[53.742, 7, 0.5, 1234.567, 99999.1][i % 5],
                   ts=f"17364088837{i:05d}.212")
        for pos, c in muts:
            pos %= len(text)
            text = text[:pos] + c + text[pos + 1:]
        evs.append(text)
    raw = ",".join(evs).encode()
    _compare(tm, raw[:max(0, len(raw) - cut_back)], head)


def test_windows_read_the_value_words_of_the_learned_layout():
    """The plan of the torch_npu layout: the name's window holds `{"name":"` right-aligned in two
    words and four value words; pid is matched against the learned value; ph is read as `X"`."""
    tm = _learn(BASE)
    roles = [h.role for h in tm.holes]
    assert roles == ["name", "pid", "other", "ts", "dur", "ph"]
    name = tm.holes[0]
    assert (name.o, name.p, name.nw, name.t) == (9, 2, 6, ord('"'))
    assert [ln for _, ln, _ in name.kinds] == [len(k) for k in KIND_NAMES]
    assert tm.holes[1].common[1:] == (10, 3170820832)
    assert tm.holes[3].rep_dot == 16 and tm.holes[3].g == 20
    assert tm.rem[-1] == 1 + len(b'"}')


def test_set_bytes_equals_flatnonzero():
    rng = np.random.default_rng(7)
    for n in (0, 8, 64, 4096, 1 << 15):
        for dens in (0.0, 0.01, 0.2, 0.7, 1.0):
            m = rng.random(n) < dens
            got = tb._set_bytes(m)
            assert got.dtype == np.int64 and np.array_equal(got, np.flatnonzero(m))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("0123456789.-e+ x", max_size=9), min_size=1, max_size=40))
def test_short_dec3_takes_only_what_number_reads_and_gives_its_values(tokens):
    """_short_dec3 (the dur fast path): every token it takes is read by _number (the JSON
    grammar) with the same ns; every unsigned token that _number reads, of at most 8 characters
    with a point and at most 3 decimals or of at most 7 digits, it takes."""
    raw = b"".join(t.encode() + b"," for t in tokens)
    b = np.frombuffer(raw + bytes(64), np.uint8)
    w64 = np.ndarray((len(b) - 7,), "<u8", buffer=b, strides=(1,))
    lo = np.cumsum([0] + [len(t) + 1 for t in tokens[:-1]]).astype(np.int64)
    L = np.array([len(t) for t in tokens], dtype=np.int64)
    ok, ns = tb._short_dec3(w64[lo], L)
    r_ok, _, r_ns = tb._number(b, lo, lo + L, json_number=True)
    assert not (ok & ~r_ok).any() and np.array_equal(ns[ok], r_ns[ok])
    for t, o, r in zip(tokens, ok, r_ok):
        if r and "-" not in t and (len(t) <= 7 or "." in t and len(t) == 8) and ("." not in t or len(t.split(".")[1]) <= 3):
            assert o, t
