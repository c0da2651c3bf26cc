"""validity.lost_launches reads flow fields with regular expressions (was a character loop):
the same values as the loop on every flow event of the real traces and on odd spellings."""
from __future__ import annotations

import pytest

from perfgate.ingest import trace as tr, validity as v


def _flow_events(data: bytes):
    for cat in v._FLOW_CATS:
        lit = b'"' + cat + b'"'
        pos = data.find(lit)
        while pos >= 0:
            lo, hi = data.rfind(b"{", 0, pos), data.find(b"}", pos)
            yield data[lo:hi + 1]
            pos = data.find(lit, pos + len(lit))


@pytest.mark.parametrize("ev", [
    b'{"ph": "s", "id": 17, "ts": "1.5", "cat": "async_npu"}',
    b'{"cat":"HostToDevice","ts":"2.25","id":"abc def","ph":"f"}',
    b'{"ph" : "s" , "id" :  "x,y", "cat": "async_npu"}',
    b'{"ph" "s", "id", "cat": "async_npu"}',                # no ':' after a key
    b'{"name": "\\"ph\\"", "ph": "s", "cat": "async_npu"}',
    b'{"ts": 1736408883694699.510}',
])
def test_field_equals_the_loop(ev):
    for key in (b'"ph"', b'"id"', b'"ts"'):
        assert v._field(ev, key) == v._field_loop(ev, key)


def test_fields_of_real_flow_events(ascend):
    n = 0
    for p in sorted(ascend.rglob("trace_view*.json")):
        for ev in _flow_events(p.read_bytes()):
            for key in (b'"ph"', b'"id"', b'"ts"'):
                assert v._field(ev, key) == v._field_loop(ev, key)
            n += 1
    assert n > 1000


def test_lost_launches_on_real_traces_with_a_dropped_end(tmp_path, text_captures):
    """A flow end removed from a real trace: that launch is reported lost in its step."""
    src = text_captures / "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    data = src.read_bytes()
    assert v.lost_launches(src, tr.read_trace(src).steps) == {}
    end = next(ev for ev in _flow_events(data) if v._field_loop(ev, b'"ph"') == b"f")
    fid = v._field_loop(end, b'"id"')
    p = tmp_path / "trace_view.json"
    p.write_bytes(data.replace(end, end.replace(b'"ph": "f"', b'"ph": "i"'), 1))
    lost = v.lost_launches(p, tr.read_trace(p).steps)
    assert sum(d["async_npu"] + d["HostToDevice"] for d in lost.values()) >= 1, (fid, lost)


def _old_pass(p):
    starts, ended = {}, set()
    v._flows_in(p.read_bytes(), starts, ended)
    return starts, ended


def test_flows_from_the_byte_scan_equal_the_separate_pass(tmp_path, ascend, text_captures):
    """The byte-level extractor collects the host -> device flows while it scans (the second
    pass over the file is skipped): the same starts and ends, so the same lost launches."""
    paths = sorted(ascend.rglob("trace_view*.json"))
    src = text_captures / "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    data = src.read_bytes()
    ends = [ev for ev in _flow_events(data) if v._field_loop(ev, b'"ph"') == b"f"][:5]
    for ev in ends:
        data = data.replace(ev, ev.replace(b'"ph": "f"', b'"ph": "i"'), 1)
    cut = tmp_path / "trace_view.json"
    cut.write_bytes(data)
    n_flows = 0
    for p in paths + [cut]:
        s = tr.read_trace(p)
        assert s.flows is not None
        assert s.flows == _old_pass(p)
        assert v.lost_launches(p, s.steps, s.flows) == v.lost_launches(p, s.steps)
        n_flows += len(s.flows[0])
    assert n_flows > 1000
    s = tr.read_trace(cut)
    assert sum(d["async_npu"] + d["HostToDevice"] for d in v.lost_launches(cut, s.steps, s.flows).values()) >= 5
