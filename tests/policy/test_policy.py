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
    ("extends: none\nmetrics:\n  step.time_us: {tolerance: {rel: 0.1}}\n", "metrics.step.time_us"),
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


@pytest.mark.parametrize("text,key,said", [
    # a value of another YAML type than its key's: was "a value has the wrong type or shape
    # (AttributeError: 'list' object has no attribute 'items')", naming no key
    ("metrics: [1, 2]\n", "metrics", "must be a mapping of metric name -> rule, got a list"),
    ("fingerprint: [top_n]\n", "fingerprint", "must be a mapping of categories, family_suffix"),
    ("fingerprint:\n  categories: 5\n", "fingerprint.categories", "must be a list of {category"),
    ("fingerprint:\n  categories:\n    - {category: X, name: [a]}\n", "fingerprint.categories[0].name",
     "must be a regular expression (a string), got a list"),
    ("fingerprint:\n  categories:\n    - {category: X, type: 5}\n", "fingerprint.categories[0].type",
     "must be a regular expression (a string), got a number (5)"),
    ("fingerprint:\n  family_suffix: 5\n", "fingerprint.family_suffix", "must be a regular expression (a string)"),
    ("gate_views: 5\n", "gate_views", "must be a list of views (rank0, p50, max), got a number (5)"),
    ("gate_views: p50\n", "gate_views", "must be a list of views (rank0, p50, max), got a string ('p50')"),
    ("overrides: 5\n", "overrides", "must be a list of {metric, labels, ...} rules, got a number (5)"),
    ("overrides: {metric: step.time_us}\n", "overrides", "must be a list of {metric, labels, ...} rules, got a mapping"),
    ("overrides:\n  - [step.time_us]\n", "overrides[0]", "needs 'metric' (a mapping), got a list"),
    ("overrides:\n  - {metric: [a, b], gated: true}\n", "overrides[0].metric", "must be a metric name (a string)"),
    ("overrides:\n  - {metric: x}\n  - {metric: x}\n  - {metric: x}\n  - {metric: step.time_us, tolerance: '5%'}\n",
     "overrides[3].tolerance", "tolerance must be one of {abs: X}, {rel: X}, {pp: X}, got a string ('5%')"),
    ("overrides:\n  - {metric: step.time_us, labels: [view, p50]}\n", "overrides[0].labels",
     "must be a mapping of label -> value, got a list"),
    ("metrics:\n  step.time_us: [1]\n", "metrics.step.time_us", "must be a mapping of gated / direction / tolerance"),
    ("self_checks: [abs_us_floor]\n", "self_checks", "must be a mapping of setting -> value, got a list"),
    ("suggestions: 5\n", "suggestions", "must be a list of rules, got a number (5)"),
    ("phases:\n  rules: 5\n", "phases.rules", "must be a list of {phase, name / type / core} rules, got 5"),
    ("statistics:\n  tolerances: [1]\n", "statistics.tolerances", "got a list"),
    # a phase rule's pattern was compiled from its text (name: 5 matched names holding "5"), while a
    # category's was refused: one reader now (opspec.regex), the same refusal
    ("phases:\n  rules:\n    - {phase: P, name: 5}\n", "phases.rules[0].name",
     "must be a regular expression (a string), got a number (5)"),
])
def test_a_value_of_the_wrong_type_names_its_key_path_and_what_is_expected(tmp_path, text, key, said):
    with pytest.raises(PolicyError) as e:
        load_policy(write(tmp_path, text))
    assert f"key '{key}': " in str(e.value) and said in str(e.value), str(e.value)
    assert e.value.exit_code == 2


def test_top_level_keys_of_mixed_types_are_named_not_a_crash(tmp_path):
    """YAML keys may be numbers: sorting them with text keys raised TypeError (exit 2 without a key)."""
    with pytest.raises(PolicyError) as e:
        load_policy(write(tmp_path, "1: a\nbogus: 2\n"))
    assert "key '1': unknown top-level key" in str(e.value)
