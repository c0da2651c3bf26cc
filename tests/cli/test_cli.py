"""The CLI end to end, one test per exit code, on synthetic captures from the project's writer."""
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


@pytest.fixture
def pair(tmp_path):
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    same = write_capture(tmp_path / "same", SynthSpec(seed=2))
    worse = write_capture(tmp_path / "worse", SynthSpec(seed=3, extra_calls={"aclnnAdd_AddAiCore_Add": 2}))
    return base, same, worse


def run(tmp_path, *args, env=None):
    r = CliRunner().invoke(main, list(map(str, args)), env=env or {}, catch_exceptions=False)
    return r.exit_code, r.output


def test_pass_and_regression_exit_codes(tmp_path, pair):
    base, same, worse = pair
    bl = tmp_path / "bl"
    code, out = run(tmp_path, "baseline", "save", "--name", "main", base, "--baseline-dir", bl)
    assert code == 0 and "saved baseline 'main'" in out
    code, out = run(tmp_path, "check", "--baseline", "main", same, "--baseline-dir", bl, "--out", tmp_path / "o1")
    assert code == 0 and "PASS" in out
    code, out = run(tmp_path, "check", "--baseline", "main", worse, "--baseline-dir", bl, "--out", tmp_path / "o2")
    assert code == 1
    for f in ("perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"):
        assert (tmp_path / "o2" / f).is_file()
    # the default synthetic capture runs its kernels in random order, so its "layers" are random
    # windows; here two happen to share a class and the model-structure cause folds the call-count
    # symptom, so the Add family is named in the report's table rather than in the cause line
    md = (tmp_path / "o2" / "perfgate-report.md").read_text()
    assert "calls per step of kernel family aclnnAdd_AddAiCore_Add | 12 -&gt; 24 |" in md
    assert json.loads((tmp_path / "o2" / "perfgate-result.json").read_text())["verdict"] == "REGRESSION"


def test_usage_error_exit_2(tmp_path, pair):
    code, out = run(tmp_path, "check", pair[0])  # --baseline missing
    assert code == 2
    bad = tmp_path / "p.yaml"
    bad.write_text("metrics:\n  step.time_us: {direction: up, tolerance: {rel: 1}}\n")
    code, out = run(tmp_path, "check", "--baseline", "main", pair[0], "--policy", bad)
    assert code == 2 and "metrics.step.time_us.direction" in out


def test_invalid_capture_exit_3_writes_nothing(tmp_path, pair):
    base = pair[0]
    kd = base / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    kd.write_text(kd.read_text().splitlines()[0] + "\n")
    bl = tmp_path / "bl"
    code, out = run(tmp_path, "baseline", "save", "--name", "main", base, "--baseline-dir", bl)
    assert code == 3 and "kernel_details.csv" in out and "no data rows" in out
    assert not bl.exists() or not list(bl.iterdir())
    code, out = run(tmp_path, "check", "--baseline", "main", base, "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 3 and "INVALID_CAPTURE" in out
    assert "<error" in (tmp_path / "o" / "perfgate-junit.xml").read_text()


def test_no_baseline_exit_4_and_opt_out(tmp_path, pair):
    bl = tmp_path / "empty"
    code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 4 and "NO_BASELINE" in out and "perfgate baseline save" in out
    assert "<skipped" in (tmp_path / "o" / "perfgate-junit.xml").read_text()
    code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl, "--out",
                    tmp_path / "o", "--no-baseline-ok")
    assert code == 0 and "NO_BASELINE" in out


def test_corrupt_baseline_is_a_store_error_even_with_no_baseline_ok(tmp_path, pair):
    """A damaged baseline file is exit 5 (store error), never NO_BASELINE: --no-baseline-ok must
    not pass a check over it. `baseline list` shows it UNREADABLE; `baseline save` replaces it."""
    bl = tmp_path / "bl"
    bl.mkdir()
    (bl / "main.json").write_text("{not json")
    for extra in ([], ["--no-baseline-ok"]):
        code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl, "--out",
                        tmp_path / "o", *extra)
        assert code == 5 and "not valid JSON" in out and "main.json" in out and "NO_BASELINE" not in out, out
        assert "perfgate baseline save --name main CAPTURE" in out
    code, out = run(tmp_path, "baseline", "list", "--baseline-dir", bl)
    assert code == 5 and "main\tUNREADABLE: baseline is not valid JSON" in out and "1 damaged baseline file(s): main" in out
    code, out = run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)
    assert code == 0 and "saved baseline 'main'" in out
    code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 0 and "PASS" in out


def test_store_error_exit_5_path_is_a_file(tmp_path, pair):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the baseline folder should be")
    code, out = run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", blocker / "sub")
    assert code == 5 and "store error" in out


def test_pull_request_runs_never_write_g05(tmp_path, pair):
    bl = tmp_path / "bl"
    code, out = run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl,
                    env={"GITHUB_EVENT_NAME": "pull_request"})
    assert code == 2 and "pull-request runs never write baselines" in out and not bl.exists()


def test_baseline_records_provenance(tmp_path, pair):
    bl = tmp_path / "bl"
    run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl,
        env={"GITHUB_SHA": "abc123", "GITHUB_REF_NAME": "main", "RUNNER_NAME": "npu-runner-1"})
    doc = json.loads((bl / "main.json").read_text())
    prov = doc["fingerprint"]["provenance"]
    assert prov["commit"] == "abc123" and prov["branch"] == "main" and prov["runner"] == "npu-runner-1"
    assert prov["ranks"] == [0, 1] and prov["steps"]["0"] == ["10", "11", "12"]
    assert doc["fingerprint"]["config"]["profiler_level"] == "Level1" and doc["fingerprint"]["schema"] == 1
    (bl / "broken.json").write_text("{")
    code, out = run(tmp_path, "baseline", "list", "--baseline-dir", bl)
    lines = out.strip().splitlines()
    assert lines[0].startswith("broken\tUNREADABLE") and lines[1].startswith("main\tsaved")
    assert "ranks [0, 1]" in lines[1] and "commit abc123" in lines[1] and "branch main" in lines[1]


def test_bad_baseline_name(tmp_path, pair):
    code, out = run(tmp_path, "baseline", "save", "--name", "../evil", pair[0], "--baseline-dir", tmp_path)
    assert code == 2 and "invalid baseline name" in out


def test_demo_command_shows_a_regression(tmp_path):
    code, out = run(tmp_path, "demo", "--out", tmp_path / "d")
    assert code == 1 and "REGRESSION" in out and "aclnnCast_CastAiCore_Cast" in out


def test_console_script_runs(tmp_path, pair):
    r = subprocess.run([sys.executable, "-m", "perfgate.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and "perfgate" in r.stdout


def test_fingerprint_command(tmp_path, pair):
    code, out = run(tmp_path, "fingerprint", pair[0])
    doc = json.loads(out)
    assert code == 0 and doc["metrics"]["step.count{view=rank0}"]["value"] == 3.0


def test_readme_verdict_sample_is_what_the_demo_prints(tmp_path, monkeypatch):
    """README's "Reading a verdict" shows how `perfgate demo` ends, lines cut at the right (" …"):
    every sample line must be the start of the demo's own line, in order, through the report paths."""
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"`perfgate demo` ends like this[^\n]*\n\n((?:    [^\n]*\n)+)", readme)
    assert block, "README lost its demo sample"
    sample = [ln[4:].removesuffix(" …") for ln in block.group(1).splitlines()]
    monkeypatch.chdir(tmp_path)
    code, out = run(tmp_path, "demo")
    assert code == 1
    tail = out.rstrip("\n").splitlines()[-len(sample):]
    assert len(tail) == len(sample)
    for want, got in zip(sample, tail):
        assert got.startswith(want), f"README sample line {want!r} is not how the demo prints {got!r}"


@pytest.mark.parametrize("damage,needle", [
    (lambda d: d["fingerprint"]["metrics"][next(iter(d["fingerprint"]["metrics"]))].update(value=float("nan")),
     "not a finite number"),
    (lambda d: [m.update(value=float("inf")) for k, m in d["fingerprint"]["metrics"].items() if k.startswith("step.")],
     "not a finite number"),
    (lambda d: d["fingerprint"].pop("metrics"), "it has no metrics"),
    (lambda d: d.update(fingerprint={}), "holds no fingerprint"),
    (lambda d: d.update(fingerprint=[1]), "holds no fingerprint"),
])
def test_damaged_baseline_content_is_exit_5_never_a_verdict(tmp_path, pair, damage, needle):
    """Values no perfgate writes (NaN / Infinity, which are not JSON; no metrics; no fingerprint):
    a damaged store, exit 5, not a PASS over infinite tolerances, a REGRESSION of "new" metrics
    or an internal error."""
    bl = tmp_path / "bl"
    code, _ = run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)
    assert code == 0
    doc = json.loads((bl / "main.json").read_text())
    damage(doc)
    (bl / "main.json").write_text(json.dumps(doc))
    for extra in ([], ["--no-baseline-ok"]):
        code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl,
                        "--out", tmp_path / "o", *extra)
        assert code == 5 and needle in out and "main.json" in out, out


@pytest.mark.parametrize("kind", ["missing", "file", "missing_second_run"])
def test_missing_capture_path_is_an_invalid_capture_with_reports(tmp_path, pair, kind):
    """The profiling step failed: the capture folder does not exist (or is a file). As for an
    empty folder: INVALID_CAPTURE, exit 3, the reports written (JUnit <error> naming the path);
    baseline save and fingerprint exit 3 and write nothing."""
    bl = tmp_path / "bl"
    assert run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)[0] == 0
    bad = tmp_path / "does-not-exist"
    if kind == "file":
        bad = tmp_path / "a-file.csv"
        bad.write_text("Name,Duration(us)\n")
    caps = [pair[1], bad] if kind == "missing_second_run" else [bad]
    for out_dir, extra in ((tmp_path / "o", []), (tmp_path / "o_ok", ["--no-baseline-ok"])):
        code, out = run(tmp_path, "check", "--baseline", "main", *caps, "--baseline-dir", bl, "--out", out_dir, *extra)
        assert code == 3 and "INVALID_CAPTURE (exit 3)" in out and str(bad) in out, out
        res = json.loads((out_dir / "perfgate-result.json").read_text())
        assert res["verdict"] == "INVALID_CAPTURE" and res["exit_code"] == 3 and res["error"]["path"] == str(bad)
        junit = (out_dir / "perfgate-junit.xml").read_text()
        assert "<error" in junit and str(bad) in junit
        assert str(bad) in (out_dir / "perfgate-report.md").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = run(tmp_path, "check", "--baseline", "main", empty, "--baseline-dir", bl, "--out", tmp_path / "oe")
    assert code == 3 and (tmp_path / "oe" / "perfgate-junit.xml").is_file()  # the behaviour it now matches
    code, out = run(tmp_path, "baseline", "save", "--name", "other", *caps, "--baseline-dir", bl)
    assert code == 3 and str(bad) in out and not (bl / "other.json").exists()
    code, out = run(tmp_path, "fingerprint", bad, "--output", tmp_path / "fp.json")
    assert code == 3 and str(bad) in out and not (tmp_path / "fp.json").exists()


def test_another_fingerprint_schema_is_incompatible_not_missing(tmp_path, pair):
    """A baseline of another fingerprint schema exists but cannot judge: INCOMPATIBLE_BASELINE,
    exit 4 also under --no-baseline-ok (only a missing baseline is forgiven), the reports are
    written and say to re-record it; a missing baseline stays NO_BASELINE (exit 4, or 0 with
    --no-baseline-ok)."""
    bl = tmp_path / "bl"
    run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)
    doc = json.loads((bl / "main.json").read_text())
    for schema in (0, 2, "x"):
        doc["fingerprint"]["schema"] = schema
        (bl / "main.json").write_text(json.dumps(doc))
        for extra in ([], ["--no-baseline-ok"]):
            out_dir = tmp_path / f"o{schema}{len(extra)}"
            code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl,
                            "--out", out_dir, *extra)
            assert code == 4 and "INCOMPATIBLE_BASELINE (exit 4)" in out, out
            assert "re-record it with this perfgate version" in out and "main.json" in out
            res = json.loads((out_dir / "perfgate-result.json").read_text())
            assert (res["verdict"], res["exit_code"], res["error"]["kind"]) == (
                "INCOMPATIBLE_BASELINE", 4, "incompatible_baseline")
            assert "re-record it" in (out_dir / "perfgate-report.md").read_text()
            assert (out_dir / "perfgate-junit.xml").is_file()
    code, out = run(tmp_path, "baseline", "list", "--baseline-dir", bl)
    assert code == 0 and "UNREADABLE" in out  # listed, not a damaged store
    for extra, want in (([], 4), (["--no-baseline-ok"], 0)):  # missing: unchanged
        code, out = run(tmp_path, "check", "--baseline", "nothere", pair[1], "--baseline-dir", bl,
                        "--out", tmp_path / "om", *extra)
        res = json.loads((tmp_path / "om" / "perfgate-result.json").read_text())
        assert code == want and res["verdict"] == "NO_BASELINE" and f"NO_BASELINE (exit {want})" in out, out
    code, out = run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)
    assert code == 0, out  # re-recording replaces it
    code, out = run(tmp_path, "check", "--baseline", "main", pair[1], "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 0, out


def test_damaged_history_database_is_a_store_error(tmp_path, pair):
    """A history database cut in half, or bytes that are not SQLite: exit 5 naming the file,
    never an internal error (70) or NO_BASELINE; a missing one stays NO_BASELINE (4)."""
    db = tmp_path / "h.sqlite"
    for i, cap in enumerate(pair):
        code, out = run(tmp_path, "history", "record", cap, "--branch", "main", "--commit", f"c{i}", "--db", db)
        assert code == 0, out
    data = db.read_bytes()
    for name, body in (("cut.sqlite", data[: len(data) // 2]), ("junk.sqlite", b"not a database" * 100)):
        bad = tmp_path / name
        bad.write_bytes(body)
        code, out = run(tmp_path, "check", "--baseline", "history:main", pair[1], "--db", bad, "--out", tmp_path / "o")
        assert code == 5 and name in out and "internal error" not in out, out
    code, out = run(tmp_path, "check", "--baseline", "history:main", pair[1], "--db", tmp_path / "none.sqlite",
                    "--out", tmp_path / "o")
    assert code == 4 and "no history database" in out


def test_debug_traceback_keeps_the_internal_error_exit_code(tmp_path, monkeypatch):
    """PERFGATE_DEBUG=1 adds the traceback; the exit code stays 70 (1 would read as REGRESSION)."""
    import perfgate.app.gate as gate

    def boom(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(gate, "check_and_report", boom)
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1, ranks=1, steps=1))
    for env, tb in (({}, False), ({"PERFGATE_DEBUG": "1"}, True), ({"PERFGATE_DEBUG": "0"}, False)):
        r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--out", str(tmp_path / "o")], env=env)
        assert r.exit_code == 70 and "internal error: RuntimeError: boom" in r.output, (env, r.output)
        assert ("Traceback" in r.output) is tb, env


@pytest.mark.parametrize("opt,dest", [("--out", "afile/sub"), ("--junit", "afile/x.xml"),
                                      ("--markdown", "afile/r.md"), ("--json", "afile/r.json")])
def test_unwritable_report_destination_is_refused_before_any_work(tmp_path, pair, monkeypatch, opt, dest):
    """A report path under a regular file (or a folder where a file is wanted): exit 2 naming the
    option and the blocking path, before the capture is read (no verdict lost after the work)."""
    import perfgate.app.gate as gate
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file where a folder should be")
    (tmp_path / "adir").mkdir()
    monkeypatch.setattr(gate, "check", lambda *a, **k: pytest.fail("the check ran before the refusal"))
    code, out = run(tmp_path, "check", "--baseline", "main", pair[1], opt, dest)
    assert code == 5 and f"{opt} {dest}" in out, out
    assert "afile is a file, not a folder" in out, out


def test_unwritable_reason_names_what_blocks(tmp_path):
    from perfgate.store.atomic import unwritable_reason
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    assert unwritable_reason(tmp_path / "f" / "a" / "b.xml") == f"{tmp_path / 'f'} is a file, not a folder"
    assert unwritable_reason(tmp_path / "d", folder=False) == f"{tmp_path / 'd'} is a folder, not a file"
    assert unwritable_reason(tmp_path / "f", folder=True) == f"{tmp_path / 'f'} is a file, not a folder"
    assert unwritable_reason(tmp_path / "new" / "deeper" / "r.json") is None
    assert unwritable_reason(tmp_path / "d", folder=True) is None


def test_verbose_pass_says_no_gated_change(tmp_path, pair):
    bl = tmp_path / "bl"
    run(tmp_path, "baseline", "save", "--name", "main", pair[0], "--baseline-dir", bl)
    code, out = run(tmp_path, "check", "--baseline", "main", pair[0], "--baseline-dir", bl, "--out", tmp_path / "o", "-v")
    assert code == 0 and "  every gated change: none" in out, out


def test_fingerprint_and_report_outputs_under_a_file_are_refused_before_work(tmp_path, pair):
    """`fingerprint --output` and `report --html` under a regular file: exit 2 naming the option
    before the capture is read (was exit 5 "File exists" after the work), as `check` does."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for args, option in ((("fingerprint", "--output", blocker / "fp.json"), "--output"),
                         (("report", "--html", blocker / "r.html"), "--html")):
        code, out = run(tmp_path, *args, pair[0])
        assert code == 5 and f"{option} {blocker / 'x'}"[:-1] in out and "is a file, not a folder" in out, out
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "base", "same", "worse"]


def test_demo_prints_commands_that_can_be_pasted(tmp_path):
    """The demo echoes the two commands it ran. They read ``perfgate check --baseline main
    CAND``, which, pasted, gave NO_BASELINE (exit 4): the demo's baseline folder and report folder
    were left out. Each echoed command, run in a shell from the same
    folder (a path with a space), does what the demo did."""
    import shlex
    import shutil
    work = tmp_path / "my runs"
    work.mkdir()
    exe = shutil.which("perfgate")
    if exe is None:
        pytest.skip("the perfgate command is not on PATH")
    demo = subprocess.run([exe, "demo", "--out", "demo out"], cwd=work, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 1, demo.stderr
    cmds = [ln[2:] for ln in demo.stdout.splitlines() if ln.startswith("$ perfgate ")]
    assert len(cmds) == 2 and "--baseline-dir" in cmds[0] and "--out" in cmds[1]
    shutil.rmtree(work / "demo out" / "report")
    save = subprocess.run(shlex.split(cmds[0]), cwd=work, capture_output=True, text=True, timeout=600)
    assert save.returncode == 0 and "saved baseline 'main'" in save.stdout, save.stdout + save.stderr
    chk = subprocess.run(shlex.split(cmds[1]), cwd=work, capture_output=True, text=True, timeout=600)
    assert chk.returncode == 1 and chk.stdout.splitlines()[0] == demo.stdout.splitlines()[4], chk.stdout
    assert (work / "demo out" / "report" / "perfgate-result.json").is_file()
