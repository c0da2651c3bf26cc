"""Ingest fast paths equal the readers they replaced, kept as oracles:
communication.json (:func:`read_communication` vs the per-op loop
:func:`read_communication_loop`), on every real capture, on a replicated many-step capture and on
mutated files (same tables, or the same error text)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.comm import _fast, read_communication, read_communication_loop
from perfgate.synth.replicate import replicate_rank


def _real_files(ascend, name):
    files = sorted(ascend.rglob(name))
    assert files, f"no {name} under {ascend}"
    return files


def _same_comm(path):
    a, b = read_communication(path), read_communication_loop(path)
    pd.testing.assert_frame_equal(a.ops, b.ops, check_exact=True)
    pd.testing.assert_frame_equal(a.links, b.links, check_exact=True)
    return a


def test_comm_fast_equals_loop_on_every_real_file(ascend):
    files = _real_files(ascend, "communication.json")
    assert len(files) >= 8
    for f in files:
        a = _same_comm(f)
        assert len(a.ops) > 0, f
        assert _fast(f.read_bytes())[0] is not None, f"{f}: the fast path was not taken"


def test_comm_fast_equals_loop_on_replicated_many_steps(text_captures, tmp_path):
    out = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp_path / "rep", steps=300, trace=False)
    f = next(out.rglob("communication.json"))
    a = _same_comm(f)
    assert a.ops["step"].nunique() == 300
    assert len(a.links) == 5 * len(a.ops)
    assert _fast(f.read_bytes())[0] is not None


def _outcome(fn, path):
    try:
        c = fn(path)
    except InvalidCaptureError as e:
        return ("error", str(e), e.exit_code)
    except Exception as e:  # noqa: BLE001 - the reference reader's own exception, compared as is
        return ("raised", type(e).__name__, str(e))
    return ("ok", c.ops, c.links)


def _same_outcome(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] != "ok":
        assert got == want
        return
    for a, b in zip(got[1:], want[1:]):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def _first_op(doc):
    step = next(iter(doc))
    kind = next(k for k, v in doc[step].items() if v)
    op = next(k for k in doc[step][kind] if k != "Total Op Info")
    return doc[step][kind][op]


def _set(field, value):
    def m(doc):
        _first_op(doc)["Communication Time Info"][field] = value
    return m


def _drop(field):
    def m(doc):
        del _first_op(doc)["Communication Time Info"][field]
    return m


def _link(field, value):
    def m(doc):
        info = _first_op(doc)["Communication Bandwidth Info"]
        info[next(iter(info))][field] = value
    return m


def _bw(value):
    def m(doc):
        _first_op(doc)["Communication Bandwidth Info"] = value
    return m


def _whole_link(value):
    def m(doc):
        info = _first_op(doc)["Communication Bandwidth Info"]
        info[next(iter(info))] = value
    return m


def _step_key(doc):
    k = next(iter(doc))
    doc["step007"] = doc.pop(k)


def _bad_key(doc):
    doc["Step 1"] = {}


def _op_not_dict(doc):
    step = next(iter(doc))
    kind = next(k for k, v in doc[step].items() if v)
    doc[step][kind]["hcom_x@1"] = [1, 2]


def _total(doc):
    step = next(iter(doc))
    kind = next(k for k, v in doc[step].items() if v)
    doc[step][kind]["Total Op Info"] = {"Communication Time Info": {"Elapse Time(ms)": "junk"}}


def _kind_not_dict(doc):
    step = next(iter(doc))
    doc[step]["p2p"] = 3


def _no_time_info(doc):
    del _first_op(doc)["Communication Time Info"]


MUTATIONS = {
    "elapse null": _set("Elapse Time(ms)", None), "elapse string": _set("Elapse Time(ms)", "N/A"),
    "elapse bool": _set("Elapse Time(ms)", True), "elapse negative": _set("Elapse Time(ms)", -1.5),
    "elapse huge int": _set("Elapse Time(ms)", 10 ** 30), "wait list": _set("Wait Time(ms)", [1]),
    "idle int": _set("Idle Time(ms)", 3), "start null": _set("Start Timestamp(us)", None),
    "start negative": _set("Start Timestamp(us)", -2.0), "start absent": _drop("Start Timestamp(us)"),
    "transit absent": _drop("Transit Time(ms)"), "elapse absent": _drop("Elapse Time(ms)"),
    "link size string": _link("Transit Size(MB)", "1"), "link time negative": _link("Transit Time(ms)", -1),
    "link size absent": _link("Transit Size(MB)", 0), "bandwidth null": _bw(None), "bandwidth empty": _bw({}),
    "bandwidth list": _bw([1]), "link not object": _whole_link(7), "step with zeros": _step_key,
    "bad top key": _bad_key, "op not object": _op_not_dict, "total op info skipped": _total,
    "kind not object": _kind_not_dict, "no time info": _no_time_info,
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_comm_fast_equals_loop_on_mutated_file(name, text_captures, tmp_path):
    src = text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    doc = json.loads(src.read_bytes())
    MUTATIONS[name](doc)
    path = tmp_path / "communication.json"
    path.write_text(json.dumps(doc))
    _same_outcome(_outcome(read_communication, path), _outcome(read_communication_loop, path))


def _one_op(t: str, key: str = "a@1", before: str = "", after: str = "") -> str:
    """A one-op communication.json: ``{before}"<key>": {"Communication Time Info": {<t>}<after>}``."""
    return ('{"step1": {"collective": {' + before + '"' + key + '": {"Communication Time Info": {' + t + '}'
            + after + '}}}}')


@pytest.mark.parametrize("text", ["", "  \n", "[1, 2]", '{"step1": {"collective": {}}', "{\"step1\": NaN}",
                                  '{"step1": {"collective": {"a@1": {"Communication Time Info": '
                                  '{"Elapse Time(ms)": NaN}}}}}',
                                  '{"step1": {"collective": {"a@1": {"Communication Time Info": '
                                  '{"Elapse Time(ms)": Infinity}}}}}',
                                  '\ufeff{"step1": {}}', "{}", '{"step1": {}, "step2": {"p2p": {}}}',
                                  # msgspec's decode: duplicate keys, numbers beyond a float,
                                  # a lone surrogate, a Total Op Info of another form, a falsy bandwidth
                                  _one_op('"Elapse Time(ms)": 1, "Elapse Time(ms)": 2'),
                                  _one_op('"Elapse Time(ms)": 1e400'), _one_op('"Elapse Time(ms)": 1' + "0" * 400),
                                  _one_op('"Elapse Time(ms)": 1e-400, "Wait Time(ms)": -0.0'),
                                  _one_op('"Elapse Time(ms)": true'),
                                  _one_op('"Elapse Time(ms)": 1', key="\\ud800@1"),
                                  _one_op('"Elapse Time(ms)": 1', before='"Total Op Info": {"x": 1}, '),
                                  _one_op('"Elapse Time(ms)": 1', after=', "Communication Bandwidth Info": false'),
                                  _one_op('"Elapse Time(ms)": 1', after=', "Communication Bandwidth Info": {"HCCS": 3}'),
                                  '{"step1": {"collective": {}}, "step1": {"p2p": {}}}'])
def test_comm_fast_equals_loop_on_odd_text(text, tmp_path):
    path = tmp_path / "communication.json"
    path.write_text(text, encoding="utf-8")
    got, want = _outcome(read_communication, path), _outcome(read_communication_loop, path)
    _same_outcome(got, want)
    if "NaN" in text or "Infinity" in text:  # msgspec refuses the tokens; the json module reads them, then refused
        assert want[0] == "error" and ("not a finite" in want[1] or "unexpected" in want[1])


# ---- step_trace_time.csv: Arrow fast path vs the pandas reader it replaced ----

from perfgate.ingest.csvread import read_arrow_columns, read_header, resolve_columns  # noqa: E402
from perfgate.ingest.aliases import STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED  # noqa: E402
from perfgate.ingest.steps import (TIME_COLUMNS, _step_trace_columns, read_step_trace,  # noqa: E402
                                   read_step_trace_pandas)


def _fast_taken(path):
    header = read_header(path)
    cols = resolve_columns(header, STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED, path)
    raw, n = read_arrow_columns(path, cols, len(header), numeric={c for c in TIME_COLUMNS if c in cols})
    return _step_trace_columns(raw, n, cols) is not None


def _st_outcome(fn, path):
    try:
        return ("ok", fn(path))
    except InvalidCaptureError as e:
        return ("error", str(e), e.exit_code)


def test_step_trace_fast_equals_pandas_on_every_real_file(ascend):
    files = _real_files(ascend, "step_trace_time.csv")
    assert len(files) >= 10
    for f in files:
        pd.testing.assert_frame_equal(read_step_trace(f), read_step_trace_pandas(f), check_exact=True)
        assert _fast_taken(f), f"{f}: the fast path was not taken"


def test_step_trace_fast_equals_pandas_on_replicated_many_steps(text_captures, tmp_path):
    out = replicate_rank(text_captures / "level2" / "rank0_ascend_pt", tmp_path / "rep", steps=500, trace=False)
    f = next(out.rglob("step_trace_time.csv"))
    a = read_step_trace(f)
    pd.testing.assert_frame_equal(a, read_step_trace_pandas(f), check_exact=True)
    assert len(a) == 500 and _fast_taken(f)


ST_CELLS = ["N/A", "", "nan", "inf", "-inf", "abc", "1e3", "+5", "0x10", "2e12", "-3.5", " 7.25 ", "1_000", "\t4.5"]
ST_STEPS = ["", "007", "0", "abc", "N/A", "٣", "1.0", " 12 "]


@pytest.mark.parametrize("cell", ST_CELLS)
@pytest.mark.parametrize("column", [1, 3, 9])
def test_step_trace_fast_equals_pandas_on_mutated_time_cell(cell, column, text_captures, tmp_path):
    src = text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    lines = src.read_text(encoding="utf-8-sig").splitlines()
    row = lines[1].split(",")
    if column >= len(row):
        pytest.skip("no such column")
    row[column] = cell
    path = tmp_path / "step_trace_time.csv"
    path.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    got, want = _st_outcome(read_step_trace, path), _st_outcome(read_step_trace_pandas, path)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)
    else:
        assert got == want


@pytest.mark.parametrize("step", ST_STEPS)
def test_step_trace_fast_equals_pandas_on_mutated_step(step, text_captures, tmp_path):
    src = text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    lines = src.read_text(encoding="utf-8-sig").splitlines()
    row = lines[1].split(",")
    row[0] = step
    path = tmp_path / "step_trace_time.csv"
    path.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    got, want = _st_outcome(read_step_trace, path), _st_outcome(read_step_trace_pandas, path)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)
    else:
        assert got == want


@pytest.mark.parametrize("devices", [("0", "0"), ("0", "1"), ("", "3"), ("N/A", "N/A")])
def test_step_trace_fast_equals_pandas_with_device_column(devices, tmp_path):
    head = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
            "Communication(Not Overlapped and Exclude Receive),Preparing")
    rows = [f"{d},{i + 1},100.5,2.25,1.0,3.25,4.0,0,0,2.25,0.5" for i, d in enumerate(devices)]
    path = tmp_path / "step_trace_time.csv"
    path.write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    got, want = _st_outcome(read_step_trace, path), _st_outcome(read_step_trace_pandas, path)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)
    else:
        assert got == want and "devices in one rank folder" in got[1]


# ---- kernel_details.csv / op_summary: numpy steps vs the pandas reader they replaced ----

import csv  # noqa: E402
import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

import reference_kernels  # noqa: E402
from perfgate.ingest.csvread import read_header  # noqa: E402
from perfgate.ingest.kernels import _PMU_TIME, _exact_duplicates, pmu_columns, read_kernels  # noqa: E402


def _same_kernels(path, **kw):
    """The reader equals the oracle (pmu=True there = every PMU column = our pmu="all"); with
    pmu=True ours holds the oracle's columns but the PMU ones :func:`pmu_columns` skips."""
    b = reference_kernels.read_kernels(path, **kw)
    tables = [read_kernels(path, **kw)]
    if kw.get("pmu"):
        tables.append(read_kernels(path, **{**kw, "pmu": "all"}))
    for a in tables:
        want = b.df[[c for c in b.df.columns if c in a.df.columns]]
        assert set(b.df.columns) - set(a.df.columns) <= set(_skipped_names(path)), path
        pd.testing.assert_frame_equal(a.df, want, check_exact=True)
        for f in dataclasses.fields(a):
            if f.name != "df":
                assert getattr(a, f.name) == getattr(b, f.name), f.name
    pd.testing.assert_frame_equal(tables[-1].df, b.df, check_exact=True)
    return tables[0]


def _skipped_names(path):
    """Kernel-table names of the PMU header columns pmu=True leaves unread."""
    header = read_header(path)
    skipped = pmu_columns(header, (), True)[1]
    return [f"{_PMU_TIME.match(h).group(1)}_us" if _PMU_TIME.match(h) else h for h in skipped]


def _kernel_files(ascend):
    files = sorted([*ascend.rglob("kernel_details.csv"), *ascend.rglob("op_summary*.csv")])
    assert len(files) >= 10
    return files


@pytest.mark.parametrize("pmu,shapes", [(False, False), (True, False), (True, True)])
def test_kernels_equal_reference_on_every_real_file(ascend, pmu, shapes):
    seen = 0
    for f in _kernel_files(ascend):
        try:
            want = reference_kernels.read_kernels(f, pmu=pmu, shapes=shapes)
        except InvalidCaptureError as e:  # a fixture the reader refuses: refused alike, same text
            with pytest.raises(InvalidCaptureError) as got:
                read_kernels(f, pmu=pmu, shapes=shapes)
            assert str(got.value) == str(e)
            continue
        assert len(_same_kernels(f, pmu=pmu, shapes=shapes).df) == len(want.df)
        seen += 1
    assert seen >= 8


def test_kernels_equal_reference_on_replicated_many_steps(text_captures, tmp_path):
    out = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp_path / "rep", steps=400, trace=False)
    a = _same_kernels(next(out.rglob("kernel_details.csv")), pmu=True)
    assert a.df["step"].nunique() == 400


def test_kernels_equal_reference_with_duplicates_and_invalid_rows(text_captures, tmp_path):
    src = text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(src, newline="", encoding="utf-8-sig") as f:
        head, *rows = list(csv.reader(f))
    dur = head.index("Duration(us)")
    rows[5][dur] = "N/A"
    rows[7][dur] = ""
    body = [*rows, rows[3], rows[10], rows[10], rows[40]]
    path = tmp_path / "kernel_details.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([head, *body])
    a = _same_kernels(path, pmu=True)
    assert len(a.duplicate_rows) == 4 and len(a.invalid_rows) == 2
    rows[7][dur] = "-1.5"                      # a negative duration: the same refusal on both paths
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([head, *body])
    errs = []
    for fn in (read_kernels, reference_kernels.read_kernels):
        with pytest.raises(InvalidCaptureError) as e:
            fn(path, pmu=True)
        errs.append(str(e.value))
    assert errs[0] == errs[1] and "row 8: Duration(us) is negative" in errs[0] and "'-1.5'" in errs[0]


def _old_exact_duplicates(df):
    """The pandas version the numpy form replaced (the test's oracle)."""
    start = df["start_ns"].to_numpy()
    same = np.zeros(len(start), dtype=bool)
    order = np.argsort(start, kind="stable")
    eq = start[order][1:] == start[order][:-1]
    same[order[1:][eq]] = True
    same[order[:-1][eq]] = True
    out = np.zeros(len(start), dtype=bool)
    if same.any():
        idx = np.flatnonzero(same)
        key = pd.DataFrame({"s": start[idx], "d": df["dur_ns"].to_numpy()[idx],
                            "n": df["name"].cat.codes.to_numpy()[idx], "t": df["stream_id"].cat.codes.to_numpy()[idx]})
        out[idx] = key.duplicated(keep="first").to_numpy()
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(0, 60), st.booleans())
def test_exact_duplicates_equal_the_pandas_version(seed, n, ordered):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 6, n) * 1000 + 1_736_408_883_704_643_212
    if ordered:
        start = np.sort(start)
    names = [None, "a", "b"]
    df = pd.DataFrame({"start_ns": start, "dur_ns": rng.integers(0, 3, n),
                       "name": pd.Categorical([names[i] for i in rng.integers(0, 3, n)]),
                       "stream_id": pd.Categorical([names[i] for i in rng.integers(0, 3, n)])})
    assert _exact_duplicates(df).tolist() == _old_exact_duplicates(df).tolist()


# ---- decimal128 -> exact int64 ns: Arrow cast vs the buffer-reading loop it replaced ----

import pyarrow as pa  # noqa: E402

from perfgate.ingest.csvread import decimal_to_scaled_int  # noqa: E402


def _old_decimal_to_scaled_int(arr):
    """The per-chunk buffer reader the fast form replaced (the test's oracle)."""
    lows, nulls = [], []
    for chunk in arr.chunks:
        buf = chunk.buffers()[1]
        words = np.frombuffer(buf, dtype="<i8")[2 * chunk.offset: 2 * (chunk.offset + len(chunk))].reshape(-1, 2)
        null = chunk.is_null().to_numpy(zero_copy_only=False)
        lo, hi = words[:, 0], words[:, 1]
        fits = (hi == (lo >> 63)) | null
        if not fits.all():
            return None
        lows.append(np.where(null, 0, lo))
        nulls.append(null)
    if not lows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    return np.concatenate(lows).astype(np.int64, copy=False), np.concatenate(nulls)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(2 ** 70), 2 ** 70), st.integers(-(10 ** 19), 10 ** 19)),
                max_size=40), st.integers(1, 4), st.integers(0, 3))
def test_decimal_to_scaled_int_equals_the_buffer_loop(values, chunks, offset):
    from decimal import Decimal
    typ = pa.decimal128(38, 3)
    arrs = [pa.array([None if v is None else Decimal(v).scaleb(-3) for v in values], typ) for _ in range(chunks)]
    arr = pa.chunked_array([a.slice(min(offset, len(a))) for a in arrs], typ)
    got, want = decimal_to_scaled_int(arr), _old_decimal_to_scaled_int(arr)
    if want is None:
        assert got is None
    else:
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
        assert got[0].dtype == np.int64 and got[0].flags.writeable


def test_chunks_to_numpy_equals_arrow_to_numpy():
    """:func:`chunks_to_numpy` (one numpy array filled chunk by chunk) equals
    ``ChunkedArray.to_numpy(zero_copy_only=False).astype(dtype)``: floats with nulls (-> NaN),
    int64, booleans, empty chunks, no chunk at all."""
    import numpy as np
    import pyarrow as pa
    from perfgate.ingest.csvread import chunks_to_numpy
    cases = [
        (pa.chunked_array([[1.5, None, 3.0], [], [None], [4.25]], pa.float64()), np.float64),
        (pa.chunked_array([[1, 2], [3, -4, 2 ** 62]], pa.int64()), np.int64),
        (pa.chunked_array([[True, False], [], [False]], pa.bool_()), bool),
        (pa.chunked_array([], pa.float64()), np.float64),
    ]
    for arr, dtype in cases:
        got = chunks_to_numpy(arr, dtype)
        ref = arr.to_numpy(zero_copy_only=False).astype(dtype)
        assert got.dtype == ref.dtype and len(got) == len(arr)
        assert np.array_equal(got, ref, equal_nan=dtype is np.float64)
