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
    for p in cap.rglob("op_summary_*.csv"):
        rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
        i = rows[0].index("Task Duration(us)")
        for r in rows[1:]:
            r[i] = f"{float(r[i]) * factor:.3f}"
        with p.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
    return cap


@pytest.mark.real
def test_without_step_time_the_device_busy_union_gates(ascend, tmp_path):
    """Raw msprof output has no step_trace_time.csv and no timeline here: no time figure was gated
    and every kernel 3x slower passed (exit 0, 34 unchanged). The device busy union per step now
    gates with step time's rule, says so, and names the cause."""
    base = _scaled_msprof(ascend, tmp_path, "base", 1)
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    same = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o0", base)
    assert same.exit_code == 0, same.output
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             _scaled_msprof(ascend, tmp_path, "slow", 3))
    assert r.exit_code == 1, r.output
    assert "REGRESSION step anatomy device time (no kernel family explains it): device busy union 39.3 -> 118.0 us per step" in r.output
    assert "no step time on either side" in r.output
    import json
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    failing = sorted(c["key"] for c in res["comparisons"] if c["fails"])
    assert failing == ["device.time_us{caliber=busy_union,view=p50}", "device.time_us{caliber=busy_union,view=rank0}"]
    assert not res["unexplained"]


@pytest.mark.real
def test_an_underfeed_that_fell_as_kernels_grew_is_no_gain(ascend, tmp_path):
    """Every kernel 50x slower on raw msprof output: the underfeed ratio fell (99.7 % -> 87.2 %)
    because the kernels filled the step, while the idle time (bubbles) did not fall by 5 %. It was
    "improved ... device idle (underfeed): changed"; now a side effect saying why."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl,
                _scaled_msprof(ascend, tmp_path, "base", 1)).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o",
             _scaled_msprof(ascend, tmp_path, "slow", 50))
    assert r.exit_code == 1, r.output
    assert "side effect step anatomy device idle (underfeed): bubble 13,986.6 -> 13,366.2 us per step" in r.output
    assert "improved step anatomy" not in r.output and ": changed" not in r.output
    import json
    causes = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())["causes"]
    idle = next(x for x in causes if x["subject"] == "device idle (underfeed)")
    assert idle["verdict"] == "side_effect"
    assert idle["what"].endswith("its own time did not fall by more than max(1 us, 5 %): not a gain")


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
    from perfgate.gate import record_history
    from perfgate.policy import load_policy
    from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture
    d = tmp_path_factory.mktemp("trend7")
    faster = {f[0]: 0.7 for f in DEFAULT_FAMILIES}
    db = d / "h.sqlite"
    for i in range(1, 15):
        spec = SynthSpec(seed=200 + i, **({"slowdown": faster} if i > 8 else {}))
        record_history(write_capture(d / f"r{i}", spec), policy=load_policy(), history_path=db,
                       branch="main", commit=f"{i:02d}" + "0" * 38, env={})
    return db


def test_trend_calls_no_side_effect_of_faster_compute_a_change(faster_compute_db):
    """Compute 0.7x with communication as it was: `check` calls the Comm shares unchanged and the
    larger exposed communication a consequence; `history trend` reported them as confirmed
    regressions (+13 pp, +20 pp). Only Computing and step time change now."""
    r = _run("history", "trend", "--db", faster_compute_db)
    assert r.exit_code == 0, r.output
    sections = r.output.split("\n### ")[1:]
    changed = {sec.split("`")[1].split(" (series")[0]: [ln for ln in sec.splitlines() if ln.startswith("| 9 (#9)")
                                                        or ln.startswith("| 10 (#10)")] for sec in sections}
    changed = {k: v for k, v in changed.items() if v}
    assert sorted({k.split("{")[0] for k in changed}) == ["step.computing_us", "step.time_us"], changed
    assert all("improvement" in row for rows in changed.values() for row in rows), changed


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
