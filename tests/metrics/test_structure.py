"""Model structure: step -> micro-batch -> pass -> layer -> block on the real LLM
training capture (st/level2 rank 0, pipeline stage 0 of a PP2 x DP2 MindSpeed job, 14 Qwen3-style
decoder layers x 2 micro-batches) and on synthetic training steps from perfgate.synth.transformer
(last pipeline stage, DeepSeek-style MoE, recompute, micro-batch count).

The real capture's rank 1 holds only step_trace_time + communication, so the capture as a whole
is refused until rank coverage lands; these tests read rank 0's kernel_details.csv
directly with the kernel reader."""
import numpy as np
import pandas as pd
import pytest

from perfgate.ingest import load_capture
from perfgate.ingest.kernels import read_kernels
from perfgate.metrics import kernels as km
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.segments import segment_metrics, segment_rank
from perfgate.synth.transformer import training_sequence, write_training

ST = ("msinsight", "test", "st", "level2", "rank_0_ascend_pt", "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")


@pytest.fixture(scope="module")
def llm(ascend, policy):
    """(kernel table, segmentation) of the real transformer capture's rank 0."""
    df = read_kernels(ascend.joinpath(*ST)).df
    cats = km.categorize(df, policy.categories)
    return df, segment_rank(df, policy.segments, policy.family_suffix, categories=cats)


def _positions(df):
    order = df.sort_values(["start_ns", "row"])["row"].to_numpy()
    return order, {int(r): i for i, r in enumerate(order)}


def _rows_of(order, where, first, last):
    return order[where[int(first)]:where[int(last)] + 1]


@pytest.mark.real
def test_real_llm_14_layers_2_microbatches_2_passes(llm):
    df, seg = llm
    st = seg.steps.set_index("step").loc["13"]
    assert (st["layers"], st["microbatches"], st["passes"]) == (56, 2, "forward+backward")
    lay = seg.layers
    for p, model in (("forward", list(range(1, 15))), ("backward", list(range(14, 0, -1)))):
        for mb in (1, 2):
            g = lay[(lay["pass"] == p) & (lay["microbatch"] == mb)]
            assert list(g["model_layer"]) == model
    # forward layers: one class; backward layers: one class
    assert lay.groupby("pass")["class_id"].nunique().to_dict() == {"forward": 1, "backward": 1}
    classes = seg.classes[seg.classes["level"] == "layer"].set_index("pass")
    assert classes.loc["forward", "kind"] == "attention+ffn" and classes.loc["backward", "kind"] == "ffn+attention"
    assert classes.loc["forward", "members"] == classes.loc["backward", "members"] == 28


@pytest.mark.real
def test_real_llm_every_row_in_exactly_one_segment(llm):
    df, seg = llm
    order, where = _positions(df)
    seen = np.zeros(len(order), dtype=int)
    for a, b in zip(seg.segments["first_row"], seg.segments["last_row"]):
        seen[where[int(a)]:where[int(b)] + 1] += 1
    assert len(order) == 2463 and (seen == 1).all()
    assert seg.segments["rows"].sum() == 2463


@pytest.mark.real
def test_real_llm_layer_boundaries_are_the_models(llm):
    """A forward layer runs from its input RmsNorm to the FFN residual Add (31 kernels: 4
    RmsNorm, 1 FlashAttentionScore); a backward layer from the FFN's down-projection gradient
    MatMul to the input norm's gradient (36 kernels: 1 FlashAttentionScoreGrad, 4 RmsNormGrad)."""
    df, seg = llm
    order, where = _positions(df)
    typ = df.set_index("row")["op_type"].astype(str)
    for _, l in seg.layers.iterrows():
        t = typ.loc[_rows_of(order, where, l["first_row"], l["last_row"])].tolist()
        if l["pass"] == "forward":
            assert (len(t), t[0], t[-2:], t.count("RmsNorm"), t.count("FlashAttentionScore")) == \
                (31, "RmsNorm", ["MatMulV3", "Add"], 4, 1)
        else:
            assert (len(t), t[0], t[-4:], t.count("RmsNormGrad"), t.count("FlashAttentionScoreGrad")) == \
                (36, "MatMulV3", ["RmsNormGrad", "Cast", "Add", "Add"], 4, 1)


@pytest.mark.real
def test_real_llm_pipeline_wait_outside_layers_and_named_regions(llm):
    df, seg = llm
    order, where = _positions(df)
    name = df.set_index("row")["name"].astype(str)
    kind_of = np.empty(len(order), dtype=object)
    for _, s in seg.segments.iterrows():
        kind_of[where[int(s["first_row"])]:where[int(s["last_row"])] + 1] = s["kind"]
    k = df.set_index("row")
    wait = k[k["name"].astype(str).str.startswith("hcom_batchSendRecv")]
    assert len(wait) == 3 and round(wait["dur_ns"].max() / 1e3, 1) == 158553.3
    assert {kind_of[where[int(r)]] for r in wait.index} == {"pipeline"}
    pipe = seg.segments[seg.segments["kind"] == "pipeline"]
    assert list(pipe["rows"]) == [1, 1, 1]     # the send/recv rows alone
    sync = k[k["name"].astype(str).str.match(r"hcom_(reduceScatter|allGather|allReduce)")]
    assert len(sync) == 12 and {kind_of[where[int(r)]] for r in sync.index} == {"grad_sync"}
    adam = k[k["op_type"].astype(str) == "ApplyAdamWV2"]
    assert len(adam) == 57 and {kind_of[where[int(r)]] for r in adam.index} == {"optimizer"}
    emb = k[name.loc[k.index].str.startswith("aclnnEmbedding").to_numpy()]
    assert len(emb) == 14 and {kind_of[where[int(r)]] for r in emb.index} == {"embedding"}
    assert not (seg.layers["comm_us"] > 0).any()    # no communication inside any layer of this stage


@pytest.mark.real
def test_real_llm_structure_metrics(llm, policy):
    df, seg = llm
    step_sum = df.groupby("step", observed=True)["dur_ns"].sum() / 1000.0
    step_sum.index = step_sum.index.astype(str)
    m = segment_metrics(seg, "kernel_details.csv", step_sum)
    v = {(n, dict(lab).get("pass"), dict(lab).get("class"), dict(lab).get("kind")): x[0] for (n, lab), x in m.items()}
    assert v[("layer.count", None, None, None)] == 14
    assert v[("microbatch.count_per_step", None, None, None)] == 2
    assert v[("pass.count_per_step", None, None, None)] == 2
    lay = seg.layers
    for p in ("forward", "backward"):
        c = lay.loc[lay["pass"] == p, "class_id"].iloc[0]
        assert v[("layer.class_count", p, c, None)] == 14
        w = lay.loc[lay["pass"] == p, "wall_us"]
        # wall span caliber: last end - first start of each layer's rows, median over the 28 layers
        order, where = _positions(df)
        k = df.set_index("row")
        spans = [(k.loc[_rows_of(order, where, a, b), "end_ns"].max()
                  - k.loc[_rows_of(order, where, a, b), "start_ns"].min()) / 1000
                 for a, b in zip(lay.loc[lay["pass"] == p, "first_row"], lay.loc[lay["pass"] == p, "last_row"])]
        assert v[("layer.wall_p50_us", p, None, None)] == pytest.approx(np.median(spans)) == pytest.approx(w.median())
    assert v[("block.count", "forward", None, "attention")] == v[("block.count", "forward", None, "ffn")] == 14


def _metrics(path, policy):
    m = fingerprint_capture(load_capture(path), policy).metrics
    return {k: x.value for k, x in m.items() if k.endswith("view=rank0}") and
            k.startswith(("layer.", "microbatch.", "pass.", "block.count"))}


@pytest.mark.parametrize("stage", [0, 1])
def test_first_and_last_pipeline_stage_give_14_layers_x_2(tmp_path, policy, stage):
    """Stage 0 (embedding, send) and the last stage (final norm + LM head + loss) of one job."""
    cap = write_training(tmp_path / "s", 14, microbatches=2, stage=stage, ranks=1, steps=2)
    m = _metrics(cap, policy)
    assert (m["layer.count{view=rank0}"], m["microbatch.count_per_step{view=rank0}"],
            m["pass.count_per_step{view=rank0}"]) == (14, 2, 2)
    k = load_capture(cap).ranks[0].kernels.df
    seg = segment_rank(k, policy.segments, policy.family_suffix)
    kinds = seg.segments.groupby("step")["kind"].apply(lambda x: sorted(set(x))).iloc[0]
    want = {"layer", "pipeline", "grad_sync", "optimizer"} | ({"embedding"} if stage == 0 else {"lm_head_loss"})
    assert set(kinds) == want
    if stage == 1:   # final norm + LM head + loss (+ their backward) between each micro-batch's passes
        loss = seg.segments[seg.segments["kind"] == "lm_head_loss"]
        assert list(loss["rows"]) == [7] * 4 and len(seg.layers) == 2 * 2 * 14 * 2


def test_deepseek_style_moe_dense_and_moe_layers(tmp_path, policy):
    """2 dense + 4 MoE layers (router, alltoall dispatch, GroupedMatmul, alltoall combine)."""
    cap = write_training(tmp_path / "m", 6, microbatches=2, stage=0, moe=True, dense_layers=2, ranks=1, steps=2)
    k = load_capture(cap).ranks[0].kernels.df
    seg = segment_rank(k, policy.segments, policy.family_suffix)
    lay = seg.layers[seg.layers["step"] == "10"]
    f = lay[(lay["pass"] == "forward") & (lay["microbatch"] == 1)]
    b = lay[(lay["pass"] == "backward") & (lay["microbatch"] == 1)]
    assert list(f["kinds"]) == ["attention+ffn"] * 2 + ["attention+moe"] * 4
    assert list(b["kinds"]) == ["moe+attention"] * 4 + ["ffn+attention"] * 2
    assert list(b["model_layer"]) == [6, 5, 4, 3, 2, 1]
    # the dispatch / combine alltoalls sit inside the MoE layers: 2 per layer, forward and backward
    assert list(f["comm_us"] > 0) == [False] * 2 + [True] * 4 and list(b["comm_us"] > 0) == [True] * 4 + [False] * 2
    m = _metrics(cap, policy)
    assert m["layer.count{view=rank0}"] == 6 and m["microbatch.count_per_step{view=rank0}"] == 2
    counts = sorted(v for key, v in m.items() if key.startswith("layer.class_count{") and "pass=forward" in key)
    assert counts == [2, 4]
    assert m["block.count{kind=moe,pass=forward,view=rank0}"] == 4
    assert m["block.count{kind=moe,pass=backward,view=rank0}"] == 4
    seq = training_sequence(6, microbatches=2, moe=True, dense_layers=2)
    assert sum(1 for x in seq if x[1] == "GroupedMatmul") == 2 * 4 * (2 + 4)


def test_microbatch_count_changes_only_the_microbatch_metric(tmp_path, policy):
    a = _metrics(write_training(tmp_path / "a", 4, microbatches=2, ranks=1, steps=2, seed=1), policy)
    b = _metrics(write_training(tmp_path / "b", 4, microbatches=4, ranks=1, steps=2, seed=2), policy)
    assert a["microbatch.count_per_step{view=rank0}"] == 2 and b["microbatch.count_per_step{view=rank0}"] == 4
    counts = [key for key in a if not key.startswith(("microbatch.", "layer.wall_p50_us"))]
    assert set(a) == set(b) and len(counts) >= 8
    assert {key: a[key] for key in counts} == {key: b[key] for key in counts}


@pytest.mark.parametrize("stage", [0, 1])
def test_per_layer_recompute(tmp_path, policy, stage):
    """Per-layer checkpointing re-runs each layer's forward right before its backward:
    R4 B4 R3 B3 ... in one backward micro-batch, after the loss segment on the last stage."""
    cap = write_training(tmp_path / "r", 4, microbatches=2, stage=stage, recompute="layer", ranks=1, steps=2)
    seg = segment_rank(load_capture(cap).ranks[0].kernels.df, policy.segments, policy.family_suffix)
    lay = seg.layers[(seg.layers["step"] == "10") & (seg.layers["microbatch"] == 1)]
    tail = lay[lay["pass"] != "forward"]
    assert list(zip(tail["pass"], tail["model_layer"])) == [
        (p, n) for n in (4, 3, 2, 1) for p in ("recompute", "backward")]
    assert tail.groupby("pass")["class_id"].nunique().to_dict() == {"recompute": 1, "backward": 1}
    assert tail.loc[tail["pass"] == "recompute", "class_id"].iloc[0] == lay.loc[lay["pass"] == "forward",
                                                                                "class_id"].iloc[0]
    m = _metrics(cap, policy)
    assert (m["layer.count{view=rank0}"], m["microbatch.count_per_step{view=rank0}"],
            m["pass.count_per_step{view=rank0}"]) == (4, 2, 3)


def test_recompute_shows_as_a_recompute_pass(tmp_path, policy):
    off = _metrics(write_training(tmp_path / "off", 4, ranks=1, steps=2, seed=1), policy)
    on = _metrics(write_training(tmp_path / "on", 4, recompute=True, ranks=1, steps=2, seed=2), policy)
    assert off["pass.count_per_step{view=rank0}"] == 2 and on["pass.count_per_step{view=rank0}"] == 3
    for key in ("layer.count{view=rank0}", "microbatch.count_per_step{view=rank0}"):
        assert off[key] == on[key]
    rc = {key: v for key, v in on.items() if "pass=recompute" in key and key.startswith("layer.class_count")}
    assert list(rc.values()) == [4]
    fwd_class = next(key for key in on if key.startswith("layer.class_count") and "pass=forward" in key)
    assert fwd_class.replace("pass=forward", "pass=recompute") in rc     # the same layers, re-run
    assert not any("pass=recompute" in key for key in off)


def test_segmentation_cost_does_not_grow_with_layers_per_step(policy):
    """Same rows, 100x more layers per step, or 100x more steps: the Python work must not scale
    with layers or steps (the per-layer and per-step loops are gone). Counted, not timed: the
    boundary rule is learned once per pass for all steps at once."""
    import perfgate.metrics.segments as sg
    seq_few = training_sequence(2, microbatches=1, stages=1)
    seq_many = training_sequence(200, microbatches=1, stages=1)

    def table(seq, reps):
        rows = [s for _ in range(reps) for s in seq]
        n = len(rows)
        steps = np.repeat(np.arange(reps), len(seq)).astype(str)
        return pd.DataFrame({
            "row": np.arange(1, n + 1), "step": pd.Categorical(steps),
            "name": pd.Categorical([r[0] for r in rows]), "op_type": pd.Categorical([r[1] for r in rows]),
            "core_type": pd.Categorical([r[2] for r in rows]),
            "stream_id": pd.Categorical([None if r[2] == "HCCL" else "2" for r in rows]),
            "start_ns": np.arange(n, dtype=np.int64) * 1000, "dur_ns": np.full(n, 500, dtype=np.int64),
            "end_ns": np.arange(n, dtype=np.int64) * 1000 + 500, "is_comm": np.array([r[2] == "HCCL" for r in rows])})

    calls = {"n": 0}
    real = sg._learn

    def counting(*a, **kw):
        calls["n"] += 1
        return real(*a, **kw)

    few = table(seq_few, 100)
    many = table(seq_many, 1)
    sg._learn = counting
    try:
        s1 = sg.segment_rank(few, policy.segments, policy.family_suffix)
        n_few = calls["n"]
        calls["n"] = 0
        s2 = sg.segment_rank(many, policy.segments, policy.family_suffix)
        n_many = calls["n"]
    finally:
        sg._learn = real
    assert len(s1.layers) == 100 * 4 and len(s2.layers) == 400
    assert (n_few, n_many) == (2, 2)   # per pass, never per step or layer


@pytest.mark.real
def test_real_llm_fusion_candidates(ascend, policy):
    """Real candidates on the LLM capture: residual Add -> RmsNorm twice per forward layer
    (28 x 2, minus the last layer of each micro-batch, whose Add is followed by the pipeline
    send) and the rotary cos/sin table recomputed before each of the 56 RotaryPositionEmbedding."""
    from perfgate.metrics.fusion import fusion_candidates
    df = read_kernels(ascend.joinpath(*ST)).df
    c = fusion_candidates(df, policy.segments.fusion, policy.family_suffix)
    assert c.groupby(["pattern", "grade"]).size().to_dict() == {("add_rmsnorm", "high"): 54,
                                                                  ("rope_cos_sin", "high"): 56}
    typ = df.set_index("row")["op_type"].astype(str)
    assert (typ.loc[c.loc[c["pattern"] == "rope_cos_sin", "last_row"] + 1] == "RotaryPositionEmbedding").all()
    assert set(c.loc[c["pattern"] == "add_rmsnorm", "ops"]) == {"Add→RmsNorm"}
    assert (df["op_type"].astype(str) == "RotaryPositionEmbedding").sum() == 56


def test_structure_text_and_html_show_the_hierarchy(tmp_path, policy):
    from click.testing import CliRunner

    from perfgate.cli import main
    from perfgate.report.html import render_capture_html
    cap = write_training(tmp_path / "c", 3, microbatches=2, stage=1, ranks=1, steps=1)
    r = CliRunner().invoke(main, ["structure", "--text", str(cap)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "rank 0 step 10: 2 micro-batch(es), passes forward+backward, 12 layer segments, 240 kernel rows" in lines
    body = [x.strip().split(":")[0] for x in lines[2:13]]
    assert body == ["pipeline", "micro-batch 1 forward", "lm_head_loss", "micro-batch 1 backward", "pipeline",
                    "micro-batch 2 forward", "lm_head_loss", "micro-batch 2 backward", "pipeline", "grad_sync",
                    "optimizer"]
    assert "(model layers 3-1;" in lines[5] and "blocks ffn+attention)" in lines[5]
    js = CliRunner().invoke(main, ["structure", str(cap)])
    import json
    rep = json.loads(js.output)
    assert [x["kind"] for x in rep["ranks"][0]["outline"]["10"]][:3] == ["pipeline", "layer", "lm_head_loss"]
    assert sum(s["rows"] for s in rep["ranks"][0]["segments"]) == 240
    html = render_capture_html(fingerprint_capture(load_capture(cap), policy))
    assert '<section id="structure"><h2>Model structure</h2>' in html
    assert "<b>micro-batch 2 · backward</b>: 3 layers (model layers 3-1;" in html
    assert html.count("<li><b>micro-batch") == 4


def test_last_stage_loss_without_loss_names_is_still_the_head_segment(policy):
    """A vocab-parallel cross entropy spelled as Max / Sub / Exp / ReduceSum kernels (no 'loss'
    in any name) between the last forward and the first backward layer is lm_head_loss by place."""
    from perfgate.synth import transformer as tf
    plain = (("aclnnMax_ReduceMaxAiCore_ReduceMax", "ReduceMax", "AI_VECTOR_CORE", 10.0),
             ("aclnnSub_SubAiCore_Sub", "Sub", "AI_VECTOR_CORE", 10.0),
             ("aclnnExp_ExpAiCore_Exp", "Exp", "AI_VECTOR_CORE", 10.0),
             ("aclnnReduceSum_ReduceSumOpAiCore_ReduceSum", "ReduceSum", "AI_VECTOR_CORE", 10.0))
    seq = [x for x in training_sequence(4, microbatches=2, stage=1) if "CrossEntropy" not in x[0]]
    loss_at = [i for i in range(len(seq) - 3) if seq[i:i + 4] == [tf.RMSNORM, tf.MATMUL, tf.MATMUL, tf.MATMUL]]
    assert len(loss_at) == 2      # final norm, LM head, LM head grad x2 (loss kernels removed)
    for i in reversed(loss_at):
        seq[i + 2:i + 2] = list(plain)
    n = len(seq)
    df = pd.DataFrame({
        "row": np.arange(1, n + 1), "step": pd.Categorical(["1"] * n),
        "name": pd.Categorical([r[0] for r in seq]), "op_type": pd.Categorical([r[1] for r in seq]),
        "core_type": pd.Categorical([r[2] for r in seq]),
        "stream_id": pd.Categorical([None if r[2] == "HCCL" else "2" for r in seq]),
        "start_ns": np.arange(n, dtype=np.int64) * 1000, "dur_ns": np.full(n, 500, dtype=np.int64),
        "end_ns": np.arange(n, dtype=np.int64) * 1000 + 500, "is_comm": np.array([r[2] == "HCCL" for r in seq])})
    seg = segment_rank(df, policy.segments, policy.family_suffix)
    heads = seg.segments[seg.segments["kind"] == "lm_head_loss"]
    assert list(heads["rows"]) == [9, 9]      # final norm, LM head, 4 plain loss kernels, 2 grad matmuls, norm grad
    assert (seg.steps["layers"] == 16).all() and (seg.steps["microbatches"] == 2).all()


def test_segmentation_python_work_does_not_grow_with_steps(policy):
    """The same training step repeated 300 or 2,000 times: segment_rank makes the same
    number of Python-level function calls (cProfile count; numpy / pandas C loops not counted),
    so its Python work is a constant, not a per-step loop. The former per-step implementation
    (tests/segments_oracle.py) made ~600 calls more per step."""
    import cProfile
    import pstats

    import perfgate.metrics.segments as sg
    seq = training_sequence(4, microbatches=2, stages=1)

    def table(reps):
        rows = [s for _ in range(reps) for s in seq]
        n = len(rows)
        return pd.DataFrame({
            "row": np.arange(1, n + 1), "step": pd.Categorical(np.repeat(np.arange(reps), len(seq)).astype(str)),
            "name": pd.Categorical([r[0] for r in rows]), "op_type": pd.Categorical([r[1] for r in rows]),
            "core_type": pd.Categorical([r[2] for r in rows]),
            "stream_id": pd.Categorical([None if r[2] == "HCCL" else "2" for r in rows]),
            "start_ns": np.arange(n, dtype=np.int64) * 1000, "dur_ns": np.full(n, 500, dtype=np.int64),
            "end_ns": np.arange(n, dtype=np.int64) * 1000 + 500, "is_comm": np.array([r[2] == "HCCL" for r in rows])})

    def calls(reps):
        df = table(reps)
        pr = cProfile.Profile()
        pr.enable()
        seg = sg.segment_rank(df, policy.segments, policy.family_suffix)
        pr.disable()
        assert len(seg.steps) == reps and (seg.steps["layers"] == 16).all()
        return pstats.Stats(pr).total_calls

    calls(3)   # warm-up: first-use imports and caches
    # 300 steps (4,800 layers) and more: both sides sum the class table through pandas' group-by
    # (segments._class_aggregates; below km.SMALL_GROUP_ROWS rows a Python sum, fewer calls)
    few, many = calls(300), calls(2000)
    assert abs(many - few) <= 0.01 * few, (few, many)


def _kind_per_row(df, seg):
    """{source row: the kind of the segment holding it}."""
    order, where = _positions(df)
    out = {}
    for _, s in seg.segments.iterrows():
        for r in _rows_of(order, where, s["first_row"], s["last_row"]):
            out[int(r)] = s["kind"]
    return out


def test_last_stage_vocab_parallel_head_and_its_all_reduces_are_lm_head_loss(tmp_path, policy):
    """The last stage of a Megatron job: final RmsNorm, LM-head MatMul, the vocab-parallel cross
    entropy (no loss name) with its three tensor-parallel all-reduces, the loss all-reduce over the
    data-parallel ranks, then the loss and LM-head backward and the final norm's gradient. They were
    `other` x5 and `grad_sync` x4 per micro-batch; now one `lm_head_loss` segment each, and
    grad_sync is the step's gradient reduce-scatter / all-gather alone."""
    from perfgate.synth.transformer import VOCAB_PARALLEL_LOSS
    cap = write_training(tmp_path / "s", 4, microbatches=2, stage=1, loss=VOCAB_PARALLEL_LOSS, ranks=1, steps=2)
    df = load_capture(cap).ranks[0].kernels.df
    seg = segment_rank(df, policy.segments, policy.family_suffix)
    segs = seg.segments
    assert set(segs["kind"]) == {"layer", "pipeline", "lm_head_loss", "grad_sync", "optimizer"}
    head = segs[segs["kind"] == "lm_head_loss"]
    assert list(head["rows"]) == [len(VOCAB_PARALLEL_LOSS)] * 4      # 2 micro-batches x 2 steps
    kind = _kind_per_row(df, seg)
    name = df.set_index("row")["name"].astype(str)
    reduces = [r for r in name.index if name[r].startswith("hcom_allReduce")]
    assert len(reduces) == 16 and {kind[r] for r in reduces} == {"lm_head_loss"}
    sync = segs[segs["kind"] == "grad_sync"]
    assert list(sync["rows"]) == [2, 2]                                # reduce-scatter + all-gather per step


def test_a_gradient_bucket_after_the_head_gradient_stays_grad_sync(tmp_path, policy):
    """An all-reduce after the head's first gradient kernel (a DDP bucket the LM head's weight
    gradient fills) synchronises gradients: it stays grad_sync, the head around it lm_head_loss."""
    from perfgate.synth.transformer import ALLREDUCE, VOCAB_PARALLEL_LOSS
    loss = VOCAB_PARALLEL_LOSS + (ALLREDUCE,)
    cap = write_training(tmp_path / "s", 4, microbatches=2, stage=1, loss=loss, ranks=1, steps=1)
    df = load_capture(cap).ranks[0].kernels.df
    seg = segment_rank(df, policy.segments, policy.family_suffix)
    runs = [(s["kind"], s["rows"]) for _, s in seg.segments.iterrows() if s["kind"] != "layer"]
    assert runs[:3] == [("pipeline", 1), ("lm_head_loss", len(VOCAB_PARALLEL_LOSS)), ("grad_sync", 1)]


@pytest.mark.real
def test_real_ddp_bucket_inside_the_loss_region_stays_grad_sync(text_captures, policy):
    """The real single-stage capture (level1 rank 0): the loss and its backward (rows 32-79), a DDP
    gradient all-reduce fired by the classifier's weight gradient (row 80, after NLLLossBackward at
    row 70), then the classifier's backward (81-104): the all-reduce stays grad_sync."""
    df = read_kernels(text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
                      / "kernel_details.csv").df
    seg = segment_rank(df, policy.segments, policy.family_suffix)
    kind = _kind_per_row(df, seg)
    name = df.set_index("row")["name"].astype(str)
    assert name[80].startswith("hcom_allReduce") and name[70].startswith("aclnnNLLLossBackward")
    assert kind[80] == "grad_sync"
    assert {kind[r] for r in (*range(32, 80), *range(81, 105))} == {"lm_head_loss"}
