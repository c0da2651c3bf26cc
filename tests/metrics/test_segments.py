"""Model structure: layer / block segmentation with the lossless check, gated
structure metrics, fusion candidates, on real captures (read in place) and synthetic
transformer-like captures from perfgate.synth.transformer."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from perfgate import terms
from perfgate.errors import EXIT_REGRESSION, InvalidCaptureError, PolicyError
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics import kernels as km
from perfgate.metrics.fusion import fusion_candidates
from perfgate.metrics.segments import check_lossless, class_table, segment_rank
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from perfgate.app.run import structure_report
from perfgate.synth.transformer import write_transformer


def _segments(path, policy, rank=0):
    cap = load_capture(path, with_trace=False)
    r = next(x for x in cap.ranks if x.rank == rank)
    cats = km.categorize(r.kernels.df, policy.categories) if r.kernels.type_available else None
    return r.kernels.df, segment_rank(r.kernels.df, policy.segments, policy.family_suffix, categories=cats)


@pytest.mark.real
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_real_step50_is_covered_row_by_row(text_captures, policy, level):
    """Must show 1: every row of step 50 is in exactly one segment; classes are listed."""
    k, seg = _segments(text_captures / level, policy)
    step = k[k["step"] == "50"]
    assert len(step) == 191
    st = seg.steps.set_index("step").loc["50"]
    lay = seg.layers[seg.layers["step"] == "50"]
    # independent coverage: the segments (layers and named non-layer segments) rebuild exactly
    # the step's source rows, each once
    order = step.sort_values(["start_ns", "row"])["row"].to_numpy()
    segs = seg.segments[seg.segments["step"] == "50"]
    covered = []
    for a, b in zip(segs["first_row"], segs["last_row"]):
        i, j = int(np.flatnonzero(order == a)[0]), int(np.flatnonzero(order == b)[0])
        covered += list(order[i:j + 1])
    assert sorted(covered) == sorted(step["row"]) and len(covered) == 191
    assert st["head_rows"] == 0 and segs["rows"].sum() == 191
    # the counterexample recorded in segments.yaml states what the rules find on this CNN
    ce = next(c for c in policy.segments.counterexamples if c["capture"].endswith("text/level1"))
    assert st["anchor"] == "conv" and st["layers"] == ce["layers"] == 10
    assert list(lay["pass"]) == ["forward"] * 5 + ["backward"] * 5
    assert list(lay["model_layer"]) == [1, 2, 3, 4, 5, 5, 4, 3, 2, 1]
    # the FC head and the loss (MatMulV2 / LogSoftmaxV2 / NLLLoss and their grads) are not
    # inside a conv layer: they form the lm_head_loss segment between the passes
    head_rows = step[step["op_type"].astype(str).isin(["MatMulV2", "LogSoftmaxV2", "NLLLoss", "NLLLossGrad",
                                                         "LogSoftmaxGrad"])]["row"]
    assert len(head_rows) == 12   # 3 FC matmuls, LogSoftmax, NLLLoss, their 2 grads, 5 FC grad matmuls
    for a, b in zip(lay["first_row"], lay["last_row"]):
        i, j = int(np.flatnonzero(order == a)[0]), int(np.flatnonzero(order == b)[0])
        assert not set(order[i:j + 1]) & set(head_rows)
    kinds = segs.set_index("first_row")["kind"]
    assert kinds.loc[32] == "lm_head_loss" and set(segs["kind"]) == {
        "layer", "lm_head_loss", "grad_sync", "optimizer"}
    classes = class_table(seg)
    assert set(classes["level"]) == {"layer", "block"}
    assert classes.loc[classes["level"] == "layer", "members"].sum() == 10
    recurring = classes[(classes["level"] == "layer") & (classes["per_step"] >= 2)]
    assert len(recurring) == 2   # forward conv layers 4-5 (Conv2D4 twice), backward layers 4-5
    # backward conv layer: TransData x5 + BackpropInput + MemSet + BackpropFilter + ... per member
    bwd = recurring[recurring["pass"] == "backward"]
    top = bwd["top_families"].iloc[0].split("; ")
    assert top[0].startswith("trans_TransData (") and len(top) == 3
    lay6 = lay[lay["class_id"] == bwd["class_id"].iloc[0]]
    i, j = (int(np.flatnonzero(order == lay6[c].iloc[0])[0]) for c in ("first_row", "last_row"))
    rows = step[step["row"].isin(order[i:j + 1])]
    fam = rows.assign(f=km.family_of(rows["name"], policy.family_suffix).astype(str)).groupby("f")["dur_ns"].sum()
    fam_us_all = 0.0
    for a_, b_ in zip(lay6["first_row"], lay6["last_row"]):
        i, j = int(np.flatnonzero(order == a_)[0]), int(np.flatnonzero(order == b_)[0])
        r = step[step["row"].isin(order[i:j + 1])]
        fam_us_all += r.loc[r["name"].astype(str).str.startswith("trans_TransData"), "dur_ns"].sum() / 1000
    assert top[0] == f"trans_TransData ({fam_us_all:.3f})" and fam["trans_TransData"] > 0
    cat = km.categorize(rows, policy.categories)
    by_cat = rows.groupby(cat.to_numpy())["dur_ns"].sum()
    assert bwd["bound"].iloc[0] == by_cat.idxmax() == "Vector"


@pytest.mark.real
def test_level1_level2_structure_metrics_equal(text_captures, policy):
    a = fingerprint_capture(load_capture(text_captures / "level1"), policy).metrics
    b = fingerprint_capture(load_capture(text_captures / "level2"), policy).metrics
    keys = [k for k in a if k.startswith(("layer.count", "layer.class_count", "block.count", "microbatch.", "pass."))]
    assert "layer.count{view=rank0}" in keys and len(keys) >= 9
    assert all(a[k].value == b[k].value for k in keys)


def test_lossless_check_names_rows():
    rows = np.array([11, 12, 13, 14, 15])
    check_lossless("7", rows, [("head", 0, 0), ("layer 1", 1, 2), ("tail", 3, 4)])
    with pytest.raises(InvalidCaptureError, match=r"step 7: .*not lossless.*rows 13") as e:
        check_lossless("7", rows, [("head", 0, 1), ("layer 1", 3, 4)])
    assert e.value.row == 13
    with pytest.raises(InvalidCaptureError, match=r"segments layer 1 and layer 2 overlap.*rows 13, 14"):
        check_lossless("7", rows, [("layer 1", 0, 3), ("layer 2", 2, 4)])


@pytest.mark.parametrize("moe,dense,want", [
    (False, 0, {"attention": 6, "ffn": 6}),
    (True, 2, {"attention": 6, "ffn": 2, "moe": 4}),
])
def test_synthetic_transformer_layers_and_blocks(tmp_path, policy, moe, dense, want):
    """Must show 2: the known layer count and block kinds are found exactly."""
    cap = load_capture(write_transformer(tmp_path / "t", 6, moe=moe, dense_layers=dense, ranks=2, steps=3))
    m = fingerprint_capture(cap, policy).metrics
    assert m["layer.count{view=rank0}"].value == 6 and m["layer.count{view=p50}"].value == 6
    got = {k.split("kind=")[1].split(",")[0]: v.value for k, v in m.items()
           if k.startswith("block.count{") and k.endswith("view=rank0}")}
    assert got == want
    classes = {k: v.value for k, v in m.items() if k.startswith("layer.class_count") and "rank0" in k}
    assert sorted(classes.values()) == ([2.0, 4.0] if moe else [6.0])
    shares = [v.value for k, v in m.items() if k.startswith("block.share") and "rank0" in k]
    assert sum(shares) == pytest.approx(1.0, abs=0.01)  # medians over steps per kind: sum ~1


def test_one_extra_layer_is_a_tier1_regression(tmp_path, policy):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(write_transformer(tmp_path / "a", 6, seed=1), "main", policy=policy, store=store, env={})
    same = check(write_transformer(tmp_path / "b", 6, seed=2), "main", policy=policy, store=store, env={})
    assert same.status == terms.PASS
    r = check(write_transformer(tmp_path / "c", 7, seed=3), "main", policy=policy, store=store, env={})
    assert r.exit_code == EXIT_REGRESSION
    fails = {c.key: c for c in r.comparisons if c.fails}
    lc = fails["layer.count{view=rank0}"]
    assert (lc.baseline, lc.candidate) == (6.0, 7.0) and "layer.count{view=p50}" in fails
    assert any(k.startswith("layer.class_count{class=L") for k in fails)
    assert any(k.startswith("block.count{kind=attention") for k in fails)


def test_moe_layers_found_by_dispatch_without_attention(tmp_path, policy):
    """With no attention kernel, the MoE dispatch anchor cuts the layers."""
    cap = load_capture(write_transformer(tmp_path / "m", 4, moe=True, ranks=1, steps=2))
    k = cap.ranks[0].kernels.df
    k = k[~k["name"].astype(str).str.contains("FlashAttention")].reset_index(drop=True)
    seg = segment_rank(k, policy.segments, policy.family_suffix)
    assert list(seg.steps["anchor"]) == ["moe", "moe"] and list(seg.steps["layers"]) == [4, 4]
    assert set(seg.blocks["kind"]) == {"moe", "other"}  # the attention-less projections: other


def test_fusion_decomposed_rmsnorm_is_one_high_candidate(tmp_path, policy):
    """Must show 4: one candidate, grade high, region = the decomposed norm's kernels."""
    cap = load_capture(write_transformer(tmp_path / "f", 4, decomposed_rmsnorm=True, ranks=1, steps=2))
    k = cap.ranks[0].kernels.df
    every = fusion_candidates(k, policy.segments.fusion, policy.family_suffix)
    # plus the residual Add -> RmsNorm of every layer (add_rmsnorm): 4 layers x 2 - 1 per step
    assert every.groupby("pattern").size().to_dict() == {"rmsnorm": 2, "add_rmsnorm": 14}
    cand = every[every["pattern"] == "rmsnorm"]
    assert len(cand) == 2 and list(cand["grade"]) == ["high", "high"]  # one per step
    for step, c in cand.groupby("step"):
        s = k[k["step"] == step].sort_values("start_ns")
        names = s["name"].astype(str).tolist()
        first = names.index("aclnnPowTensorScalar_PowAiCore_Pow")
        assert c["first_row"].iloc[0] == s["row"].iloc[first]
        assert c["last_row"].iloc[0] == s["row"].iloc[first + 5]      # Pow..Mul, 6 kernels
        assert c["ops"].iloc[0] == "Pow→ReduceMean→Add→Rsqrt→Mul→Mul"
    plain = fusion_candidates(load_capture(write_transformer(tmp_path / "p", 4, ranks=1, steps=2)).ranks[0].kernels.df,
                              policy.segments.fusion, policy.family_suffix)
    assert set(plain["pattern"]) == {"add_rmsnorm"} and len(plain) == 16   # 4 layers x 2 per step


def test_fusion_grades_medium_and_low():
    from perfgate.policy.knowledge import load_segment_rules
    rules = load_segment_rules()
    ops = ["MatMulV3", "Pow", "ReduceMean", "Add", "Rsqrt", "Gelu", "MatMulV3", "Add", "Mul", "Cast", "MatMulV3"]
    n = len(ops)
    df = pd.DataFrame({"row": np.arange(1, n + 1), "step": pd.Categorical(["1"] * n),
                       "name": pd.Categorical([f"k_{o}" for o in ops]), "op_type": pd.Categorical(ops),
                       "core_type": pd.Categorical(["AI_VECTOR_CORE"] * n), "start_ns": np.arange(n) * 10,
                       "is_comm": np.zeros(n, dtype=bool)})
    import re
    c = fusion_candidates(df, rules.fusion, re.compile(r"(?:_+\d+)+$"))
    assert list(zip(c["pattern"], c["grade"], c["first_row"], c["last_row"])) == [
        ("rmsnorm", "medium", 2, 5), ("elementwise_chain", "low", 8, 10)]


def test_structure_report_and_policy_switch(tmp_path, policy):
    cap = write_transformer(tmp_path / "s", 3, ranks=1, steps=1, decomposed_rmsnorm=True)
    rep = structure_report(cap, policy)
    r0 = rep["ranks"][0]
    assert r0["steps"][0]["layers"] == 3 and [f["pattern"] for f in r0["fusion"]].count("rmsnorm") == 1
    assert json.dumps(rep)  # JSON-safe
    off = tmp_path / "off.yaml"
    doc = yaml.safe_load(open(policy.path))
    doc["segments"] = None
    off.write_text(yaml.safe_dump(doc))
    p_off = load_policy(off)
    m = fingerprint_capture(load_capture(cap), p_off).metrics
    assert not any(k.startswith(("layer.", "block.")) for k in m)
    bad = tmp_path / "bad.yaml"
    bad.write_text("anchors:\n  - {name: x, match: {type: '('}}\n")
    doc["segments"] = str(bad)
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump(doc))
    with pytest.raises(PolicyError, match=r"anchors\[0\]\.match\[0\]\.type"):
        load_policy(pol)


@pytest.mark.real
def test_text_and_db_twins_share_class_ids(ascend, policy):
    """Classes key on the main stream's order: the DSA mask kernel on stream 3 moves by seven
    places between the text and DB exports of one capture, the classes do not."""
    got = {}
    for export in ("text", "db"):
        _, seg = _segments(ascend / "msinsight/test/data/pytorch" / export / "level1", policy)
        got[export] = (list(seg.steps["step_class"]), list(seg.layers["class_id"]), list(seg.blocks["class_id"]))
    assert got["text"] == got["db"] and len(got["text"][1]) == 10


def test_cli_check_names_the_extra_layer(tmp_path):
    from click.testing import CliRunner

    from perfgate.cli import main
    write_transformer(tmp_path / "a", 6, seed=1)
    write_transformer(tmp_path / "b", 7, seed=2)
    run = CliRunner().invoke
    assert run(main, ["baseline", "save", "--name", "main", str(tmp_path / "a"), "--baseline-dir",
                      str(tmp_path / "bl")], env={}).exit_code == 0
    r = run(main, ["check", "--baseline", "main", str(tmp_path / "b"), "--baseline-dir", str(tmp_path / "bl"),
                   "--out", str(tmp_path / "out")], env={})
    assert r.exit_code == EXIT_REGRESSION
    # one cause (the model structure) explains every failing metric: counts, shares, step time
    assert "1 cause, " in r.output.splitlines()[0]
    assert "REGRESSION model structure model layers (layer count) 6 -> 7" in r.output
    md = (tmp_path / "out" / "perfgate-report.md").read_text()
    assert "attention blocks per forward micro-batch (recurring layers) 6 -&gt; 7" in md.split("<details>")[0]
    assert "| model layers (layer count) | 6 -&gt; 7 | 6 -&gt; 7 |" in md
    assert "`layer.count{view=rank0}`: model layers (layer count) [rank0]: 6 -&gt; 7" in md


_ALPHABET = [("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC"),
             ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", "AI_VECTOR_CORE"),
             ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE"),
             ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE"),
             ("aclnnNonzero_NonZeroAiCpu_NonZero", "NonZero", "AI_CPU"),
             ("aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList", "ForeachAddList", "AI_VECTOR_CORE"),
             ("hcom_allReduce__1_0_1", "hcom_allReduce_", "HCCL"),
             ("aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
              "FlashAttentionScoreGrad", "MIX_AIC"),
             ("hcom_batchSendRecv__128_3_1", "hcom_batchSendRecv_", "HCCL")]


def _table(picks, steps):
    n = len(picks)
    name, typ, core = zip(*[_ALPHABET[i] for i in picks])
    comm = np.array([c == "HCCL" for c in core])
    return pd.DataFrame({
        "row": np.arange(1, n + 1), "step": pd.Categorical([str(s) for s in steps]),
        "name": pd.Categorical(name), "op_type": pd.Categorical(typ), "core_type": pd.Categorical(core),
        "stream_id": pd.Categorical([None if c else "2" for c in comm]),
        "start_ns": np.arange(n, dtype=np.int64) * 1000, "dur_ns": np.full(n, 500, dtype=np.int64),
        "end_ns": np.arange(n, dtype=np.int64) * 1000 + 500, "is_comm": comm})


def test_segmentation_is_lossless_on_random_sequences(policy):
    """Property: for any kernel sequence every row of every step lands in exactly one segment
    (segment_rank runs check_lossless), the attention rule finds one layer per FA kernel
    (forward or backward), and no pipeline send/recv row is inside a layer."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, len(_ALPHABET) - 1), st.integers(1, 2)), min_size=1, max_size=60))
    def prop(items):
        items = sorted(items, key=lambda x: x[1])     # rows of a step are contiguous in time
        df = _table([i for i, _ in items], [s for _, s in items])
        seg = segment_rank(df, policy.segments, policy.family_suffix)
        for _, st_ in seg.steps.iterrows():
            lay = seg.layers[seg.layers["step"] == st_["step"]]
            # head + layers + named segments between / after them = the step
            assert st_["head_rows"] + lay["rows"].sum() + st_["tail_rows"] <= st_["rows"]
            fa = sum(1 for i, s in items if str(s) == st_["step"] and i in (0, 7))   # FA forward or backward
            assert st_["layers"] == (fa if fa >= 2 else 0)
            segs = seg.segments[seg.segments["step"] == st_["step"]]
            assert segs["rows"].sum() == st_["rows"]
            # a pipeline send/recv row is never inside a layer
            pipe_rows = {r for (i, s), r in zip(items, range(1, len(items) + 1)) if str(s) == st_["step"] and i == 8}
            lay_rows = set()
            for a, b in zip(lay["first_row"], lay["last_row"]):
                lay_rows |= set(range(int(a), int(b) + 1))
            assert not pipe_rows & lay_rows
        b = seg.blocks.groupby(["step", "layer"])["rows"].sum()
        assert (b.to_numpy() == seg.layers.set_index(["step", "layer"])["rows"].reindex(b.index).to_numpy()).all()

    prop()


def test_companion_layer_without_attention(tmp_path, policy):
    """A MoE layer with no attention kernel between attention layers is a layer of its own,
    marked companion (the attention anchor's `companions: [moe]`)."""
    cap = load_capture(write_transformer(tmp_path / "c", 6, moe=True, companion_layers=(3,), ranks=1, steps=2))
    k = cap.ranks[0].kernels.df
    seg = segment_rank(k, policy.segments, policy.family_suffix)
    assert list(seg.steps["layers"]) == [6, 6]
    s1 = seg.layers[seg.layers["step"] == "10"]
    assert list(s1["companion"]) == [False, False, False, True, False, False]
    assert list(s1["kinds"]) == ["attention+moe"] * 3 + ["moe"] + ["attention+moe"] * 2
    m = fingerprint_capture(cap, policy).metrics
    assert m["layer.count{view=rank0}"].value == 6
    assert m["block.count{kind=moe,pass=forward,view=rank0}"].value == 5   # the companion's class is unique


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_any_family_with_doubled_calls_segments_losslessly(text_captures, policy, level, tmp_path):
    """A changed call count is the gate's first regression kind: doubling the calls of any one
    family of rank 0 (every family, in turn) must still segment every row exactly once and never
    crash (a learned start rule with k = 0 once indexed past the family's last position)."""
    import shutil
    from perfgate.synth.mutate import add_calls
    src = text_captures / level / "rank0_ascend_pt"
    from perfgate.synth.mutate import DEFAULT_SUFFIX
    names = _segments(text_captures / level, policy)[0]["name"].astype(str)
    families = sorted({DEFAULT_SUFFIX.sub("", n) for n in names})
    assert len(families) > 10
    done = 0
    for i, fam in enumerate(families):
        cap = tmp_path / f"c{i}"
        shutil.copytree(src, cap / "rank0_ascend_pt")
        try:
            add_calls(cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", fam, 2)
        except ValueError:   # not enough idle time in the step to place the new tasks
            continue
        k, seg = _segments(cap, policy)   # segment_rank itself raises when a row is in no / two segments
        assert int(seg.segments["rows"].sum()) == len(k), fam
        done += 1
    assert done >= len(families) // 2
