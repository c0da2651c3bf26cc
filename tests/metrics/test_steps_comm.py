"""Step anatomy, host-bound labels (with near-threshold pairs from the synthetic
writer), warm-up, slow rank, ranks from different runs, HCCL kinds and exposed-communication
attribution, communication.json figures and bad input."""
import json
from pathlib import Path
import shutil

import numpy as np
import pandas as pd
import pytest

from perfgate import terms
from perfgate.errors import InvalidCaptureError
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.comm import kind_of
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.steps import DEFAULT_THRESHOLDS, label_steps, step_table
from perfgate.report import render_markdown
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture

from _edits import EXACT  # one step whose anatomy is known exactly


def anatomy(tmp_path, name, **kw):
    spec = SynthSpec(**dict(EXACT, **kw))
    cap = load_capture(write_capture(tmp_path / name, spec))
    t = step_table(cap.ranks[0])
    return t.iloc[0], {f.code for f in label_steps(t)}


# ---- the real capture, checkable by hand against step_trace_time.csv -------------------------

def test_real_anatomy_matches_step_trace(text_captures, policy):
    cap = load_capture(text_captures / "level1")
    t = step_table(cap.ranks[0]).iloc[0]
    st = cap.ranks[0].step_trace.iloc[0]
    assert t["wall_us"] == pytest.approx(st["stage_us"], abs=0.05)          # Stage = device span here
    assert t["bubble_us"] == pytest.approx(st["free_us"], abs=0.05)         # idle inside the span = Free
    assert t["prelaunch_us"] == pytest.approx(st["preparing_us"], abs=0.01)  # host start -> first task
    assert t["exposed_comm_us"] == pytest.approx(st["comm_not_overlapped_us"], abs=0.01)
    assert t["kernel_sum_us"] == pytest.approx(114865.613) and t["busy_us"] == pytest.approx(110836.940)
    assert (t["first_row"], t["last_row"], t["kernels"]) == (1, 191, 191)
    fp = fingerprint_capture(cap, policy)
    codes = {(f.code, f.rank) for f in fp.findings}
    assert ("PRELAUNCH_GAP_HEAVY", 0) in codes and ("EXPOSED_COMM_SIGNIFICANT", 1) in codes
    assert fp.metrics["comm.calls_per_step{kind=allreduce,view=rank0}"].value == 4
    assert fp.metrics["comm.exposed_us{kind=allreduce,view=rank0}"].value == pytest.approx(101963.203, abs=0.01)
    assert "rank.skew_ratio{metric=step.time_us}" in fp.metrics
    skew = fp.metrics["rank.skew_ratio{metric=step.time_us}"].value
    assert skew == pytest.approx((136581.009 - 131912.5) / ((136581.009 + 131912.5) / 2), rel=1e-4)
    # communication.json: HCCS/SDMA bandwidth, wait ratio, elapse identity checked
    assert fp.metrics["comm.bandwidth_gbps{link=HCCS,view=rank0}"].value > 0
    assert {c.status for c in fp.self_checks if c.name == "comm_op_identity"} == {"pass"}


def test_real_report_has_hand_checkable_section(text_captures, policy, tmp_path):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    md = render_markdown(check(text_captures / "level2", "main", policy=policy, store=store, env={}))
    assert "Per-rank steps, hand-checkable" in md
    assert "| 0 | 50 | 1-191 |" in md and "129,862.9" in md   # level2 rank0 wall = its Stage
    assert "| 0 | 50 | allreduce | 4 |" in md


# ---- labels: each triggers exactly when its threshold is crossed ----------------------------

@pytest.mark.parametrize("us,expect", [(990.0, False), (1010.0, True)])
def test_prelaunch_near_threshold(tmp_path, us, expect):
    row, codes = anatomy(tmp_path, "p", prelaunch_us=us)
    assert row["step_us"] < 10_000  # so the limit is the 1 ms floor
    assert row["prelaunch_us"] == pytest.approx(us)
    assert ("PRELAUNCH_GAP_HEAVY" in codes) is expect


@pytest.mark.parametrize("us,expect", [(990.0, False), (1010.0, True)])
def test_tail_near_threshold(tmp_path, us, expect):
    row, codes = anatomy(tmp_path, "t", tail_us=us)
    assert row["tail_us"] == pytest.approx(us)
    assert ("TAIL_GAP_HEAVY" in codes) is expect


@pytest.mark.parametrize("us,expect", [(990.0, False), (1010.0, True)])
def test_internal_bubble_near_threshold(tmp_path, us, expect):
    row, codes = anatomy(tmp_path, "b", bubble_us=us)
    assert row["internal_bubble_us"] == pytest.approx(us)  # the 3 us launch gaps are below bubble_min_us
    assert row["step_us"] < 10_000
    assert ("INTERNAL_BUBBLE_HEAVY" in codes) is expect


def _bubble_for(tmp_path, target):
    """The same step without a bubble, from which the bubble for ``target`` is solved."""
    row, _ = anatomy(tmp_path, "zero")
    return row


@pytest.mark.parametrize("ratio,expect", [(0.29, False), (0.31, True)])
def test_underfeed_near_threshold(tmp_path, ratio, expect):
    r0 = _bubble_for(tmp_path, ratio)
    wall0, idle0 = r0["wall_us"] - 3.0, r0["bubble_us"] - 3.0  # the bubble replaces one 3 us gap
    b = (ratio * wall0 - idle0) / (1 - ratio)  # (idle0 + b) / (wall0 + b) = ratio
    row, codes = anatomy(tmp_path, "u", bubble_us=round(b, 3))
    assert row["underfeed_ratio"] == pytest.approx(ratio, abs=1e-4)
    assert ("DEVICE_IDLE_GAP_HEAVY" in codes) is expect


@pytest.mark.parametrize("ratio,expect", [(9.9, False), (10.1, True)])
def test_recompile_near_threshold(tmp_path, ratio, expect):
    r0 = _bubble_for(tmp_path, ratio)
    b = ratio * r0["kernel_sum_us"] - (r0["wall_us"] - 3.0)  # (wall0 - gap + b) / ΣDuration = ratio
    row, codes = anatomy(tmp_path, "r", bubble_us=round(b, 3))
    assert row["wall_us"] / row["kernel_sum_us"] == pytest.approx(ratio, abs=1e-3)
    assert row["largest_bubble_us"] >= 0.5 * row["wall_us"] and row["wait_after_gap_us"] == pytest.approx(b, abs=0.01)
    assert ("RECOMPILE_SUSPECTED" in codes) is expect


def test_exposed_bands_unit():
    base = dict(rank=0, step="1", first_row=1, last_row=2, kernels=2, step_us=np.nan, wall_us=100.0,
                busy_us=100.0, kernel_sum_us=100.0, bubble_us=0.0, underfeed_ratio=0.0, prelaunch_us=np.nan,
                tail_us=np.nan, internal_bubble_us=0.0, largest_bubble_us=0.0, largest_bubble_row=None,
                wait_after_gap_us=np.nan, comm_sum_us=10.0, exposed_comm_us=0.0)
    for x, code in ((0.301, "EXPOSED_COMM_SIGNIFICANT"), (0.299, None), (0.101, None), (0.099, "COMM_WELL_HIDDEN")):
        codes = {f.code for f in label_steps(pd.DataFrame([dict(base, exposed_comm_ratio=x)]))}
        assert codes == ({code} if code else set())


def test_exposed_bands_on_synthetic(tmp_path):
    _, hidden = anatomy(tmp_path, "h", overlap=0.0, comm_us=500.0)
    _, exposed = anatomy(tmp_path, "x", overlap=1.0)
    assert "COMM_WELL_HIDDEN" in hidden and "EXPOSED_COMM_SIGNIFICANT" in exposed


# ---- warm-up, slow rank, ranks from different runs -------------------------------------------

def test_warmup_not_stripped_fails_closed(tmp_path, policy):
    root = write_capture(tmp_path / "w", SynthSpec(steps=4, warmup_factor=3.0))
    fp = fingerprint_capture(load_capture(root), policy)
    w = [f for f in fp.findings if f.code == "WARMUP_NOT_STRIPPED"]
    assert {f.rank for f in w} == {0, 1} and w[0].step == "10" and w[0].value > 1.5
    store = BaselineStore(tmp_path / "bl")
    with pytest.raises(InvalidCaptureError, match="WARMUP_NOT_STRIPPED"):
        save_baseline(root, "main", policy=policy, store=store, env={})
    assert not (tmp_path / "bl" / "main.json").exists()
    save_baseline(write_capture(tmp_path / "ok", SynthSpec(steps=4)), "main", policy=policy, store=store, env={})
    r = check(root, "main", policy=policy, store=store, env={})
    assert r.status == terms.INVALID and r.exit_code == 3 and "WARMUP_NOT_STRIPPED" in r.error["message"]


@pytest.mark.parametrize("factor", [1.2, 1.4, 1.6, 2.0])
def test_warmup_threshold_is_exact(tmp_path, policy, factor):
    cap = load_capture(write_capture(tmp_path / "w", SynthSpec(ranks=1, steps=3, warmup_factor=factor, jitter=0.0)))
    t = step_table(cap.ranks[0])
    ratio = t["step_us"].iloc[0] / np.median(t["step_us"].iloc[1:])
    fp = fingerprint_capture(cap, policy)
    assert any(f.code == "WARMUP_NOT_STRIPPED" for f in fp.findings) == bool(ratio > DEFAULT_THRESHOLDS["warmup_ratio"])


def test_slow_rank_named(tmp_path, policy):
    """Must show 3: the second rank's steps are 20 % slower -> SLOW_RANK naming it."""
    fp = fingerprint_capture(load_capture(write_capture(
        tmp_path / "s", SynthSpec(ranks=4, steps=2, rank_slowdown={1: 1.2}))), policy)
    slow = [f for f in fp.findings if f.code == "SLOW_RANK"]
    assert {f.rank for f in slow} == {1} and {f.step for f in slow} == {"10", "11"}
    assert "rank 1 step 10" in slow[0].message and slow[0].value > 0.05


@pytest.mark.parametrize("factor", [1.02, 1.05, 1.08, 1.12])
def test_slow_rank_threshold_is_exact(tmp_path, policy, factor):
    fp = fingerprint_capture(load_capture(write_capture(
        tmp_path / "s", SynthSpec(ranks=3, steps=1, jitter=0.0, rank_slowdown={2: factor}))), policy)
    wall = {r["rank"]: r["wall_us"] for r in fp.detail["steps"]}  # = step time (Stage) here
    p50 = float(np.median(list(wall.values())))
    for rank, w in wall.items():
        flagged = any(f.code == "SLOW_RANK" and f.rank == rank for f in fp.findings)
        assert flagged == bool(w / p50 - 1 > 0.05), (rank, w / p50 - 1)


def test_ranks_from_different_runs(copy_capture, text_captures, policy, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(text_captures / "level1/rank0_ascend_pt", mixed / "rank0_ascend_pt")
    shutil.copytree(text_captures / "level2/rank1_ascend_pt", mixed / "rank1_ascend_pt")
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(mixed, "main", policy=policy, store=store, env={})
    assert r.status == terms.INVALID and "RANKS_FROM_DIFFERENT_RUNS" in r.error["message"]
    assert "3,591 s apart" in r.error["message"] or "s apart" in r.error["message"]


def test_rank_step_mismatch_finding(tmp_path, policy):
    root = write_capture(tmp_path / "m", SynthSpec(ranks=2, steps=3))
    kd = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    lines = kd.read_text().splitlines()
    kd.write_text("\n".join([lines[0]] + [x for x in lines[1:] if not x.startswith("12,")]) + "\n")
    st = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    sl = st.read_text().splitlines()
    st.write_text("\n".join([x for x in sl if not x.startswith("12,")]) + "\n")
    tv = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    ev = json.loads(tv.read_text())
    tv.write_text(json.dumps([e for e in ev if e.get("name") != "ProfilerStep#12"]))
    cm = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
    if cm.is_file():   # a step communication.json alone lists is another capture's (exit 3)
        d = json.loads(cm.read_text())
        d.pop("step12", None)
        cm.write_text(json.dumps(d))
    fp = fingerprint_capture(load_capture(root), policy)
    mm = [f for f in fp.findings if f.code == "RANK_STEP_MISMATCH"]
    assert mm and "rank 1: 2 step(s)" in mm[0].message


# ---- communication ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,kind", [
    ("hcom_allReduce__586_0_1", "allreduce"), ("hcom_allGather__1_2", "allgather"),
    ("hcom_reduceScatter__9_0", "reducescatter"), ("hcom_alltoallv__3", "alltoall"),
    ("hcom_broadcast__445_0", "broadcast"), ("hcom_batchSendRecv__128_3_1", "send_recv"),
    ("hcom_receive__1", "send_recv"), ("hcom_send__1", "send_recv"), ("hcom_barrier_1", "barrier"),
    ("hcom_reduce__5", "reduce"), ("hcom_mystery__1", "other")])
def test_kinds(name, kind):
    assert kind_of(name) == kind


def test_more_exposed_comm_is_a_regression_with_kinds(tmp_path, policy):
    """Must show 4: same counts, communication no longer hidden -> exposed-comm regression
    naming the HCCL kind that grew."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(write_capture(tmp_path / "a", SynthSpec(seed=1, overlap=0.3)), "main", policy=policy,
                  store=store, env={})
    r = check(write_capture(tmp_path / "b", SynthSpec(seed=2, overlap=1.0)), "main", policy=policy,
              store=store, env={})
    fails = {c.key: c for c in r.comparisons if c.fails}
    x = fails["step.exposed_comm_ratio{view=rank0}"]
    assert "HCCL kinds that grew: allreduce uncovered" in x.reason and "calls 2 -> 2" in x.reason
    assert not any(c.name in ("kernel.calls_per_step", "comm.calls_per_step") for c in fails.values())


def test_comm_json_missing_on_one_rank(tmp_path, policy):
    root = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=1))
    (root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").unlink()
    fp = fingerprint_capture(load_capture(root), policy)
    miss = [f for f in fp.findings if f.code == "COMM_JSON_MISSING"]
    assert [f.rank for f in miss] == [1] and fp.config["has_comm_json"] is False


def test_comm_op_identity_violation_fails_closed(tmp_path, policy):
    root = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=1))
    p = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
    doc = json.loads(p.read_text())
    op = next(k for k in doc["step10"]["collective"] if k != "Total Op Info")
    doc["step10"]["collective"][op]["Communication Time Info"]["Wait Time(ms)"] += 0.5
    p.write_text(json.dumps(doc))
    store = BaselineStore(tmp_path / "bl")
    with pytest.raises(InvalidCaptureError, match="comm_op_identity") as e:
        save_baseline(root, "main", policy=policy, store=store, env={})
    assert op.split("@")[0] in e.value.message



def test_comm_op_identity_holds_on_every_real_file(ascend, policy):
    """Elapse = Transit + Wait + Idle (SCHEMAS.md §5) on every real communication.json, well
    inside the policy's self_checks.comm_op_identity_abs_us (measured: at most 1.1e-13 us)."""
    from perfgate.ingest.comm import read_communication
    from perfgate.metrics.comm import op_identity_checks
    files = sorted(ascend.rglob("communication.json"))
    assert len(files) >= 6
    tol = policy.self_checks["comm_op_identity_abs_us"]
    assert tol == 1.0
    nops = 0
    for f in files:
        comm = read_communication(f)
        ops = comm.ops
        nops += len(ops)
        diff = (ops["elapse_us"] - (ops["transit_us"] + ops["wait_us"] + ops["idle_us"])).abs()
        assert diff.max() < 1e-6, (f, diff.max())
        checks = op_identity_checks(comm, 0, f.name, tol_us=tol)
        assert checks and {c.status for c in checks} == {"pass"}, f
    assert nops == 102  # 72 in the G2025 / G2023 files + 15 per rank of st/level2 (SOURCES.md 1e)


def test_comm_op_identity_tolerance_comes_from_the_policy(tmp_path, policy):
    """A 0.25 ms (250 us) mismatch on one op of rank 1: refused with the default 1 us, naming
    op and rank; accepted when the policy's tolerance is 300 us."""
    from perfgate.policy import load_policy
    root = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=1))
    p = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
    doc = json.loads(p.read_text())
    op = [k for k in doc["step10"]["collective"] if k != "Total Op Info"][1]
    doc["step10"]["collective"][op]["Communication Time Info"]["Idle Time(ms)"] += 0.25
    p.write_text(json.dumps(doc))
    with pytest.raises(InvalidCaptureError) as e:
        save_baseline(root, "main", policy=policy, store=BaselineStore(tmp_path / "bl"), env={})
    msg = e.value.message
    assert "self-check comm_op_identity failed on rank 1 step 10" in msg and op.split("@")[0] in msg
    assert "off by more than 1.0 us, self_checks.comm_op_identity_abs_us" in msg
    assert not (tmp_path / "bl" / "main.json").exists()
    wide = tmp_path / "wide.yaml"
    wide.write_text((Path(__file__).resolve().parents[2] / "perfgate/policies/default.yaml").read_text()
                    .replace("comm_op_identity_abs_us: 1.0", "comm_op_identity_abs_us: 300"))
    pol = load_policy(wide)
    assert pol.self_checks["comm_op_identity_abs_us"] == 300
    fp = fingerprint_capture(load_capture(root), pol)
    got = [c for c in fp.self_checks if c.name == "comm_op_identity" and c.rank == 1]
    assert [c.status for c in got] == ["pass"] and "largest difference 250.000000 us" in got[0].message

def test_bubble_unreliable_for_batchsendrecv(tmp_path, policy):
    root = write_capture(tmp_path / "pp", SynthSpec(ranks=1, steps=1))
    for f in ("kernel_details.csv", "trace_view.json", "communication.json"):
        p = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT" / f
        p.write_text(p.read_text().replace("hcom_allReduce_", "hcom_batchSendRecv_"))
    fp = fingerprint_capture(load_capture(root), policy)
    assert any(f.code == "BUBBLE_UNRELIABLE" for f in fp.findings)
    assert fp.metrics["comm.calls_per_step{kind=send_recv,view=rank0}"].value == 2
