"""A control character (NUL, ESC, ...) inside a kernel table's text cell (Name, Type, Accelerator
Core, Stream ID) is a damaged file: exit 3 naming file, row, column and the cell, never a
"new kernel family" regression whose name the JUnit XML must drop (a fresh-user report: a NUL
in row 9's Name gave exit 1 and a JUnit failure naming a family the baseline has)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import read_kernels


def _poison(cap, column: str, row: int, char: str):
    """Insert ``char`` into the middle of the cell of ``column`` in data row ``row`` of rank 0."""
    import csv
    f = next(cap.rglob("rank0*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    rows = list(csv.reader(f.open(newline="", encoding="utf-8")))
    j = rows[0].index(column)
    cell = rows[row][j]
    rows[row][j] = cell[:2] + char + cell[2:]
    with f.open("w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(rows)
    return f, rows[row][j]


@pytest.mark.parametrize("column,char", [("Name", "\x00"), ("Name", "\x1b"), ("Type", "\x07"),
                                         ("Accelerator Core", "\x00"), ("Stream ID", "\x7f")])
def test_a_control_character_in_a_text_cell_is_an_invalid_capture(copy_capture, column, char):
    cap = copy_capture("level2")
    f, cell = _poison(cap, column, 9, char)
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(f, pmu=True)
    msg = str(e.value)
    assert e.value.row == 9 and column in msg and repr(cell) in msg and "control character" in msg


def test_check_exits_3_and_names_the_cell(copy_capture, tmp_path):
    base, cand = copy_capture("level1"), copy_capture("level2")
    _poison(cand, "Name", 9, "\x00")
    r = CliRunner()
    assert r.invoke(main, ["baseline", "save", "--name", "main", "--baseline-dir", str(tmp_path / "b"),
                           str(base)]).exit_code == 0
    res = r.invoke(main, ["check", "--baseline", "main", "--baseline-dir", str(tmp_path / "b"),
                          "--out", str(tmp_path / "out"), str(cand)])
    assert res.exit_code == 3, res.output
    assert "row 9: Name holds a control character" in res.output and "\\x00" in res.output
    assert "\x00" not in (tmp_path / "out" / "perfgate-report.md").read_text()


def test_tabs_and_ordinary_text_pass(copy_capture):
    cap = copy_capture("level2")
    f, _ = _poison(cap, "Name", 9, "\t")   # TAB, LF, CR are not refused (text a CSV can hold)
    read_kernels(f, pmu=True)
