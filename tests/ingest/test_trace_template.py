"""Template-first blocks of the byte-level trace scan (perfgate.ingest.tracebytes._block_tmpl):
after a block where most events take one flat layout, later blocks match that layout's bytes
first and hand the rest to _block with each match replaced by ``{}``. The scan must give the
same Extract (events, kept values, parsed events, flows in order) and the same summary or error
as the scan without it (TEMPLATE_FIRST off, the per-block path it replaces, kept as the oracle)
and as the exact parse, on crafted traces: escaped quotes, brackets and template-looking text
inside strings, a matching object nested in another event, unicode, values of every length,
another spacing, events cut by block boundaries."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from perfgate.errors import InvalidCaptureError
from perfgate.ingest import trace as tr, tracebytes as tb
from perfgate.synth.replicate import replicate_rank

OV = 9
META = [{"ph": "M", "name": "process_name", "pid": OV, "tid": 0, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_name", "pid": 4, "tid": 0, "args": {"name": "Python"}}]
DURS = [53.742, 7, 0.5, 1234.56789, 104.202, 12, 0.0005, 99999.1]


def ov(i: int, **kw) -> dict:
    """The i-th Overlap Analysis event (the synthetic writer's key order)."""
    ev = {"name": tb.KIND_NAMES[i % 4], "pid": OV, "tid": i % 3, "ts": f"17364088837{i % 100000:05d}.212",
          "dur": DURS[i % len(DURS)], "ph": "X"}
    ev.update(kw)
    return ev


def _text(events, sep=", ", kv=(", ", ": ")) -> str:
    return "[" + sep.join(e if isinstance(e, str) else json.dumps(e, separators=kv) for e in events) + "]"


def _scan(path: Path, template: bool, calls=None):
    old = tb.TEMPLATE_FIRST
    tb.TEMPLATE_FIRST = template
    try:
        return tb.scan(path, tr._root_start(path), path.stat().st_size)
    finally:
        tb.TEMPLATE_FIRST = old


def _same_extract(a: tb.Extract, b: tb.Extract):
    assert a.n == b.n
    for k in ("idx", "pid", "kind", "ts_ns", "dur_ns"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert [(i, json.dumps(e, sort_keys=True)) for i, e in a.parsed] == \
        [(i, json.dumps(e, sort_keys=True)) for i, e in b.parsed]
    assert list(a.flows[0].items()) == list(b.flows[0].items()) and a.flows[1] == b.flows[1]


def _outcome(fn, path):
    try:
        return fn(path), None
    except (InvalidCaptureError, tb.NoFastPath, tr._NoFastPath) as e:
        return None, type(e).__name__ + str(e)


@pytest.fixture
def counted(monkeypatch):
    """Counts the blocks _block_tmpl read itself (not None) and those it handed back."""
    seen = {"taken": 0, "declined": 0}
    real = tb._block_tmpl

    def wrap(*a, **k):
        r = real(*a, **k)
        seen["taken" if r is not None else "declined"] += 1
        return r
    monkeypatch.setattr(tb, "_block_tmpl", wrap)
    return seen


def _check(path: Path, chunk: int, monkeypatch):
    """Template-first scan == per-block scan (Extract), and read_trace == the exact parse."""
    monkeypatch.setattr(tb, "CHUNK", chunk)
    got, err = _outcome(lambda p: _scan(p, True), path)
    want, want_err = _outcome(lambda p: _scan(p, False), path)
    assert (err is None) == (want_err is None), (err, want_err)
    if got is not None:
        _same_extract(got, want)
    summary, s_err = _outcome(tr.read_trace, path)
    exact, e_err = _outcome(lambda p: tr.read_trace(p, full_parse=True), path)
    assert (s_err is None) == (e_err is None)
    if summary is not None:
        assert summary.n_events == exact.n_events and summary.processes == exact.processes
        assert summary.overlap.equals(exact.overlap) and summary.steps.equals(exact.steps)
        assert summary.dropped_negative == exact.dropped_negative
    return got


ODD = {
    "escaped quotes": {"ph": "X", "name": "aclnnAdd", "pid": 4, "ts": "1.0", "args": {"s": 'x", "name": "Free", {"a": "\\"'}},
    "template text in a string": {"ph": "X", "name": "aclnnAdd", "pid": 4, "ts": "1.0",
                                  "args": {"s": json.dumps(ov(3), separators=(", ", ": "))}},
    "brackets in a string": {"ph": "X", "name": "aclnnAdd", "pid": 4, "ts": "1.0", "args": {"s": "}, {[]]"}},
    "nested match": {"ph": "X", "name": "aclnnAdd", "pid": 4, "ts": "1.0", "args": ov(5)},
    "unicode name": ov(6, name="Compu\u00e9ting"),
    "unicode kept": {"ph": "X", "name": "Free", "pid": OV, "tid": 1, "ts": "1736408883700001.5", "dur": 1.25,
                     "args": {"n": "\u00e9\u4e2d"}},
    "another spacing": None,           # written below: the template event with another spacing
    "another ph": ov(7, ph="B"),
    "other name": ov(8, name="Computing2"),
    "negative dur": ov(9, dur=-1.5),
    "long dur": ov(10, dur=123456789.123456),
    "int ts": ov(11, ts=1736408883704643),
    "step": {"ph": "X", "name": "ProfilerStep#7", "pid": 4, "tid": 4, "ts": "1736408883600000.000", "dur": 5000.0,
             "cat": "cpu_op", "args": {}},
    "flow": {"ph": "s", "name": "x", "cat": "async_npu", "id": 77, "pid": 4, "tid": 4, "ts": "1736408883600001.000"},
}


@pytest.mark.parametrize("odd", sorted(ODD))
@pytest.mark.parametrize("chunk", [4099, 1000, 1 << 20])
def test_odd_events_among_template_events(tmp_path, monkeypatch, counted, odd, chunk):
    events = META + [ov(i) for i in range(400)]
    body = [json.dumps(e) for e in events]
    for at in (150, 151, 260, 399):
        if odd == "another spacing":
            body.insert(at, json.dumps(ov(at), separators=(",", ":")))
        else:
            body.insert(at, json.dumps(ODD[odd]))
    p = tmp_path / "trace_view.json"
    p.write_text("[" + ", ".join(body) + "]")
    got = _check(p, chunk, monkeypatch)
    assert got is not None
    if chunk < 5000:
        assert counted["taken"] >= 3, counted


@pytest.mark.parametrize("bad", [
    '{"name": "x{"name": "Computing", "pid": 9, "tid": 0, "ts": "1736408883704643.212", "dur": 53.742, "ph": "X"}", "ph": "X"}',
    '{"name": "x", "s": "{\\"name\\": \\"Free\\"}, {" }',
    '{"name": "Free", "pid": 9, "tid": 0, "ts": "1736408883704643.212", "dur": 01, "ph": "X"}',
    '{"name": "Free", "pid": 9, "tid": 0, "ts": "1736408883704643.212", "dur": 5, "ph": "X"',
    '{"name": "Free", "pid": 9, "tid": 0, "ts": "17364088837046\t43.212", "dur": 5, "ph": "X"}',
    '{"name": "Free", "pid": 9 "tid": 0, "ts": "1736408883704643.212", "dur": 5, "ph": "X"}',
])
def test_invalid_text_among_template_events_gives_the_same_error(tmp_path, monkeypatch, bad):
    body = [json.dumps(e) for e in META + [ov(i) for i in range(300)]]
    body.insert(200, bad)
    p = tmp_path / "trace_view.json"
    p.write_text("[" + ", ".join(body) + "]")
    monkeypatch.setattr(tb, "CHUNK", 4099)
    _, err = _outcome(lambda q: _scan(q, True), p)
    _, want = _outcome(lambda q: _scan(q, False), p)
    assert (err is None) == (want is None)
    got, g_err = _outcome(tr.read_trace, p)
    old, o_err = _outcome(lambda q: tr.read_trace(q, full_parse=True), p)
    assert (g_err is None) == (o_err is None)
    tb.TEMPLATE_FIRST = False
    try:
        _, before = _outcome(tr.read_trace, p)
    finally:
        tb.TEMPLATE_FIRST = True
    assert g_err == before


def test_compact_spacing_and_block_cuts(tmp_path, monkeypatch, counted):
    """The compact writer's spacing (``,`` / ``:``), every event cut at some block boundary."""
    p = tmp_path / "trace_view.json"
    p.write_text(_text(META + [ov(i) for i in range(2000)], sep=",", kv=(",", ":")))
    for chunk in (997, 4099, 65536):
        got = _check(p, chunk, monkeypatch)
        assert len(got.idx) == 2000
    assert counted["taken"] > 10


def test_template_blocks_on_a_replicated_capture(tmp_path, monkeypatch, counted, text_captures):
    """A replicated many-step trace (perfgate.synth.replicate, nearly every event kept): the
    template takes the later blocks and the Extract equals the per-block scan's."""
    cap = replicate_rank(text_captures / "level1/rank0_ascend_pt", tmp_path / "rep", steps=30, trace=True)
    p = next(cap.rglob("trace_view.json"))
    got = _check(p, 1 << 16, monkeypatch)
    assert counted["taken"] >= 5 and len(got.idx) > 1000


def test_real_traces_equal_with_and_without_templates(ascend, monkeypatch):
    for p in sorted(ascend.rglob("trace_view*.json")):
        _check(p, 1 << 16, monkeypatch)


def test_compile_refuses_templates_it_cannot_read_exactly():
    ev = b'{"name": "Free", "pid": 9, "ts": "1.5", "ph": "X"}'
    b = np.frombuffer(ev + bytes(tb._PAD), np.uint8)
    lay = tb._layout(b, 0, len(ev) - 1)
    tm = tb._compile(lay, tb._template(b, 0, len(ev) - 1, lay), ev)
    assert tm.lits[0] == b'{"name": "' and tm.lits[-1] == b'"}' and tm.lens == [4, 1, 3, 1]
    ev2 = b'{"name": "Free", "pid": 9, "ts": "1.5", "HostToDevice": 1, "ph": "X"}'   # a flow category as a key
    b2 = np.frombuffer(ev2 + bytes(tb._PAD), np.uint8)
    lay2 = tb._layout(b2, 0, len(ev2) - 1)
    assert tb._compile(lay2, tb._template(b2, 0, len(ev2) - 1, lay2), ev2) is None


ODD_EVENT = st.sampled_from([e for e in ODD.values() if e is not None])
ITEM = st.one_of(st.integers(0, 10 ** 6).map(ov), st.integers(0, 10 ** 6).map(ov), st.integers(0, 10 ** 6).map(ov),
                 ODD_EVENT, st.integers(0, 100).map(lambda i: ov(i, dur=i * 1.001 - 3)))


@pytest.mark.slow   # ~9 s: 60 random traces
@settings(max_examples=60, deadline=None)
@given(st.lists(ITEM, min_size=50, max_size=300), st.sampled_from([900, 2000, 4099]),
       st.sampled_from([(", ", (", ", ": ")), (",", (",", ":"))]))
def test_random_mixes_equal_the_per_block_scan(tmp_path_factory, monkeypatch_module, items, chunk, style):
    p = tmp_path_factory.mktemp("t") / "trace_view.json"
    p.write_text(_text(META + [ov(i) for i in range(60)] + items, sep=style[0], kv=style[1]))
    _check(p, chunk, monkeypatch_module)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


TEXT = st.one_of(
    st.builds(lambda neg, i, f: ("-" if neg else "") + i + ("." + f if f is not None else ""),
              st.booleans(), st.text("0123456789", min_size=1, max_size=18),
              st.one_of(st.none(), st.text("0123456789", min_size=0, max_size=9))),
    st.sampled_from(["1e3", " 5.5", "5.5 ", "", "x", ".5", "5.", "+1", "1736408883704643.2125", "\u00e95",
                     "9223372036854775.807", "9223372036854776.000"]),
    st.integers(-10 ** 20, 10 ** 20), st.sampled_from([None, True, 2.5]))


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, min_size=0, max_size=20))
@example([9007199254740993, "1.5"])   # an int beyond 2**53: the reference went through a float (found by hypothesis)
def test_step_values_convert_as_the_arrow_path(values):
    """_texts_ns (numpy, for the values the byte scan parsed: ProfilerStep windows, odd Overlap
    events) gives _to_ns's values, or raises the same error, for every value json.loads can give."""
    path = Path("trace_view.json")

    def run(fn):
        try:
            return fn(list(values), path, "ts").tolist(), None
        except InvalidCaptureError as e:
            return None, str(e)
    assert run(tr._texts_ns) == run(tr._to_ns)
