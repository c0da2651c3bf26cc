"""history record: refuses what baseline save refuses (a partial capture, a blank branch, a commit
that is no SHA or ref), prints the capture's warnings, and records where its commit came from."""
from __future__ import annotations

import shutil

import pytest

from perfgate import errors
from _cli import run, run_process
from _edits import drop_comm_step


def test_history_record_refuses_a_partial_capture(tmp_path):
    """A capture whose rank 0 lost a step (step counts {0: 4, 1: 5}): baseline save refused it
    (exit 3) but history record stored it, and history:main's median then took it in. Now both
    refuse it, and the database is unchanged."""
    s5 = tmp_path / "S5"
    assert run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    cut = tmp_path / "cut"
    shutil.copytree(s5, cut)
    out0 = cut / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    (out0 / "trace_view.json").unlink(missing_ok=True)
    (cut / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink(missing_ok=True)
    for f in ("kernel_details.csv", "step_trace_time.csv"):
        lines = (out0 / f).read_text().splitlines(keepends=True)
        last = lines[-1].split(",")[0]
        (out0 / f).write_text("".join(x for x in lines if x.split(",")[0] != last))
    drop_comm_step(out0, last.strip('"'))
    db = tmp_path / "h.sqlite"
    assert run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, s5).exit_code == 0
    before = db.read_bytes()
    r = run("history", "record", "--branch", "main", "--commit", "c1", "--db", db, cut)
    assert r.exit_code == 3 and "different step counts" in r.output and "cannot be recorded in the history" in r.output
    assert db.read_bytes() == before
    r = run("baseline", "save", "--name", "c", "--baseline-dir", tmp_path / "bl", cut)
    assert r.exit_code == 3 and "cannot become a baseline" in r.output


def test_history_record_prints_the_capture_warnings(tmp_path):
    """history record said nothing of the fingerprint's warnings that baseline save prints (here:
    fewer steps than the schedule profiles)."""
    s5 = tmp_path / "S5"
    assert run("synth", "--steps", "5", "--seed", "1", s5).exit_code == 0
    for f in [*s5.rglob("kernel_details.csv"), *s5.rglob("step_trace_time.csv")]:
        lines = f.read_text().splitlines(keepends=True)
        last = sorted({x.split(",")[0].strip('"') for x in lines[1:]}, key=int)[-1]
        f.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0].strip('"') != last]))
        drop_comm_step(f.parent, last)
    for p in s5.rglob("trace_view.json"):
        p.unlink()
    r = run("history", "record", "--branch", "main", "--commit", "c1", "--db", tmp_path / "h.sqlite", s5)
    assert r.exit_code == 0, r.output
    assert "recorded run 1" in r.output and "warning: rank 0: kernel_details.csv holds 4 step(s)" in r.output


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


@pytest.mark.parametrize("commit", ["bad|commit\n## x", "a b", "x" * 201, ""])
def test_a_commit_that_is_no_sha_or_ref_is_refused(synth_cap, tmp_path, commit):
    """``history record --commit $'bad|commit\\n## x'`` was recorded, and ``history trend`` /
    ``report`` printed it into their table rows, splitting them. Exit 2, nothing recorded."""
    db = tmp_path / "h.sqlite"
    r = run("history", "record", "--branch", "main", "--commit", commit, "--db", db, synth_cap)
    assert r.exit_code == 2, r.output
    assert "not a commit SHA or ref name" in r.output and not db.exists()
    r = run("baseline", "save", "--name", "b", "--commit", commit, "--baseline-dir", tmp_path / "bl", synth_cap)
    assert r.exit_code == 2 and not (tmp_path / "bl" / "b.json").exists()


def test_an_old_odd_commit_stays_in_its_row():
    from perfgate.report.history import _commit
    assert _commit("bad|commit\n## x") == "bad?commit??" and _commit("0123456789abcdef") == "0123456789ab"


# 7. a blank branch is a usage error
@pytest.mark.parametrize("branch", ["", " ", " main"])
def test_history_record_refuses_blank_branch(tmp_path, pair, branch):
    cap, store, policy = pair
    db = tmp_path / "x.sqlite"
    r = run_process("history", "record", str(cap), "--branch", branch, "--db", str(db))
    assert r.returncode == 2, r.stderr
    assert "branch" in r.stderr and not db.exists()


def test_record_history_library_refuses_blank_branch(tmp_path, pair):
    from perfgate.app.gate import HistoryEntry, record_history
    cap, store, policy = pair
    with pytest.raises(errors.UsageError):
        record_history(cap, HistoryEntry(" "), policy=policy, history_path=tmp_path / "y.sqlite", env={})
    assert not (tmp_path / "y.sqlite").exists()
