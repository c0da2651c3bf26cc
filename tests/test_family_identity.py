"""Kernel family identity (issue 17): the policy's volatile-part rules, one test per naming
kind, and renames in the family comparison."""
import pandas as pd
import pytest
import yaml

from perfgate.compare.families import compare_operators
from perfgate.errors import PolicyError
from perfgate.metrics import kernels as km
from perfgate.policy import load_policy
from perfgate.policy.families import FamilyRules


def _fam(policy, *names):
    return km.family_of(pd.Series(list(names)), policy.family_suffix).astype(str).tolist()


def test_numeric_suffixes(policy):
    assert _fam(policy, "hcom_allReduce__586_0_1", "hcom_allReduce__170_1_1", "trans_TransData_12") == [
        "hcom_allReduce", "hcom_allReduce", "trans_TransData"]
    # names whose digits are part of the operator keep them
    assert _fam(policy, "Conv2DBackpropFilter6_MemSet", "aclnnMatmul_MatMulV3Common_MatMulV3") == [
        "Conv2DBackpropFilter6_MemSet", "aclnnMatmul_MatMulV3Common_MatMulV3"]


def test_inductor_hash_after_the_index(policy):
    """TORCHINDUCTOR_HASH_IN_KERNEL_NAMES=1 (pytorch PR #138645) appends a 52-character
    base32 hash after the kernel index; with and without it the family is the same."""
    hashed = "triton_poi_fused_embedding_1_cemi5yor3uh3muxgzlaoqs5wrpjk7q6xod6dgmymw2y5xd6wk3sk"
    other = "triton_poi_fused_embedding_1_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    assert _fam(policy, hashed, other, "triton_poi_fused_embedding_1") == ["triton_poi_fused_embedding"] * 3
    assert isinstance(policy.family_suffix, FamilyRules)
    assert [k for k, _ in policy.family_suffix.volatile] == ["inductor_hash", "triton_config"]


def test_triton_and_aiter_configs(policy):
    """Triton constexpr names (triton PR #6164) and aiter make_kernel_repr names carry the
    tuning config as _KEY_value groups."""
    got = _fam(policy, "_attn_fwd_HEAD_DIM_64_BLOCK_M_128_BLOCK_N_32_STAGE_3",
               "_attn_fwd_HEAD_DIM_64_BLOCK_M_64_BLOCK_N_64_STAGE_3",
               "_attn_bwd_preprocess_BLOCK_M_128_HEAD_DIM_64",
               "_batched_gemm_a8w8_kernel_HAS_BIAS_1_BLOCK_SIZE_M_256_BLOCK_SIZE_N_256_BLOCK_SIZE_K_64_"
               "GROUP_SIZE_M_4_EVEN_K_1_GRID_MN_64",
               "_topk_kernel_M_NONE_K_8_BLOCK_16")
    assert got == ["_attn_fwd", "_attn_fwd", "_attn_bwd_preprocess", "_batched_gemm_a8w8_kernel", "_topk_kernel"]
    # one upper-case group is not a config: only the numeric suffix goes
    assert _fam(policy, "MC2_ALLGATHER_MATMUL_4") == ["MC2_ALLGATHER_MATMUL"]


def test_volatile_rules_live_in_the_policy(tmp_path, policy):
    doc = yaml.safe_load(open(policy.path))
    doc["fingerprint"]["family_volatile"] = None
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    plain = load_policy(p)
    assert plain.family_suffix.pattern == r"(?:_+\d+)+$"
    assert _fam(plain, "_attn_fwd_HEAD_DIM_64_BLOCK_M_128") == ["_attn_fwd_HEAD_DIM_64_BLOCK_M"]
    assert policy.family_suffix.pattern != plain.family_suffix.pattern   # a fingerprint config facet
    doc["fingerprint"]["family_volatile"] = [{"kind": "x", "regex": "("}]
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(PolicyError, match=r"fingerprint\.family_volatile\[0\]\.regex"):
        load_policy(p)


def _view(*fams):
    return {"families": [dict(family=f, calls_per_step=n, core_type=core, op_class=cls, category="Vector",
                              share=share, sum_dur_us=share * 1000) for f, n, core, cls, share in fams]}


def test_a_family_gone_while_a_twin_appears_is_a_rename():
    base = _view(("k_old_tagA", 8, "AI_VECTOR_CORE", "elementwise", 0.10), ("MatMulV3", 16, "AI_CORE", "matmul", 0.5))
    cand = _view(("k_old_tagB", 8, "AI_VECTOR_CORE", "elementwise", 0.11), ("MatMulV3", 16, "AI_CORE", "matmul", 0.5))
    r = compare_operators(base, cand)
    assert r["renames"] == [{"from": "k_old_tagA", "to": "k_old_tagB"}]
    row = next(x for x in r["families"] if x["family"] == "k_old_tagB")
    assert (row["status"], row["renamed_from"], row["count_delta"], row["share_delta_pp"]) == (
        "renamed", "k_old_tagA", 0, pytest.approx(1.0))
    assert not any(x["status"] in ("appeared", "disappeared") for x in r["families"])
    # other calls per step, or another core type: gone + new, not a rename
    for n, core in ((9, "AI_VECTOR_CORE"), (8, "AI_CORE")):
        cand2 = _view((f"k_old_tagB", n, core, "elementwise", 0.11), ("MatMulV3", 16, "AI_CORE", "matmul", 0.5))
        r2 = compare_operators(base, cand2)
        assert r2["renames"] == [] and {x["status"] for x in r2["families"]} >= {"appeared", "disappeared"}
    # two candidates for one gone family: ambiguous, left as gone + new
    cand3 = _view(("a", 8, "AI_VECTOR_CORE", "elementwise", 0.05), ("b", 8, "AI_VECTOR_CORE", "elementwise", 0.05))
    assert compare_operators(base, cand3)["renames"] == []


def test_report_names_the_rename():
    from types import SimpleNamespace

    from perfgate.report.families import operator_section
    base = _view(("k_old_tagA", 8, "AI_VECTOR_CORE", "elementwise", 0.10))
    cand = _view(("k_old_tagB", 8, "AI_VECTOR_CORE", "elementwise", 0.10))
    ops = {"rank": 0, "total_sum_dur_us": 100.0, "kernel_file": "k.csv", "families": []}
    lines = operator_section(SimpleNamespace(detail={"operators": ops,
                                                     "operator_compare": compare_operators(base, cand)}))
    assert ("- `k_old_tagA` renamed to `k_old_tagB` (same calls per step, core type and Type class; "
            "informational)") in lines
    assert any(x.startswith("| `k_old_tagB` | renamed | 8 → 8 | +0 |") for x in lines)
