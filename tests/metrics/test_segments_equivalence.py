"""Step-batched segmentation equals the per-step loop it replaced.

:func:`perfgate.metrics.segments.segment_rank` now cuts the layers of every step at once (one
sort, segmented reductions, ``searchsorted`` over all steps' rows with step offsets in the
keys). ``tests/segments_oracle.py`` keeps the former per-step / per-pass implementation; every
table of :class:`RankSegments` (segments, layers, blocks, steps, classes: values, order and
dtypes) and every error message must be the same, on the real captures, on replicated
many-step captures, on captures whose steps differ (a layer missing, a partial step, a step
without anchors, steps of different models in one table) and on random kernel sequences."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import segments_oracle as oracle
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import load_capture
from perfgate.metrics import kernels as km
from perfgate.metrics import segments as new
from perfgate.synth.replicate import replicate_rank
from perfgate.synth.transformer import write_training, write_transformer

# the captures of ../shared/fixtures/ascend that load (tests/app/test_sweep.py OK)
REAL = ["msinsight/test/data/pytorch/text/level0", "msinsight/test/data/pytorch/text/level1",
        "msinsight/test/data/pytorch/text/level2", "msinsight/test/data/pytorch/db/level0",
        "msinsight/test/data/pytorch/db/level1", "msinsight/test/data/pytorch/db/level2",
        "msinsight/test/st/level2",
        "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache/PROF_000001_20260823165523228_00627338KRCOPCPN",
        "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
        "PROF_000001_20260823165326062_00625538CIGQAHCJ"]
LEVEL1 = "msinsight/test/data/pytorch/text/level1/rank0_ascend_pt"
ST2 = "msinsight/test/st/level2/rank_0_ascend_pt"


def _run(mod, df, policy, cats):
    try:
        return mod.segment_rank(df, policy.segments, policy.family_suffix, categories=cats, path="k.csv"), None
    except InvalidCaptureError as e:
        return None, e


def assert_same(df, policy, cats=None) -> new.RankSegments:
    """Old and new segmentation of ``df``: equal tables, or the same InvalidCaptureError."""
    want, werr = _run(oracle, df, policy, cats)
    got, gerr = _run(new, df, policy, cats)
    if werr is not None or gerr is not None:
        assert werr is not None and gerr is not None, (werr, gerr)
        assert (str(gerr), gerr.row, gerr.path) == (str(werr), werr.row, werr.path)
        return None
    for name in ("segments", "layers", "blocks", "steps", "classes"):
        pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_dtype=True, obj=name)
    assert_same_outline(got)
    return got


def assert_same_outline(seg) -> None:
    """:func:`segments.outline` (columns pulled once, one dict per run) equals the former
    group-by per run (``segments_oracle.outline``) on every step, values and Python types."""
    assert new.outline(seg) == oracle.outline(seg)
    for step in list(dict.fromkeys(seg.steps["step"].tolist())) + ["no such step"]:
        got, want = new.outline(seg, step), oracle.outline(seg, step)
        assert got == want, step
        assert [{k: type(v) for k, v in r.items()} for r in got] == \
            [{k: type(v) for k, v in r.items()} for r in want], step


def _cats(rank, policy):
    return km.categorize(rank.kernels.df, policy.categories) if rank.kernels.type_available else None


def _rank0(path):
    return sorted(load_capture(path, with_trace=False).ranks, key=lambda r: r.rank)[0]


def _concat(frames) -> pd.DataFrame:
    """Kernel tables one after another: rows renumbered, times shifted past the previous table,
    categorical columns re-built over the union of their values."""
    out, row0, t0 = [], 0, 0
    for f in frames:
        f = f.copy()
        f["row"] = f["row"] - f["row"].min() + row0 + 1
        shift = t0 - int(f["start_ns"].min()) + 1_000_000
        f["start_ns"] += shift
        f["end_ns"] += shift
        row0, t0 = int(f["row"].max()), int(f["end_ns"].max())
        out.append(f)
    cats = [c for c in out[0].columns if isinstance(out[0][c].dtype, pd.CategoricalDtype)]
    df = pd.concat([f.astype({c: object for c in cats}) for f in out], ignore_index=True)
    for c in cats:
        df[c] = pd.Categorical(df[c]) if c != "step" else \
            pd.Categorical(df[c], categories=sorted(pd.unique(df[c].dropna()), key=int))
    return df


@pytest.fixture(scope="module")
def many(ascend, tmp_path_factory):
    """30-step replicas of real level1 (CNN) and st/level2 (transformer, pipeline stage 0) rank 0."""
    out = tmp_path_factory.mktemp("replicas")
    ranks = {}
    for key, src in (("level1", LEVEL1), ("st2", ST2)):
        replicate_rank(ascend / src, out / key, steps=30, trace=False)
        ranks[key] = _rank0(out / key)
    return ranks


@pytest.mark.real
@pytest.mark.parametrize("cap", REAL)
def test_real_captures_every_rank(ascend, policy, cap):
    ranks = [r for r in load_capture(ascend / cap, with_trace=False).ranks if r.kernels is not None]
    assert ranks
    for r in ranks:   # (a partial rank has no kernel table)
        assert_same(r.kernels.df, policy, _cats(r, policy))


@pytest.mark.real
@pytest.mark.parametrize("key,layers", [("level1", 10), ("st2", 56)])
def test_replicated_many_steps(many, policy, key, layers):
    r = many[key]
    got = assert_same(r.kernels.df, policy, _cats(r, policy))
    assert len(got.steps) == 30 and (got.steps["layers"] == layers).all()


def _steps_of(df):
    return [str(s) for s in df["step"].cat.categories if (df["step"] == s).any()]


def _drop_layer(df, seg, step, layer):
    """Rows of ``layer`` of ``step`` removed (the step then has one layer fewer)."""
    lay = seg.layers[(seg.layers["step"] == step) & (seg.layers["layer"] == layer)].iloc[0]
    order = df[df["step"] == step].sort_values(["start_ns", "row"])["row"].to_numpy()
    i, j = int(np.flatnonzero(order == lay["first_row"])[0]), int(np.flatnonzero(order == lay["last_row"])[0])
    return df[~df["row"].isin(order[i:j + 1])]


@pytest.mark.real
@pytest.mark.parametrize("key", ["level1", "st2"])
def test_steps_that_differ(many, policy, key):
    """A layer missing in one step, a partial step (its first or last part cut), a step with no
    anchor left, a step with one row: no step's state may leak into the next."""
    df = many[key].kernels.df
    seg = new.segment_rank(df, policy.segments, policy.family_suffix)
    steps = _steps_of(df)
    d = _drop_layer(df, seg, steps[3], 2)
    d = _drop_layer(d, seg, steps[4], int(seg.steps.set_index("step").loc[steps[4], "layers"]))   # its last layer
    sizes = d.groupby("step", observed=True).size()
    t = d[d["step"] == steps[7]].sort_values("start_ns")
    d = d.drop(t.index[len(t) // 2:])                                 # step 7: its first half only
    t = d[d["step"] == steps[8]].sort_values("start_ns")
    d = d.drop(t.index[: len(t) // 3])                                # step 8: its last two thirds
    assert seg.layers["anchor"].isin(["conv", "attention"]).all()
    hits = d["op_type"].astype(str).str.contains("Conv2D|FlashAttention")   # every anchor kernel
    d = d[~((d["step"] == steps[10]) & hits)]                         # step 10: no anchor
    t = d[d["step"] == steps[12]]
    d = d.drop(t.index[1:])                                           # step 12: one row
    got = assert_same(d, policy, None)
    per = got.steps.set_index("step")["layers"]
    full = int(seg.steps["layers"].iloc[0])
    assert per[steps[3]] == full - 1 and per[steps[10]] == 0 and per[steps[12]] == 0
    assert per[steps[0]] == per[steps[29]] == full and sizes[steps[3]] < sizes[steps[0]]


@pytest.mark.real
def test_steps_of_different_models_in_one_table(many, policy, tmp_path):
    """Steps of a CNN (conv anchor), a transformer pipeline stage (attention anchor) and a
    synthetic recompute / MoE training run, interleaved in one table: each step chooses its own
    anchor rule and learns its own boundaries."""
    cnn, st2 = many["level1"].kernels.df, many["st2"].kernels.df
    rc = _rank0(write_training(tmp_path / "rc", 4, microbatches=2, recompute="layer", moe=True, dense_layers=1,
                               steps=3)).kernels.df
    parts = []
    for i, s in enumerate(_steps_of(cnn)[:6]):
        parts.append(cnn[cnn["step"] == s])
        parts.append(st2[st2["step"] == _steps_of(st2)[i]])
        parts.append(rc[rc["step"] == _steps_of(rc)[i % 3]])
    frames = []
    for i, p in enumerate(parts):   # step i + 1: renamed so the steps stay distinct
        p = p.copy()
        p["step"] = pd.Categorical([str(i + 1)] * len(p))
        frames.append(p)
    got = assert_same(_concat(frames), policy, None)
    assert list(got.steps["anchor"][:3]) == ["conv", "attention", "attention"]


@pytest.mark.parametrize("recompute", [False, True, "layer"])
@pytest.mark.parametrize("moe", [False, True])
def test_synthetic_training(tmp_path, policy, recompute, moe):
    cap = write_training(tmp_path / "t", 5, microbatches=3, stage=1, stages=2, recompute=recompute, moe=moe,
                         dense_layers=1, steps=4)
    for r in load_capture(cap, with_trace=False).ranks:
        got = assert_same(r.kernels.df, policy, _cats(r, policy))
        assert (got.steps["layers"] > 0).all()


def test_synthetic_companions(tmp_path, policy):
    cap = load_capture(write_transformer(tmp_path / "c", 6, moe=True, companion_layers=(3,), ranks=1, steps=5),
                       with_trace=False)
    got = assert_same(cap.ranks[0].kernels.df, policy)
    assert got.layers["companion"].sum() == 5


@pytest.mark.real
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow) for s in range(2, 6))])
def test_random_rows_dropped_per_step(many, policy, seed):
    """Each step loses a different random set of rows (1-30 %): steps differ everywhere."""
    rng = np.random.default_rng(seed)
    for key in ("level1", "st2"):
        df = many[key].kernels.df
        frac = rng.uniform(0.01, 0.3, size=len(df["step"].cat.categories))[df["step"].cat.codes.to_numpy()]
        assert_same(df[rng.random(len(df)) >= frac], policy)


def _random_sequences(policy, seed, count):
    """Random kernel sequences (tests/metrics/test_segments.py alphabet), 1-12 steps each: equal tables
    or the same error."""
    from test_segments import _ALPHABET, _table
    rng = np.random.default_rng(seed)
    for _ in range(count):
        nsteps = int(rng.integers(1, 13))
        n = int(rng.integers(1, 200))
        steps = np.sort(rng.integers(1, nsteps + 1, n))
        # runs of a repeated motif make real layers; the rest is noise
        motif = rng.integers(0, len(_ALPHABET), int(rng.integers(2, 8)))
        picks = np.where(rng.random(n) < 0.7, np.resize(motif, n), rng.integers(0, len(_ALPHABET), n))
        assert_same(_table(picks.tolist(), steps.tolist()), policy)


def test_random_sequences_many_steps(policy):
    _random_sequences(policy, 21, 10)


@pytest.mark.slow
def test_random_sequences_many_steps_long(policy):
    _random_sequences(policy, 2121, 300)


def test_bad_input_errors_are_the_same(policy, monkeypatch):
    """The lossless check names the same step and rows when a segment goes wrong: a layer end
    moved one row too far (two segments overlap) and one row too short (a row in none)."""
    from test_segments import _table
    seq = [1, 2, 0, 3, 1, 2, 0, 3, 1, 2, 0, 3, 5, 6]
    df = _table(seq * 3, [1] * 14 + [2] * 14 + [3] * 14)
    for delta, msg in ((1, "overlap"), (-1, "belong to no segment")):
        errs = []
        for mod in (oracle, new):
            real = mod._check_all

            def moved(a_lo, a_hi, *rest, _real=real):
                a_hi = a_hi.copy()
                a_hi[len(a_hi) // 2] += delta
                return _real(a_lo, a_hi, *rest)

            monkeypatch.setattr(mod, "_check_all", moved)
            errs.append(_run(mod, df, policy, None)[1])
            monkeypatch.setattr(mod, "_check_all", real)
        assert errs[0] is not None and msg in str(errs[0])
        assert (str(errs[1]), errs[1].row) == (str(errs[0]), errs[0].row)


def test_synthetic_vocab_parallel_head(tmp_path, policy):
    """The last stage's head with the vocab-parallel cross entropy's all-reduces (one lm_head_loss
    segment per micro-batch), and with a gradient bucket after the head's gradient (grad_sync)."""
    from perfgate.synth.transformer import ALLREDUCE, VOCAB_PARALLEL_LOSS
    for i, loss in enumerate((VOCAB_PARALLEL_LOSS, VOCAB_PARALLEL_LOSS + (ALLREDUCE,))):
        cap = write_training(tmp_path / f"v{i}", 3, microbatches=3, stage=1, loss=loss, ranks=1, steps=3)
        got = assert_same(_rank0(cap).kernels.df, policy)
        assert (got.segments["kind"] == "lm_head_loss").sum() == 9
