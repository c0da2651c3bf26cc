"""Bad input to the CLI: every case gets a specific message
and the documented exit code, never a traceback or a silent pass."""
import json
import os
import shutil
import stat

import numpy as np
import pytest
from click.testing import CliRunner

from perfgate.cli import main
from _refusals import assert_refused_everywhere
from _edits import set_cell
from perfgate.synth import SynthSpec, write_capture

OUT0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


@pytest.fixture
def env(tmp_path):
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, steps=2))
    bl = tmp_path / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(base), "--baseline-dir", str(bl)])
    assert r.exit_code == 0, r.output

    def cand(name="cand", **kw):
        return write_capture(tmp_path / name, SynthSpec(**dict(dict(seed=2, steps=2), **kw)))

    def check(capture, *extra):
        res = CliRunner().invoke(main, ["check", "--baseline", "main", str(capture), "--baseline-dir", str(bl),
                                        "--out", str(tmp_path / "out"), *map(str, extra)])
        return res.exit_code, res.output
    return cand, check, tmp_path, bl


def test_reports_never_replace_special_files(env):
    cand, check, tmp, _ = env
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    try:
        code, out = check(cand(), "--json", "/dev/null", "--junit", "/dev/null")
        assert code == 0, out
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    finally:
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.geteuid() == 0:
            os.remove("/dev/null")
            os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def test_report_files_get_normal_permissions(env):
    cand, check, tmp, _ = env
    check(cand())
    mode = stat.S_IMODE(os.stat(tmp / "out" / "perfgate-result.json").st_mode)
    assert mode == 0o666 & ~_umask() and mode & 0o044


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


@pytest.mark.parametrize("fname", ["kernel_details.csv", "trace_view.json", "step_trace_time.csv",
                                   "communication.json"])
def test_unreadable_file_is_invalid_capture(env, monkeypatch, fname):
    """chmod 000 as a normal user (simulated: CI runs as root, which ignores permissions)."""
    import builtins
    cand, check, tmp, _ = env
    c = cand()
    target = str(c / OUT0 / fname)
    real_open = builtins.open
    real_read_bytes = __import__("pathlib").Path.read_bytes

    def deny(file, *a, **k):
        if str(file) == target:
            raise PermissionError(13, "Permission denied", target)
        return real_open(file, *a, **k)

    def deny_bytes(self):
        if str(self) == target:
            raise PermissionError(13, "Permission denied", target)
        return real_read_bytes(self)
    monkeypatch.setattr(builtins, "open", deny)
    monkeypatch.setattr(__import__("pathlib").Path, "read_bytes", deny_bytes)
    import pyarrow.csv as pacsv
    real_csv = pacsv.read_csv
    monkeypatch.setattr(pacsv, "read_csv", lambda p, *a, **k: deny(p) if str(p) == target else real_csv(p, *a, **k))
    code, out = check(c)
    assert code == 3 and fname in out and "Permission denied" in out, out


def test_unlistable_rank_folder_is_invalid(env, monkeypatch):
    cand, check, tmp, _ = env
    c = cand()
    from pathlib import Path
    real = Path.iterdir

    def fake(self):
        if self.name == "rank1_ascend_pt":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)
    monkeypatch.setattr(Path, "iterdir", fake)
    code, out = check(c)
    assert code == 3 and "rank1_ascend_pt" in out and "cannot list folder" in out


def test_missing_rank_is_incompatible_not_pass(env):
    cand, check, tmp, _ = env
    c = cand()
    shutil.rmtree(c / "rank0_ascend_pt")
    code, out = check(c)
    assert code == 4 and "INCOMPATIBLE_BASELINE" in out and "missing or extra rank" in out


def test_renumbered_rank_is_incompatible(env):
    cand, check, tmp, _ = env
    c = cand()
    info = c / "rank0_ascend_pt/profiler_info_0.json"
    doc = json.loads(info.read_text())
    doc["rank_id"] = 7  # renumbered as the profiler would write rank 7: name and rank_id agree
    (c / "rank0_ascend_pt/profiler_info_7.json").write_text(json.dumps(doc))
    info.unlink()
    code, out = check(c)
    doc = json.loads((tmp / "out" / "perfgate-result.json").read_text())
    assert code == 4 and "INCOMPATIBLE_BASELINE" in out and "missing or extra rank" in out
    assert any("rank ids differ" in n for n in doc["notes"])
    gated = [x for x in doc["comparisons"] if x["gated"]]
    assert gated and all(x["verdict"] == "incomparable" for x in gated)


@pytest.mark.parametrize("fname", ["kernel_details.csv", "step_trace_time.csv", "communication.json",
                                   "trace_view.json"])
def test_non_utf8_bytes(env, fname):
    cand, check, tmp, _ = env
    c = cand()
    p = c / OUT0 / fname
    data = p.read_bytes()
    if fname == "kernel_details.csv":  # inside a Name cell, a column the gate reads
        cut = data.index(b"aclnnCast_CastAiCore_Cast") + 5
    elif fname == "step_trace_time.csv":
        cut = data.index(b"\n") + 3
    else:
        cut = len(data) // 2
    p.write_bytes(data[:cut] + b"\xff\xfe" + data[cut:])
    code, out = check(c)
    assert code == 3 and fname in out, out


@pytest.mark.parametrize("value,what", [("inf", "finite"), ("1e300", "range"), ("123456789012345678901234567", "range")])
def test_absurd_numbers(env, value, what):
    cand, check, tmp, _ = env
    c = cand()
    set_cell(c / OUT0 / "kernel_details.csv", 1, "Start Time(us)", value)
    code, out = check(c)
    assert code == 3 and "Start Time(us)" in out and "row 1" in out, out


@pytest.mark.parametrize("val", ['"N/A"', "-5.0", "1e400"])
def test_bad_communication_json_values(env, val):
    cand, check, tmp, _ = env
    c = cand()
    p = c / OUT0 / "communication.json"
    doc = json.loads(p.read_text())
    op = next(k for k in doc["step10"]["collective"] if k != "Total Op Info")
    text = json.dumps(doc).replace(json.dumps(doc["step10"]["collective"][op]["Communication Time Info"]
                                              ["Elapse Time(ms)"]), val, 1)
    p.write_text(text)
    code, out = check(c)
    assert code == 3 and "communication.json" in out and "Elapse Time(ms)" in out, out


def test_profiler_info_wrong_types(env):
    cand, check, tmp, _ = env
    c = cand()
    (c / "rank0_ascend_pt/profiler_info_0.json").write_text('{"config": [1]}')
    code, out = check(c)
    assert code == 3 and "'config' must be an object" in out


def test_malformed_baseline_metrics(env):
    cand, check, tmp, bl = env
    doc = json.loads((bl / "main.json").read_text())
    doc["fingerprint"]["metrics"] = "oops"
    (bl / "main.json").write_text(json.dumps(doc))
    code, out = check(cand())
    assert code == 5 and "malformed" in out  # a damaged store: exit 5, not NO_BASELINE


@pytest.mark.parametrize("text,needle", [
    (b"\x00\xff\xfebinary", "not UTF-8"),
    (b"self_checks:\n  abs_us_per_row: 1e9\n", "self_checks.abs_us_per_row"),
    (b"self_checks:\n  abs_us_per_row: -1\n", "self_checks.abs_us_per_row"),
    (b"self_checks:\n  require_trace: maybe\n", "self_checks.require_trace"),
    (b"self_checks:\n  comm_op_identity_abs_us: lots\n", "self_checks.comm_op_identity_abs_us"),
    (b"metrics:\n  step.tiem_us: {direction: lower_is_better, tolerance: {rel: 0.1}}\n", "did you mean 'step.time_us'"),
    (b"extends: none\ngate_views: [rank0]\n", "this policy gates no metric"),
    (b"extends: none\nmetrics:\n  step.time_us: {gated: false, direction: lower_is_better, tolerance: {rel: 0.1}}\n",
     "this policy gates no metric"),
    (b"metrics:\n  step.time_us: {direction: lower_better}\n",
     "unknown direction 'lower_better'; use one of lower_is_better, higher_is_better, exact"),
    (b"metrics:\n  step.time_us: {direction: lower_is_better\n  x: [1\n", "invalid YAML at line 3, column 4"),
])
def test_policy_mistakes_are_usage_errors(env, text, needle):
    cand, check, tmp, _ = env
    p = tmp / "p.yaml"
    p.write_bytes(text)
    code, out = check(cand(), "--policy", p)
    assert code == 2 and needle in out and "p.yaml" in out, out
    assert "<unicode string>" not in out and "<Direction." not in out, out


def test_dropped_row_cannot_pose_as_improvement(env):
    cand, check, tmp, _ = env
    c = cand()
    set_cell(c / OUT0 / "kernel_details.csv", 5, "Duration(us)", "N/A")
    (c / OUT0 / "step_trace_time.csv").unlink()
    code, out = check(c, "--no-trace")
    assert code == 1 and "kernel rows left out" in out, out


def test_fingerprint_explains_failed_self_check(tmp_path):
    c = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=1))
    st = c / OUT0 / "step_trace_time.csv"
    lines = st.read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = str(float(cells[1]) + 500)
    st.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    (c / OUT0 / "trace_view.json").unlink()
    r = CliRunner().invoke(main, ["fingerprint", str(c)])
    assert r.exit_code == 3 and "self-check compute_union failed" in r.output


def test_synth_rejects_unknown_family_and_absurd_factor(tmp_path):
    run = lambda *a: CliRunner().invoke(main, ["synth", str(tmp_path / "s"), *a])
    r = run("--slowdown", "MatMulV3=1.4")
    assert r.exit_code == 2 and "unknown kernel family" in r.output and "aclnnMatmul_MatMulV3Common_MatMulV3" in r.output
    r = run("--slowdown", "aclnnMatmul_MatMulV3Common_MatMulV3=1e308")
    assert r.exit_code == 2 and "(0, 100]" in r.output


def test_baseline_name_and_overwrite_guard(env):
    cand, check, tmp, bl = env
    run = lambda *a: CliRunner().invoke(main, ["baseline", "save", *map(str, a), "--baseline-dir", str(bl)])
    r = run("--name", "main.json", cand())
    assert r.exit_code == 2 and "without '.json'" in r.output
    one = write_capture(tmp / "one", SynthSpec(ranks=1, steps=2))
    r = run("--name", "main", one)
    assert r.exit_code == 2 and "refusing to replace" in r.output
    r = run("--name", "main", one, "--force")
    assert r.exit_code == 0


def test_empty_capture_argument(env):
    cand, check, tmp, _ = env
    code, out = check("")
    assert code == 2 and "capture path is empty" in out


def test_internal_error_is_exit_70(env, monkeypatch):
    cand, check, tmp, _ = env
    import perfgate.app.gate
    monkeypatch.setattr(perfgate.app.gate, "check", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    code, out = check(cand())
    assert code == 70 and "internal error: RuntimeError: boom" in out and "Traceback" not in out


def test_a_crashed_check_leaves_no_earlier_verdict_behind(env, monkeypatch):
    """A run that ends in an internal error writes no reports; the previous run's files (a PASS)
    must not stay where CI reads them (an ``if: always()`` JUnit upload would show that PASS)."""
    cand, check, tmp, _ = env
    code, out = check(cand())
    assert code == 0, out
    files = [tmp / "out" / n for n in ("perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json")]
    assert all(f.is_file() for f in files)
    import perfgate.app.gate
    monkeypatch.setattr(perfgate.app.gate, "check", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    code, out = check(cand("cand2", seed=3))
    assert code == 70, out
    assert not any(f.exists() for f in files), [f for f in files if f.exists()]


# --- files that are not what their name says, values out of range, outputs that cannot be written ---

def test_history_db_under_a_regular_file_is_a_store_error(env):
    cand, _, tmp_path, bl = env
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["history", "record", str(cand()), "--branch", "main",
                                  "--db", str(tmp_path / "afile" / "h.sqlite")], env={})
    assert r.exit_code == 5, r.output
    assert "cannot create the history database's folder" in r.output and "internal error" not in r.output


@pytest.mark.slow
def test_closed_stdout_pipe_keeps_the_gate_exit_code(env):
    """`perfgate check ... | head -1` under pipefail: the gate's own code, not 70 / a traceback."""
    cand, _, tmp_path, bl = env
    import subprocess
    import sys
    worse = cand("worse", extra_calls={"aclnnCast_CastAiCore_Cast": 2})
    for cap, want in ((cand(), 0), (worse, 1)):
        p = subprocess.run(["bash", "-c", "set -o pipefail; \"$0\" -m perfgate check --baseline main \"$1\" "
                            "--baseline-dir \"$2\" --out \"$3\" | head -c 10", sys.executable, str(cap),
                            str(bl), str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
        assert p.returncode == want, p.stderr
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr


def test_the_same_capture_twice_is_not_two_runs(env):
    cand, _, tmp_path, bl = env
    a = cand()
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "dup", str(a), str(a), "--baseline-dir",
                                  str(bl)], env={})
    assert r.exit_code == 2 and "given twice" in r.output, r.output
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "dup", str(a), str(copy), "--baseline-dir",
                                  str(bl)], env={})
    assert r.exit_code == 2 and "identical metric values" in r.output, r.output
    assert not (bl / "dup.json").exists()
    r = CliRunner().invoke(main, ["calibrate", str(a), str(copy), str(cand("c3", seed=3)), "--out",
                                  str(tmp_path / "cal.yaml")], env={})
    assert r.exit_code == 2 and "identical metric values" in r.output and not (tmp_path / "cal.yaml").exists()


def test_no_baseline_ok_reports_the_exit_code_it_uses(env):
    cand, _, tmp_path, bl = env
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["check", "--baseline", "nosuch", str(cand()), "--baseline-dir", str(bl),
                                  "--out", str(out), "--no-baseline-ok"], env={})
    assert r.exit_code == 0, r.output
    assert "NO_BASELINE (exit 0)" in r.output and "--no-baseline-ok" in r.output
    assert json.loads((out / "perfgate-result.json").read_text())["exit_code"] == 0


def test_empty_baseline_dir_variable_means_the_default(env, monkeypatch):
    cand, _, tmp_path, bl = env
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "e", str(cand())],
                           env={"PERFGATE_BASELINE_DIR": ""})
    assert r.exit_code == 0, r.output
    assert (tmp_path / "baselines" / "e.json").is_file() and not (tmp_path / "e.json").exists()


def test_comment_outside_a_pull_request_says_so(env):
    cand, _, tmp_path, bl = env
    ev = tmp_path / "event.json"
    ev.write_text(json.dumps({"ref": "refs/heads/main"}))
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cand()), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / "o"), "--comment"],
                           env={"GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": str(ev),
                                "GITHUB_REPOSITORY": "o/r", "GITHUB_TOKEN": "t0k3n-secret"})
    assert r.exit_code == 0, r.output
    assert "no pull request in this run (event push)" in r.output and "t0k3n-secret" not in r.output


def test_a_timeline_of_something_else_is_refused(env):
    """trace_view.json replaced by another file's events (no Overlap Analysis, no ProfilerStep):
    refused naming the file, not a silent pass with the trace self-check skipped."""
    cand, check, tmp_path, bl = env
    c = cand()
    (c / OUT0 / "trace_view.json").write_text('[{"name": "x", "ph": "X", "ts": "1", "dur": 1, "pid": 1, "tid": 1}]')
    code, out = check(c)
    assert code == 3, out
    assert "trace_view.json" in out and "no Overlap Analysis process and no ProfilerStep#N" in out
    code, out = check(c, "--trace", "never")
    assert code in (0, 1) and "INVALID" not in out


# --- odd numeric cells fail closed, the same way in every file kind -----------------------------
# Only "N/A" and an empty cell mean "not applicable" in a numeric column (SCHEMAS.md §1);
# nan / NaN / inf / None / null / text in a column the gate reads is exit 3 naming file, data
# row, CSV row (header = row 1), column and cell, and nothing is written anywhere. One case per
# file kind runs through the CLI (check, baseline save, history record); the other spellings
# go straight to the reader (the CLI maps the same InvalidCaptureError to exit 3).

@pytest.fixture(scope="module")
def clean_rank(tmp_path_factory):
    """One clean synthetic rank output folder, written once; tests copy files out of it."""
    root = write_capture(tmp_path_factory.mktemp("clean"), SynthSpec(seed=2, steps=2))
    return root / OUT0


def _copy(clean_rank, tmp_path, fname):
    dst = tmp_path / fname
    shutil.copyfile(clean_rank / fname, dst)
    return dst


def _refused_everywhere(env, capture, needles):
    """check, baseline save and history record all exit 3 with ``needles`` in the message,
    and neither the baseline nor the history database is written."""
    _, _, tmp, bl = env
    assert_refused_everywhere(capture, bl, tmp, needles)


def test_kernel_nan_duration_is_refused_by_every_command(env):
    cand, *_ = env
    c = cand()
    set_cell(c / OUT0 / "kernel_details.csv", 4, "Duration(us)", "nan")
    _refused_everywhere(env, c, ["kernel_details.csv row 4", "Duration(us) is not a finite number: 'nan'",
                                 "(CSV row 5 counting the header as row 1)"])


@pytest.mark.parametrize("column,value", [
    ("Duration(us)", "NaN"), ("Duration(us)", "None"), ("Duration(us)", "inf"), ("Duration(us)", "NA"),
    ("Start Time(us)", "nan"), ("Start Time(us)", "null"), ("Wait Time(us)", "inf"), ("Wait Time(us)", "NaN"),
    ("Wait Time(us)", "abc"),
])
def test_kernel_numeric_cell_that_is_not_a_number(clean_rank, tmp_path, column, value):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.kernels import read_kernels
    k = _copy(clean_rank, tmp_path, "kernel_details.csv")
    set_cell(k, 4, column, value)
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(k)
    assert e.value.exit_code == 3 and e.value.row == 4 and e.value.path == str(k)
    assert f"{column} is not a finite number: {value!r} (CSV row 5 counting the header as row 1)" in str(e.value)


def test_kernel_na_spellings_stay_not_applicable(clean_rank, tmp_path):
    """N/A and empty Duration rows are still left out and counted (P06), N/A Wait Time is NaN."""
    from perfgate.ingest.kernels import read_kernels
    k = _copy(clean_rank, tmp_path, "kernel_details.csv")
    set_cell(k, 3, "Duration(us)", "N/A")
    set_cell(k, 5, "Duration(us)", "")
    set_cell(k, 6, "Wait Time(us)", "N/A")
    t = read_kernels(k)
    assert t.invalid_rows == (3, 5) and 6 in set(t.df["row"])
    assert np.isnan(t.df.loc[t.df["row"] == 6, "wait_us"]).all() and t.df["wait_us"].notna().sum() == len(t.df) - 1


def test_kernel_fast_and_string_path_give_the_same_error(clean_rank, tmp_path, monkeypatch):
    """The typed pyarrow path and the string path refuse the same cell with the same message
    (pyarrow itself parses "inf" in the float64 Wait Time column: the reader must not keep it)."""
    import pyarrow as pa
    import perfgate.ingest.kernels as kmod
    from perfgate.ingest.csvread import DECIMAL_US, read_typed_columns
    from perfgate.errors import InvalidCaptureError
    cols = {"start_us": "Start Time(us)", "dur_us": "Duration(us)", "wait_us": "Wait Time(us)"}
    types = {"start_us": DECIMAL_US, "dur_us": DECIMAL_US, "wait_us": pa.float64()}
    assert read_typed_columns(clean_rank / "kernel_details.csv", cols, types) is not None  # fast path taken
    for i, (column, value) in enumerate((("Duration(us)", "nan"), ("Start Time(us)", "NaN"), ("Wait Time(us)", "inf"))):
        k = _copy(clean_rank, tmp_path, "kernel_details.csv")
        set_cell(k, 2, column, value)
        assert (read_typed_columns(k, cols, types) is not None) == (column == "Wait Time(us)")
        msgs = []
        for force_string in (False, True):
            with monkeypatch.context() as m:
                if force_string:
                    m.setattr(kmod, "read_typed_columns", lambda *a, **kw: None)
                with pytest.raises(InvalidCaptureError) as e:
                    kmod.read_kernels(k)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1], msgs
        assert f"row 2: {column} is not a finite number: {value!r} (CSV row 3 counting the header as row 1)" in msgs[0]


def test_op_summary_numeric_cell(clean_rank, tmp_path):
    """msprof's op_summary_*.csv (Task Duration(us) ...) goes through the same reader."""
    import csv
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.kernels import read_kernels
    from perfgate.synth.mutate import to_op_summary
    with open(clean_rank / "kernel_details.csv", newline="") as f:
        rows = list(csv.reader(f))
    ops = to_op_summary(clean_rank / "kernel_details.csv", tmp_path / "op_summary_20260101000000.csv")  # msprof: no Step Id column
    assert len(read_kernels(ops).df) == len(rows) - 1
    set_cell(ops, 7, "Task Duration(us)", "NaN")
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(ops)
    assert e.value.exit_code == 3 and e.value.row == 7
    assert "op_summary_20260101000000.csv row 7: Task Duration(us) is not a finite number: 'NaN' (CSV row 8" in str(e.value)


def test_step_trace_nan_is_refused_by_every_command(env):
    cand, *_ = env
    c = cand()
    set_cell(c / OUT0 / "step_trace_time.csv", 2, "Computing", "nan")
    _refused_everywhere(env, c, ["step_trace_time.csv row 2", "Computing is not a finite number: 'nan'",
                                 "CSV row 3 counting the header as row 1"])


@pytest.mark.parametrize("column,value,why", [
    ("Free", "inf", "is not a finite number"), ("Communication", "NaN", "is not a finite number"),
    ("Communication(Not Overlapped)", "abc", "is not a finite number"), ("Preparing", "None", "is not a finite number"),
    ("Computing", "N/A", "has no value"), ("Free", "", "has no value"),
])
def test_step_trace_numeric_cell(clean_rank, tmp_path, column, value, why):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.steps import read_step_trace
    p = _copy(clean_rank, tmp_path, "step_trace_time.csv")
    set_cell(p, 2, column, value)
    with pytest.raises(InvalidCaptureError) as e:
        read_step_trace(p)
    shown = "'N/A or empty'" if why == "has no value" else repr(value)
    assert e.value.exit_code == 3 and e.value.row == 2
    assert f"step_trace_time.csv row 2: {column} {why}: {shown} (CSV row 3 counting the header as row 1)" in str(e.value)


def _corrupt_comm(path, step, field, raw, link=False):
    doc = json.loads(path.read_text())
    op = [k for k in doc[step]["collective"] if k != "Total Op Info"][1]
    info = doc[step]["collective"][op]
    if link:
        info["Communication Bandwidth Info"] = {"HCCS": {"Transit Size(MB)": 28.6, "Transit Time(ms)": 1.8,
                                                         "Bandwidth(GB/s)": 15.7, field: "@@CELL@@"}}
    else:
        info["Communication Time Info"][field] = "@@CELL@@"
    path.write_text(json.dumps(doc).replace('"@@CELL@@"', raw))
    return op


def test_communication_json_nan_is_refused_by_every_command(env):
    cand, *_ = env
    c = cand()
    op = _corrupt_comm(c / OUT0 / "communication.json", "step11", "Elapse Time(ms)", "NaN")
    _refused_everywhere(env, c, ["communication.json", f"step11.collective.{op}",
                                 "Communication Time Info.Elapse Time(ms) is NaN, not a finite non-negative number"])


@pytest.mark.parametrize("field,raw,link", [
    ("Wait Time(ms)", "Infinity", False), ("Idle Time(ms)", "null", False), ("Transit Time(ms)", '"nan"', False),
    ("Start Timestamp(us)", '"N/A"', False), ("Start Timestamp(us)", "NaN", False),
    ("Synchronization Time(ms)", "-Infinity", False), ("Transit Size(MB)", "NaN", True),
    ("Transit Size(MB)", '"12.5"', True), ("Transit Time(ms)", "null", True),
])
def test_communication_json_numeric_field(clean_rank, tmp_path, field, raw, link):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.comm import read_communication
    p = _copy(clean_rank, tmp_path, "communication.json")
    op = _corrupt_comm(p, "step11", field, raw, link)
    with pytest.raises(InvalidCaptureError) as e:
        read_communication(p)
    where = "Communication Bandwidth Info.HCCS." if link else "Communication Time Info."
    assert e.value.exit_code == 3 and e.value.path == str(p)
    assert f"step11.collective.{op}: {where}{field} is {raw}, not a" in str(e.value)


def test_trace_always_refuses_a_rank_without_its_timeline(tmp_path):
    """--trace always means the timeline is required: a rank without trace_view.json is an
    invalid capture (exit 3, file named, nothing saved); --trace auto notes it and goes on."""
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=3, seed=4))
    (next(cap.glob("rank1_*")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    bl = tmp_path / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "t", str(cap), "--baseline-dir", str(bl),
                                  "--trace", "always"])
    assert r.exit_code == 3, r.output
    assert "trace_view.json is missing, and reading the timeline was required (--trace always)" in r.output
    assert "rank1_" in r.output and not bl.exists()
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "t", str(cap), "--baseline-dir", str(bl)])
    assert r.exit_code == 0, r.output


def test_kernel_table_without_step_id_against_a_stepped_step_trace_fails_closed(tmp_path):
    """No Step Id column makes one implicit step; with step_trace_time.csv listing steps 10-12
    per-step counts would triple (a false regression). Refused: exit 3 naming both files."""
    import csv as _csv
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=3, seed=2))
    kd = next(cap.glob("rank0_*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    rows = list(_csv.reader(kd.open(newline="")))
    i = rows[0].index("Step Id")
    with kd.open("w", newline="") as f:
        _csv.writer(f).writerows([r[:i] + r[i + 1:] for r in rows])
    bl = tmp_path / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "s", str(cap), "--baseline-dir", str(bl)])
    assert r.exit_code == 3, r.output
    assert "kernel_details.csv" in r.output and "has no Step Id column, while step_trace_time.csv lists 3 step(s)" \
        in r.output and not bl.exists()


def test_non_utf8_byte_in_a_data_row_names_that_row_not_the_header(env):
    """An invalid byte in data row 12's Name (inside the first 8 KiB, where a buffered text read
    decoded it with the header): the message names row 12, never "row 0: header is not UTF-8"."""
    cand, check, tmp, _ = env
    c = cand()
    p = c / OUT0 / "kernel_details.csv"
    lines = p.read_bytes().split(b"\n")
    assert len(b"\n".join(lines[:13])) < 8192
    cells = lines[12].split(b",")
    name_col = lines[0].decode().split(",").index("Name")
    cells[name_col] = cells[name_col][:3] + b"\xe9" + cells[name_col][3:]
    lines[12] = b",".join(cells)
    p.write_bytes(b"\n".join(lines))
    code, out = check(c)
    assert code == 3 and "kernel_details.csv" in out and "row 12" in out and "header" not in out, out


def test_a_repeated_step_trace_row_is_refused_at_read_time(env, copy_capture):
    """``tail -1 step_trace_time.csv >> step_trace_time.csv``: the two rows of step 50 were
    summed and the capture misdiagnosed as a comm_equality failure ("the files are not from one
    capture"). It is refused naming the step and both rows; nothing is written."""
    cap = copy_capture("level1", "repeated")
    st = cap / OUT0 / "step_trace_time.csv"
    last = st.read_bytes().splitlines(keepends=True)[-1]
    st.write_bytes(st.read_bytes() + last)
    _refused_everywhere(env, cap, ["step_trace_time.csv row 2: step 50 appears twice (rows 1, 2)",
                                   "one row per device and step"])


_ST_HEADER = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
              "Communication(Not Overlapped and Exclude Receive),Preparing\n")


@pytest.mark.parametrize("rows,message", [
    (["0,50", "0,51", "0,50"], "step 50 of device 0 appears twice (rows 1, 3)"),
    (["0,50", "0,50", "0,50"], "step 50 of device 0 appears 3 times (rows 1, 2, 3)"),
    ([",", ","], "the step-less row (empty Step) appears twice (rows 1, 2)"),
    (["0,50", "1,50"], "holds 2 devices in one rank folder"),  # one step per device: the devices are the issue
])
def test_step_trace_same_device_and_step_twice(tmp_path, rows, message):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.steps import read_step_trace, read_step_trace_pandas
    p = tmp_path / "step_trace_time.csv"
    p.write_text(_ST_HEADER + "".join(f"{r},10.0,5.0,1.0,6.0,2.0,17.0,0,5.0,3.0\n" for r in rows))
    for read in (read_step_trace, read_step_trace_pandas):
        with pytest.raises(InvalidCaptureError) as e:
            read(p)
        assert message in str(e.value) and e.value.exit_code == 3


def test_step_trace_one_row_per_step_still_reads(tmp_path):
    from perfgate.ingest.steps import read_step_trace
    p = tmp_path / "step_trace_time.csv"
    p.write_text(_ST_HEADER + "".join(f"0,{s},10.0,5.0,1.0,6.0,2.0,17.0,0,5.0,3.0\n" for s in (50, 51, 52)))
    assert read_step_trace(p)["step"].tolist() == ["50", "51", "52"]


def _repeat_header(path, at=None):
    """Repeat the header line before data row ``at`` (None: the whole file twice, as ``cat a b``)."""
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    path.write_bytes(data + data if at is None else b"".join(lines[:at] + [lines[0]] + lines[at:]))


@pytest.mark.parametrize("at,row", [(50, 50), (None, 192)])
def test_a_header_repeated_mid_kernel_table_is_named(env, copy_capture, at, row):
    """A header line repeated mid-file (a concatenated export) was reported as ``Start Time(us)
    is not a finite number: 'Start Time(us)'``: it is named as the repeated header."""
    cap = copy_capture("level1", "concat")
    _repeat_header(cap / OUT0 / "kernel_details.csv", at)
    _refused_everywhere(env, cap, [f"kernel_details.csv row {row}: the header line is repeated at data row {row} "
                                   f"(CSV row {row + 1} counting the header as row 1): a concatenated export"])


def test_a_header_repeated_in_step_trace_is_named(clean_rank, tmp_path):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.steps import read_step_trace
    p = _copy(clean_rank, tmp_path, "step_trace_time.csv")
    n = len(p.read_bytes().splitlines()) - 1
    _repeat_header(p)
    with pytest.raises(InvalidCaptureError, match=f"the header line is repeated at data row {n + 1} ") as e:
        read_step_trace(p)
    assert e.value.row == n + 1


def test_a_cell_holding_its_column_name_on_an_ordinary_row_is_still_a_bad_cell(clean_rank, tmp_path):
    from perfgate.errors import InvalidCaptureError
    from perfgate.ingest.kernels import read_kernels
    k = _copy(clean_rank, tmp_path, "kernel_details.csv")
    set_cell(k, 4, "Start Time(us)", "Start Time(us)")
    with pytest.raises(InvalidCaptureError, match=r"row 4: Start Time\(us\) is not a finite number: 'Start Time\(us\)'"):
        read_kernels(k)


@pytest.mark.parametrize("cut,needle", [
    (5, "the header line is cut short: the file ends inside it, after 'Step,' (2 column(s), no line break, "
        "no data rows); required column(s) missing: 'Computing'"),
    (40, "the header line is cut short: the file ends inside it, after 'Step,Computing,Communication(Not Overlap'"),
    (-1, "file has a header but no data rows: it ends inside its header line (no line break after "
         "…'verlapped and Exclude Receive),Preparing')"),
])
def test_step_trace_cut_inside_its_header_line(env, copy_capture, cut, needle):
    """step_trace_time.csv truncated inside its header line said ``malformed CSV or invalid UTF-8
    [Empty CSV file…]`` (or listed missing columns) though the file is not empty."""
    cap = copy_capture("level1", "cut")
    st = cap / OUT0 / "step_trace_time.csv"
    data = st.read_bytes()
    st.write_bytes(data[:cut if cut > 0 else data.index(b"\r\n")])
    _refused_everywhere(env, cap, ["step_trace_time.csv row 0: " + needle, "the file was cut"])
