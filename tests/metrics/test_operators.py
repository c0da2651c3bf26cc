"""The kernel-family view: categories (most specific rule wins), phases, pipeline bound, MFU,
suggestions and the family-level comparison. Real captures are read in place; synthetic ones
come from perfgate.synth with jitter 0, so every duration is exactly the constructed one."""
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from perfgate import terms
from perfgate.cli import main
from perfgate.errors import EXIT_INVALID_CAPTURE, EXIT_USAGE, InvalidCaptureError, PolicyError
from perfgate.app.gate import check, save_baseline
from perfgate.app.run import fingerprint_path
from perfgate.ingest import load_capture
from perfgate.ingest.kernels import read_kernels
from perfgate.metrics import kernels as km
from perfgate.metrics import operators as opv
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.mfu import dtype_of, matmul_flops
from perfgate.compare.families import compare_operators
from perfgate.policy import load_policy
from perfgate.report import render_markdown
from perfgate.report.families import fold_categories
from perfgate.store.baselines import BaselineStore
from perfgate.synth.writer import DIFFUSION_FAMILIES, SynthSpec, write_capture

REPO = Path(__file__).resolve().parents[2]
DEFAULT = (REPO / "perfgate" / "policies" / "default.yaml").read_text()
MSTT_2023 = ("mstt/profiler/msprof_analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv")
MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"


def policy_with(tmp_path, extra: str, name="p.yaml", base=DEFAULT):
    """``base`` with the top-level sections of ``extra`` replacing its own (what appending them
    did before duplicate keys became a policy error)."""
    import yaml
    doc = yaml.safe_load(base)
    doc.update(yaml.safe_load(extra) or {})
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_policy(p)


def cli(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


# ---------------------------------------------------------------- categories: most specific wins

def _table(rows):
    df = pd.DataFrame(rows, columns=["name", "op_type", "core_type"])
    for c in df:
        df[c] = df[c].astype("category")
    df["row"] = np.arange(1, len(df) + 1)
    return df


def test_most_specific_rule_wins_regardless_of_order(tmp_path):
    pol = policy_with(tmp_path, "", base="""
fingerprint:
  categories:
    - {category: Other,  core: '^AI_CORE$'}
    - {category: MatMul, type: 'MatMul', core: '^AI_CORE$'}
    - {category: Vector, core: '^AI_VECTOR_CORE$', priority: -1}
    - {category: Norm,   type: 'Norm'}
metrics: {}
""")
    df = _table([("mm", "MatMulV2", "AI_CORE"), ("x", "Conv2D", "AI_CORE"), ("ln", "LayerNorm", "AI_VECTOR_CORE"),
                 ("add", "Add", "AI_VECTOR_CORE"), ("s", "SDMA", "SDMA")])
    cats = km.categorize(df, pol.categories).astype(str).tolist()
    # 2 fields beat 1 field; at 1 field priority 0 (Norm) beats priority -1 (Vector); no match -> unknown
    assert cats == ["MatMul", "Other", "Norm", "Vector", "unknown"]


def test_equal_specificity_overlap_is_a_policy_error_naming_both(tmp_path, ascend):
    p = tmp_path / "p.yaml"
    # a second core-only fallback for AI_VECTOR_CORE at the same priority: TransData (no Type rule)
    # matches both. (An AI_CORE twin of "Other" would be harmless here: every AI_CORE kernel of
    # this capture is decided by a more specific Type rule first.)
    p.write_text(DEFAULT.replace("    - {category: Other,  core: '^(AI_CORE|MIX_AIC)$', priority: -2}",
                                 "    - {category: Other,  core: '^(AI_CORE|MIX_AIC)$', priority: -2}\n"
                                 "    - {category: Elementwise, core: '^AI_VECTOR_CORE$', priority: -2}"))
    code, out = cli("fingerprint", "--policy", p, ascend / "msinsight/test/data/pytorch/text/level1")
    assert code == EXIT_USAGE
    assert "fingerprint.categories[8]" in out and "fingerprint.categories[10]" in out and "equally specific" in out
    assert "trans_TransData" in out
    dup = tmp_path / "d.yaml"
    dup.write_text(DEFAULT.replace("    - {category: DSA,    core: '^DSA', priority: 1}",
                                   "    - {category: DSA,    core: '^DSA', priority: 1}\n"
                                   "    - {category: Copy,   core: '^DSA', priority: 1}"))
    with pytest.raises(PolicyError, match=r"categories\[4\].*same match as categories\[3\]"):
        load_policy(dup)


# ---------------------------------------------------------------- must show 1: real captures

def _raw(path):
    return pd.read_csv(path, sep=",", dtype=str).assign(
        dur=lambda d: d["Duration(us)"].astype(float))


@pytest.mark.real
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_real_category_shares_and_bound_families(text_captures, policy, level):
    fp = fingerprint_capture(load_capture(text_captures / level, pmu=True), policy)
    ops = fp.detail["operators"]
    raw = _raw(text_captures / level / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    total = raw["dur"].sum()
    typ = raw["Type"]
    expected = {
        "Comm": raw.loc[raw["Accelerator Core"] == "HCCL", "dur"].sum() / total,
        "Conv": raw.loc[typ.str.startswith("Conv"), "dur"].sum() / total,
        "MatMul": raw.loc[typ.str.contains("MatMul"), "dur"].sum() / total,
        "DSA": raw.loc[raw["Accelerator Core"] == "DSA_SQE", "dur"].sum() / total,
    }
    expected["Vector"] = 1 - sum(expected.values())
    got = {c["category"]: c["share"] for c in ops["categories"]}
    assert got == pytest.approx(expected, abs=1e-6)
    assert ops["unknown"] == []                     # every kernel of this capture has a rule
    for cat, v in expected.items():
        assert fp.metrics[f"share.category{{category={cat},view=rank0}}"].value == pytest.approx(v, abs=1e-6)
    fams = {f["family"]: f for f in ops["families"]}
    assert fams["hcom_allReduce"]["bound"] == "communication"
    assert fams["hcom_allReduce"]["op_class"] == "communication"
    # the bound stage is the largest summed pipe time column of the family's rows in the file
    for fam in ("aclnnAddmm_MatMulCommon_MatMulV2", "aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList"):
        rows = raw[raw["Name"].str.replace(r"(?:_+\d+)+$", "", regex=True) == fam]
        times = {s: rows[f"{s}_time(us)"].astype(float).sum() for s in opv.PIPE_STAGES}
        assert fams[fam]["bound_stage"] == max(times, key=times.get)
    assert fams["aclnnAddmm_MatMulCommon_MatMulV2"]["bound"] == "aic_mte"        # aic_mte2 > aic_mac
    assert fams["aclnnAddmm_MatMulCommon_MatMulV2"]["op_class"] == "aic"
    assert fams["aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList"]["bound"] == "aiv_mte"
    sugg = fp.detail["suggestions"]                                      # exposed comm 96% of communication
    assert [(x["id"], x["priority"]) for x in sugg] == [("COMM_EXPOSED_OVERLAP", "P0")]
    assert "step.exposed_comm_ratio{view=p50}" in sugg[0]["evidence"]
    assert set(ops["bound_shares"]) <= set(opv.BOUNDS)
    assert sum(ops["bound_shares"].values()) == pytest.approx(1.0)


@pytest.mark.real
def test_real_unknown_bucket_is_listed(text_captures, tmp_path):
    pol = policy_with(tmp_path, "", base=DEFAULT.replace("    - {category: DSA,    core: '^DSA', priority: 1}\n", ""))
    fp = fingerprint_capture(load_capture(text_captures / "level1"), pol)
    unk = fp.detail["operators"]["unknown"]
    assert [(u["family"], u["core_type"], u["calls"]) for u in unk] == [
        ("aclnnDropoutGenMaskV2_DSAGenBitMask_DSAGenBitMask", "DSA_SQE", 2)]
    assert fp.metrics["share.category{category=unknown,view=rank0}"].value == pytest.approx(5.52 / 114865.613)
    assert any("'unknown' bucket" in w for w in fp.warnings)


@pytest.mark.real
def test_mstt_2023_no_pipe_columns_fail_closed_when_required_else_counts_and_shares(ascend, tmp_path, policy):
    path = ascend / MSTT_2023
    kt = read_kernels(path, pmu=True)
    assert kt.ncols == 33 and "aic_mac_fp16_ratio" in kt.df           # ArithmeticUtilization, no pipe ratios
    assert not opv.pipe_available(kt.df)
    k = kt.df.assign(family=km.family_of(kt.df["name"], policy.family_suffix))
    metrics, detail = opv.rank_family_view(k, policy, categories=km.categorize(k, policy.categories),
                                             kfile="kernel_details.csv", path=path)
    assert not detail["pipe_available"] and "AiCMetrics.PipeUtilization" in detail["pipe_note"]
    assert not [key for key in metrics if key[0].startswith("pipe.")]
    raw = _raw(path)
    bc = raw.loc[raw["Name"].str.startswith("hcom_broadcast"), "dur"].sum() / raw["dur"].sum()
    assert metrics[("share.family", (("family", "hcom_broadcast"),))][0] == pytest.approx(bc)
    fams = {f["family"]: f for f in detail["families"]}
    assert fams["hcom_broadcast"]["calls"] == 2 and fams["hcom_broadcast"]["bound"] == "communication"
    assert fams["MatMul91"]["bound"] == "unknown"                     # compute without pipe data
    assert {c["category"] for c in detail["categories"]} == {"Comm", "Vector", "MatMul", "DSA", "AICPU"}
    with pytest.raises(InvalidCaptureError, match="another aic_metrics group") as e:
        opv.require_pipe(k, path, kt.variant)
    assert e.value.exit_code == EXIT_INVALID_CAPTURE and "PipeUtilization" in e.value.hint
    assert e.value.path == str(path)
    # end to end: the same file as a bare ASCEND_PROFILER_OUTPUT (temp copy), policy requiring pipes
    out = tmp_path / "ASCEND_PROFILER_OUTPUT"
    out.mkdir()
    (out / "kernel_details.csv").write_bytes(path.read_bytes())
    need = tmp_path / "need.yaml"
    assert "  require_pipe: false\n" in DEFAULT   # a second operators: key is a duplicate (policy error)
    need.write_text(DEFAULT.replace("  require_pipe: false\n", "  require_pipe: true\n"))
    code, text = cli("fingerprint", "--policy", need, out)
    assert code == EXIT_INVALID_CAPTURE and "aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization" in text
    code, _ = cli("fingerprint", out)
    assert code == 0


# ---------------------------------------------------------------- must show 2: DiT + VAE phases

@pytest.fixture(scope="module")
def diffusion(tmp_path_factory):
    d = tmp_path_factory.mktemp("diffusion")
    return write_capture(d / "c", SynthSpec(ranks=1, steps=2, families=DIFFUSION_FAMILIES, ordered=True,
                                            jitter=0.0, overlap=0.0, seed=3))


# constructed ΣDuration per step (us): calls × duration of DIFFUSION_FAMILIES, 2 allreduces × 1500
DIT = 4 * 300 + 8 * 200 + 4 * 50 + 4 * 25
VAE = 6 * 150 + 3 * 40 + 2 * 30
COMM = 2 * 1500
TOTAL = DIT + VAE + COMM


def test_phase_shares_region_mode_exact(diffusion, tmp_path):
    pol = policy_with(tmp_path, "phases: {mode: region, default: DiT, rules: [{phase: VAE, type: '^Conv2D$'}]}")
    fp = fingerprint_path(diffusion, pol)
    assert {c.status for c in fp.self_checks} == {"pass"}
    m = {k: v.value for k, v in fp.metrics.items() if k.endswith("view=rank0}")}
    assert m["share.phase{phase=DiT,view=rank0}"] == (DIT + COMM) / TOTAL     # communication runs during DiT
    assert m["share.phase{phase=VAE,view=rank0}"] == VAE / TOTAL
    assert m["share.phase_category{category=Conv,phase=VAE,view=rank0}"] == 900 / TOTAL
    assert m["share.phase_category{category=Vector,phase=VAE,view=rank0}"] == 180 / TOTAL
    assert m["share.phase_category{category=FA,phase=DiT,view=rank0}"] == 1200 / TOTAL
    assert m["share.phase_category{category=MatMul,phase=DiT,view=rank0}"] == 1600 / TOTAL
    assert m["share.phase_category{category=Vector,phase=DiT,view=rank0}"] == 300 / TOTAL


def test_phase_shares_family_mode_exact(diffusion, tmp_path):
    pol = policy_with(tmp_path, """phases:
  mode: family
  default: other
  rules:
    - {phase: DiT, type: '(?i)flash|matmul|layernorm|rotary'}
    - {phase: VAE, type: '(?i)conv|groupnorm|resize'}
""")
    fp = fingerprint_path(diffusion, pol)
    got = {k: v.value for k, v in fp.metrics.items() if k.startswith("share.phase{") and "rank0" in k}
    assert got == {"share.phase{phase=DiT,view=rank0}": DIT / TOTAL, "share.phase{phase=VAE,view=rank0}": VAE / TOTAL,
                   "share.phase{phase=other,view=rank0}": COMM / TOTAL}
    phases = fp.detail["operators"]["phases"]
    assert {(r["phase"], r["category"]): r["sum_dur_us"] for r in phases}[("VAE", "Conv")] == 2 * 900


def test_suggestions_from_policy_rules(diffusion, tmp_path):
    pol = policy_with(tmp_path, """phases: {mode: region, default: DiT, rules: [{phase: VAE, type: '^Conv2D$'}]}
suggestions:
  - {id: VAE_FUSION, priority: P2, consecutive: {type: '^Conv2D$'}, phase: VAE, min_run: 3, text: fuse the VAE convolutions}
  - {id: MATMUL_QUANT, priority: P1, metric: share.category, labels: {category: MatMul}, above: 0.5, text: quantize}
  - {id: COMM_OVERLAP, priority: P0, metric: share.category, labels: {category: Comm}, above: 0.3, text: overlap comm}
""")
    fp = fingerprint_path(diffusion, pol)
    s = fp.detail["suggestions"]
    assert [x["id"] for x in s] == ["COMM_OVERLAP", "VAE_FUSION"]          # P0 first; MatMul 22% < 50%
    assert s[0]["value"] == COMM / TOTAL and "share.category{category=Comm,view=p50}" in s[0]["evidence"]
    assert s[1]["value"] == 6 and "phase VAE" in s[1]["evidence"]
    # informational only: no suggestion is a metric, nothing gated
    assert not [k for k in fp.metrics if "VAE_FUSION" in k or k.startswith("suggest")]


def test_default_policy_suggestion_table_fires_on_synthetic_capture(diffusion, policy):
    fp = fingerprint_path(diffusion, policy)
    # FA 16.7%, MatMul 22.3%, Vector 6.7%, communication fully overlapped: only the 6 Conv2D fire
    assert [x["id"] for x in fp.detail["suggestions"]] == ["VAE_CONV_FUSION"]
    assert fp.detail["suggestions"][0]["value"] == 6


# ---------------------------------------------------------------- must show 3: MFU

def test_matmul_flops_and_dtype():
    assert matmul_flops('"4096,3072;3072,3072"') == 2 * 4096 * 3072 * 3072
    assert matmul_flops("8,64,128;8,128,32") == 2 * 8 * 64 * 32 * 128       # batched
    assert matmul_flops("64,128;32,128") == 2 * 64 * 32 * 128              # B transposed
    assert matmul_flops("64,128;7,9") is None
    assert (dtype_of("DT_BF16;DT_BF16"), dtype_of("FLOAT16"), dtype_of("FLOAT"), dtype_of(None)) == \
        ("bf16", "fp16", "fp32", "fp16")


def _mfu_policy(tmp_path, peak_bf16: float, spec: str = "matmul.yaml"):
    (tmp_path / "peaks.yaml").write_text(f"chips:\n  TestChip: {{bf16: {peak_bf16:.6e}, fp32: {peak_bf16 / 4:.6e}}}\n")
    return policy_with(tmp_path, f"mfu: {{spec: {REPO / 'perfgate/policies/mfu' / spec if spec == 'matmul.yaml' else spec}, "
                                 f"peaks: {tmp_path / 'peaks.yaml'}, chip: TestChip}}\n")


def test_mfu_hand_computed_matmul(diffusion, tmp_path):
    # MatMul "4096,3072;3072,3072" bf16, 200 us per call, peak bf16 5e14 FLOP/s:
    # 2·4096·3072·3072 = 77,309,411,328 FLOPs / 200e-6 s / 5e14 = 0.77309411328
    pol = _mfu_policy(tmp_path, 5.0e14)
    fp = fingerprint_path(diffusion, pol)
    v = fp.metrics[f"mfu.ratio{{family={MATMUL},view=rank0}}"]
    assert v.value == pytest.approx(0.77309411328, rel=1e-12)
    assert v.context["dtype"] == "bf16" and v.context["peak_flops"] == 5.0e14
    assert "500 TFLOP/s bf16" in v.evidence
    assert [k for k in fp.metrics if k.startswith("mfu.ratio") and "rank0" in k] == \
        [f"mfu.ratio{{family={MATMUL},view=rank0}}"]                       # only MatMul has a FLOPs rule
    cls = fp.detail["operators"]["mfu_classes"]
    assert cls == [{"family": MATMUL, "input_shapes": '"4096,3072;3072,3072"', "dtype": "bf16", "calls": 16,
                    "flops_per_call": 77309411328.0, "mean_dur_us": pytest.approx(200.0),
                    "mfu": pytest.approx(0.77309411328, rel=1e-12), "peak": 5.0e14}]


def test_mfu_python_spec_and_spec_error_above_one(diffusion, tmp_path):
    spec = tmp_path / "flops.py"
    spec.write_text("def flops(row):\n"
                    "    if row['type'] == 'MatMulV3':\n"
                    "        return 2 * 4096 * 3072 * 3072\n"
                    "    return 0\n")
    fp = fingerprint_path(diffusion, _mfu_policy(tmp_path, 5.0e14, spec=str(spec)))
    assert fp.metrics[f"mfu.ratio{{family={MATMUL},view=rank0}}"].value == pytest.approx(0.77309411328, rel=1e-12)
    # a peak below the achieved FLOP/s (3.87e14) makes MFU > 1: a spec error, not a result
    with pytest.raises(PolicyError, match=r"MFU 1\.5\d+ > 1 for kernel family"):
        fingerprint_path(diffusion, _mfu_policy(tmp_path, 2.5e14))


def test_mfu_gates_higher_is_better(tmp_path):
    spec = SynthSpec(ranks=1, steps=2, families=DIFFUSION_FAMILIES, ordered=True, jitter=0.0, overlap=0.0)
    base = write_capture(tmp_path / "a", spec)
    cand = write_capture(tmp_path / "b", SynthSpec(**{**spec.__dict__, "slowdown": {MATMUL: 1.25}}))
    pol = _mfu_policy(tmp_path, 5.0e14)
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=pol, store=store, env={})
    r = check(cand, "main", policy=pol, store=store, env={})
    c = next(x for x in r.comparisons if x.key == f"mfu.ratio{{family={MATMUL},view=rank0}}")
    assert c.fails and c.verdict == terms.REGRESSION
    assert c.candidate == pytest.approx(0.77309411328 / 1.25, rel=1e-12)


# ---------------------------------------------------------------- must show 4: comparison

FAMS4 = (
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE", 1, 5000.0),
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", 1, 3000.0),
    ("aclnnTopK_TopKV2_TopKV2", "TopKV2", "AI_CORE", 1, 1700.0),
    ("aclnnGelu_GeluAiCore_Gelu", "Gelu", "AI_VECTOR_CORE", 3, 100.0),
)
GELU = "aclnnGelu_GeluAiCore_Gelu"


@pytest.fixture(scope="module")
def pair4(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    kw = dict(ranks=1, steps=2, families=FAMS4, jitter=0.0, comm_ops=0, seed=5)
    return (write_capture(d / "base", SynthSpec(**kw)),
            write_capture(d / "cand", SynthSpec(**kw, slowdown={GELU: 3.2})))


def test_family_share_3_to_9_percent_regresses_family_and_category(pair4, tmp_path, policy):
    base, cand = pair4
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.FAIL
    fails = {c.key: c for c in r.comparisons if c.fails}
    fam = fails[f"share.family{{family={GELU},view=p50}}"]
    assert fam.baseline == 300 / 10000 and fam.candidate == 960 / 10660        # 3.00% -> 9.01%
    assert "share.category{category=Vector,view=rank0}" in fails
    assert not [k for k in fails if k.startswith(("kernel.topn", "kernel.calls", "share.family")) and GELU not in k]
    oc = r.detail["operator_compare"]
    row = next(x for x in oc["families"] if x["family"] == GELU)
    assert row["share_delta_pp"] == pytest.approx((960 / 10660 - 0.03) * 100, abs=1e-3)  # detail: 6 decimals
    assert row["count_delta"] == 0 and row["dur_ratio"] == pytest.approx(3.2)
    md = render_markdown(r)
    top = md.split("<details>")[0]          # the causes table, above the collapsed sections
    assert f"kernel family `{GELU}`" in top and "share.category{category=Vector}" in top
    assert "Family comparison" in md and "9.01%" in md


def test_top_n_order_shuffle_is_not_a_regression(tmp_path, policy):
    kw = dict(ranks=1, steps=2, jitter=0.0, comm_ops=0, seed=6,
              families=FAMS4[:3] + (("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 1, 300.0),
                                    ("aclnnMul_MulAiCore_Mul", "Mul", "AI_VECTOR_CORE", 1, 250.0)))
    base = write_capture(tmp_path / "a", SynthSpec(**kw))
    cand = write_capture(tmp_path / "b", SynthSpec(**kw, slowdown={"aclnnMul_MulAiCore_Mul": 1.4}))  # 250 -> 350 us
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    topn = next(c for c in r.comparisons if c.key == "kernel.topn{view=rank0}")
    b = store.load("main")[0].metrics["kernel.topn{view=rank0}"].context["ranked"]
    assert b.index("aclnnAdd_AddAiCore_Add") < b.index("aclnnMul_MulAiCore_Mul")
    assert topn.verdict == terms.UNCHANGED and not topn.fails                 # order changed, same members
    assert r.status == terms.PASS


def test_core_type_move_is_reported_as_a_move(tmp_path, policy):
    kw = dict(ranks=1, steps=1, jitter=0.0, comm_ops=0, seed=7)
    base = write_capture(tmp_path / "a", SynthSpec(**kw, families=FAMS4))
    moved = (("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "MIX_AIC", 1, 5000.0),) + FAMS4[1:]
    cand = write_capture(tmp_path / "b", SynthSpec(**kw, families=moved))
    fb, fc = fingerprint_path(base, policy), fingerprint_path(cand, policy)
    oc = compare_operators(fb.detail["operators"], fc.detail["operators"])
    assert {"family": MATMUL, "field": "core_type", "from": "AI_CORE", "to": "MIX_AIC", "share_cand": 0.5} in oc["moves"]
    assert {"family": MATMUL, "field": "op_class", "from": "aic", "to": "mix_cv", "share_cand": 0.5} in oc["moves"]
    assert {"category": "MatMul", "from": "AI_CORE", "to": "MIX_AIC"} in oc["category_moves"]
    row = next(x for x in oc["families"] if x["family"] == MATMUL)
    assert row["status"] == "same" and not [x for x in oc["families"] if x["status"] != "same"]
    gone = compare_operators(fb.detail["operators"], {**fc.detail["operators"], "families": [
        f for f in fc.detail["operators"]["families"] if f["family"] != GELU]})
    assert [x["status"] for x in gone["families"] if x["family"] == GELU] == ["disappeared"]


# ---------------------------------------------------------------- report

def test_report_operator_view_folds_small_categories_and_lists_unknown(pair4, tmp_path, policy):
    base, cand = pair4
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    md = render_markdown(check(cand, "main", policy=policy, store=store, env={}))
    assert "### Family view" in md and "Unknown bucket: empty" in md
    assert f"`{GELU}`" in md and "op_type class" in md
    shown, folded = fold_categories([{"category": "MatMul", "sum_dur_us": 95.0, "share": 0.95},
                                     {"category": "DSA", "sum_dur_us": 0.5, "share": 0.005},
                                     {"category": "AICPU", "sum_dur_us": 0.3, "share": 0.003},
                                     {"category": "unknown", "sum_dur_us": 0.2, "share": 0.002},
                                     {"category": "Vector", "sum_dur_us": 4.0, "share": 0.04}], 0.01)
    assert folded == ["DSA", "AICPU"]
    assert [(c["category"], round(c["share"], 6)) for c in shown] == [
        ("MatMul", 0.95), ("Vector", 0.04), ("Other", 0.008), ("unknown", 0.002)]


def test_op_type_class():
    df = _table([("a", "MatMulV2", "AI_CORE"), ("b", "Add", "AI_VECTOR_CORE"), ("c", "FA", "MIX_AIC"),
                 ("MatmulAllReduce_1", "MatmulAllReduce", "MIX_AIV"), ("hcom_x", "hcom", "HCCL"),
                 ("d", "Cast", "AI_CPU"), ("e", "DSAGenBitMask", "DSA_SQE"), ("f", "X", None)])
    df["is_comm"] = df["core_type"].astype(str).eq("HCCL")
    assert opv.op_type_class(df).astype(str).tolist() == [
        "aic", "aiv", "mix_cv", "mix_comm_aiv", "communication", "aicpu", "dsa", "unknown"]


@pytest.mark.parametrize("extra, key", [
    ("operators: {bogus: 1}", "operators.bogus"),
    ("operators: {fold_below: 2}", "operators.fold_below"),
    ("phases: {mode: sideways}", "phases.mode"),
    ("phases: {rules: [{phase: VAE}]}", "phases.rules[0]"),
    ("suggestions: [{id: X, priority: P5, text: t, metric: step.time_us, above: 1}]", "suggestions[0].priority"),
    ("suggestions: [{id: X, priority: P1, text: t, metric: step.time_us}]", "suggestions[0]"),
    ("mfu: {spec: mfu/matmul.yaml, peaks: mfu/peaks.yaml, chip: NoSuchChip}", "mfu.chip"),
    ("mfu: {spec: nowhere.yaml, peaks: mfu/peaks.yaml, chip: Ascend910}", "mfu.spec"),
])
def test_operator_policy_errors_name_the_key(tmp_path, extra, key):
    (tmp_path / "mfu").mkdir()
    for f in ("matmul.yaml", "peaks.yaml"):
        (tmp_path / "mfu" / f).write_text((REPO / "perfgate/policies/mfu" / f).read_text())
    with pytest.raises(PolicyError, match="key '" + re.escape(key)):
        policy_with(tmp_path, extra)
    p = tmp_path / "p.yaml"
    code, out = cli("fingerprint", "--policy", p, tmp_path)
    assert code == EXIT_USAGE and key in out


def test_shipped_mfu_files_load(tmp_path):
    pol = policy_with(tmp_path, f"mfu: {{spec: {REPO / 'perfgate/policies/mfu/matmul.yaml'}, "
                                f"peaks: {REPO / 'perfgate/policies/mfu/peaks.yaml'}, chip: Ascend910}}")
    assert pol.mfu.peaks == {"fp16": 2.56e14, "int8": 5.12e14}            # no fp32 / bf16 figure was published
    assert pol.mfu.rules[0].matcher.type.search("MatMulV3") and pol.mfu.rules[0].matcher.type.search("BatchMatMulV2")


def test_report_shows_mfu_call_classes_and_phase_folding(diffusion, tmp_path):
    pol = _mfu_policy(tmp_path, 5.0e14)
    store = BaselineStore(tmp_path / "bl")
    save_baseline(diffusion, "main", policy=pol, store=store, env={})
    r = check(diffusion, "main", policy=pol, store=store, env={})
    assert r.status == terms.PASS                                        # a capture against itself
    md = render_markdown(r)
    assert "MFU by call class (1)" in md and "77.31%" in md and "| bf16 | 16 |" in md
    assert r.detail["operator_compare"]["families"] == [] or all(
        x["share_delta_pp"] == 0 for x in r.detail["operator_compare"]["families"])
    fp = fingerprint_capture(load_capture(diffusion), pol)               # library path without shapes=True
    assert "shapes=True" in fp.detail["operators"]["mfu_note"]
    assert not [k for k in fp.metrics if k.startswith("mfu.")]


@pytest.mark.real
def test_real_level1_vs_level2_operator_metrics_unchanged(text_captures, tmp_path, policy):
    """Two runs of one job: every family / category / bound share within tolerance, the operator
    comparison finds no moved, appeared or disappeared family."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    assert r.status == terms.PASS
    # families of one kernel per step are context, not gated (a single kernel's time)
    fam = [c for c in r.comparisons if c.name == "share.family" and c.verdict != terms.INCOMPARABLE]
    assert len(fam) > 100 and all(c.verdict == terms.UNCHANGED for c in fam if c.gated)
    assert 40 < len([c for c in fam if c.gated]) < len(fam)
    assert max(abs(c.delta) for c in fam if c.gated) < 0.005               # measured 0.42 pp, tolerance 2 pp
    bound = [c for c in r.comparisons if c.name == "pipe.bound_share"]
    assert bound and max(abs(c.delta) for c in bound) < 0.005
    oc = r.detail["operator_compare"]
    assert oc["available"] and not oc["moves"] and not oc["category_moves"]
    assert {x["status"] for x in oc["families"]} == {"same"}
    md = render_markdown(r)
    assert "Pipeline bound (share of ΣDuration by bound family): communication" in md
    assert "Folded into Other (each < 1%): MatMul, DSA." in md
