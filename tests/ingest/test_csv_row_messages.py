"""A kernel table row with another field count than its header (the file cut mid-row, an
unquoted comma) is named as a bad numeric cell is: the file, the 1-based data row and the CSV
row counting the header as row 1. Synthetic captures from the project's writer."""
import csv
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import kernels as kmod
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.mutate import to_op_summary

KD = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture
def capture(tmp_path):
    return write_capture(tmp_path / "cap", SynthSpec(seed=1))


def _lines(path):
    return path.read_bytes().splitlines(keepends=True)


def _cut_last_row(path) -> tuple[int, int]:
    """Cut the file in the middle of its last data row: ``(data row, its field count left)``."""
    lines = _lines(path)
    last = lines[-1].rstrip(b"\r\n")
    cut = last[: len(last) // 3]
    path.write_bytes(b"".join(lines[:-1]) + cut)
    return len(lines) - 1, len(next(csv.reader([cut.decode()])))


def test_check_on_a_kernel_file_cut_mid_row_names_data_row_and_csv_row(tmp_path, capture):
    kd = capture / KD
    ncols = len(next(csv.reader([_lines(kd)[0].decode("utf-8-sig")])))
    row, found = _cut_last_row(kd)
    assert 1 < found < ncols
    code, out = run("check", "--baseline", "main", capture, "--baseline-dir", tmp_path / "bl", "--out", tmp_path / "o")
    assert code == 3 and "INVALID_CAPTURE" in out, out
    want = (f"kernel_details.csv row {row}: expected {ncols} fields, found {found}: a truncated row (fewer fields "
            f"than the header) (CSV row {row + 1} counting the header as row 1)")
    assert want in out and "hint: the file ends or breaks inside a row" in out, out
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    err = doc["error"]
    assert err["path"].endswith(KD) and err["row"] == row and f"(CSV row {row + 1} counting the header" in err["message"]
    assert "re-export" in err["hint"]
    # the same words from every command that reads the capture; nothing is saved
    code, out = run("baseline", "save", "--name", "main", capture, "--baseline-dir", tmp_path / "bl")
    assert code == 3 and want in out and not (tmp_path / "bl").exists()


def test_truncated_row_inside_the_file_and_a_row_with_extra_fields(tmp_path, capture):
    kd = capture / KD
    good = _lines(kd)
    ncols = len(next(csv.reader([good[0].decode("utf-8-sig")])))
    lines = list(good)
    lines[5] = lines[5].rstrip(b"\r\n")[:40] + b"\r\n"  # data row 5 cut short, more rows follow
    kd.write_bytes(b"".join(lines))
    with pytest.raises(InvalidCaptureError) as e:
        kmod.read_kernels(kd)
    found = len(next(csv.reader([lines[5].decode().rstrip()])))
    assert e.value.row == 5 and e.value.exit_code == 3
    assert (f"expected {ncols} fields, found {found}: a truncated row (fewer fields than the header) "
            f"(CSV row 6 counting the header as row 1)") in e.value.message
    lines = list(good)
    lines[7] = lines[7].rstrip(b"\r\n") + b",x,y\r\n"   # data row 7: two fields too many
    kd.write_bytes(b"".join(lines))
    with pytest.raises(InvalidCaptureError) as e:
        kmod.read_kernels(kd)
    assert e.value.row == 7 and e.value.hint is None
    assert (f"expected {ncols} fields, found {ncols + 2}: a malformed row (more fields than the header; "
            f"an unquoted comma in a value?) (CSV row 8 counting the header as row 1)") in e.value.message


def test_op_summary_cut_mid_row_same_words(tmp_path, capture):
    """msprof's op_summary_*.csv goes through the same reader and gets the same message."""
    with open(capture / KD, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    ops = to_op_summary(capture / KD, tmp_path / "op_summary_20260101000000.csv")  # msprof: no Step Id column
    assert len(kmod.read_kernels(ops).df) == len(rows) - 1
    row, found = _cut_last_row(ops)
    with pytest.raises(InvalidCaptureError) as e:
        kmod.read_kernels(ops)
    assert e.value.row == row == len(rows) - 1
    assert (f"op_summary_20260101000000.csv row {row}: expected {len(rows[0]) - 1} fields, found {found}: a truncated "
            f"row (fewer fields than the header) (CSV row {row + 1} counting the header as row 1)") in str(e.value)
