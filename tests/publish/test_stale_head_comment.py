"""A late run for an older pull-request head never edits the sticky comment: the comment keeps
the current head's REGRESSION, and the late run's job summary says why it left it. Real HTTP
against tests/github_fake.py."""
import json
import os

import pytest
from click.testing import CliRunner

from github_fake import FakeGitHub
from perfgate.cli import main
from perfgate.publish.github import ActionsContext, publish_report
from perfgate.report.markdown import marker
from perfgate.synth import SynthSpec, write_capture

REPO, PR = "acme/llm-train", 42
TOKEN = "ghs_writeTOKEN0123456789abcdef"
OLD, NEW = "a1" * 20, "b2" * 20   # the pull request's earlier head, and its head now


@pytest.fixture
def server():
    srv = FakeGitHub(tokens={TOKEN: "write"}).start()
    srv.add_pr(REPO, PR, head_sha=NEW)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("stale-head")
    base = write_capture(d / "base", SynthSpec(seed=1))
    worse = write_capture(d / "worse", SynthSpec(seed=3, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.4}))
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(base), "--baseline-dir",
                                  str(d / "baselines")], env={"GITHUB_EVENT_NAME": "push"})
    assert r.exit_code == 0, r.output
    return d, base, worse


def _gate(capture, baselines, head, tmp_path, server, run):
    """``perfgate check --comment`` as the action runs it, for a pull_request event whose head is ``head``."""
    event = tmp_path / f"event-{run}.json"
    event.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": head, "repo": {"full_name": REPO}},
                                                  "base": {"sha": "d" * 40, "repo": {"full_name": REPO}}}}))
    summary = tmp_path / f"summary-{run}.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
           "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": server.api_url, "GITHUB_TOKEN": TOKEN,
           "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": None, "GITHUB_JOB": "gate"}
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(capture), "--baseline-dir", str(baselines),
                                  "--out", str(tmp_path / f"out-{run}"), "--comment", "--comment-key", "main@gate"],
                           env=env)
    return r, summary.read_text() if summary.exists() else ""


def test_a_late_run_for_an_older_head_leaves_the_comment(server, captures, tmp_path):
    d, base, worse = captures
    r, _ = _gate(worse, d / "baselines", NEW, tmp_path, server, "new")   # the current head regressed
    assert r.exit_code == 1 and "comment created" in r.output, r.output
    (comment,) = server.comments[(REPO, PR)]
    assert "**REGRESSION**" in comment["body"]
    r, summary = _gate(base, d / "baselines", OLD, tmp_path, server, "late")   # the older head's run ends later
    assert r.exit_code == 0 and "PASS" in r.output, r.output   # its own verdict stands
    assert "comment updated" not in r.output and "comment created" not in r.output
    assert [q["method"] for q in server.log].count("PATCH") == 0
    assert [q["method"] for q in server.log].count("POST") == 1
    assert server.comments[(REPO, PR)] == [comment] and "**REGRESSION**" in comment["body"]
    why = f"this run tested commit {OLD}, and the pull request's head is now {NEW}"
    assert why in summary and "left as it is" in summary, summary
    assert "::warning title=perfgate::" in r.output and why in r.output
    assert not (tmp_path / "out-late" / "perfgate-comment.md").exists()   # nothing left for a follow-up job


def test_the_current_head_s_run_edits_it(server, captures, tmp_path):
    d, base, worse = captures
    assert _gate(worse, d / "baselines", NEW, tmp_path, server, "1")[0].exit_code == 1
    r, summary = _gate(base, d / "baselines", NEW, tmp_path, server, "2")   # a rerun of the current head: fixed
    assert r.exit_code == 0 and "comment updated" in r.output, r.output
    (comment,) = server.comments[(REPO, PR)]
    assert "**PASS**" in comment["body"] and "**REGRESSION**" not in comment["body"]
    assert "left as it is" not in summary


def test_publish_report_reads_the_head_only_for_pull_request_events(server, tmp_path):
    """An issue_comment run names no head commit: nothing to compare, the comment is posted."""
    body = f"{marker('main')}\n\n## perfgate: **PASS**\n"
    ctx = ActionsContext(repository=REPO, event_name="issue_comment", pr_number=PR, api_url=server.api_url)
    assert publish_report(body, ctx=ctx, token=TOKEN, key="main", out_dir=tmp_path).action == "created"
    ctx = ActionsContext(repository=REPO, event_name="pull_request", pr_number=PR, head_sha=OLD, base_sha="d" * 40,
                         head_repo=REPO, base_repo=REPO, api_url=server.api_url)
    out = publish_report(body, ctx=ctx, token=TOKEN, key="main", out_dir=tmp_path)
    assert out.action == "stale" and NEW in out.warning and out.url is None
    assert os.listdir(tmp_path) == []
