"""Repeated captures: the two-gate rule, unsure, Benjamini-Hochberg, merge, attribution,
calibrate, reports. Hand-checked small cases in memory; one seeded set of synthetic captures
(noise model on) for the end-to-end 5 vs 5 / 2 vs 2 checks."""
import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from perfgate import terms
from perfgate.compare.attribution import family_deltas
from perfgate.cli import main
from perfgate.compare import compare_fingerprints, summarize
from perfgate.errors import PolicyError, UsageError
from perfgate.app.gate import check, load_checked_policy, save_baseline
from perfgate.metrics.repeat import merge_fingerprints
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key
from perfgate.policy import load_policy
from perfgate.report import render_junit, render_markdown
from perfgate.compare.stats import effect, effect_ci, min_exact_p, mwu_p, runs_needed
from perfgate.store.baselines import BaselineStore
from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture

CONFIG = {"world_size": 2, "ranks": [0, 1], "type_available": True, "core_available": True,
          "has_comm_json": True, "categories_digest": "x", "family_suffix": "s", "top_n": 10}
NOISE = dict(ranks=1, steps=20, jitter=0.05, outlier_prob=0.01, comm_drift=2.0)
SLOWER = dict(slowdown={f[0]: 1.1 for f in DEFAULT_FAMILIES}, comm_us=1650.0, gap_us=3.3)  # all 1.1x


def mv(name, value, unit="us", view="p50", samples=None, runs=1, **labels):
    key = metric_key(name, **labels, view=view)
    return key, MetricValue(key=key, name=name, labels=dict(labels, view=view), value=value, unit=unit,
                            evidence="e", context={"runs": runs}, samples=samples)


def fp(*metrics, captures=1):
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={"source": "mem"},
                       config=dict(CONFIG, captures=captures), metrics=dict(metrics))


def step_side(values, runs):
    return fp(mv("step.time_us", float(np.median(values)), samples=list(values), runs=runs), captures=runs)


@pytest.fixture(scope="module")
def policy():
    """The default policy with step time's repeated-capture tolerance at 5 %: these tests pin the
    statistics' mechanics at hand-chosen shifts, not the default's figure."""
    from dataclasses import replace as dc_replace

    from perfgate.policy import Tolerance
    p = load_policy()
    tol = dict(p.statistics["tolerances"], **{"step.time_us": Tolerance("rel", 0.05)})
    return dc_replace(p, statistics=p.statistics.with_values({"tolerances": tol}))


# ------------------------------------------------------------------ exact small-sample facts
def test_min_exact_p_and_runs_needed_hand_values():
    assert min_exact_p(2, 2) == pytest.approx(1 / 3)          # 2 / C(4,2)
    assert min_exact_p(5, 5) == pytest.approx(2 / 252)        # 2 / C(10,5)
    assert min_exact_p(3, 3) == pytest.approx(0.1)
    assert runs_needed(2, 2, 0.05) == (4, 4)                   # 2/C(8,4) = 0.029; 3 vs 3 gives 0.1
    assert runs_needed(5, 1, 0.05) == (5, 3)                   # 2/C(8,3) = 0.036; (6,2) gives 0.071
    assert runs_needed(5, 5, 0.05) == (5, 5)
    with pytest.raises(ValueError):
        runs_needed(2, 2, 1.5)


def test_hodges_lehmann_shift_hand_computed():
    # pairwise cand - base of [1,2,3] vs [2,3,4]: -1,0,0,1,1,1,2,2,3 -> median 1
    assert effect([1, 2, 3], [2, 3, 4], "diff") == 1.0
    assert effect([100, 100, 100], [110, 110, 110], "rel") == pytest.approx(0.10)
    assert effect([100, 200], [100, 200], "rel") == pytest.approx(0.0)


def test_moses_interval_covers_the_true_shift_and_matches_the_test():
    rng = np.random.default_rng(3)
    base = rng.uniform(0.35, 0.45, 60)
    cand = rng.uniform(0.35, 0.45, 60) + 0.02
    lo, hi = effect_ci(base, cand, "diff", confidence=0.95)
    assert lo < 0.02 < hi and hi - lo < 0.03
    assert mwu_p(base, cand) < 0.05 and lo > 0            # significant <=> interval excludes 0
    same = rng.uniform(0.35, 0.45, 60)
    lo0, hi0 = effect_ci(base, same, "diff")
    assert lo0 < 0 < hi0 and mwu_p(base, same) > 0.05


# ------------------------------------------------------------------ the two-gate verdicts
def _cmp(base, cand, policy):
    cmps, _ = compare_fingerprints(base, cand, policy)
    return {c.key: c for c in cmps}["step.time_us{view=p50}"]


def test_clear_shift_beyond_tolerance_is_a_regression(policy):
    rng = np.random.default_rng(1)
    c = _cmp(step_side(1000 * rng.lognormal(0, 0.02, 50), 5),
             step_side(1100 * rng.lognormal(0, 0.02, 50), 5), policy)
    assert c.verdict == terms.REGRESSION and c.fails
    assert c.stats["ci"][0] > 0.05                                   # whole interval beyond +5 %
    assert 0.08 < c.stats["effect"] < 0.12
    assert "entirely beyond the tolerance" in c.reason


def test_significant_but_small_change_is_unchanged(policy):
    rng = np.random.default_rng(2)
    c = _cmp(step_side(1000 * rng.lognormal(0, 0.005, 50), 5),
             step_side(1010 * rng.lognormal(0, 0.005, 50), 5), policy)
    assert 0 < c.stats["ci"][0] and c.stats["ci"][1] < 0.05         # real, but +1 % < 5 %
    assert c.verdict == terms.UNCHANGED and not c.fails
    assert "within the tolerance" in c.reason


def test_interval_straddling_the_tolerance_is_unsure_with_runs_hint(policy):
    rng = np.random.default_rng(4)
    c = _cmp(step_side(1000 * rng.lognormal(0, 0.05, 40), 4),
             step_side(1050 * rng.lognormal(0, 0.05, 40), 4), policy)
    assert c.verdict == terms.UNSURE and not c.fails
    assert c.stats["ci"][0] < 0.05 < c.stats["ci"][1]
    assert "runs per side" in c.reason or "cannot decide" in c.reason


def test_too_few_runs_is_unsure_never_pass_unless_every_run_pair_decides(policy):
    """2 vs 2 runs cannot reach alpha in an exact test. A change that straddles the tolerance
    across the run pairs is unsure, with the runs needed; a doubling that every pairing of a
    baseline run with a candidate run shows beyond the tolerance is a regression, as a
    single-capture check of any one pair says (a baseline of several runs never weakens the
    gate: a doubled step time was UNSURE, exit 0)."""
    base = step_side([1000.0] * 10 + [1001.0] * 10, 2)
    cand = step_side([1050.0] * 10 + [1150.0] * 10, 2)              # +5 % and +15 %: straddles 10 %
    c = _cmp(base, cand, policy)
    assert c.verdict == terms.UNSURE and not c.fails
    assert c.stats["runs_needed"] == {"base": 4, "cand": 4}
    assert "4 baseline and 4 candidate runs are needed (2 + 2 more)" in c.reason
    assert summarize([c]) == terms.UNSURE_STATUS
    def runs_of_ten(side):   # the samples' split into runs, as merge_fingerprints records it
        for m in side.metrics.values():
            m.context["run_sizes"] = [10, 10]
        return side
    assert _cmp(base, step_side([2000.0] * 10 + [2001.0] * 10, 2), policy).verdict == terms.UNSURE  # runs unknown
    base = runs_of_ten(base)
    assert _cmp(base, runs_of_ten(step_side([1050.0] * 10 + [1150.0] * 10, 2)), policy).verdict == terms.UNSURE
    doubled = _cmp(base, runs_of_ten(step_side([2000.0] * 10 + [2001.0] * 10, 2)), policy)
    assert doubled.verdict == terms.REGRESSION and doubled.fails
    assert doubled.stats["run_pair_effects"] == pytest.approx([0.998, 1.001], abs=1e-3)
    assert "whichever runs are compared" in doubled.reason


def test_single_captures_keep_the_tolerance_rule(policy):
    base = step_side([1000.0, 1001.0, 999.0], 1)
    cand = step_side([1080.0, 1081.0, 1079.0], 1)                    # +8 % < 10 % single tolerance
    c = _cmp(base, cand, policy)
    assert c.verdict == terms.UNCHANGED and c.stats == {}


def test_the_interval_decides_without_a_p_value_gate_and_counts_stay_exact(policy):
    """Many metrics in one check do not make a clear shift "not significant": the interval alone
    decides (a Benjamini-Hochberg gate over every gated metric let Computing +15.6 % at 5 v 5 runs
    pass). Shares with samples are not judged here but through their parts' own time; counts
    stay exact comparisons."""
    rng = np.random.default_rng(5)
    base = list(1000 * np.exp(rng.normal(0, 0.02, 5)))
    cand = list(1150 * np.exp(rng.normal(0, 0.02, 5)))
    ms_b = [mv("step.time_us", float(np.median(base)), samples=base, runs=5),
            mv("kernel.calls_per_step", 4.0, unit="calls", family="Add", runs=5)]
    ms_c = [mv("step.time_us", float(np.median(cand)), samples=cand, runs=5),
            mv("kernel.calls_per_step", 5.0, unit="calls", family="Add", runs=5)]
    for i, cat in enumerate(["FA", "MatMul", "Vector", "Comm"]):
        vals = list(rng.normal(0.2, 0.01, 5))
        ms_b.append(mv("share.category", float(np.median(vals)), unit="ratio", samples=vals, runs=5, category=cat))
        ms_c.append(mv("share.category", float(np.median(vals)), unit="ratio", samples=vals, runs=5, category=cat))
    cmps, _ = compare_fingerprints(fp(*ms_b, captures=5), fp(*ms_c, captures=5), policy)
    by = {c.key: c for c in cmps}
    st = by["step.time_us{view=p50}"]
    assert st.verdict == terms.REGRESSION and st.stats["ci"][0] > 0.05 and "q" not in st.stats
    assert all("ci" not in c.stats for c in cmps if c.name == "share.category")
    calls = by["kernel.calls_per_step{family=Add,view=p50}"]
    assert calls.verdict == terms.REGRESSION and calls.stats == {}


def test_old_baseline_without_samples_loads_and_compares(policy):
    key, m = mv("step.time_us", 1000.0)
    d = Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="0", provenance={}, config=CONFIG,
                    metrics={key: m}).to_dict()
    assert "samples" not in d["metrics"][key]                        # JSON stays as before
    old = Fingerprint.from_dict(json.loads(json.dumps(d)))
    cand = step_side([1200.0] * 20 + [1201.0] * 20, 4)
    c = _cmp(old, cand, policy)
    assert c.verdict == terms.REGRESSION and c.stats == {}           # +20 % by tolerance


# ------------------------------------------------------------------ merge and attribution
def test_merge_pools_samples_and_keeps_counts_exact():
    a = fp(mv("step.time_us", 10.0, samples=[9.0, 10.0, 11.0]), mv("kernel.calls_per_step", 4.0, unit="calls", family="A"))
    b = fp(mv("step.time_us", 20.0, samples=[19.0, 20.0, 21.0]), mv("kernel.calls_per_step", 6.0, unit="calls", family="A"))
    m = merge_fingerprints([a, b])
    st = m.metrics["step.time_us{view=p50}"]
    assert st.samples == [9.0, 10.0, 11.0, 19.0, 20.0, 21.0] and st.value == 15.0
    assert st.context["runs"] == 2 and st.context["run_values"] == [10.0, 20.0]
    assert m.metrics["kernel.calls_per_step{family=A,view=p50}"].value == 4.0   # lower median
    assert m.config["captures"] == 2
    other = fp(mv("step.time_us", 1.0))
    other = Fingerprint(**{**other.__dict__, "config": dict(other.config, world_size=4)})
    with pytest.raises(UsageError, match="world_size"):
        merge_fingerprints([a, other])


def test_family_deltas_rank_excess_beyond_the_device_first():
    base = fp(mv("kernel.calls_per_step", 16.0, unit="calls", family="MatMul"),
              mv("kernel.time_us", 4000.0, family="MatMul"),
              mv("kernel.calls_per_step", 10.0, unit="calls", family="Cast"),
              mv("kernel.time_us", 80.0, family="Cast"))
    cand = fp(mv("kernel.calls_per_step", 16.0, unit="calls", family="MatMul"),
              mv("kernel.time_us", 4400.0, family="MatMul"),
              mv("kernel.calls_per_step", 20.0, unit="calls", family="Cast"),
              mv("kernel.time_us", 160.0, family="Cast"),
              mv("kernel.calls_per_step", 2.0, unit="calls", family="Gelu"),
              mv("kernel.time_us", 30.0, family="Gelu"))
    rows = family_deltas(base, cand, "p50")
    assert [r["family"] for r in rows] == ["MatMul", "Cast", "Gelu"]
    assert rows[1]["calls_base"] == 10 and rows[1]["calls_cand"] == 20 and rows[1]["delta_us"] == 80.0
    assert rows[2]["calls_base"] == 0 and rows[2]["sum_dur_base_us"] == 0.0 and rows[2]["delta_us"] == 30.0
    # on a device 1.1x slower, MatMul's +10 % is the device's: Cast's doubled calls lead
    rows = family_deltas(base, cand, "p50", scale=1.1)
    assert [r["family"] for r in rows] == ["Cast", "Gelu", "MatMul"] and rows[2]["excess_us"] == pytest.approx(0.0)


def test_calibrate_proposes_k_times_robust_sigma(policy):
    # per-capture step time 100, 102, 98, 101, 99: MAD 1 -> sigma 1.4826 % -> 3 sigma = 4.45 %
    fps = [fp(mv("step.time_us", v, samples=[v], view=view)) for v in (100.0, 102.0, 98.0, 101.0, 99.0)
           for view in ("p50",)]
    from perfgate.compare.calibrate import calibrated_policy_text, propose_tolerances
    (p,) = [x for x in propose_tolerances(fps, policy) if x["metric"] == "step.time_us"]
    assert p["sigma"] == pytest.approx(0.014826)
    assert p["proposed_stat"] == pytest.approx(0.045) and p["verdict_stat"] == "could be tightened"
    assert p["proposed_single"] == pytest.approx(0.063) and p["verdict_single"] == "could be tightened"
    # step.time_us is lower-is-better: one-sided 95 % bound (z 1.645) + 99 % power (z 2.326):
    # 4.5 % + 3.971 x 1.4826 % x sqrt(2/5) = 8.22 % with 5 runs per side; 6.36 % with 20
    assert p["detectable"][5] == pytest.approx(0.045 + 3.9711 * 0.014826 * (2 / 5) ** 0.5, rel=1e-3)
    assert p["detectable"][20] == pytest.approx(0.0636, abs=2e-4)
    assert p["detectable"][5] > p["detectable"][10] > p["detectable"][20] > p["proposed_stat"]
    doc = yaml.safe_load(calibrated_policy_text(policy, [p]))
    assert doc["statistics"]["tolerances"]["step.time_us"] == {"rel": 0.045}
    assert doc["metrics"]["step.time_us"]["tolerance"] == {"rel": 0.063}
    with pytest.raises(UsageError, match="at least 3"):
        propose_tolerances(fps[:2], policy)


def test_statistics_policy_errors_name_the_key(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\nstatistics: {alpha: 1.5}\n")
    with pytest.raises(PolicyError, match="statistics.alpha"):
        load_policy(p)
    p.write_text("version: 1\nstatistics: {tolerances: {step.time_us: {percent: 3}}}\n")
    with pytest.raises(PolicyError, match="statistics.tolerances.step.time_us"):
        load_policy(p)
    p.write_text("version: 1\nstatistics: {tolerances: {step.tme_us: {rel: 0.03}}}\n")
    with pytest.raises(PolicyError, match="step.tme_us"):
        load_checked_policy(p)


# ------------------------------------------------------------------ end to end (must-show 3)
@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """5 baseline and 5 candidate synthetic captures (noise model on; in the candidate every
    kernel, collective and launch gap is 1.1x longer: +10 % step time over 20 steps each)."""
    root = tmp_path_factory.mktemp("repeated")
    base = [write_capture(root / f"b{i}", SynthSpec(seed=10 + i, **NOISE)) for i in range(5)]
    cand = [write_capture(root / f"c{i}", SynthSpec(seed=20 + i, **SLOWER, **NOISE))
            for i in range(5)]
    return root, base, cand


@pytest.mark.slow
def test_five_vs_five_device_wide_slowdown_is_a_regression_of_the_device(repeated, policy, tmp_path):
    """Every kernel, collective and launch gap 1.1x longer at 5 v 5: step time and Computing
    regress by their intervals, the one cause is the device (no kernel family moved beyond it, so no
    family is listed as having grown), and the waterfall adds up to the step-time change."""
    root, base, cand = repeated
    store = BaselineStore(tmp_path / "bl")
    save_baseline(base, "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    res = check(cand, "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    assert res.status == terms.FAIL and res.exit_code == 1
    by = {c.key: c for c in res.comparisons}
    st = by["step.time_us{view=p50}"]
    assert st.verdict == terms.REGRESSION and st.fails
    assert st.stats["runs_base"] == 5 and st.stats["n_base"] == 100 and "q" not in st.stats
    assert 0.07 < st.stats["effect"] < 0.13 and st.stats["ci"][0] > 0.05
    assert not st.attribution and "beyond the device's speed" not in st.reason
    assert by["step.computing_us{view=p50}"].verdict == terms.REGRESSION
    failing = [x for x in res.causes if x["fails"]]
    assert failing and all(x["kind"] == "device" for x in failing), failing
    wf = res.detail["waterfall"]
    assert sum(i["us"] for i in wf["items"]) == pytest.approx(wf["step_delta_us"], abs=1e-6)
    md = render_markdown(res)
    assert "device" in md and "REGRESSION" in md


@pytest.fixture(scope="module")
def same_job(tmp_path_factory):
    """4 synthetic captures of one job (the noise model with a milder run-to-run communication
    drift than ``repeated``: its exposed-communication ratio stays within ±5 pp run to run)."""
    root = tmp_path_factory.mktemp("same_job")
    return [write_capture(root / f"s{i}", SynthSpec(seed=10 + i, **dict(NOISE, comm_drift=1.0))) for i in range(4)]


@pytest.mark.slow
def test_two_vs_two_is_decided_run_pair_by_run_pair(same_job, repeated, policy, tmp_path):
    """2 vs 2 runs of one job: too few runs for an interval, so every pairing of a baseline run with
    a candidate run is judged as a single capture would be. The same job's runs agree within the
    tolerances: PASS (three or two runs a side can pass). A candidate 1.1x slower, every pairing
    of runs beyond the 10 % single-capture tolerance of step time: a regression, as a check of any
    one pair."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(same_job[:2], "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    res = check(same_job[2:], "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    assert res.exit_code == 0 and res.status in (terms.PASS, terms.UNSURE_STATUS)
    st = {c.key: c for c in res.comparisons}["step.time_us{view=p50}"]
    assert st.verdict in (terms.UNCHANGED, terms.UNSURE) and st.stats["n_base"] == 40
    if st.verdict == terms.UNCHANGED:
        assert "entirely within the single-capture tolerance" in st.reason and "whichever runs" in st.reason
    else:
        assert st.stats["runs_needed"] == {"base": 4, "cand": 4} and "2 + 2 more" in st.reason
    root, base, cand = repeated
    save_baseline(base[:2], "slow", policy=policy, store=store, env={}, workers=1, with_trace=False)
    res = check(cand[:2], "slow", policy=policy, store=store, env={}, workers=1, with_trace=False)
    assert res.exit_code == 1
    st = {c.key: c for c in res.comparisons}["step.time_us{view=p50}"]
    assert st.verdict == terms.REGRESSION and "whichever runs are compared" in st.reason
    assert st.stats["run_pair_effects"][0] > 0.10 and st.stats["runs_needed"] == {"base": 4, "cand": 4}


@pytest.mark.slow
def test_cli_several_captures_and_calibrate(repeated, same_job, tmp_path):
    root, base, cand = repeated
    r = CliRunner()
    bl = str(tmp_path / "bl")
    out = r.invoke(main, ["baseline", "save", "--name", "m", *map(str, same_job[:2]), "--baseline-dir", bl, "--no-trace"])
    assert out.exit_code == 0, out.output
    out = r.invoke(main, ["check", "--baseline", "m", *map(str, same_job[2:]), "--baseline-dir", bl,
                          "--out", str(tmp_path / "o"), "--no-trace"])
    assert out.exit_code == 0 and ("PASS" in out.output or "UNSURE" in out.output), out.output
    res = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert res["verdict"] in ("PASS", "UNSURE") and res["counts"]["gated_regressions"] == 0
    pol = tmp_path / "cal.yaml"
    out = r.invoke(main, ["calibrate", *map(str, base[:3]), "--out", str(pol), "--no-trace"])
    assert out.exit_code == 0, out.output
    assert "step.time_us" in out.output and ("could be tightened" in out.output or "tighter than" in out.output)
    cal = load_checked_policy(pol)                                     # the written policy loads
    tol = cal.statistics["tolerances"]["step.time_us"]
    assert tol.kind == "rel" and tol.value >= 0.005
    assert yaml.safe_load(pol.read_text())["metrics"]["step.time_us"]["tolerance"]["rel"] > tol.value
    out = r.invoke(main, ["calibrate", *map(str, base[:2]), "--out", str(tmp_path / "x.yaml"), "--no-trace"])
    assert out.exit_code == 2 and "at least 3" in out.output and not (tmp_path / "x.yaml").exists()


def test_real_level1_level2_are_not_repeated_runs(text_captures, policy, tmp_path):
    """The real Level1 and Level2 runs of one job are two job configurations (profiler level),
    not two repeats of one side: baseline save and check refuse to pool them (exit 2) naming
    both captures and the facet, nothing stored (as calibrate)."""
    store = BaselineStore(tmp_path / "bl")
    caps = [text_captures / "level1", text_captures / "level2"]
    with pytest.raises(UsageError) as e:
        save_baseline(caps, "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    assert e.value.exit_code == 2
    assert (f"capture 2 ({caps[1].resolve()}) differs from capture 1 ({caps[0].resolve()}) in profiler_level: 'Level1' vs 'Level2'; "
            f"repeated captures of one side must be the same job") in e.value.message
    assert not (tmp_path / "bl").exists() or not list((tmp_path / "bl").glob("*.json"))   # nothing stored
    save_baseline(caps[:1], "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    with pytest.raises(UsageError, match="in profiler_level: 'Level2' vs 'Level1'"):
        check(list(reversed(caps)), "main", policy=policy, store=store, env={}, workers=1, with_trace=False)
    with pytest.raises(UsageError, match="type_available: False vs True"):   # Level0: Type is N/A
        check([text_captures / "level0", caps[0]], "main", policy=policy, store=store, env={}, workers=1, with_trace=False)


def test_other_aic_metrics_is_another_job_configuration(tmp_path):
    """Two repeated synthetic captures of one side, one PipeUtilization and one Memory aic_metrics:
    check exits 2 naming both captures and aic_metrics; a pair of one group merges."""
    a = write_capture(tmp_path / "a", SynthSpec(seed=1))
    b = write_capture(tmp_path / "b", SynthSpec(seed=2, aic_metrics="ACL_AICORE_MEMORY_BANDWIDTH"))
    c = write_capture(tmp_path / "c", SynthSpec(seed=3))
    bl = tmp_path / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "m", str(a), str(c), "--baseline-dir", str(bl)], env={})
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["check", "--baseline", "m", str(c), str(b), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / "o")], env={})
    assert r.exit_code == 2, r.output
    assert (f"capture 2 ({b.resolve()}) differs from capture 1 ({c.resolve()}) in aic_metrics: 'ACL_AICORE_PIPE_UTILIZATION' vs "
            f"'ACL_AICORE_MEMORY_BANDWIDTH'") in r.output
    assert not (tmp_path / "o").exists()


def test_directional_metric_reads_one_sided_bounds_exact_reads_two_sided(policy):
    """A shift whose one-sided 95 % lower bound clears the 5 % tolerance while the two-sided
    95 % interval still touches it: REGRESSION for step.time_us (lower is better: "worse
    beyond tolerance?" is one question), UNSURE when the same metric is declared exact (a
    move either way would count, so both ends of the 95 % interval are read)."""
    from dataclasses import replace as dc_replace

    from perfgate.compare.stats import interval_level
    assert interval_level(0.95, terms.LOWER_IS_BETTER) == (pytest.approx(0.90), "one-sided 95% bounds")
    assert interval_level(0.95, terms.EXACT)[0] == 0.95
    rng = np.random.default_rng(3)
    base = list(1000 * np.exp(rng.normal(0, 0.05, 50)))
    noise = np.exp(rng.normal(0, 0.05, 50))
    chosen = None
    for x in np.arange(0.05, 0.12, 0.0005):                  # the smallest shift that splits the two readings
        cand = list(1000 * (1 + x) * noise)
        lo90 = effect_ci(base, cand, "rel", confidence=0.90)[0]
        lo95 = effect_ci(base, cand, "rel", confidence=0.95)[0]
        if lo90 > 0.05 >= lo95:
            chosen = cand
            break
    assert chosen is not None
    b, c = step_side(base, runs=5), step_side(chosen, runs=5)
    got = {x.key: x for x in compare_fingerprints(b, c, policy)[0]}["step.time_us{view=p50}"]
    assert got.verdict == terms.REGRESSION and got.stats["ci_level"] == pytest.approx(0.90)
    assert "one-sided 95% bounds" in got.reason
    exact_rule = dc_replace(policy.rules["step.time_us"], direction=terms.EXACT)
    exact = dc_replace(policy, rules=dict(policy.rules, **{"step.time_us": exact_rule}))
    got = {x.key: x for x in compare_fingerprints(b, c, exact)[0]}["step.time_us{view=p50}"]
    assert got.verdict == terms.UNSURE and got.stats["ci_level"] == 0.95 and "95% CI" in got.reason


def test_design_effect_sees_runs_that_move_together_and_not_the_side_difference():
    from perfgate.compare.stats import adjusted_p, design_effect
    rng = np.random.default_rng(11)
    sizes = [40] * 5
    iid_b, iid_c = rng.normal(100, 1, 200), rng.normal(100, 1, 200)
    deff, icc = design_effect(iid_b, iid_c, sizes, sizes, "diff")
    assert 1.0 <= deff < 1.5 and icc < 0.02                      # independent steps: about 1
    shifted_c = iid_c + 50                                        # a pure baseline/candidate shift ...
    assert design_effect(iid_b, shifted_c, sizes, sizes, "diff") == (deff, icc)   # ... is not clustering
    run_b = np.repeat(rng.normal(0, 1, 5), 40)                    # each run offset by N(0, 1): ICC 0.5
    run_c = np.repeat(rng.normal(0, 1, 5), 40)
    deff, icc = design_effect(iid_b + run_b, iid_c + run_c, sizes, sizes, "diff")
    assert 0.2 < icc < 0.8 and deff == pytest.approx(1 + 39 * icc)
    # one group per side (no run sizes known) or too few runs: no correction
    assert design_effect(iid_b, iid_c, [200], [200], "diff") == (1.0, 0.0)
    # the p correction: the normal score shrinks by sqrt(deff); deff 1 leaves p alone
    assert adjusted_p(0.01, 1.0) == 0.01
    assert adjusted_p(0.01, 4.0) == pytest.approx(2 * (1 - sps_norm_cdf(2.5758 / 2)), rel=1e-3)
    lo1, hi1 = effect_ci(list(iid_b), list(iid_c + 1), "diff")
    lo4, hi4 = effect_ci(list(iid_b), list(iid_c + 1), "diff", deff=4.0)
    assert lo4 < lo1 < hi1 < hi4


def sps_norm_cdf(x):
    from scipy.stats import norm
    return float(norm.cdf(x))


def test_capture_level_drift_is_not_a_regression_of_many_steps(policy):
    """Five runs per side whose steps share a per-run offset of ~3 % (one device allocation per
    capture), the candidate's runs 6 % slower on average (offsets drawn by hand): pooled as 200
    independent steps the interval [+5.7 %, +6.7 %] clears the 5 % tolerance (a regression);
    with the design effect (~36) it is [+3 %, +9.9 %]: unsure, not a regression from 5 runs."""
    rng = np.random.default_rng(5)
    base = np.concatenate([1000 * np.exp(rng.normal(0, 0.01, 40) + o) for o in (0.0, 0.03, -0.03, 0.01, -0.01)])
    cand = np.concatenate([1000 * np.exp(rng.normal(0, 0.01, 40) + o) for o in (0.11, 0.05, 0.08, 0.02, 0.05)])
    b = fp(mv("step.time_us", float(np.median(base)), samples=list(base), runs=5), captures=5)
    c = fp(mv("step.time_us", float(np.median(cand)), samples=list(cand), runs=5), captures=5)
    for side in (b, c):
        side.metrics["step.time_us{view=p50}"].context["run_sizes"] = [40] * 5
    got = {x.key: x for x in compare_fingerprints(b, c, policy)[0]}["step.time_us{view=p50}"]
    assert got.stats["design_effect"] > 10 and got.verdict != terms.REGRESSION
    assert "move together" in got.reason
    # the same samples with the run structure unknown (one group each): judged as 200 steps
    for side in (b, c):
        del side.metrics["step.time_us{view=p50}"].context["run_sizes"]
    got = {x.key: x for x in compare_fingerprints(b, c, policy)[0]}["step.time_us{view=p50}"]
    assert got.stats["design_effect"] == 1.0 and got.verdict == terms.REGRESSION   # what the correction prevents
