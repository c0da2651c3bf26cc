"""trace_view.json streaming: cases P01 P02 P11(kind) P12 P13."""
import json

import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.trace import read_trace

META = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}}]


def dump(tmp_path, obj, name="trace_view.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return p


def test_string_ts_exact_ns(tmp_path):
    """P02: string ts with 3 decimals -> exact ns; the first event ends strictly before the second."""
    ev = META + [
        {"ph": "X", "name": "Computing", "pid": 7, "tid": 0, "ts": "1699529623106750.001", "dur": 0.999},
        {"ph": "X", "name": "Computing", "pid": 7, "tid": 0, "ts": "1699529623106751.000", "dur": 1.0},
        {"ph": "s", "name": "torch_to_npu", "id": 1699529623106751000, "pid": 1, "tid": 1, "ts": 1},
        {"ph": "s", "name": "torch_to_npu", "id": 1699529623106751001, "pid": 1, "tid": 1, "ts": 1},
    ]
    t = read_trace(dump(tmp_path, ev))
    ov = t.overlap.sort_values("start_ns")
    assert ov["start_ns"].tolist() == [1699529623106750001, 1699529623106751000]
    assert ov["end_ns"].iloc[0] == 1699529623106751000  # 750.001 + 0.999 = 751.000 exactly
    assert ov["end_ns"].iloc[0] <= ov["start_ns"].iloc[1]  # no false nesting
    assert t.n_events == 6


def test_numeric_ts_and_traceEvents_root(tmp_path):
    """P12: kineto-style object root; numeric ts."""
    doc = {"traceEvents": META + [{"ph": "X", "name": "Free", "pid": 7, "tid": 3, "ts": 100.7, "dur": 0.2}],
           "displayTimeUnit": "ms"}
    t = read_trace(dump(tmp_path, doc))
    assert t.overlap["start_ns"].tolist() == [100700] and t.overlap["dur_ns"].tolist() == [200]


def test_other_roots_rejected(tmp_path):
    with pytest.raises(InvalidCaptureError, match="not a Chrome trace"):
        read_trace(dump(tmp_path, '"hello"'))
    with pytest.raises(InvalidCaptureError, match="no events"):
        read_trace(dump(tmp_path, "[]"))
    with pytest.raises(InvalidCaptureError, match="empty"):
        read_trace(dump(tmp_path, ""))


def test_trailing_comma_names_byte_offset(tmp_path):
    """P01: `[{...},]` -> invalid JSON with a byte offset, never '0 events'."""
    p = dump(tmp_path, '[{"ph":"M","name":"process_name","pid":7,"args":{"name":"Overlap Analysis"}},]')
    with pytest.raises(InvalidCaptureError) as e:
        read_trace(p)
    assert e.value.byte_offset == 77 and "invalid JSON" in e.value.message  # the "]" after the comma
    assert "trailing comma" in e.value.message and "of 78" in e.value.message
    with pytest.raises(InvalidCaptureError) as e:  # the ijson path (every event parsed) agrees
        read_trace(p, full_parse=True)
    assert "unallowed token" in e.value.message and "of 78" in e.value.message


def test_truncated_names_end_of_file(tmp_path):
    """P01: no closing bracket -> truncated, offset = file size."""
    text = json.dumps(META + [{"ph": "X", "name": "Computing", "pid": 7, "tid": 0, "ts": "1.000", "dur": 1}])[:-30]
    p = dump(tmp_path, text)
    with pytest.raises(InvalidCaptureError) as e:
        read_trace(p)
    assert "truncated" in e.value.message and e.value.byte_offset == len(text)


def test_negative_duration_dropped_and_counted(tmp_path):
    """P13b: X dur=-1 dropped and counted; sub-us durations kept (P13e)."""
    ev = META + [{"ph": "X", "name": "Computing", "pid": 7, "tid": 0, "ts": "10.000", "dur": -1},
                 {"ph": "X", "name": "Computing", "pid": 7, "tid": 0, "ts": "100.700", "dur": 0.2},
                 {"ph": "B", "name": "Computing", "pid": 7, "tid": 0, "ts": 100},
                 {"ph": "E", "name": "Computing", "pid": 7, "tid": 0, "ts": 0}]
    t = read_trace(dump(tmp_path, ev))
    assert t.dropped_negative == 1
    assert t.overlap["dur_ns"].tolist() == [200]  # B/E pairs are not used for any sum


def test_only_overlap_process_kept(tmp_path):
    ev = META + [{"ph": "X", "name": "Computing", "pid": 99, "tid": 0, "ts": "1.0", "dur": 5},
                 {"ph": "X", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": "0.5", "dur": 10}]
    t = read_trace(dump(tmp_path, ev))
    assert t.overlap.empty and not t.has_overlap
    assert t.steps[["step", "start_ns", "end_ns"]].values.tolist() == [["7", 500, 10500]]


def test_real_trace_overlap_sums(text_captures):
    t = read_trace(text_captures / "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json")
    sums = t.overlap.groupby("kind")["dur_ns"].sum().to_dict()
    assert sums == {"computing": 8873756, "comm": 105991878, "comm_not_overlapped": 101963203, "free": 25744050}
    assert t.steps["step"].tolist() == ["50"]
