"""GitHub integration over real HTTP: github3.py talks to a local GitHub Enterprise-shaped server
(tests/github_fake.py, werkzeug on 127.0.0.1). Nothing of github3.py is mocked."""
import json
import subprocess
import time

import pytest
from click.testing import CliRunner

from github_fake import FakeGitHub
from perfgate.cli import main
from perfgate.publish.github import (
    COMMENT_LIMIT, ActionsContext, baseline_note, context_from_env, fit_comment, github_client, marker_key, publish_report,
    redact, upsert_comment, write_outputs,
)
from perfgate.errors import UsageError
from perfgate.report.markdown import marker
from perfgate.synth import SynthSpec, write_capture

REPO, PR = "acme/llm-train", 42
WRITE, READ = "ghs_writeTOKEN0123456789abcdef", "ghs_forkREADONLY9876543210fedcba"
FAST = {"retries": 2, "backoff_s": 0.05, "connect_timeout_s": 2, "read_timeout_s": 2}


@pytest.fixture
def server():
    srv = FakeGitHub(tokens={WRITE: "write", READ: "read"}, max_per_page=50).start()
    srv.add_pr(REPO, PR)
    yield srv
    srv.stop()


def ctx_for(srv, **kw):
    d = dict(repository=REPO, event_name="pull_request", pr_number=PR, head_sha="b" * 40, base_sha="a" * 40,
             head_repo=REPO, base_repo=REPO, api_url=srv.api_url)
    d.update(kw)
    return ActionsContext(**d)


def report(key, verdict="REGRESSION", extra=""):
    return f"{marker(key)}\n\n## ❌ perfgate: **{verdict}** against baseline `main`\n\n{extra}"


def comments(srv):
    return srv.comments[(REPO, PR)]


# --- upsert ----------------------------------------------------------------------------------

def test_first_post_then_update_in_place(server, tmp_path):
    out1 = publish_report(report("main", "REGRESSION"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out1.action == "created" and out1.warning is None
    assert len(comments(server)) == 1 and "REGRESSION" in comments(server)[0]["body"]
    out2 = publish_report(report("main", "PASS"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out2.action == "updated" and out2.comment_id == out1.comment_id and out2.url == out1.url
    assert len(comments(server)) == 1
    body = comments(server)[0]["body"]
    assert "PASS" in body and "REGRESSION" not in body
    assert [r["method"] for r in server.log].count("POST") == 1
    assert [r["method"] for r in server.log].count("PATCH") == 1
    assert not (tmp_path / "perfgate-comment.md").exists()  # no fallback when it worked


def test_marker_on_page_3_of_120_comments(server, tmp_path):
    for i in range(120):
        server.seed(REPO, PR, report("main", "PASS") if i == 110 else f"LGTM {i}", login="github-actions[bot]" if i == 110 else "dev")
    target = comments(server)[110]["id"]
    out = publish_report(report("main", "REGRESSION"), ctx=ctx_for(server), token=WRITE, key="main",
                         out_dir=tmp_path)
    assert out.action == "updated" and out.comment_id == target
    pages = [r["query"].get("page", "1") for r in server.requests("GET") if r["path"].endswith("/comments")]
    assert pages == ["1", "2", "3"]  # per_page capped at 50 by the server: 50 + 50 + 20, Link rel=next followed
    assert len(comments(server)) == 120 and not server.requests("POST")
    assert "REGRESSION" in comments(server)[110]["body"]


def test_two_matrix_keys_keep_two_comments(server, tmp_path):
    for rnd in ("first", "second"):
        for leg in ("main/llama-7b", "main/resnet50"):
            publish_report(report(leg, extra=f"{leg} {rnd}"), ctx=ctx_for(server), token=WRITE, key=leg,
                           out_dir=tmp_path)
    assert len(comments(server)) == 2
    assert {marker_key(c["body"]) for c in comments(server)} == {"main/llama-7b", "main/resnet50"}
    assert all("second" in c["body"] for c in comments(server))
    # a key that is a prefix of another is a different comment
    publish_report(report("main"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert len(comments(server)) == 3


def test_two_marked_comments_update_the_newest(server, tmp_path):
    old = server.seed(REPO, PR, report("main", extra="old one"))
    new = server.seed(REPO, PR, report("main", extra="new one"))
    gh = github_client(server.api_url, WRITE, **FAST)
    out = upsert_comment(gh, REPO, PR, report("main", extra="third"), "main")
    assert out.action == "updated" and out.comment_id == new["id"] and out.duplicates == 1
    assert "old one" in old["body"] and "third" in new["body"]


def test_quoted_marker_in_a_reply_is_not_ours(server, tmp_path):
    server.seed(REPO, PR, "> " + report("main") + "\nwhy did this regress?")
    out = publish_report(report("main"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out.action == "created" and len(comments(server)) == 2


# --- failures never raise, leave the body for a follow-up job ---------------------------------

def test_fork_token_403_leaves_files_and_one_warning(server, tmp_path):
    ctx = ctx_for(server, head_repo="contributor/llm-train")
    out = publish_report(report("main"), ctx=ctx, token=READ, key="main", out_dir=tmp_path)
    assert out.action == "failed" and out.status == 403
    assert "Resource not accessible by integration" in out.warning and "fork contributor/llm-train" in out.warning
    assert not comments(server)
    md = (tmp_path / "perfgate-comment.md").read_text()
    meta = json.loads((tmp_path / "perfgate-comment.json").read_text())
    assert md.startswith(marker("main")) and meta == {**meta, "repository": REPO, "pr_number": PR, "key": "main"}


def test_5xx_retries_are_bounded_in_time(server, tmp_path):
    server.fail_with = [(503, {"Retry-After": "3600"})] * 50  # a server asking for an hour: ignored
    t0 = time.monotonic()
    out = publish_report(report("main"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path,
                         client_options=FAST)
    elapsed = time.monotonic() - t0
    assert out.action == "failed" and out.status == 503 and "HTTP 503" in out.warning
    assert len(server.log) == 3  # 1 try + 2 retries, then github3.py's ServerError
    assert elapsed < 5, elapsed  # backoff 0 + 0.1 s, never the hour
    assert (tmp_path / "perfgate-comment.md").is_file()


def test_5xx_then_success_is_retried(server, tmp_path):
    server.fail_with = [(502, {}), (504, {})]
    out = publish_report(report("main"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path,
                         client_options=FAST)
    assert out.action == "created" and len(comments(server)) == 1


def test_network_error_and_404(server, tmp_path):
    dead = FakeGitHub()
    dead_url = dead.api_url
    dead.server.server_close()  # nothing listens there any more
    out = publish_report(report("main"), ctx=ctx_for(server, api_url=dead_url), token=WRITE, key="main",
                         out_dir=tmp_path / "a", client_options=FAST)
    assert out.action == "failed" and out.status is None and (tmp_path / "a" / "perfgate-comment.md").is_file()
    out = publish_report(report("main"), ctx=ctx_for(server, pr_number=999), token=WRITE, key="main",
                         out_dir=tmp_path / "b", client_options=FAST)
    assert out.action == "failed" and out.status == 404 and "Not Found" in out.warning


def test_no_token_and_not_a_pr(server, tmp_path):
    out = publish_report(report("main"), ctx=ctx_for(server), token=None, key="main", out_dir=tmp_path)
    assert out.action == "failed" and "GITHUB_TOKEN is not set" in out.warning and not server.log
    out = publish_report(report("main"), ctx=ctx_for(server, pr_number=None, event_name="push"), token=WRITE,
                         key="main", out_dir=tmp_path / "push")
    assert out.action == "skipped" and out.warning is None and not server.log


def test_token_never_in_output_even_when_the_server_echoes_it(server, tmp_path):
    server.echo_auth = True
    out = publish_report(report("main"), ctx=ctx_for(server), token=READ, key="main", out_dir=tmp_path)
    assert out.action == "failed"
    assert server.log[-1]["auth"] == f"token {READ}"  # the server did see it and echoed it back
    texts = [out.warning, (tmp_path / "perfgate-comment.md").read_text(), (tmp_path / "perfgate-comment.json").read_text()]
    assert all(READ not in t for t in texts) and "***" in out.warning
    # the standalone command too: exit 5, one line, no token
    body = tmp_path / "perfgate-comment.md"
    r = CliRunner().invoke(main, ["comment", str(body), "--meta", str(tmp_path / "perfgate-comment.json"),
                                  "--pr", str(PR)],
                           env={"GITHUB_TOKEN": READ, "GITHUB_EVENT_PATH": None, "GITHUB_REPOSITORY": REPO,
                                "GITHUB_API_URL": server.api_url})
    assert r.exit_code == 5 and "HTTP 403" in r.output and READ not in r.output
    assert redact(f"Authorization: Bearer {READ}", None) == "Authorization: Bearer ***"


# --- size limit ---------------------------------------------------------------------------------

def test_oversized_report_is_truncated_never_the_verdict(server, tmp_path):
    rows = "\n".join(f"| {i} | ✅ `kernel.calls_per_step{{family=F{i}}}` | {'x' * 80} |" for i in range(3000))
    body = report("main", extra="Gated metrics: 3000 — 3 failing\n\n<details><summary>All</summary>\n\n" + rows
                  + "\n\n</details>\n")
    assert len(body) > 2 * COMMENT_LIMIT
    out = publish_report(body, ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out.action == "created" and out.truncated
    posted = comments(server)[0]["body"]
    assert len(posted.encode("utf-16-le")) // 2 <= COMMENT_LIMIT
    assert posted.startswith(marker("main")) and "**REGRESSION**" in posted and "3 failing" in posted
    assert "truncated to stay under GitHub's 65,536-character limit" in posted
    assert posted.count("<details") == posted.count("</details>")


def test_fit_comment_counts_utf16_and_keeps_short_bodies():
    assert fit_comment("short") == "short"
    emoji = marker("k") + "\n" + "\n".join("🔴" * 99 for _ in range(400))  # 99 code points, 198 UTF-16 units
    fitted = fit_comment(emoji, limit=10_000)
    units = len(fitted.encode("utf-16-le")) // 2
    assert 9_000 < units <= 10_000 and len(fitted) < 5_100  # counted in UTF-16 units, not code points
    assert fitted.startswith(marker("k"))


# --- context ------------------------------------------------------------------------------------

def test_context_from_event_payload_and_api_url(tmp_path):
    ev = tmp_path / "event.json"
    ev.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": "h" * 40, "repo": {"full_name": "fork/x"}},
                                               "base": {"sha": "b" * 40, "repo": {"full_name": "org/x"}}}}))
    ctx = context_from_env({"GITHUB_EVENT_PATH": str(ev), "GITHUB_REPOSITORY": "org/x",
                            "GITHUB_EVENT_NAME": "pull_request", "GITHUB_API_URL": "https://ghe.corp/api/v3/"})
    assert (ctx.pr_number, ctx.head_sha, ctx.is_fork, ctx.is_pull_request) == (7, "h" * 40, True, True)
    gh = github_client(ctx.api_url, "t")  # GitHub Enterprise: no second /api/v3
    assert gh.session.base_url == "https://ghe.corp/api/v3"
    assert type(github_client("https://api.github.com", "t")).__name__ == "GitHub"
    assert context_from_env({}).pr_number is None
    ev.write_text("{not json")
    r = CliRunner().invoke(main, ["github-context"], env={"GITHUB_EVENT_PATH": str(ev)})
    assert r.exit_code == 2 and "event payload is not valid JSON" in r.output


def test_write_outputs_multiline(tmp_path):
    p = tmp_path / "out"
    write_outputs(p, {"verdict": "PASS", "text": "a\nb", "none": None})
    assert p.read_text() == "verdict=PASS\ntext<<PERFGATE_EOF\na\nb\nPERFGATE_EOF\nnone=\n"


# --- the CLI end to end -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("caps")
    base = write_capture(d / "base", SynthSpec(seed=1))
    worse = write_capture(d / "worse", SynthSpec(seed=3, extra_calls={"aclnnAdd_AddAiCore_Add": 2}))
    bl = d / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(base), "--baseline-dir", str(bl)],
                           env={"GITHUB_EVENT_NAME": "push"})
    assert r.exit_code == 0, r.output
    return base, worse, bl


def actions_env(srv, tmp_path, token, fork=False):
    ev = tmp_path / "event.json"
    head_repo = "contributor/llm-train" if fork else REPO
    ev.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": "1" * 40, "repo": {"full_name": head_repo}},
                                               "base": {"sha": "2" * 40, "repo": {"full_name": REPO}}}}))
    return {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(ev),
            "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": srv.api_url, "GITHUB_TOKEN": token,
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "output.txt")}


def test_check_comment_fork_403_keeps_exit_code_and_writes_files(server, tmp_path, captures):
    base, worse, bl = captures
    server.echo_auth = True  # the 403 body repeats the Authorization header: must still never show up
    env = actions_env(server, tmp_path, READ, fork=True)
    for cap, code in ((worse, 1), (base, 0)):
        out = tmp_path / f"o{code}"
        r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--baseline-dir", str(bl),
                                      "--out", str(out), "--comment"], env=env)
        assert r.exit_code == code, r.output
        assert r.output.count("::warning title=perfgate::") == 1 and "HTTP 403" in r.output
        assert (out / "perfgate-comment.md").is_file() and (out / "perfgate-comment.json").is_file()
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count(marker("main")) == 2 and "**REGRESSION**" in summary and "**PASS**" in summary
    outputs = (tmp_path / "output.txt").read_text()
    result = json.loads((tmp_path / "o1" / "perfgate-result.json").read_text())
    assert "verdict=REGRESSION" in outputs and "verdict=PASS" in outputs
    assert f"regressions={result['counts']['gated_regressions']}\n" in outputs and "regressions=0\n" in outputs
    assert "comment-file=" + str(tmp_path / "o1" / "perfgate-comment.md") in outputs
    assert not comments(server)
    for f in [*tmp_path.rglob("*.md"), *tmp_path.rglob("*.json"), *tmp_path.rglob("*.txt"), *tmp_path.rglob("*.xml")]:
        assert READ not in f.read_text(), f
    # the workflow_run follow-up posts what the fork run left, with a write token
    o1 = tmp_path / "o1"
    head = json.loads((o1 / "perfgate-comment.json").read_text())["head_sha"]   # the run's head commit
    server.heads[(REPO, PR)] = head
    r = CliRunner().invoke(main, ["comment", str(o1 / "perfgate-comment.md"), "--meta", str(o1 / "perfgate-comment.json"),
                                  "--repo", REPO, "--head-sha", head], env={"GITHUB_TOKEN": WRITE, "GITHUB_EVENT_PATH": None,
                                                        "GITHUB_API_URL": server.api_url})
    assert r.exit_code == 0 and "comment created" in r.output, r.output
    assert len(comments(server)) == 1 and "**REGRESSION**" in comments(server)[0]["body"]


def test_pr_run_refuses_to_write_the_main_baseline(tmp_path, captures):
    base, worse, bl = captures
    before = (bl / "main.json").read_bytes()
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(worse), "--baseline-dir", str(bl)],
                           env={"GITHUB_EVENT_NAME": "pull_request_target"})
    assert r.exit_code == 2 and "pull-request runs never write baselines" in r.output
    assert (bl / "main.json").read_bytes() == before


def test_merge_base_from_git_and_the_baseline_note(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git[:3] + ["init", "-q", "-b", "main"], check=True)

    def commit(msg):
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", msg], check=True)
        return subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    fork_point = commit("base")
    subprocess.run(git[:3] + ["checkout", "-q", "-b", "pr"], check=True)
    head = commit("pr work")
    subprocess.run(git[:3] + ["checkout", "-q", "main"], check=True)
    main_tip = commit("main moves on")
    ctx = ActionsContext(repository=REPO, event_name="pull_request", pr_number=PR, head_sha=head, base_sha=main_tip)
    assert ctx.merge_base(cwd=tmp_path) == fork_point
    assert ActionsContext(head_sha=head, base_sha="f" * 40).merge_base(cwd=tmp_path) is None  # unknown commit
    md = report("main") + "\nGated metrics: 3\n"
    noted = baseline_note(md, {"commit": main_tip}, fork_point)
    assert noted.split("\n")[4] == (f"> Baseline saved at commit `{main_tip[:12]}`; this pull request's merge-base "
                                    f"is `{fork_point[:12]}`: differences also include commits between the two.")
    assert noted.startswith(marker("main")) and baseline_note(md, {"commit": fork_point}, fork_point) == md


def test_default_retry_budget_and_bad_keys(server, tmp_path):
    server.fail_with = [(500, {})] * 10
    gh = github_client(server.api_url, WRITE)  # the defaults: 3 retries, sleeps 0 + 1 + 2 s
    t0 = time.monotonic()
    with pytest.raises(Exception) as exc:
        upsert_comment(gh, REPO, PR, report("main"), "main")
    elapsed = time.monotonic() - t0
    assert getattr(exc.value, "code", None) == 500 and len(server.log) == 4 and 2.5 < elapsed < 8, elapsed
    for bad in ("a -->b", "x--y", "", "two\nlines"):
        with pytest.raises(UsageError):
            upsert_comment(gh, REPO, PR, "body", bad)


# --- comment identity, merge queue, shallow clones ----------------------------------

def test_a_persons_marker_comment_is_never_edited(server, tmp_path):
    """Q08: a person's comment starting with the marker stays untouched; ours is created, then updated."""
    person = server.seed(REPO, PR, report("main", extra="pasted by a person"), login="alice")
    before = dict(person)
    out1 = publish_report(report("main", extra="run 1"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out1.action == "created" and out1.foreign == 1 and out1.comment_id != person["id"]
    out2 = publish_report(report("main", extra="run 2"), ctx=ctx_for(server), token=WRITE, key="main", out_dir=tmp_path)
    assert out2.action == "updated" and out2.comment_id == out1.comment_id and out2.foreign == 1
    assert person == before and "pasted by a person" in person["body"]  # never PATCHed
    patched = [r["path"] for r in server.requests("PATCH")]
    assert patched == [f"/api/v3/repos/{REPO}/issues/comments/{out1.comment_id}"]
    mine = [c for c in comments(server) if c["id"] == out1.comment_id][0]
    assert mine["user"]["login"] == "github-actions[bot]" and "run 2" in mine["body"]
    # GET /user is 403 for the workflow's installation token: the bot login is assumed
    assert any(r["path"] == "/api/v3/user" for r in server.requests("GET"))


def test_a_user_token_updates_only_its_own_comments(tmp_path):
    """A personal token (GET /user answers) never edits the Actions bot's comment, and vice versa;
    $PERFGATE_COMMENT_AUTHOR names a GitHub App's bot login."""
    pat = "ghp_userTOKEN0123456789abcdef"
    srv = FakeGitHub(tokens={WRITE: "write", pat: "write"}, logins={pat: "perf-runner"}).start()
    try:
        srv.add_pr(REPO, PR)
        bot = srv.seed(REPO, PR, report("main", extra="bot's"), login="github-actions[bot]")
        out = publish_report(report("main", extra="pat 1"), ctx=ctx_for(srv), token=pat, key="main", out_dir=tmp_path)
        assert out.action == "created" and out.foreign == 1 and "bot's" in bot["body"]
        assert comments(srv)[-1]["user"]["login"] == "perf-runner"
        out = publish_report(report("main", extra="pat 2"), ctx=ctx_for(srv), token=pat, key="main", out_dir=tmp_path)
        assert out.action == "updated" and "pat 2" in comments(srv)[-1]["body"] and "bot's" in bot["body"]
        # an app's bot login given explicitly: the comment by that login is the one updated
        out = publish_report(report("main", extra="app"), ctx=ctx_for(srv), token=WRITE, key="main",
                             out_dir=tmp_path, author="github-actions[bot]")
        assert out.action == "updated" and out.comment_id == bot["id"] and "app" in bot["body"]
    finally:
        srv.stop()


def _merge_group_event(tmp_path):
    ev = tmp_path / "merge_group.json"
    ev.write_text(json.dumps({"merge_group": {"head_sha": "e" * 40, "base_sha": "f" * 40,
                                              "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-" + "f" * 40,
                                              "base_ref": "refs/heads/main"},
                              "repository": {"full_name": REPO}}))
    return {"GITHUB_EVENT_NAME": "merge_group", "GITHUB_EVENT_PATH": str(ev), "GITHUB_SHA": "e" * 40,
            "GITHUB_REF_NAME": "gh-readonly-queue/main/pr-7-" + "f" * 40, "GITHUB_STEP_SUMMARY": None,
            "GITHUB_OUTPUT": None}


def test_merge_group_never_writes_main_unless_forced(tmp_path, captures):
    """Q09: a merge-queue run tests unmerged code: no baseline, no history write; SHAs from the payload."""
    base, worse, bl = captures
    env = _merge_group_event(tmp_path)
    before = (bl / "main.json").read_bytes()
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(worse), "--baseline-dir", str(bl)], env=env)
    assert r.exit_code == 2 and "merge_group run" in r.output and "--force" in r.output, r.output
    assert (bl / "main.json").read_bytes() == before
    db = tmp_path / "h.sqlite"
    r = CliRunner().invoke(main, ["history", "record", str(base), "--branch", "main", "--db", str(db)], env=env)
    assert r.exit_code == 2 and "merge-queue runs test code that is not merged yet" in r.output and not db.exists()
    r = CliRunner().invoke(main, ["github-context"], env=env)
    d = json.loads(r.output)
    assert r.exit_code == 0 and (d["head_sha"], d["base_sha"], d["is_merge_queue"]) == ("e" * 40, "f" * 40, True)
    assert d["is_pull_request"] is False and d["pr_number"] is None
    # forced: written
    bl2 = tmp_path / "bl2"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(worse), "--baseline-dir", str(bl2),
                                  "--force"], env=env)
    assert r.exit_code == 0 and (bl2 / "main.json").is_file(), r.output
    r = CliRunner().invoke(main, ["history", "record", str(base), "--branch", "main", "--db", str(db), "--force"],
                           env=env)
    assert r.exit_code == 0 and db.is_file(), r.output


def _git(cwd, *args):
    r = subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                        "commit.gpgsign=false", *args], capture_output=True, text=True, check=True)
    return r.stdout.strip()


def test_shallow_clone_warns_and_the_note_says_unknown(tmp_path, captures, monkeypatch):
    """Q10: in a `git clone --depth 1` the merge-base cannot be found: a warning names
    `fetch-depth: 0` and the report says the baseline / PR relation is unknown."""
    base, worse, bl = captures
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    for i in range(3):
        _git(origin, "commit", "-q", "--allow-empty", "-m", f"main {i}")
    _git(origin, "checkout", "-q", "-b", "pr", "HEAD~2")
    _git(origin, "commit", "-q", "--allow-empty", "-m", "pr work")
    head, base_sha = _git(origin, "rev-parse", "pr"), _git(origin, "rev-parse", "main")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "pr", f"file://{origin}", str(clone)],
                   check=True, capture_output=True)
    assert _git(clone, "rev-parse", "--is-shallow-repository") == "true"
    assert ActionsContext(head_sha=head, base_sha=base_sha).merge_base(cwd=origin)  # the full history knows it
    ev = tmp_path / "event.json"
    ev.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": head, "repo": {"full_name": REPO}},
                                               "base": {"sha": base_sha, "repo": {"full_name": REPO}}}}))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(ev),
           "GITHUB_REPOSITORY": REPO, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "GITHUB_OUTPUT": str(tmp_path / "output.txt"), "GITHUB_TOKEN": None}
    monkeypatch.chdir(clone)
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(base), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / "out")], env=env)
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.output.splitlines() if ln.startswith("::warning") and "shallow" in ln]
    assert len(warn) == 1 and "fetch-depth: 0" in warn[0] and base_sha[:12] in warn[0], r.output
    summary = (tmp_path / "summary.md").read_text()
    assert "the relation between the baseline and this pull request is unknown" in summary
    assert "merge-base=\n" in (tmp_path / "output.txt").read_text()
    # a full clone: no warning, no unknown note
    monkeypatch.chdir(origin)
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(base), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / "out2")], env={**env, "GITHUB_STEP_SUMMARY": str(tmp_path / "s2.md")})
    assert r.exit_code == 0 and "fetch-depth" not in r.output and "::warning" not in r.output, r.output
    assert "relation between the baseline and this pull request is unknown" not in (tmp_path / "s2.md").read_text()


def test_comment_key_that_breaks_the_marker_is_refused_before_the_check(server, tmp_path, captures):
    """``--comment-key`` with ``-->`` (or another '--' run, or a character outside the key set) is exit 2
    naming the option and the text, before anything is read or written; a good key's marker is found
    again on the next run, which updates the same comment."""
    base, worse, bl = captures
    env = actions_env(server, tmp_path, WRITE)
    for bad, shown in (("leg-->x", "'-->'"), ("a--b", "'--'"), ("leg x", "' '"), ("k>", "'>'")):
        out = tmp_path / "bad"
        r = CliRunner().invoke(main, ["check", "--baseline", "main", str(worse), "--baseline-dir", str(bl),
                                      "--out", str(out), "--comment", "--comment-key", bad], env=env)
        assert r.exit_code == 2, r.output
        assert f"--comment-key {bad!r} cannot be a sticky-comment key: it contains {shown}" in r.output, r.output
        assert not out.exists() and not comments(server) and not (tmp_path / "summary.md").exists()
    r = CliRunner().invoke(main, ["comment", str(tmp_path / "event.json"), "--key", "x-->y", "--repo", REPO,
                                  "--pr", str(PR)], env={"GITHUB_TOKEN": WRITE})
    assert r.exit_code == 2 and "--key 'x-->y' cannot be a sticky-comment key: it contains '-->'" in r.output
    ids = []
    for cap, code in ((worse, 1), (base, 0)):   # the same good key twice: one comment, updated in place
        out = tmp_path / f"ok{code}"
        r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--baseline-dir", str(bl),
                                      "--out", str(out), "--comment", "--comment-key", "main/leg-1:a=b"], env=env)
        assert r.exit_code == code, r.output
        assert marker_key((out / "perfgate-report.md").read_text()) == "main/leg-1:a=b"
        assert len(comments(server)) == 1
        ids.append(comments(server)[0]["id"])
    assert ids[0] == ids[1] and "**PASS**" in comments(server)[0]["body"]


# --- the fork's artifact is untrusted (perfgate comment --meta) ---------------------------------

def _left_behind(server, tmp_path, **meta_changes):
    """The comment files a fork run's failed post leaves (read-only token), with ``meta_changes``
    applied to perfgate-comment.json as a hostile pull request's job could."""
    out = publish_report(report("main"), ctx=ctx_for(server), token=READ, key="main", out_dir=tmp_path)
    assert out.action == "failed"
    mp = tmp_path / "perfgate-comment.json"
    mp.write_text(json.dumps({**json.loads(mp.read_text()), **meta_changes}))
    return tmp_path / "perfgate-comment.md", mp


def _comment(body, meta, server, *extra, repo=REPO):
    return CliRunner().invoke(main, ["comment", str(body), "--meta", str(meta), *extra],
                              env={"GITHUB_TOKEN": WRITE, "GITHUB_EVENT_PATH": None, "GITHUB_REPOSITORY": repo,
                                   "GITHUB_API_URL": server.api_url})


def test_meta_never_chooses_the_api_host(server, tmp_path):
    """A meta whose api_url points at the attacker's host: the token still goes to $GITHUB_API_URL
    (the fake server) and nowhere else; the comment is posted there."""
    trap = FakeGitHub(tokens={WRITE: "write"}).start()
    try:
        trap.add_pr(REPO, PR)
        body, meta = _left_behind(server, tmp_path, api_url=trap.api_url)
        head = json.loads(meta.read_text())["head_sha"]
        server.heads[(REPO, PR)] = head
        n = len(server.log)
        r = _comment(body, meta, server, "--head-sha", head)
        assert r.exit_code == 0, r.output
        assert not trap.log and len(server.log) > n and len(comments(server)) == 1
    finally:
        trap.stop()


def test_meta_naming_another_repository_is_refused(server, tmp_path):
    server.add_pr("other/victim", PR)
    body, meta = _left_behind(server, tmp_path, repository="other/victim")
    n = len(server.log)
    r = _comment(body, meta, server)
    assert r.exit_code == 2 and "names repository 'other/victim'" in r.output and "not posted" in r.output
    assert len(server.log) == n and not comments(server) and not server.comments[("other/victim", PR)]


def test_head_sha_pins_the_pull_request(server, tmp_path):
    """--head-sha (the workflow run's head commit): a meta naming another PR, or one written for
    another commit, posts nothing; the PR the run tested gets its comment."""
    server.add_pr(REPO, 7, head_sha="a" * 40)
    body, meta = _left_behind(server, tmp_path / "a", pr_number=7)
    head = json.loads(meta.read_text())["head_sha"]   # the commit the fork's run tested
    assert head and head != "a" * 40
    server.heads[(REPO, PR)] = head
    r = _comment(body, meta, server, "--head-sha", head)
    assert r.exit_code == 2 and "#7" in r.output and "names another pull request" in r.output
    assert not comments(server) and not server.comments[(REPO, 7)]
    body, meta = _left_behind(server, tmp_path / "b", head_sha="c" * 40)
    r = _comment(body, meta, server, "--head-sha", head)
    assert r.exit_code == 2 and "written for commit cccc" in r.output and not comments(server)
    body, meta = _left_behind(server, tmp_path / "c", head_sha=head)
    r = _comment(body, meta, server, "--head-sha", head)
    assert r.exit_code == 0 and "comment created" in r.output and len(comments(server)) == 1


def test_meta_pr_number_must_be_plain_digits(server, tmp_path):
    """A meta PR number that str.isdigit() takes but int() does not ("²") or 0: exit 2, nothing sent."""
    for bad in ("²", "0", "007x"):
        body, meta = _left_behind(server, tmp_path / f"n{ord(bad[0])}", pr_number=bad)
        n = len(server.log)
        r = _comment(body, meta, server)
        assert r.exit_code == 2 and "is not a positive integer" in r.output, (bad, r.output)
        assert len(server.log) == n


@pytest.mark.parametrize("head", [None, ""])
def test_a_meta_pr_number_without_head_sha_is_refused(server, tmp_path, head):
    """``perfgate comment --meta M`` without ``--head-sha`` (or with an empty one: a workflow whose
    HEAD_SHA is unset) used the PR number the fork's job wrote, unverified: any pull request of
    the repository could get the comment. The docs promise it is used only once that PR's head
    is the run's commit: exit 2, nothing sent."""
    body, meta = _left_behind(server, tmp_path)
    n = len(server.log)
    r = _comment(body, meta, server, *([] if head is None else ["--head-sha", head]))
    assert r.exit_code == 2, r.output
    assert "comes from the comment metadata" in r.output and "--head-sha" in r.output
    assert len(server.log) == n and not comments(server)
