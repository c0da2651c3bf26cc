"""perfgate.synth.mutate.add_calls on a rank without trace_view.json (the real LLM capture
msinsight/test/st/level2 has none): it raised FileNotFoundError;
it now places the new tasks in the idle gaps between the step's kernel rows."""
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.store.baselines import BaselineStore
from perfgate.synth.mutate import add_calls

ROPE = "RotaryPositionEmbedding"


def test_add_calls_without_a_timeline_doubles_the_family(llm_pair, policy, tmp_path):
    base, cand = llm_pair
    out = cand / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    assert not (out / "trace_view.json").exists()
    before = pd.read_csv(out / "kernel_details.csv")
    st_before = pd.read_csv(out / "step_trace_time.csv")
    added = add_calls(out, ROPE)
    after = pd.read_csv(out / "kernel_details.csv")
    n = int(before["Name"].eq(ROPE).sum())
    assert len(added) == n and int(after["Name"].eq(ROPE).sum()) == 2 * n
    # every new task lies in idle time: no overlap with any other row of the step (exact ns:
    # a float64 of a 1.76e15 us timestamp resolves only ~0.25 us)
    raw = pd.read_csv(out / "kernel_details.csv", dtype=str)
    s = np.array([int(Decimal(x.strip()) * 1000) for x in raw["Start Time(us)"]], dtype=np.int64)
    e = s + np.array([int(Decimal(x.strip()) * 1000) for x in raw["Duration(us)"]], dtype=np.int64)
    for start_ns, dur_ns in added:
        assert int(((s < start_ns + dur_ns) & (e > start_ns)).sum()) == 1   # itself only
    st_after = pd.read_csv(out / "step_trace_time.csv")
    grew = (st_after["Computing"] - st_before["Computing"]).sum()
    assert grew == pytest.approx(sum(d for _, d in added) / 1000, rel=1e-9)
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.exit_code == 1
    calls = [c for c in r.comparisons if c.name == "kernel.calls_per_step" and c.labels.get("family") == ROPE
             and c.labels.get("view") == "rank0"]
    assert calls and calls[0].verdict == terms.REGRESSION and calls[0].candidate == 2 * calls[0].baseline
    assert not [c for c in r.self_checks if c.status == "fail"]


def test_add_calls_without_room_says_so(llm_pair):
    _, cand = llm_pair
    with pytest.raises(ValueError, match="no idle gap longer than .* us left for .* in step 13"):
        add_calls(cand / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT",
                  "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore")
