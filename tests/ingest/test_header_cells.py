"""Header cells as a hand edit leaves them: a cell with spaces
around its name (``" Name"``, ``"Duration(us) "``, ``" Computing"``) names the same column, so
the capture gives the same fingerprint as the file as exported (before: exit 70, Arrow's
"Column 'Name' in include_columns does not exist"); a header naming one column twice is
refused with exit 3 naming both positions (which one perfgate would read is a guess). Real
captures from ../shared/fixtures/ascend, mutated in a temp copy."""
import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.history.store import metrics_digest
from perfgate.app.run import fingerprint_path

OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _edit_header(path, old, new):
    head, _, rest = path.read_bytes().partition(b"\n")
    assert old.encode() in head
    path.write_bytes(head.replace(old.encode(), new.encode(), 1) + b"\n" + rest)


@pytest.mark.parametrize("file, old, new", [
    ("kernel_details.csv", ",Name,", ", Name,"),
    ("kernel_details.csv", ",Duration(us),", ",Duration(us) ,"),
    ("kernel_details.csv", ",Accelerator Core,", ",\tAccelerator Core ,"),
    ("step_trace_time.csv", ",Computing,", ", Computing,"),
])
def test_a_header_cell_with_spaces_names_the_same_column(copy_capture, policy, file, old, new):
    ref = fingerprint_path(copy_capture("level1", "ref"), policy, workers=1)
    cap = copy_capture("level1", "edited")
    _edit_header(cap / OUT / file, old, new)
    fp = fingerprint_path(cap, policy, workers=1)
    assert metrics_digest(fp) == metrics_digest(ref)


def test_a_header_naming_a_column_twice_is_refused(copy_capture, tmp_path):
    cap = copy_capture("level1")
    _edit_header(cap / OUT / "kernel_details.csv", ",OP State,", ",Duration(us),")
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "-o", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 3, r.output
    assert "kernel_details.csv row 0: header names column 'Duration(us)' twice (CSV columns 7 and 10)" in r.output
