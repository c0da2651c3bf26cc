"""The sticky pull-request comment holds the verdict, its causes, what a green means and where the
full report is, in at most 16 KB, while the full Markdown report (--markdown, job summary) stays
complete. Posted over real HTTP to tests/github_fake.py, as ``check --comment`` posts it."""
import dataclasses
import json
import shutil

import pytest

from github_fake import FakeGitHub
from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.publish.github import publish_check
from perfgate.report.comment import COMMENT_BYTES, ReportPointer, render_comment
from perfgate.report.markdown import marker, render_markdown
from perfgate.report.summary import green_text, verdict_line
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture

REPO, PR = "acme/llm-train", 42
TOKEN = "ghs_commentSIZE0123456789abcdef"
HEAD = "c3" * 20
RUN_URL = f"https://github.com/{REPO}/actions/runs/777"
KB16 = 16 * 1024


@pytest.fixture
def server():
    srv = FakeGitHub(tokens={TOKEN: "write"}).start()
    srv.add_pr(REPO, PR, head_sha=HEAD)
    yield srv
    srv.stop()


def _post(result, server, tmp_path, key="main"):
    """publish_check as ``perfgate check --comment`` calls it in a pull_request run; the posted body."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": HEAD, "repo": {"full_name": REPO}},
                                                  "base": {"sha": "d" * 40, "repo": {"full_name": REPO}}}}))
    summary = tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
           "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": server.api_url, "GITHUB_TOKEN": TOKEN,
           "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "777", "GITHUB_STEP_SUMMARY": str(summary)}
    paths = {"markdown": out / "perfgate-report.md", "json": out / "perfgate-result.json"}
    full = render_markdown(result, key=key)
    res = publish_check(result, paths, markdown=full, comment=True, key=key, out_dir=out, env=env, cwd=tmp_path)
    assert res["comment"].action == "created", res
    (posted,) = server.comments[(REPO, PR)]
    return posted["body"], full, summary.read_text()


def _assert_names_the_verdict(body: str, result, key="main"):
    assert len(body.encode("utf-8")) <= KB16
    assert body.startswith(marker(key))
    status, _, rest = verdict_line(result).partition(" ")
    heading = body.splitlines()[2]
    assert heading.startswith("## ") and f"**{status}**" in heading and rest in heading, heading
    green = green_text(result)
    assert green and green in body
    assert f"the job summary of [this run]({RUN_URL})" in body
    assert "`perfgate-report.md` / `perfgate-result.json` in the run's artifacts" in body


def test_level0_against_a_level1_baseline(text_captures, tmp_path, policy, server):
    """The real pair whose full report is 60 KB: the comment keeps the verdict (partial), the causes
    table, the green line and the pointer; the job summary keeps the full report."""
    for level in ("level0", "level1"):
        shutil.copytree(text_captures / level, tmp_path / level)
    partial_ok = dataclasses.replace(policy, max_incomparable_fraction=1.0)   # judged, however partial
    store = BaselineStore(tmp_path / "baselines")
    save_baseline(tmp_path / "level1", "main", policy=partial_ok, store=store, env={})
    result = check(tmp_path / "level0", "main", policy=partial_ok, store=store, env={})
    assert result.status == terms.PASS and "partial" in verdict_line(result)
    body, full, summary = _post(result, server, tmp_path)
    assert len(full.encode("utf-8")) > 3 * KB16   # the full report is the long one
    _assert_names_the_verdict(body, result)
    assert result.causes
    first = body.index("| cause |")
    for x in result.causes[:5]:   # each cause, cause first, in the comment's causes table
        assert f"`{x['subject']}`" in body[first:], x["subject"]
    assert body.index("| cause |") < body.index("A green here means") < body.index("**Full report**")
    assert "Per-rank steps" not in body and "Self-checks (" not in body
    assert full in summary or full.split("\n", 3)[3] in summary   # the job summary: the full report


def test_a_big_regression_with_many_causes(tmp_path, policy, server):
    """40 kernel families with 270-character names, half slowed, half called twice as often: the
    full report is cut at 60,000 characters; the comment stays under 16 KB, the heading names
    the causes' count, the five largest causes are in the table and the rest are pointed at."""
    fams = tuple((f"aclnnFused{i:02d}_" + "LongKernelNameSegment" * 12 + f"_Variant{i}", f"Fused{i}", "AI_CORE", 3,
                  40.0 + i) for i in range(40))
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, families=fams))
    worse = write_capture(tmp_path / "worse", SynthSpec(seed=2, families=fams, slowdown={f[0]: 1.5 for f in fams[::2]},
                                                         extra_calls={f[0]: 2 for f in fams[1::2]}))
    store = BaselineStore(tmp_path / "baselines")
    save_baseline(base, "main", policy=policy, store=store, env={})
    result = check(worse, "main", policy=policy, store=store, env={})
    assert result.status == terms.FAIL and len(result.causes) > 10
    body, full, _ = _post(result, server, tmp_path)
    assert len(full) > 50_000
    _assert_names_the_verdict(body, result)
    assert f"{len(result.causes)} causes" in body.splitlines()[2]
    assert body.count("| 🔴 |") == 5 and f"{len(result.causes) - 5} more cause(s) in the full report." in body
    for x in result.causes[:5]:   # long names are cut in the middle: both ends stay
        name = x["subject"]
        assert name[:40] in body and (len(name) < 200 or name[-20:] in body), name


def test_a_tight_budget_drops_details_before_the_verdict(tmp_path, policy):
    """Over budget, the waterfall, configuration notes and table rows go first; the heading, the
    green line and the pointer stay, and a line says how many rows were left out."""
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    worse = write_capture(tmp_path / "worse", SynthSpec(seed=2, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.5,
                                                                           "aclnnAdd_AddAiCore_Add": 1.6},
                                                         extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
    store = BaselineStore(tmp_path / "baselines")
    save_baseline(base, "main", policy=policy, store=store, env={})
    result = check(worse, "main", policy=policy, store=store, env={})
    assert result.status == terms.FAIL and len(result.causes) >= 2
    roomy = render_comment(result, key="main", pointer=ReportPointer(run_url=RUN_URL))
    assert "Step-time change:" in roomy and roomy.count("| 🔴 |") == min(5, len(result.causes))
    rows = roomy.count("\n| ")
    budget = len(roomy.encode("utf-8")) - len(roomy.split("Step-time change:")[1].split("\n")[0].encode())
    tight = render_comment(result, key="main", pointer=ReportPointer(run_url=RUN_URL), budget=budget)
    assert len(tight.encode("utf-8")) <= budget
    assert "Step-time change:" not in tight and tight.count("\n| ") == rows   # the waterfall went first
    tighter = render_comment(result, key="main", pointer=ReportPointer(run_url=RUN_URL), budget=1_600)
    assert len(tighter.encode("utf-8")) <= 1_600
    assert "**REGRESSION**" in tighter and green_text(result) in tighter and "**Full report**" in tighter
    assert "more row(s) of this table in the full report" in tighter or "| cause |" not in tighter
    assert COMMENT_BYTES <= KB16
