"""A cause is one thing that changed: its verdict follows what it did
to the step (ΣDuration per step), not its call count; one family is at most one cause; every gated
metric is explained by at most one cause; ``fails`` only with a regression verdict; the headline
counts the causes the reports list."""
import json

import pytest
from click.testing import CliRunner

from perfgate import terms
from perfgate.cli import main
from perfgate.synth.writer import SynthSpec, write_capture

CAST = "aclnnCast_CastAiCore_Cast"


def _check(base, cand, tmp_path):
    """Save ``base`` as baseline, check ``cand`` against it; (exit code, console lines, JSON doc, markdown)."""
    bl, out = tmp_path / "bl", tmp_path / "out"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "b", str(base), "--baseline-dir", str(bl)], env={})
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["check", "--baseline", "b", str(cand), "--baseline-dir", str(bl), "--out", str(out)],
                           env={})
    doc = json.loads((out / "perfgate-result.json").read_text())
    return r.exit_code, r.output.splitlines(), doc, (out / "perfgate-report.md").read_text()


def _assert_consistent(doc, console):
    causes = doc["causes"]
    families = [(c["kind"], c["subject"]) for c in causes]
    assert len(families) == len(set(families)), families                       # one thing, one cause
    assert not [c for c in causes if c["fails"] and c["verdict"] != terms.REGRESSION]
    keys = [k for c in causes for k in c["explains"]]
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)
    failing = {c["key"] for c in doc["comparisons"] if c["fails"]}
    assert failing <= set(keys) | set(doc["unexplained"])
    head = console[next(i for i, x in enumerate(console) if x.startswith("perfgate: "))]
    n_fail = sum(1 for c in causes if c["fails"])
    want = f"{len(causes)} cause{'s' if len(causes) != 1 else ''}" + (f" ({n_fail} failing)" if n_fail != len(causes) else "")
    assert f": {want}, " in head or f": {want} + " in head, head              # counts what the reports list
    return head


@pytest.fixture(scope="module")
def cast_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("cast")
    base = write_capture(root / "B", SynthSpec())
    slow6 = write_capture(root / "C6", SynthSpec(extra_calls={CAST: 0.5}, slowdown={CAST: 6}))
    slow40 = write_capture(root / "C40", SynthSpec(extra_calls={CAST: 0.5}, slowdown={CAST: 40}))
    return base, slow6, slow40


def test_fewer_but_slower_calls_is_a_regression_cause(cast_pair, tmp_path):
    base, slow6, _ = cast_pair
    code, console, doc, md = _check(base, slow6, tmp_path)
    assert code == 1
    _assert_consistent(doc, console)
    cast = [c for c in doc["causes"] if c["subject"] == CAST]
    assert len(cast) == 1
    cast = cast[0]
    # calls halved, each call 6x slower: ΣDuration per step about 3x, a regression of the step
    assert cast["verdict"] == terms.REGRESSION and "calls 10 -> 5/step" in cast["what"]
    assert cast["step_delta_us"] > 0 and cast["step_fraction"] > 0.2
    assert f"kernel.calls_per_step{{family={CAST},view=rank0}}" in cast["explains"]   # fewer calls: its detail
    line = next(x for x in console if CAST in x and "ΣDuration" in x)
    assert not line.lstrip().startswith("improved") and line.lstrip().startswith(("REGRESSION", "worse"))
    row = next(x for x in md.splitlines() if x.startswith("| ") and f"kernel family `{CAST}`" in x)   # causes table
    assert row.startswith(("| 🔴 |", "| 🟡 |")), row
    regressions = [c for c in doc["causes"] if c["verdict"] == terms.REGRESSION and c["step_delta_us"]]
    # it is the family cause that grew the step most: no regression family cause ranks above it
    assert [c for c in regressions if c["kind"] != "step anatomy"][0]["subject"] == CAST


def test_much_slower_family_is_one_cause(cast_pair, tmp_path):
    base, _, slow40 = cast_pair
    code, console, doc, _ = _check(base, slow40, tmp_path)
    assert code == 1
    head = _assert_consistent(doc, console)
    first = doc["causes"][0]
    assert first["subject"] == CAST and first["verdict"] == terms.REGRESSION and first["fails"]
    assert [c["subject"] for c in doc["causes"]].count(CAST) == 1
    assert [c["subject"] for c in doc["causes"] if c["fails"]] == [CAST]
    calls = {k for k in first["explains"] if "calls_per_step" in k}
    assert f"kernel.calls_per_step{{family={CAST},view=rank0}}" in calls and f"share.family{{family={CAST},view=rank0}}" \
        in first["explains"]


def test_real_st_level2_vs_level1_causes_are_consistent(ascend, tmp_path, monkeypatch):
    """Two real jobs of different models, judged metric by metric anyway (the other-workload
    refusal, exit 4 by default, is switched off here: tests/compare/test_other_workload.py) as the
    richest real pair for the causes' consistency."""
    import perfgate.metrics.workload as workload
    monkeypatch.setattr(workload, "MAX_JACCARD", 0.0)
    t = ascend / "msinsight" / "test"
    code, console, doc, _ = _check(t / "st" / "level2", t / "data" / "pytorch" / "text" / "level1", tmp_path)
    assert code == 1
    _assert_consistent(doc, console)
    allreduce = [c for c in doc["causes"] if c["subject"] == "hcom_allReduce"]
    assert len(allreduce) == 1 and allreduce[0]["verdict"] == terms.REGRESSION   # 7 -> 4 calls but ΣDuration +163 %
    for c in doc["causes"]:   # a family gone (ΣDuration -100 %) is never a non-failing regression
        if c["kind"] in ("kernel family", "communication") and c["step_delta_us"] and not c["fails"]:
            assert (c["verdict"] == terms.REGRESSION) == (c["step_delta_us"] > 0), c


FOO = ("aclnnFoo_FooAiCore_Foo", "Foo", "AI_VECTOR_CORE", 3, 15.0)


def _unfailed(base, cand, tmp_path):
    """``check`` of ``cand`` against ``base`` as a GateResult whose gated comparisons are the real
    ones with ``fails`` cleared and causes found again: how a change reads when no gated metric fails."""
    import dataclasses
    from perfgate.compare.causes import find_causes
    from perfgate.app.gate import check, load_checked_policy, save_baseline
    from perfgate.app.run import fingerprint_path
    from perfgate.store.baselines import BaselineStore
    policy, store = load_checked_policy(), BaselineStore(tmp_path / "bl-unfailed")
    save_baseline(base, "b", policy=policy, store=store, env={}, workers=1)
    res = check(cand, "b", policy=policy, store=store, env={}, workers=1)
    assert any(c.fails for c in res.comparisons)
    quiet = tuple(dataclasses.replace(c, fails=False) for c in res.comparisons)
    causes, unexplained = find_causes(quiet, store.load("b")[0], fingerprint_path(cand, policy, workers=1),
                                      policy.gate_views)
    return dataclasses.replace(res, comparisons=quiet, causes=tuple(causes), unexplained=tuple(unexplained))


def test_gone_family_is_gone_not_improved(tmp_path):
    """A family the candidate no longer runs (ΣDuration -100 %, 0 calls) reads as ``gone``, never as
    a gain: with a failing gated metric it explains (the layer classes it sat in) a REGRESSION cause
    saying "gone"; judged with nothing failing, a ``gone`` cause (console "gone", markdown ⚪)."""
    from perfgate.report.markdown import render_markdown
    from perfgate.report.summary import console_lines
    from perfgate.synth.writer import DEFAULT_FAMILIES
    small = ("aclnnFoo_FooAiCore_Foo", "Foo", "AI_VECTOR_CORE", 3, 1.0)   # outside the Top-10
    base = write_capture(tmp_path / "B", SynthSpec(families=DEFAULT_FAMILIES + (small,)))
    cand = write_capture(tmp_path / "C", SynthSpec())
    code, console, doc, md = _check(base, cand, tmp_path)
    assert code == 1
    _assert_consistent(doc, console)
    foo = [c for c in doc["causes"] if c["subject"] == small[0]]
    assert len(foo) == 1 and foo[0]["fails"] and foo[0]["verdict"] == terms.REGRESSION
    assert foo[0]["what"] == "gone: no longer runs in the candidate (3 calls/step, ΣDuration 3.0 us/step in the baseline)"
    assert -4.0 < foo[0]["step_delta_us"] < -2.0   # 3 calls of ~1 us per step no longer run
    assert not [x for x in console if small[0] in x and x.lstrip().startswith("improved")]

    r = _unfailed(base, cand, tmp_path)
    foo = [c for c in r.causes if c["subject"] == small[0]]
    assert len(foo) == 1 and foo[0]["verdict"] == "gone" and not foo[0]["fails"]
    assert foo[0]["what"].startswith("gone: no longer runs in the candidate (3 calls/step")
    lines = console_lines(r)
    line = next(x for x in lines if small[0] in x and "no longer runs" in x)
    assert line.split()[0] == "gone", line
    row = next(x for x in render_markdown(r).splitlines() if x.startswith("| ") and f"kernel family `{small[0]}`" in x)
    assert row.startswith("| ⚪ |"), row


def test_a_gone_family_is_reported_and_the_family_it_let_into_the_top_n_fails_nothing(tmp_path):
    """Cast gone from the candidate: the Top-10 changes (Cast left; a family whose ΣDuration did not
    move climbs into it). A family that no longer runs is a change to review, never a regression,
    and one that climbed only because another left took no more of the device: the Top-N set fails
    nothing. Cast is reported as gone, never as an improvement."""
    from perfgate.synth.writer import DEFAULT_FAMILIES
    base = write_capture(tmp_path / "B", SynthSpec())
    cand = write_capture(tmp_path / "C", SynthSpec(families=tuple(f for f in DEFAULT_FAMILIES if f[0] != CAST)))
    code, console, doc, md = _check(base, cand, tmp_path)
    assert code == 0, console
    cast = [c for c in doc["causes"] if c["subject"] == CAST]
    assert len(cast) == 1 and not cast[0]["fails"] and cast[0]["verdict"] == "gone"
    assert cast[0]["what"].startswith("gone: no longer runs in the candidate (10 calls/step, ΣDuration ")
    topn = [c for c in doc["comparisons"] if c["name"] == "kernel.topn" and c["gated"]]
    assert topn and all(c["verdict"] == "unchanged" for c in topn)
    assert all("only left the set is reported" in c["reason"] or "climbed because others left" in c["reason"]
               for c in topn), [c["reason"] for c in topn]
    assert not [x for x in console if CAST in x and x.lstrip().startswith("improved")]


def test_new_family_is_new_unless_a_gated_metric_fails(tmp_path):
    from perfgate.report.summary import console_lines
    from perfgate.synth.writer import DEFAULT_FAMILIES
    base = write_capture(tmp_path / "B", SynthSpec())
    cand = write_capture(tmp_path / "C", SynthSpec(families=DEFAULT_FAMILIES + (FOO,)))
    code, console, doc, _ = _check(base, cand, tmp_path)
    _assert_consistent(doc, console)
    foo = [c for c in doc["causes"] if c["subject"] == FOO[0]]
    assert len(foo) == 1 and foo[0]["what"].startswith("new: runs only in the candidate (3 calls/step, ΣDuration ")
    # its calls per step are gated (exact): they fail, so here it is a regression cause
    assert code == 1 and foo[0]["fails"] and foo[0]["verdict"] == terms.REGRESSION
    # the same change judged with nothing failing is "new", not a regression
    r = _unfailed(base, cand, tmp_path)
    foo = [c for c in r.causes if c["subject"] == FOO[0]]
    assert len(foo) == 1 and foo[0]["verdict"] == "new" and not foo[0]["fails"]
    assert foo[0]["step_delta_us"] > 30   # 3 calls of ~15 us per step more
    line = next(x for x in console_lines(r) if FOO[0] in x and "runs only in the candidate" in x)
    assert line.split()[0] == "new", line


def test_a_part_whose_families_did_not_change_is_explained_by_the_family_that_did(ascend, tmp_path):
    """raw msprof (vllm_ascend_msprof L2Cache) with one OnesLike row's Task Duration set to N/A:
    that row is left out, OnesLike loses a call and 8 us/step, and MatMul's share rises. The failing
    cause is the row left out (capture quality); OnesLike is reported with its lost call; the MatMul
    share, whose part's own time did not move, is no symptom, and GroupedMatmul is never a cause (it
    used to be the first: 'REGRESSION ... 26.1 -> 26.1 (+0%)')."""
    import csv
    import shutil
    src = next((ascend / "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache").glob("PROF_*"))
    base, cand = tmp_path / "base", tmp_path / "cand"
    shutil.copytree(src, base)
    shutil.copytree(src, cand)
    f = next((cand / "mindstudio_profiler_output").glob("op_summary_*.csv"))
    with open(f, newline="", encoding="utf-8-sig") as fh:
        head, *rows = list(csv.reader(fh))
    assert "OnesLike" in rows[1][head.index("Op Name")] if "Op Name" in head else True
    rows[1][head.index("Task Duration(us)")] = "N/A"
    with open(f, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([head, *rows])
    code, console, doc, _ = _check(base, cand, tmp_path)
    assert code == 1
    _assert_consistent(doc, console)
    owner = {k: c["subject"] for c in doc["causes"] for k in c["explains"]}
    assert not [k for k in owner if k.startswith("share.category{category=MatMul")], owner   # its own time did not move
    assert doc["causes"][0]["kind"] == "capture quality" and doc["causes"][0]["fails"]        # the row left out
    ones = next(c for c in doc["causes"] if "OnesLike" in c["subject"])
    assert not ones["fails"] and "calls 2 -> 1/step" in ones["what"]
    assert not [c for c in doc["causes"] if "GroupedMatmul" in c["subject"]]
