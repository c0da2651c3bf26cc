"""An optional file of a rank (step_trace_time.csv, communication.json, trace_view.json,
analysis.db) whose name holds a folder, a FIFO or a symbolic link to nothing is an invalid
capture (exit 3) naming the path and what is there, not "not present" (where
the run passed with a note, without the file's checks). Absent files keep their
meaning. Real captures from ../shared/fixtures/ascend, mutated in a temp copy."""
import os

import pytest
from click.testing import CliRunner

from perfgate.cli import main

OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


@pytest.mark.parametrize("name, kind, said", [
    ("communication.json", "folder", "communication.json is a folder"),
    ("step_trace_time.csv", "fifo", "step_trace_time.csv is not a regular file (a FIFO, socket or device)"),
    ("trace_view.json", "dangling", "trace_view.json is a symbolic link to nothing"),
])
def test_an_optional_file_that_is_not_a_file_is_an_invalid_capture(copy_capture, tmp_path, name, kind, said):
    cap = copy_capture("level1")
    p = cap / OUT / name
    p.unlink()
    {"folder": lambda: p.mkdir(), "fifo": lambda: os.mkfifo(p), "dangling": lambda: p.symlink_to(tmp_path / "gone")}[kind]()
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "-o", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 3, r.output
    assert f"{OUT}/{name}: {said}" in r.output, r.output


def test_a_link_to_a_real_file_is_read_and_an_absent_file_is_absent(copy_capture, tmp_path):
    cap = copy_capture("level1")
    p = cap / OUT / "communication.json"
    moved = tmp_path / "elsewhere.json"
    p.rename(moved)
    p.symlink_to(moved)
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "-o", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 0, r.output
    assert __import__("json").loads((tmp_path / "fp.json").read_text())["config"]["has_comm_json"] is True
    p.unlink()
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "-o", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 0, r.output
    import json
    assert json.loads((tmp_path / "fp.json").read_text())["config"]["has_comm_json"] is False
