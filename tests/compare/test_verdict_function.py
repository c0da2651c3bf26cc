"""One function decides a verdict: Tolerance.allowance converts a policy tolerance
once, Direction.judge turns a change (a value or an interval) into a verdict; statuses and
verdicts are distinct str-Enums."""
import json

import pytest

from perfgate import terms
from perfgate.policy import Tolerance


def test_allowance_converts_each_kind_once():
    assert Tolerance("abs", 3.0).allowance(100.0) == 3.0
    assert Tolerance("pp", 5.0).allowance(0.4) == pytest.approx(0.05)
    assert Tolerance("rel", 0.1).allowance(-200.0) == pytest.approx(20.0)
    assert Tolerance("rel", 0.1).allowance() == pytest.approx(0.1)   # a relative effect


@pytest.mark.parametrize("direction,delta,expected", [
    (terms.LOWER_IS_BETTER, 2.0, terms.REGRESSION), (terms.LOWER_IS_BETTER, -2.0, terms.IMPROVEMENT),
    (terms.HIGHER_IS_BETTER, 2.0, terms.IMPROVEMENT), (terms.HIGHER_IS_BETTER, -2.0, terms.REGRESSION),
    (terms.EXACT, 2.0, terms.REGRESSION), (terms.EXACT, -2.0, terms.REGRESSION),
    (terms.LOWER_IS_BETTER, 1.0, terms.UNCHANGED), (terms.EXACT, -1.0, terms.UNCHANGED)])
def test_judge_single_value(direction, delta, expected):
    assert terms.Direction(direction).judge(delta, allowance=1.0) is expected


def test_judge_interval_straddling_is_unsure_and_inside_is_unchanged():
    d = terms.Direction.LOWER_IS_BETTER
    assert d.judge(0.5, 1.5, 1.0) is terms.Verdict.UNSURE
    assert d.judge(-0.9, 0.9, 1.0) is terms.Verdict.UNCHANGED
    assert d.judge(1.1, 3.0, 1.0) is terms.Verdict.REGRESSION
    assert d.judge(-3.0, -1.1, 1.0) is terms.Verdict.IMPROVEMENT


def test_status_and_verdict_words_do_not_collide_but_serialise_as_words():
    assert terms.Status.REGRESSION != terms.Verdict.REGRESSION
    assert terms.FAIL is terms.Status.REGRESSION
    assert json.dumps({"s": terms.FAIL, "v": terms.REGRESSION}) == '{"s": "REGRESSION", "v": "regression"}'
    assert f"{terms.PASS} {terms.UNSURE}" == "PASS unsure" and str(terms.EXACT) == "exact"
