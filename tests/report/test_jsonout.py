"""perfgate.jsonout writes with orjson only where that is the standard library's document
(json.loads of both texts equal), and MetricValue.to_dict's fast copy equals dataclasses.asdict."""
import dataclasses
import datetime
import enum
import json
import math
import uuid
from collections import OrderedDict

import numpy as np
import pytest

from perfgate import jsonout
from perfgate.model import MetricValue


def _same_document(obj, sort_keys=False):
    ours = jsonout.dumps(obj, sort_keys=sort_keys)
    ref = json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False)
    # NaN != NaN: compare the documents re-serialised by the standard library (NaN stays a literal)
    a = json.dumps(json.loads(ours.decode("utf-8")), sort_keys=True)
    b = json.dumps(json.loads(ref), sort_keys=True)
    assert a == b
    assert ours.endswith(b"\n")
    return ours


@dataclasses.dataclass
class _D:
    x: int = 1


class _E(enum.Enum):
    A = 1


class _IE(enum.IntEnum):
    B = 2


class _F(float):
    pass


class _S(str):
    pass


PLAIN = [
    {}, [], {"a": 1, "b": [1.5, 2.5, -0.0], "c": None, "d": True, "e": "ü\u2028\x01\"\\"},
    {"t": (1, 2.0, "x")}, {"big": 2**63 - 1, "neg": -2**63}, [1e308, 1e308],  # sum overflows: the slow path, same document
    {"samples": [0.1] * 1000, "mixed": [1, 2.5, None, "s"]}, {"z": 1, "a": {"y": 2, "b": 3}},
    [1e-5, 5e-324, 1.7976931348623157e308, 123456789.123456789],
]
NOT_PLAIN = [
    {"a": float("nan")}, {"a": [1.0, float("inf")]}, {"a": {"b": [-math.inf]}}, [float("nan"), 1],
    {"a": [{"x": 1.0}, {"x": float("nan")}]}, {1: "int key"}, {"a": 2**64}, {"a": -2**63 - 1},
    {"a": np.float64(1.5)}, {"a": _F(2.5)}, {"a": _S("s")}, {"a": _IE.B}, {"a": OrderedDict(x=1)},
]
UNSERIALISABLE = [{"a": _D()}, {"a": _E.A}, {"a": uuid.UUID(int=1)}, {"a": datetime.date(2026, 1, 1)},
                  {"a": np.int64(3)}, {"a": {1, 2}}, {"a": b"bytes"}]


@pytest.mark.parametrize("obj", PLAIN + NOT_PLAIN, ids=lambda o: repr(o)[:40])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_same_document_as_the_standard_library(obj, sort_keys):
    _same_document(obj, sort_keys)


@pytest.mark.parametrize("obj", NOT_PLAIN[:5], ids=lambda o: repr(o)[:40])
def test_non_finite_floats_stay_the_standard_librarys_literals(obj):
    assert not jsonout.plain(obj)
    text = jsonout.dumps(obj).decode()
    assert "NaN" in text or "Infinity" in text  # orjson would have written null


@pytest.mark.parametrize("obj", UNSERIALISABLE, ids=lambda o: type(o["a"]).__name__)
def test_what_json_refuses_is_refused(obj):
    with pytest.raises(TypeError) as ours:
        jsonout.dumps(obj)
    with pytest.raises(TypeError) as ref:
        json.dumps(obj)
    assert str(ours.value) == str(ref.value)


def test_plain_sees_deep_values():
    assert jsonout.plain(PLAIN[2]) and jsonout.plain({"a": [[[[1.0]]]]})
    assert not jsonout.plain({"a": [[[[float("nan")]]]]})
    assert not jsonout.plain({"a": [[[[_E.A]]]]})


def _asdict(m):
    d = dataclasses.asdict(m)
    if m.samples is None:
        d.pop("samples")
    return d


@pytest.mark.parametrize("m", [
    MetricValue("k", "n", {"a": "b"}, 1.5, "us", samples=[1.0, 2.0]),
    MetricValue("k", "n", {}, ["x", "y"], "set", context={"nested": {"l": [1, {"q": 2}]}, "s": [1.0]}),
    MetricValue("k", "n", {}, 3, "calls"),
    MetricValue("k", "n", {}, 3, "calls", context={"tuple": (1, 2)}),            # asdict keeps the tuple
    MetricValue("k", "n", {}, np.float64(2.0), "us", context={"np": np.int64(4)}),  # numpy scalars
    MetricValue("k", "n", {}, 1.0, "us", context={"dc": _D()}),                 # asdict turns it into a dict
])
def test_metric_to_dict_equals_asdict(m):
    fast, ref = m.to_dict(), _asdict(m)
    assert fast == ref and list(fast) == list(ref)
    assert type(fast["context"].get("tuple", ())) is type(ref["context"].get("tuple", ()))
    if m.samples is not None:
        assert fast["samples"] is not m.samples  # a copy, as asdict's
    fast["labels"]["new"] = 1
    assert "new" not in m.labels


def test_real_fingerprints_write_and_copy_exactly(text_captures, ascend, policy):
    from perfgate.app.run import fingerprint_path
    for cap in (text_captures / "level1", text_captures / "level2", ascend / "msinsight/test/st/level2"):
        fp = fingerprint_path(cap, policy, workers=1)
        for m in fp.metrics.values():
            assert m.to_dict() == _asdict(m)
        doc = fp.to_dict()
        assert jsonout.plain(doc), cap  # the fast writer is taken: every value an exact plain JSON type
        _same_document(doc)
        _same_document(doc, sort_keys=True)


def test_baseline_file_reads_back_identically(tmp_path, text_captures, policy):
    from perfgate.app.run import fingerprint_path
    from perfgate.store.baselines import BaselineStore
    fp = fingerprint_path(text_captures / "level1", policy, workers=1)
    store = BaselineStore(tmp_path)
    path = store.save("main", fp)
    back, _ = store.load("main")
    assert back.to_dict() == fp.to_dict()
    doc = json.loads(path.read_text())
    assert list(doc) == sorted(doc)  # keys still sorted


def test_a_lone_surrogate_is_escaped_not_a_crash():
    doc = {"config": {"_aic_metrics": "x\udc80y"}, "v": [1.0]}
    out = jsonout.dumps(doc)
    assert out.isascii() and json.loads(out) == doc
