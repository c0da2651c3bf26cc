"""Validity model, rank coverage (Q12) and raw msprof ranks (Q05).

The real transformer capture ``msinsight/test/st/level2`` (SOURCES.md 1e: world_size 4, rank 0
full, rank 1 with only step_trace_time.csv + communication.json) is a normal capture: its
coverage is recorded, a partial rank contributes its step and communication metrics, and a
metric is compared only where both sides computed it over the same ranks.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import load_capture
from perfgate.ingest.discover import discover
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.intervals import busy_union_ns

ST = "msinsight/test/st/level2"


def _run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={})
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def st_level2(ascend):
    return ascend / ST


def test_real_st_level2_rank0_values(st_level2, policy):
    """SOURCES.md 1e rank 0 reference: step 13, 2,463 rows, ΣDuration 651,464.36 us = busy union,
    communication ΣDuration 420,174.26 us = step_trace Communication, compute busy union 231,290.10 us."""
    cap = load_capture(st_level2)
    r0, r1 = cap.ranks
    assert (r0.rank, r1.rank) == (0, 1) and r1.kernels is None
    assert r0.tables == ("kernels", "step_trace", "comm") and r1.tables == ("step_trace", "comm")
    k = r0.kernels.df
    assert len(k) == 2463 and set(k["step"].astype(str)) == {"13"}
    assert k["dur_ns"].sum() / 1000 == pytest.approx(651464.36, abs=0.005)
    comm = k.loc[k["is_comm"]]
    assert comm["dur_ns"].sum() / 1000 == pytest.approx(420174.26, abs=0.005)
    assert float(r0.step_trace["comm_us"].sum()) == pytest.approx(420174.26, abs=0.005)
    comp = k.loc[~k["is_comm"]]
    assert busy_union_ns(comp["start_ns"].to_numpy(), comp["end_ns"].to_numpy()) / 1000 == pytest.approx(
        231290.10, abs=0.005)
    fp = fingerprint_capture(cap, policy)
    m = {key: v.value for key, v in fp.metrics.items()}
    assert m["kernel.total_calls_per_step{view=rank0}"] == 2463
    assert m["device.time_us{caliber=sum_duration,view=rank0}"] == pytest.approx(651464.36, abs=0.005)
    assert m["device.time_us{caliber=busy_union,view=rank0}"] == pytest.approx(651464.36, abs=0.005)
    assert m["step.comm_us{view=rank0}"] == pytest.approx(420174.26, abs=0.005)
    assert sum(v for key, v in m.items() if key.startswith("comm.time_us{") and "view=rank0" in key) == \
        pytest.approx(420174.26, abs=0.005)
    assert m["step.computing_us{view=rank0}"] == pytest.approx(231290.10, abs=0.005)
    # the partial rank 1 contributes its step and communication figures (its own step_trace row)
    assert m["step.comm_us{view=p50}"] == pytest.approx((420174.26 + 441708.38) / 2, abs=0.005)
    assert m["step.comm_us{view=max}"] == pytest.approx(441708.38, abs=0.005)
    # kernel metrics are computed over the ranks holding kernel_details.csv, and say so
    assert fp.metrics["kernel.total_calls_per_step{view=p50}"].context["over_ranks"] == [0]
    assert "over_ranks" not in fp.metrics["step.comm_us{view=p50}"].context
    c = fp.config
    assert (c["job_world_size"], c["world_size"], c["ranks"]) == (4, 2, [0, 1])
    assert c["world_size_source"] == "profiler_metadata.json distributed_args.world_size"
    assert c["coverage"] == {"0": ["kernels", "step_trace", "comm"], "1": ["step_trace", "comm"]}
    assert fp.provenance["steps"] == {"0": ["13"], "1": ["13"]}
    assert not [f for f in fp.findings if f.code == "RANK_STEP_MISMATCH"]


def test_real_st_level2_saves_and_checks_itself(st_level2, tmp_path):
    bl = tmp_path / "bl"
    code, out = _run("baseline", "save", "--name", "main", st_level2, "--baseline-dir", bl)
    assert code == 0, out
    assert "ranks [0, 1] (job world size 4)" in out
    saved = json.loads((bl / "main.json").read_text())
    assert saved["fingerprint"]["config"]["job_world_size"] == 4 if "fingerprint" in saved else \
        saved["config"]["job_world_size"] == 4
    code, out = _run("check", "--baseline", "main", st_level2, "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 0, out
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert doc["verdict"] == "PASS" and doc["counts"]["gated_regressions"] == 0
    by_key = {c["key"]: c for c in doc["comparisons"]}
    assert by_key["step.comm_us{view=p50}"]["verdict"] == "unchanged"


def _copy_st(st_level2, dst):
    shutil.copytree(st_level2, dst)
    return dst


def test_coverage_mismatch_is_incomparable_naming_the_ranks(st_level2, tmp_path):
    """Baseline: rank 1 partial. Candidate: rank 1 holds a full export (rank 0's files). Kernel
    metrics over ranks differ ([0] vs [0, 1]): not compared, the reason names both rank sets;
    the step metrics (both ranks on both sides) are still judged."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", st_level2, "--baseline-dir", bl)[0] == 0
    cand = _copy_st(st_level2, tmp_path / "cand")
    out0, out1 = (cand / f"rank_{r}_ascend_pt/ASCEND_PROFILER_OUTPUT" for r in (0, 1))
    shutil.copy(out0 / "step_trace_time.csv", out1 / "step_trace_time.csv")
    # rank 0's rows and ops, written out again (a byte copy of another rank's kernel table or
    # communication.json is refused on its own)
    (out1 / "kernel_details.csv").write_bytes((out0 / "kernel_details.csv").read_bytes().replace(b"\n", b"\r\n"))
    (out1 / "communication.json").write_text(json.dumps(json.loads((out0 / "communication.json").read_text()),
                                                        indent=2))
    # the kernel views over a rank set that differs are a large part of the gate: by default the
    # check refuses to call the rest a pass
    code, out = _run("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "strict")
    assert code == 4 and "--allow-partial" in out, out
    code, out = _run("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "o",
                     "--allow-partial")
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    by_key = {c["key"]: c for c in doc["comparisons"]}
    p50 = by_key["kernel.total_calls_per_step{view=p50}"]
    assert p50["verdict"] == "incomparable"
    assert "ranks [0] in the baseline but ranks [0, 1] in the candidate" in p50["reason"]
    assert by_key["kernel.total_calls_per_step{view=rank0}"]["verdict"] == "unchanged"
    assert by_key["step.comm_us{view=rank0}"]["verdict"] == "unchanged"
    judged = by_key["step.comm_us{view=p50}"]  # both ranks on both sides: judged (-2.5 %, inside tolerance)
    assert judged["verdict"] == "unchanged" and judged["candidate"] == pytest.approx(420174.26, abs=0.005)
    assert code == 0, out


def test_rank_folder_with_nothing_usable_stays_exit_3(st_level2, tmp_path):
    cap = _copy_st(st_level2, tmp_path / "c")
    out1 = cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT"
    for f in ("step_trace_time.csv", "communication.json"):
        (out1 / f).unlink()
    code, out = _run("baseline", "save", "--name", "x", cap, "--baseline-dir", tmp_path / "bl")
    assert code == 3 and "rank_1_ascend_pt" in out and "no kernel_details.csv" in out, out
    assert not (tmp_path / "bl" / "x.json").exists()


def test_no_rank_with_a_kernel_table_is_exit_3(st_level2, tmp_path):
    cap = tmp_path / "c"
    shutil.copytree(st_level2 / "rank_1_ascend_pt", cap / "rank_1_ascend_pt")
    code, out = _run("fingerprint", cap)
    assert code == 3 and "no rank holds a kernel table" in out and "[1]" in out, out


def test_ranks_recording_different_world_sizes_are_refused(st_level2, tmp_path):
    cap = _copy_st(st_level2, tmp_path / "c")
    meta = cap / "rank_1_ascend_pt/profiler_metadata.json"
    doc = json.loads(meta.read_text())
    doc["distributed_args"]["world_size"] = 8
    meta.write_text(json.dumps(doc))
    code, out = _run("fingerprint", cap)
    assert code == 3 and "world_size 4 in rank(s) [0]" in out and "world_size 8 in rank(s) [1]" in out, out


def test_world_size_from_communication_groups(st_level2, tmp_path):
    """Without distributed_args.world_size the job's size comes from parallel_group_info
    (global ranks 0..3 of the default group), never from the ranks present."""
    cap = _copy_st(st_level2, tmp_path / "c")
    for r in (0, 1):
        meta = cap / f"rank_{r}_ascend_pt/profiler_metadata.json"
        doc = json.loads(meta.read_text())
        del doc["distributed_args"]
        meta.write_text(json.dumps(doc))
    from perfgate.policy import load_policy
    fp = fingerprint_capture(load_capture(cap), load_policy())
    assert fp.config["job_world_size"] == 4
    assert "parallel_group_info" in fp.config["world_size_source"]


def test_g2025_job_world_size_is_unknown_not_guessed(text_captures, policy):
    fp = fingerprint_capture(load_capture(text_captures / "level1", with_trace=False), policy)
    assert fp.config["job_world_size"] is None and fp.config["world_size"] == 2


# -- Q05: raw msprof, one PROF_ folder per rank --------------------------------------------------
def _msprof_rank(ascend, dst, rank: int, device: int):
    src = ascend / ("vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
                    "PROF_000001_20260823165326062_00625538CIGQAHCJ")
    prof = dst / f"PROF_00000{rank}_x"
    shutil.copytree(src, prof)
    op = next((prof / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    lines = op.read_text().splitlines()
    hdr = lines[0].split(",")
    i = hdr.index("Device_id")
    out = [lines[0]] + [",".join(c if j != i else str(device) for j, c in enumerate(l.split(","))) for l in lines[1:]]
    op.write_text("\n".join(out) + "\n")
    (prof / f"device_{device}").mkdir()
    (prof / f"device_{device}" / f"info.json.{device}").write_text(json.dumps({"rank_id": rank}))
    return prof


def test_q05_msprof_rank_read_from_device_info(ascend, tmp_path, policy):
    root = tmp_path / "job"
    _msprof_rank(ascend, root, 0, 0)
    _msprof_rank(ascend, root, 1, 1)
    locs = discover(root)
    assert [l.rank for l in locs] == [0, 1]
    assert locs[1].rank_source == "rank_id in device_1/info.json.1"
    fp = fingerprint_capture(load_capture(root), policy)
    assert fp.config["ranks"] == [0, 1]


def test_q05_one_prof_folder_naming_two_ranks_is_refused(ascend, tmp_path):
    prof = _msprof_rank(ascend, tmp_path / "job", 0, 0)
    (prof / "device_1").mkdir()
    (prof / "device_1" / "info.json.1").write_text(json.dumps({"rank_id": 3}))
    with pytest.raises(InvalidCaptureError, match="one PROF_ folder names several ranks"):
        discover(tmp_path / "job")


def test_html_report_states_ranks_profiled_and_the_job_world_size(st_level2, text_captures, tmp_path):
    """The provenance table never says "world_size 2" for a larger job of which 2 ranks were
    profiled: it shows the ranks profiled, the job's world size with its source (or "not
    recorded") and each rank's tables."""
    code, out = _run("report", st_level2, "--html", tmp_path / "st.html", "--history", tmp_path / "none.sqlite")
    assert code == 0, out
    page = (tmp_path / "st.html").read_text()
    assert "ranks profiled" in page and "2 (0, 1)" in page
    assert "4 (profiler_metadata.json distributed_args.world_size)" in page
    assert "rank 1: step_trace, comm" in page and ">world_size<" not in page
    code, out = _run("report", text_captures / "level1", "--html", tmp_path / "l1.html",
                     "--history", tmp_path / "none.sqlite")
    assert code == 0, out
    assert "not recorded" in (tmp_path / "l1.html").read_text()


def test_rank0_alone_megatron_default_saves_and_a_check_across_coverages_names_the_ranks(st_level2, tmp_path):
    """Megatron profiles rank 0 alone by default: st/level2 rank 0 alone is a capture (job world
    size 4 recorded); a baseline of ranks 0+1 cannot judge it, and the message names both sets."""
    solo = tmp_path / "solo"
    shutil.copytree(st_level2 / "rank_0_ascend_pt", solo / "rank_0_ascend_pt")
    bl = tmp_path / "bl"
    code, out = _run("baseline", "save", "--name", "solo", solo, "--baseline-dir", bl)
    assert code == 0, out
    cfg = json.loads((bl / "solo.json").read_text())
    cfg = cfg.get("fingerprint", cfg)["config"]
    assert (cfg["job_world_size"], cfg["ranks"], list(cfg["coverage"])) == (4, [0], ["0"])
    assert _run("baseline", "save", "--name", "main", st_level2, "--baseline-dir", bl)[0] == 0
    code, out = _run("check", "--baseline", "main", solo, "--baseline-dir", bl, "--out", tmp_path / "o")
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert code == 4 and "ranks [0, 1]" in doc["error"]["message"] and "ranks [0]" in doc["error"]["message"]


def test_partial_rank_with_communication_json_only(st_level2, tmp_path, policy):
    """A partial rank holding only communication.json contributes its communication metrics;
    the step metrics are computed over rank 0 alone and say so."""
    cap = _copy_st(st_level2, tmp_path / "c")
    (cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv").unlink()
    fp = fingerprint_capture(load_capture(cap), policy)
    assert fp.config["coverage"]["1"] == ["comm"]
    assert fp.metrics["comm.elapse_us{view=p50}"].context["ranks"] == 2
    assert fp.metrics["step.comm_us{view=p50}"].context["over_ranks"] == [0]
    assert fp.provenance["steps"]["1"] == ["13"]
    code, out = _run("baseline", "save", "--name", "m", cap, "--baseline-dir", tmp_path / "bl")
    assert code == 0, out
