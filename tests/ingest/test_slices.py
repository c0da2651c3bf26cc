"""Raw msprof op_summary slices: the slices of one export read as one table whatever their time
stamps; a missing, short or foreign slice and two exports in one folder are refused (exit 3)."""
from __future__ import annotations

import csv
import shutil

import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.load import load_capture
from _cli import run


def _msprof_output(ascend, tmp_path):
    src = next((ascend / "vllm_ascend_msprof/prof_unpack").rglob("op_summary_20260823165335.csv")).parent
    out = tmp_path / "cap" / "PROF_A" / "mindstudio_profiler_output"
    shutil.copytree(src, out)
    return out


def test_two_op_summary_exports_in_one_folder_are_refused(ascend, tmp_path):
    """The raw msprof PipeUtilization output plus the op_summary of a later export (the L2Cache
    run's, another timestamp) left in the same folder: both were read as slices of one table, every
    call counted twice (exit 1, "calls 1 -> 2/step", evidence rows from the other file). Now exit 3
    naming both files; nothing is saved."""
    out = _msprof_output(ascend, tmp_path)
    other = next((ascend / "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache").rglob(
        "op_summary_20260823165532.csv"))
    shutil.copy(other, out / other.name)
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, tmp_path / "cap")
    assert r.exit_code == 3, r.output
    assert "2 exports (op_summary_20260823165335.csv, op_summary_20260823165532.csv)" in r.output
    assert not bl.exists() or not list(bl.iterdir())


def test_op_summary_slices_must_be_of_one_export(ascend, tmp_path):
    """A sliced export beside an unsliced one (slice 0 twice), or slice stamps that fall as the
    slice number rises: exit 3. msprof stamps each slice when it writes it, so the stamps of one
    export may differ (a real export of over 1M rows was refused); slices in
    one pass stay one table (tests/ingest/test_db_and_msprof.py and the tests below)."""
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.load import load_capture
    import pytest
    out = _msprof_output(ascend, tmp_path)
    whole = out / "op_summary_20260823165335.csv"
    lines = whole.read_text(encoding="utf-8").splitlines()
    (out / "op_summary_slice_0_20260823165335.csv").write_text("\n".join(lines[:3]) + "\n")
    with pytest.raises(InvalidCaptureError, match="a sliced export .* beside an unsliced one"):
        load_capture(tmp_path / "cap")
    whole.unlink()
    (out / "op_summary_slice_0_20260823165335.csv").rename(out / "op_summary_slice_0_20260823170000.csv")
    (out / "op_summary_slice_1_20260823165335.csv").write_text("\n".join([lines[0], *lines[3:5]]) + "\n")
    with pytest.raises(InvalidCaptureError, match=r"slice stamps that fall as the slice number rises "
                                                  r"\(20260823170000 then 20260823165335\)"):
        load_capture(tmp_path / "cap")
    (out / "op_summary_slice_1_20260823165335.csv").rename(out / "op_summary_slice_1_20260823170004.csv")
    assert len(load_capture(tmp_path / "cap").ranks[0].kernels.df) == 2 + len(lines[3:5])


def _msprof_rows(ascend):
    src = next((ascend / "vllm_ascend_msprof/prof_unpack").rglob("op_summary_20260823165335.csv"))
    return src.read_text(encoding="utf-8").splitlines()


def _slices(tmp_path, lines, names_rows):
    out = tmp_path / "cap" / "PROF_1" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    for name, rows in names_rows.items():
        (out / name).write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")
    return tmp_path / "cap"


@pytest.mark.real
@pytest.mark.parametrize("names, says", [
    # slice 1 lost: the table was read from slices 0 and 2 and saved as a baseline
    (["op_summary_slice_0_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 1 missing (slices present: 0, 2)"),
    (["op_summary_slice_1_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 0 missing (slices present: 1, 2)"),
    (["op_summary_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 1 missing (slices present: op_summary_<ts>.csv as slice 0, 2)"),
])
def test_a_missing_op_summary_slice_is_refused(ascend, tmp_path, names, says):
    lines = _msprof_rows(ascend)
    cap = _slices(tmp_path, lines, {n: lines[1:3] for n in names})
    with pytest.raises(InvalidCaptureError, match=pytest.importorskip("re").escape(says)):
        load_capture(cap)
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and says in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_slices_of_one_pass_are_one_table_whatever_their_stamps(ascend, tmp_path):
    """msprof stamps each slice when it writes it: a 3M-row export's slices differ by seconds. Both
    naming generations (slice 0 named as a slice, or as op_summary_<ts>.csv) are one table."""
    lines = _msprof_rows(ascend)
    cap = _slices(tmp_path / "a", lines, {"op_summary_slice_0_20260823165335.csv": lines[1:2],
                                          "op_summary_slice_1_20260823165349.csv": lines[2:3],
                                          "op_summary_slice_2_20260823165402.csv": lines[3:4]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3
    cap = _slices(tmp_path / "b", lines, {"op_summary_20260823165335.csv": lines[1:3],
                                          "op_summary_slice_1_20260823165349.csv": lines[3:4]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3


@pytest.mark.real
@pytest.mark.parametrize("sizes, bad", [((2, 1, 2), "op_summary_slice_1_"), ((2, 2, 3), "op_summary_slice_2_")])
def test_slices_that_are_not_full_but_the_last_are_refused(ascend, tmp_path, sizes, bad):
    """msprof writes full slices (1,000,000 rows) and the remainder last: a short slice in the
    middle was cut, and a last slice larger than the others is not this export's."""
    lines = _msprof_rows(ascend)
    at, rows = 0, {}
    for k, n in enumerate(sizes):   # the file's 3 rows over and over (repeats across slices are allowed)
        rows[f"op_summary_slice_{k}_2026082316533{k}.csv"] = [lines[1 + (at + i) % 3] for i in range(n)]
        at += n
    with pytest.raises(InvalidCaptureError, match="slices of one export are full") as e:
        load_capture(_slices(tmp_path, lines, rows))
    assert bad in e.value.path


@pytest.mark.real
def test_a_zero_duration_slice_of_a_table_with_device_time_is_read(ascend, tmp_path):
    """The no-device-time refusal ran per slice: a last slice of one 0-duration row refused a
    table that has device time."""
    lines = _msprof_rows(ascend)
    rows = list(csv.reader(lines))
    di = rows[0].index("Task Duration(us)")
    last = list(rows[3])
    last[di] = "0.000"
    import io
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(last)
    cap = _slices(tmp_path, lines, {"op_summary_slice_0_20260823165335.csv": lines[1:3],
                                    "op_summary_slice_1_20260823165336.csv": [buf.getvalue()]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3
