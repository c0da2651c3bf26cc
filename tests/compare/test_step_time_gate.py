"""The step time gate and its caliber: without step_trace_time.csv the device busy union gates, a
baseline without step time still gates the device time, an unknown step time is never called
unchanged, an anatomy cause's share names its own caliber, and a baseline of several runs never
weakens the gate."""
from __future__ import annotations

import json

import pytest

from perfgate.synth.writer import SynthSpec, write_capture
from _cli import run
from _edits import scaled_msprof


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def test_the_step_share_of_an_anatomy_cause_names_its_own_caliber(tmp_path):
    """A step-anatomy cause (exposed communication, device idle) is measured in the busy-union or
    elapsed caliber; its "share of the step-time change" said "ΣDuration +50,982 of elapsed ...".
    It now names the part's caliber; family causes keep ΣDuration."""
    from perfgate.report.summary import step_share_text
    from perfgate.synth import SynthSpec, write_capture
    cast = "aclnnCast_CastAiCore_Cast"
    base = write_capture(tmp_path / "B", SynthSpec())
    cand = write_capture(tmp_path / "C", SynthSpec(extra_calls={cast: 0.5}, slowdown={cast: 6}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    doc = _result(out)
    anatomy = [c for c in doc["causes"] if c["kind"] == "step anatomy" and c["step_delta_us"] is not None]
    assert anatomy, doc["causes"]
    md = (out / "perfgate-report.md").read_text()
    for c in anatomy:
        assert c["step_delta_caliber"] in ("busy union", "elapsed")
        text = step_share_text(c)
        assert text.startswith(c["step_delta_caliber"]) or f"({c['step_delta_caliber']} " in text
        assert text.replace("|", "\\|") in md or text in md
    fam = next(c for c in doc["causes"] if c["subject"] == cast)
    assert "step_delta_caliber" not in fam or fam["step_delta_caliber"] is None
    assert "ΣDuration" in step_share_text(fam)
    assert step_share_text({"step_delta_us": 50982.0, "step_time_delta_us": 68291.0,
                            "step_delta_caliber": "busy union"}) == "busy union +50,982 of elapsed +68,291 us/step (75%)"


def test_an_unknown_step_time_is_not_called_unchanged():
    """No step_trace_time.csv and no timeline on a side: the elapsed step time is unknown (None).
    The share column said "elapsed step time unchanged" while the step's wall had grown."""
    from perfgate.report.summary import step_share_text
    t = step_share_text({"step_delta_us": 120.0, "step_time_delta_us": None})
    assert "unchanged" not in t and "elapsed step time not measured" in t and t.startswith("ΣDuration +120")
    assert step_share_text({"step_delta_us": 120.0, "step_time_delta_us": 0.0}).startswith("elapsed step time unchanged")


def _slow_everything(factor: str) -> list:
    fams = ["aclnnAdd_AddAiCore_Add", "aclnnCast_CastAiCore_Cast", "aclnnDropoutGenMaskV2_DSAGenBitMask_DSAGenBitMask",
            "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
            "aclnnInplaceCopy_TensorMoveAiCore_TensorMove", "aclnnMatmul_MatMulV3Common_MatMulV3",
            "aclnnNonzero_NonZeroAiCpu_NonZero", "aclnnRmsNorm_RmsNormAiCore_RmsNorm",
            "aclnnSwiGlu_SwiGluAiCore_SwiGlu", "trans_TransData"]
    return [a for f in fams for a in ("--slowdown", f"{f}={factor}")]


def test_a_baseline_of_several_runs_never_weakens_the_gate(tmp_path):
    """A baseline saved from 3 runs, one candidate whose every kernel runs 2x slower: step time
    6,901 -> 13,557 us was UNSURE (exit 0) — 3 vs 1 runs cannot reach alpha in an exact test —
    while the same candidate against any one of those runs is a REGRESSION. When every pairing
    of a baseline run with a candidate run lies beyond the tolerance, the direction decides;
    an unchanged candidate stays unsure, never a regression."""
    bl = tmp_path / "bl"
    runs = []
    for s in (1, 2, 3):
        runs.append(tmp_path / f"r{s}")
        assert run("synth", runs[-1], "--seed", s).exit_code == 0
    assert run("baseline", "save", "--name", "multi", "--baseline-dir", bl, *runs).exit_code == 0
    assert run("synth", tmp_path / "slow", "--seed", 70, *_slow_everything("2")).exit_code == 0
    r = run("check", "--baseline", "multi", "--baseline-dir", bl, "--out", tmp_path / "o", tmp_path / "slow")
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    st = next(c for c in res["comparisons"] if c["key"] == "step.time_us{view=rank0}")
    assert st["verdict"] == "regression" and "whichever runs are compared" in st["reason"]
    assert st["stats"]["run_pair_effects"][0] > 0.5
    # an unchanged candidate against the same baseline: no regression (unsure at most)
    assert run("synth", tmp_path / "same", "--seed", 70).exit_code == 0
    r = run("check", "--baseline", "multi", "--baseline-dir", bl, "--out", tmp_path / "o2", tmp_path / "same")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "o2/perfgate-result.json").read_text())
    assert not [c for c in res["comparisons"] if c["gated"] and c["verdict"] == "regression"]


@pytest.mark.real
def test_without_step_time_the_device_busy_union_gates(ascend, tmp_path):
    """Raw msprof output has no step_trace_time.csv and no timeline here: no time figure was gated
    and every kernel 3x slower passed (exit 0, 34 unchanged). The device busy union per step now
    gates with step time's rule and says so. The capture has two compute families, too few for a
    device scale (at least three): each family's own time is judged as it is, and both are named."""
    base = scaled_msprof(ascend, tmp_path, "base", 1)
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    same = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o0", base)
    assert same.exit_code == 0, same.output
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             scaled_msprof(ascend, tmp_path, "slow", 3))
    assert r.exit_code == 1, r.output
    assert "no step time on either side" in r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    failing = sorted(c["key"] for c in res["comparisons"] if c["fails"])
    assert {"device.time_us{caliber=busy_union,view=p50}", "device.time_us{caliber=busy_union,view=rank0}"} <= set(failing)
    assert {x["subject"] for x in res["causes"] if x["fails"]} == {
        "aclnnGroupedMatmulV5_GroupedMatmul_GroupedMatmul", "aclnnInplaceOne_OnesLikeAiCore_OnesLike"}
    assert any("device scale 1 (only 2 compute families" in n for n in res["notes"])
    assert not res["unexplained"]


def test_a_baseline_without_step_time_still_gates_the_device_time(tmp_path):
    """A baseline saved without step_trace_time.csv and timeline, a candidate with both and every
    compute family 3x slower: step time was 'new, not judged' and the check passed."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    for f in [*base.rglob("step_trace_time.csv"), *base.rglob("trace_view.json")]:
        f.unlink()
    slow = {f[0]: 3.0 for f in DEFAULT_FAMILIES if not f[0].startswith("hcom")}
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, slowdown=slow))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1 and "no step time on one side" in r.output, r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert any(c["fails"] and c["key"].startswith("device.time_us{caliber=busy_union") for c in res["comparisons"])
