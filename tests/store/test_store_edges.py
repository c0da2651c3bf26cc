"""Store and CLI edges: a baseline folder under a regular file is a damaged
store (exit 5) everywhere, `baseline save` refuses an unwritable store before fingerprinting,
--branch refuses control characters, the negative-duration refusal carries a hint."""
import os
import subprocess
import sys

import pytest


def _run(*args, env=None, cwd=None):
    e = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-m", "perfgate", *args], capture_output=True, text=True, env=e, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def cap(tmp_path):
    c = tmp_path / "cap"
    subprocess.run([sys.executable, "-m", "perfgate", "synth", str(c)], check=True, capture_output=True)
    return c


def test_store_under_a_regular_file_is_damaged_not_absent(tmp_path, cap):
    f = tmp_path / "regfile"
    f.write_text("x")
    code, out = _run("check", "--baseline", "main", str(cap), "--no-baseline-ok", "--out", str(tmp_path / "o"),
                     env={"PERFGATE_BASELINE_DIR": str(f / "sub")})
    assert code == 5, out   # was: 0 NO_BASELINE forgiven by --no-baseline-ok
    code, out = _run("baseline", "list", env={"PERFGATE_BASELINE_DIR": str(f)})
    assert code == 5 and "not a folder" in out, out   # was: "no baselines", exit 0


# each spelling and each place runs by default (four commands, each a Python start-up); the other
# two pairs are slow
@pytest.mark.parametrize("spelling, where", [
    ("--baseline-dir", "file"), ("PERFGATE_BASELINE_DIR", "under_a_file"),
    pytest.param("PERFGATE_BASELINE_DIR", "file", marks=pytest.mark.slow),
    pytest.param("--baseline-dir", "under_a_file", marks=pytest.mark.slow)])
def test_a_store_that_is_a_regular_file_is_exit_5_however_it_is_given(tmp_path, cap, spelling, where):
    """--baseline-dir FILE was click's "Invalid value for '--baseline-dir'" (exit 2, no reports)
    while PERFGATE_BASELINE_DIR=FILE was DAMAGED_BASELINE (exit 5, reports written): one store
    problem, one behaviour for check, baseline save and baseline list."""
    f = tmp_path / "regfile"
    f.write_text("x")
    d = str(f if where == "file" else f / "sub")

    def run(*args):
        if spelling == "--baseline-dir":
            return _run(*args, "--baseline-dir", d, env={"PERFGATE_BASELINE_DIR": ""})
        return _run(*args, env={"PERFGATE_BASELINE_DIR": d})

    out = tmp_path / "o"
    code, text = run("check", "--baseline", "main", str(cap), "--out", str(out))
    assert code == 5 and "DAMAGED_BASELINE" in text and "not a folder" in text, text
    assert "Invalid value" not in text
    assert '"DAMAGED_BASELINE"' in (out / "perfgate-result.json").read_text()
    code, text = run("baseline", "save", "--name", "main", str(cap))
    assert code == 5 and "cannot write the baseline store" in text and "regfile" in text, text
    code, text = run("baseline", "list")
    assert code == 5 and "not a folder" in text, text
    code, text = run("baseline", "show", "main")
    assert code == 5 and "not a folder" in text, text
    assert f.read_text() == "x"


def test_baseline_save_refuses_an_unwritable_store_before_the_fingerprint(tmp_path):
    f = tmp_path / "regfile"
    f.write_text("x")
    # a capture that does not exist: were it read first, this would be exit 3
    code, out = _run("baseline", "save", "--name", "main", str(tmp_path / "no-capture"), "--baseline-dir",
                     str(f / "sub"))
    assert code == 5 and "cannot write the baseline store" in out, out


@pytest.mark.parametrize("branch", ["evil\nmain", "a\tb", "x\x7f"])
def test_branch_with_a_control_character_is_a_usage_error(tmp_path, cap, branch):
    code, out = _run("baseline", "save", "--name", "main", str(cap), "--baseline-dir", str(tmp_path / "b"),
                     "--branch", branch)
    assert code == 2 and "control character" in out, out
    assert not (tmp_path / "b").exists()


def test_negative_duration_error_has_a_hint(copy_capture):
    import csv
    cap = copy_capture("level1")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(kd, newline="", encoding="utf-8-sig") as f:
        head, *rows = list(csv.reader(f))
    d = head.index("Duration(us)")
    rows[3][d], rows[9][d] = "-2.5", "-1"
    with open(kd, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([head, *rows])
    code, out = _run("fingerprint", str(cap), "--trace", "never")
    assert code == 3 and "row 4" in out and "1 more row(s) are negative" in out and "re-export" in out, out


def test_a_lone_surrogate_in_profiler_info_is_written_escaped(copy_capture, tmp_path):
    """profiler_info with a "\\udc80" escape: fingerprint, baseline save and check write their
    JSON (\\u escapes) instead of exit 70 / "not serialisable"."""
    import json
    cap = copy_capture("level1")
    for info in cap.glob("rank*_ascend_pt/profiler_info_*.json"):
        text = info.read_text()
        info.write_text(text.replace('"ACL_AICORE_PIPE_UTILIZATION"', '"ACL_AICORE_PIPE_UTILIZATION\\udc80"'))
    code, out = _run("fingerprint", str(cap), "--trace", "never", "-o", str(tmp_path / "fp.json"))
    assert code == 0, out
    json.loads((tmp_path / "fp.json").read_bytes())
    code, out = _run("baseline", "save", "--name", "main", str(cap), "--baseline-dir", str(tmp_path / "b"),
                     "--trace", "never")
    assert code == 0, out
    code, out = _run("check", "--baseline", "main", str(cap), "--baseline-dir", str(tmp_path / "b"),
                     "--trace", "never", "--out", str(tmp_path / "o"))
    assert code == 0, out
    assert json.loads((tmp_path / "o" / "perfgate-result.json").read_bytes())["verdict"] == "PASS"


def test_a_capture_folder_name_that_is_not_utf8_is_an_invalid_capture(text_captures, tmp_path):
    """A byte that is not UTF-8 in a folder name: exit 3 naming the folder (escaped), with the
    check's reports written, instead of exit 70 from Arrow's path encoding."""
    import json
    import shutil
    base = os.fsencode(str(tmp_path)) + b"/cap\xff"
    shutil.copytree(text_captures / "level1", os.fsdecode(base))
    r = subprocess.run([sys.executable.encode(), b"-m", b"perfgate", b"fingerprint", base, b"--trace", b"never"],
                       capture_output=True)
    assert r.returncode == 3 and b"not valid UTF-8" in r.stderr and b"cap\\xff" in r.stderr, r.stderr
    out = tmp_path / "o"
    r = subprocess.run([sys.executable.encode(), b"-m", b"perfgate", b"check", b"--baseline", b"main", base,
                        b"--baseline-dir", os.fsencode(str(tmp_path / "b")), b"--out", os.fsencode(str(out))],
                       capture_output=True)
    assert r.returncode == 3, r.stderr
    assert json.loads((out / "perfgate-result.json").read_bytes())["verdict"] == "INVALID_CAPTURE"


def test_a_lone_surrogate_in_communication_json_is_an_invalid_capture(copy_capture):
    """An op name holding a "\\ud800" escape: exit 3 naming the file and the op, not exit 70."""
    cap = copy_capture("level1")
    p = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    s = p.read_text()
    i = s.index('"hcom_')
    p.write_text(s[:i + 1] + "\\ud800" + s[i + 1:])
    code, out = _run("fingerprint", str(cap), "--trace", "never")
    assert code == 3 and "communication.json" in out and "lone surrogate" in out and "\\ud800hcom_" in out, out


def test_baseline_list_warns_when_a_file_holds_another_baseline_name(tmp_path, cap):
    """A baseline file copied or renamed by hand (baselines/release.json holding name 'main') is
    listed under its file name, with a warning naming both names (was listed silently)."""
    import shutil
    bl = tmp_path / "bl"
    code, out = _run("baseline", "save", "--name", "main", str(cap), "--baseline-dir", str(bl))
    assert code == 0, out
    shutil.copy(bl / "main.json", bl / "release.json")
    code, out = _run("baseline", "list", "--baseline-dir", str(bl))
    assert code == 0, out
    lines = out.splitlines()
    assert any(x.startswith("main\tsaved") for x in lines) and any(x.startswith("release\tsaved") for x in lines), out
    warned = [x for x in lines if "warning" in x]
    assert len(warned) == 1 and "release.json" in warned[0] and "'main'" in warned[0] and "'release'" in warned[0], out
    code, out = _run("baseline", "show", "release", "--baseline-dir", str(bl))
    assert code == 0 and "warning" in out and "release.json holds the baseline named 'main'" in out, out
    code, out = _run("baseline", "show", "main", "--baseline-dir", str(bl))
    assert code == 0 and "warning" not in out, out
    code, out = _run("check", "--baseline", "release", str(cap), "--baseline-dir", str(bl), "--out",
                     str(tmp_path / "o"), "-v")
    assert code == 0 and "release.json holds the baseline named 'main'" in out, out
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    assert "release.json holds the baseline named" in md


@pytest.mark.parametrize("name", ["-x", ".hidden", "_a"])
def test_a_name_starting_with_a_sign_says_it_must_start_with_a_letter_or_digit(tmp_path, name):
    """'-x' and '.hidden' were refused by a message listing '.' and '-' as allowed."""
    from perfgate.errors import UsageError
    from perfgate.store.baselines import BaselineStore
    with pytest.raises(UsageError, match="starting with a letter or digit") as e:
        BaselineStore(tmp_path).path_for(name)
    assert e.value.exit_code == 2
