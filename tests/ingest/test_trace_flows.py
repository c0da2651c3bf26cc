"""Host -> device flows in the byte-level trace scan: tracebytes._flows reads
every hit of ``async_npu`` / ``HostToDevice`` by vectorised numpy over the block and hands only
hits outside the common shape to validity.flow_event. The result must be exactly the per-hit
loop's (tests/_flows_oracle.py, the code it replaced): the same ``starts`` items in the same
order (last ts wins) and the same ``ended`` set, on real traces, a replicated many-step trace
(also cut into small blocks) and hand-made adversarial flow objects; and on real-shaped traces
no hit takes the per-hit fallback."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from _flows_oracle import flows_loop
from perfgate.ingest import trace as tr, tracebytes as tb, validity as v
from perfgate.synth.replicate import replicate_rank


def _flows(path: Path, monkeypatch, oracle: bool = False, chunk: int | None = None):
    """(starts as an ordered item list, ended, stats) from tracebytes.scan; ``oracle``: with the
    per-hit loop instead of the vectorised _flows."""
    with monkeypatch.context() as m:
        if oracle:
            m.setattr(tb, "_flows", flows_loop)
        stats = {"hits": 0, "slow": 0}
        m.setattr(tb, "_FLOW_STATS", stats)
        ex = tb.scan(path, tr._root_start(path), path.stat().st_size, chunk=chunk)
    starts, ended = ex.flows
    return list(starts.items()), ended, stats


def _separate_pass(path: Path):
    """lost_launches' own pass over the whole file (validity._flows_in, flow_event per hit)."""
    starts, ended = {}, set()
    v._flows_in(path.read_bytes(), starts, ended)
    return list(starts.items()), ended


def _assert_same(path: Path, monkeypatch, chunk: int | None = None, separate: bool = True):
    got_s, got_e, stats = _flows(path, monkeypatch, chunk=chunk)
    want_s, want_e, _ = _flows(path, monkeypatch, oracle=True, chunk=chunk)
    assert got_s == want_s
    assert got_e == want_e
    if separate:                     # same content; its order is cat by cat over 8 MiB blocks
        sep_s, sep_e = _separate_pass(path)
        assert dict(got_s) == dict(sep_s) and got_e == sep_e
    return got_s, got_e, stats


def test_real_traces_equal_the_per_hit_loop_without_fallback(ascend, monkeypatch):
    with_flows = 0
    for p in sorted(ascend.rglob("trace_view*.json")):
        starts, ended, stats = _assert_same(p, monkeypatch)
        assert stats["slow"] == 0, (p, stats)
        if stats["hits"]:
            with_flows += 1
            assert len(starts) > 100 and len(ended) > 100
    assert with_flows == 7            # level0/1/2 x 2 ranks, msprof-analyze's timeline_advice trace


def test_replicated_trace_equals_the_per_hit_loop(tmp_path, monkeypatch, text_captures):
    """A level1 rank replicated over 40 steps (perfgate.synth.replicate writes only the kept
    events: no flow) and the real level1 trace's events repeated 12 times (every event kind, each
    flow id 12 times: last ts wins), read with the default blocks and with 4 KiB blocks (flow
    objects cut at block boundaries, carried into the next block)."""
    cap = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp_path / "rep", steps=40, trace=True)
    p = next(cap.rglob("trace_view.json"))
    starts, ended, stats = _assert_same(p, monkeypatch)
    assert stats["hits"] == 0 and starts == [] and ended == set()
    src = (text_captures / "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").read_bytes().strip()
    body = src[1:-1].strip()
    for reps, chunk in ((12, None), (2, 4099)):
        p = tmp_path / f"repeated{reps}.json"
        p.write_bytes(b"[" + b", ".join([body] * reps) + b"]")
        starts, ended, stats = _assert_same(p, monkeypatch, chunk=chunk)
        assert stats["slow"] == 0 and stats["hits"] == reps * 845
        assert len(starts) == 420 and len(ended) == 420


A = '"cat": "async_npu"'
H = '"cat": "HostToDevice"'
ADVERSARIAL = [
    '{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": 101, "pid": 1, "tid": 1, "ts": "100.5", ' + A + '}',
    '{"ph":"f","id":101,"ts":"200.25","cat":"async_npu","pid":2,"tid":2}',                   # compact end
    '{' + H + ', "ts": "300.1", "id": "7", "ph": "s", "name": "HostToDevice7"}',            # other key order
    '{ "ph"  :   "s" ,  "id"  :  8 , "ts" :  "5.5" , "cat" : "async_npu" }',               # extra spaces
    '{"ph":\t"s",\n"id":\n9,"ts":"1","cat":"async_npu"}',                                    # tab / newline
    '{"name": "ph", "ph": "f", "id": 10, ' + A + ', "ts": "2"}',                            # "ph" as a value
    '{"name": "ph", "id": 11, "ph": "s", ' + A + ', "ts": "3"}',                            # ... read wrongly, as before
    '{"name": "a \\"quoted\\" name", "ph": "s", "id": 12, "ts": "4", ' + A + '}',          # escaped quotes
    '{"ph": "s", "id": 13, "ts": "6", ' + A + ', "name": "HostToDevice"}',                  # both categories
    '{"name": "x", "ph": "X", "ts": "7", "dur": 1, "args": {"ph": "s", "id": 14, "ts": "8", ' + A + '}}',
    '{"cat": "x", "args": {"v": "async_npu"}, "ph": "s", "id": 3}',                         # nested, no "cat"
    '{"ph": "s", "args": {"dims": [1, 2]}, "id": 15, "ts": "9", ' + A + '}',               # bracket between
    '{"ph": "s", "id": "a b", "ts": "1 2", ' + H + '}',                                     # values with spaces
    '{"ph": "s", "id": "x,y", "ts": "10", ' + H + '}',                                      # value with a comma
    '{' + H + ', "ph": "s", "id": "q}r", "ts": "11"}',                                      # '}' in a string
    '{"name": "{x", ' + A + ', "ph": "s", "id": 16, "ts": "12"}',                           # '{' in a string
    '{"ph": "s", "id": "", "ts": "", ' + A + '}',                                           # empty id and ts
    '{"ph": "s", "id": " 17", ' + A + '}',                                                  # no ts: b"0"
    '{"id": 18, "ts": "1", ' + A + '}',                                                     # no ph
    '{"ph": "s", "id": 19, "name": "async_npu"}',                                           # no "cat"
    '{"name": "cat", "ph": "s", "id": 20, "ts": "13", "x": "HostToDevice"}',               # "cat" as a value
    '{"ph": "s", "id": 21, "ts": "1736408883694699.51000000000000000000001", ' + A + '}',  # long value
    '{"ph": "s x", "id": -5, "ts": "14", ' + A + '}',                                       # ph "s x" reads s
    '{"name": "\\u00e9", "ph": "f", "id": 22, ' + A + '}',                                  # \\u escape
    '{"ph": "s", "id": "\u00e91", "ts": "15", ' + A + '}',                                  # non-ASCII value
    '{"ph": "s", "id": 23, "id": 24, "ts": "16", "ts": "17", ' + A + '}',                   # keys twice
    '{"ph": 5, "id": 25, ' + A + '}',                                                       # ph a number
    '{"ph": "f", ' + A + ', "ts": "18"}',                                                   # end without id
    '{' + A + ',"ph":"f","id":26}',                                                         # value before '}'
    '{"ph": "s", "id": 27, "ts": "19", ' + A + ', ' + ', '.join(f'"k{i}": "v{i}"' for i in range(20)) + '}',
    '{' + ', '.join(f'"k{i}": "v{i}"' for i in range(20)) + ', "ph": "s", "id": 28, "ts": "20", ' + A + '}',
    '{"ph": "s", "id": 101, "ts": "100.75", ' + A + '}',                                    # duplicate id: last ts wins
    '{"ph": "s", "id": 29, "ts": 1736408883694699.510, ' + H + '}',                         # ts a number
    '{"ph"\n:\n"s", "id": 30, ' + H + '}',
    '{"ph": "s", "id": "1234567890123456789012345678901234567890", ' + H + '}',             # id beyond the window
]


def _trace(path: Path, objects, sep: str = ", ") -> Path:
    path.write_text("[" + sep.join(objects) + "]", encoding="utf-8")
    return path


def test_adversarial_flow_objects_equal_the_per_hit_loop(tmp_path, monkeypatch):
    for i, ev in enumerate(ADVERSARIAL):
        json.loads(ev)                                       # every case is valid JSON
        starts, ended, _ = _assert_same(_trace(tmp_path / f"one{i}.json", [ev]), monkeypatch)
    p = _trace(tmp_path / "all.json", ADVERSARIAL, sep=",\n")
    starts, ended, stats = _assert_same(p, monkeypatch)
    assert 0 < stats["slow"] < stats["hits"]                 # some fell back, in their place
    d = dict(starts)
    assert d[(b"async_npu", b"101")] == b"100.75" and list(d)[0] == (b"async_npu", b"101")   # last ts wins
    assert d[(b"HostToDevice", b"a")] == b"1" and d[(b"async_npu", b"13")] == d[(b"HostToDevice", b"13")]
    assert d[(b"async_npu", b"")] == b"0" and d[(b"async_npu", b"17")] == b"0"
    assert (b"async_npu", b"101") in ended and (b"async_npu", b"26") in ended
    for chunk in (64, 257, 1000):                            # objects cut at block boundaries
        small = _assert_same(p, monkeypatch, chunk=chunk, separate=False)   # its order: cat by cat per block
        assert dict(small[0]) == d and small[1] == ended


KEYS = ["ph", "id", "ts", "cat", "name", "pid", "tid", "bp"]
VALUES = {
    "ph": ['"s"', '"f"'] * 4 + ['"X"', '"s "', '" s"', '""', '5', '"ph"', '"f,"'],
    "id": ['N', '"N"', 'N', '"N"', '1736408883700059821', '"936"', '"a b"', '""', '-7', '"x}y"', '"{"', '"\\"q\\""', '"id"', '3.5',
           '"' + "9" * 40 + '"', '"\u00e9"'],
    "ts": ['"1736408883694699.510"', '1736408883694699.51', '""', '"1 2"', '"ts"', '"1,5"', '7'],
    "cat": ['"async_npu"', '"HostToDevice"', '"cat"', '"x"'],
    "name": ['"torch_to_npu"', '"HostToDevice936"', '"async_npu"', '"ph"', '"a\\"b"', '"[x]"', '"cat"'],
    "pid": ['3096504', '"p"'], "tid": ['2', '{"ph": "s", "id": 1}', '[1, {"cat": "async_npu"}]'], "bp": ['"e"'],
}


def _random_object(rnd: random.Random) -> str:
    keys = [k for k in KEYS if rnd.random() < (0.9 if k in ("ph", "id", "cat") else 0.5)]
    rnd.shuffle(keys)
    if rnd.random() < 0.1:
        keys.insert(rnd.randrange(len(keys) + 1), rnd.choice(["ph", "id", "ts", "cat"]))   # a key twice
    sp = rnd.choice(["", " ", "  "])
    colon = rnd.choice([":", ": ", " : ", ":  "])
    members = [f'"{k}"{colon}{rnd.choice(VALUES[k])}'.replace("N", str(rnd.randrange(10 ** 6))) for k in keys]
    if rnd.random() < 0.1:
        i = rnd.randrange(len(members) + 1)
        members.insert(i, f'"args"{colon}{{"ph": "s", "id": {rnd.randint(0, 9)}, "cat": "async_npu"}}')
    return "{" + sp + ("," + sp).join(members) + sp + "}" if members else "{}"


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_random_flow_objects_equal_the_per_hit_loop(tmp_path, monkeypatch, seed):
    rnd = random.Random(seed)
    objs = [_random_object(rnd) for _ in range(3000)]
    for o in objs:
        json.loads(o)
    p = _trace(tmp_path / "random.json", objs)
    starts, ended, stats = _assert_same(p, monkeypatch, separate=False)
    assert len(starts) > 100 and len(ended) > 50 and 0 < stats["slow"] < stats["hits"]
    small = _assert_same(p, monkeypatch, chunk=4099, separate=False)
    assert dict(small[0]) == dict(starts) and small[1] == ended
