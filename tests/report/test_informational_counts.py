"""A check whose informational metrics moved says how many moved, in every summary (console,
Markdown, HTML), not only their total: a Level1 -> Level2 check of the real G2025 captures
passes with "profiler level changed", and a reviewer reading only the summary line must see
that 18 informational metrics moved beyond their tolerance (10 worse, 8 better)."""
from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.report import render_markdown
from perfgate.report.html import render_html
from perfgate.report.summary import console_lines, informational_text
from perfgate.store.baselines import BaselineStore


def test_informational_text_counts_each_direction():
    zero = {str(v): 0 for v in terms.VERDICTS}
    counts = {"informational": {**zero, "total": 7, str(terms.REGRESSION): 2, str(terms.IMPROVEMENT): 1}}
    assert informational_text(counts) == "7 (2 worse, 1 better; not gated)"
    counts = {"informational": {**zero, "total": 7, str(terms.IMPROVEMENT): 3}}
    assert informational_text(counts) == "7 (3 better; not gated)"
    assert informational_text({"informational": {**zero, "total": 5}}) == "5"
    # every kind the JSON counts is named (4 new ones were left out of "279 (34 worse, 3 better)")
    counts = {"informational": {**zero, "total": 9, str(terms.REGRESSION): 2, str(terms.NEW): 4,
                                str(terms.MISSING): 1, str(terms.INCOMPARABLE): 2}}
    assert informational_text(counts) == "9 (2 worse, 4 new, 1 gone, 2 not compared; not gated)"


def test_level_change_names_moved_informational_metrics(text_captures, policy, tmp_path):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    assert r.exit_code == 0
    info = [c for c in r.comparisons if not c.gated]
    worse = sum(c.verdict == terms.REGRESSION for c in info)
    better = sum(c.verdict == terms.IMPROVEMENT for c in info)
    assert worse and better                      # the level change moves both ways
    new = sum(c.verdict == terms.NEW for c in info)
    inc = sum(c.verdict == terms.INCOMPARABLE for c in info)
    text = (f"{len(info)} ({worse} worse, {better} better" + (f", {new} new" if new else "")
            + (f", {inc} not compared" if inc else "") + "; not gated)")
    assert f"informational: {text}" in "\n".join(console_lines(r))
    assert f"Informational metrics: {text}." in render_markdown(r)
    assert f"Informational metrics: {text}." in render_html(r)


def test_a_family_crossing_the_min_share_is_not_new(text_captures, policy, tmp_path):
    """pipe.memory_bound is recorded for families above operators.family_min_share only:
    trans_TransData (42 calls on both ranks of both captures) crossed 1 % on rank 1 (0.978 % ->
    1.002 %) and was "new ... only in the candidate". It is "not
    compared", naming the rule; neither new nor gone."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    mb = [c for c in r.comparisons if c.name == "pipe.memory_bound" and c.labels.get("family") == "trans_TransData"]
    assert mb and not [c for c in mb if c.verdict in (terms.NEW, terms.MISSING)]
    crossed = [c for c in mb if c.verdict == terms.INCOMPARABLE]
    assert crossed and all("family_min_share" in c.reason for c in crossed)
