"""op_statistic.csv as a witness of the kernel table: a compute row lost after the export is refused,
a damaged op_statistic is an invalid capture, layouts perfgate does not read are left out, and the
check is skipped when rows were deliberately left out."""
from __future__ import annotations

import csv
import shutil

import pytest

from perfgate.ingest.load import load_capture
from _cli import run


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
    r = run("baseline", "save", "--name", "m", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "self-check op_statistic_vs_kernels failed on rank 0:" in r.output
    assert ("(Cast, AI_VECTOR_CORE): 287 task(s) 5,998.280 us in rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/"
            "op_statistic.csv (its data row 10, line 11), 286 row(s)") in r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_a_raw_msprof_row_lost_is_refused_by_its_op_statistic(ascend, tmp_path):
    cap = tmp_path / "pu"
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization", cap)
    _delete_line(next(cap.rglob("op_summary_20260823165335.csv")), 2)
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
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
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
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
def test_op_statistic_layouts_perfgate_does_not_know_are_left_out_not_refused(copy_capture, tmp_path):
    """The file is a witness: a header without a column perfgate reads ("Total Time (us)") no
    longer refuses the capture, it is left out with a warning; N/A types on both sides match."""
    import json
    cap = copy_capture("level1")
    out = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    st = out / "op_statistic.csv"
    st.write_text(st.read_text(encoding="utf-8").replace("Total Time(us)", "Total Time (us)", 1), encoding="utf-8")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
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
    r = run("fingerprint", cap, "-o", tmp_path / "fp2.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp2.json").read_text())
    assert {c["status"] for c in fp["self_checks"] if c["name"] == "op_statistic_vs_kernels"} == {"pass"}
