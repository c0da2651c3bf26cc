"""A metric whose inputs are missing says so instead of reading as zero: a step without kernel rows,
steps lost at the end of the profiler's schedule, a gated memory-bound share without its ratio
columns (fails closed), and require_trace on a rank without its timeline."""
from __future__ import annotations

import json
import shutil


from _cli import run
from _edits import drop_comm_step, policy_with


def test_gated_memory_bound_without_its_ratio_columns_fails_closed(copy_capture, tmp_path):
    """A policy gating pipe.memory_bound and a kernel table without the *_ratio columns (the
    *_time(us) ones kept): the baseline was saved (exit 0) without rank 0's memory_bound, and the
    next check failed with "MISSING ... a file the baseline had is missing?". Now exit 3 naming the
    file and the columns; nothing is saved."""
    import csv
    from importlib.resources import files
    text = files("perfgate").joinpath("policies/default.yaml").read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.strip().startswith("pipe.memory_bound:"))
    pol = tmp_path / "pol.yaml"
    pol.write_text(text.replace(line, line.replace("gated: false", "gated: true")), encoding="utf-8")
    cap = copy_capture("level1", "noratio")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    rows = list(csv.reader(open(kd, newline="", encoding="utf-8-sig")))
    keep = [i for i, h in enumerate(rows[0]) if not h.endswith("_ratio")]
    with open(kd, "w", newline="") as f:
        csv.writer(f).writerows([[r[i] for i in keep] for r in rows])
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, "--policy", pol, cap)
    assert r.exit_code == 3, r.output
    assert "gates pipe.memory_bound" in r.output and "aic_mac_ratio + aic_mte2_ratio" in r.output
    assert "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv" in r.output and not (bl / "m.json").exists()
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, "--policy", pol, copy_capture("level1", "full"))
    assert r.exit_code == 0, r.output
    # gated through an override of one family only (the base rule ungated): the same refusal
    ov = tmp_path / "ov.yaml"
    ov.write_text(text.replace("overrides:", "overrides:\n  - {metric: pipe.memory_bound, labels: {family: "
                               "aclnnMatmul_MatMulV3Common_MatMulV3}, gated: true}", 1), encoding="utf-8")
    r = run("baseline", "save", "--name", "o", "--baseline-dir", bl, "--policy", ov, cap)
    assert r.exit_code == 3 and "gates pipe.memory_bound" in r.output and not (bl / "o.json").exists(), r.output


def test_a_step_without_kernel_rows_is_named(tmp_path):
    """A step's kernel rows deleted from rank 0 and its step_trace_time.csv row zeroed (Free =
    Stage: the device did nothing): the check failed on a gated step.exposed_comm_ratio "MISSING
    ... a file the baseline had is missing?" with nothing naming the empty step (a row that kept
    its Computing time is refused by the steps_present self-check). A warning now names the step
    and the file and what it leaves out; the gate still fails on the metric it cannot vouch for."""
    s5 = tmp_path / "S5"
    assert run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    cut = tmp_path / "cut"
    shutil.copytree(s5, cut)
    kd = cut / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_text().splitlines(keepends=True)
    victim = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[2]
    kd.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != victim]))
    st_path = kd.parent / "step_trace_time.csv"
    st_lines = st_path.read_text().splitlines(keepends=True)
    hdr = st_lines[0].rstrip("\n").split(",")
    out_lines = [st_lines[0]]
    for x in st_lines[1:]:
        cells = x.rstrip("\n").split(",")
        if cells[0] == victim:   # the device did nothing in it: every figure 0, Free = Stage
            stage = cells[hdr.index("Stage")]
            cells = [victim] + ["0"] * (len(cells) - 1)
            cells[hdr.index("Free")] = cells[hdr.index("Stage")] = stage
        out_lines.append(",".join(cells) + "\n")
    st_path.write_text("".join(out_lines))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "s", "--baseline-dir", bl, s5).exit_code == 0
    r = run("check", "--baseline", "s", "--baseline-dir", bl, cut, "--out", out, "-v")
    assert r.exit_code == 1 and "step.exposed_comm_ratio" in r.output, r.output
    assert f"kernel_details.csv has no kernel row in step(s) {victim} of step_trace_time.csv" in r.output, r.output


def test_steps_lost_at_the_end_are_named_from_the_schedule(tmp_path):
    """The last step cut from both ranks' kernel and step_trace files (no timeline): saved with 4
    steps and no word, though profiler_info's schedule profiles 5. A warning now says so."""
    s5 = tmp_path / "S5"
    assert run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    info = json.loads(next(s5.rglob("profiler_info_0.json")).read_text())
    assert info["config"]["common_config"]["schedule"]["active"] == 5
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    for f in [*s5.rglob("kernel_details.csv"), *s5.rglob("step_trace_time.csv")]:
        lines = f.read_text().splitlines(keepends=True)
        last = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[-1]
        f.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != last]))
        drop_comm_step(f.parent, last)
    r = run("baseline", "save", "--name", "s", "--baseline-dir", tmp_path / "bl", s5)
    assert r.exit_code == 0, r.output
    assert "kernel_details.csv holds 4 step(s), but profiler_info_0.json's schedule profiles 5 (active 5 x repeat 1)" in r.output


def test_require_trace_fails_a_rank_without_its_trace_also_beside_step_trace_time(synth_cap, tmp_path):
    """``self_checks.require_trace: true`` on a rank whose trace_view.json is gone but whose
    step_trace_time.csv is there: the check against the trace (``trace_vs_step_trace``) stayed
    "skipped" and the check passed. The policy asked for the trace: exit 3, naming the key."""
    (synth_cap / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").unlink()
    strict = policy_with(tmp_path, "require_trace: false", "require_trace: true")
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--policy", strict, "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 3, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert res["verdict"] == "INVALID_CAPTURE"
    failed = [c for c in res["self_checks"] if c["status"] == "fail"]
    assert failed and {c["name"] for c in failed} == {"trace_vs_step_trace"} and {c["rank"] for c in failed} == {1}
    assert all("self_checks.require_trace: true" in c["message"] for c in failed)
    # the default policy: skipped, as before
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o2", synth_cap)
    assert r.exit_code == 0, r.output
