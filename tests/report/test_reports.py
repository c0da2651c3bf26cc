"""Reports: JUnit (C03), Markdown (marker, table, limit), JSON."""
import json

from junitparser import Error, Failure, JUnitXml, Skipped

from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.model import Comparison, GateResult, SelfCheck
from perfgate.report import render_json, render_junit, render_markdown
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture


def cmp(key, verdict, fails=False, gated=True, name="step.time_us", reason="r"):
    return Comparison(key=key, name=name, labels={"view": "rank0"}, verdict=verdict, gated=gated, fails=fails,
                      baseline=1.0, candidate=2.0, unit="us", caliber="busy_union", tier=2, delta=1.0,
                      delta_rel=1.0, tolerance="±10%", reason=reason, evidence="rank0/kernel_details.csv rows 1-3")


def parse(tmp_path, text):
    p = tmp_path / "j.xml"
    p.write_text(text)
    return JUnitXml.fromfile(str(p))


def test_junit_three_pass_one_regression(tmp_path):
    """C03a: root testsuites with counts and time; regression -> failure; names escaped."""
    comps = tuple([cmp(f"m{i}", terms.UNCHANGED) for i in range(3)]
                  + [cmp("kernel.calls_per_step{family=a<b&c,view=rank0}", terms.REGRESSION, fails=True,
                         reason='calls rose "18 -> 36" <x>')])
    r = GateResult(status=terms.FAIL, exit_code=1, comparisons=comps, elapsed_s=0.25)
    text = render_junit(r)
    assert text.lstrip().startswith("<?xml") and "<testsuites" in text and 'time="0.250"' in text
    xml = parse(tmp_path, text)
    cases = [c for s in xml for c in s]
    assert len(cases) == 4 and all(c.time is not None for c in cases)
    failed = [c for c in cases if c.result and isinstance(c.result[0], Failure)]
    assert len(failed) == 1 and failed[0].name == "kernel.calls_per_step{family=a<b&c,view=rank0}"
    assert xml.failures == 1 and xml.tests == 4


def test_junit_no_baseline_is_skipped(tmp_path):
    """C03b."""
    r = GateResult(status=terms.NO_BASELINE, exit_code=4, baseline_name="main",
                   error={"message": "no baseline named 'main'"})
    cases = [c for s in parse(tmp_path, render_junit(r)) for c in s]
    assert len(cases) == 1 and isinstance(cases[0].result[0], Skipped)


def test_junit_zero_metrics_still_has_a_testcase(tmp_path):
    """C03c."""
    cases = [c for s in parse(tmp_path, render_junit(GateResult(status=terms.PASS, exit_code=0))) for c in s]
    assert len(cases) == 1 and cases[0].name == "gate"


def test_junit_invalid_is_error(tmp_path):
    r = GateResult(status=terms.INVALID, exit_code=3,
                   self_checks=(SelfCheck("comm_equality", 0, "50", "fail", "mismatch"),),
                   error={"message": "self-check failed", "path": "/x/kernel_details.csv", "row": 4})
    xml = parse(tmp_path, render_junit(r))
    errs = [c for s in xml for c in s if c.result and isinstance(c.result[0], Error)]
    assert len(errs) == 2 and xml.errors == 2


def test_markdown_marker_table_and_escaping():
    comps = (cmp("kernel.calls_per_step{family=x|y,view=rank0}", terms.REGRESSION, fails=True),
             cmp("step.time_us{view=p50}", terms.IMPROVEMENT))
    md = render_markdown(GateResult(status=terms.FAIL, exit_code=1, comparisons=comps, baseline_name="main"))
    assert md.startswith("<!-- perfgate:report key=main -->")
    assert "perfgate: **REGRESSION**" in md and "| | metric | rank0 | caliber | tolerance | cause |" in md
    assert "x\\|y" in md and "busy union" in md and "rows 1-3" in md
    # no cause found: the failing symptom is listed on its own above the collapsed sections
    top = md.split("<details>")[0]
    assert "no cause found" in top and "kernel.calls_per_step{family=x\\|y}" in top


def test_markdown_stays_under_comment_limit():
    comps = tuple(cmp(f"kernel.calls_per_step{{family=k{i},view=rank0}}", terms.REGRESSION, fails=True,
                      reason="x" * 200) for i in range(2000))
    md = render_markdown(GateResult(status=terms.FAIL, exit_code=1, comparisons=comps, baseline_name="main"))
    assert len(md) < 65_536 and "perfgate: **REGRESSION**" in md and "truncated" in md


def test_json_round_trip_on_synthetic_regression(tmp_path, policy):
    base = write_capture(tmp_path / "b", SynthSpec(seed=1))
    cand = write_capture(tmp_path / "c", SynthSpec(seed=2, extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    doc = json.loads(render_json(r))
    assert doc["verdict"] == "REGRESSION" and doc["exit_code"] == 1
    assert doc["counts"]["gated_regressions"] == len([c for c in doc["comparisons"] if c["fails"]]) >= 2
    first = doc["comparisons"][0]
    assert first["fails"] and {"baseline", "candidate", "delta", "caliber", "evidence", "reason"} <= set(first)
    md = render_markdown(r)
    assert "aclnnCast_CastAiCore_Cast" in md and "| 🔴 |" in md
