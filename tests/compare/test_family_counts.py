"""Per-family comparisons across ranks and policies: a partial rank is not every family gone, a
median count no rank ran says which ranks ran what, another top_n still compares the families both
sides recorded, and a doubled layer anchor is a family change, not the model structure."""
from __future__ import annotations

import json
import shutil

import pytest

from _cli import run


def _partial_rank0(path):
    out = path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    for f in out.iterdir():
        if f.name not in ("step_trace_time.csv", "communication.json"):
            f.unlink() if f.is_file() else shutil.rmtree(f)
    return path


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def test_partial_rank0_is_not_every_family_gone(copy_capture, tmp_path):
    """level1 against itself with rank 0 cut down to step_trace_time.csv + communication.json:
    the rank0 view of the kernel metrics was not measured on that side. It read as 0 (every
    family "gone", hcom_allReduce the cause of a REGRESSION with 54 causes; the other way round
    every family "new"). It is not compared, with the reason, as the p50 view already was."""
    full = copy_capture("level1", "full")
    part = _partial_rank0(copy_capture("level1", "part"))
    bl = tmp_path / "bl"
    for name, cap in (("full", full), ("part", part)):
        r = run("baseline", "save", "--name", name, "--baseline-dir", bl, cap)
        assert r.exit_code == 0, r.output
    for base, cand in (("full", part), ("part", full)):
        out = tmp_path / f"o-{base}"
        r = run("check", "--baseline", base, "--baseline-dir", bl, cand, "--out", out,
                "--allow-partial")   # most gated metrics are not comparable: judge the rest
        assert r.exit_code == 0 and "REGRESSION" not in r.output, r.output
        res = _result(out)
        assert res["counts"]["gated"]["regression"] == res["counts"]["gated"]["improvement"] == 0
        assert not res["causes"]
        rank0 = [c for c in res["comparisons"] if c["name"] == "kernel.calls_per_step"
                 and c["labels"].get("view") == "rank0"]
        assert rank0 and all(c["verdict"] == "incomparable" for c in rank0)
        side = "candidate" if base == "full" else "baseline"
        assert f"rank 0 holds no kernel table in the {side} (a partial rank" in rank0[0]["reason"]


def test_a_doubled_layer_anchor_is_the_family_not_the_model_structure(tmp_path):
    """FlashAttention (the attention anchor) launched twice in every layer, every other family
    unchanged: the layer count doubles (each FA starts a layer), and the cause read "model
    structure: model layers 6 -> 12" with FA folded into it, unnamed. One family changed its
    calls while the others kept theirs: FA is the cause. A real extra layer (6 -> 7, every layer
    family more) stays a model-structure cause (tests/metrics/test_segments.py)."""
    from perfgate.synth import SynthSpec, write_capture
    from perfgate.synth import transformer as tf
    fa = tf.ATTENTION[3]
    assert fa[0].startswith("aclnnFlashAttentionScore")
    base_seq = tf.transformer_sequence(6)
    doubled = []
    for k in base_seq:
        doubled += [k, k] if k is fa else [k]
    write_capture(tmp_path / "a", SynthSpec(sequence=base_seq, overlap=1.0, seed=1))
    write_capture(tmp_path / "b", SynthSpec(sequence=tuple(doubled), overlap=1.0, seed=1))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert run("baseline", "save", "--name", "m", "--baseline-dir", bl, tmp_path / "a").exit_code == 0
    r = run("check", "--baseline", "m", "--baseline-dir", bl, tmp_path / "b", "--out", out)
    causes = _result(out)["causes"]
    assert causes and causes[0]["kind"] == "kernel family" and causes[0]["subject"] == fa[0], r.output
    assert not any(x["kind"] == "model structure" for x in causes), r.output
    structure = [c["key"] for c in _result(out)["comparisons"] if c["name"] == "layer.count" and c["gated"]
                 and c["verdict"] == "regression"]
    assert structure and set(structure) <= set(causes[0]["explains"])


@pytest.mark.real
def test_a_count_between_two_ranks_says_which_ranks_ran_what(copy_capture, tmp_path):
    """InplaceRelu doubled on rank 1 of 2: "calls 7 -> 10.5/step", a count no rank ran, with no
    word of the ranks. The p50 count still gates (half the ranks regressed) and now says so."""
    from perfgate.synth.mutate import add_calls
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    add_calls(cand / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT", "aclnnInplaceRelu_Relu_Relu", 2)
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    assert ("kernel family aclnnInplaceRelu_Relu_Relu: calls 7 -> 10.5/step (median of 2 ranks, no rank's "
            "count: rank0 7 -> 7; the other rank 7 -> 14)") in r.output


def test_an_integer_median_of_two_ranks_is_still_named(tmp_path):
    """Rank 1 of 2 from 12 to 24 Add calls: "calls 12 -> 18/step", an integer no rank ran, had
    no note (only a fractional median had one)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    add = "aclnnAdd_AddAiCore_Add"
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, ranks=2))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, ranks=2, extra_calls={add: 2}, inject_ranks=(1,)))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    assert "(median of 2 ranks, no rank's count: rank0 12 -> 12; the other rank 12 -> 24)" in r.output, r.output


def test_a_policy_with_another_top_n_still_compares_the_families_both_sides_recorded(tmp_path):
    """Baseline fingerprinted with top_n 10, check with top_n 5: every per-family call count was
    'not compared, policy top_n differs' and a doubled Cast count was 'unexplained'. A family's
    calls do not depend on top_n: the families both sides recorded are compared."""
    import json
    from perfgate.policy import DEFAULT_POLICY
    from perfgate.synth.writer import SynthSpec, write_capture
    text = open(DEFAULT_POLICY, encoding="utf-8").read()
    assert "\n  top_n: 10" in text
    pol = tmp_path / "top5.yaml"
    pol.write_text(text.replace("\n  top_n: 10", "\n  top_n: 5"), encoding="utf-8")
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--policy", pol, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1 and "REGRESSION kernel family aclnnCast_CastAiCore_Cast: calls 10 -> 20/step" in r.output, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    not_compared = {c["key"] for c in res["comparisons"] if c["gated"] and c["verdict"] == "incomparable"}
    assert not_compared == {"kernel.topn{view=p50}", "kernel.topn{view=rank0}"}, not_compared
    assert not res["unexplained"]
