"""The calibrate printout: one precision per unit, the small-sample warning, and the note on
what the power column assumes."""
import re

import numpy as np
import pytest

from perfgate.compare.calibrate import (POWER_NOTE, STABLE_CAPTURES, format_value, propose_tolerances, render_table,
                                stability_warning)
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key

CONFIG = {"world_size": 2, "ranks": [0, 1], "type_available": True, "core_available": True,
          "has_comm_json": True, "categories_digest": "x", "family_suffix": "s", "top_n": 10}


def capture(step_us, comm_share, exposed):
    def mv(name, value, unit, **labels):
        key = metric_key(name, **labels, view="p50")
        return key, MetricValue(key=key, name=name, labels=dict(labels, view="p50"), value=value, unit=unit,
                                evidence="e", samples=[value])
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={"source": "mem"},
                       config=CONFIG, metrics=dict([mv("step.time_us", step_us, "us"),
                                                    mv("share.category", comm_share, "ratio", category="Comm"),
                                                    mv("step.exposed_comm_ratio", exposed, "ratio")]))


@pytest.fixture
def fps():
    # Comm share 20 %, 21 %, 19 %, 21.2 %, 18.5 %: MAD 1 pp -> sigma 1.48 pp; exposed ratio MAD
    # 1.25 pp -> sigma 1.85 pp; step time MAD 1 % -> sigma 1.48 %
    return [capture(s, c, e) for s, c, e in ((100.0, 0.200, 0.300), (102.0, 0.210, 0.3125), (98.0, 0.190, 0.2875),
                                             (101.0, 0.212, 0.320), (99.0, 0.185, 0.280))]


def test_format_value_one_precision_per_unit():
    assert [format_value(v, "pp") for v in (1.6, 1.86, 0.25, 5)] == ["1.60 pp", "1.86 pp", "0.25 pp", "5.00 pp"]
    assert [format_value(v, "rel") for v in (0.015, 0.1, 0.04449)] == ["1.50%", "10.00%", "4.45%"]
    assert format_value(1.5, "abs") == "1.500" and format_value(None, "pp") == "-"


def test_table_numbers_share_a_precision_per_unit(fps, policy):
    props = propose_tolerances(fps, policy)
    lines = render_table(props, len(fps), 3.0, "cal.yaml")
    rows = {ln.split(" | ")[0].strip(): ln for ln in lines if " | " in ln and not ln.lstrip().startswith("metric")}
    assert set(rows) == {"step.time_us", "share.category", "step.exposed_comm_ratio"}
    for name in ("share.category", "step.exposed_comm_ratio"):
        pp = re.findall(r"(\d+(?:\.\d+)?) pp", rows[name])
        assert len(pp) == 8 and all(re.fullmatch(r"\d+\.\d\d", x) for x in pp), rows[name]
    pct = re.findall(r"(\d+(?:\.\d+)?)%", rows["step.time_us"].split(" | ", 1)[1])
    assert len(pct) == 8 and all(re.fullmatch(r"\d+\.\d\d", x) for x in pct), rows["step.time_us"]
    assert rows["share.category"].split(" | ")[1] == "1.48 pp"        # 1.4826 x MAD 1 pp
    assert lines[-1] == "  wrote cal.yaml" and "  " + POWER_NOTE in lines
    assert not any("warning" in ln for ln in lines)                   # 5 captures: stable enough


def test_fewer_than_five_captures_warn(fps, policy):
    lines = render_table(propose_tolerances(fps[:3], policy), 3, 3.0)
    (warn,) = [ln for ln in lines if "warning" in ln]
    assert "only 3 captures" in warn and "~2x" in warn
    assert stability_warning(4) and stability_warning(STABLE_CAPTURES) is None


def test_warning_claim_three_runs_mad_sigma_is_off_by_about_2x():
    """The claim in the warning: 1.4826 x MAD of 3 normal draws has a 5th-95th percentile range
    far wider than ±50 % of the true sigma (and a median well below it); 10 draws are tighter."""
    x = np.random.default_rng(0).standard_normal((20000, 3))
    s3 = 1.4826 * np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1)
    lo, med, hi = np.percentile(s3, [5, 50, 95])
    assert lo < 0.1 and med < 0.6 and hi > 1.7
    y = np.random.default_rng(1).standard_normal((20000, 10))
    s10 = 1.4826 * np.median(np.abs(y - np.median(y, axis=1, keepdims=True)), axis=1)
    assert np.percentile(s10, 95) - np.percentile(s10, 5) < (hi - lo) * 0.7


def test_power_note_says_what_the_column_assumes():
    assert "per-capture sigma" in POWER_NOTE and "as if the steps were independent" in POWER_NOTE
    assert "conservative when steps are independent" in POWER_NOTE and "right one when captures differ" in POWER_NOTE
