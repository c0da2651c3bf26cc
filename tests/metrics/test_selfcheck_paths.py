"""A failing self-check is located relative to the capture given on the command line, as every
ingest error and every evidence string is: no absolute path in the console, the JUnit or the
Markdown verdict (the Markdown's provenance section keeps the resolved source: it is provenance).
Synthetic capture from the project's writer, one communication row's Duration altered with
perfgate.synth.mutate so that comm_equality fails."""
import csv
import json

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.mutate import set_duration

OUT0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


def _break_comm_equality(cap):
    """Lengthen rank 0's first communication row by 500 us in kernel_details.csv only."""
    with open(cap / OUT0 / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    h = rows[0]
    i = next(i for i, r in enumerate(rows[1:], 1) if r[h.index("Name")].startswith("hcom_"))
    set_duration(cap / OUT0, i, float(rows[i][h.index("Duration(us)")]) + 500.0)


def test_failing_self_check_prints_no_absolute_path(tmp_path, monkeypatch):
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=1))
    _break_comm_equality(cap)
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path)
    code, out = run("check", "--baseline", "main", "cap", "--baseline-dir", "bl", "--out", "o")
    assert code == 3 and "INVALID_CAPTURE" in out
    assert "cap: self-check comm_equality failed on rank 0 step 10: Σ Duration of" in out, out
    assert absolute not in out
    junit = (tmp_path / "o" / "perfgate-junit.xml").read_text()
    assert "self-check comm_equality failed on rank 0" in junit and absolute not in junit
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    assert "File: `cap`" in md and "comm_equality" in md
    assert [ln for ln in md.splitlines() if absolute in ln] == [
        ln for ln in md.splitlines() if ln.startswith("- candidate: source `") and absolute in ln]
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert doc["error"]["path"] == "cap" and doc["candidate_provenance"]["source"] == str(cap.resolve())
    assert any(c["status"] == "fail" and c["name"] == "comm_equality" for c in doc["self_checks"])
    # the commands that save read the same location; nothing saved
    code, out = run("baseline", "save", "--name", "main", "cap", "--baseline-dir", "bl")
    assert code == 3 and "cap: self-check comm_equality failed" in out and absolute not in out
    assert not (tmp_path / "bl").exists()
    code, out = run("history", "record", "cap", "--branch", "main", "--db", "h.sqlite")
    assert code == 3 and "cap: self-check comm_equality failed" in out and absolute not in out


def test_an_absolute_capture_path_stays_as_given(tmp_path):
    """Given absolutely, the capture is named absolutely (as given, not re-resolved)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=1))
    _break_comm_equality(cap)
    code, out = run("check", "--baseline", "main", cap, "--baseline-dir", tmp_path / "bl", "--out", tmp_path / "o")
    assert code == 3 and f"{cap}: self-check comm_equality failed" in out
