"""The selective trace scanner (perfgate.ingest.jsonscan) against a full JSON parse."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.jsonscan import ScanError, iter_selected
from perfgate.ingest.trace import _NEEDLES, read_trace
from perfgate.synth.scale import write_scaled
from perfgate.synth.writer import SynthSpec, write_capture

KEPT = ["Computing", "Communication", "Communication(Not Overlapped)", "Free", "ProfilerStep#7", "process_name"]
# strings that stress the structural scan: quotes, backslash runs, brackets and commas in strings
TRICKY = st.sampled_from(['a"b', "a\\", "\\\\", '\\"', "{", "}", "[", "]", ",", "],[{", "é中", "Free ", "x\\u"])
NAMES = st.one_of(st.sampled_from(KEPT + ["aclnnMatmul", "hcom_allReduce_1"]), TRICKY, st.text(max_size=6))
VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), NAMES,
                                st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str)),
                      lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(NAMES, c, max_size=3)), max_leaves=6)
EVENT = st.fixed_dictionaries({"ph": st.sampled_from(["X", "M", "s", "f"]), "name": NAMES},
                              optional={"pid": st.integers(0, 9), "ts": st.sampled_from(["1.000", "2.5", "3"]),
                                        "dur": st.integers(0, 5), "args": st.dictionaries(NAMES, VALUES, max_size=3)})
ITEM = st.one_of(EVENT, EVENT, EVENT, VALUES)


def _selected(items) -> list:
    """What the scanner must hand over: every item containing a needle (and every non-object)."""
    out = []
    for it in items:
        text = json.dumps(it, ensure_ascii=False).encode()
        if not isinstance(it, dict) or any(n in text for n in _NEEDLES):
            out.append(it)
    return out


def _scan(data: bytes, block: int):
    f = io.BytesIO(data)
    n, got = 0, []
    for count, events in iter_selected(f, data.index(b"["), len(data), _NEEDLES, block=block):
        n += count
        got.extend(events)
    return n, got


def _norm(x):
    """parse_float=str keeps non-integer numbers as text: compare through float."""
    return json.loads(json.dumps(x), parse_float=float) if not isinstance(x, str) else x


@settings(max_examples=150, deadline=None)
@given(st.lists(ITEM, max_size=25), st.sampled_from([None, 0, 2]), st.sampled_from([", ", ",", " ,\n "]),
       st.booleans(), st.integers(1, 64))
@pytest.mark.slow
def test_scanner_selects_what_a_full_parse_keeps(items, indent, sep, ascii_only, block):
    data = json.dumps(items, indent=indent, separators=(sep, ": "), ensure_ascii=ascii_only).encode()
    n, got = _scan(b" \n" + data + b"\n", block)
    assert n == len(items)
    want = _selected(json.loads(data))
    # a \\u escape anywhere makes an item a candidate too: the scanner may keep more, never less
    keyed = [json.dumps(_norm(g), sort_keys=True) for g in got]
    for w in want:
        assert json.dumps(_norm(w), sort_keys=True) in keyed


@pytest.mark.parametrize("text, where", [
    ('[{"a": 1},]', "trailing"),
    ('[{"a": 1},,{"b": 2}]', "stray"),
    ('[{"a": [1}], {"b": 2}]', "closed by"),  # brackets of the wrong kind inside a skipped event
    ('[{"a": [1}]', "truncated"),       # ... and never balanced
    ('[{"a": 1}{"b": 2}]', "more than one value"),
    ('[{"a": 1}] x', "after the end"),
    ('[{"a": "x]}', "truncated"),        # a string that never ends
    ('[{"name": "Free", "ph": tru}]', "Expecting value"),  # syntax inside a kept event
])
def test_scanner_rejects_broken_json(text, where):
    for block in (3, 1 << 20):
        with pytest.raises(ScanError) as e:
            _scan(text.encode(), block)
        assert where in str(e.value)
        assert 0 <= e.value.offset <= len(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def _same(a, b):
    assert a.n_events == b.n_events and a.processes == b.processes and a.dropped_negative == b.dropped_negative
    assert a.overlap.equals(b.overlap) and a.steps.equals(b.steps)


def test_fast_trace_equals_full_parse_synthetic(tmp_path):
    for cap in (write_capture(tmp_path / "s", SynthSpec(ranks=1)),
                write_scaled(tmp_path / "p", ranks=1, steps=3, kernels_per_step=500, trace_mb=3)):
        tv = next(cap.rglob("trace_view.json"))
        _same(read_trace(tv), read_trace(tv, full_parse=True))


def test_fast_trace_equals_full_parse_real(text_captures):
    for tv in sorted(text_captures.rglob("trace_view.json")):
        _same(read_trace(tv), read_trace(tv, full_parse=True))


def test_broken_trace_is_an_invalid_capture(tmp_path):
    p = tmp_path / "trace_view.json"
    p.write_text('[{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Overlap Analysis"}},'
                 '{"ph": "X", "name": "aclnnAdd", "args": {"shape": [1, 2}]}]')
    with pytest.raises(InvalidCaptureError) as e:
        read_trace(p)
    assert "invalid JSON" in e.value.message and e.value.byte_offset is not None
