"""A candidate that no longer measures gated metrics the baseline had (its trace_view.json and
step_trace_time.csv deleted) fails the gate as MISSING, and every report says so as its own
reason: the console and Markdown name the absent metrics and call them absent, not slower; the
JUnit failure type is ``missing``, not ``regression`` ("6 failing gated
metrics" with no cause, the metrics hidden in a collapsed section)."""
from junitparser import Failure, JUnitXml

from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.policy import load_policy
from perfgate.report import render_junit, render_markdown
from perfgate.report.summary import console_lines
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture


def test_absent_gated_metrics_are_named_as_missing_not_slower(tmp_path):
    pol = load_policy()
    base = write_capture(tmp_path / "base", SynthSpec())
    cand = write_capture(tmp_path / "cand", SynthSpec())
    gone = [p for name in ("trace_view.json", "step_trace_time.csv") for p in cand.rglob(name)]
    assert gone
    for p in gone:
        p.unlink()
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=pol, store=store, env={})
    r = check(cand, "main", policy=pol, store=store, env={})
    lost = sorted(c.key for c in r.comparisons if c.gated and c.fails and c.verdict == terms.MISSING)
    assert r.exit_code == 1 and lost
    assert not [c for c in r.comparisons if c.gated and c.verdict == terms.REGRESSION]
    text = " ".join(" ".join(console_lines(r, width=10_000)).split())   # spacing aside
    assert f"MISSING {len(lost)} gated metric(s) the baseline measured are absent from the candidate" in text
    assert "not a slowdown" in text and lost[0] in text
    md = render_markdown(r)
    head = md.split("<details>", 1)[0]          # said above the fold, not only in a collapsed section
    assert f"**{len(lost)} gated metric(s) the baseline measured are absent" in head
    assert all(k in head for k in lost[:12])
    p = tmp_path / "j.xml"
    p.write_text(render_junit(r))
    fails = {c.name: f for s in JUnitXml.fromfile(str(p)) for c in s for f in c.result if isinstance(f, Failure)}
    assert set(lost) <= set(fails)
    assert all(fails[k].type == "missing" for k in lost)
    assert all(f.type != "missing" for k, f in fails.items() if k not in lost)


def test_no_missing_line_when_nothing_is_missing(tmp_path):
    pol = load_policy()
    base = write_capture(tmp_path / "base", SynthSpec())
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=pol, store=store, env={})
    r = check(write_capture(tmp_path / "cand", SynthSpec()), "main", policy=pol, store=store, env={})
    assert r.exit_code == 0
    assert "MISSING" not in "\n".join(console_lines(r)) and "absent from the candidate" not in render_markdown(r)
