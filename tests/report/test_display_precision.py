"""Displayed tolerances keep their significant digits (a calibrated 1.5 % is not "±2%") in the
comparison reason and tolerance column, and so in the CLI, Markdown, JUnit and HTML reports."""
import pytest

from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, GateResult, MetricValue, metric_key
from perfgate.policy import Tolerance, load_policy, significant
from perfgate.report import render_junit, render_markdown
from perfgate.report.html import render_html


@pytest.mark.parametrize("kind,value,text", [
    ("rel", 0.015, "±1.5%"), ("rel", 0.009, "±0.9%"), ("rel", 0.10, "±10%"), ("rel", 0.05, "±5%"),
    ("rel", 0.0025, "±0.25%"), ("rel", 0.1234, "±12.3%"),
    ("pp", 0.25, "±0.25 pp"), ("pp", 1.86, "±1.86 pp"), ("pp", 5, "±5 pp"), ("pp", 0.05, "±0.05 pp"),
    ("abs", 0, "exact"), ("abs", 1.5, "±1.5 us"), ("abs", 1500, "±1500 us"),
])
def test_tolerance_describe_keeps_significant_digits(kind, value, text):
    assert Tolerance(kind, value).describe("us") == text


def test_significant_is_fixed_point():
    assert significant(1234.5) in ("1234", "1235") and "e" not in significant(123456.0)
    assert significant(0.000123) == "0.000123" and significant(0.0) == "0"


def _mv(name, value, unit, view="rank0"):
    key = metric_key(name, view=view)
    return key, MetricValue(key=key, name=name, labels={"view": view}, value=value, unit=unit,
                            caliber="busy_union", tier=2, evidence="rank0/step_trace_time.csv")


def _fp(*ms):
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={},
                       config={"world_size": 1}, metrics=dict(ms))


def test_calibrated_tolerances_in_every_report(tmp_path):
    """A policy with calibrated tolerances 1.5 % and 0.9 % and 0.25 pp: the reason, the
    tolerance column, Markdown, JUnit and HTML all say ±1.5% / ±0.9% / ±0.25 pp."""
    p = tmp_path / "cal.yaml"
    p.write_text("version: 1\nmetrics:\n"
                 "  step.time_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.015}}\n"
                 "  step.computing_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.009}}\n"
                 "  step.exposed_comm_ratio: {gated: true, direction: lower_is_better, tolerance: {pp: 0.25}}\n")
    pol = load_policy(p)
    base = _fp(_mv("step.time_us", 1000.0, "us"), _mv("step.computing_us", 800.0, "us"),
               _mv("step.exposed_comm_ratio", 0.10, "ratio"))
    cand = _fp(_mv("step.time_us", 1012.0, "us"), _mv("step.computing_us", 810.0, "us"),
               _mv("step.exposed_comm_ratio", 0.102, "ratio"))
    cmps, _ = compare_fingerprints(base, cand, pol)
    by = {c.name: c for c in cmps}
    # 1.2 % < 1.5 % passes; 1.25 % > 0.9 % fails; +0.2 pp < 0.25 pp passes
    assert by["step.time_us"].verdict == terms.UNCHANGED and "within tolerance ±1.5%" in by["step.time_us"].reason
    assert by["step.computing_us"].verdict == terms.REGRESSION and "beyond tolerance ±0.9%" in by["step.computing_us"].reason
    assert by["step.exposed_comm_ratio"].tolerance == "±0.25 pp"
    result = GateResult(status=terms.FAIL, exit_code=1, comparisons=tuple(cmps))
    md, junit, html = render_markdown(result), render_junit(result), render_html(result)
    for text in (md, junit, html):
        assert "±0.9%" in text and "±1%" not in text
    assert "±1.5%" in junit and "±2%" not in junit  # Markdown and HTML list only the changed rows
