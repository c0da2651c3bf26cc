"""Policy loading: errors name the file and the key; overrides; the shipped default loads."""
import pytest

from perfgate.errors import PolicyError
from perfgate.policy import load_policy


def write(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return p


def test_default_policy_loads():
    p = load_policy()
    r = p.rule_for("share.category", {"category": "Comm", "view": "p50"})
    assert r.direction == "lower_is_better" and r.tolerance.kind == "pp"
    assert p.rule_for("share.category", {"category": "MatMul"}).direction == "exact"
    assert not p.rule_for("kernel.time_us", {}).gated  # single-kernel time never gates


@pytest.mark.parametrize("text,key", [
    ("version: 1\nbogus: 1\n", "bogus"),
    ("metrics:\n  step.time_us: {direction: sideways, tolerance: {rel: 0.1}}\n", "metrics.step.time_us.direction"),
    ("metrics:\n  step.time_us: {tolerance: {rel: 0.1}}\n", "metrics.step.time_us"),
    ("metrics:\n  step.time_us: {direction: exact, tolerance: {percent: 3}}\n", "metrics.step.time_us.tolerance"),
    ("metrics:\n  step.time_us: {direction: exact, tolerance: {rel: -1}}\n", "metrics.step.time_us.tolerance.rel"),
    ("fingerprint:\n  top_n: 0\n", "fingerprint.top_n"),
    ("fingerprint:\n  categories:\n    - {category: X, name: '('}\n", "fingerprint.categories[0].name"),
    ("fingerprint:\n  categories:\n    - {category: X, name: 'a'}\n    - {category: Y, name: 'a'}\n",
     "fingerprint.categories[1]"),
    ("gate_views: [rank7]\n", "gate_views"),
    ("version: 9\n", "version"),
])
def test_errors_name_file_and_key(tmp_path, text, key):
    with pytest.raises(PolicyError) as e:
        load_policy(write(tmp_path, text))
    assert f"key '{key}'" in str(e.value) and str(e.value).startswith(str(tmp_path))


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(PolicyError, match="invalid YAML"):
        load_policy(write(tmp_path, "a: [1,\n"))
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "nope.yaml")


def test_overrides_stack_most_specific_last(tmp_path):
    p = load_policy(write(tmp_path, """
metrics:
  share.category: {gated: true, direction: exact, tolerance: {pp: 5}}
overrides:
  - {metric: share.category, labels: {category: Comm}, direction: lower_is_better}
  - {metric: share.category, labels: {category: Comm, view: max}, gated: false}
"""))
    assert p.rule_for("share.category", {"category": "Comm", "view": "max"}).gated is False
    assert p.rule_for("share.category", {"category": "Comm", "view": "max"}).direction == "lower_is_better"
    assert p.rule_for("share.category", {"category": "Comm", "view": "p50"}).direction == "lower_is_better"
