"""Defects found by the sixth audit round (2026-12-06, twelfth session): helpers breaking the
installed command with damaged captures and stores; each test holds the behaviour wanted."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main

OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"GITHUB_EVENT_NAME": "push"})


def _edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _fingerprint(cap, tmp_path, *extra):
    return _run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never", *extra)


@pytest.mark.parametrize("old, new, says", [
    # "Communication Bandwidth Info" of another type: a non-empty list crashed (exit 70), 0 / false / ""
    # read as "no links"; a link that is not an object was dropped without a word
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": [1], "x": {',
     "Communication Bandwidth Info is [1], not an object"),
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": false, "x": {',
     "Communication Bandwidth Info is false, not an object"),
    ('"RDMA": {', '"RDMA": "x", "y": {', 'Communication Bandwidth Info.RDMA is "x", not an object'),
    ('"RDMA": {', '"RDMA": null, "y": {', "Communication Bandwidth Info.RDMA is null, not an object"),
    # an integer beyond a float crashed in the reference reader (OverflowError, exit 70)
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 400 + ', "z": ',
     "Elapse Time(ms) is 100000... (401 digits), not a finite non-negative number"),
    # an integer of more digits than Python converts (ValueError, exit 70): invalid JSON at its byte
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 5000 + ', "z": ',
     "a number has more digits than Python reads"),
    # nested ~1,000 deep in a field never read: msgspec's RecursionError crashed (exit 70)
    ('"Wait Time Ratio": ', '"Wait Time Ratio": ' + "[" * 980 + "]" * 980 + ', "zz": ', "nesting too deep"),
    # \\d took Unicode digits: "step٥٠" was read as step 50
    ('"step50"', '"step\u0665\u0660"', "unexpected top-level key 'step\u0665\u0660'"),
])
def test_damaged_communication_json_is_exit_3_naming_what(copy_capture, tmp_path, old, new, says):
    cap = copy_capture("level1")
    _edit(cap / OUT / "communication.json", old, new)
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "communication.json" in r.output and says in r.output, r.output
    assert not (tmp_path / "fp.json").exists()


def test_a_number_too_long_for_python_in_profiler_info_names_its_byte(copy_capture, tmp_path):
    cap = copy_capture("level1")
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    info.write_text('{"zz": 1' + "0" * 5000 + ", " + info.read_text().lstrip()[1:])
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json byte 7: invalid JSON: a number has more digits than Python reads" in r.output


def test_a_number_too_long_for_python_in_a_stored_baseline_is_a_damaged_store(text_captures, tmp_path):
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, text_captures / "level1").exit_code == 0
    doc = bl / "b.json"
    text = doc.read_text()
    doc.write_text("{" + '"zz": 1' + "0" * 5000 + "," + text[text.index("{") + 1:])
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "out", text_captures / "level1")
    assert r.exit_code == 5, r.output
    r = _run("baseline", "list", "--baseline-dir", bl)
    assert r.exit_code == 5 and "more digits than Python reads" in r.output, r.output


def test_a_deeply_nested_field_of_a_timeline_event_is_read_past(copy_capture, tmp_path):
    """A kept Overlap Analysis event whose args hold a list nested 980 deep: the fast scan's
    per-event parse raised RecursionError (exit 70); the event is now read by the exact reader,
    and the metrics are those of the untouched capture."""
    cap = copy_capture("level1")
    base = copy_capture("level1", "untouched")
    trace = cap / OUT / "trace_view.json"
    text = trace.read_text()
    at = text.index("{", text.index('"args"', text.index('"name": "Computing"')))
    trace.write_text(text[:at + 1] + '"deep": ' + "[" * 980 + "]" * 980 + ", " + text[at + 1:])
    assert _run("fingerprint", cap, "-o", tmp_path / "a.json").exit_code == 0
    assert _run("fingerprint", base, "-o", tmp_path / "b.json").exit_code == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["metrics"] == b["metrics"]


@pytest.mark.parametrize("table, says", [
    ("step_trace_time.csv", "Step is not an integer step id"),
    ("kernel_details.csv", "Step Id is not an integer"),
])
def test_unicode_digits_are_not_a_step_id(copy_capture, tmp_path, table, says):
    cap = copy_capture("level1")
    path = cap / OUT / table
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[1].split(",")
    assert cells[0].strip('"') == "50"
    cells[0] = "\u0665\u0660"
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert table in r.output and says in r.output and "\u0665\u0660" in r.output, r.output


@pytest.mark.parametrize("field, value, says", [
    ("collectionTimeEnd", '"{v}"', 'end_info.collectionTimeEnd is "'),
    ("collectionTimeEnd", "1e400", "end_info.collectionTimeEnd is Infinity"),
    ("collectionTimeEnd", "true", "end_info.collectionTimeEnd is true"),
    ("MonotonicTimeEnd", '"x"', 'end_info.MonotonicTimeEnd is "x"'),
    ("MonotonicTimeEnd", "1", "end_info.MonotonicTimeEnd (1) is not after start_info.start_monotonic"),
])
def test_a_damaged_collection_window_is_exit_3_not_a_silent_skip(copy_capture, tmp_path, field, value, says):
    """A collectionTimeEnd written as a string switched the collection-window check off without a
    word, and a foreign communication.json then passed (exit 0). A window field that is present
    but not a non-negative integer (or a monotonic end before its start) is now exit 3 naming it;
    an absent field still means "no recorded window"."""
    cap = copy_capture("level1")
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    doc = json.loads(info.read_text())
    old = doc["end_info"][field]
    text = info.read_text()
    _edit(info, f'"{field}": {old}', f'"{field}": ' + value.format(v=old))
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "profiler_info_0.json" in r.output and says in r.output, r.output
    info.write_text(text)
    del doc["end_info"][field]
    info.write_text(json.dumps(doc))
    assert _fingerprint(cap, tmp_path).exit_code == 0


def _comm_doc(cap, rank=0):
    path = cap / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    return path, json.loads(path.read_text())


def _dup_key_text(doc):
    """The document as JSON text with its second op's key repeated as its first's (last one wins)."""
    text = json.dumps(doc)
    names = list(doc["step50"]["collective"])
    return text.replace(json.dumps(names[1]), json.dumps(names[0]), 1)


@pytest.mark.parametrize("mutate, says", [
    (lambda d: _dup_key_text(d), "is in rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json 0 time(s) but among"),
    (lambda d: {**d, "step050": d["step50"]}, "2 time(s) but among"),
    (lambda d: {"step50": {**d["step50"], "weird": d["step50"]["collective"]}}, "2 time(s) but among"),
    (lambda d: json.dumps(d).replace('"Total Op Info"', '"Total Op Info "'), "op Total Op Info  is in"),
    (lambda d: json.dumps(d)[:-1] + ', "step50": {"collective": {}, "p2p": {}}}', "0 time(s) but among"),
])
def test_communication_json_is_checked_against_the_kernel_table(copy_capture, tmp_path, mutate, says):
    """communication.json was checked only against itself (Elapse = Transit + Wait + Idle), so an
    op lost under a duplicated key, a step under two spellings, an unknown kind, a renamed Total
    Op Info or a step emptied by a repeated key changed the comm metrics and passed (exit 0), and
    went into the baseline. comm_ops_vs_kernels pairs its ops with the kernel table's
    communication rows step by step: exit 3 naming the op and both files."""
    cap = copy_capture("level1")
    path, doc = _comm_doc(cap)
    out = mutate(doc)
    path.write_text(out if isinstance(out, str) else json.dumps(out))
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "self-check comm_ops_vs_kernels failed on rank 0 step 50" in r.output and says in r.output, r.output


def test_another_ranks_communication_json_is_exit_3(copy_capture, tmp_path):
    cap = copy_capture("level1")
    a, _ = _comm_doc(cap, 0)
    b, _ = _comm_doc(cap, 1)
    ta, tb = a.read_text(), b.read_text()
    a.write_text(tb)
    b.write_text(ta)
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "comm_ops_vs_kernels failed on rank 0 step 50: Σ Elapse of 4 op(s)" in r.output
    assert "(difference -5616.591 us, tolerance 0.014 us)" in r.output


def test_ops_named_otherwise_are_skipped_not_failed(copy_capture, tmp_path):
    """A kernel table that names its communication tasks otherwise than communication.json (no
    name in common) cannot be paired: the check is skipped for the rank, the capture passes."""
    cap = copy_capture("level1")
    path, doc = _comm_doc(cap)
    path.write_text(json.dumps(doc).replace('"hcom_', '"hccl_'))
    assert _fingerprint(cap, tmp_path).exit_code == 0
    fp = json.loads((tmp_path / "fp.json").read_text())
    mine = [c for c in fp["self_checks"] if c["name"] == "comm_ops_vs_kernels"]
    assert [(c["rank"], c["status"]) for c in mine] == [(0, "skipped"), (1, "pass")]
    assert "name ops differently and cannot be paired" in mine[0]["message"]


def test_a_spurious_second_cut_does_not_hide_a_real_shift():
    """A fresh-user trial: 12 runs, a +48 % step at run 7 on a very quiet p50 series. PELT cut it
    at 6 and again at 9; the real cut was then tested on runs 7-9 only (6 against 3 runs: the rank
    test cannot reach alpha 0.01) and dropped together with the spurious one, so `history trend`
    reported no change point on the p50 view while the rank0 view had one. A failed cut is now
    dropped first and the others are tested again over the merged segments."""
    import pandas as pd
    from perfgate.history.changepoints import change_points
    y = [0.416, 0.418, 0.420, 0.420, 0.417, 0.419, 0.619, 0.622, 0.620, 0.624, 0.624, 0.624]
    series = pd.DataFrame({"run_id": range(1, 13), "commit": [f"c{i}" for i in range(12)], "value": y})
    cps = change_points(series, "share.family{view=p50}")
    assert [(c.index, c.run_id, c.n_before, c.n_after) for c in cps] == [(6, 7, 6, 6)]
    assert cps[0].p_value < 0.01 and cps[0].rel_change > 0.4
    flat = pd.DataFrame({"run_id": range(1, 13), "commit": [f"c{i}" for i in range(12)],
                         "value": [0.416, 0.418, 0.420, 0.420, 0.417, 0.419] * 2})
    assert change_points(flat, "k") == []


def test_history_report_without_matplotlib_is_refused_even_with_nothing_to_report(tmp_path, monkeypatch):
    """`history report` without the html extra exited 0 while no metric had changed and exit 2
    (after its work, leaving an empty folder) on the first night one had: a nightly job passed
    for weeks, then lost its report on the first regression. It is now refused up front, every
    time, as docs/install.md says."""
    import sys
    from perfgate.synth.writer import SynthSpec, write_capture
    cap = write_capture(tmp_path / "cap", SynthSpec(steps=3))
    db = tmp_path / "h.sqlite"
    assert _run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, cap).exit_code == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = _run("history", "report", "--db", db, "--out", tmp_path / "hr")
    assert r.exit_code == 2, r.output
    assert "perfgate history report (its plots) needs matplotlib" in r.output and "pip install matplotlib (the 'html' extra" in r.output
    assert not (tmp_path / "hr" / "report.md").exists()


def test_verbose_prints_every_line_in_full(tmp_path):
    """`check -v` promised everything "in full" but still cut the cause lines and the unsure line
    at 160 characters (the part saying how many runs are needed was lost)."""
    from perfgate.synth import write_demo_pair
    base, cand = write_demo_pair(tmp_path / "caps")
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", "--baseline-dir", bl, base).exit_code == 0
    short = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o1", cand)
    full = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o2", "-v", cand)
    assert short.exit_code == full.exit_code == 1
    assert any(line.endswith("…") for line in short.output.splitlines())
    assert not any(line.endswith("…") for line in full.output.splitlines()), full.output
    assert max(map(len, full.output.splitlines())) > 160


@pytest.mark.parametrize("old, new, says", [
    ("hcom_allReduce__586_0_1@", "hcom_allReduce\\ud800_0_1@",
     "step50.collective.hcom_allReduce\\ud800_0_1@17522688603477080586: a name holds an escaped lone surrogate"),
    ("@17522688603477080586", "@1752268860347708\\ud8000586",
     "step50.collective.hcom_allReduce__586_0_1@1752268860347708\\ud8000586: a name holds"),
])
def test_a_lone_surrogate_is_named_where_it_is(copy_capture, tmp_path, old, new, says):
    """The message read "50.collective.hcom_allReduce\\ud800_0_1": "50" for step50 and without the
    @group, and a surrogate in the group named an op with nothing wrong in it."""
    cap = copy_capture("level1")
    _edit(cap / OUT / "communication.json", old, new)
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3 and says in r.output, r.output


@pytest.mark.parametrize("value, says", [
    ("1e308", "Elapse Time(ms) beyond 1.8e305 ms (its us value overflows a float) is longer than the whole"),
    ("1e300", "Elapse Time(ms) 1e+300 ms is longer than the whole collection window"),
])
def test_a_huge_time_is_quoted_readably(copy_capture, tmp_path, value, says):
    """1e308 ms was quoted "inf ms" after a numpy overflow warning on stderr; 1e300 as a
    300-digit number with thousands separators."""
    cap = copy_capture("level1")
    path = cap / OUT / "communication.json"
    text = path.read_text()
    at = text.index('"Elapse Time(ms)": ') + len('"Elapse Time(ms)": ')
    path.write_text(text[:at] + value + text[text.index(",", at):])
    r = _fingerprint(cap, tmp_path)
    assert r.exit_code == 3 and says in r.output, r.output
    assert "RuntimeWarning" not in r.output


# ---- the store / history / CLI helper (A: data loss and false passes, B: exit 70) ----

@pytest.fixture
def demo(tmp_path):
    from perfgate.synth import write_demo_pair
    base, cand = write_demo_pair(tmp_path / "caps")
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", "--baseline-dir", bl, base).exit_code == 0
    return base, cand, bl


def test_a_report_never_replaces_the_baseline_it_compares_against(demo, tmp_path):
    """``check --markdown STORE/main.json --no-baseline-ok`` removed the baseline before reading
    it, then passed as NO_BASELINE (exit 0) and left Markdown where the baseline was."""
    _, cand, bl = demo
    before = (bl / "main.json").read_bytes()
    r = _run("check", "--baseline", "main", "--baseline-dir", bl, cand, "--no-baseline-ok",
             "--markdown", bl / "main.json", "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "--markdown" in r.output and "inside the --baseline-dir folder" in r.output
    assert (bl / "main.json").read_bytes() == before


@pytest.mark.parametrize("command", ["check", "report", "fingerprint"])
def test_a_report_never_replaces_the_policy_or_the_history(demo, tmp_path, command):
    _, cand, bl = demo
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\n")
    db = tmp_path / "h.sqlite"
    assert _run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, cand).exit_code == 0
    kept = {p: p.read_bytes() for p in (pol, db)}
    for target, option in ((pol, "--policy"), (db, "--db")):
        if command == "fingerprint" and option == "--db":
            continue
        args = {"check": ["check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o",
                          "--json", target],
                "report": ["report", "--html", target],
                "fingerprint": ["fingerprint", "-o", target]}[command]
        r = _run(*args, "--policy", pol, *(["--db", db] if command != "fingerprint" else []), cand)
        assert r.exit_code == 2, r.output
        assert f"is the {option} {target}, which this command reads" in r.output, r.output
    assert {p: p.read_bytes() for p in kept} == kept


def test_the_baseline_store_and_the_history_never_write_into_a_capture(copy_capture, tmp_path):
    cap = copy_capture("level1")
    out = cap / OUT
    before = (out / "trace_view.json").read_bytes()
    r = _run("baseline", "save", "--name", "trace_view", "--baseline-dir", out, cap)
    assert r.exit_code == 2 and "never writes among a capture's files" in r.output, r.output
    assert (out / "trace_view.json").read_bytes() == before
    r = _run("history", "record", "--branch", "main", "--db", out / "h.db", cap)
    assert r.exit_code == 2 and "never writes among a capture's files" in r.output, r.output
    assert not (out / "h.db").exists()


@pytest.mark.parametrize("argv", [
    ["history", "record", "--branch", "ma\udcffin"], ["history", "record", "--branch", "main", "--note", "bad\udcff"],
    ["baseline", "save", "--name", "x", "--branch", "ma\udcffin"],
])
def test_arguments_that_are_not_utf8_are_refused_not_stored(demo, tmp_path, argv):
    """``baseline save --branch $'ma\\xffin'`` stored a lone surrogate: every later check of that
    baseline was exit 70; ``history record --note $'bad\\xff'`` was exit 70."""
    _, cand, bl = demo
    extra = ["--db", tmp_path / "h.sqlite"] if argv[0] == "history" else ["--baseline-dir", bl]
    r = _run(*argv, *extra, cand)
    assert r.exit_code == 2 and "not UTF-8 text" in r.output, r.output
    assert not (bl / "x.json").exists() and not (tmp_path / "h.sqlite").exists()


@pytest.mark.parametrize("edit, says", [
    ("d['provenance']['steps'] = 5", "provenance.steps is a number, not an object"),
    ("d['config']['ranks'] = '0,1'", 'config.ranks is "0,1", not an array of rank numbers'),
    ("d['config']['coverage'] = [1]", "config.coverage is an array, not an object"),
    ("d['metrics'][next(iter(d['metrics']))]['context'] = None", "is not an object with an object context"),
    ("d['detail']['operators'] = 'x'", "detail.operators is a string, not an object"),
    ("d['detail']['segments'] = 5", "detail.segments is a number, not an array"),
    ("d['detail']['step_time'] = 5", "detail.step_time is a number, not an array"),
])
def test_a_hand_edited_baseline_is_damaged_not_an_internal_error(demo, tmp_path, edit, says):
    _, cand, bl = demo
    doc = json.loads((bl / "main.json").read_text())
    d = doc["fingerprint"]
    exec(edit, {"d": d})
    (bl / "main.json").write_text(json.dumps(doc))
    r = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", cand)
    assert r.exit_code == 5 and says in r.output, r.output


@pytest.mark.parametrize("text, says", [
    ("self_checks:\n  abs_us_per_row: 99999999999999999999999999\n", "self_checks.abs_us_per_row"),
    ("history:\n  min_size: 99999999999999999999999999\n", "history.min_size"),
    ("overrides:\n  - {metric: kernel.time_us, labels: {family: [a, b]}, gated: true}\n",
     "overrides[0].labels.family': must be one label value (a string or number), got a list"),
    ("overrides:\n  - {metric: kernel.time_us, labels: {family: null}, gated: true}\n",
     "overrides[0].labels.family': must be one label value"),
])
def test_policy_values_that_cannot_work_are_exit_2(demo, tmp_path, text, says):
    _, cand, bl = demo
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\n" + text)
    r = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", "--policy", pol, cand)
    assert r.exit_code == 2 and says in r.output, r.output


@pytest.mark.parametrize("where", ["import", "call"])
def test_a_flops_spec_calling_sys_exit_is_a_policy_error(tmp_path, where):
    """A FLOPs spec that called sys.exit(0) ended `check` with exit 0, no output and no reports."""
    from perfgate.errors import PolicyError
    from perfgate.policy.opspec import load_flops_function
    spec = tmp_path / "flops.py"
    spec.write_text("import sys\nsys.exit(0)\n" if where == "import" else
                    "import sys\ndef flops(row):\n    sys.exit(0)\n")
    if where == "import":
        with pytest.raises(PolicyError, match="SystemExit"):
            load_flops_function(spec)
    else:
        import types

        import pandas as pd
        from perfgate.metrics.mfu import _flops_per_row
        rows = pd.DataFrame({"name": ["MatMul_1"], "op_type": ["MatMul"], "core_type": ["AI_CORE"],
                             "input_shapes": ["2,2;2,2"], "input_dtypes": ["FLOAT16"]})
        with pytest.raises(PolicyError, match="flops\\(row\\) failed for kernel 'MatMul_1'.*SystemExit"):
            _flops_per_row(rows, types.SimpleNamespace(python=spec))


def test_a_recorded_candidate_is_not_part_of_its_own_rolling_baseline(tmp_path):
    """A regressing candidate checked against history:main failed (exit 1); recorded, then
    checked again, it joined the median it was compared with and passed (exit 0)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    for i in range(1, 6):
        cap = write_capture(tmp_path / f"s{i}", SynthSpec(steps=5, seed=i))
        assert _run("history", "record", "--branch", "main", "--commit", f"p{i}", "--db", db, cap).exit_code == 0
    slow = {"aclnnMatmul_MatMulV3Common_MatMulV3": 1.3}
    for i in (6, 7):
        cap = write_capture(tmp_path / f"c{i}", SynthSpec(steps=5, seed=10 + i, slowdown=slow))
        assert _run("history", "record", "--branch", "main", "--commit", f"p{i}", "--db", db, cap).exit_code == 0
    cand = write_capture(tmp_path / "c8", SynthSpec(steps=5, seed=18, slowdown=slow))
    args = ("check", "--baseline", "history:main", "--db", db, "--out", tmp_path / "o", "-v", cand)
    first = _run(*args)
    assert first.exit_code == 1, first.output
    assert _run("history", "record", "--branch", "main", "--commit", "p8", "--db", db, cand).exit_code == 0
    again = _run(*args)
    assert again.exit_code == 1, again.output
    assert "left out: the candidate itself, already recorded" in again.output


def test_a_damaged_history_database_costs_only_the_sparklines(demo, tmp_path):
    """With a stored baseline the history database only draws the HTML page's trend sparklines; a
    damaged one made `check --html` exit 5 and write no JUnit, Markdown or JSON at all."""
    _, cand, bl = demo
    db = tmp_path / "bad.sqlite"
    db.write_text("not a database")
    out = tmp_path / "o"
    r = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", out, "--html", tmp_path / "r.html",
             "--db", db, cand)
    assert r.exit_code == 1, r.output
    assert {p.name for p in out.iterdir()} == {"perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"}
    assert "trend sparklines not drawn: the history database" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("content", ["null", '{"status": "ok"}', '{"status": "ok", "ranks": "x"}', "[]"])
def test_a_damaged_sweep_cache_entry_is_recomputed_not_trusted(text_captures, tmp_path, content):
    """`{"status": "ok"}` in every cache file made a sweep report all 14 captures ok (5 fail);
    `null` was exit 70."""
    root = tmp_path / "caps"
    root.mkdir()
    import shutil
    shutil.copytree(text_captures / "level1", root / "good")
    (root / "bad" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)   # nothing to read
    out = tmp_path / "sw"
    first = _run("sweep", root, "--out", out, "--workers", "1")
    assert first.exit_code == 0, first.output
    caches = list((out / ".cache").glob("*.json")) if (out / ".cache").is_dir() else []
    assert len(caches) == 2, first.output
    for c in caches:
        c.write_text(content)
    again = _run("sweep", root, "--out", out, "--workers", "1")
    assert again.exit_code == 0, again.output
    assert again.output == first.output, again.output   # recomputed: the same summary, one capture failed
    rows = (out / "sweep.csv").read_text()
    assert "failed" in rows and ",ok," in rows


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_baseline_name_that_is_no_file_is_a_damaged_store(demo, tmp_path, kind):
    """A folder `dir.json` or a dangling `dangling.json` link was listed UNREADABLE with exit 0,
    and `check` said "no baseline named 'dir' (stored: ..., dir, ...)", which
    --no-baseline-ok then passed."""
    _, cand, bl = demo
    path = bl / "odd.json"
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "missing.json")
    r = _run("baseline", "list", "--baseline-dir", bl)
    assert r.exit_code == 5 and "odd\tUNREADABLE: baseline file is a" in r.output, r.output
    r = _run("check", "--baseline", "odd", "--baseline-dir", bl, "--out", tmp_path / "o", "--no-baseline-ok", cand)
    assert r.exit_code == 5 and "DAMAGED_BASELINE" in r.output, r.output


def test_a_journal_note_with_a_bar_or_a_newline_stays_in_its_cell(tmp_path):
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    for i, note in enumerate(["base", "BLOCK | 128->64\nsecond line"]):
        cap = write_capture(tmp_path / f"c{i}", SynthSpec(steps=3, seed=i))
        r = _run("history", "record", "--branch", "main", "--commit", f"c{i}", "--note", note, "--db", db, cap)
        assert r.exit_code == 0, r.output
    r = _run("history", "journal", "--branch", "main", "--db", db)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "BLOCK" in line)
    assert "BLOCK \\| 128->64 second line" in row
    assert row.count(" | ") == r.output.splitlines()[0].count(" | ")   # as many columns as the header


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_history_runs_shows_a_note_that_is_not_utf8(tmp_path, fmt):
    """A note stored as bytes that are not UTF-8 (by another tool) made `history runs --format
    json` exit 70; its bad bytes are now shown escaped in every format."""
    import sqlite3
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "c", SynthSpec(steps=3))
    assert _run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cap).exit_code == 0
    con = sqlite3.connect(db)
    con.execute("update runs set note = x'ff41'")
    con.commit()
    con.close()
    r = _run("history", "runs", "--db", db, "--format", fmt)
    assert r.exit_code == 0, r.output
    assert "xffA" in r.output, r.output


def test_a_sweep_over_a_folder_name_that_is_not_utf8_writes_its_rollup(text_captures, tmp_path):
    """A capture folder `cap\\xe9` beside a good one: the rollup stopped at its name (exit 70)."""
    import os
    import shutil
    root = tmp_path / "caps"
    root.mkdir()
    shutil.copytree(text_captures / "level1", root / "good")
    shutil.copytree(text_captures / "level1", os.fsdecode(os.fsencode(str(root)) + b"/cap\xe9"))
    r = _run("sweep", root, "--out", tmp_path / "sw", "--workers", "1")
    assert r.exit_code == 0, r.output
    rows = (tmp_path / "sw" / "sweep.csv").read_text(encoding="utf-8")
    assert "cap\\xe9," in rows and "good,ok," in rows


def test_another_applications_sqlite_file_is_not_adopted_as_the_history(tmp_path):
    """`history record --db OTHER.sqlite` added perfgate's tables to any SQLite file (a
    profiler's .db, an application's database); reads told the user to "open it once for
    writing to migrate". Both are now exit 5 naming it, and the file is left as it was."""
    import sqlite3
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("create table foo(x)")
    con.commit()
    con.close()
    before = db.read_bytes()
    cap = write_capture(tmp_path / "c", SynthSpec(steps=3))
    r = _run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cap)
    assert r.exit_code == 5 and "not a perfgate history database: it holds other tables (foo)" in r.output, r.output
    r = _run("history", "runs", "--db", db)
    assert r.exit_code == 5 and "not a perfgate history database" in r.output, r.output
    assert db.read_bytes() == before
