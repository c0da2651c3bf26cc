"""Defects found by the seventh audit round (2026-12-06, thirteenth session): helpers trying the
installed wheel as a new user, breaking ingest with damaged captures, and judging verdicts; each
test holds the behaviour wanted."""
from __future__ import annotations

import csv
import shutil

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.load import load_capture


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"GITHUB_EVENT_NAME": "push"})


def _msprof_rows(ascend):
    src = next((ascend / "vllm_ascend_msprof/prof_unpack").rglob("op_summary_20260823165335.csv"))
    return src.read_text(encoding="utf-8").splitlines()


def _slices(tmp_path, lines, names_rows):
    out = tmp_path / "cap" / "PROF_1" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    for name, rows in names_rows.items():
        (out / name).write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")
    return tmp_path / "cap"


@pytest.mark.real
@pytest.mark.parametrize("names, says", [
    # slice 1 lost: the table was read from slices 0 and 2 and saved as a baseline
    (["op_summary_slice_0_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 1 missing (slices present: 0, 2)"),
    (["op_summary_slice_1_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 0 missing (slices present: 1, 2)"),
    (["op_summary_20260823165335.csv", "op_summary_slice_2_20260823165337.csv"],
     "op_summary slice 1 missing (slices present: op_summary_<ts>.csv as slice 0, 2)"),
])
def test_a_missing_op_summary_slice_is_refused(ascend, tmp_path, names, says):
    lines = _msprof_rows(ascend)
    cap = _slices(tmp_path, lines, {n: lines[1:3] for n in names})
    with pytest.raises(InvalidCaptureError, match=pytest.importorskip("re").escape(says)):
        load_capture(cap)
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and says in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_slices_of_one_pass_are_one_table_whatever_their_stamps(ascend, tmp_path):
    """msprof stamps each slice when it writes it: a 3M-row export's slices differ by seconds. Both
    naming generations (slice 0 named as a slice, or as op_summary_<ts>.csv) are one table."""
    lines = _msprof_rows(ascend)
    cap = _slices(tmp_path / "a", lines, {"op_summary_slice_0_20260823165335.csv": lines[1:2],
                                          "op_summary_slice_1_20260823165349.csv": lines[2:3],
                                          "op_summary_slice_2_20260823165402.csv": lines[3:4]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3
    cap = _slices(tmp_path / "b", lines, {"op_summary_20260823165335.csv": lines[1:3],
                                          "op_summary_slice_1_20260823165349.csv": lines[3:4]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3


@pytest.mark.real
@pytest.mark.parametrize("sizes, bad", [((2, 1, 2), "op_summary_slice_1_"), ((2, 2, 3), "op_summary_slice_2_")])
def test_slices_that_are_not_full_but_the_last_are_refused(ascend, tmp_path, sizes, bad):
    """msprof writes full slices (1,000,000 rows) and the remainder last: a short slice in the
    middle was cut, and a last slice larger than the others is not this export's."""
    lines = _msprof_rows(ascend)
    at, rows = 0, {}
    for k, n in enumerate(sizes):   # the file's 3 rows over and over (repeats across slices are allowed)
        rows[f"op_summary_slice_{k}_2026082316533{k}.csv"] = [lines[1 + (at + i) % 3] for i in range(n)]
        at += n
    with pytest.raises(InvalidCaptureError, match="slices of one export are full") as e:
        load_capture(_slices(tmp_path, lines, rows))
    assert bad in e.value.path


def _scaled_msprof(ascend, tmp_path, name, factor):
    cap = tmp_path / name
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack", cap)
    # a run whose every task took `factor` times as long: the tasks and their op_statistic sums
    for pattern, columns in (("op_summary_*.csv", ("Task Duration(us)",)),
                             ("op_statistic_*.csv", ("Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)"))):
        for p in cap.rglob(pattern):
            rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
            for col in columns:
                i = rows[0].index(col)
                for r in rows[1:]:
                    r[i] = f"{float(r[i]) * factor:.3f}"
            with p.open("w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerows(rows)
    return cap


@pytest.mark.real
def test_without_step_time_the_device_busy_union_gates(ascend, tmp_path):
    """Raw msprof output has no step_trace_time.csv and no timeline here: no time figure was gated
    and every kernel 3x slower passed (exit 0, 34 unchanged). The device busy union per step now
    gates with step time's rule and says so. The capture has two compute families, too few for a
    device scale (at least three): each family's own time is judged as it is, and both are named."""
    base = _scaled_msprof(ascend, tmp_path, "base", 1)
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    same = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o0", base)
    assert same.exit_code == 0, same.output
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             _scaled_msprof(ascend, tmp_path, "slow", 3))
    assert r.exit_code == 1, r.output
    assert "no step time on either side" in r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    failing = sorted(c["key"] for c in res["comparisons"] if c["fails"])
    assert {"device.time_us{caliber=busy_union,view=p50}", "device.time_us{caliber=busy_union,view=rank0}"} <= set(failing)
    assert {x["subject"] for x in res["causes"] if x["fails"]} == {
        "aclnnGroupedMatmulV5_GroupedMatmul_GroupedMatmul", "aclnnInplaceOne_OnesLikeAiCore_OnesLike"}
    assert any("device scale 1 (only 2 compute families" in n for n in res["notes"])
    assert not res["unexplained"]


@pytest.mark.real
def test_an_underfeed_that_fell_as_kernels_grew_is_no_gain(ascend, tmp_path):
    """Every kernel 50x slower on raw msprof output: the underfeed ratio fell (99.7 % -> 87.2 %)
    because the kernels filled the step, while the idle time (bubbles) did not fall beyond what the
    device's busy time explains. It was "improved ... device idle (underfeed)"; the ratio is judged
    through idle time, and nothing about idle time is called a gain."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl,
                _scaled_msprof(ascend, tmp_path, "base", 1)).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             _scaled_msprof(ascend, tmp_path, "slow", 50))
    assert r.exit_code == 1, r.output
    assert "improved step anatomy" not in r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    under = [c for c in res["comparisons"] if c["name"] == "step.underfeed_ratio" and c["gated"]]
    assert under and all(c["verdict"] == "unchanged" and "within the bound" in c["reason"] for c in under), under
    assert not [x for x in res["causes"] if x["kind"] == "step anatomy"]


def test_step_time_is_charged_to_the_largest_cause_of_its_sign(tmp_path):
    """Communication fully exposed (+2,917 us busy union per step) and MatMul 1.2x (+793 us
    ΣDuration): both causes were listed, exposed communication first, yet the step-time
    regression was charged to MatMul in the console, the Markdown and the JUnit failure."""
    import json
    from perfgate.synth.writer import SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, overlap=1.0,
                                                      slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.2}))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    by_subject = {x["subject"]: x for x in res["causes"]}
    exposed = by_subject["exposed communication"]
    assert "step.time_us{view=rank0}" in exposed["explains"] and "step.time_us{view=p50}" in exposed["explains"]
    assert not any(k.startswith("step.time_us") for k in by_subject["aclnnMatmul_MatMulV3Common_MatMulV3"]["explains"])
    assert res["causes"][0]["subject"] == "exposed communication"
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| 🔴 | step time"))
    assert row.rstrip().endswith("| exposed communication |"), row


@pytest.fixture(scope="module")
def faster_compute_db(tmp_path_factory):
    """14 runs on main; from run 9 every compute kernel family is 0.7x as long, communication as
    it was (the helper's recipe)."""
    from perfgate.app.gate import HistoryEntry, record_history
    from perfgate.policy import load_policy
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    d = tmp_path_factory.mktemp("trend7")
    faster = {f[0]: 0.7 for f in DEFAULT_FAMILIES}
    db = d / "h.sqlite"
    for i in range(1, 15):
        spec = SynthSpec(seed=200 + i, **({"slowdown": faster} if i > 8 else {}))
        record_history(write_capture(d / f"r{i}", spec), HistoryEntry("main", commit=f"{i:02d}" + "0" * 38),
                       policy=load_policy(), history_path=db, env={})
    return db


def test_trend_calls_no_side_effect_of_faster_compute_a_change(faster_compute_db):
    """Compute 0.7x with communication as it was: `check` calls the Comm shares unchanged and the
    larger exposed communication within what the device explains; `history trend` reported them as
    confirmed regressions (+13 pp, +20 pp). Every change point there is an improvement now."""
    r = _run("history", "trend", "--db", faster_compute_db)
    assert r.exit_code == 0, r.output
    sections = r.output.split("\n### ")[1:]
    changed = {sec.split("`")[1].split(" (series")[0]: [ln for ln in sec.splitlines() if ln.startswith("| 9 (#9)")
                                                        or ln.startswith("| 10 (#10)")] for sec in sections}
    changed = {k: v for k, v in changed.items() if v}
    assert {"step.computing_us", "step.time_us"} <= {k.split("{")[0] for k in changed}, changed
    assert all("improvement" in row for rows in changed.values() for row in rows), changed   # nothing got slower


def test_uniform_device_drift_over_repeated_captures_moves_no_part(tmp_path):
    """5 vs 5 runs, every compute family 1.04x in the candidate (device drift): the MatMul share
    was UNSURE (exit 1 with unsure_fails) because the interval around the Hodges-Lehmann shift
    was corrected by a difference of medians, 0.13 pp off Δ*. Drift moves no part: PASS."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    drift = {f[0]: 1.04 for f in DEFAULT_FAMILIES}
    base = [write_capture(tmp_path / f"b{s}", SynthSpec(seed=s, steps=10)) for s in range(1, 6)]
    cand = [write_capture(tmp_path / f"c{s}", SynthSpec(seed=s + 30, steps=10, slowdown=drift)) for s in range(1, 6)]
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, *base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *cand)
    assert r.exit_code == 0 and r.output.startswith("perfgate: PASS"), r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert not [c["key"] for c in res["comparisons"] if c["gated"] and c["verdict"] != "unchanged"]


def _delete_line(path, lineno):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    del lines[lineno - 1]
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.real
def test_a_compute_row_lost_after_the_export_is_refused(ascend, tmp_path):
    """st/level2 with one 1.40 us Cast row deleted mid-step: the step time checks' tolerance
    swallowed it and the capture was saved as a baseline (the intact one then 'regressed').
    op_statistic.csv still counts 287 Cast tasks: exit 3 naming both files, nothing saved."""
    cap = tmp_path / "lost"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    _delete_line(cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", 895)
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "self-check op_statistic_vs_kernels failed on rank 0:" in r.output
    assert "(Cast, AI_VECTOR_CORE): 287 task(s) 5,998.280 us in op_statistic.csv (its row 10), 286 row(s)" in r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_a_raw_msprof_row_lost_is_refused_by_its_op_statistic(ascend, tmp_path):
    cap = tmp_path / "pu"
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization", cap)
    _delete_line(next(cap.rglob("op_summary_20260823165335.csv")), 2)
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and "op_statistic_vs_kernels" in r.output and "op_statistic_20260823165335.csv" in r.output, r.output


@pytest.mark.real
@pytest.mark.parametrize("edit, says", [
    (("57,1423.208", "57.5,1423.208"), "Count is not a non-negative integer: '57.5'"),
    (("57,1423.208", "57,N/A"), "Total Time(us)"),
    # a pair on two rows is summed (a generation keyed by a model name): here it then counts 60
    # ForeachAddList tasks where the kernel table has 3
    (("TransData,AI_VECTOR_CORE", "ForeachAddList,AI_VECTOR_CORE"), "(ForeachAddList, AI_VECTOR_CORE): 60 task(s)"),
])
def test_a_damaged_op_statistic_is_an_invalid_capture(copy_capture, tmp_path, edit, says):
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv"
    text = p.read_text(encoding="utf-8")
    assert edit[0] in text
    p.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and says in r.output and "op_statistic.csv" in r.output, r.output


def test_op_statistic_check_is_skipped_when_rows_were_left_out(tmp_path):
    """A kernel table with an exact duplicate row (counted once) cannot be matched against a
    file that counts it: skipped, saying why."""
    from perfgate.ingest.load import load_capture
    from perfgate.metrics.selfcheck import op_statistic_checks
    from perfgate.synth import SynthSpec, write_capture
    root = write_capture(tmp_path / "s", SynthSpec(ranks=1, steps=2))
    out = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    kd = out / "kernel_details.csv"
    lines = kd.read_text(encoding="utf-8").splitlines()
    kd.write_text("\n".join(lines + [lines[1]]) + "\n", encoding="utf-8")
    (out / "op_statistic.csv").write_text("OP Type,Core Type,Count,Total Time(us)\nX,AI_CORE,1,1.0\n", encoding="utf-8")
    rank = load_capture(root, with_trace="never").ranks[0]
    (check,) = op_statistic_checks(rank, (0.001, 0.01))
    assert check.status == "skipped" and "left 1 row(s) out" in check.message


@pytest.mark.real
def test_a_step_only_communication_json_has_is_refused(ascend, tmp_path):
    """A step 14 added to communication.json (in neither kernel_details.csv nor
    step_trace_time.csv) was averaged into comm.elapse_us: -47 %, "improved", exit 0."""
    import copy
    import json
    cap = tmp_path / "phantom"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    for r in (0, 1):
        p = cap / f"rank_{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
        d = json.loads(p.read_text(encoding="utf-8"))
        d["step14"] = copy.deepcopy(d["step13"])
        p.write_text(json.dumps(d), encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3, r.output
    assert ("holds ops in step(s) 14, which neither kernel_details.csv (steps 13) nor step_trace_time.csv "
            "(steps 13) lists") in r.output
    assert "holds ops in step(s) 14, which step_trace_time.csv (steps 13) does not list" in r.output   # partial rank 1


@pytest.mark.real
def test_a_partial_rank_with_another_ranks_communication_json_is_refused(ascend, tmp_path):
    """st/level2 rank 1 (partial: no kernel table) given rank 0's communication.json: PASS and
    saved. Its ops' busy union (420,174 us) is not its own step_trace Communication (441,708 us)."""
    cap = tmp_path / "foreign"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    shutil.copy(cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json",
                cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "f", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "is byte for byte the communication.json of rank 0" in r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_a_partial_ranks_communication_json_is_checked_against_its_step_trace(ascend, tmp_path):
    """Not a byte copy but another rank's ops (a file edited, or of another run with the same
    steps): the busy union of its ops against its own step_trace Communication warns (the 2023
    files differ by ~0.9 %, so this cannot fail closed)."""
    import json
    cap = tmp_path / "foreign"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    d = json.loads((cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text(encoding="utf-8"))
    (cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").write_text(json.dumps(d, indent=1),
                                                                                   encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp.json").read_text())
    (check,) = [c for c in fp["self_checks"] if c["name"] == "comm_ops_vs_step_trace"]
    assert check["status"] == "warn" and "420,174.260 us differs from" in check["message"]
    assert "Communication 441,708.380 us" in check["message"]


@pytest.mark.real
def test_a_count_between_two_ranks_says_which_ranks_ran_what(copy_capture, tmp_path):
    """InplaceRelu doubled on rank 1 of 2: "calls 7 -> 10.5/step", a count no rank ran, with no
    word of the ranks. The p50 count still gates (half the ranks regressed) and now says so."""
    from perfgate.synth.mutate import add_calls
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    add_calls(cand / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT", "aclnnInplaceRelu_Relu_Relu", 2)
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    assert ("kernel family aclnnInplaceRelu_Relu_Relu: calls 7 -> 10.5/step (median of 2 ranks, no rank's "
            "count: rank0 7 -> 7; the other rank 7 -> 14)") in r.output


def test_an_integer_median_of_two_ranks_is_still_named(tmp_path):
    """Rank 1 of 2 from 12 to 24 Add calls: "calls 12 -> 18/step", an integer no rank ran, had
    no note (only a fractional median had one)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    add = "aclnnAdd_AddAiCore_Add"
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, ranks=2))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, ranks=2, extra_calls={add: 2}, inject_ranks=(1,)))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1, r.output
    assert "(median of 2 ranks, no rank's count: rank0 12 -> 12; the other rank 12 -> 24)" in r.output, r.output


def test_a_policy_with_another_top_n_still_compares_the_families_both_sides_recorded(tmp_path):
    """Baseline fingerprinted with top_n 10, check with top_n 5: every per-family call count was
    'not compared, policy top_n differs' and a doubled Cast count was 'unexplained'. A family's
    calls do not depend on top_n: the families both sides recorded are compared."""
    import json
    from perfgate.policy import DEFAULT_POLICY
    from perfgate.synth.writer import SynthSpec, write_capture
    text = open(DEFAULT_POLICY, encoding="utf-8").read()
    assert "\n  top_n: 10" in text
    pol = tmp_path / "top5.yaml"
    pol.write_text(text.replace("\n  top_n: 10", "\n  top_n: 5"), encoding="utf-8")
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--policy", pol, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1 and "REGRESSION kernel family aclnnCast_CastAiCore_Cast: calls 10 -> 20/step" in r.output, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    not_compared = {c["key"] for c in res["comparisons"] if c["gated"] and c["verdict"] == "incomparable"}
    assert not_compared == {"kernel.topn{view=p50}", "kernel.topn{view=rank0}"}, not_compared
    assert not res["unexplained"]


@pytest.mark.real
def test_a_kernel_table_with_no_device_time_is_refused(ascend, tmp_path):
    """Every Task Duration 0.000: saved as a baseline, and checks against it read shares as
    0 / 0 = 0 % ("MatMul 67.80 % -> 0.00 % regression" beside a -100 % ΣDuration "regression")."""
    cap = tmp_path / "zero"
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization", cap)
    p = next(cap.rglob("op_summary_*.csv"))
    rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
    i = rows[0].index("Task Duration(us)")
    for r in rows[1:]:
        r[i] = "0.000"
    with p.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "z", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "every one of its 3 row(s) has Task Duration(us) 0: no device time" in r.output, r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_report_on_an_invalid_capture_says_why_first(ascend, tmp_path):
    """`perfgate report` printed "INVALID_CAPTURE: 675 metrics, ranks [0, 1]": no reason, and a
    metric count that reads as a usable capture. It now names the failed self-check as check does."""
    cap = tmp_path / "slow"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    p = cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
    ni, di = rows[0].index("Name"), rows[0].index("Duration(us)")
    for r in rows[1:]:
        if "FlashAttentionScore_" in r[ni] and "Grad" not in r[ni]:
            r[di] = f"{float(r[di]) * 1.3:.3f}"
    with p.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = _run("report", "--html", tmp_path / "r.html", cap)
    assert r.exit_code == 3, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("perfgate: INVALID_CAPTURE: self-check compute_union failed on rank 0 step 13:"), first
    assert " metrics, ranks" not in r.output and (tmp_path / "r.html").is_file()


@pytest.mark.real
def test_history_runs_names_the_rank_count_as_such(ascend, tmp_path):
    """`history runs` showed world_size 2 for st/level2, whose job has world size 4 (PP2 x DP2, 2
    ranks profiled): the column is the number of rank folders read, and is named so."""
    db = tmp_path / "h.sqlite"
    assert _run("history", "record", "--db", db, "--branch", "main", "--commit", "abc",
                ascend / "msinsight/test/st/level2").exit_code == 0
    r = _run("history", "runs", "--db", db)
    assert r.exit_code == 0 and "world_size" not in r.output and "ranks" in r.output.splitlines()[0], r.output


@pytest.mark.real
def test_full_width_digits_in_a_duration_are_refused(copy_capture, tmp_path):
    """A Duration(us) cell "５３.７４１" was read as 53.741 (Decimal takes any Unicode digit), while
    Step Id and communication.json refuse non-ASCII digits."""
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    text = p.read_text(encoding="utf-8")
    assert "\t,53.741," in text
    p.write_text(text.replace("\t,53.741,", "\t,５３.７４１,", 1), encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and "is not a finite number (non-ASCII characters)" in r.output, r.output


def test_repeated_captures_name_the_family_behind_a_part_and_no_comm_side_effect(tmp_path):
    """5 vs 5 runs, MatMul 1.15x (beyond the 10 % compute band): the MatMul category share failed
    while the family share did not ("no cause found" beside a reason naming MatMul), and the Comm
    share, whose own ΣDuration did not move, was unsure. Every part is judged through its own time
    now: the MatMul family is the one cause and Comm is unchanged."""
    import json
    from perfgate.synth.writer import SynthSpec, write_capture
    mm = "aclnnMatmul_MatMulV3Common_MatMulV3"
    base = [write_capture(tmp_path / f"b{s}", SynthSpec(seed=s, steps=10)) for s in range(1, 6)]
    cand = [write_capture(tmp_path / f"c{s}", SynthSpec(seed=s + 40, steps=10, slowdown={mm: 1.15}))
            for s in range(1, 6)]
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, *base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *cand)
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert [x["subject"] for x in res["causes"]] == [mm] and not res["unexplained"]
    verdicts = {c["key"]: c["verdict"] for c in res["comparisons"] if c["gated"]}
    assert verdicts["share.category{category=Comm,view=rank0}"] == "unchanged"
    assert "unsure" not in verdicts.values()
    assert "no cause found" not in (tmp_path / "o" / "perfgate-report.md").read_text()


_ONE = "aclnnGroupedMatmul_GroupedMatmul_GroupedMatmul"


def _one_kernel_family_check(tmp_path, factor):
    """Default synthetic families plus one of a single 600 us call per step, made ``factor``
    times as long in the candidate: ``(check result, JSON result)``."""
    import json
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    fams = tuple(DEFAULT_FAMILIES) + ((_ONE, "GroupedMatmul", "AI_CORE", 1, 600.0),)
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, families=fams))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, families=fams, slowdown={_ONE: factor}))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    return r, json.loads((tmp_path / "o" / "perfgate-result.json").read_text())


def test_a_one_call_family_is_judged_as_any_part(tmp_path):
    """A family of one call per step is a part like any other: 600 -> 1,200 us adds 600 us/step
    beyond the device, material (more than 2 % of Computing) and beyond its noise band, so it fails
    naming that family; ×1.05 stays within the band."""
    r, res = _one_kernel_family_check(tmp_path, 2.0)
    assert r.exit_code == 1 and res["causes"][0]["subject"] == _ONE and res["causes"][0]["fails"], r.output
    share = {c["key"]: c for c in res["comparisons"]}[f"share.family{{family={_ONE},view=rank0}}"]
    assert share["gated"] and share["fails"] and share["stats"]["part"]["excess_us"] > share["stats"]["part"]["bound_us"]
    r, res = _one_kernel_family_check(tmp_path / "small", 1.05)
    assert not any(x["subject"] == _ONE and x["fails"] for x in res["causes"]), r.output


def test_a_baseline_without_step_time_still_gates_the_device_time(tmp_path):
    """A baseline saved without step_trace_time.csv and timeline, a candidate with both and every
    compute family 3x slower: step time was 'new, not judged' and the check passed."""
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    for f in [*base.rglob("step_trace_time.csv"), *base.rglob("trace_view.json")]:
        f.unlink()
    slow = {f[0]: 3.0 for f in DEFAULT_FAMILIES if not f[0].startswith("hcom")}
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, slowdown=slow))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 1 and "no step time on one side" in r.output, r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert any(c["fails"] and c["key"].startswith("device.time_us{caliber=busy_union") for c in res["comparisons"])



@pytest.mark.real
def test_op_statistic_layouts_perfgate_does_not_know_are_left_out_not_refused(copy_capture, tmp_path):
    """The file is a witness: a header without a column perfgate reads ("Total Time (us)") no
    longer refuses the capture, it is left out with a warning; N/A types on both sides match."""
    import json
    cap = copy_capture("level1")
    out = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    st = out / "op_statistic.csv"
    st.write_text(st.read_text(encoding="utf-8").replace("Total Time(us)", "Total Time (us)", 1), encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp.json").read_text())
    assert any("op_statistic.csv not used to check kernel_details.csv's rows" in w for w in fp["warnings"])
    assert [c["rank"] for c in fp["self_checks"] if c["name"] == "op_statistic_vs_kernels"] == [1]

    cap = copy_capture("level1", "na")
    out = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    kd = out / "kernel_details.csv"
    rows = list(csv.reader(kd.open(newline="", encoding="utf-8")))
    ti = rows[0].index("Type")
    moved = [r for r in rows[1:] if r[ti] == "TransData"][:2]
    for r in moved:
        r[ti] = "N/A"
    with kd.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    srows = list(csv.reader((out / "op_statistic.csv").open(newline="", encoding="utf-8")))
    h = srows[0]
    td = next(r for r in srows[1:] if r[0] == "TransData")
    dsum = sum(float(r[rows[0].index("Duration(us)")]) for r in moved)
    td[h.index("Count")] = str(int(td[h.index("Count")]) - 2)
    td[h.index("Total Time(us)")] = f"{float(td[h.index('Total Time(us)')]) - dsum:.3f}"
    na = list(td)
    na[0], na[h.index("Count")], na[h.index("Total Time(us)")] = "N/A", "2", f"{dsum:.3f}"
    srows.append(na)
    with (out / "op_statistic.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(srows)
    r = _run("fingerprint", cap, "-o", tmp_path / "fp2.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp2.json").read_text())
    assert {c["status"] for c in fp["self_checks"] if c["name"] == "op_statistic_vs_kernels"} == {"pass"}


@pytest.mark.real
def test_underscores_in_a_duration_are_refused(copy_capture, tmp_path):
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    p.write_text(p.read_text(encoding="utf-8").replace("\t,53.741,", "\t,5_3.741,", 1), encoding="utf-8")
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3 and "is not a finite number (a '_' in it)" in r.output, r.output


@pytest.mark.real
def test_a_zero_duration_slice_of_a_table_with_device_time_is_read(ascend, tmp_path):
    """The no-device-time refusal ran per slice: a last slice of one 0-duration row refused a
    table that has device time."""
    lines = _msprof_rows(ascend)
    rows = list(csv.reader(lines))
    di = rows[0].index("Task Duration(us)")
    last = list(rows[3])
    last[di] = "0.000"
    import io
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(last)
    cap = _slices(tmp_path, lines, {"op_summary_slice_0_20260823165335.csv": lines[1:3],
                                    "op_summary_slice_1_20260823165336.csv": [buf.getvalue()]})
    assert len(load_capture(cap).ranks[0].kernels.df) == 3


def test_a_one_kernel_family_within_the_drift_is_still_named_as_the_cause(tmp_path):
    """One call per step 600 -> ~1,500 us (2.4x, inside the drift bound, so its share does not
    gate): Computing and step time regressed and were charged to "Computing (no kernel family
    explains it)", though that family's own time accounts for all of it."""
    r, res = _one_kernel_family_check(tmp_path, 2.4)
    assert r.exit_code == 1, r.output
    assert [x["subject"] for x in res["causes"]] == [_ONE], res["causes"]
    assert "no kernel family explains it" not in r.output


def test_ranks_whose_communication_json_holds_no_op_may_be_equal(tmp_path):
    """Identical communication.json files without an op ({}, steps with no op) hold no times that
    could have been copied: not refused (a byte copy of one with ops is)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    root = write_capture(tmp_path / "x", SynthSpec(comm_ops=0))
    for text in ('{}\\n', '{"step10": {"collective": {}, "p2p": {}}}'):
        for cm in root.rglob("communication.json"):
            cm.write_text(text, encoding="utf-8")
        r = _run("fingerprint", root, "-o", tmp_path / "fp.json", "--trace", "never")
        assert r.exit_code == 0, (text, r.output)
