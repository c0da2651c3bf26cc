"""A kernel_details.csv cut after a complete row (a truncated export: the last rows gone, the
file still ending with a whole line, so no malformed row is left for the reader to name) is
diagnosed from what the other files prove: steps that step_trace_time.csv / the trace list with
device activity but the kernel table lacks, or kernel figures that fall short in the step of the
table's last data row alone. The message says "truncated or altered", naming the files, the step
and the row, instead of only "the files are not from one capture or a row was altered". Before,
a table cut exactly at a step boundary passed every self-check (exit 0).

The real capture is read in place from ../shared/fixtures/ascend and copied to tmp_path to be
cut (tests/conftest.py skips with the reason when that folder is absent); the multi-step cases
use the project's synthetic writer."""
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.mutate import set_duration

OUT0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
KD0 = f"{OUT0}/kernel_details.csv"


def _cut_rows(path, drop: int) -> int:
    """Drop the last ``drop`` data rows, keeping complete lines; returns the last data row left."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-drop]))
    return len(lines) - drop - 1


def fingerprint(cap, tmp_path, *extra):
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "-o", str(tmp_path / "fp.json"), *extra], env={},
                           catch_exceptions=False)
    doc = json.loads((tmp_path / "fp.json").read_text()) if (tmp_path / "fp.json").exists() else None
    return r.exit_code, r.output, doc


def _failed(doc):
    return {(c["name"], c["step"]): c["message"] for c in doc["self_checks"] if c["status"] == "fail"}


@pytest.mark.parametrize("trace", ["always", "never"])
def test_real_level1_kernel_table_cut_at_a_row_boundary_is_named_truncated(copy_capture, tmp_path, trace):
    """Real level1 (one step, 50; rank 0's table has 191 data rows): the last 30 rows cut off. The
    trace shows 14 Computing / Communication events of step 50 starting after the last task left
    ends (a cut; a duration edited shorter moves no start): "truncated or altered", naming the row.
    step_trace_time.csv alone holds no times, so without the trace the words stay "altered"."""
    cap = copy_capture("level1")
    last = _cut_rows(cap / KD0, 30)
    assert last == 161
    code, out, doc = fingerprint(cap, tmp_path, "--trace", trace)
    assert code == 3, out
    failed = _failed(doc)
    if trace == "never":
        assert failed[("comm_equality", "50")].endswith(": the files are not from one capture or a row was altered")
        assert "truncated" not in out
        return
    why = (f"truncated or altered: {KD0} ends at data row 161 (its last) while {OUT0}/trace_view.json Overlap "
           f"Analysis shows 14 device event(s) of step 50 starting after its last task, up to 29893.138 us later")
    assert failed[("comm_equality", "50")].endswith(f"(difference -26902.358 us, tolerance 0.011 us): {why}")
    assert failed[("compute_union", "50")].endswith(why) and failed[("overlap_gap", "50")].endswith(why)
    assert "not from one capture" not in failed[("comm_equality", "50")]
    assert why in out


def test_real_level1_row_shortened_in_its_only_step_stays_altered(copy_capture, tmp_path):
    """The same step, nothing cut: the first hcom_allReduce row of the real level1 table shortened to
    1234.5 us (tests/app/test_real_captures.py's must-show 3c) falls short too, but no trace event starts
    after the table's last task: the words stay "not from one capture or a row was altered"."""
    cap = copy_capture("level1")
    rows = (cap / KD0).read_text().splitlines()
    set_duration(cap / OUT0, next(i for i, line in enumerate(rows) if "hcom_allReduce" in line), 1234.5)
    code, out, doc = fingerprint(cap, tmp_path)
    assert code == 3, out
    assert _failed(doc)[("comm_equality", "50")].endswith(": the files are not from one capture or a row was altered")
    assert "truncated" not in out


def test_synthetic_table_cut_inside_its_last_steps(tmp_path):
    """4 steps (10-13) of 71 rows on rank 0; the last 100 rows cut: step 13 gone, step 12 cut after
    its data row 184."""
    cap = write_capture(tmp_path / "cap", SynthSpec(steps=4))
    assert _cut_rows(cap / KD0, 100) == 184
    code, out, doc = fingerprint(cap, tmp_path, "--trace", "never")
    assert code == 3, out
    why = (f"truncated or altered: {KD0} stops at step 12 (data row 184, its last) while "
           f"{OUT0}/step_trace_time.csv lists steps up to 13")
    failed = _failed(doc)
    assert failed[("steps_present", "13")] == (
        f"step 13 is in {OUT0}/step_trace_time.csv (Computing 6553.687 us, Communication 3138.510 us) but {KD0} "
        f"has no row in it: {why}")
    assert failed[("comm_equality", "12")].endswith(f"tolerance 0.011 us): {why}")
    assert {s for _, s in failed} == {"12", "13"}


def test_table_cut_at_a_step_boundary_no_longer_passes(tmp_path):
    """The last 71 rows are exactly step 13: every remaining step agrees with the other files, which
    used to pass (exit 0, only a RANK_STEP_MISMATCH warning); the step the table lacks fails."""
    cap = write_capture(tmp_path / "cap", SynthSpec(steps=4))
    assert _cut_rows(cap / KD0, 71) == 213
    code, out, doc = fingerprint(cap, tmp_path)
    assert code == 3, out
    assert list(_failed(doc)) == [("steps_present", "13")]
    assert (f"but {KD0} has no row in it: truncated or altered: {KD0} stops at step 12 (data row 213, its last) "
            f"while {OUT0}/trace_view.json Overlap Analysis lists steps up to 13") in out


def test_a_row_altered_inside_the_table_keeps_the_altered_wording(tmp_path):
    """A communication row of step 10 (not the last step) shortened: nothing is missing at the end,
    so the message says what it said before (not from one capture or a row was altered)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(steps=4))
    set_duration(cap / OUT0, 36, 1.0)   # data row 36: step 10's first hcom_allReduce_ row
    code, out, doc = fingerprint(cap, tmp_path, "--trace", "never")
    assert code == 3, out
    failed = _failed(doc)
    assert list(failed) == [("comm_equality", "10"), ("overlap_gap", "10"), ("comm_ops_vs_kernels", "10")]
    assert failed[("comm_equality", "10")].endswith(": the files are not from one capture or a row was altered")
    assert "Σ Elapse of 2 op(s) in" in failed[("comm_ops_vs_kernels", "10")]
    assert "truncated" not in out
