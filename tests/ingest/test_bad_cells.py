"""Cells no profiler writes are an invalid capture (exit 3) naming file, row and column, quoted
readably: line endings, step ids, stream ids, durations (full-width digits, underscores, no device
time), huge or negative times, surrogates, numbers too long for Python, a damaged collection window,
and timeline events nested deeper than the parser's limit."""
from __future__ import annotations

import csv
import json
import shutil

import pytest

from _cli import fingerprint_without_trace, run
from _edits import replace_once


def test_bare_cr_line_endings_are_refused_not_a_crash(copy_capture, tmp_path):
    """kernel_details.csv with every LF turned into a bare CR: Python's csv module raised
    ("new-line character seen in unquoted field"), exit 70 "a bug in perfgate". Now exit 3 naming
    the file and the line endings."""
    cap = copy_capture("level1", "cr")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kd.write_bytes(kd.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    r = run("fingerprint", "--trace", "never", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "kernel_details.csv row 0: lines end in a bare carriage return" in r.output


def test_a_step_trace_step_that_is_no_integer_is_a_bad_cell(copy_capture, tmp_path):
    """step_trace_time.csv Step '50.0' (what a pandas float round trip writes): with the timeline
    read it was "files not from one capture", and with --trace never PASS with six step metrics
    gone; kernel_details.csv's '50.0' is exit 3 naming the cell. Now step_trace_time.csv's is too."""
    cap = copy_capture("level1", "s")
    st = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    lines = st.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("50,", "50.0,", 1)
    st.write_text("".join(lines))
    for trace in ("never", "always"):
        r = run("fingerprint", cap, "--trace", trace, "-o", tmp_path / f"fp_{trace}.json")
        assert r.exit_code == 3, r.output
        assert "step_trace_time.csv row 1: Step is not an integer step id" in r.output and "'50.0'" in r.output


def test_an_error_quoting_a_damaged_line_writes_no_control_bytes(copy_capture, tmp_path):
    """A kernel_details.csv with a NUL-filled tail, or a row holding terminal escapes: exit 3, and
    the error's excerpt of the bad line (from the CSV parser) put 96 NUL bytes on the console and
    the Markdown report (the PR comment body), and 3 ESC bytes in the Markdown. Now every error
    text writes a control character as its escape (a run once, with its length)."""
    base = copy_capture("level1", "base")
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "m", "--baseline-dir", bl, base).exit_code == 0
    nul = copy_capture("level1", "nul")
    with open(nul / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "ab") as f:
        f.write(b"\0" * 4096)
    esc = copy_capture("level1", "esc")
    with open(esc / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "ab") as f:
        f.write(b"50,\x1b[2J\x1b[31mPWNED\x1b[0m,x\r\n")
    for cap in (nul, esc):
        out = tmp_path / f"o_{cap.name}"
        r = run("check", "--baseline", "m", "--baseline-dir", bl, cap, "--out", out)
        assert r.exit_code == 3, r.output
        for text in (r.output.encode(), (out / "perfgate-report.md").read_bytes(),
                     (out / "perfgate-junit.xml").read_bytes(), (out / "perfgate-result.json").read_bytes()):
            assert b"\0" not in text and b"\x1b" not in text
    assert "\\x1b" in (tmp_path / "o_esc" / "perfgate-report.md").read_text()


def test_printable_escapes_controls_and_keeps_text():
    from perfgate.errors import printable
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("x" + "\0" * 96 + "y") == "x\\x00×96y"
    assert printable("tab\tand\nnewline, ü, 中") == "tab\tand\nnewline, ü, 中"
    assert printable("\x9b31m") == "\\x9b31m" and printable(None) is None and printable(3) == 3


@pytest.mark.parametrize("cell", ["abc", "1e300", "-3", "2.5"])
def test_a_stream_id_that_is_not_a_stream_number_is_a_bad_cell(copy_capture, tmp_path, cell):
    """One kernel_details.csv row's ``Stream ID`` set to ``abc`` (or ``1e300``) was read as a stream
    of its own: the layer count on the compute stream changed and the check failed as a
    REGRESSION ("model structure forward layers 2 -> 0"). Every real export writes integers or
    N/A there: exit 3 naming file, row, column and the cell."""
    import csv
    cap = copy_capture("level1")
    p = sorted(cap.rglob("kernel_details.csv"))[0]
    rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
    i = rows[0].index("Stream ID")
    j = next(n for n, r in enumerate(rows[1:], start=1) if r[i].strip().isdigit())
    rows[j][i] = cell
    with open(p, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert f"row {j}: Stream ID is not a stream number" in r.output and repr(cell) in r.output


def test_a_huge_negative_step_trace_time_is_called_negative(copy_capture, tmp_path):
    """step_trace_time.csv ``Preparing`` -1e10 was refused as "-10,000,000,000.000 us is longer than
    the whole collection window": it is refused still (exit 3), saying it is negative."""
    import csv
    cap = copy_capture("level1")
    p = sorted(cap.rglob("step_trace_time.csv"))[0]
    rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
    rows[1][rows[0].index("Preparing")] = "-10000000000"
    with open(p, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "Preparing -10,000,000,000.000 us is negative" in r.output and "is longer than" not in r.output


OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def test_a_number_too_long_for_python_in_profiler_info_names_its_byte(copy_capture, tmp_path):
    cap = copy_capture("level1")
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    info.write_text('{"zz": 1' + "0" * 5000 + ", " + info.read_text().lstrip()[1:])
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json byte 7: invalid JSON: a number has more digits than Python reads" in r.output


def test_a_deeply_nested_field_of_a_timeline_event_is_read_past(copy_capture, tmp_path):
    """A kept Overlap Analysis event whose args hold a list nested 980 deep: the fast scan's
    per-event parse raised RecursionError (exit 70); the event is now read by the exact reader,
    and the metrics are those of the untouched capture."""
    cap = copy_capture("level1")
    base = copy_capture("level1", "untouched")
    trace = cap / OUT / "trace_view.json"
    text = trace.read_text()
    at = text.index("{", text.index('"args"', text.index('"name": "Computing"')))
    trace.write_text(text[:at + 1] + '"deep": ' + "[" * 980 + "]" * 980 + ", " + text[at + 1:])
    assert run("fingerprint", cap, "-o", tmp_path / "a.json").exit_code == 0
    assert run("fingerprint", base, "-o", tmp_path / "b.json").exit_code == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["metrics"] == b["metrics"]


@pytest.mark.parametrize("table, says", [
    ("step_trace_time.csv", "Step is not an integer step id"),
    ("kernel_details.csv", "Step Id is not an integer"),
])
def test_unicode_digits_are_not_a_step_id(copy_capture, tmp_path, table, says):
    cap = copy_capture("level1")
    path = cap / OUT / table
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[1].split(",")
    assert cells[0].strip('"') == "50"
    cells[0] = "\u0665\u0660"
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert table in r.output and says in r.output and "\u0665\u0660" in r.output, r.output


@pytest.mark.parametrize("field, value, says", [
    ("collectionTimeEnd", '"{v}"', 'end_info.collectionTimeEnd is "'),
    ("collectionTimeEnd", "1e400", "end_info.collectionTimeEnd is Infinity"),
    ("collectionTimeEnd", "true", "end_info.collectionTimeEnd is true"),
    ("MonotonicTimeEnd", '"x"', 'end_info.MonotonicTimeEnd is "x"'),
    ("MonotonicTimeEnd", "1", "end_info.MonotonicTimeEnd (1) is not after start_info.start_monotonic"),
])
def test_a_damaged_collection_window_is_exit_3_not_a_silent_skip(copy_capture, tmp_path, field, value, says):
    """A collectionTimeEnd written as a string switched the collection-window check off without a
    word, and a foreign communication.json then passed (exit 0). A window field that is present
    but not a non-negative integer (or a monotonic end before its start) is now exit 3 naming it;
    an absent field still means "no recorded window"."""
    cap = copy_capture("level1")
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    doc = json.loads(info.read_text())
    old = doc["end_info"][field]
    text = info.read_text()
    replace_once(info, f'"{field}": {old}', f'"{field}": ' + value.format(v=old))
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json" in r.output and says in r.output, r.output
    info.write_text(text)
    del doc["end_info"][field]
    info.write_text(json.dumps(doc))
    assert fingerprint_without_trace(cap, tmp_path).exit_code == 0


@pytest.mark.parametrize("old, new, says", [
    ("hcom_allReduce__586_0_1@", "hcom_allReduce\\ud800_0_1@",
     "step50.collective.hcom_allReduce\\ud800_0_1@17522688603477080586: a name holds an escaped lone surrogate"),
    ("@17522688603477080586", "@1752268860347708\\ud8000586",
     "step50.collective.hcom_allReduce__586_0_1@1752268860347708\\ud8000586: a name holds"),
])
def test_a_lone_surrogate_is_named_where_it_is(copy_capture, tmp_path, old, new, says):
    """The message read "50.collective.hcom_allReduce\\ud800_0_1": "50" for step50 and without the
    @group, and a surrogate in the group named an op with nothing wrong in it."""
    cap = copy_capture("level1")
    replace_once(cap / OUT / "communication.json", old, new)
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3 and says in r.output, r.output


@pytest.mark.parametrize("value, says", [
    ("1e308", "Elapse Time(ms) beyond 1.8e305 ms (its us value overflows a float) is longer than the whole"),
    ("1e300", "Elapse Time(ms) 1e+300 ms is longer than the whole collection window"),
])
def test_a_huge_time_is_quoted_readably(copy_capture, tmp_path, value, says):
    """1e308 ms was quoted "inf ms" after a numpy overflow warning on stderr; 1e300 as a
    300-digit number with thousands separators."""
    cap = copy_capture("level1")
    path = cap / OUT / "communication.json"
    text = path.read_text()
    at = text.index('"Elapse Time(ms)": ') + len('"Elapse Time(ms)": ')
    path.write_text(text[:at] + value + text[text.index(",", at):])
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3 and says in r.output, r.output
    assert "RuntimeWarning" not in r.output


@pytest.mark.real
def test_a_kernel_table_with_no_device_time_is_refused(ascend, tmp_path):
    """Every Task Duration 0.000: saved as a baseline, and checks against it read shares as
    0 / 0 = 0 % ("MatMul 67.80 % -> 0.00 % regression" beside a -100 % ΣDuration "regression")."""
    cap = tmp_path / "zero"
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization", cap)
    p = next(cap.rglob("op_summary_*.csv"))
    rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
    i = rows[0].index("Task Duration(us)")
    for r in rows[1:]:
        r[i] = "0.000"
    with p.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "z", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "every one of its 3 row(s) has Task Duration(us) 0: no device time" in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_full_width_digits_in_a_duration_are_refused(copy_capture, tmp_path):
    """A Duration(us) cell "５３.７４１" was read as 53.741 (Decimal takes any Unicode digit), while
    Step Id and communication.json refuse non-ASCII digits."""
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    text = p.read_text(encoding="utf-8")
    assert "\t,53.741," in text
    p.write_text(text.replace("\t,53.741,", "\t,５３.７４１,", 1), encoding="utf-8")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and "is not a finite number (non-ASCII characters)" in r.output, r.output


@pytest.mark.real
def test_underscores_in_a_duration_are_refused(copy_capture, tmp_path):
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    p.write_text(p.read_text(encoding="utf-8").replace("\t,53.741,", "\t,5_3.741,", 1), encoding="utf-8")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and "is not a finite number (a '_' in it)" in r.output, r.output
