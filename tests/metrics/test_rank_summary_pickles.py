"""The per-rank fan-out speaks typed shapes: workers get a FingerprintConfig and send back a
frozen RankSummary, which survives pickling and a ``spawn`` process pool unchanged."""
import dataclasses
import multiprocessing as mp
import pickle
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import pytest

from perfgate.ingest import discover, load_rank
from perfgate.metrics.fingerprint import fingerprint_from_summaries, summarize_rank
from perfgate.metrics.summary import FingerprintConfig, RankSummary
from perfgate.app.run import _summarize_location
from perfgate.synth import SynthSpec, write_capture
from perfgate.terms import TraceMode


def _same_summary(a: RankSummary, b: RankSummary):
    for f in dataclasses.fields(RankSummary):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y)
        elif f.name in ("checks", "findings"):
            assert [c.to_dict() for c in x] == [c.to_dict() for c in y], f.name
        else:
            assert x == y, f.name


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return write_capture(tmp_path_factory.mktemp("rs") / "c", SynthSpec(ranks=3, steps=3, seed=4))


def test_rank_summary_is_frozen_and_pickles(cap, policy):
    loc = discover(cap)[0]
    s = summarize_rank(load_rank(loc, with_trace=TraceMode.READ), policy, cap)
    assert isinstance(s, RankSummary) and s.rank == 0 and len(s.steps) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rank = 1
    _same_summary(pickle.loads(pickle.dumps(s)), s)


def test_rank_summaries_through_a_spawn_pool_give_the_serial_fingerprint(cap, policy):
    config = FingerprintConfig(policy=policy, root=cap, with_trace=TraceMode.READ)
    locs = discover(cap)
    serial = [_summarize_location(loc, config) for loc in locs]
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        pooled = list(pool.map(_summarize_location, locs, [config] * len(locs)))
    assert [type(s) for s in pooled] == [RankSummary] * 3
    assert [s.rank for s in pooled] == [0, 1, 2]
    for a, b in zip(pooled, serial):
        _same_summary(a, b)
    fa, fb = (fingerprint_from_summaries(x, policy, cap) for x in (pooled, serial))
    assert {k: v.to_dict() for k, v in fa.metrics.items()} == {k: v.to_dict() for k, v in fb.metrics.items()}
    assert fa.config == fb.config and fa.config["world_size"] == 3


def test_fingerprint_config_says_what_the_workers_read(policy):
    c = FingerprintConfig(policy=policy, root=".", with_trace=TraceMode.AUTO)
    assert c.read_pmu == bool(policy.operators.read_pmu or policy.operators.require_pipe)
    assert c.read_shapes == bool(policy.operators.read_shapes or policy.mfu is not None)
    assert pickle.loads(pickle.dumps(c)).with_trace == TraceMode.AUTO
