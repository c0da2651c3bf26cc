"""Override and suggestion labels are checked against the label keys the metric registry says a
metric carries: a typo such as ``categroy: Comm`` is a policy error (exit 2), not an override
that silently matches nothing. Values are checked where the set is closed (view, caliber,
category, phase, the metric of rank.skew_ratio)."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import PolicyError
from perfgate.app.gate import load_checked_policy
from perfgate.app.run import fingerprint_path
from perfgate.metrics.registry import REGISTRY, label_keys
from perfgate.policy import load_policy
from perfgate.synth.writer import DIFFUSION_FAMILIES, SynthSpec, write_capture

REPO = Path(__file__).resolve().parents[2]
DEFAULT = (REPO / "perfgate" / "policies" / "default.yaml").read_text()
COMM_OVERRIDE = "- {metric: share.category, labels: {category: Comm}, direction: lower_is_better}"


def policy_file(tmp_path, text, name="p.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def with_overrides(tmp_path, *lines):
    return policy_file(tmp_path, DEFAULT.replace("  " + COMM_OVERRIDE, "\n".join("  " + (x if x.startswith("-") else "- " + x) for x in lines)))


def test_typo_in_override_label_key_is_a_policy_error(tmp_path):
    assert "  " + COMM_OVERRIDE in DEFAULT
    typo = policy_file(tmp_path, DEFAULT.replace("{category: Comm}", "{categroy: Comm}"), "typo.yaml")
    # what the typo did before: the override matched nothing, the Comm share fell back to "exact"
    assert load_policy(typo).rule_for("share.category", {"category": "Comm", "view": "p50"}).direction == "exact"
    assert load_policy().rule_for("share.category", {"category": "Comm", "view": "p50"}).direction == \
        "lower_is_better"
    with pytest.raises(PolicyError) as e:
        load_checked_policy(typo)
    msg = str(e.value)
    assert "typo.yaml" in msg and "overrides[0].labels.categroy" in msg
    assert "['category', 'view']" in msg and "did you mean 'category'?" in msg
    assert e.value.exit_code == 2


def test_typo_policy_exits_2_in_check(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=2))
    typo = policy_file(tmp_path, DEFAULT.replace("{category: Comm}", "{categroy: Comm}"), "typo.yaml")
    r = CliRunner().invoke(main, ["check", "--policy", str(typo), "--baseline-dir", str(tmp_path / "bl"),
                                  "--baseline", "main", "--out", str(tmp_path / "out"), str(cap)],
                           env={}, catch_exceptions=False)
    assert r.exit_code == 2 and "categroy" in r.output and "did you mean 'category'" in r.output
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("override,key,needle", [
    ("{metric: share.category, labels: {category: Com}, direction: lower_is_better}",
     "overrides[0].labels.category", "did you mean 'Comm'?"),
    ("{metric: step.time_us, labels: {veiw: p50}, tolerance: {rel: 0.2}}",
     "overrides[0].labels.veiw", "did you mean 'view'?"),
    ("{metric: step.time_us, labels: {view: p90}, tolerance: {rel: 0.2}}",
     "overrides[0].labels.view", "unknown view 'p90'"),
    ("{metric: step.time_us, labels: {view: max}, gated: true}",
     "overrides[0].labels.view", "not in gate_views"),
    ("{metric: device.time_us, labels: {caliber: busy_unon}, tolerance: {rel: 0.2}}",
     "overrides[0].labels.caliber", "did you mean 'busy_union'?"),
    ("{metric: share.family, labels: {category: Comm}, tolerance: {pp: 1}}",
     "overrides[0].labels.category", "its labels: ['family', 'view']"),
    ("{metric: rank.skew_ratio, labels: {metric: step.tme_us}, gated: true}",
     "overrides[0].labels.metric", "did you mean 'step.time_us'?"),
    ("{metric: share.phase, labels: {phase: dit}, tolerance: {pp: 1}}",
     "overrides[0].labels.phase", "unknown phase 'dit'"),
])
def test_bad_override_labels_name_index_key_and_valid_ones(tmp_path, override, key, needle):
    with pytest.raises(PolicyError) as e:
        load_checked_policy(with_overrides(tmp_path, override))
    assert key in str(e.value) and needle in str(e.value)


def test_open_label_values_and_non_gating_views_are_accepted(tmp_path):
    pol = load_checked_policy(with_overrides(
        tmp_path, COMM_OVERRIDE,
        "- {metric: share.family, labels: {family: SomeFutureKernel}, tolerance: {pp: 1}}",
        "- {metric: share.core_type, labels: {core_type: AI_CORE, view: p50}, tolerance: {pp: 3}}",
        "- {metric: step.time_us, labels: {view: max}, tolerance: {rel: 0.2}}",
        "- {metric: rank.skew_ratio, labels: {metric: share.family, family: X}, gated: true}",
        "- {metric: share.category, labels: {category: unknown}, direction: lower_is_better}"))
    assert pol.rule_for("share.family", {"family": "SomeFutureKernel", "view": "p50"}).tolerance.value == 1
    assert pol.rule_for("step.time_us", {"view": "max"}).tolerance.value == 0.2
    assert pol.rule_for("share.category", {"category": "Comm", "view": "p50"}).direction == "lower_is_better"


@pytest.mark.parametrize("old,new,key,needle", [
    ("labels: {category: MatMul}, above: 0.50", "labels: {categry: MatMul}, above: 0.50",
     "suggestions[2].labels.categry", "did you mean 'category'?"),
    ("labels: {category: MatMul}, above: 0.50", "labels: {category: Matmul}, above: 0.50",
     "suggestions[2].labels.category", "did you mean 'MatMul'?"),
    ("metric: step.underfeed_ratio, above", "metric: step.underfed_ratio, above",
     "suggestions[1].metric", "did you mean 'step.underfeed_ratio'?"),
])
def test_bad_suggestion_labels_and_metric(tmp_path, old, new, key, needle):
    assert old in DEFAULT
    with pytest.raises(PolicyError) as e:
        load_checked_policy(policy_file(tmp_path, DEFAULT.replace(old, new)))
    assert key in str(e.value) and needle in str(e.value)


def test_shipped_policies_pass_the_label_check():
    for p in sorted((REPO / "perfgate" / "policies").glob("*.yaml")):
        text = p.read_text()
        if "metrics:" in text or "overrides:" in text:
            load_checked_policy(p)


def test_registry_label_keys_cover_every_fingerprint_value(tmp_path):
    """The registry is the one place label keys are declared: every value a fingerprint holds
    carries only keys the registry lists for its metric (synthetic diffusion capture with phase
    rules and an MFU spec, so phase / pipe / MFU / structure metrics are present too)."""
    (tmp_path / "peaks.yaml").write_text("chips:\n  TestChip: {bf16: 1.0e+18, fp16: 1.0e+18, fp32: 1.0e+18}\n")
    pol = load_checked_policy(policy_file(tmp_path, DEFAULT.replace(
        "phases:\n  default: all\n  rules: []",
        "phases: {mode: region, default: DiT, rules: [{phase: VAE, type: '^Conv2D$'}]}") +
        f"\nmfu: {{spec: {REPO / 'perfgate/policies/mfu/matmul.yaml'}, peaks: {tmp_path / 'peaks.yaml'}, chip: TestChip}}\n"))
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, families=DIFFUSION_FAMILIES, ordered=True))
    fp = fingerprint_path(cap, pol, workers=1)
    names = {m.name for m in fp.metrics.values()}
    assert {"share.phase", "share.phase_category", "rank.skew_ratio", "share.family", "mfu.ratio",
            "device.time_us", "comm.calls_per_step", "block.share"} <= names
    for m in fp.metrics.values():
        assert set(m.labels) <= label_keys(m.name), (m.key, sorted(label_keys(m.name)))
        if m.name != "rank.skew_ratio":
            assert set(m.labels) - {"view"} == set(REGISTRY[m.name].labels), m.key


def test_registry_label_keys_cover_a_real_capture(text_captures, policy):
    """Same on the real level1 capture (communication.json link bandwidths, PMU pipe metrics)."""
    fp = fingerprint_path(text_captures / "level1", policy, workers=1)
    assert {"comm.bandwidth_gbps", "pipe.bound_share", "pipe.memory_bound"} <= {m.name for m in fp.metrics.values()}
    for m in fp.metrics.values():
        assert set(m.labels) <= label_keys(m.name), (m.key, sorted(label_keys(m.name)))
