"""``baseline save`` of commit A after a baseline saved at its descendant B (two pushes' jobs that
finished out of order) is refused with exit 2 naming both commits, unless --force; git history
decides, in a real repository made in tmp_path."""
import json
import subprocess

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture

PUSH = {"GITHUB_EVENT_NAME": "push", "GITHUB_SHA": None, "GITHUB_REF_NAME": None, "GITHUB_HEAD_REF": None}


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, message):
    (repo / "train.py").write_text(f"# {message}\n")
    git(repo, "add", "train.py")
    git(repo, "-c", "user.name=ci", "-c", "user.email=ci@example.com", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    return write_capture(tmp_path_factory.mktemp("older-commit") / "cap", SynthSpec(seed=1))


@pytest.fixture
def repo(tmp_path):
    """main: A <- B; a branch side: A <- C."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    a = commit(r, "A")
    b = commit(r, "B")
    git(r, "checkout", "-q", "-b", "side", a)
    c = commit(r, "C")
    git(r, "checkout", "-q", "main")
    return r, a, b, c


def save(cwd, store, capture, sha, *extra, monkeypatch):
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(capture), "--baseline-dir", str(store),
                                     "--commit", sha, *extra], env=PUSH)


def stored_commit(store):
    return json.loads((store / "main.json").read_text())["fingerprint"]["provenance"]["commit"]


def test_an_ancestor_does_not_replace_its_descendant_s_baseline(repo, capture, tmp_path, monkeypatch):
    r, a, b, c = repo
    store = tmp_path / "baselines"
    assert save(r, store, capture, b, monkeypatch=monkeypatch).exit_code == 0
    late = save(r, store, capture, a, monkeypatch=monkeypatch)
    assert late.exit_code == 2, late.output
    assert a in late.output and b in late.output and "--force" in late.output, late.output
    assert "descendant" in late.output and stored_commit(store) == b
    forced = save(r, store, capture, a, "--force", monkeypatch=monkeypatch)
    assert forced.exit_code == 0 and stored_commit(store) == a, forced.output


def test_a_descendant_a_sibling_and_the_same_commit_replace_it(repo, capture, tmp_path, monkeypatch):
    r, a, b, c = repo
    store = tmp_path / "baselines"
    for sha in (a, b, b, c):   # in order; the same commit again; a sibling (a rewritten main)
        res = save(r, store, capture, sha, monkeypatch=monkeypatch)
        assert res.exit_code == 0 and stored_commit(store) == sha, res.output
        assert "cannot be told" not in res.output
    res = save(r, store, capture, "main", monkeypatch=monkeypatch)   # a ref name: main = B, C's sibling
    assert res.exit_code == 0 and stored_commit(store) == "main", res.output


def test_a_clone_made_before_the_newer_push_fetches_the_stored_commit(repo, capture, tmp_path, monkeypatch):
    """The older push's job cloned before B was pushed: B is fetched from origin, then refused."""
    r, a, b, c = repo
    clone = tmp_path / "clone-at-a"
    git(tmp_path, "clone", "-q", "--branch", "side", str(r), str(clone))
    git(clone, "reset", "-q", "--hard", a)
    git(clone, "branch", "-q", "-D", "main") if "main" in git(clone, "branch") else None
    git(clone, "update-ref", "-d", "refs/remotes/origin/main")
    git(clone, "reflog", "expire", "--expire=now", "--all")
    git(clone, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "cat-file", "-e", f"{b}^{{commit}}"], cwd=clone).returncode != 0
    store = tmp_path / "baselines"
    assert save(r, store, capture, b, monkeypatch=monkeypatch).exit_code == 0
    late = save(clone, store, capture, a, monkeypatch=monkeypatch)
    assert late.exit_code == 2 and a in late.output and b in late.output, late.output


def test_a_shallow_clone_cannot_tell_so_it_saves_and_says_so(repo, capture, tmp_path, monkeypatch):
    r, a, b, c = repo
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "side", f"file://{r}", str(shallow))
    store = tmp_path / "baselines"
    assert save(r, store, capture, b, monkeypatch=monkeypatch).exit_code == 0
    res = save(shallow, store, capture, c, monkeypatch=monkeypatch)
    assert res.exit_code == 0 and stored_commit(store) == c, res.output
    assert "cannot be told" in res.output and "shallow" in res.output and b in res.output, res.output
    warnings = json.loads((store / "main.json").read_text())["fingerprint"]["warnings"]
    assert any("fetch-depth: 0" in w for w in warnings)
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    res = save(outside, store, capture, a, monkeypatch=monkeypatch)
    assert res.exit_code == 0 and "not a git repository" in res.output, res.output
