"""Kernel family identity: the policy's volatile-part rules, one test per naming
kind, and renames in the family comparison."""
import csv
import os
import re

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
    assert [k for k, _ in policy.family_suffix.volatile] == ["inductor_hash", "hex_hash", "triton_config"]


def test_a_hash_followed_by_a_numeric_suffix(policy):
    """The volatile rules and the numeric suffix strip run in passes until the name stops
    changing: a hash with the row's numeric suffix after it goes, then the kernel index."""
    h52 = "c" + "emi5yor3uh3muxgzlaoqs5wrpjk7q6xod6dgmymw2y5xd6wk3skab"[:51]
    assert _fam(policy, f"triton_poi_fused_x_0_{h52}_12", f"triton_poi_fused_x_0_{h52}", "triton_poi_fused_x_3") == [
        "triton_poi_fused_x"] * 3
    hex64 = "cd18fc9fb6494384932af3bda6fe8102c0fa7a26774e22af3993a69e2ca79565"
    assert _fam(policy, f"trans_TransData_{hex64}_12", f"Name_{hex64}", f"Name_{hex64[:16]}_0_1") == [
        "trans_TransData", "Name", "Name"]
    assert _fam(policy, "trans_TransData_BLOCK_M_128_BLOCK_N_64_num_warps_4_12") == ["trans_TransData"]


def test_hex_hashes_need_digits_and_letters(policy):
    """At least 16 hex digits holding a digit and a letter a-f: words of hex letters and plain
    numbers are not hashes (a plain number is still a numeric suffix)."""
    assert _fam(policy, "Name_deadbeefcafebabe", "Name_cafe0123", "Name_DEADBEEF01234567") == [
        "Name_deadbeefcafebabe", "Name_cafe0123", "Name_DEADBEEF01234567"]
    assert _fam(policy, "Name_0123456789abcdef", "Name_0123456789abcdefx") == ["Name", "Name_0123456789abcdefx"]


def test_lower_case_config_keys(policy):
    """Triton launch options (num_warps, num_stages) and aiter's lower-case keys (cache_modifier,
    activation; string values upper-cased) after or instead of upper-case KEY_value groups."""
    got = _fam(policy, "matmul_kernel_BLOCK_M_128_BLOCK_N_64_num_warps_4",
               "matmul_kernel_BLOCK_M_64_BLOCK_N_64_num_warps_8_num_stages_3",
               "_gemm_a8w8_blockscale_kernel_GROUP_K_128_BLOCK_SIZE_M_64_EVEN_K_1_GRID_MN_64_cache_modifier_CG",
               "_gemm_a8w8_blockscale_kernel_GROUP_K_128_BLOCK_SIZE_M_32_EVEN_K_0_GRID_MN_16_cache_modifier_NONE",
               "gemm_kernel_cache_modifier_CG_activation_NONE", "gemm_kernel_cache_modifier_CA_activation_SILU",
               "_attn_fwd_HEAD_DIM_64_BLOCK_M_128_BLOCK_N_32_STAGE_3_num_warps_4",
               "_fused_kernel_BLOCK_SIZE_M_64_SCALE_FMT_E8M0_HAVE_WEIGHTS_0_num_warps_4_cache_modifier_NONE")
    assert got == ["matmul_kernel"] * 2 + ["_gemm_a8w8_blockscale_kernel"] * 2 + ["gemm_kernel"] * 2 + [
        "_attn_fwd", "_fused_kernel"]
    # a lower-case key first is read only for known keys: a snake_case name's end is no key
    assert _fam(policy, "fused_moe_kernel_topk_2_num_tokens_NONE") == ["fused_moe_kernel_topk_2_num_tokens_NONE"]


#: names whose family must stay what it always was
KEEP = {"aclnnMatmul_MatMulV3Common_MatMulV3": "aclnnMatmul_MatMulV3Common_MatMulV3",
        "MC2_ALLGATHER_MATMUL_4": "MC2_ALLGATHER_MATMUL",
        "hcom_allReduce__586_0_1": "hcom_allReduce",
        "trans_TransData_12": "trans_TransData",
        "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad":
            "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
        "atomic_memset-1_134_2208226_2_0": "atomic_memset-1",
        "Conv2DBackpropFilter6_MemSet": "Conv2DBackpropFilter6_MemSet",
        "triton_poi_fused_add_mul_0": "triton_poi_fused_add_mul"}


def test_known_names_keep_their_family(policy):
    assert dict(zip(KEEP, _fam(policy, *KEEP))) == KEEP


#: the rules before hex hashes, lower-case config keys and the passes with the suffix strip:
#: each volatile rule at the very end of the name, in order, then the numeric suffix once
_LEGACY = (re.compile(r"_[a-z2-7]{52}$"), re.compile(r"(?:_[A-Z][A-Z0-9_]*?_(?:\d+|NONE)){2,}$"))
_LEGACY_SUFFIX = re.compile(r"(?:_+\d+)+$")


def _legacy_family(name: str) -> str:
    f = name
    for rx in _LEGACY:
        for _ in range(32):
            new = rx.sub("", f)
            if new == f or not new:
                break
            f = new
    return _LEGACY_SUFFIX.sub("", f) or name


#: real names whose family the current rules change from the legacy one, with the reason
#: (none so far: every name in the shared captures keeps its family)
JUSTIFIED: dict = {}


def _real_kernel_names(root) -> tuple[set, list]:
    """Every Name / Op Name cell of every kernel_details*.csv and op_summary*.csv under ``root``."""
    names, files = set(), []
    for d, _, fs in os.walk(root):
        for f in sorted(fs):
            if re.fullmatch(r"(kernel_details|op_summary).*\.csv", f):
                files.append(os.path.join(d, f))
                with open(files[-1], newline="", encoding="utf-8-sig") as fh:
                    rows = csv.reader(fh)
                    head = [c.strip() for c in next(rows)]
                    col = head.index("Name") if "Name" in head else head.index("Op Name")
                    names.update(r[col].strip() for r in rows if len(r) > col and r[col].strip())
    return names, files


@pytest.mark.real
def test_every_real_kernel_name_keeps_its_family(ascend, policy):
    """Over every kernel name of the shared real captures the rules give each name the family
    the legacy rules gave it (so the family set is unchanged), and a family is its own family."""
    names, files = _real_kernel_names(ascend)
    assert len(files) >= 14 and len(names) >= 300, (len(files), len(names))
    names = sorted(names)
    got = dict(zip(names, _fam(policy, *names)))
    changed = {n: (_legacy_family(n), f) for n, f in got.items() if f != _legacy_family(n)}
    assert changed == {n: JUSTIFIED[n] for n in changed if n in JUSTIFIED}
    assert set(changed) == set(JUSTIFIED)
    kept = [n for n in names if n not in JUSTIFIED]
    assert {_legacy_family(n) for n in kept} == {got[n] for n in kept}
    fams = sorted(set(got.values()))
    assert _fam(policy, *fams) == fams


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
