"""step_trace_time.csv, communication.json and rank discovery: P07 P08 P10 P16 and rank rules."""
import json
import re
import shutil

import pytest

from perfgate.errors import InvalidCaptureError, UsageError
from perfgate.ingest import load_capture
from perfgate.ingest.comm import read_communication
from perfgate.ingest.discover import discover
from perfgate.ingest.steps import read_step_trace
from perfgate.metrics.selfcheck import run_self_checks
from perfgate.synth import SynthSpec, write_capture

P16_HEADER = ("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
              "Communication(Not Overlapped and Exclude Receive),Preparing")


def test_step_trace_p16_row(tmp_path):
    """P16: step total = Computing + Comm(Not Overlapped) + Free = 1000 us; identities hold."""
    p = tmp_path / "step_trace_time.csv"
    p.write_text(P16_HEADER + "\n1,800,150,50,200,50,950,50,100,0\n")
    st = read_step_trace(p)
    r = st.iloc[0]
    assert r["step"] == "1"
    assert r["computing_us"] + r["comm_not_overlapped_us"] + r["free_us"] == 1000
    assert r["comm_us"] - r["comm_not_overlapped_us"] == r["overlapped_us"]
    assert r["comm_not_overlapped_us"] - r["bubble_us"] == r["comm_not_overlapped_excl_recv_us"]


@pytest.mark.parametrize("prefix,ncol", [("", 9), ("", 10), ("Device_id,", 11)])
def test_step_trace_generations(tmp_path, prefix, ncol):
    cols = (prefix + P16_HEADER).split(",")[:ncol]
    vals = (["4"] if prefix else []) + "50,1,2,1,3,4,7,0,2,5".split(",")
    p = tmp_path / "s.csv"
    p.write_text(",".join(cols) + "\n" + ",".join(vals[:ncol]) + "\n")
    st = read_step_trace(p)
    assert st["step"].iloc[0] == "50" and st["computing_us"].iloc[0] == 1.0


@pytest.mark.parametrize("col", ["Computing", "Communication(Not Overlapped)", "Communication", "Free", "Stage",
                                 "Bubble", "Communication(Not Overlapped and Exclude Receive)"])
def test_step_trace_negative_sum_column_is_refused_naming_the_cell(tmp_path, col):
    """A negative Free (or any column torch_npu sums from event durations) was read, then refused
    only when a baseline was saved (exit 5, a store error) or judged (helper's note): it is a
    damaged capture, exit 3, naming file, row, column and cell."""
    cols = P16_HEADER.split(",")
    vals = "1,800,150,50,200,50,950,50,100,0\n2,800,150,50,200,50,950,50,100,0".split("\n")
    row2 = vals[1].split(",")
    row2[cols.index(col)] = "-12.5"
    p = tmp_path / "step_trace_time.csv"
    p.write_text(P16_HEADER + "\n" + vals[0] + "\n" + ",".join(row2) + "\n")
    with pytest.raises(InvalidCaptureError, match=rf"{re.escape(col)} is negative: .*'-12.5' \(CSV row 3") as e:
        read_step_trace(p)
    assert e.value.row == 2


@pytest.mark.parametrize("col", ["Overlapped", "Preparing"])
def test_step_trace_signed_columns_may_be_negative(tmp_path, col):
    cols = P16_HEADER.split(",")
    row = "1,800,150,50,200,50,950,50,100,0".split(",")
    row[cols.index(col)] = "-0.002"
    p = tmp_path / "step_trace_time.csv"
    p.write_text(P16_HEADER + "\n" + ",".join(row) + "\n")
    assert read_step_trace(p).iloc[0][{"Overlapped": "overlapped_us", "Preparing": "preparing_us"}[col]] == -0.002


def test_step_trace_empty_step_is_implicit(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(P16_HEADER + "\n,1,2,1,3,4,7,0,2,5\n")
    assert read_step_trace(p)["step"].tolist() == ["implicit"]


def test_step_trace_identity_violation_fails_check(tmp_path, policy):
    root = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=1))
    st = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    lines = st.read_text().splitlines()
    cells = lines[1].split(",")
    cells[3] = str(float(cells[3]) + 100)  # Overlapped no longer Communication - Comm(Not Overlapped)
    st.write_text("\r\n".join([lines[0], ",".join(cells)]) + "\r\n")
    cap = load_capture(root)
    checks = run_self_checks(cap.ranks[0], policy)
    bad = [c for c in checks if c.status == "fail"]
    assert any(c.name == "step_trace_identities" and "Overlapped" in c.message for c in bad)


def test_communication_json_p08(tmp_path):
    """P08: skip 'Total Op Info'; ms -> us."""
    p = tmp_path / "communication.json"
    p.write_text(json.dumps({"step1": {"collective": {
        "hcom_allReduce__1_0_1@g": {"Communication Time Info": {"Elapse Time(ms)": 2.0}},
        "Total Op Info": {"Communication Time Info": {"Elapse Time(ms)": 2.0}}}, "p2p": {}}}))
    df = read_communication(p).ops
    assert df["elapse_us"].sum() == 2000.0 and df["op"].tolist() == ["hcom_allReduce__1_0_1"]
    assert df["step"].tolist() == ["1"]


def test_communication_json_errors(tmp_path):
    p = tmp_path / "communication.json"
    p.write_text('{"step1": {"collective": {')
    with pytest.raises(InvalidCaptureError) as e:
        read_communication(p)
    assert e.value.byte_offset is not None
    p.write_text('{"total": 1}')
    with pytest.raises(InvalidCaptureError, match="unexpected top-level key"):
        read_communication(p)


def test_real_communication_matches_trace(text_captures):
    df = read_communication(text_captures / "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").ops
    assert abs(df["elapse_us"].sum() - 105991.878) < 0.01  # step_trace Communication


def test_discover_layouts(tmp_path):
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=1))
    assert [loc.rank for loc in discover(root)] == [0, 1]
    one = discover(root / "rank1_ascend_pt")
    assert [loc.rank for loc in one] == [1]
    bare = discover(root / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    assert [loc.rank for loc in bare] == [1] and "profiler_info_1.json" in bare[0].rank_source


def test_rank_from_profiler_info_not_device(tmp_path):
    """Rank id comes from profiler_info_<N>.json, even when the folder says otherwise."""
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=1, steps=1, header="g83"))
    (root / "rank0_ascend_pt").rename(root / "worker_7_ascend_pt")
    info = root / "worker_7_ascend_pt" / "profiler_info_0.json"
    doc = json.loads(info.read_text())
    doc["rank_id"] = 5  # as the profiler writes rank 5's file: name and rank_id agree
    info.with_name("profiler_info_5.json").write_text(json.dumps(doc))
    info.unlink()
    assert [loc.rank for loc in discover(root)] == [5]


def test_duplicate_rank_is_invalid(tmp_path):
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=1, steps=1))
    shutil.copytree(root / "rank0_ascend_pt", root / "copy_ascend_pt")
    with pytest.raises(InvalidCaptureError, match="two folders claim rank 0"):
        discover(root)


def test_missing_dir_and_file_are_invalid_captures(tmp_path):
    """A capture path that does not exist or is a file: the profiling step left no capture, an
    invalid capture (exit 3) naming the path, as an empty folder; an empty path is a usage error."""
    with pytest.raises(InvalidCaptureError, match="does not exist") as e:
        discover(tmp_path / "nope")
    assert e.value.exit_code == 3 and e.value.path == str(tmp_path / "nope")
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(InvalidCaptureError, match="got a file"):
        discover(f)
    with pytest.raises(UsageError):
        discover("")
    with pytest.raises(InvalidCaptureError, match="no ASCEND_PROFILER_OUTPUT"):
        discover(tmp_path)


def test_incomplete_profile_p10(tmp_path):
    """P10: analyse.done + trace_view.json but no kernel_details.csv -> incomplete, all ranks listed."""
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=1))
    out0 = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (out0 / "kernel_details.csv").unlink()
    (root / "rank0_ascend_pt" / "analyse.done").write_text("")
    out1 = root / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    out1.write_text(out1.read_text().splitlines()[0] + "\n")
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(root)
    assert "incomplete profile" in e.value.message and "analyse.done" in e.value.message
    assert len(e.value.problems) == 2 and "no data rows" in e.value.problems[1]["message"]


def test_missing_optional_files_reported(tmp_path):
    """P07/P08: no communication.json / trace -> reported missing, metrics not available."""
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=1, steps=1, comm_ops=0))
    (root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").unlink()
    cap = load_capture(root)
    assert set(cap.ranks[0].missing) == {"communication.json", "trace_view.json"}


def test_empty_communication_json_beside_communication_rows_is_said(tmp_path):
    """communication.json `{}` while the kernel table has communication rows: a warning naming
    both files and the row count (its comm.* metrics are left out), never a silent gap."""
    root = write_capture(tmp_path / "cap", SynthSpec(ranks=1, steps=2))
    out = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (out / "communication.json").write_text("{}")
    cap = load_capture(root)
    rank = cap.ranks[0]
    n = int(rank.kernels.df["is_comm"].sum())
    assert n > 0
    assert any(w.startswith("communication.json holds no communication op") and f"{n:,} communication row(s)" in w
               for w in rank.warnings), rank.warnings
