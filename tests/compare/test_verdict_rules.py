"""Verdict rules: directions (G03), tolerances, new/missing (P07, G06), Top-N slack,
incomparable facets (rank count, Level0, toolchain G07)."""
import pytest

from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key
from perfgate.policy import load_policy

CONFIG = {"world_size": 2, "type_available": True, "core_available": True, "has_comm_json": True,
          "categories_digest": "x", "family_suffix": "s", "top_n": 10}


def mv(name, value, unit="us", view="rank0", caliber=None, tier=2, context=None, **labels):
    key = metric_key(name, **labels, view=view)
    return key, MetricValue(key=key, name=name, labels=dict(labels, view=view), value=value, unit=unit,
                            caliber=caliber, tier=tier, evidence="e", context=context or {})


def fp(*metrics, **config):
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={},
                       config=dict(CONFIG, **config), metrics=dict(metrics))


def one(base, cand, policy):
    cmps, notes = compare_fingerprints(base, cand, policy)
    return {c.key: c for c in cmps}, notes


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    p = tmp_path_factory.mktemp("pol") / "p.yaml"
    p.write_text("""
extends: none
version: 1
gate_views: [rank0, p50]
metrics:
  step.time_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.05}}
  tokens.per_s: {gated: true, direction: higher_is_better, tolerance: {rel: 0.05}}
  bandwidth.gbps: {gated: true, direction: higher_is_better, tolerance: {rel: 0.05}}
  kernel.calls_per_step: {gated: true, direction: lower_is_better, tolerance: {abs: 0}}
  share.category: {gated: true, direction: exact, tolerance: {pp: 5}}
  kernel.topn: {gated: true, direction: exact, tolerance: {abs: 0}}
  comm.elapse_us: {gated: false, direction: lower_is_better, tolerance: {rel: 0.1}}
  step.comm_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.1}}
""")
    return load_policy(p)


def test_directions_g03(pol):
    """step time 100 -> 90 ms improvement; throughput 1000 -> 900 regression; bandwidth 20 -> 25 improvement."""
    b = fp(mv("step.time_us", 100_000.0), mv("tokens.per_s", 1000.0, unit="tok/s"),
           mv("bandwidth.gbps", 20.0, unit="GB/s"))
    c = fp(mv("step.time_us", 90_000.0), mv("tokens.per_s", 900.0, unit="tok/s"),
           mv("bandwidth.gbps", 25.0, unit="GB/s"))
    r, _ = one(b, c, pol)
    assert r["step.time_us{view=rank0}"].verdict == terms.IMPROVEMENT
    assert r["tokens.per_s{view=rank0}"].verdict == terms.REGRESSION and r["tokens.per_s{view=rank0}"].fails
    assert r["tokens.per_s{view=rank0}"].delta_rel == pytest.approx(-0.10)
    assert r["bandwidth.gbps{view=rank0}"].verdict == terms.IMPROVEMENT


def test_tolerance_edges_and_views(pol):
    b = fp(mv("step.time_us", 100.0), mv("step.time_us", 100.0, view="max"))
    c = fp(mv("step.time_us", 105.0), mv("step.time_us", 200.0, view="max"))
    r, _ = one(b, c, pol)
    assert r["step.time_us{view=rank0}"].verdict == terms.UNCHANGED  # exactly at 5 %
    mx = r["step.time_us{view=max}"]
    assert mx.verdict == terms.REGRESSION and not mx.gated and not mx.fails  # max view informational


def test_counts_absent_is_zero_and_pp_shares(pol):
    b = fp(mv("kernel.calls_per_step", 4.0, unit="calls", family="Cast"),
           mv("share.category", 0.40, unit="ratio", category="MatMul"))
    c = fp(mv("kernel.calls_per_step", 4.0, unit="calls", family="Cast"),
           mv("kernel.calls_per_step", 2.0, unit="calls", family="NewKernel"),
           mv("share.category", 0.46, unit="ratio", category="MatMul"))
    r, _ = one(b, c, pol)
    new = r["kernel.calls_per_step{family=NewKernel,view=rank0}"]
    assert new.verdict == terms.REGRESSION and new.baseline == 0.0 and "new: absent from the baseline" in new.reason
    share = r["share.category{category=MatMul,view=rank0}"]
    assert share.verdict == terms.REGRESSION and "+6.00 pp" in share.reason


def test_new_and_missing_metrics_p07_g06(pol):
    """A metric present on one side only is new/missing, never a regression, no KeyError; a
    *gated* metric the candidate no longer measures fails (the gate cannot vouch for it)."""
    b = fp(mv("step.time_us", 100.0), mv("step.comm_us", 10.0), mv("comm.elapse_us", 5.0))
    c = fp(mv("step.time_us", 100.0), mv("tokens.per_s", 5.0, unit="tok/s"))
    r, _ = one(b, c, pol)
    assert r["tokens.per_s{view=rank0}"].verdict == terms.NEW and not r["tokens.per_s{view=rank0}"].fails
    info = r["comm.elapse_us{view=rank0}"]
    assert info.verdict == terms.MISSING and not info.fails
    lost = r["step.comm_us{view=rank0}"]
    assert lost.verdict == terms.MISSING and lost.fails and "cannot vouch" in lost.reason


def test_topn_slack(pol):
    ctx = lambda ranked: {"ranked": ranked, "n": 2, "slack": 1}
    b = fp(mv("kernel.topn", ["A", "B"], unit="set", context=ctx(["A", "B", "C"])))
    near = fp(mv("kernel.topn", ["A", "C"], unit="set", context=ctx(["A", "C", "B"])))
    far = fp(mv("kernel.topn", ["A", "Z"], unit="set", context=ctx(["A", "Z", "C"])))
    r, _ = one(b, near, pol)
    assert r["kernel.topn{view=rank0}"].verdict == terms.UNCHANGED and "within the slack" in r["kernel.topn{view=rank0}"].reason
    r, _ = one(b, far, pol)
    t = r["kernel.topn{view=rank0}"]
    assert t.verdict == terms.REGRESSION and "entered: Z" in t.reason and "left: B" in t.reason


def test_rank_count_change_is_incomparable_and_incompatible(pol):
    from perfgate.compare import incompatibility
    b = fp(mv("step.time_us", 100.0), world_size=8)
    c = fp(mv("step.time_us", 300.0), world_size=4)
    cmps, notes = compare_fingerprints(b, c, pol)
    r = {x.key: x for x in cmps}
    assert r["step.time_us{view=rank0}"].verdict == terms.INCOMPARABLE
    assert "rank count changed (8 -> 4)" in r["step.time_us{view=rank0}"].reason
    assert any("rank count changed" in n for n in notes)
    assert "missing or extra rank" in incompatibility(b, c, cmps)


def test_renumbered_ranks_are_incomparable_and_incompatible(pol):
    """Other rank ids of the same count: every view incomparable, the check incompatible (exit 4),
    as for a missing or extra rank; the same ids in another order are the same set."""
    from perfgate.compare import incompatibility
    b = fp(mv("step.time_us", 100.0), mv("step.time_us", 100.0, view="p50"), ranks=[0, 1])
    c = fp(mv("step.time_us", 100.0), mv("step.time_us", 100.0, view="p50"), ranks=[0, 7])
    cmps, notes = compare_fingerprints(b, c, pol)
    r = {x.key: x for x in cmps}
    for view in ("rank0", "p50"):
        assert r[f"step.time_us{{view={view}}}"].verdict == terms.INCOMPARABLE
        assert "rank ids changed ([0, 1] -> [0, 7])" in r[f"step.time_us{{view={view}}}"].reason
    assert any("rank ids differ" in n for n in notes)
    why = incompatibility(b, c, cmps)
    assert "ranks [0, 1]" in why and "ranks [0, 7]" in why and "missing or extra rank" in why
    same = fp(mv("step.time_us", 100.0), mv("step.time_us", 100.0, view="p50"), ranks=[1, 0])
    cmps, _ = compare_fingerprints(b, same, pol)
    assert incompatibility(b, same, cmps) is None


def test_level0_facets_make_shares_incomparable(pol):
    b = fp(mv("share.category", 0.4, unit="ratio", category="MatMul"))
    c = fp(mv("share.category", 0.1, unit="ratio", category="MatMul"), type_available=False, core_available=False)
    r, _ = one(b, c, pol)
    assert r["share.category{category=MatMul,view=rank0}"].verdict == terms.INCOMPARABLE


def test_toolchain_change_g07(pol):
    """CANN / torch_npu change: per-kernel diffs informational, step time still gates."""
    b = fp(mv("kernel.calls_per_step", 4.0, unit="calls", family="MatMul"), mv("step.time_us", 100.0),
           cann_version="8.0.RC3")
    c = fp(mv("kernel.calls_per_step", 6.0, unit="calls", family="MatMul"), mv("step.time_us", 120.0),
           cann_version="8.3.RC1")
    r, notes = one(b, c, pol)
    k = r["kernel.calls_per_step{family=MatMul,view=rank0}"]
    assert k.verdict == terms.REGRESSION and not k.gated and not k.fails
    assert r["step.time_us{view=rank0}"].fails
    assert any("toolchain changed" in n for n in notes) and any("CANN version changed" in n for n in notes)


def test_metric_not_in_policy_is_informational(pol):
    b = fp(mv("device.time_us", 1.0, caliber="busy_union"))
    c = fp(mv("device.time_us", 2.0, caliber="busy_union"))
    r, _ = one(b, c, pol)
    x = next(iter(r.values()))
    assert not x.gated and not x.fails and x.tolerance == "not in policy"


def test_step_noise_g01_passes_under_default_policy(policy):
    """G01: baseline steps ~100 ms, candidate +1.9 % -> pass at the default 10 % tolerance."""
    b = fp(mv("step.time_us", 100_360.0))
    c = fp(mv("step.time_us", 102_200.0))
    r, _ = one(b, c, policy)
    assert r["step.time_us{view=rank0}"].verdict == terms.UNCHANGED
