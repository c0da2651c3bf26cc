"""A baseline of another workload (another model or job: a CI matrix leg pointed at the wrong
baseline name) cannot judge a capture: ``check`` says so with exit 4 (INCOMPATIBLE_BASELINE),
naming how little the two sides' kernel families overlap, instead of a REGRESSION whose causes
are every family of each side "new" or "gone". One job's captures at other profiler levels or
exports, and real changes of one workload (a family added, a family much slower), are judged as
before. Real captures from ../shared/fixtures/ascend; synthetic ones from perfgate.synth."""
import dataclasses
import itertools

import pytest

from perfgate import terms
from perfgate.compare import rules
from perfgate.app.run import fingerprint_path
from perfgate.synth.writer import DEFAULT_FAMILIES, DIFFUSION_FAMILIES, SynthSpec, write_capture
from test_causes_consistency import _check as check_pair


def _check(base, cand, tmp_path):
    """(exit code, console text, JSON doc) of ``check`` of ``cand`` against ``base`` saved as baseline."""
    code, console, doc, _ = check_pair(base, cand, tmp_path)
    return code, "\n".join(console), doc


@pytest.fixture(scope="module")
def real(ascend, policy):
    t = ascend / "msinsight" / "test"
    caps = {"text/level0": t / "data/pytorch/text/level0", "text/level1": t / "data/pytorch/text/level1",
            "text/level2": t / "data/pytorch/text/level2", "db/level1": t / "data/pytorch/db/level1",
            "st/level2": t / "st/level2"}
    return {k: fingerprint_path(v, policy, workers=1) for k, v in caps.items()}, caps


def test_real_captures_of_two_models_are_another_workload_exit_4(real, tmp_path):
    fps, caps = real
    code, out, doc = _check(caps["text/level1"], caps["st/level2"], tmp_path)
    assert code == 4 and doc["verdict"] == terms.INCOMPATIBLE, out
    assert out.startswith("perfgate: INCOMPATIBLE_BASELINE (exit 4)")
    assert ("not the same workload: the two sides share 7 of 94 kernel families, which hold 93% of the "
            "baseline's ΣDuration and 10% of the candidate's") in doc["error"]["message"]
    # nothing was judged: the comparisons stay for reference, none failing, no causes
    assert doc["comparisons"] and not any(c["fails"] for c in doc["comparisons"]) and doc["causes"] == []
    assert doc["counts"]["gated_regressions"] == 0 and doc["counts"]["gated"]["regression"] > 100
    import re
    shown = re.search(r"gated metrics \(compared for reference, not judged\): (\d+) — (\d+) worse", out)
    assert shown and int(shown.group(2)) == doc["counts"]["gated"]["regression"], out
    md = (tmp_path / "out" / "perfgate-report.md").read_text()
    assert "Compared for reference, not judged" in md and "🔴 |" not in md and "no cause found" not in md
    assert "<failure" not in (tmp_path / "out" / "perfgate-junit.xml").read_text()
    # either way round
    why = rules._other_workload(fps["st/level2"], fps["text/level1"])
    assert why and "share 7 of 94 kernel families" in why and "10% of the baseline's" in why


def test_one_jobs_captures_at_other_levels_and_exports_are_the_same_workload(real):
    fps, _ = real
    same_job = [k for k in fps if k != "st/level2"]
    for a, b in itertools.permutations(same_job, 2):
        assert rules._other_workload(fps[a], fps[b]) is None, (a, b)


def test_a_new_dominant_family_is_a_regression_not_another_workload(tmp_path):
    """One workload gaining a family that takes most of the step: a REGRESSION naming it (the
    family sets still overlap: 10 of 11)."""
    heavy = ("aclnnHeavy_HeavyAiCore_Heavy", "Heavy", "AI_CORE", 8, 2000.0)
    base = write_capture(tmp_path / "B", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "C", SynthSpec(seed=2, families=DEFAULT_FAMILIES + (heavy,)))
    code, out, doc = _check(base, cand, tmp_path)
    assert code == 1 and doc["verdict"] == terms.FAIL, out
    assert any(c["subject"] == heavy[0] and c["fails"] for c in doc["causes"])


def test_synthetic_models_with_disjoint_kernels_are_another_workload(tmp_path):
    """Same step shape, none of the same kernels (only the allreduce is shared): exit 4, no causes."""
    other = tuple((f"aclnnOther{i}_Other{i}AiCore_Other{i}", f"Other{i}") + f[2:] for i, f in enumerate(DEFAULT_FAMILIES))
    base = write_capture(tmp_path / "B", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "C", SynthSpec(seed=1, families=other))
    code, out, doc = _check(base, cand, tmp_path)
    assert code == 4 and "not the same workload: the two sides share 1 of 21 kernel families" in doc["error"]["message"], out
    assert doc["causes"] == []


def test_a_model_sharing_its_heaviest_kernels_is_judged(tmp_path):
    """A diffusion-like step sharing the LLM-like step's two heaviest families (FlashAttention,
    MatMul) is judged metric by metric: the shared families hold most of both sides' time."""
    base = write_capture(tmp_path / "B", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "C", SynthSpec(seed=1, families=DIFFUSION_FAMILIES))
    code, out, doc = _check(base, cand, tmp_path)
    assert code == 1 and doc["verdict"] == terms.FAIL, out


def test_not_applied_across_a_toolchain_change_or_with_few_families(real):
    """Kernel names may change with CANN / torch_npu: across a toolchain change the rule stays
    silent (per-kernel metrics are then informational anyway); nor with under 5 families a side."""
    fps, _ = real
    a, b = fps["text/level1"], fps["st/level2"]
    assert rules._other_workload(a, b)
    moved = dataclasses.replace(b, config=dict(b.config, cann_version="9.0.0"))
    base = dataclasses.replace(a, config=dict(a.config, cann_version="8.0.0"))
    assert rules._other_workload(base, moved) is None
    few = dataclasses.replace(b, metrics={k: m for k, m in b.metrics.items() if m.name != "share.family"
                                          or m.labels.get("family") in sorted({x.labels["family"] for x in b.metrics.values()
                                                                                if x.name == "share.family"})[:4]})
    assert rules._other_workload(a, few) is None


def test_repeated_captures_of_two_workloads_are_refused(tmp_path, text_captures):
    """Several captures of one side are repeated runs of one commit: a real resnet-like capture
    and a synthetic LLM-like one are refused with exit 2 (they were
    pooled, "model layers 5 -> 4.5"), for baseline save, check and calibrate."""
    from click.testing import CliRunner

    from perfgate.cli import main
    llm = write_capture(tmp_path / "llm", SynthSpec(seed=1))
    llm2 = write_capture(tmp_path / "llm2", SynthSpec(seed=2))
    real = text_captures / "level1"
    run = lambda *a: CliRunner().invoke(main, list(map(str, a)), env={})
    for args in (("baseline", "save", "--name", "mix", real, llm, "--baseline-dir", tmp_path / "bl"),
                 ("calibrate", llm, llm2, real, "--out", tmp_path / "c.yaml")):
        r = run(*args)
        assert r.exit_code == 2, r.output
        assert "are not the same workload: the two sides share" in r.output, r.output
        assert "repeated captures of one side must be the same job" in r.output
    assert not (tmp_path / "bl" / "mix.json").exists() and not (tmp_path / "c.yaml").exists()
