"""Policy sections are frozen dataclasses whose defaults are written once
(perfgate.policy.sections); the YAML overrides them key by key; they still read as mappings."""
import ast
import dataclasses
from pathlib import Path

import pytest

from perfgate.compare import stats
from perfgate.errors import PolicyError
from perfgate.metrics import steps
from perfgate.policy import load_policy
from perfgate.policy.sections import (FAIL_CLOSED, FindingThresholds, HistorySettings, SelfCheckSettings,
                                      StatisticsSettings)

PKG = Path(__file__).resolve().parents[2] / "perfgate"
SECTIONS = (SelfCheckSettings, FindingThresholds, HistorySettings, StatisticsSettings)


def test_an_empty_policy_takes_every_section_default(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("extends: none\nversion: 1\n")   # alone, not merged over the built-in policy
    pol = load_policy(p)
    assert pol.history == HistorySettings() and pol.history["window"] == 5
    assert pol.findings == FindingThresholds() and pol.findings.warmup_ratio == 1.5
    assert pol.self_checks == SelfCheckSettings() and pol.self_checks["require_trace"] is False
    assert dict(pol.statistics) == dict(StatisticsSettings()) and pol.statistics.alpha == 0.05
    assert pol.fail_closed == FAIL_CLOSED


def test_yaml_values_replace_defaults_key_by_key(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\nhistory: {window: 9}\nfindings: {warmup_ratio: 2}\n"
                 "statistics: {alpha: 0.1}\nself_checks: {require_trace: true}\n")
    pol = load_policy(p)
    assert pol.history.window == 9 and pol.history.min_runs == HistorySettings.min_runs
    assert pol.findings.warmup_ratio == 2.0 and pol.findings.underfeed_ratio == FindingThresholds.underfeed_ratio
    assert pol.statistics["alpha"] == 0.1 and pol.statistics.confidence == StatisticsSettings.confidence
    assert pol.self_checks.require_trace is True and pol.self_checks.step_trace_abs_us == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        pol.history.window = 3


@pytest.mark.parametrize("section,cls", [("history", HistorySettings), ("findings", FindingThresholds),
                                         ("self_checks", SelfCheckSettings), ("statistics", StatisticsSettings)])
def test_unknown_key_names_the_allowed_keys_from_the_dataclass(tmp_path, section, cls):
    p = tmp_path / "p.yaml"
    p.write_text(f"version: 1\n{section}: {{no_such_key: 1}}\n")
    with pytest.raises(PolicyError, match=f"{section}.no_such_key") as e:
        load_policy(p)
    for name in cls.allowed():
        if name != "tolerances":
            assert name in str(e.value)


def test_the_other_modules_derive_their_defaults_from_the_sections():
    assert stats.DEFAULTS == {k: v for k, v in dict(StatisticsSettings()).items() if k != "tolerances"}
    assert steps.DEFAULT_THRESHOLDS == dict(FindingThresholds())


def test_no_section_default_is_written_twice():
    """Outside policy/sections.py no dict literal maps a section key to a constant (the way
    defaults used to be written in policy/load.py, compare/stats.py and metrics/steps.py)."""
    keys = {f.name for cls in SECTIONS for f in dataclasses.fields(cls)} - {"tolerances"}
    found = []
    for f in PKG.rglob("*.py"):
        if f.name == "sections.py" and f.parent.name == "policy":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value in keys and isinstance(v, ast.Constant):
                        found.append(f"{f.relative_to(PKG)}:{node.lineno} {k.value}")
    assert not found, found


def test_overrides_are_typed_and_match_by_labels(tmp_path):
    from perfgate.policy.load import Override
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\nmetrics:\n  share.category: {gated: true, direction: exact, tolerance: {pp: 2}}\n"
                 "overrides:\n  - {metric: share.category, labels: {category: Comm}, tolerance: {pp: 9}}\n")
    pol = load_policy(p)
    (ov,) = pol.overrides
    assert isinstance(ov, Override) and ov.metric == "share.category" and ov.labels == {"category": "Comm"}
    assert ov.applies("share.category", {"category": "Comm", "view": "p50"})
    assert not ov.applies("share.category", {"category": "Cube"}) and not ov.applies("share.core_type", {"category": "Comm"})
    assert pol.rule_for("share.category", {"category": "Comm"}).tolerance.value == 9
    assert pol.rule_for("share.category", {"category": "Cube"}).tolerance.value == 2
