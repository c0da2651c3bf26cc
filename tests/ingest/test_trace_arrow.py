"""The Arrow line scan of trace_view.json (perfgate.ingest.trace._arrow_scan): same summary as
the exact scan and a full parse, no Python object per event, and a safe fallback."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from perfgate.ingest import jsonscan, trace as tr
from perfgate.synth.replicate import replicate_rank
from perfgate.synth.scale import write_scaled

OV_PID = 9
NAMES = st.sampled_from(["Computing", "Communication", "Communication(Not Overlapped)", "Free",
                         "ProfilerStep#3", "ProfilerStep# 4 ", "aclnnAdd", 'odd }, {"name": "Free"'])
DUR = st.one_of(st.integers(-2, 400), st.sampled_from([2.1500000000000004, 0.44999999999999996, 53.742, 0.0005,
                                                       1e-05, "7.25", 12.5]))
EVENT = st.fixed_dictionaries({"ph": st.sampled_from(["X", "X", "X", "i"]), "name": NAMES,
                               "pid": st.sampled_from([OV_PID, 4]),
                               "ts": st.sampled_from(["1736408883704643.212", "1736408883704644.5", "17.000"])},
                              optional={"dur": DUR, "args": st.dictionaries(st.sampled_from(["a", "name"]),
                                                                              st.sampled_from([1, "x", "}, {"]))})


@pytest.fixture(autouse=True)
def _arrow_path(monkeypatch):
    """These tests are about the Arrow line scan: the byte-level extractor tried before it
    (tests/ingest/test_trace_bytes.py) is switched off."""
    monkeypatch.setattr(tr, "BYTE_SCAN", False)


def _same(a, b):
    assert a.n_events == b.n_events and a.processes == b.processes and a.dropped_negative == b.dropped_negative
    assert a.overlap.equals(b.overlap) and a.steps.equals(b.steps)


def _exact(path):
    return tr.read_trace(path, full_parse=True)


@settings(max_examples=120, deadline=None)
@given(st.lists(EVENT, max_size=30), st.sampled_from([", ", ","]))
def test_arrow_scan_equals_full_parse(tmp_path_factory, events, sep):
    meta = [{"ph": "M", "name": "process_name", "pid": OV_PID, "tid": 0, "args": {"name": "Overlap Analysis"}},
            {"ph": "M", "name": "process_name", "pid": 4, "tid": 0, "args": {"name": "Python"}}]
    p = tmp_path_factory.mktemp("t") / "trace_view.json"
    p.write_text("[" + sep.join(json.dumps(e) for e in meta + events) + "]")
    _same(tr.read_trace(p), _exact(p))


def _no_exact_scan(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the exact (per-event) scan ran")
    monkeypatch.setattr(tr, "iter_selected", refuse)
    monkeypatch.setattr(tr, "_ijson_events", refuse)
    monkeypatch.setattr(jsonscan.json, "loads", refuse)
    monkeypatch.setattr(tr.json, "loads", lambda s, **k: json.JSONDecoder(**k).decode(
        s.decode() if isinstance(s, bytes) else s))  # the few process_name events only


def test_torch_npu_traces_take_the_arrow_path(tmp_path, monkeypatch, text_captures):
    """Real and real-shaped traces are read without the per-event scan (no dict per event)."""
    src = text_captures / "level1/rank0_ascend_pt"
    rep = replicate_rank(src, tmp_path / "rep", steps=3)
    syn = write_scaled(tmp_path / "syn", ranks=1, steps=2, kernels_per_step=300, trace_mb=1)
    paths = [src / "ASCEND_PROFILER_OUTPUT/trace_view.json", *rep.rglob("trace_view.json"),
             *syn.rglob("trace_view.json")]
    want = [_exact(p) for p in paths]
    _no_exact_scan(monkeypatch)
    for p, w in zip(paths, want):
        got = tr.read_trace(p)
        _same(got, w)
        assert len(got.overlap) > 0


def test_arrow_scan_is_cut_in_blocks(tmp_path, monkeypatch):
    """Bounded memory: blocks of ARROW_CHUNK bytes cut at event separators give the same summary."""
    cap = write_scaled(tmp_path / "s", ranks=1, steps=3, kernels_per_step=400)
    p = next(cap.rglob("trace_view.json"))
    want = _exact(p)
    monkeypatch.setattr(tr, "ARROW_CHUNK", 1000)
    _same(tr.read_trace(p), want)


@pytest.mark.parametrize("text", [
    '[{"ph": "X", "name": "Free", "pid": 1, "ts": "1.5", "dur": 0.0005}]',   # a half nanosecond
    '[{"ph": "X", "name": "Free", "pid": "1", "ts": "1.5", "dur": 1}]',      # pid as text
    '[{"ph": "X", "name": "Free", "pid": 1, "ts": 1.5, "dur": 1}]',          # ts as a number
    '[{"ph": "X", "name": "Free", "pid": 1, "ts": "1.5", "dur": 1}, 5]',     # not an object
])
def test_what_arrow_cannot_read_exactly_goes_to_the_exact_scan(tmp_path, text):
    p = tmp_path / "trace_view.json"
    p.write_text(text.replace("[{", '[{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": '
                                    '"Overlap Analysis"}}, {', 1))
    _same(tr.read_trace(p), _exact(p))


def test_escaped_process_name_is_still_found(tmp_path):
    p = tmp_path / "trace_view.json"
    p.write_text('[{"ph": "M", "name": "process\\u005fname", "pid": 1, "args": {"name": "Overlap Analysis"}}, '
                 '{"ph": "X", "name": "Free", "pid": 1, "ts": "1.5", "dur": 1}]')
    got = tr.read_trace(p)
    _same(got, _exact(p))
    assert got.processes == {1: "Overlap Analysis"} and len(got.overlap) == 1
