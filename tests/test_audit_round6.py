"""Defects found by the sixth audit round (2026-12-06, twelfth session): helpers breaking the
installed command with damaged captures and stores; each test holds the behaviour wanted."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main

OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"GITHUB_EVENT_NAME": "push"})


def _edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _fingerprint(cap, tmp_path, *extra):
    return _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never", *extra)


@pytest.mark.parametrize("old, new, says", [
    # "Communication Bandwidth Info" of another type: a non-empty list crashed (exit 70), 0 / false / ""
    # read as "no links"; a link that is not an object was dropped without a word
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": [1], "x": {',
     "Communication Bandwidth Info is [1], not an object"),
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": false, "x": {',
     "Communication Bandwidth Info is false, not an object"),
    ('"RDMA": {', '"RDMA": "x", "y": {', 'Communication Bandwidth Info.RDMA is "x", not an object'),
    ('"RDMA": {', '"RDMA": null, "y": {', "Communication Bandwidth Info.RDMA is null, not an object"),
    # an integer beyond a float crashed in the reference reader (OverflowError, exit 70)
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 400 + ', "z": ',
     "Elapse Time(ms) is 100000... (401 digits), not a finite non-negative number"),
    # an integer of more digits than Python converts (ValueError, exit 70): invalid JSON at its byte
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 5000 + ', "z": ',
     "a number has more digits than Python reads"),
    # nested ~1,000 deep in a field never read: msgspec's RecursionError crashed (exit 70)
    ('"Wait Time Ratio": ', '"Wait Time Ratio": ' + "[" * 980 + "]" * 980 + ', "zz": ', "nesting too deep"),
    # \\d took Unicode digits: "step٥٠" was read as step 50
    ('"step50"', '"step\u0665\u0660"', "unexpected top-level key 'step\u0665\u0660'"),
])
def test_damaged_communication_json_is_exit_3_naming_what(copy_capture, tmp_path, old, new, says):
    cap = copy_capture("level1")
    _edit(cap / OUT / "communication.json", old, new)
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "communication.json" in r.output and says in r.output, r.output
    assert not (tmp_path / "fp.json").exists()


def test_a_number_too_long_for_python_in_profiler_info_names_its_byte(copy_capture, tmp_path):
    cap = copy_capture("level1")
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    info.write_text('{"zz": 1' + "0" * 5000 + ", " + info.read_text().lstrip()[1:])
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json byte 7: invalid JSON: a number has more digits than Python reads" in r.output


def test_a_number_too_long_for_python_in_a_stored_baseline_is_a_damaged_store(text_captures, tmp_path):
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, text_captures / "level1").exit_code == 0
    doc = bl / "b.json"
    text = doc.read_text()
    doc.write_text("{" + '"zz": 1' + "0" * 5000 + "," + text[text.index("{") + 1:])
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "out", text_captures / "level1")
    assert r.exit_code == 5, r.output
    r = _run("baseline", "list", "--baseline-dir", bl)
    assert r.exit_code == 5 and "more digits than Python reads" in r.output, r.output


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
    assert _run("fingerprint", cap, "-o", tmp_path / "a.json").exit_code == 0
    assert _run("fingerprint", base, "-o", tmp_path / "b.json").exit_code == 0
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
    r = _fingerprint(cap, tmp_path)
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
    _edit(info, f'"{field}": {old}', f'"{field}": ' + value.format(v=old))
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json" in r.output and says in r.output, r.output
    info.write_text(text)
    del doc["end_info"][field]
    info.write_text(json.dumps(doc))
    assert _fingerprint(cap, tmp_path).exit_code == 0
