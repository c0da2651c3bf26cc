"""Repeated-capture check output: every re-judged reason keeps its subject and view tag, the
step-count note describes the pooled two-gate test, and a gated metric without per-step
samples (share.family) says it was judged on medians by the single-capture tolerance."""
import numpy as np

from perfgate import terms
from perfgate.compare import compare_fingerprints, config_notes
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key
from perfgate.compare.stats import NO_SAMPLES_NOTE

CONFIG = {"world_size": 2, "ranks": [0, 1], "type_available": True, "core_available": True,
          "has_comm_json": True, "categories_digest": "x", "family_suffix": "s", "top_n": 10,
          "operator_digest": "o"}


def mv(name, value, unit, view, samples=None, runs=1, **labels):
    key = metric_key(name, **labels, view=view)
    return key, MetricValue(key=key, name=name, labels=dict(labels, view=view), value=value, unit=unit,
                            evidence="e", context={"runs": runs}, samples=samples)


def side(scale, runs, steps):
    rng = np.random.default_rng(int(scale * 100) + runs)
    comp = list(800.0 * scale * (1 + 0.01 * rng.standard_normal(steps * runs)))
    ms = [mv("step.computing_us", float(np.median(comp)), "us", v, samples=comp, runs=runs) for v in ("rank0", "p50")]
    ms.append(mv("share.family", 0.40 * scale, "ratio", "p50", runs=runs, family="MatMul"))
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t",
                       provenance={"source": "mem", "steps": {"0": [str(i) for i in range(steps * runs)]}},
                       config=dict(CONFIG, captures=runs), metrics=dict(ms))


def test_reasons_keep_subject_and_view_tag(policy):
    cmps, _ = compare_fingerprints(side(1.0, 3, 10), side(1.06, 3, 6), policy)
    by = {c.key: c for c in cmps}
    p50, r0 = by["step.computing_us{view=p50}"], by["step.computing_us{view=rank0}"]
    assert p50.verdict == r0.verdict == terms.UNSURE                  # 3 vs 3 runs: too few
    # the registry's description holds a colon ("Computing: merged ..."): it is kept whole
    assert p50.reason.startswith("Computing: merged compute intervals per step [p50]: unsure: 3 vs 3 run(s)")
    assert r0.reason.startswith("Computing: merged compute intervals per step [rank0]: unsure: ")


def test_step_count_note_names_the_pooled_test(policy):
    many = config_notes(side(1.0, 3, 10), side(1.0, 3, 6))
    (note,) = [n for n in many if n.startswith("step count differs")]
    assert "[30]" in note and "[18]" in note and "over 3 capture(s)" in note
    assert "interval of their shift over all pooled step samples" in note and "per-step medians are compared" not in note
    (single,) = [n for n in config_notes(side(1.0, 1, 10), side(1.0, 1, 6)) if n.startswith("step count")]
    assert single.endswith("per-step medians are compared")


def test_family_share_without_samples_says_how_it_was_judged(policy):
    cmps, _ = compare_fingerprints(side(1.0, 3, 10), side(1.06, 3, 10), policy)
    fam = {c.key: c for c in cmps}["share.family{family=MatMul,view=p50}"]
    assert fam.verdict == terms.REGRESSION and not fam.stats          # +2.4 pp > ±2 pp, tolerance rule
    assert NO_SAMPLES_NOTE.format(rb=3, rc=3) in fam.reason and "±2 pp" in fam.reason
    one, _ = compare_fingerprints(side(1.0, 1, 10), side(1.06, 1, 10), policy)
    assert "no per-step samples" not in {c.key: c for c in one}["share.family{family=MatMul,view=p50}"].reason
