"""Pipeline stages: ranks that run different programs get cross-rank views within their stage,
never a median pooled over the stages; a capture of one program keeps the pooled views."""
from __future__ import annotations

import numpy as np
import pytest

from perfgate import terms
from perfgate.ingest import load_capture
from perfgate.metrics import registry, stages
from perfgate.metrics.fingerprint import fingerprint_capture, summarize_rank
from perfgate.synth import SynthSpec, pipeline_spec, write_capture


@pytest.fixture(scope="module")
def pipeline_fp(tmp_path_factory):
    from perfgate.policy import load_policy
    cap = write_capture(tmp_path_factory.mktemp("pp") / "cap", pipeline_spec())
    return fingerprint_capture(load_capture(cap), load_policy())


def _views_of(fp, name="step.computing_us"):
    return {m.labels.get("view"): m for m in fp.metrics.values() if m.name == name and not m.labels.get("caliber")}


def _summary(rank, families):
    """A rank summary holding only calls per step of ``families`` (what the signature reads)."""
    from perfgate.metrics.summary import RankSummary
    return RankSummary(rank=rank, metrics={("kernel.calls_per_step", (("family", f),)): (2.0, "", {})
                                           for f in families}, segments={}, operators={}, anatomy=None,
                       checks=[], findings=[], step_time={}, kinds=None, warnings=[], info={}, has_comm=False,
                       has_trace=False, has_step_trace=False, type_available=True, core_available=True,
                       variant="v", steps=["1"], rank_dir="", output_dir="", rank_source="", meta={})


def test_a_two_stage_pipeline_job_gets_views_within_each_stage(pipeline_fp):
    fp = pipeline_fp
    st = fp.config["stages"]
    assert st["source"] == stages.LAYOUT
    assert st["stage_of"] == {"0": 0, "1": 0, "2": 1, "3": 1}
    assert {s: v["ranks"] for s, v in st["stages"].items()} == {"0": [0, 1], "1": [2, 3]}
    assert st["stages"]["0"]["signature"] != st["stages"]["1"]["signature"]
    views = _views_of(fp)
    assert set(views) == {"rank0", "stage0.p50", "stage0.max", "stage1.p50", "stage1.max"}
    # stage 1 runs 1.5x the layers: its median is its own ranks', not one pooled over both stages
    assert views["stage1.p50"].value > 1.3 * views["stage0.p50"].value
    assert views["stage1.p50"].context["over_ranks"] == [2, 3]
    assert views["stage1.p50"].evidence.startswith("stage 1 (ranks 2, 3): median of 2 rank(s)")
    assert views["rank0"].context["rank"] == 0
    # no value pooled over the stages is left, and the rank skews are within a stage
    assert not any(m.labels.get("view") in (terms.VIEW_P50, terms.VIEW_MAX) for m in fp.metrics.values())
    skews = {m.key for m in fp.metrics.values() if m.name == "rank.skew_ratio"
             and m.labels["metric"] == "step.computing_us"}
    assert skews == {"rank.skew_ratio{metric=step.computing_us,stage=0}",
                     "rank.skew_ratio{metric=step.computing_us,stage=1}"}
    for m in fp.metrics.values():   # every label a value carries is one its metric declares
        assert set(m.labels) <= registry.label_keys(m.name), m.key


def test_the_stage_views_are_named_as_the_reports_say_them():
    assert terms.stage_view(1, "p50") == "stage1.p50"
    assert terms.view_text("stage1.p50") == "stage 1 p50"
    assert terms.base_view("stage1.max") == "max" and terms.base_view("p50") == "p50"
    assert terms.view_stage("stage12.p50") == 12 and terms.view_stage("rank0") is None
    assert terms.view_gated("stage0.p50", ("rank0", "p50")) and not terms.view_gated("stage0.max", ("rank0", "p50"))


def test_without_a_recorded_layout_the_kernel_signature_finds_the_same_stages(tmp_path):
    from perfgate.policy import load_policy
    cap = write_capture(tmp_path / "cap", pipeline_spec(pipeline_layout=False))
    assert not list(cap.glob("*/profiler_metadata.json"))
    fp = fingerprint_capture(load_capture(cap), load_policy())
    st = fp.config["stages"]
    assert st["source"] == stages.SIGNATURE
    assert {s: v["ranks"] for s, v in st["stages"].items()} == {"0": [0, 1], "1": [2, 3]}


def test_the_signature_is_robust_to_timing_and_data_parallel_ranks(tmp_path):
    """Ranks of one program with other durations (seed, a slow rank, warm-up) share one signature
    digest; another stage's does not."""
    from perfgate.policy import load_policy
    policy = load_policy()
    cap = write_capture(tmp_path / "cap", pipeline_spec(dp=3, seed=7, jitter=0.2, rank_slowdown={1: 1.7},
                                                        warmup_factor=2.0, pipeline_layout=False))
    c = load_capture(cap)
    sums = [summarize_rank(r, policy, c.path) for r in c.ranks]
    digests = [stages.signature_digest(stages.kernel_signature(x.metrics)) for x in sums]
    assert digests[0] == digests[1] == digests[2] != digests[3] == digests[4] == digests[5]
    assert not any(stages.COMM_FAMILY.match(f) for f in stages.kernel_signature(sums[0].metrics))
    layout = stages.find_stages(sums)
    assert layout.stages == {0: [0, 1, 2], 1: [3, 4, 5]}


def test_same_program_rule():
    """Same compute families run at least once per step: the calls per family do not matter (a
    count regression on some ranks keeps them one program), another family does."""
    a = {"MatMul": 100.0, "Add": 50.0, "Recompiled": 0.0}
    assert stages.same_program(a, {"MatMul": 101.0, "Add": 50.0})          # one call more
    assert stages.same_program(a, {"MatMul": 200.0, "Add": 50.0})          # a count regression
    assert stages.same_program(a, {"MatMul": 100.0, "Add": 50.0, "Rare": 0.0})   # seen in few steps
    assert not stages.same_program(a, {"MatMul": 100.0, "Add": 50.0, "GatherV2": 1.0})   # embedding
    assert stages.signature_digest(a) == stages.signature_digest({"Add": 3.0, "MatMul": 1.0})


def test_one_program_keeps_the_pooled_views(tmp_path):
    from perfgate.policy import load_policy
    cap = write_capture(tmp_path / "cap", SynthSpec(ranks=4, rank_slowdown={3: 1.4}))
    fp = fingerprint_capture(load_capture(cap), load_policy())
    assert "stages" not in fp.config
    assert set(_views_of(fp)) == {"rank0", "p50", "max"}


def test_real_st_level2_ranks_are_one_stage_by_their_recorded_layout(ascend, tmp_path):
    """msinsight st/level2 ranks 0 and 1 of a PP 2 x DP 2 job: their profiler_metadata.json puts
    both in pipeline stage 0 (pp groups [0, 2] and [1, 3], group_rank 0 in each; ranks 2 and 3,
    stage 1, are not in the fixture). So one stage is present (rank 1, partial, is placed by the
    layout, which the kernel signature could not do) and p50 stays the median of both ranks:
    Computing 231,290 and 230,904 us."""
    from perfgate.policy import load_policy
    src = ascend / "msinsight/test/st/level2"
    if not src.is_dir():
        pytest.skip(f"real LLM capture not found at {src}")
    cap = tmp_path / "cap"
    cap.mkdir()
    for r in (0, 1):
        (cap / f"rank_{r}_ascend_pt").symlink_to(src / f"rank_{r}_ascend_pt", target_is_directory=True)
    assert stages.pipeline_position(cap / "rank_0_ascend_pt") == {"stage": 0, "stages": 2}
    assert stages.pipeline_position(cap / "rank_1_ascend_pt") == {"stage": 0, "stages": 2}
    policy = load_policy()
    c = load_capture(cap)
    sums = [summarize_rank(r, policy, c.path) for r in c.ranks]
    assert [x.meta["pipeline"] for x in sums] == [{"stage": 0, "stages": 2}] * 2
    assert stages.find_stages(sums) is None          # one stage present: the pooled views stay
    fp = fingerprint_capture(c, policy)
    assert "stages" not in fp.config
    comp = _views_of(fp)
    per_rank = [231290.09999999995, 230903.7200000004]
    assert comp["p50"].value == pytest.approx(float(np.median(per_rank)))
    assert comp["rank0"].value == pytest.approx(per_rank[0])


def test_a_recorded_layout_with_two_stages_splits_the_views():
    """The layout decides where every rank records it, partial ranks included; a layout recorded
    by some ranks only falls back to the kernel signature."""
    from perfgate.metrics.summary import RankSummary

    def _summary(rank, stage, partial=False, fams=("MatMul",)):
        metrics = {} if partial else {("kernel.calls_per_step", (("family", f),)): (4.0, "", {}) for f in fams}
        return RankSummary(rank=rank, metrics=metrics, segments={}, operators={}, anatomy=None, checks=[],
                           findings=[], step_time={}, kinds=None, warnings=[], info={}, has_comm=False,
                           has_trace=False, has_step_trace=False, type_available=True, core_available=True,
                           variant="v", steps=["1"], rank_dir="", output_dir="", rank_source="",
                           meta={"pipeline": None if stage is None else {"stage": stage, "stages": 2}},
                           partial=partial)
    layout = stages.find_stages([_summary(0, 0), _summary(1, 1, partial=True), _summary(2, 0), _summary(3, 1)])
    assert layout.source == stages.LAYOUT and layout.stages == {0: [0, 2], 1: [1, 3]} and not layout.unplaced
    loss = ("MatMul", "Loss")
    mixed = stages.find_stages([_summary(0, 0), _summary(1, None), _summary(2, None, fams=loss), _summary(3, None, fams=loss),
                                _summary(4, None, partial=True)])
    assert mixed.source == stages.SIGNATURE and mixed.stages == {0: [0, 1], 1: [2, 3]} and mixed.unplaced == (4,)
    assert "[4]" in stages.unplaced_warning(mixed)[0]


def test_signature_groups_that_are_not_stages_times_data_parallel_keep_the_pooled_views():
    """One rank running a kernel its peers do not (3 + 1), or every rank its own kernels (1 + 1):
    no S x D layout, so no stages from the signature."""
    one_odd = [_summary(r, ("MatMul", "Add")) for r in range(3)] + [_summary(3, ("MatMul", "Add", "NonZero"))]
    assert stages.find_stages(one_odd) is None
    assert stages.find_stages([_summary(0, ("MatMul",)), _summary(1, ("Add",))]) is None


def test_a_four_stage_job_without_a_layout_keeps_its_first_and_last_stage_apart():
    """Stages 1 and 2 of a 4-stage job run the same layer families: one group of 2D ranks beside
    the embedding stage and the head stage of D ranks each. A multiple of D is a stage layout
    (the middle stages pooled, as one program), so the embedding and the head are never pooled
    with the layers."""
    layers = ("MatMul", "FlashAttentionScore", "RmsNorm")
    programs = [("GatherV2",) + layers, layers, layers, layers + ("CrossEntropyLoss",)]
    ranks = [_summary(2 * s + d, fams) for s, fams in enumerate(programs) for d in range(2)]
    found = stages.find_stages(ranks)
    assert found.source == stages.SIGNATURE
    assert found.stages == {0: [0, 1], 1: [2, 3, 4, 5], 2: [6, 7]}


# the job-level p50 -----------------------------------------------------------------------------

def test_the_job_level_p50_is_the_pooled_p50_else_the_largest_stage_p50():
    assert stages.job_p50({"p50": 3, "stage1.p50": 9.0}) == stages.JobValue(3, "p50")   # pooled wins, as is
    got = stages.job_p50({"stage0.p50": 5.0, "stage1.p50": 7.0, "stage1.max": 99.0, "rank0": 50.0})
    assert got == stages.JobValue(7.0, "stage1.p50") and got.stage == 1
    assert got.text() == "p50 of stage 1 (the largest stage p50)"
    assert stages.job_p50({"stage0.p50": 2.0, "stage1.p50": 2.0}).view == "stage0.p50"   # tie: lowest stage
    assert stages.job_p50({"rank0": 1.0, "stage0.max": 2.0}) is None
    assert stages.job_p50({"stage0.p50": None, "stage1.p50": ["a"]}) is None   # no number


def test_job_level_p50s_of_a_pipeline_job_are_the_slowest_stage_s(pipeline_fp):
    job = stages.job_p50_values({k: m.value for k, m in pipeline_fp.metrics.items()})
    st = job["step.time_us{view=p50}"]
    s0, s1 = (pipeline_fp.metrics[f"step.time_us{{view=stage{s}.p50}}"].value for s in (0, 1))
    assert st.value == max(s0, s1) and st.view == f"stage{int(s1 > s0)}.p50"
    fams = {k for k in job if k.startswith("kernel.time_us{")}
    staged = {stages.pooled_p50_key(k)[0] for k in pipeline_fp.metrics
              if k.startswith("kernel.time_us{") and ".p50" in k}
    assert fams == staged   # every family of every stage


def test_job_level_p50s_of_one_stage_are_its_p50_values(tmp_path):
    from perfgate.policy import load_policy
    cap = write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=2, seed=3))
    fp = fingerprint_capture(load_capture(cap), load_policy())
    job = stages.job_p50_values({k: m.value for k, m in fp.metrics.items()})
    p50 = {k: m.value for k, m in fp.metrics.items() if m.labels.get("view") == "p50" and not isinstance(m.value, list)}
    assert {k: v.value for k, v in job.items()} == p50 and {v.view for v in job.values()} == {"p50"}


def test_the_workload_test_reads_the_families_of_every_stage(pipeline_fp):
    """``share.family`` of a pipeline job has no pooled p50; the workload test read rank0 (stage 0's
    families alone) and now reads the job-level p50: every family of every stage."""
    from perfgate.metrics.workload import family_shares
    view, shares = family_shares(pipeline_fp)
    per_stage = {s: {m.labels["family"]: m.value for m in pipeline_fp.metrics.values()
                     if m.name == "share.family" and m.labels.get("view") == f"stage{s}.p50"} for s in (0, 1)}
    assert view == "p50" and set(shares) == set(per_stage[0]) | set(per_stage[1])
    assert set(per_stage[1]) - set(per_stage[0])   # the last stage's own families are compared too
    assert all(v == max(per_stage[s].get(f, 0.0) for s in (0, 1)) for f, v in shares.items())
