"""A ``history:BRANCH`` baseline pools one workload: the candidate's (a real
CNN capture recorded on a branch of synthetic transformer runs joined their series, and the
baseline became transformer medians with the CNN's Top-N set and step count: a byte-identical
re-run of a recorded capture failed, blaming a family that got 1 % faster)."""
import pytest

from perfgate.app.gate import HistoryEntry, check, record_history
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture

from _edits import edit_profiler_info


def _collected_as_synth(doc):
    """level1's collection options as the synthetic captures' (with_stack and the other host-side
    switches not recorded, l2_cache off): one history series, so only the workload tells them apart."""
    for k in ("with_stack", "record_shapes", "profile_memory", "with_modules", "with_flops"):
        doc["config"]["common_config"].pop(k, None)
    doc["config"]["experimental_config"]["_l2_cache"] = False


@pytest.fixture
def level1_in_the_series(copy_capture):
    cap = copy_capture("level1")
    edit_profiler_info(cap, _collected_as_synth)
    return cap


@pytest.fixture
def mixed_history(tmp_path, level1_in_the_series, policy):
    db = tmp_path / "h.sqlite"
    caps = [write_capture(tmp_path / f"s{i}", SynthSpec(seed=i)) for i in range(4)]
    for i, c in enumerate(caps):
        record_history(c, HistoryEntry("main", commit=f"c{i}"), policy=policy, history_path=db, env={})
    record_history(level1_in_the_series, HistoryEntry("main", commit="cnn"), policy=policy, history_path=db, env={})
    return db, caps


def test_the_baseline_pools_the_candidates_workload_only(mixed_history, policy):
    db, caps = mixed_history
    r = check(caps[3], "history:main", policy=policy, history_path=db, env={}, store=BaselineStore(db.parent / "bl"))
    assert r.exit_code == 0, [c.reason for c in r.comparisons if c.fails][:3]
    note = next(n for n in r.notes if n.startswith("baseline history:main"))
    # caps[3] is recorded (run 4): the candidate itself is left out of its own pool, and level1 (run 5) too
    assert "median of 3 run(s)" in note and "run(s) [5] of this series left out: another workload" in note
    assert "run(s) [4] left out: the candidate itself" in note
    topn = [c for c in r.comparisons if c.name == "kernel.topn"]
    assert topn and all(c.verdict == "unchanged" for c in topn)


def test_a_candidate_of_the_other_workload_finds_too_few_runs(mixed_history, policy, level1_in_the_series):
    db, _ = mixed_history
    r = check(level1_in_the_series, "history:main", policy=policy, history_path=db, env={},
              store=BaselineStore(db.parent / "bl"))
    assert r.exit_code == 4
    assert "another workload" in (r.error or {}).get("message", "") or any("another workload" in n for n in r.notes)
