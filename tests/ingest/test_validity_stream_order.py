"""Stream order (ingest.validity): without a recorded collection window (raw msprof), a kernel
table where at least half of the consecutive same-stream task pairs overlap by more than 1 us is
refused (exit 3 naming file, row, column); fewer overlaps, or rows without a stream, pass."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.validity import check_time_values


def _table(starts_us, durs_us, streams):
    df = pd.DataFrame({
        "start_ns": np.asarray([round(s * 1000) for s in starts_us], dtype=np.int64),
        "dur_ns": np.asarray([round(d * 1000) for d in durs_us], dtype=np.int64),
        "row": np.arange(1, len(starts_us) + 1),
        "stream_id": pd.Categorical(streams),
    })
    return SimpleNamespace(df=df, path=Path("op_summary_1.csv"),
                           columns={"start_us": "Task Start Time(us)", "dur_us": "Task Duration(us)"})


T0 = 1_787_504_007_005_868.0


def test_most_pairs_overlapping_is_refused_naming_row_and_column():
    # stream 46: row 2 starts 0.77 us after row 1, which lasts 4.6 us; row 3 after row 2 ends
    t = _table([T0, T0 + 0.77, T0 + 14.0], [4.6, 8.06, 26.7], ["46", "46", "46"])
    with pytest.raises(InvalidCaptureError) as e:
        check_time_values(t, None)
    err = e.value
    assert err.row == 2 and "Task Start Time(us)" in err.message
    assert "ends, as in 1 of 2 consecutive same-stream task pairs" in err.message


def test_a_few_overlaps_and_streamless_rows_pass():
    starts = [T0 + 10 * i for i in range(10)]
    durs = [5.0] * 10
    durs[3] = 30.0                                     # one task overlapping the next two: 2 of 9 pairs
    check_time_values(_table(starts, durs, ["7"] * 10), None)
    # every row overlapping, but no stream known (Level0 / communication rows): not judged
    check_time_values(_table([T0 + i for i in range(6)], [5.0] * 6, [np.nan] * 6), None)
    # two streams each in order, interleaved in time: passes
    check_time_values(_table([T0, T0 + 1, T0 + 10, T0 + 11], [5, 5, 5, 5], ["1", "2", "1", "2"]), None)


def test_overlap_within_1_us_is_clock_jitter_not_a_fault():
    check_time_values(_table([T0, T0 + 4.5, T0 + 9.0], [5.0, 5.0, 5.0], ["1", "1", "1"]), None)
