"""The issue's "must show" items, checked on the real G2025 captures (read in place, mutated
only in temp copies)."""

import pytest
from junitparser import JUnitXml

from perfgate import terms
from perfgate.errors import EXIT_INVALID_CAPTURE, EXIT_PASS, EXIT_REGRESSION, InvalidCaptureError
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.intervals import busy_union_ns
from perfgate.report import render_junit, render_markdown
from perfgate.store.baselines import BaselineStore
from perfgate.synth import mutate

pytestmark = pytest.mark.real
OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


@pytest.fixture
def store(tmp_path):
    return BaselineStore(tmp_path / "baselines")


def _fail_keys(result):
    return {c.key for c in result.comparisons if c.fails}


def test_level1_baseline_level2_passes(text_captures, store, policy):
    """Must show 1: same job, two captures, no regression under the default policy."""
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    assert r.status == terms.PASS and r.exit_code == EXIT_PASS
    assert r.counts()["all"][terms.UNCHANGED] > 300 and not _fail_keys(r)
    # 7 per rank of its one step, and op_statistic_vs_kernels per rank
    assert all(c.status == "pass" for c in r.self_checks) and len(r.self_checks) == 16


def test_level1_rank0_fingerprint_matches_independent_figures(text_captures, policy):
    """Must show 2: values computed independently from the files."""
    cap = load_capture(text_captures / "level1")
    r0 = cap.ranks[0]
    k = r0.kernels.df
    assert len(k[k["step"] == "50"]) == 191 and int(k["is_comm"].sum()) == 4
    assert k["dur_ns"].sum() == 114_865_613                                      # ΣDuration
    assert busy_union_ns(k["start_ns"], k["end_ns"]) == 110_836_940              # busy union, all rows
    comp = k[~k["is_comm"]]
    assert busy_union_ns(comp["start_ns"], comp["end_ns"]) == 8_873_737          # vs trace 8873.756
    assert k.loc[k["is_comm"], "dur_ns"].sum() == 105_991_876                    # vs trace 105991.878
    fp = fingerprint_capture(cap, policy)
    m = fp.metrics
    assert m["device.time_us{caliber=sum_duration,view=rank0}"].value == pytest.approx(114865.613, abs=1e-6)
    assert m["device.time_us{caliber=busy_union,view=rank0}"].value == pytest.approx(110836.940, abs=1e-6)
    assert m["kernel.total_calls_per_step{view=rank0}"].value == 191
    assert m["kernel.calls_per_step{family=hcom_allReduce,view=rank0}"].value == 4
    checks = {(c.name, c.rank): c for c in fp.self_checks}
    ce = checks[("comm_equality", 0)]
    assert ce.status == "pass" and ce.observed == pytest.approx(105991.876) and ce.expected == pytest.approx(105991.878)
    cu = checks[("compute_union", 0)]
    assert cu.observed == pytest.approx(8873.737) and cu.expected == pytest.approx(8873.756)
    og = checks[("overlap_gap", 0)]
    assert og.observed == pytest.approx(4028.673, abs=1e-3) and og.expected == pytest.approx(4028.675, abs=1e-3)
    assert abs(og.observed - og.expected) < 0.01


def test_doubling_a_family_is_a_regression_naming_both_counts(copy_capture, store, policy):
    """Must show 3a: new tasks placed in the rank's free time, trace and step_trace updated so the
    self-checks still hold -> regression naming the family and both counts."""
    base = copy_capture("level1", "base")
    cand = copy_capture("level1", "cand")
    added = mutate.add_calls(cand / OUT, "aclnnMuls_MulAiCore_Mul", factor=2)
    assert len(added) == 18
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert all(c.status == "pass" for c in r.self_checks), [c.message for c in r.self_checks if c.status != "pass"]
    assert r.status == terms.FAIL and r.exit_code == EXIT_REGRESSION
    fam = next(c for c in r.comparisons if c.key == "kernel.calls_per_step{family=aclnnMuls_MulAiCore_Mul,view=rank0}")
    assert fam.fails and (fam.baseline, fam.candidate) == (18.0, 36.0)
    assert "aclnnMuls_MulAiCore_Mul" in fam.reason and "18 -> 36" in fam.reason
    st = {c.key: c for c in r.comparisons}
    assert st["step.computing_us{view=rank0}"].candidate > st["step.computing_us{view=rank0}"].baseline
    assert st["step.free_us{view=rank0}"].candidate < st["step.free_us{view=rank0}"].baseline
    # Step time is unchanged: the calls filled idle time.
    assert st["step.time_us{view=rank0}"].verdict == terms.UNCHANGED
    # the cause named first is the family whose calls doubled; the layer classes it reshaped are
    # its symptoms (the model's layer count did not change), and no share of an unmoved step time
    # is apportioned
    assert r.causes[0]["kind"] == "kernel family" and r.causes[0]["subject"] == "aclnnMuls_MulAiCore_Mul"
    assert not any(x["kind"] == "model structure" for x in r.causes), r.causes
    assert r.causes[0]["step_fraction"] is None
    from perfgate.report.summary import console_lines
    assert "elapsed step time unchanged (ΣDuration" in "\n".join(console_lines(r))


def test_plain_duplicate_row_is_reported_not_counted(copy_capture, store, policy):
    """Must show 3b."""
    base = copy_capture("level1", "base")
    cand = copy_capture("level1", "cand")
    mutate.duplicate_row(cand / OUT, 10)
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.PASS
    assert any("duplicate" in n and "192" in n for n in r.notes)


@pytest.mark.slow
def test_changed_comm_duration_fails_closed(copy_capture, store, policy, tmp_path):
    """Must show 3c: one communication Duration changed in kernel_details only -> comm-equality
    fails, invalid capture exit, nothing written."""
    base = copy_capture("level1", "base")
    cand = copy_capture("level1", "cand")
    rows = (cand / OUT / "kernel_details.csv").read_text().splitlines()
    row = next(i for i, line in enumerate(rows) if "hcom_allReduce" in line)
    mutate.set_duration(cand / OUT, row, 1234.5)
    save_baseline(base, "main", policy=policy, store=store, env={})
    before = (store.dir / "main.json").read_bytes()
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.INVALID and r.exit_code == EXIT_INVALID_CAPTURE and not r.comparisons
    bad = [c for c in r.self_checks if c.status == "fail"]
    assert bad[0].name == "comm_equality" and bad[0].rank == 0
    assert "not from one capture" in bad[0].message
    with pytest.raises(InvalidCaptureError, match="comm_equality"):
        save_baseline(cand, "other", policy=policy, store=store, env={})
    assert not (store.dir / "other.json").exists()
    assert (store.dir / "main.json").read_bytes() == before


def test_truncated_trace_and_header_only_kernels(copy_capture, store, policy):
    """Must show 3d: specific errors naming the file (and byte offset / row)."""
    cand = copy_capture("level1", "t")
    size = mutate.truncate(cand / OUT / "trace_view.json", 0.6)
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.INVALID and r.exit_code == EXIT_INVALID_CAPTURE
    assert r.error["path"].endswith("trace_view.json") and r.error["byte_offset"] is not None
    assert r.error["byte_offset"] <= size
    cand2 = copy_capture("level1", "h")
    mutate.header_only(cand2 / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    r = check(cand2, "main", policy=policy, store=store, env={})
    assert r.status == terms.INVALID
    assert r.error["path"].endswith("rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    assert "no data rows" in r.error["message"]


def test_level0_vs_level1_core_and_category_incomparable(text_captures, store, policy):
    """Must show 3e: Level0 (Type / Accelerator Core N/A) -> core-type and category metrics
    incomparable, counts still compared."""
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level0", "main", policy=policy, store=store, env={})
    by = {c.key: c for c in r.comparisons}
    core = [c for c in r.comparisons if c.name in ("share.core_type", "share.category")]
    assert core and all(c.verdict == terms.INCOMPARABLE for c in core)
    assert "Level0" in core[0].reason
    fam = [c for c in r.comparisons if c.name == "kernel.calls_per_step"]
    assert fam and all(c.verdict == terms.UNCHANGED for c in fam)
    assert by["kernel.calls_per_step{family=hcom_allReduce,view=rank0}"].candidate == 4
    assert by["kernel.total_calls_per_step{view=p50}"].verdict == terms.UNCHANGED
    assert any("profiler level changed" in n for n in r.notes)


def test_reports_on_real_check(text_captures, store, policy, tmp_path):
    """Must show 4: the JUnit file parses with junitparser; the Markdown holds marker and table."""
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    p = tmp_path / "j.xml"
    p.write_text(render_junit(r))
    xml = JUnitXml.fromfile(str(p))
    cases = [c for s in xml for c in s]
    gated = [c for c in r.comparisons if c.gated]
    assert len(cases) == len(gated) + len({(c.name, c.rank) for c in r.self_checks})  # one per check and rank
    assert all(c.is_passed for c in cases)
    md = render_markdown(r)
    assert md.startswith("<!-- perfgate:report key=main -->")
    assert "perfgate: **PASS** against baseline `main`" in md
    assert "Gated regressions" not in md  # nothing to tabulate on a clean pass
    assert "Self-checks (16 pass)" in md and "profiler level changed" in md
