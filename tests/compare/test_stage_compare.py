"""Comparing pipeline-parallel jobs: stage S of the baseline against stage S of the candidate, a
slowdown named by its stage, a changed stage layout not compared silently."""
from __future__ import annotations

import json

import pytest

from _cli import run
from perfgate import terms
from perfgate.synth import SynthSpec, pipeline_spec, write_capture

MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"


@pytest.fixture(scope="module")
def pipeline_base(tmp_path_factory):
    """A 2-stage x 2-DP pipeline job saved as baseline ``main``: ``(capture, store)``."""
    root = tmp_path_factory.mktemp("pp")
    cap = write_capture(root / "base", pipeline_spec())
    bl = root / "bl"
    assert run("baseline", "save", "--name", "main", "--baseline-dir", bl, cap).exit_code == 0
    return cap, bl


def _check(cap, bl, out):
    r = run("check", "--baseline", "main", "--baseline-dir", bl, "--json", out / "r.json", cap)
    return r, json.loads((out / "r.json").read_text())


def test_a_pipeline_job_checked_against_itself_passes(pipeline_base, tmp_path):
    cap, bl = pipeline_base
    r, res = _check(cap, bl, tmp_path)
    assert r.exit_code == 0, r.output
    assert res["verdict"] == "PASS"
    # nothing moved, so nothing is better either: a stage's exposed communication (a p50 of each
    # component, not of their difference) must not read as an improvement against itself
    assert res["counts"]["all"]["improvement"] == 0 and res["counts"]["all"]["regression"] == 0
    assert all(c["status"] != "fail" for c in res["self_checks"])
    gated_views = {c["labels"].get("view") for c in res["comparisons"] if c["gated"]}
    assert {"rank0", "stage0.p50", "stage1.p50"} <= gated_views
    assert not {"p50", "stage0.max", "stage1.max"} & gated_views   # max is not a gated view by default
    assert any("pipeline stages: baseline stage S compared with candidate stage S" in n for n in res["notes"])


def test_a_slower_stage_is_a_regression_whose_cause_names_that_stage(pipeline_base, tmp_path):
    cap, bl = pipeline_base
    slow = write_capture(tmp_path / "slow", pipeline_spec(slowdown={MATMUL: 1.5}, inject_ranks=(2, 3)))
    r, res = _check(slow, bl, tmp_path)
    assert r.exit_code == 1, r.output
    assert res["verdict"] == "REGRESSION"
    failing = [c for c in res["comparisons"] if c["fails"]]
    assert failing and {c["labels"].get("view") for c in failing} == {"stage1.p50"}
    assert "step.time_us{view=stage1.p50}" in {c["key"] for c in failing}
    top = res["causes"][0]
    assert top["fails"] and top["subject"] == MATMUL and top["stages"] == [1]
    assert top["what"].startswith("stage 1: ΣDuration") and "(+50%)" in top["what"]
    assert "stage 1 p50" in r.output


def test_a_changed_stage_layout_is_not_compared_silently(pipeline_base, tmp_path):
    """The candidate runs one program on its 4 ranks: the baseline's stage views have nothing to
    pair with; they are not compared, and the notes and the exit-4 reason say why (both stage
    layouts). rank0 is still compared."""
    cap, bl = pipeline_base
    one = write_capture(tmp_path / "one", SynthSpec(ranks=4))
    r, res = _check(one, bl, tmp_path)
    assert r.exit_code == 4 and res["verdict"] == "INCOMPATIBLE_BASELINE", r.output   # too much not comparable
    # the exit-4 reason starts with the changed layout, not with a profiler level or export to match
    why = res["error"]["message"].split("cannot judge this capture: ", 1)[1]
    assert why.startswith("the pipeline stage layout changed: baseline 2 stages (stage 0: ranks 0, 1; stage 1: "
                          "ranks 2, 3)") and "candidate one stage" in why, why
    assert "not comparable are its stage and pooled views" in why and why in r.output
    assert "new stage layout" in res["error"]["hint"] and "profiler level" not in res["error"]["hint"]
    assert any("the pipeline stage layout changed: baseline 2 stages (stage 0: ranks 0, 1; stage 1: ranks 2, 3)"
               in n and "candidate one stage" in n for n in res["notes"])
    staged = [c for c in res["comparisons"] if terms.view_stage(c["labels"].get("view")) is not None
              or c["labels"].get("view") in ("p50", "max")]
    assert staged and all(c["verdict"] == "incomparable" and "pipeline stage layout changed" in c["reason"]
                          for c in staged)
    assert not any(c["fails"] for c in staged)
    assert any(c["labels"].get("view") == "rank0" and c["verdict"] != "incomparable" for c in res["comparisons"])


def test_a_policy_override_of_a_view_covers_that_view_in_every_stage():
    from perfgate.policy import load_policy
    from perfgate.policy.load import Override
    ov = Override(metric="step.time_us", labels={"view": "p50"}, fields={"gated": False})
    assert ov.applies("step.time_us", {"view": "stage1.p50"})
    assert not ov.applies("step.time_us", {"view": "stage1.max"})
    assert not ov.applies("step.time_us", {"view": "rank0"})
    policy = load_policy()
    assert policy.rule_for("step.time_us", {"view": "stage1.p50"}) == policy.rule_for("step.time_us", {"view": "p50"})


def test_a_count_regression_on_one_rank_keeps_the_stage_layout(pipeline_base, tmp_path):
    """Cast called twice as often on rank 3 only, the candidate's stages found by the kernel
    signature (no layout recorded): rank 3 still runs its stage's program, so the stages pair
    with the baseline's and stage 1's counts regress."""
    cap, bl = pipeline_base
    cast = "aclnnCast_CastAiCore_Cast"
    cand = write_capture(tmp_path / "cand", pipeline_spec(extra_calls={cast: 2}, inject_ranks=(3,),
                                                          pipeline_layout=False))
    r, res = _check(cand, bl, tmp_path)
    assert r.exit_code == 1, r.output
    assert not any("stage layout changed" in n for n in res["notes"])
    assert any("kernel signature" in n for n in res["notes"])
    failing = {c["key"] for c in res["comparisons"] if c["fails"]}
    assert f"kernel.calls_per_step{{family={cast},view=stage1.p50}}" in failing
    assert not any("stage0" in k for k in failing)
