"""A negative Duration(us) is refused (exit 3) quoting the cell as it is written in the file
(``' -5'``, repr-escaped, at most 60 characters shown), not the value perfgate parsed from it
(``-5.000``), with the file, the data row, the CSV row, the column, the hint and the count of the
other negative rows. Synthetic captures from the project's writer."""
import csv
import io

import pytest
from click.testing import CliRunner

import reference_kernels
from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.csvread import CELL_SHOWN, raw_cell
from perfgate.ingest.kernels import read_kernels
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.mutate import to_op_summary

KD = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"


@pytest.fixture
def capture(tmp_path):
    return write_capture(tmp_path / "cap", SynthSpec(seed=3))


def _set_cells(path, column, cells: dict) -> None:
    """Write the given data rows' ``column`` cell as raw text (``cells``: data row -> the bytes
    between the commas, quotes included), every other byte of the file unchanged."""
    lines = path.read_bytes().split(b"\n")
    head = next(csv.reader([lines[0].decode("utf-8-sig")]))
    j = head.index(column)
    for row, text in cells.items():
        fields = next(csv.reader([lines[row].decode()]))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow(fields[:j] + ["@CELL@"] + fields[j + 1:])
        lines[row] = buf.getvalue().replace("@CELL@", text).encode()
    path.write_bytes(b"\n".join(lines))


def _refusal(fn, path):
    with pytest.raises(InvalidCaptureError) as e:
        fn(path)
    return str(e.value), e.value


def test_negative_duration_quotes_the_raw_cell_with_row_column_hint_and_count(capture):
    kd = capture / KD
    _set_cells(kd, "Duration(us)", {4: '" -5"', 9: "-1"})
    msg, err = _refusal(read_kernels, kd)
    assert "kernel_details.csv row 4: Duration(us) is negative" in msg, msg
    assert "' -5' (CSV row 5 counting the header as row 1)" in msg, msg
    assert "-5.000" not in msg, msg
    assert err.row == 4 and err.hint.startswith("1 more row(s) are negative too") and "re-export" in err.hint
    assert raw_cell(kd, 4, "Duration(us)") == " -5" and raw_cell(kd, 9, "Duration(us)") == "-1"
    # the reference oracle shares the refusal: the same words
    assert _refusal(reference_kernels.read_kernels, kd)[0] == msg


def test_excel_tab_guard_and_a_long_cell_are_shown_escaped_and_bounded(capture):
    kd = capture / KD
    _set_cells(kd, "Duration(us)", {2: "\t-5.5"})
    msg, err = _refusal(read_kernels, kd)
    assert "row 2: Duration(us) is negative" in msg and r"'\t-5.5'" in msg and "\t" not in msg, msg
    assert not err.hint.startswith("1 more")  # only one negative row: no count
    long = "-5." + "0" * 200                    # exactly -5 us, 203 characters as written
    _set_cells(kd, "Duration(us)", {2: long})
    msg, _ = _refusal(read_kernels, kd)
    shown = repr(long[:CELL_SHOWN])
    assert f"{shown}… ({len(long) - CELL_SHOWN} more characters) (CSV row 3" in msg, msg
    assert long not in msg


def test_raw_msprof_task_duration_and_cli_exit_3_quote_the_cell(capture, tmp_path):
    ops = to_op_summary(capture / KD, tmp_path / "op_summary_1.csv")
    _set_cells(ops, "Task Duration(us)", {3: " -8.060"})
    msg, _ = _refusal(read_kernels, ops)
    assert "op_summary_1.csv row 3: Task Duration(us) is negative" in msg and "' -8.060'" in msg, msg
    _set_cells(capture / KD, "Duration(us)", {7: '"-0.5 "'})
    r = CliRunner().invoke(main, ["fingerprint", str(capture), "--trace", "never"], env={},
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "kernel_details.csv row 7: Duration(us) is negative" in r.output and "'-0.5 '" in r.output, r.output
