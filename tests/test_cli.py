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
    assert json.loads((tmp_path / "o2" / "perfgate-result.json").read_text())["status"] == "REGRESSION"


def test_usage_error_exit_2(tmp_path, pair):
    code, out = run(tmp_path, "check", pair[0])  # --baseline missing
    assert code == 2
    code, out = run(tmp_path, "check", "--baseline", "main", tmp_path / "does-not-exist")
    assert code == 2 and "does not exist" in out
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
        assert "baseline save --force" in out
    code, out = run(tmp_path, "baseline", "list", "--baseline-dir", bl)
    assert code == 0 and "main\tUNREADABLE: baseline is not valid JSON" in out
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
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
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
