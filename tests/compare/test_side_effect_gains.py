"""No side effect is called a gain (real Level1 -> Level2 captures):
``comm.wait_ratio`` fell 21.6 pp on rank 0 because rank 1 took over the waiting (p50 +21.3 pp),
and the rank skews of families at 0.02 % of the device's ΣDuration swung 28 % -> 4 % and were
called better."""
from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.app.gate import check, save_baseline
from perfgate.model import MetricValue, metric_key
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from tests.compare.test_verdict_rules import fp, mv


def _by_key(base, cand, pol):
    return {c.key: c for c in compare_fingerprints(base, cand, pol)[0]}


def test_a_gain_in_one_view_with_a_regression_in_another_is_not_judged():
    pol = load_policy(None)   # comm.wait_ratio informational, ±10 pp
    base = fp(mv("comm.wait_ratio", 0.62, unit="ratio", view="rank0"), mv("comm.wait_ratio", 0.33, unit="ratio", view="p50"))
    cand = fp(mv("comm.wait_ratio", 0.40, unit="ratio", view="rank0"), mv("comm.wait_ratio", 0.54, unit="ratio", view="p50"))
    got = _by_key(base, cand, pol)
    r0, p50 = got["comm.wait_ratio{view=rank0}"], got["comm.wait_ratio{view=p50}"]
    assert p50.verdict == terms.REGRESSION
    assert r0.verdict == terms.INCOMPARABLE and not r0.fails
    assert "not judged a gain: the p50 view of comm.wait_ratio moved the other way (+21.00 pp)" in r0.reason


def test_a_gain_in_every_view_stays_a_gain():
    pol = load_policy(None)
    base = fp(mv("comm.wait_ratio", 0.62, unit="ratio", view="rank0"), mv("comm.wait_ratio", 0.60, unit="ratio", view="p50"))
    cand = fp(mv("comm.wait_ratio", 0.40, unit="ratio", view="rank0"), mv("comm.wait_ratio", 0.41, unit="ratio", view="p50"))
    got = _by_key(base, cand, pol)
    assert {c.verdict for c in got.values() if c.name == "comm.wait_ratio"} == {terms.IMPROVEMENT}


def _skew(value, share_max, family="f"):
    return (mv("rank.skew_ratio", value, unit="ratio", view=None, metric="share.family", family=family),
            mv("share.family", share_max, unit="ratio", view="max", family=family))


def _fp(*pairs):
    ms = []
    for k, v in (x for p in pairs for x in p):
        if k.startswith("rank.skew_ratio"):   # the skew carries no view
            labels = {a: b for a, b in v.labels.items() if a != "view"}
            k = metric_key("rank.skew_ratio", **labels)
            v = MetricValue(key=k, name=v.name, labels=labels, value=v.value, unit=v.unit, caliber=None, tier=2,
                            evidence="e", context={})
        ms.append((k, v))
    return fp(*ms)


def test_the_rank_skew_of_a_negligible_share_is_not_judged():
    pol = load_policy(None)
    got = _by_key(_fp(_skew(0.28, 0.00022)), _fp(_skew(0.04, 0.00018)), pol)
    (s,) = [c for c in got.values() if c.name == "rank.skew_ratio"]
    assert s.verdict == terms.INCOMPARABLE
    assert "below operators.family_min_share 1% on every rank (max 0.022% -> 0.018%)" in s.reason


def test_the_rank_skew_of_a_real_share_is_judged():
    pol = load_policy(None)
    got = _by_key(_fp(_skew(0.28, 0.05)), _fp(_skew(0.04, 0.05)), pol)
    (s,) = [c for c in got.values() if c.name == "rank.skew_ratio"]
    assert s.verdict == terms.IMPROVEMENT


def test_real_level_change_calls_no_moved_wait_a_gain(text_captures, policy, tmp_path):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    got = {c.key: c for c in r.comparisons}
    assert got["comm.wait_ratio{view=rank0}"].verdict == terms.INCOMPARABLE
    assert got["rank.skew_ratio{metric=comm.wait_ratio}"].verdict == terms.INCOMPARABLE
    better = [c for c in r.comparisons if c.verdict == terms.IMPROVEMENT and c.name == "rank.skew_ratio"
              and c.labels.get("metric") == "share.family"]
    assert not better, [c.reason for c in better]


def test_the_rank_skew_of_a_metric_recorded_for_some_families_is_not_new():
    """pipe.memory_bound is recorded above family_min_share only; the demo's Cast family crossed
    it (twice the calls) and its rank skew read "new: only in the candidate"."""
    pol = load_policy(None)
    k = metric_key("rank.skew_ratio", metric="pipe.memory_bound", family="aclnnCast_CastAiCore_Cast")
    v = MetricValue(key=k, name="rank.skew_ratio", labels={"metric": "pipe.memory_bound",
                    "family": "aclnnCast_CastAiCore_Cast"}, value=0.0, unit="ratio", caliber=None, tier=2,
                    evidence="e", context={})
    got = _by_key(fp(), fp((k, v)), pol)
    assert got[k].verdict == terms.INCOMPARABLE and "family_min_share" in got[k].reason
