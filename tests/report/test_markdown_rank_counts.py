"""A p50 / max cell of the Markdown's gated table taken over fewer ranks than the check's other
p50 values says so: the real LLM capture's rank 1 is partial (step_trace_time.csv and
communication.json only), so kernel metrics' "p50" was a median of one rank beside step metrics'
median of two, under one header."""
from perfgate.app.gate import check, save_baseline
from perfgate.report import render_markdown
from perfgate.store.baselines import BaselineStore
from perfgate.synth.mutate import add_calls
from tests.synth.test_mutate_no_trace import ROPE


def test_partial_rank_p50_cells_name_their_rank_count(llm_pair, policy, tmp_path):
    base, cand = llm_pair
    add_calls(cand / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT", ROPE)
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    md = render_markdown(r)
    row = next(ln for ln in md.splitlines() if ln.startswith("| 🔴 | calls per step of kernel family " + ROPE))
    rank0, p50 = row.split(" | ")[2:4]
    assert "(1 of 2 ranks)" in p50 and "ranks)" not in rank0


def test_full_rank_cells_carry_no_count(tmp_path, policy):
    from perfgate.app.gate import run_demo
    *_, result, _ = run_demo(tmp_path / "demo", policy=policy)
    assert " of 2 ranks)" not in render_markdown(result)
