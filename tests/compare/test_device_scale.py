"""Uniform compute changes and device drift: a faster or slower device moves every compute family
together, so the cause is Computing as a whole; shares and exposed communication that moved only
because the rest grew or shrank are side effects, never a gain or a regression of their own."""
from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal

import pytest

from perfgate.synth.writer import SynthSpec, write_capture
from _cli import run
from _edits import restate_op_statistic, scaled_msprof


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def test_a_share_that_fell_because_the_rest_grew_is_a_side_effect(copy_capture, tmp_path):
    """Every compute row of level1 ×1.5 (ΣDuration; timeline and step_trace left out on both
    sides), communication untouched: hcom_allReduce's share falls, its own ΣDuration and calls do
    not move. The cause was printed "improved communication hcom_allReduce"; it is a side effect."""
    import csv
    from decimal import Decimal
    base = copy_capture("level1", "base")
    for p in [*base.rglob("trace_view.json"), *base.rglob("step_trace_time.csv")]:
        p.unlink()
    cand = tmp_path / "cand"
    shutil.copytree(base, cand)
    for p in cand.rglob("kernel_details.csv"):
        rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
        di, ni = rows[0].index("Duration(us)"), rows[0].index("Name")
        for r in rows[1:]:
            if not r[ni].startswith("hcom"):
                r[di] = str((Decimal(r[di].strip()) * Decimal("1.5")).quantize(Decimal("0.001")))
        with open(p, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        restate_op_statistic(p.parent)
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    causes = {x["subject"]: x for x in res["causes"]}
    # the comparison itself is no gain: a part whose own ΣDuration did
    # not move is unchanged (a consequence), so nothing names hcom_allReduce and nothing counts as improved
    assert "hcom_allReduce" not in causes and "improved   communication hcom_allReduce" not in r.output
    comm_shares = [c for c in res["comparisons"] if c["gated"] and c["name"].startswith("share.")
                   and ("hcom" in str(c["labels"].get("family", "")) or c["labels"].get("category") == "Comm")]
    assert comm_shares and all(c["verdict"] == "unchanged" for c in comm_shares), \
        [(c["key"], c["verdict"]) for c in comm_shares]
    assert any("within the bound" in c["reason"] for c in comm_shares)
    assert res["counts"]["gated"]["improvement"] == 0


def _scale_compute(cap, factor: str):
    """Every non-hcom row's Duration × ``factor`` (communication untouched), timeline and
    step_trace_time.csv removed so that ΣDuration alone carries the change."""
    for p in [*cap.rglob("trace_view.json"), *cap.rglob("step_trace_time.csv")]:
        p.unlink()
    for p in cap.rglob("kernel_details.csv"):
        rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
        di, ni = rows[0].index("Duration(us)"), rows[0].index("Name")
        for r in rows[1:]:
            if not r[ni].startswith("hcom"):
                r[di] = str((Decimal(r[di].strip()) * Decimal(factor)).quantize(Decimal("0.001")))
        with open(p, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        restate_op_statistic(p.parent)
    return cap


def test_compute_faster_with_communication_as_it_was_is_no_communication_regression(copy_capture, tmp_path):
    """Every compute kernel of level1 ×0.667 (faster), communication untouched: the device scale
    is 0.667, so hcom_allReduce is "×1.5 relative to the device" and its share grew. It failed the
    gate as "REGRESSION communication hcom_allReduce: ΣDuration 3,047 -> 3,047 us/step (+0%)".
    Communication time is set by the links and the other ranks, not by the device's compute
    speed: its own ΣDuration did not move, so it is unchanged (a consequence) and the check passes."""
    base = copy_capture("level1", "base")
    for p in [*base.rglob("trace_view.json"), *base.rglob("step_trace_time.csv")]:
        p.unlink()
    cand = _scale_compute(copy_capture("level1", "cand"), "0.667")
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 0, r.output
    comm = [c for c in res["comparisons"] if c["gated"] and c["name"].startswith("share.")
            and ("hcom" in str(c["labels"].get("family", "")) or c["labels"].get("category") == "Comm"
                 or c["labels"].get("core_type") in ("HCCL", "COMMUNICATION"))]
    assert comm and all(c["verdict"] == "unchanged" for c in comm), [(c["key"], c["verdict"]) for c in comm]
    assert any("within the bound" in c["reason"] for c in comm)
    assert not any(x["subject"].startswith("hcom") for x in res["causes"])


def test_a_compute_family_that_kept_its_time_on_a_faster_device_is_no_regression(tmp_path):
    """Every compute family ×0.5 except MatMulV3 (its time as before, on a device twice as fast):
    the device's speed explains any own time between the baseline's and s times it, so a family
    that kept its time did not regress (nothing got slower; the step got faster). Its reason says
    which range the device explains."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    keep = "aclnnMatmul_MatMulV3Common_MatMulV3"
    base = write_capture(tmp_path / "base", SynthSpec())
    cand = write_capture(tmp_path / "cand", SynthSpec(slowdown={f[0]: 0.5 for f in DEFAULT_FAMILIES if f[0] != keep}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 0, r.output
    share = next(c for c in res["comparisons"] if c["name"] == "share.family" and c["labels"]["family"] == keep
                 and c["labels"]["view"] == "rank0")
    assert share["verdict"] == "unchanged" and "within the bound" in share["reason"]
    lo, hi = share["stats"]["part"]["explained_us"]
    assert lo < share["stats"]["part"]["cand_us"] <= hi and share["stats"]["part"]["scale"] < 0.6
    assert not any(x["fails"] for x in res["causes"])


def test_uniform_compute_slowdown_names_computing_and_calls_nothing_a_gain(tmp_path):
    """Synthetic pair, every compute kernel ×1.5 on every rank, communication as it was: the
    cause is Computing as a whole (no kernel family explains it, each moved with the device), it
    explains the Computing metrics too (they were listed as unexplained), and no communication
    share is called an improvement ("6 improved" were side effects)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec())
    cand = write_capture(tmp_path / "cand", SynthSpec(rank_slowdown={0: 1.5, 1: 1.5}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    assert r.exit_code == 1
    assert res["counts"]["gated"]["improvement"] == 0, r.output
    top = res["causes"][0]
    assert top["kind"] == "device" and top["subject"] == "Computing", res["causes"]
    assert any(k.startswith("step.computing_us") for k in top["explains"])
    assert top["step_delta_caliber"] == "busy union" and "every compute kernel ×1.5" in top["what"]
    assert not [k for k in res["unexplained"] if k.startswith("step.computing_us")]
    assert "more than the step's change" not in r.output   # +3,298 of +3,297 us is 100 %, not "more"


@pytest.mark.parametrize("change", [["--extra-calls", "aclnnAdd_AddAiCore_Add=2"],
                                    ["--slowdown", "aclnnRmsNorm_RmsNormAiCore_RmsNorm=3"]])
def test_exposed_communication_moved_by_compute_is_never_the_regression(tmp_path, change):
    """Twice the Add calls, or RmsNorm ×3: more compute hides more of the same communication, so
    exposed communication falls (or moves between ranks). The compute family is the failing cause;
    exposed communication is at most a part of the step that moved (its own time, in the waterfall),
    never a regression cause, and the waterfall adds up to the step-time change."""
    bl = tmp_path / "bl"
    assert run("synth", tmp_path / "base").exit_code == 0
    assert run("baseline", "save", "--name", "main", "--baseline-dir", bl, tmp_path / "base").exit_code == 0
    assert run("synth", tmp_path / "cand", *change).exit_code == 0
    r = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", tmp_path / "cand")
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    failing = [x for x in res["causes"] if x["fails"]]
    assert failing and failing[0]["kind"] == "kernel family", failing
    assert not [x for x in res["causes"] if x["subject"] == "exposed communication" and x["verdict"] == "regression"]
    wf = res["detail"]["waterfall"]
    assert sum(i["us"] for i in wf["items"]) == pytest.approx(wf["step_delta_us"], abs=1e-6)


@pytest.mark.real
def test_an_underfeed_that_fell_as_kernels_grew_is_no_gain(ascend, tmp_path):
    """Every kernel 50x slower on raw msprof output: the underfeed ratio fell (99.7 % -> 87.2 %)
    because the kernels filled the step, while the idle time (bubbles) did not fall beyond what the
    device's busy time explains. It was "improved ... device idle (underfeed)"; the ratio is judged
    through idle time, and nothing about idle time is called a gain."""
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl,
                scaled_msprof(ascend, tmp_path, "base", 1)).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             scaled_msprof(ascend, tmp_path, "slow", 50))
    assert r.exit_code == 1, r.output
    assert "improved step anatomy" not in r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    under = [c for c in res["comparisons"] if c["name"] == "step.underfeed_ratio" and c["gated"]]
    assert under and all(c["verdict"] == "unchanged" and "within the bound" in c["reason"] for c in under), under
    assert not [x for x in res["causes"] if x["kind"] == "step anatomy"]


def test_step_time_is_charged_to_the_largest_cause_of_its_sign(tmp_path):
    """Communication fully exposed (+2,917 us busy union per step) and MatMul 1.2x (+793 us
    ΣDuration): both causes were listed, exposed communication first, yet the step-time
    regression was charged to MatMul in the console, the Markdown and the JUnit failure."""
    import json
    from perfgate.synth.writer import SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, overlap=1.0,
                                                      slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.2}))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    by_subject = {x["subject"]: x for x in res["causes"]}
    exposed = by_subject["exposed communication"]
    assert "step.time_us{view=rank0}" in exposed["explains"] and "step.time_us{view=p50}" in exposed["explains"]
    assert not any(k.startswith("step.time_us") for k in by_subject["aclnnMatmul_MatMulV3Common_MatMulV3"]["explains"])
    assert res["causes"][0]["subject"] == "exposed communication"
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| 🔴 | step time"))
    assert row.rstrip().endswith("| exposed communication |"), row


def test_uniform_device_drift_over_repeated_captures_moves_no_part(tmp_path):
    """5 vs 5 runs, every compute family 1.04x in the candidate (device drift): the MatMul share
    was UNSURE (exit 1 with unsure_fails) because the interval around the Hodges-Lehmann shift
    was corrected by a difference of medians, 0.13 pp off Δ*. Drift moves no part: PASS."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    drift = {f[0]: 1.04 for f in DEFAULT_FAMILIES}
    base = [write_capture(tmp_path / f"b{s}", SynthSpec(seed=s, steps=10)) for s in range(1, 6)]
    cand = [write_capture(tmp_path / f"c{s}", SynthSpec(seed=s + 30, steps=10, slowdown=drift)) for s in range(1, 6)]
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, *base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *cand)
    assert r.exit_code == 0 and r.output.startswith("perfgate: PASS"), r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert not [c["key"] for c in res["comparisons"] if c["gated"] and c["verdict"] != "unchanged"]


def test_repeated_captures_name_the_family_behind_a_part_and_no_comm_side_effect(tmp_path):
    """5 vs 5 runs, MatMul 1.15x (beyond the 10 % compute band): the MatMul category share failed
    while the family share did not ("no cause found" beside a reason naming MatMul), and the Comm
    share, whose own ΣDuration did not move, was unsure. Every part is judged through its own time
    now: the MatMul family is the one cause and Comm is unchanged."""
    import json
    from perfgate.synth.writer import SynthSpec, write_capture
    mm = "aclnnMatmul_MatMulV3Common_MatMulV3"
    base = [write_capture(tmp_path / f"b{s}", SynthSpec(seed=s, steps=10)) for s in range(1, 6)]
    cand = [write_capture(tmp_path / f"c{s}", SynthSpec(seed=s + 40, steps=10, slowdown={mm: 1.15}))
            for s in range(1, 6)]
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, *base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *cand)
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert [x["subject"] for x in res["causes"]] == [mm] and not res["unexplained"]
    verdicts = {c["key"]: c["verdict"] for c in res["comparisons"] if c["gated"]}
    assert verdicts["share.category{category=Comm,view=rank0}"] == "unchanged"
    assert "unsure" not in verdicts.values()
    assert "no cause found" not in (tmp_path / "o" / "perfgate-report.md").read_text()


_ONE = "aclnnGroupedMatmul_GroupedMatmul_GroupedMatmul"


def _one_kernel_family_check(tmp_path, factor):
    """Default synthetic families plus one of a single 600 us call per step, made ``factor``
    times as long in the candidate: ``(check result, JSON result)``."""
    import json
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    fams = tuple(DEFAULT_FAMILIES) + ((_ONE, "GroupedMatmul", "AI_CORE", 1, 600.0),)
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, families=fams))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, families=fams, slowdown={_ONE: factor}))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    return r, json.loads((tmp_path / "o" / "perfgate-result.json").read_text())


def test_a_one_call_family_is_judged_as_any_part(tmp_path):
    """A family of one call per step is a part like any other: 600 -> 1,200 us adds 600 us/step
    beyond the device, material (more than 2 % of Computing) and beyond its noise band, so it fails
    naming that family; ×1.05 stays within the band."""
    r, res = _one_kernel_family_check(tmp_path, 2.0)
    assert r.exit_code == 1 and res["causes"][0]["subject"] == _ONE and res["causes"][0]["fails"], r.output
    share = {c["key"]: c for c in res["comparisons"]}[f"share.family{{family={_ONE},view=rank0}}"]
    assert share["gated"] and share["fails"] and share["stats"]["part"]["excess_us"] > share["stats"]["part"]["bound_us"]
    r, res = _one_kernel_family_check(tmp_path / "small", 1.05)
    assert not any(x["subject"] == _ONE and x["fails"] for x in res["causes"]), r.output


def test_a_one_kernel_family_within_the_drift_is_still_named_as_the_cause(tmp_path):
    """One call per step 600 -> ~1,500 us (2.4x, inside the drift bound, so its share does not
    gate): Computing and step time regressed and were charged to "Computing (no kernel family
    explains it)", though that family's own time accounts for all of it."""
    r, res = _one_kernel_family_check(tmp_path, 2.4)
    assert r.exit_code == 1, r.output
    assert [x["subject"] for x in res["causes"]] == [_ONE], res["causes"]
    assert "no kernel family explains it" not in r.output
