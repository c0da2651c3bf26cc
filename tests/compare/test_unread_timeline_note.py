"""Device tasks the profiler lost are seen only in trace_view.json's host launches (flows without
an end): the kernel table, op_statistic.csv and step_trace_time.csv agree with each other when
tasks are lost. The candidate is the shared scenarios tool's ``lose_tasks`` (20 tasks lost in the
middle of the step) on the real level1 rank 0: read with its timeline, check refuses it (exit 3);
without, check cannot tell a lost task from a call not made and says so at the top of its report."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SHARED, _need
from _cli import run

pytestmark = pytest.mark.real

TOOL = SHARED / "tools" / "scenarios" / "scenarios.py"
NOTE = "lost device tasks not checked on the candidate: trace_view.json was not read"


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """(baseline folder, candidate folder, baseline store): the unchanged rank saved as 'b'."""
    rank0 = _need(SHARED / "fixtures/ascend/msinsight/test/data/pytorch/text/level1/rank0_ascend_pt")
    _need(TOOL)
    tmp = tmp_path_factory.mktemp("lost")
    for name, scenario in (("base", "identity"), ("cand", "lose_tasks")):
        subprocess.run([sys.executable, str(TOOL), "make", str(rank0), str(tmp / name), "--scenario", scenario],
                       check=True, capture_output=True)
    store = tmp / "baselines"
    assert run("baseline", "save", "--name", "b", tmp / "base", "--baseline-dir", store).exit_code == 0
    return tmp / "base", tmp / "cand", store


def test_lost_tasks_are_refused_when_the_timeline_is_read(captures, tmp_path):
    _, cand, store = captures
    r = run("check", "--baseline", "b", "--baseline-dir", store, "--trace", "always", cand, "--out", tmp_path)
    assert r.exit_code == 3 and "DEVICE_TASKS_LOST" in r.output


def test_a_check_without_the_timeline_says_lost_tasks_were_not_checked(captures, tmp_path):
    _, cand, store = captures
    r = run("check", "--baseline", "b", "--baseline-dir", store, "--trace", "never", cand, "--out", tmp_path)
    assert r.exit_code != 1, "a lost task is never a regression cause"
    assert NOTE in " ".join(r.output.split())
    assert NOTE in (tmp_path / "perfgate-report.md").read_text()


def test_a_check_that_read_the_timeline_has_no_such_note(captures, tmp_path):
    base, _, store = captures
    r = run("check", "--baseline", "b", "--baseline-dir", store, "--trace", "always", base, "--out", tmp_path)
    assert r.exit_code == 0 and "lost device tasks not checked" not in r.output


def test_a_sweep_lists_a_capture_that_lost_tasks_as_failed_with_checks_reason(captures, policy):
    """A sweep reads a small timeline: the lost tasks make the row failed, with the reason check
    gives, beside the unchanged capture's ok row; no figures of the incomplete steps."""
    import pandas as pd

    from perfgate.app.sweep import run_sweep
    base, cand, _ = captures
    table = run_sweep([base.parent], policy, workers=1).set_index("capture")
    assert table.loc[str(base), "status"] == "ok"
    lost = table.loc[str(cand)]
    assert lost["status"] == "failed" and "DEVICE_TASKS_LOST" in lost["reason"]
    assert "invalid capture" in lost["reason"] and pd.isna(lost["step_time_rank0_us"])
