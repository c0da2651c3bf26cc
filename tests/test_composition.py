"""Parts of the whole (issue 18, case Q13): a share is judged by its part's own ΣDuration
relative to the device's scale factor (median of per-family ratios), so one family's speed-up
is that family's improvement and nobody else's regression; drift of the whole device changes
no part; a slowed family fails as itself."""
import pytest

from perfgate import terms
from perfgate.compare.composition import scale_factor
from perfgate.gate import check, save_baseline
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.writer import DEFAULT_FAMILIES

MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"
ALL = {f[0]: 1.05 for f in DEFAULT_FAMILIES}


def _gate(tmp_path, policy, base_specs, cand_specs):
    store = BaselineStore(tmp_path / "bl")
    bases = [write_capture(tmp_path / f"b{i}", s) for i, s in enumerate(base_specs)]
    cands = [write_capture(tmp_path / f"c{i}", s) for i, s in enumerate(cand_specs)]
    save_baseline(bases if len(bases) > 1 else bases[0], "main", policy=policy, store=store, env={})
    return check(cands if len(cands) > 1 else cands[0], "main", policy=policy, store=store, env={})


def _gated(result, verdict):
    return {c.key for c in result.comparisons if c.gated and c.verdict == verdict}


def test_one_family_faster_passes_with_only_that_family_improved(tmp_path, policy):
    r = _gate(tmp_path, policy, [SynthSpec(slowdown={MATMUL: 1.3})], [SynthSpec()])
    assert r.status == terms.PASS and r.exit_code == 0
    assert not _gated(r, terms.REGRESSION)
    improved = _gated(r, terms.IMPROVEMENT)
    assert f"share.family{{family={MATMUL},view=rank0}}" in improved
    assert "share.category{category=MatMul,view=rank0}" in improved
    # no other part improved or regressed: the others' shares rose only because MatMul shrank
    parts = {k for k in improved if k.startswith("share.")}
    assert all("MatMul" in k or "AI_CORE" in k for k in parts), parts
    ar = next(c for c in r.comparisons if c.key == "share.family{family=hcom_allReduce,view=rank0}")
    assert ar.candidate - ar.baseline > 0.02 and ar.verdict == terms.UNCHANGED   # +3 pp, a consequence
    assert ar.stats["composition"]["relative"] == pytest.approx(1.0, abs=0.02)


def test_same_family_slower_fails_as_itself(tmp_path, policy):
    r = _gate(tmp_path, policy, [SynthSpec()], [SynthSpec(slowdown={MATMUL: 1.3})])
    assert r.status == terms.FAIL and r.exit_code == 1
    failing = {c.key for c in r.comparisons if c.fails}
    assert f"share.family{{family={MATMUL},view=rank0}}" in failing
    others = [k for k in failing if k.startswith("share.") and "MatMul" not in k and "AI_CORE" not in k]
    assert not others, others
    assert r.causes and r.causes[0]["subject"] == MATMUL and r.causes[0]["fails"]


def test_device_wide_drift_changes_no_part(tmp_path, policy):
    r = _gate(tmp_path, policy, [SynthSpec()], [SynthSpec(slowdown=ALL, comm_us=1500.0 * 1.05)])
    assert r.status == terms.PASS and r.exit_code == 0
    assert not _gated(r, terms.REGRESSION) and not _gated(r, terms.IMPROVEMENT)
    c = next(c for c in r.comparisons if c.key == f"share.family{{family={MATMUL},view=rank0}}")
    assert c.stats["composition"]["scale"] == pytest.approx(1.05, abs=0.01)


def test_five_v_five_one_family_faster_passes(tmp_path, policy):
    r = _gate(tmp_path, policy, [SynthSpec(seed=s, slowdown={MATMUL: 1.3}) for s in range(5)],
              [SynthSpec(seed=10 + s) for s in range(5)])
    assert r.exit_code == 0, [c.reason for c in r.comparisons if c.fails]
    assert not _gated(r, terms.REGRESSION)
    assert f"share.family{{family={MATMUL},view=rank0}}" in _gated(r, terms.IMPROVEMENT)


def test_scale_not_identified_when_most_families_changed(tmp_path, policy):
    from perfgate.run import fingerprint_path
    # seven of the ten measured families change, each by its own factor: no majority agrees on a
    # scale (a majority moving by one common factor is, by construction, device drift)
    half = {"aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore": 1.3, MATMUL: 1.6,
            "aclnnAdd_AddAiCore_Add": 2.0, "aclnnRmsNorm_RmsNormAiCore_RmsNorm": 2.5,
            "aclnnSwiGlu_SwiGluAiCore_SwiGlu": 1.2, "aclnnCast_CastAiCore_Cast": 1.4, "trans_TransData": 1.8}
    b = fingerprint_path(write_capture(tmp_path / "b", SynthSpec()), policy)
    c = fingerprint_path(write_capture(tmp_path / "c", SynthSpec(slowdown=half)), policy)
    s = scale_factor(b, c, "rank0")
    assert not s.identified and "more than half" in s.why
    assert s.value == pytest.approx(s.device)   # falls back to the plain share comparison


def test_calibrate_refuses_mixed_profiler_levels(text_captures, tmp_path, policy):
    """Level0 + Level1 + Level2 are three configurations, not three repeats (issue 18)."""
    from perfgate.errors import UsageError
    from perfgate.gate import calibrate
    with pytest.raises(UsageError, match="profiler_level|type_available") as e:
        calibrate([text_captures / lvl for lvl in ("level0", "level1", "level2")], tmp_path / "p.yaml",
                  policy=policy)
    assert "same job" in e.value.message and not (tmp_path / "p.yaml").exists()
