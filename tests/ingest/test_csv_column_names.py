"""Arrow's CSV errors name a column by its 0-based number (``In CSV column #8``); perfgate's
messages name it by header name and 1-based number."""
import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.ingest.csvread import arrow_note, read_header
from perfgate.synth import SynthSpec, write_capture


@pytest.mark.parametrize("column", ["Start Time(us)", "Name"])
def test_non_utf8_cell_names_the_column_by_header_and_1_based_number(tmp_path, column):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=1))
    kd = next(cap.rglob("kernel_details.csv"))
    header = read_header(kd)
    i = header.index(column)
    lines = kd.read_bytes().split(b"\n")
    cells = lines[3].split(b",")
    cells[i] = b"\xff\xfe" + cells[i]
    lines[3] = b",".join(cells)
    kd.write_bytes(b"\n".join(lines))
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "--output", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 3, r.output
    assert f"[in column {column!r} (CSV column {i + 1}): CSV conversion error to string: invalid UTF8 data]" in r.output
    assert "#" not in r.output.split("[", 1)[1], r.output
    assert "kernel_details.csv row 3: not UTF-8 text" in r.output


def test_arrow_note_rewords_only_the_column(tmp_path):
    f = tmp_path / "k.csv"
    f.write_text("Step Id,Name,Duration(us)\n1,a,2\n")
    assert arrow_note(ValueError("In CSV column #2: Row #3: CSV conversion error to double: invalid value 'x'\nmore"),
                      f) == "in column 'Duration(us)' (CSV column 3): Row #3: CSV conversion error to double: invalid value 'x'"
    assert arrow_note(ValueError("CSV column #7 is odd"), f) == "CSV column 8 is odd"   # beyond the header: number only
    assert arrow_note(ValueError("CSV parse error: Expected 3 columns, got 2: 1,a"), f) == \
        "CSV parse error: Expected 3 columns, got 2: 1,a"
