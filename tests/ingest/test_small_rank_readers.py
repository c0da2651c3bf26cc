"""The small-rank forms of the readers equal the pandas forms they stand in front of: op_statistic.csv
read from the cells' strings (``opstat._plain_table``) against ``opstat._general_table``, the device
step spans of the time-base check against the group-by, and the repeated-step test's quick
distinctness against the string keys. Each fast form answers only for the inputs it can prove;
anything else goes to the pandas form, which names the errors."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfgate.ingest import opstat, steps, validity
from perfgate.ingest.aliases import OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED
from perfgate.ingest.csvread import read_arrow_columns, read_header, resolve_columns
from perfgate.ingest.load import load_capture

HEADER = "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"


def _both(path: Path):
    header = read_header(path)
    cols = resolve_columns(header, OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED, path)
    arrays, n = read_arrow_columns(path, cols, len(header), numeric={"count", "total_us"})
    return opstat._plain_table(arrays, n), lambda: opstat._general_table(path, cols, arrays, n)


@pytest.mark.real
def test_plain_op_statistic_equals_the_pandas_table_on_every_real_file(ascend):
    files = sorted(ascend.rglob("op_statistic*.csv"))
    assert files
    for p in files:
        fast, general = _both(p)
        assert fast is not None, p   # profiler-written files take the fast form
        pd.testing.assert_frame_equal(fast, general(), check_exact=True)


@pytest.mark.parametrize("rows, fast", [
    (["0,MatMul,AI_CORE,57,1423.208", "0,Add,AI_VECTOR_CORE,3,1.5"], True),
    (["0,,AI_CORE,2,1.0", "0,N/A,N/A,1,0"], True),                       # empty / N/A types
    (["0,MatMul,AI_CORE,007,1423.208"], True),                             # leading zeros
    (["0,MatMul,AI_CORE,57,1423.208", "0,MatMul,AI_CORE,3,1.5"], False),   # a pair on two rows: summed
    (["0,MatMul,AI_CORE,57.5,1.0"], False),                                # not a count: the error
    (["0,MatMul,AI_CORE,5,-1.0"], False),                                  # negative: the error
    (["0,MatMul,AI_CORE,5,1e3"], False),                                   # exponent: pandas parses it
    (["0,MatMul,AI_CORE,5,N/A"], False),
    (["0,MatMul,AI_CORE,5,1.0", "1,Add,AI_CORE,5,1.0"], False),           # two devices: the error
    (["0,\tMatMul,AI_CORE,5,1.0"], True),                                  # the Excel-guard TAB is trimmed
    (["0,MatMul,AI_CORE,99999999999999999999,1.0"], False),               # beyond int64
])
def test_plain_op_statistic_answers_only_what_it_proves(tmp_path, rows, fast):
    p = tmp_path / "op_statistic.csv"
    p.write_text(HEADER + "".join(r + ",0,0,0,0\n" for r in rows), encoding="utf-8")
    got, general = _both(p)
    assert (got is not None) == fast
    try:
        want = general()
    except Exception as e:   # noqa: BLE001 - the pandas form's error is read_op_statistic's
        with pytest.raises(type(e)) as ours:
            opstat.read_op_statistic(p)
        assert str(ours.value) == str(e)
        return
    if got is not None:
        pd.testing.assert_frame_equal(got, want, check_exact=True)
    pd.testing.assert_frame_equal(opstat.read_op_statistic(p), want, check_exact=True)


def _spans_by_group_by(df) -> dict:
    g = df.groupby("step", observed=True).agg(first=("start_ns", "min"), last=("end_ns", "max"))
    g.index = g.index.astype(str)
    return {s: (int(g.at[s, "first"]), int(g.at[s, "last"])) for s in g.index}


@pytest.mark.real
def test_device_step_spans_equal_the_group_by(text_captures):
    seen = 0
    for lvl in ("level0", "level1", "level2"):
        for r in load_capture(text_captures / lvl, with_trace="never").ranks:
            if r.kernels is not None:
                assert validity._device_step_spans(r.kernels.df) == _spans_by_group_by(r.kernels.df)
                seen += 1
    assert seen


def test_device_step_spans_on_random_tables():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        labels = [None if rng.random() < 0.1 else str(rng.integers(1, 6)) for _ in range(n)]
        start = rng.integers(0, 10**15, n)
        df = pd.DataFrame({"step": pd.Categorical(labels, categories=[str(i) for i in range(1, 8)]),
                           "start_ns": start, "end_ns": start + rng.integers(0, 10**6, n)})
        assert validity._device_step_spans(df) == _spans_by_group_by(df)
        plain = df.assign(step=pd.array(labels, dtype="str"))   # not categorical: the group-by itself
        assert validity._device_step_spans(plain) == _spans_by_group_by(plain)


def _repeats_by_strings(devices, step_labels) -> bool:
    dev = pd.Series(devices, dtype=object).astype("string").fillna("")
    key = dev + "\x00" + pd.Series(step_labels, dtype=object).astype("string").fillna(steps.IMPLICIT_STEP)
    return bool(key.duplicated(keep=False).any())


def test_distinct_step_rows_agree_with_the_string_keys():
    random.seed(7)
    pool_dev = ["0", "1", "", None, float("nan"), pd.NA]
    pool_step = ["1", "2", "3", "", None, float("nan"), pd.NA, steps.IMPLICIT_STEP]
    for _ in range(3000):
        n = random.randint(2, 6)
        d = [random.choice(pool_dev) for _ in range(n)]
        s = [random.choice(pool_step) for _ in range(n)]
        if steps._distinct_text_pairs(d, s):
            assert not _repeats_by_strings(d, s), (d, s)
    assert not steps._distinct_text_pairs([0, 0], ["1", "2"])   # an int device: the string form decides
    # a file without a Device_id column: the reader's device is pd.NA on every row
    assert steps._distinct_text_pairs([pd.NA, pd.NA], ["1", "2"])
