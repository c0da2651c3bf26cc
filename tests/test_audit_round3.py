"""Defects found by the third audit round (a helper breaking check / baseline / history with
real-capture variations), each with the behaviour wanted."""
from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from perfgate.cli import main


def _run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


def _partial_rank0(path):
    out = path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    for f in out.iterdir():
        if f.name not in ("step_trace_time.csv", "communication.json"):
            f.unlink() if f.is_file() else shutil.rmtree(f)
    return path


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def test_partial_rank0_is_not_every_family_gone(copy_capture, tmp_path):
    """level1 against itself with rank 0 cut down to step_trace_time.csv + communication.json:
    the rank0 view of the kernel metrics was not measured on that side. It read as 0 (every
    family "gone", hcom_allReduce the cause of a REGRESSION with 54 causes; the other way round
    every family "new"). It is not compared, with the reason, as the p50 view already was."""
    full = copy_capture("level1", "full")
    part = _partial_rank0(copy_capture("level1", "part"))
    bl = tmp_path / "bl"
    for name, cap in (("full", full), ("part", part)):
        r = _run("baseline", "save", "--name", name, "--baseline-dir", bl, cap)
        assert r.exit_code == 0, r.output
    for base, cand in (("full", part), ("part", full)):
        out = tmp_path / f"o-{base}"
        r = _run("check", "--baseline", base, "--baseline-dir", bl, cand, "--out", out,
                 "--allow-partial")   # most gated metrics are not comparable: judge the rest
        assert r.exit_code == 0 and "REGRESSION" not in r.output, r.output
        res = _result(out)
        assert res["counts"]["gated"]["regression"] == res["counts"]["gated"]["improvement"] == 0
        assert not res["causes"]
        rank0 = [c for c in res["comparisons"] if c["name"] == "kernel.calls_per_step"
                 and c["labels"].get("view") == "rank0"]
        assert rank0 and all(c["verdict"] == "incomparable" for c in rank0)
        side = "candidate" if base == "full" else "baseline"
        assert f"rank 0 holds no kernel table in the {side} (a partial rank" in rank0[0]["reason"]


def _tree_digest(d):
    import hashlib
    from pathlib import Path
    d = Path(d)
    if not d.exists():
        return None
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


def test_stray_output_folder_beside_rank_folders_is_refused(copy_capture, tmp_path):
    """A capture folder holding rank folders and also an ASCEND_PROFILER_OUTPUT/ of its own (rank
    1's copied up): discovery read only the stray one, as rank 0, and saved that as the baseline
    (exit 0). Now exit 3 naming the folder, and nothing is saved."""
    cap = copy_capture("level1", "stray")
    shutil.copytree(cap / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT", cap / "ASCEND_PROFILER_OUTPUT")
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "s", "--baseline-dir", bl, cap)
    assert r.exit_code == 3 and "holds an ASCEND_PROFILER_OUTPUT/ of its own beside rank folders" in r.output
    assert "rank0_ascend_pt, rank1_ascend_pt" in r.output and _tree_digest(bl) in (None, {})


def test_rank_folder_below_the_search_depth_is_refused(text_captures, tmp_path):
    """One rank folder 7 levels down: it was left out silently (a 1-rank fingerprint); now exit 3
    naming it."""
    root = tmp_path / "job"
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt", root / "n0" / "rank0_ascend_pt")
    deep = root / "n1" / "a" / "b" / "c" / "d" / "e"
    shutil.copytree(text_captures / "level1" / "rank1_ascend_pt", deep / "rank1_ascend_pt")
    r = _run("fingerprint", "--trace", "never", root, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT lies more than 6 folder levels" in r.output
    # five levels down is still found
    shutil.move(str(deep / "rank1_ascend_pt"), str(root / "n1" / "a" / "b" / "c" / "rank1_ascend_pt"))
    r = _run("fingerprint", "--trace", "never", root, "-o", tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "fp.json").read_text())["config"]["ranks"] == [0, 1]


def _drop_comm_step(out, step):
    """communication.json without ``step`` (a file that lists a step the kernel table and
    step_trace_time.csv lack is another capture's: exit 3, seventh audit round)."""
    p = out / "communication.json"
    if p.is_file():
        d = json.loads(p.read_text(encoding="utf-8"))
        d.pop(f"step{step}", None)
        p.write_text(json.dumps(d), encoding="utf-8")


def test_history_record_refuses_a_partial_capture(tmp_path):
    """A capture whose rank 0 lost a step (step counts {0: 4, 1: 5}): baseline save refused it
    (exit 3) but history record stored it, and history:main's median then took it in. Now both
    refuse it, and the database is unchanged."""
    s5 = tmp_path / "S5"
    assert _run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    cut = tmp_path / "cut"
    shutil.copytree(s5, cut)
    out0 = cut / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (out0 / "trace_view.json").unlink(missing_ok=True)
    (cut / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink(missing_ok=True)
    for f in ("kernel_details.csv", "step_trace_time.csv"):
        lines = (out0 / f).read_text().splitlines(keepends=True)
        last = lines[-1].split(",")[0]
        (out0 / f).write_text("".join(x for x in lines if x.split(",")[0] != last))
    _drop_comm_step(out0, last.strip('"'))
    db = tmp_path / "h.sqlite"
    assert _run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, s5).exit_code == 0
    before = db.read_bytes()
    r = _run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cut)
    assert r.exit_code == 3 and "different step counts" in r.output and "cannot be recorded in the history" in r.output
    assert db.read_bytes() == before
    r = _run("baseline", "save", "--name", "c", "--baseline-dir", tmp_path / "bl", cut)
    assert r.exit_code == 3 and "cannot become a baseline" in r.output


def test_a_share_that_fell_because_the_rest_grew_is_a_side_effect(copy_capture, tmp_path):
    """Every compute row of level1 ×1.5 (ΣDuration; timeline and step_trace left out on both
    sides), communication untouched: hcom_allReduce's share falls, its own ΣDuration and calls do
    not move. The cause was printed "improved communication hcom_allReduce"; it is a side effect."""
    import csv
    from decimal import Decimal
    base = copy_capture("level1", "base")
    for p in [*base.rglob("trace_view.json"), *base.rglob("step_trace_time.csv")]:
        p.unlink()
    cand = tmp_path / "cand"
    shutil.copytree(base, cand)
    for p in cand.rglob("kernel_details.csv"):
        rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
        di, ni = rows[0].index("Duration(us)"), rows[0].index("Name")
        for r in rows[1:]:
            if not r[ni].startswith("hcom"):
                r[di] = str((Decimal(r[di].strip()) * Decimal("1.5")).quantize(Decimal("0.001")))
        with open(p, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    res = _result(out)
    causes = {x["subject"]: x for x in res["causes"]}
    # since the fourth audit round the comparison itself is no gain: a part whose own ΣDuration did
    # not move is unchanged (a consequence), so nothing names hcom_allReduce and nothing counts as improved
    assert "hcom_allReduce" not in causes and "improved   communication hcom_allReduce" not in r.output
    comm_shares = [c for c in res["comparisons"] if c["gated"] and c["name"].startswith("share.")
                   and ("hcom" in str(c["labels"].get("family", "")) or c["labels"].get("category") == "Comm")]
    assert comm_shares and all(c["verdict"] == "unchanged" for c in comm_shares), \
        [(c["key"], c["verdict"]) for c in comm_shares]
    assert any("within the bound" in c["reason"] for c in comm_shares)
    assert res["counts"]["gated"]["improvement"] == 0


def test_gated_memory_bound_without_its_ratio_columns_fails_closed(copy_capture, tmp_path):
    """A policy gating pipe.memory_bound and a kernel table without the *_ratio columns (the
    *_time(us) ones kept): the baseline was saved (exit 0) without rank 0's memory_bound, and the
    next check failed with "MISSING ... a file the baseline had is missing?". Now exit 3 naming the
    file and the columns; nothing is saved."""
    import csv
    from importlib.resources import files
    text = files("perfgate").joinpath("policies/default.yaml").read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.strip().startswith("pipe.memory_bound:"))
    pol = tmp_path / "pol.yaml"
    pol.write_text(text.replace(line, line.replace("gated: false", "gated: true")), encoding="utf-8")
    cap = copy_capture("level1", "noratio")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    rows = list(csv.reader(open(kd, newline="", encoding="utf-8-sig")))
    keep = [i for i, h in enumerate(rows[0]) if not h.endswith("_ratio")]
    with open(kd, "w", newline="") as f:
        csv.writer(f).writerows([[r[i] for i in keep] for r in rows])
    bl = tmp_path / "bl"
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, "--policy", pol, cap)
    assert r.exit_code == 3, r.output
    assert "gates pipe.memory_bound" in r.output and "aic_mac_ratio + aic_mte2_ratio" in r.output
    assert "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv" in r.output and not (bl / "m.json").exists()
    r = _run("baseline", "save", "--name", "m", "--baseline-dir", bl, "--policy", pol, copy_capture("level1", "full"))
    assert r.exit_code == 0, r.output
    # gated through an override of one family only (the base rule ungated): the same refusal
    ov = tmp_path / "ov.yaml"
    ov.write_text(text.replace("overrides:", "overrides:\n  - {metric: pipe.memory_bound, labels: {family: "
                               "aclnnMatmul_MatMulV3Common_MatMulV3}, gated: true}", 1), encoding="utf-8")
    r = _run("baseline", "save", "--name", "o", "--baseline-dir", bl, "--policy", ov, cap)
    assert r.exit_code == 3 and "gates pipe.memory_bound" in r.output and not (bl / "o.json").exists(), r.output


def test_bare_cr_line_endings_are_refused_not_a_crash(copy_capture, tmp_path):
    """kernel_details.csv with every LF turned into a bare CR: Python's csv module raised
    ("new-line character seen in unquoted field"), exit 70 "a bug in perfgate". Now exit 3 naming
    the file and the line endings."""
    cap = copy_capture("level1", "cr")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kd.write_bytes(kd.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    r = _run("fingerprint", "--trace", "never", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "kernel_details.csv row 0: lines end in a bare carriage return" in r.output


def test_a_doubled_layer_anchor_is_the_family_not_the_model_structure(tmp_path):
    """FlashAttention (the attention anchor) launched twice in every layer, every other family
    unchanged: the layer count doubles (each FA starts a layer), and the cause read "model
    structure: model layers 6 -> 12" with FA folded into it, unnamed. One family changed its
    calls while the others kept theirs: FA is the cause. A real extra layer (6 -> 7, every layer
    family more) stays a model-structure cause (tests/test_segments.py)."""
    from perfgate.synth import SynthSpec, write_capture
    from perfgate.synth import transformer as tf
    fa = tf.ATTENTION[3]
    assert fa[0].startswith("aclnnFlashAttentionScore")
    base_seq = tf.transformer_sequence(6)
    doubled = []
    for k in base_seq:
        doubled += [k, k] if k is fa else [k]
    write_capture(tmp_path / "a", SynthSpec(sequence=base_seq, overlap=1.0, seed=1))
    write_capture(tmp_path / "b", SynthSpec(sequence=tuple(doubled), overlap=1.0, seed=1))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "m", "--baseline-dir", bl, tmp_path / "a").exit_code == 0
    r = _run("check", "--baseline", "m", "--baseline-dir", bl, tmp_path / "b", "--out", out)
    causes = _result(out)["causes"]
    assert causes and causes[0]["kind"] == "kernel family" and causes[0]["subject"] == fa[0], r.output
    assert not any(x["kind"] == "model structure" for x in causes), r.output
    structure = [c["key"] for c in _result(out)["comparisons"] if c["name"] == "layer.count" and c["gated"]
                 and c["verdict"] == "regression"]
    assert structure and set(structure) <= set(causes[0]["explains"])


def test_a_step_without_kernel_rows_is_named(tmp_path):
    """A step's kernel rows deleted from rank 0 and its step_trace_time.csv row zeroed (Free =
    Stage: the device did nothing): the check failed on a gated step.exposed_comm_ratio "MISSING
    ... a file the baseline had is missing?" with nothing naming the empty step (a row that kept
    its Computing time is refused by the steps_present self-check). A warning now names the step
    and the file and what it leaves out; the gate still fails on the metric it cannot vouch for."""
    s5 = tmp_path / "S5"
    assert _run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    cut = tmp_path / "cut"
    shutil.copytree(s5, cut)
    kd = cut / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_text().splitlines(keepends=True)
    victim = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[2]
    kd.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != victim]))
    st_path = kd.parent / "step_trace_time.csv"
    st_lines = st_path.read_text().splitlines(keepends=True)
    hdr = st_lines[0].rstrip("\n").split(",")
    out_lines = [st_lines[0]]
    for x in st_lines[1:]:
        cells = x.rstrip("\n").split(",")
        if cells[0] == victim:   # the device did nothing in it: every figure 0, Free = Stage
            stage = cells[hdr.index("Stage")]
            cells = [victim] + ["0"] * (len(cells) - 1)
            cells[hdr.index("Free")] = cells[hdr.index("Stage")] = stage
        out_lines.append(",".join(cells) + "\n")
    st_path.write_text("".join(out_lines))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "s", "--baseline-dir", bl, s5).exit_code == 0
    r = _run("check", "--baseline", "s", "--baseline-dir", bl, cut, "--out", out, "-v")
    assert r.exit_code == 1 and "step.exposed_comm_ratio" in r.output, r.output
    assert f"kernel_details.csv has no kernel row in step(s) {victim} of step_trace_time.csv" in r.output, r.output


def test_the_step_share_of_an_anatomy_cause_names_its_own_caliber(tmp_path):
    """A step-anatomy cause (exposed communication, device idle) is measured in the busy-union or
    elapsed caliber; its "share of the step-time change" said "ΣDuration +50,982 of elapsed ...".
    It now names the part's caliber; family causes keep ΣDuration."""
    from perfgate.report.summary import step_share_text
    from perfgate.synth import SynthSpec, write_capture
    cast = "aclnnCast_CastAiCore_Cast"
    base = write_capture(tmp_path / "B", SynthSpec())
    cand = write_capture(tmp_path / "C", SynthSpec(extra_calls={cast: 0.5}, slowdown={cast: 6}))
    bl, out = tmp_path / "bl", tmp_path / "o"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, base).exit_code == 0
    _run("check", "--baseline", "b", "--baseline-dir", bl, cand, "--out", out)
    doc = _result(out)
    anatomy = [c for c in doc["causes"] if c["kind"] == "step anatomy" and c["step_delta_us"] is not None]
    assert anatomy, doc["causes"]
    md = (out / "perfgate-report.md").read_text()
    for c in anatomy:
        assert c["step_delta_caliber"] in ("busy union", "elapsed")
        text = step_share_text(c)
        assert text.startswith(c["step_delta_caliber"]) or f"({c['step_delta_caliber']} " in text
        assert text.replace("|", "\\|") in md or text in md
    fam = next(c for c in doc["causes"] if c["subject"] == cast)
    assert "step_delta_caliber" not in fam or fam["step_delta_caliber"] is None
    assert "ΣDuration" in step_share_text(fam)
    assert step_share_text({"step_delta_us": 50982.0, "step_time_delta_us": 68291.0,
                            "step_delta_caliber": "busy union"}) == "busy union +50,982 of elapsed +68,291 us/step (75%)"


def test_steps_lost_at_the_end_are_named_from_the_schedule(tmp_path):
    """The last step cut from both ranks' kernel and step_trace files (no timeline): saved with 4
    steps and no word, though profiler_info's schedule profiles 5. A warning now says so."""
    s5 = tmp_path / "S5"
    assert _run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    info = json.loads(next(s5.rglob("profiler_info_0.json")).read_text())
    assert info["config"]["common_config"]["schedule"]["active"] == 5
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    for f in [*s5.rglob("kernel_details.csv"), *s5.rglob("step_trace_time.csv")]:
        lines = f.read_text().splitlines(keepends=True)
        last = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[-1]
        f.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != last]))
        _drop_comm_step(f.parent, last)
    r = _run("baseline", "save", "--name", "s", "--baseline-dir", tmp_path / "bl", s5)
    assert r.exit_code == 0, r.output
    assert "kernel_details.csv holds 4 step(s), but profiler_info_0.json's schedule profiles 5 (active 5 x repeat 1)" in r.output


def test_stray_output_folder_above_nested_rank_folders_is_refused(text_captures, tmp_path):
    """The stray copy at the capture's root with the rank folders one level further down
    (cap/job/rank*_ascend_pt): the same refusal; and a rank 19 levels down beside a shallow one."""
    cap = tmp_path / "cap"
    shutil.copytree(text_captures / "level1", cap / "job")
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", cap / "ASCEND_PROFILER_OUTPUT")
    r = _run("baseline", "save", "--name", "x", "--baseline-dir", tmp_path / "bl", cap)
    assert r.exit_code == 3 and "beside rank folders with theirs (job)" in r.output, r.output
    deep = tmp_path / "deep"
    shutil.copytree(text_captures / "level1" / "rank1_ascend_pt", deep / "rank1_ascend_pt")
    far = deep.joinpath(*[f"l{i}" for i in range(1, 19)])
    shutil.copytree(text_captures / "level1" / "rank0_ascend_pt", far / "rank0_ascend_pt")
    r = _run("fingerprint", "--trace", "never", deep, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "l18/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT lies more than 6" in r.output, r.output


def test_an_unknown_step_time_is_not_called_unchanged():
    """No step_trace_time.csv and no timeline on a side: the elapsed step time is unknown (None).
    The share column said "elapsed step time unchanged" while the step's wall had grown."""
    from perfgate.report.summary import step_share_text
    t = step_share_text({"step_delta_us": 120.0, "step_time_delta_us": None})
    assert "unchanged" not in t and "elapsed step time not measured" in t and t.startswith("ΣDuration +120")
    assert step_share_text({"step_delta_us": 120.0, "step_time_delta_us": 0.0}).startswith("elapsed step time unchanged")


def test_history_record_prints_the_capture_warnings(tmp_path):
    """history record said nothing of the fingerprint's warnings that baseline save prints (here:
    fewer steps than the schedule profiles)."""
    s5 = tmp_path / "S5"
    assert _run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    for f in [*s5.rglob("kernel_details.csv"), *s5.rglob("step_trace_time.csv")]:
        lines = f.read_text().splitlines(keepends=True)
        last = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[-1]
        f.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != last]))
        _drop_comm_step(f.parent, last)
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    r = _run("history", "record", "--branch", "main", "--commit", "c1", "--db", tmp_path / "h.sqlite", s5)
    assert r.exit_code == 0, r.output
    assert "recorded run 1" in r.output and "warning: rank 0: kernel_details.csv holds 4 step(s)" in r.output
