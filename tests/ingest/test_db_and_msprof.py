"""The DB export and raw msprof summaries (slices) read into the same tables as the text
export; header generations, BOM and non-ASCII."""
import shutil
import sqlite3
import subprocess
import sys

import pytest

from perfgate import terms
from perfgate.errors import InvalidCaptureError
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.store.baselines import BaselineStore

pytestmark = pytest.mark.real
COUNT_METRICS = ("kernel.calls_per_step", "optype.calls_per_step", "kernel.total_calls_per_step",
                 "comm.calls_per_step")


@pytest.fixture(scope="module")
def pytorch_data(ascend):
    return ascend / "msinsight/test/data/pytorch"


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_db_counts_equal_text_counts(pytorch_data, policy, level):
    """Must show 1: same call counts per kernel family and per Type as the text export of the
    same level (separate runs of the same model); the self-checks run and pass."""
    db = fingerprint_capture(load_capture(pytorch_data / "db" / level), policy)
    text = fingerprint_capture(load_capture(pytorch_data / "text" / level), policy)
    counts = lambda fp: {k: v.value for k, v in fp.metrics.items() if v.name in COUNT_METRICS}
    assert counts(db) == counts(text) and len(counts(db)) > 100
    ran = {(c.name, c.status) for c in db.self_checks}
    assert ("comm_equality", "pass") in ran and ("compute_union", "pass") in ran and ("overlap_gap", "pass") in ran
    assert not [c for c in db.self_checks if c.status == "fail"]
    assert db.config["export_type"] == "db" and db.config["kernel_variants"] == ["db/schema 1.0.0"]


def test_db_level1_uses_overlap_table(pytorch_data, policy):
    fp = fingerprint_capture(load_capture(pytorch_data / "db/level1"), policy)
    c = next(c for c in fp.self_checks if c.name == "comm_equality" and c.rank == 0)
    assert "OVERLAP_ANALYSIS" in c.message and c.observed == pytest.approx(102108.100)
    assert fp.metrics["comm.wait_ratio{view=rank0}"].value > 0  # from analysis.db CommAnalyzerTime


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_text_and_db_twins_gate_unchanged(pytorch_data, policy, tmp_path, level):
    """Must show 3: a text capture and its DB twin gate as unchanged against each other."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(pytorch_data / "text" / level, "main", policy=policy, store=store, env={})
    r = check(pytorch_data / "db" / level, "main", policy=policy, store=store, env={})
    assert r.status == terms.PASS, [c.reason for c in r.comparisons if c.fails]
    assert any("export type changed: baseline text -> candidate db" in n for n in r.notes)


def test_unknown_schema_version_is_specific(pytorch_data, tmp_path):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(pytorch_data / "db/level1/rank0_ascend_pt", dst)
    db = dst / "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    db.chmod(0o644)
    con = sqlite3.connect(db)
    con.execute("update META_DATA set value='2.1.0' where name='SCHEMA_VERSION'")
    con.commit()
    con.close()
    with pytest.raises(InvalidCaptureError, match="DB schema version 2.1.0 is not supported") as e:
        load_capture(tmp_path)
    assert e.value.path.endswith("ascend_pytorch_profiler_0.db")


def test_task_ending_before_it_starts_is_refused(pytorch_data, tmp_path):
    """A TASK with endNs < startNs is refused naming the database and the task, as a negative
    Duration(us) in the text exports is (never left out with a warning)."""
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(pytorch_data / "db/level1/rank0_ascend_pt", dst)
    db = dst / "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    db.chmod(0o644)
    con = sqlite3.connect(db)
    rowid = con.execute("select rowid from TASK order by startNs limit 1 offset 10").fetchone()[0]
    con.execute("update TASK set endNs = startNs - 5000 where rowid = ?", (rowid,))
    con.commit()
    con.close()
    with pytest.raises(InvalidCaptureError, match="ends before it starts") as e:
        load_capture(tmp_path)
    assert e.value.path.endswith("ascend_pytorch_profiler_0.db") and "re-export" in e.value.hint


def test_db_is_opened_read_only(pytorch_data, tmp_path):
    src = pytorch_data / "db/level1/rank0_ascend_pt"
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    before = {p.name: p.read_bytes() for p in (dst / "ASCEND_PROFILER_OUTPUT").iterdir()}
    load_capture(tmp_path)
    after = {p.name: p.read_bytes() for p in (dst / "ASCEND_PROFILER_OUTPUT").iterdir()}
    assert before == after  # no -wal/-shm files, nothing modified


def test_text_and_db_in_one_rank_reads_text_once(pytorch_data, tmp_path, policy):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(pytorch_data / "text/level1/rank0_ascend_pt", dst)
    shutil.copy(pytorch_data / "db/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db",
                dst / "ASCEND_PROFILER_OUTPUT")
    cap = load_capture(tmp_path)
    assert cap.ranks[0].kernels.path.name == "kernel_details.csv" and len(cap.ranks[0].kernels.df) == 191
    assert any("the text export is read, the DB ignored" in w for w in cap.ranks[0].warnings)


def test_msprof_op_summary_block_num_with_ratios(ascend, policy):
    """Must show 2: the vllm-ascend msprof op_summary files ingest (3 kernels, Block Num) with ratios."""
    pipe = next((ascend / "vllm_ascend_msprof").rglob("PROF_PipeUtilization"))
    cap = load_capture(pipe, pmu=True)
    k = cap.ranks[0].kernels
    assert len(k.df) == 3 and k.columns["block_dim"] == "Block Num" and k.columns["name"] == "Op Name"
    assert k.df["aic_mac_ratio"].notna().any() and "aiv_vec_ratio" in k.df
    assert cap.ranks[0].location.layout == "msprof"
    fp = fingerprint_capture(cap, policy)
    assert fp.metrics["kernel.total_calls_per_step{view=rank0}"].value == 3
    checks = {c.name: c.status for c in fp.self_checks}
    # no trace, no step_trace: the timing checks are skipped, not passed; the export's
    # op_statistic_<ts>.csv counts the same 3 tasks
    assert checks.pop("op_statistic_vs_kernels") == "pass"
    assert set(checks.values()) == {"skipped"}
    l2 = next((ascend / "vllm_ascend_msprof").rglob("PROF_L2Cache"))
    assert len(load_capture(l2).ranks[0].kernels.df) == 3


def test_msprof_root_with_two_runs_needs_a_rank(ascend):
    with pytest.raises(InvalidCaptureError, match="found 2 msprof runs .* and no rank recorded") as e:
        load_capture(ascend / "vllm_ascend_msprof")
    assert "point perfgate at one run" in e.value.hint


def test_op_summary_slices_in_order_with_cross_slice_duplicate(ascend, tmp_path):
    src = next((ascend / "vllm_ascend_msprof").rglob("op_summary_20260823165335.csv"))
    lines = src.read_text(encoding="utf-8").splitlines()
    out = tmp_path / "PROF_1" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    # eleven slices of one row each (slice 10 sorts after slice 2 by number, not by name), each
    # row the first one started k ms later; the row of slice 2 is written again in slice 10
    import csv as _csv
    import io
    header, first = list(_csv.reader(lines[:2]))
    at = header.index("Task Start Time(us)")
    rows = {}
    for k in range(11):
        cells = list(first)
        cells[at] = f"{float(first[at]) + 1000 * (2 if k == 10 else k):.3f}"
        buf = io.StringIO()
        _csv.writer(buf, lineterminator="").writerow(cells)
        rows[k] = buf.getvalue()
    for k, row in rows.items():
        (out / f"op_summary_slice_{k}_20260823165335.csv").write_text("\n".join([lines[0], row]) + "\n")
    k = load_capture(tmp_path).ranks[0].kernels
    assert len(k.df) == 10  # the row of slice 2 appears in slices 2 and 10: counted once
    order = next(w for w in k.warnings if "slices read in order" in w)
    assert order.index("slice_2_") < order.index("slice_10_")
    assert any("repeated across slices" in w for w in k.warnings)


def test_bom_and_non_ascii_names_under_c_locale(tmp_path):
    from perfgate.synth import SynthSpec, write_capture
    root = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=1))
    kd = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    text = kd.read_text(encoding="utf-8").replace("aclnnCast_CastAiCore_Cast", "矩阵_Cast_é")
    kd.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    code = ("import sys; from perfgate.ingest import load_capture; c = load_capture(sys.argv[1]); "
            "print(sorted(set(c.ranks[0].kernels.df['name']))[-1])")
    r = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                       env={"LC_ALL": "C", "LANG": "C", "PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8",
                            "PYTHONPATH": ":".join(sys.path)})
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8").strip() == "矩阵_Cast_é"


def test_msprof_layout_reads_its_timeline(tmp_path, policy):
    """Raw msprof output: op_summary_*.csv (msprof header names) plus msprof_*.json as the
    timeline; the self-checks run against the timeline's Overlap Analysis events."""
    from perfgate.synth import SynthSpec, write_capture
    from perfgate.synth.mutate import to_op_summary
    src = write_capture(tmp_path / "src", SynthSpec(ranks=1, steps=1)) / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    out = tmp_path / "cap" / "PROF_000001_X" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    to_op_summary(src / "kernel_details.csv", out / "op_summary_20260101000000.csv")
    shutil.copy(src / "trace_view.json", out / "msprof_20260101000000.json")
    cap = load_capture(tmp_path / "cap")
    r = cap.ranks[0]
    assert r.location.layout == "msprof" and r.kernels.columns["name"] == "Op Name"
    assert r.trace is not None and r.trace.path.name.startswith("msprof_")
    fp = fingerprint_capture(cap, policy)
    ce = [c for c in fp.self_checks if c.name == "comm_equality"]
    assert ce and ce[0].status == "pass" and "Overlap Analysis" in ce[0].message


def test_a_db_with_an_unapplied_write_ahead_log_is_refused(pytorch_data, tmp_path):
    """A DB export beside a non-empty ``-wal`` file (the exporter killed before its checkpoint)
    was read without the log's changes, silently (helper's note: the immutable open ignores
    it). It is exit 3 naming the log; an empty log (a clean close) is fine."""
    dst = tmp_path / "cap" / "rank0_ascend_pt"
    shutil.copytree(pytorch_data / "db/level1/rank0_ascend_pt", dst)
    db = next(dst.rglob("ascend_pytorch_profiler_*.db"))
    wal = db.with_name(db.name + "-wal")
    wal.write_bytes(b"")
    load_capture(tmp_path / "cap")                  # an empty log: nothing left out
    wal.write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    with pytest.raises(InvalidCaptureError, match=r"-wal \(32 bytes\) holds changes not yet written into") as e:
        load_capture(tmp_path / "cap")
    assert str(e.value.path) == str(wal)


@pytest.mark.parametrize("folder", ["run#1", "what?", "100%done"])
def test_a_db_in_a_folder_with_uri_characters_is_read(pytorch_data, tmp_path, policy, folder):
    """The DB was opened as ``file:{path}?...``: a ``#`` / ``?`` in a folder name cut the path
    (a 'not a readable SQLite database' or 'unable to open' error for a good export)."""
    dst = tmp_path / folder / "rank0_ascend_pt"
    shutil.copytree(pytorch_data / "db/level1/rank0_ascend_pt", dst)
    fp = fingerprint_capture(load_capture(tmp_path / folder), policy)
    assert fp.config["export_type"] == "db" and fp.metrics


@pytest.fixture(scope="module")
def db_baseline(pytorch_data, tmp_path_factory):
    """A baseline store holding ``main`` saved from the intact DB export level1."""
    from _refusals import saved_main
    return saved_main(pytorch_data / "db/level1", tmp_path_factory.mktemp("db_bl") / "bl")


R1 = "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/"


@pytest.mark.parametrize("db,sql,needles", [
    ("ascend_pytorch_profiler_1.db", "update TASK set endNs = 'abc' where rowid = 69",
     ["TASK.endNs at rowid 69 holds text 'abc', not an integer number of ns"]),
    ("ascend_pytorch_profiler_1.db", "update TASK set startNs = NULL where rowid = 69",
     ["TASK.startNs at rowid 69 is NULL: a value is required"]),
    ("ascend_pytorch_profiler_1.db", "update TASK set startNs = 1.5e30 where rowid = 69",
     ["TASK.startNs at rowid 69 holds real 1.5e+30: outside the int64 range"]),
    ("ascend_pytorch_profiler_1.db", "update TASK set endNs = 12.5 where rowid = 69",
     ["TASK.endNs at rowid 69 holds real 12.5, not an integer number of ns"]),
    ("ascend_pytorch_profiler_1.db", "update TASK set streamId = 'x' where rowid = 69",
     ["TASK.streamId at rowid 69 holds text 'x', not an integer"]),
    ("ascend_pytorch_profiler_1.db", "update COMPUTE_TASK_INFO set name = 'x' where rowid = 5",
     ["COMPUTE_TASK_INFO.name at rowid 5 holds text 'x'"]),
    ("ascend_pytorch_profiler_1.db", "update COMMUNICATION_OP set endNs = NULL where opId = 2",
     ["COMMUNICATION_OP.endNs at rowid 2 is NULL"]),
    ("ascend_pytorch_profiler_1.db", "update STEP_TIME set endNs = 'z'", ["STEP_TIME.endNs at rowid 1 holds text 'z'"]),
    ("analysis.db", "update StepTraceTime set free = 'abc'",
     ["StepTraceTime.free at rowid 1 holds text 'abc', not a finite number"]),
    ("analysis.db", "update StepTraceTime set computing = NULL", ["StepTraceTime.computing at rowid 1 is NULL"]),
    ("analysis.db", "insert into StepTraceTime select * from StepTraceTime",
     ["StepTraceTime step 50 appears twice (rows 1, 2)"]),
    ("analysis.db", "update StepTraceTime set free = -3", ["StepTraceTime.free at rowid 1 holds integer -3: negative"]),
    ("analysis.db", "update CommAnalyzerTime set wait_time = 'abc' where rowid = 2",
     ["CommAnalyzerTime.wait_time at rowid 2 holds text 'abc'"]),
    ("analysis.db", "update CommAnalyzerTime set elapse_time = 9e999 where rowid = 2",
     ["CommAnalyzerTime.elapse_time at rowid 2 holds real inf, not a finite number"]),
    ("analysis.db", "update CommAnalyzerBandwidth set transit_time = NULL where rowid = 3",
     ["CommAnalyzerBandwidth.transit_time at rowid 3 is NULL"]),
    # a renamed column crashed (exit 70, "no such column") or was read as 0
    ("ascend_pytorch_profiler_1.db", "alter table STEP_TIME rename column id to stepId",
     ["table STEP_TIME has no column id (it has: "]),
    ("ascend_pytorch_profiler_1.db", "alter table STRING_IDS rename column value to val",
     ["table STRING_IDS has no column value"]),
    ("ascend_pytorch_profiler_1.db", "alter table TASK rename column startNs to start",
     ["table TASK has no column startNs"]),
    ("ascend_pytorch_profiler_1.db", "alter table COMPUTE_TASK_INFO rename column name to opNameId",
     ["table COMPUTE_TASK_INFO has no column name"]),
    ("analysis.db", "alter table StepTraceTime rename column computing to comp",
     ["table StepTraceTime has no column computing"]),
    ("ascend_pytorch_profiler_1.db", "delete from TASK",
     ["the DB export holds no compute kernel (TASK ⋈ COMPUTE_TASK_INFO is empty; TASK has 0 row(s))"]),
    # negative communication times, refused in communication.json, were read from the DB (helper's leftover)
    ("analysis.db", "update CommAnalyzerTime set wait_time = -2.5 where rowid = 2",
     ["CommAnalyzerTime.wait_time at rowid 2 holds real -2.5: negative"]),
    ("analysis.db", "update CommAnalyzerBandwidth set transit_size = -1 where rowid = 3",
     ["CommAnalyzerBandwidth.transit_size at rowid 3 holds integer -1: negative"]),
    # a string id STRING_IDS does not hold read as a NULL name / type, silently (helper's leftover)
    ("ascend_pytorch_profiler_1.db", "update COMPUTE_TASK_INFO set name = 987654321 where rowid = 5",
     ["COMPUTE_TASK_INFO.name at rowid 5 is STRING_IDS id 987654321, which STRING_IDS does not hold"]),
    ("ascend_pytorch_profiler_1.db", "update COMPUTE_TASK_INFO set opType = 987654321 where rowid = 7",
     ["COMPUTE_TASK_INFO.opType at rowid 7 is STRING_IDS id 987654321"]),
    ("ascend_pytorch_profiler_1.db", "update COMMUNICATION_OP set opName = 987654321 where opId = 2",
     ["COMMUNICATION_OP.opName at rowid 2 is STRING_IDS id 987654321"]),
])
def test_a_db_number_that_is_text_null_or_out_of_range_is_refused(pytorch_data, db_baseline, tmp_path, db, sql,
                                                                   needles):
    """A numeric DB column read holding text, NULL where a value is required, a real out of the
    int64 range or a non-integer where ns are expected crashed (exit 70: TypeError,
    IntCastingNaNError), became NaN silently, or (1.5e30) was refused with wrong values
    (``startNs -9223372036854775808, endNs 0``). Exit 3 naming the DB, table, rowid, column
    and the value as stored; nothing written to baselines or history."""
    from _refusals import assert_refused_everywhere
    cap = tmp_path / "cap"
    shutil.copytree(pytorch_data / "db/level1", cap)
    for p in cap.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    con = sqlite3.connect(cap / R1 / db)
    con.execute(sql)
    con.commit()
    con.close()
    bl = tmp_path / "bl"
    shutil.copytree(db_baseline, bl)
    assert_refused_everywhere(cap, bl, tmp_path, [db, *needles])
