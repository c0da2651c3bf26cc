"""Causes, not symptoms: the demo's two causes lead every report; views are columns;
JSON counts gated vs informational; --json - streams; partial comparisons are stated."""
import json

import pytest
from click.testing import CliRunner
from junitparser import Failure, JUnitXml

from perfgate import terms
from perfgate.cli import main

MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"
CAST = "aclnnCast_CastAiCore_Cast"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    r = CliRunner().invoke(main, ["demo", "--out", str(out)], env={}, catch_exceptions=False)
    return out, r


def test_demo_console_names_two_causes_in_few_lines(demo):
    out, r = demo
    assert r.exit_code == 1
    lines = r.output.splitlines()
    check = lines[lines.index(next(x for x in lines if x.startswith("perfgate: "))):]
    assert len(check) <= 25, check
    assert check[0].startswith("perfgate: REGRESSION (exit 1)") and "2 causes" in check[0]
    causes = [x for x in check if x.startswith("  REGRESSION ")]
    assert len(causes) == 2 and MATMUL in causes[0] and CAST in causes[1] and "calls 10 -> 20" in causes[1]
    assert all(len(x) <= 170 for x in check)


def test_demo_pr_comment_causes_above_the_fold(demo):
    out, _ = demo
    md = (out / "report" / "perfgate-report.md").read_text()
    top = md.split("<details>")[0]
    rows = [x for x in top.splitlines() if x.startswith("| ") and not x.startswith("| | ")]
    assert 2 <= len(rows) <= 12, rows
    assert MATMUL in rows[0] and CAST in rows[1]
    # no share side-effect shown as an improvement, anywhere in the comment
    assert not [x for x in md.splitlines() if x.startswith("| 🟢 |") and ("share" in x or "Comm" in x)]
    assert "share of the step-time change" in top and "%)" in rows[0]


def test_demo_json_causes_and_unambiguous_counts(demo):
    out, _ = demo
    doc = json.loads((out / "report" / "perfgate-result.json").read_text())
    subjects = [c["subject"] for c in doc["causes"]]
    assert subjects[:2] == [MATMUL, CAST] and all(c["fails"] for c in doc["causes"][:2])
    failing = {c["key"] for c in doc["comparisons"] if c["fails"]}
    explained = {k for c in doc["causes"] for k in c["explains"]}
    assert failing <= explained and not doc["unexplained"]
    n = doc["counts"]
    gated = [c for c in doc["comparisons"] if c["gated"]]
    assert n["gated"]["total"] == len(gated) and n["gated"]["regression"] == n["gated_regressions"] == len(failing)
    assert n["informational"]["regression"] == sum(1 for c in doc["comparisons"]
                                                   if not c["gated"] and c["verdict"] == "regression")
    cast = next(c for c in doc["causes"] if c["subject"] == CAST)
    assert f"kernel.calls_per_step{{family={CAST},view=rank0}}" in cast["explains"]
    assert cast["step_delta_us"] > 0 and 0 < cast["step_fraction"] < 0.2


def test_demo_junit_failure_names_the_cause(demo):
    out, _ = demo
    xml = JUnitXml.fromfile(str(out / "report" / "perfgate-junit.xml"))
    failed = {c.name: c.result[0] for s in xml for c in s if c.result and isinstance(c.result[0], Failure)}
    f = failed[f"share.family{{family={MATMUL},view=rank0}}"]
    assert f"cause: kernel family {MATMUL}" in f.text
    assert f"cause: kernel family {CAST}" in failed[f"kernel.calls_per_step{{family={CAST},view=p50}}"].text


def test_json_dash_writes_json_to_stdout_and_text_to_stderr(demo, tmp_path):
    out, _ = demo
    r = CliRunner().invoke(main, [
        "check", "--baseline", "main", str(out / "captures" / "candidate"), "--baseline-dir", str(out / "baselines"),
        "--out", str(tmp_path / "o"), "--json", "-"], env={})
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "REGRESSION" and doc["causes"]
    assert r.stderr.startswith("perfgate: REGRESSION") and not (tmp_path / "-").exists()


def test_verbose_shows_every_gated_change(demo, tmp_path):
    out, _ = demo
    args = ["check", "--baseline", "main", str(out / "captures" / "candidate"), "--baseline-dir",
            str(out / "baselines"), "--out", str(tmp_path / "o")]
    short = CliRunner().invoke(main, args, env={}).output
    full = CliRunner().invoke(main, args + ["-v"], env={}).output
    assert "every gated change:" in full and "every gated change:" not in short
    failing = sum(1 for c in json.loads((tmp_path / "o" / "perfgate-result.json").read_text())["comparisons"]
                  if c["fails"])
    assert failing > 10 and full.count("REGRESSION  ") == failing   # every failing gated metric-view, once


def test_level0_vs_level1_is_partial_and_states_the_level_change(text_captures, tmp_path, policy):
    from dataclasses import replace

    from perfgate.app.gate import check, save_baseline
    from perfgate.report import render_markdown
    from perfgate.report.summary import verdict_line
    from perfgate.store.baselines import BaselineStore
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "l1", policy=policy, store=store, env={})
    r = check(text_captures / "level0", "l1", policy=policy.allowing_partial(), store=store, env={})  # --allow-partial
    n_inc = r.counts()["gated_incomparable"]
    assert n_inc > 50
    assert verdict_line(r).startswith(f"{r.status} (partial: {n_inc} gated metrics not comparable)")
    md = render_markdown(r)
    head = md.split("Gated metrics:")[0]
    assert "partial: " in head and "profiler level changed: baseline Level1 -&gt; candidate Level0" in head
    strict = replace(policy, max_incomparable_fraction=0.1)
    r2 = check(text_captures / "level0", "l1", policy=strict, store=store, env={})
    assert r2.status == terms.INCOMPATIBLE and r2.exit_code == 4 and "max_incomparable_fraction" in r2.error["message"]
