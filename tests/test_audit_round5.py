"""Defects found by the fifth audit round (2026-12-06, eleventh session): a helper breaking the
installed command with bad input; each test holds the behaviour wanted."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth.writer import SynthSpec, write_capture


def _run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


@pytest.fixture
def synth_cap(tmp_path):
    return write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=3))


def _snapshot(cap):
    return {p.relative_to(cap): p.read_bytes() for p in sorted(cap.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command, option, where", [
    ("fingerprint", "-o", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"),
    ("fingerprint", "-o", "rank0_ascend_pt/profiler_info_0.json"),
    ("fingerprint", "-o", "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/fp.json"),
    ("check", "--json", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"),
    ("check", "--junit", "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"),
    ("check", "--out", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"),
    ("report", "--html", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"),
])
def test_an_output_among_the_capture_files_is_refused_and_nothing_is_removed(synth_cap, tmp_path, command, option,
                                                                             where):
    """``fingerprint -o CAP/rank0/ASCEND_PROFILER_OUTPUT/kernel_details.csv CAP`` removed the
    kernel table (an earlier output is removed before the capture is read), then exited 3 "no
    kernel_details.csv"; ``check --json`` at it wrote the JSON result over the input. Now exit 2
    before anything is removed, naming the option and the file, and the capture is untouched."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    before = _snapshot(synth_cap)
    extra = ["--baseline", "b", "--baseline-dir", bl] if command == "check" else []
    r = _run(command, *extra, option, synth_cap / where, synth_cap)
    assert r.exit_code == 2, r.output
    assert option in r.output and "never writes among a capture's files" in r.output
    assert _snapshot(synth_cap) == before


def test_a_report_folder_beside_the_rank_folders_is_still_allowed(synth_cap, tmp_path):
    """Reports kept with the capture (``--out RUN/perfgate-out``, a fingerprint at the run's top)
    are not among its files: they are written as before."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", synth_cap / "perfgate-out", synth_cap)
    assert r.exit_code == 0, r.output
    assert (synth_cap / "perfgate-out" / "perfgate-result.json").is_file()
    r = _run("fingerprint", "-o", synth_cap / "fp.json", synth_cap)
    assert r.exit_code == 0, r.output
    assert json.loads((synth_cap / "fp.json").read_text())["metrics"]


def test_a_link_to_a_capture_file_is_refused_by_its_target(synth_cap, tmp_path):
    """An output given as a link elsewhere whose target is a capture file: a write replaces the
    target, so it is refused the same way."""
    link = tmp_path / "fp.json"
    link.symlink_to(synth_cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    before = _snapshot(synth_cap)
    r = _run("fingerprint", "-o", link, synth_cap)
    assert r.exit_code == 2, r.output
    assert "kernel_details.csv" in r.output
    assert _snapshot(synth_cap) == before


def _policy_with(tmp_path, old: str, new: str):
    from importlib.resources import files
    text = (files("perfgate") / "policies" / "default.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    p = tmp_path / "policy.yaml"
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def test_require_trace_fails_a_rank_without_its_trace_also_beside_step_trace_time(synth_cap, tmp_path):
    """``self_checks.require_trace: true`` on a rank whose trace_view.json is gone but whose
    step_trace_time.csv is there: the check against the trace (``trace_vs_step_trace``) stayed
    "skipped" and the check passed. The policy asked for the trace: exit 3, naming the key."""
    (synth_cap / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").unlink()
    strict = _policy_with(tmp_path, "require_trace: false", "require_trace: true")
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--policy", strict, "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 3, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert res["verdict"] == "INVALID_CAPTURE"
    failed = [c for c in res["self_checks"] if c["status"] == "fail"]
    assert failed and {c["name"] for c in failed} == {"trace_vs_step_trace"} and {c["rank"] for c in failed} == {1}
    assert all("self_checks.require_trace: true" in c["message"] for c in failed)
    # the default policy: skipped, as before
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o2", synth_cap)
    assert r.exit_code == 0, r.output


def test_a_misspelt_fail_closed_code_is_a_policy_error(synth_cap, tmp_path):
    """``findings.fail_closed: [WARMUP_NOT_STRIPED, ...]`` loaded and ran: the warmup finding then
    silently stopped failing closed. Every other policy key refuses unknown names: exit 2,
    naming the key, the code and the nearest known one."""
    bad = _policy_with(tmp_path, "fail_closed: [WARMUP_NOT_STRIPPED,", "fail_closed: [WARMUP_NOT_STRIPED,")
    r = _run("fingerprint", "--policy", bad, synth_cap)
    assert r.exit_code == 2, r.output
    assert "findings.fail_closed" in r.output and "'WARMUP_NOT_STRIPED'" in r.output
    assert "did you mean 'WARMUP_NOT_STRIPPED'" in r.output


def test_every_emitted_finding_code_is_registered():
    """terms.FINDING_CODES (what fail_closed may list) holds every code the source emits: the
    first argument of each Finding(...) with a literal code, and every UPPER_SNAKE literal of
    the modules that build findings from columns."""
    import ast
    import pathlib
    import re

    import perfgate
    from perfgate import terms
    root = pathlib.Path(perfgate.__file__).parent
    emitted = set()
    for p in root.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Finding":
                a = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "code"), None)
                if isinstance(a, ast.Constant):
                    emitted.add(a.value)
    text = (root / "metrics/steps.py").read_text(encoding="utf-8") + (root / "metrics/fingerprint.py").read_text(
        encoding="utf-8")
    emitted |= set(re.findall(r'"([A-Z]+(?:_[A-Z]+)*_(?:HEAVY|SUSPECTED|SIGNIFICANT|HIDDEN|LOST|UNEXPLAINED))"', text))
    assert emitted and emitted <= terms.FINDING_CODES, emitted - terms.FINDING_CODES
    assert {"DEVICE_TASKS_LOST", "TAIL_GAP_HEAVY", "WARMUP_NOT_STRIPPED"} <= emitted
    docs = (root.parent / "docs/policy.md").read_text(encoding="utf-8")
    assert all(c in docs for c in terms.FINDING_CODES - {"DEVICE_TASKS_LOST", "IDLE_GAP_UNEXPLAINED"})


def test_empty_gate_views_is_a_policy_error(synth_cap, tmp_path):
    """``gate_views: []`` loaded, ``baseline save`` succeeded, and ``check`` then exited 4 "no
    gated metric could be compared ... record a new baseline": a policy that gates nothing. Now
    exit 2 at load, naming gate_views."""
    from importlib.resources import files
    text = (files("perfgate") / "policies" / "default.yaml").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.startswith("gate_views")]
    p = tmp_path / "p.yaml"
    p.write_text("\n".join(lines) + "\ngate_views: []\n", encoding="utf-8")
    r = _run("baseline", "save", "--name", "b", "--baseline-dir", tmp_path / "bl", "--policy", p, synth_cap)
    assert r.exit_code == 2, r.output
    assert "gate_views" in r.output and "is empty" in r.output
    assert not (tmp_path / "bl").exists() or not any((tmp_path / "bl").iterdir())


@pytest.fixture
def history_db(synth_cap, tmp_path):
    db = tmp_path / "h.sqlite"
    r = _run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, synth_cap)
    assert r.exit_code == 0, r.output
    return db


@pytest.mark.parametrize("metric, said", [("kernel.topn{view=p50}", "is a set metric"),
                                          ("nope{view=p50}", "unknown metric 'nope{view=p50}'"),
                                          ("step.time_us{view=rank7}", "no recorded metric")])
def test_the_journal_refuses_a_metric_it_cannot_follow(history_db, metric, said):
    """``history journal --metric 'kernel.topn{view=p50}'`` on a healthy database was an internal
    error (exit 70, ``ufunc 'isnan'``: a set metric's values are NULL); an unknown metric printed
    a table of "—" with exit 0, where ``history query`` / ``trend`` say "no recorded metric"."""
    r = _run("history", "journal", "--branch", "main", "--metric", metric, "--db", history_db)
    assert r.exit_code == 2, r.output
    assert said in r.output
    assert "internal error" not in r.output


def test_a_bogus_key_metric_is_a_policy_error(synth_cap, tmp_path):
    bad = _policy_with(tmp_path, "key_metric: step.time_us{view=p50}", "key_metric: bogus.metric")
    r = _run("fingerprint", "--policy", bad, synth_cap)
    assert r.exit_code == 2, r.output
    assert "history.key_metric" in r.output and "unknown metric 'bogus.metric'" in r.output


@pytest.mark.parametrize("value", ["'abc'", "NULL"])
@pytest.mark.parametrize("command", [["journal", "--branch", "main"], ["report", "--branch", "main"],
                                     ["query", "--metric", "step.time_us{view=p50}"],
                                     ["trend", "--metric", "step.time_us{view=p50}"]])
def test_a_damaged_value_row_is_a_store_error_for_every_history_read(history_db, tmp_path, command, value):
    """A metric_values row whose value is text or NULL (and no set value): ``check --baseline
    history:main`` already said DAMAGED_BASELINE (exit 5); ``history journal`` and ``history
    report`` were internal errors (exit 70). Every read names the run, commit and metric, exit 5."""
    import sqlite3
    con = sqlite3.connect(history_db)
    con.execute(f"update metric_values set value={value} where key = 'step.time_us{{view=p50}}'")
    con.commit()
    con.close()
    extra = ["--out", tmp_path / "rep"] if command[0] == "report" else []
    r = _run("history", *command, *extra, "--db", history_db)
    assert r.exit_code == 5, r.output
    assert "history database is damaged" in r.output and "commit c1" in r.output
    assert "step.time_us{view=p50}" in r.output


@pytest.mark.parametrize("key, value", [("kernel.topn{view=p50}", 5), ("step.time_us{view=p50}", ["a", "b"])])
def test_a_baseline_value_of_the_wrong_kind_is_a_damaged_baseline(synth_cap, tmp_path, key, value):
    """A stored baseline whose ``kernel.topn`` holds a number (or a number metric a list): check
    was an internal error (exit 70, ``'int' object is not iterable``) and wrote no report; a
    string value already gave DAMAGED_BASELINE. Now the same: exit 5, the reports written,
    naming the metric."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    doc = json.loads((bl / "b.json").read_text())
    doc["fingerprint"]["metrics"][key]["value"] = value
    (bl / "b.json").write_text(json.dumps(doc))
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 5, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert res["verdict"] == "DAMAGED_BASELINE"
    assert key in json.dumps(res)


@pytest.mark.parametrize("cell", ["abc", "1e300", "-3", "2.5"])
def test_a_stream_id_that_is_not_a_stream_number_is_a_bad_cell(copy_capture, tmp_path, cell):
    """One kernel_details.csv row's ``Stream ID`` set to ``abc`` (or ``1e300``) was read as a stream
    of its own: the layer count on the compute stream changed and the check failed as a
    REGRESSION ("model structure forward layers 2 -> 0"). Every real export writes integers or
    N/A there: exit 3 naming file, row, column and the cell."""
    import csv
    cap = copy_capture("level1")
    p = sorted(cap.rglob("kernel_details.csv"))[0]
    rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
    i = rows[0].index("Stream ID")
    j = next(n for n, r in enumerate(rows[1:], start=1) if r[i].strip().isdigit())
    rows[j][i] = cell
    with open(p, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert f"row {j}: Stream ID is not a stream number" in r.output and repr(cell) in r.output


@pytest.mark.parametrize("empty", ["''", "'N/A'"])
def test_a_db_task_without_a_name_is_refused_as_the_csv_row_is(ascend, tmp_path, empty):
    """A DB export whose kernel name string is empty: ``check`` / ``fingerprint`` were internal
    errors (exit 70, "'list' argument must have no negative elements" in the family view). The
    text export's empty Name cell is exit 3 "Name is empty": so is this, naming the DB."""
    import shutil
    import sqlite3
    cap = tmp_path / "db1"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", cap)
    db = next(cap.rglob("ascend_pytorch_profiler_0.db"))
    con = sqlite3.connect(db)
    con.execute(f"update STRING_IDS set value={empty} where id=(select name from COMPUTE_TASK_INFO limit 1)")
    con.commit()
    con.close()
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "a task has no name" in r.output and db.name in r.output


def test_a_sweep_after_a_policy_change_recomputes(copy_capture, tmp_path):
    """``sweep`` cached per capture under a key holding only the policy's fingerprint and segment
    rules: run again with ``operators.require_pipe: true`` (or other self-check / findings
    settings) it served the cached "ok" for a capture that policy refuses."""
    import csv
    root = tmp_path / "sw"
    root.mkdir()
    cap = copy_capture("level0")
    cap.rename(root / "L0")
    strict = _policy_with(tmp_path, "require_pipe: false", "require_pipe: true")
    out = tmp_path / "o"

    def status(*policy):
        r = _run("sweep", *policy, "--out", out, root)
        assert r.exit_code == 0, r.output
        rows = list(csv.DictReader(open(out / "sweep.csv", newline="", encoding="utf-8")))
        return [(row["status"], row["cached"]) for row in rows]
    assert status() == [("ok", "False")]
    assert status() == [("ok", "True")]                       # the same policy: served from the cache
    assert status("--policy", strict) == [("failed", "False")]


@pytest.mark.parametrize("opts", [("--junit", "x", "--json", "x", "--markdown", "x"),
                                  ("--json", "o/perfgate-junit.xml"),
                                  ("--html", "o/perfgate-report.md")])
def test_two_reports_on_one_file_are_a_usage_error(synth_cap, tmp_path, opts):
    """``check --junit x --json x --markdown x`` ran, exited 1 and left JSON in the file CI reads
    as JUnit. Now exit 2 naming both options, before anything is written."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    args = [str(tmp_path / a) if not a.startswith("--") else a for a in opts]
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *args, synth_cap)
    assert r.exit_code == 2, r.output
    assert "are one file" in r.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "o").exists()


def test_no_baseline_names_the_folder_searched_and_how_to_point_elsewhere(synth_cap, tmp_path, monkeypatch):
    """Run from another folder than the one holding ./baselines: "no baseline named 'main' in
    baselines" and "record one with: perfgate baseline save" while one was saved, elsewhere. The
    message now names the absolute folder searched and --baseline-dir / PERFGATE_BASELINE_DIR."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = _run("check", "--baseline", "main", "--out", tmp_path / "o", synth_cap)
    assert r.exit_code == 4, r.output
    assert str(elsewhere / "baselines") in r.output
    assert "--baseline-dir" in r.output and "PERFGATE_BASELINE_DIR" in r.output


def test_a_missing_capture_is_named_once(tmp_path):
    r = _run("fingerprint", tmp_path / "leve2")
    assert r.exit_code == 3
    assert r.output.count(str(tmp_path / "leve2")) == 1, r.output


def test_db_tasks_inserted_twice_are_counted_once_as_csv_rows_are(ascend, tmp_path):
    """``insert into TASK select * from TASK`` in both rank DBs: check said REGRESSION (196
    failing metrics, layer count 5 -> 10). The text export's exact duplicate rows are counted
    once with a warning: so are the DB's tasks, and the capture gates unchanged against itself."""
    import shutil
    import sqlite3
    src = ascend / "msinsight/test/data/pytorch/db/level1"
    cap = tmp_path / "db1"
    shutil.copytree(src, cap)
    for db in cap.rglob("ascend_pytorch_profiler_*.db"):
        con = sqlite3.connect(db)
        con.execute("insert into TASK select * from TASK")
        con.commit()
        con.close()
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, src).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cap)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert "exact duplicate task(s) (same start, stream, name, duration) counted once" in json.dumps(res)


def test_a_huge_negative_step_trace_time_is_called_negative(copy_capture, tmp_path):
    """step_trace_time.csv ``Preparing`` -1e10 was refused as "-10,000,000,000.000 us is longer than
    the whole collection window": it is refused still (exit 3), saying it is negative."""
    import csv
    cap = copy_capture("level1")
    p = sorted(cap.rglob("step_trace_time.csv"))[0]
    rows = list(csv.reader(open(p, newline="", encoding="utf-8-sig")))
    rows[1][rows[0].index("Preparing")] = "-10000000000"
    with open(p, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = _run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "Preparing -10,000,000,000.000 us is negative" in r.output and "is longer than" not in r.output


def test_the_commit_says_where_it_came_from(tmp_path, monkeypatch):
    """A baseline saved from a clone of perfgate recorded perfgate's own commit for a capture
    outside any repository, with nothing saying so. The provenance now names its source."""
    import subprocess

    from perfgate.ci_env import gather_provenance
    assert gather_provenance({"GITHUB_SHA": "abc", "GITHUB_REF_NAME": "main"})["commit_source"] == "GITHUB_SHA"
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
                                  "-m", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    p = gather_provenance({}, cwd=repo)
    assert p["commit_source"] == f"git HEAD of {repo}" and len(p["commit"]) == 40
    monkeypatch.chdir(tmp_path)   # not a work tree: no commit, no source
    assert "commit_source" not in gather_provenance({}, cwd=tmp_path)


def _slow_everything(factor: str) -> list:
    fams = ["aclnnAdd_AddAiCore_Add", "aclnnCast_CastAiCore_Cast", "aclnnDropoutGenMaskV2_DSAGenBitMask_DSAGenBitMask",
            "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
            "aclnnInplaceCopy_TensorMoveAiCore_TensorMove", "aclnnMatmul_MatMulV3Common_MatMulV3",
            "aclnnNonzero_NonZeroAiCpu_NonZero", "aclnnRmsNorm_RmsNormAiCore_RmsNorm",
            "aclnnSwiGlu_SwiGluAiCore_SwiGlu", "trans_TransData"]
    return [a for f in fams for a in ("--slowdown", f"{f}={factor}")]


def test_a_baseline_of_several_runs_never_weakens_the_gate(tmp_path):
    """A baseline saved from 3 runs, one candidate whose every kernel runs 2x slower: step time
    6,901 -> 13,557 us was UNSURE (exit 0) — 3 vs 1 runs cannot reach alpha in an exact test —
    while the same candidate against any one of those runs is a REGRESSION. When every pairing
    of a baseline run with a candidate run lies beyond the tolerance, the direction decides;
    an unchanged candidate stays unsure, never a regression."""
    bl = tmp_path / "bl"
    runs = []
    for s in (1, 2, 3):
        runs.append(tmp_path / f"r{s}")
        assert _run("synth", runs[-1], "--seed", s).exit_code == 0
    assert _run("baseline", "save", "--name", "multi", "--baseline-dir", bl, *runs).exit_code == 0
    assert _run("synth", tmp_path / "slow", "--seed", 70, *_slow_everything("2")).exit_code == 0
    r = _run("check", "--baseline", "multi", "--baseline-dir", bl, "--out", tmp_path / "o", tmp_path / "slow")
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    st = next(c for c in res["comparisons"] if c["key"] == "step.time_us{view=rank0}")
    assert st["verdict"] == "regression" and "whichever runs are compared" in st["reason"]
    assert st["stats"]["run_pair_effects"][0] > 0.5
    # an unchanged candidate against the same baseline: no regression (unsure at most)
    assert _run("synth", tmp_path / "same", "--seed", 70).exit_code == 0
    r = _run("check", "--baseline", "multi", "--baseline-dir", bl, "--out", tmp_path / "o2", tmp_path / "same")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "o2/perfgate-result.json").read_text())
    assert not [c for c in res["comparisons"] if c["gated"] and c["verdict"] == "regression"]


def test_json_on_stdout_stays_one_document_in_github_actions(synth_cap, tmp_path):
    """``check --json -`` under GitHub Actions (which always sets GITHUB_STEP_SUMMARY): the line
    "job summary: appended to ..." followed the JSON on stdout ("Extra data" for any reader)."""
    import subprocess
    import sys
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    env = {"PATH": "/usr/bin:/bin", "GITHUB_EVENT_NAME": "push", "GITHUB_STEP_SUMMARY": str(tmp_path / "sum.md"),
           "GITHUB_OUTPUT": str(tmp_path / "out.txt")}
    r = subprocess.run([sys.executable, "-m", "perfgate", "check", "--baseline", "b", "--baseline-dir", str(bl),
                        "--out", str(tmp_path / "o"), "--json", "-", str(synth_cap)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "PASS"
    assert "job summary: appended to" in r.stderr and (tmp_path / "sum.md").read_text()


@pytest.mark.parametrize("commit", ["bad|commit\n## x", "a b", "x" * 201, ""])
def test_a_commit_that_is_no_sha_or_ref_is_refused(synth_cap, tmp_path, commit):
    """``history record --commit $'bad|commit\\n## x'`` was recorded, and ``history trend`` /
    ``report`` printed it into their table rows, splitting them. Exit 2, nothing recorded."""
    db = tmp_path / "h.sqlite"
    r = _run("history", "record", "--branch", "main", "--commit", commit, "--db", db, synth_cap)
    assert r.exit_code == 2, r.output
    assert "not a commit SHA or ref name" in r.output and not db.exists()
    r = _run("baseline", "save", "--name", "b", "--commit", commit, "--baseline-dir", tmp_path / "bl", synth_cap)
    assert r.exit_code == 2 and not (tmp_path / "bl" / "b.json").exists()


def test_an_old_odd_commit_stays_in_its_row():
    from perfgate.report.history import _commit
    assert _commit("bad|commit\n## x") == "bad?commit??" and _commit("0123456789abcdef") == "0123456789ab"


@pytest.mark.parametrize("change", [["--extra-calls", "aclnnAdd_AddAiCore_Add=2"],
                                    ["--slowdown", "aclnnRmsNorm_RmsNormAiCore_RmsNorm=3"]])
def test_exposed_communication_moved_by_compute_is_never_the_regression(tmp_path, change):
    """Twice the Add calls, or RmsNorm ×3: more compute hides more of the same communication, so
    exposed communication falls (or moves between ranks). The compute family is the failing cause;
    exposed communication is at most a part of the step that moved (its own time, in the waterfall),
    never a regression cause, and the waterfall adds up to the step-time change."""
    bl = tmp_path / "bl"
    assert _run("synth", tmp_path / "base").exit_code == 0
    assert _run("baseline", "save", "--name", "main", "--baseline-dir", bl, tmp_path / "base").exit_code == 0
    assert _run("synth", tmp_path / "cand", *change).exit_code == 0
    r = _run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", tmp_path / "cand")
    assert r.exit_code == 1, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    failing = [x for x in res["causes"] if x["fails"]]
    assert failing and failing[0]["kind"] == "kernel family", failing
    assert not [x for x in res["causes"] if x["subject"] == "exposed communication" and x["verdict"] == "regression"]
    wf = res["detail"]["waterfall"]
    assert sum(i["us"] for i in wf["items"]) == pytest.approx(wf["step_delta_us"], abs=1e-6)


NAMES = ["aclnnSwi<Glu>&amp;_x|y`z`_SwiGlu", "**b** [x](http://e) ~~s~~ \\ `", "`lead", "plain_name_Add"]


@pytest.mark.parametrize("name", NAMES)
def test_names_render_as_written_in_the_markdown(name):
    """Kernel names with Markdown / HTML characters: in code spans ``&lt;`` showed literally (no
    entity is decoded in a code span), ``\\|`` kept its backslash outside tables, a backtick became
    a different character, and ``**b**`` rendered bold in plain text. Rendered with markdown-it
    (CommonMark + GFM tables), every form shows the name exactly."""
    import re as _re

    from markdown_it import MarkdownIt

    from perfgate.report.mdtext import cell, code
    md = MarkdownIt("commonmark").enable("table")

    def text_of(html):
        import html as h
        return h.unescape(_re.sub(r"<[^>]+>", "", html)).strip()
    table = md.render(f"| a | b |\n|---|---|\n| {code(name, table=True)} | {cell(name)} |\n")
    cells = _re.findall(r"<td>(.*?)</td>", table, _re.S)
    assert [text_of(c) for c in cells] == [name, name], cells
    item = md.render(f"- {code(name)}: {cell(name)}\n")
    assert text_of(item) == f"{name}: {name}", item
    assert "<strong>" not in item and "<a " not in item and "<b>" not in table


@pytest.mark.parametrize("k", ["inf", "1e308", "1e20", "nan", "0"])
def test_calibrate_refuses_a_k_that_gates_nothing(tmp_path, k):
    """``calibrate --k=inf`` (or 1e308) was exit 70 (OverflowError in the rounding); ``--k=1e20``
    wrote share tolerances of 3.5e19 pp, a policy that lets any change through. Exit 2."""
    caps = []
    for s in (1, 2, 3):
        caps.append(tmp_path / f"s{s}")
        assert _run("synth", caps[-1], "--seed", s).exit_code == 0
    r = _run("calibrate", *caps, "--out", tmp_path / "c.yaml", f"--k={k}")
    assert r.exit_code == 2, r.output
    assert "k must be a finite number in (0, 100]" in r.output and not (tmp_path / "c.yaml").exists()


def test_no_trace_beside_trace_always_is_a_usage_error(synth_cap, tmp_path):
    """``--trace always --no-trace`` on a capture without trace_view.json passed (exit 0): the
    flag won and the requirement was dropped in silence."""
    for p in synth_cap.rglob("trace_view.json"):
        p.unlink()
    for order in (["--trace", "always", "--no-trace"], ["--no-trace", "--trace", "always"]):
        r = _run("fingerprint", synth_cap, *order, "-o", tmp_path / "fp.json")
        assert r.exit_code == 2 and "contradict" in r.output, r.output
    assert _run("fingerprint", synth_cap, "--trace", "always", "-o", tmp_path / "fp.json").exit_code == 3


def test_a_sweep_that_cannot_write_its_xlsx_leaves_no_fresh_csv(copy_capture, tmp_path):
    """``sweep --out o`` with ``o/sweep.xlsx`` a folder: exit 5, but a new sweep.csv stayed and
    looked current. One rollup or none."""
    pytest.importorskip("openpyxl")
    root = tmp_path / "sw"
    root.mkdir()
    copy_capture("level1").rename(root / "L1")
    out = tmp_path / "o"
    (out / "sweep.xlsx").mkdir(parents=True)
    r = _run("sweep", "--out", out, root)
    assert r.exit_code == 5, r.output
    assert not (out / "sweep.csv").exists() and not list(out.glob(".sweep.*.tmp*"))


@pytest.mark.slow
def test_a_scheduler_without_workers_is_refused_in_bounded_time(synth_cap):
    """``--scheduler`` pointing at a dask scheduler with no worker hung forever (a CI gate until
    the job's timeout). Now exit 2 after the connection timeout (10 s). The scheduler runs in a
    process of its own, as in CI: one in this test process would change its garbage collector
    settings for the tests after it."""
    pytest.importorskip("distributed")
    import socket
    import subprocess
    import sys
    import time
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                              "--port", str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # until the scheduler listens
            with socket.socket() as sk:
                if sk.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "perfgate", "fingerprint", str(synth_cap), "--scheduler",
                            f"tcp://127.0.0.1:{port}"], capture_output=True, text=True, timeout=90)
        assert r.returncode == 2, r.stderr
        assert "has no worker" in r.stderr and time.perf_counter() - t < 60
    finally:
        sched.terminate()
        sched.wait(15)


def test_report_html_dash_is_no_file_named_dash(synth_cap, tmp_path, monkeypatch):
    """``report --html -`` wrote a file literally named ``-``, while ``-`` means stdout for
    ``fingerprint -o`` and ``check --json``: exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    r = _run("report", synth_cap, "--html", "-")
    assert r.exit_code == 2 and "--html needs a file path" in r.output
    assert not (tmp_path / "-").exists()
