"""A failed self-check names the files of its rank by their rank-relative path
(``rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv``), not by the bare name every rank's
file has. Passing, warning and skipped texts and the evidence field keep the bare names: they
feed the golden fingerprint digests (tests/metrics/test_fingerprint_stable.py), whose captures fail no
check, so those digests are unchanged. Synthetic captures from the project's writer."""
import csv
import io
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.ingest import load_capture
from perfgate.metrics.selfcheck import run_self_checks
from perfgate.synth import SynthSpec, write_capture

OUT1 = "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _edit(path, row: int, column: str, fn):
    text = path.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    j = rows[0].index(column)
    rows[row][j] = fn(rows[row][j])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


@pytest.fixture
def broken_rank1(tmp_path):
    """Rank 1: one communication row 100 us longer (comm_equality fails in its step) and
    step_trace_time.csv data row 2 with Overlapped off by 50 us (step_trace_identities fails)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    kd = cap / OUT1 / "kernel_details.csv"
    rows = list(csv.reader(io.StringIO(kd.read_text(encoding="utf-8"), newline="")))
    comm = next(i for i, r in enumerate(rows) if i and r[rows[0].index("Name")].startswith("hcom_"))
    _edit(kd, comm, "Duration(us)", lambda s: f"{float(s) + 100:.3f}")
    _edit(cap / OUT1 / "step_trace_time.csv", 2, "Overlapped", lambda s: f"{float(s) + 50:.3f}")
    return cap


def test_failed_checks_name_the_rank_relative_path(broken_rank1, policy):
    checks = [c for r in load_capture(broken_rank1, with_trace=True).ranks for c in run_self_checks(r, policy)]
    failed = {c.name: c for c in checks if c.status == "fail"}
    assert failed["comm_equality"].rank == 1
    assert f"communication row(s) in {OUT1}/kernel_details.csv is" in failed["comm_equality"].message
    assert failed["step_trace_identities"].message.startswith(f"{OUT1}/step_trace_time.csv row 2: Overlapped")
    assert f"but {OUT1}/trace_view.json Overlap Analysis Communication is" in failed["comm_equality"].message
    assert f"; {OUT1}/trace_view.json Overlap Analysis Overlapped" in failed["overlap_gap"].message
    # what passes keeps its words (and the golden digests): bare names
    ok = [c for c in checks if c.status != "fail"]
    assert ok and not any("_ascend_pt/" in c.message or "_ascend_pt/" in c.evidence for c in ok)
    assert all("_ascend_pt/" not in c.evidence for c in failed.values())


def test_fingerprint_and_check_reports_show_the_path(broken_rank1, tmp_path):
    r = CliRunner().invoke(main, ["fingerprint", str(broken_rank1), "-o", str(tmp_path / "fp.json")], env={},
                           catch_exceptions=False)
    assert r.exit_code == 3 and f"on rank 1 step 10: Σ Duration of 2 communication row(s) in {OUT1}/kernel_details.csv" \
        in r.output, r.output
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(broken_rank1), "--baseline-dir",
                                  str(tmp_path / "bl"), "--out", str(tmp_path / "o")], env={}, catch_exceptions=False)
    assert r.exit_code == 3, r.output
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    msgs = [c["message"] for c in doc["self_checks"] if c["status"] == "fail"]
    assert any(f"{OUT1}/kernel_details.csv" in m for m in msgs) and any(f"{OUT1}/step_trace_time.csv row 2" in m
                                                                        for m in msgs)
    assert f"{OUT1}/kernel_details.csv" in (tmp_path / "o" / "perfgate-junit.xml").read_text()
