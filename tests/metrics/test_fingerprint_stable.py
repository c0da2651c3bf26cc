"""Fingerprints do not change when ingest or metrics get faster.

Each capture below is fingerprinted and its canonical form compared with the digests recorded
in ``tests/data/fingerprint_golden.json`` by the code before the scale work: one SHA-256 per
fingerprint part (config, self_checks, findings, detail, warnings, provenance, ...) and one
per metric name over all its keys and views (values, evidence, context), so a difference
names what changed. The only volatile parts, ``provenance.created_at`` and the absolute
``provenance.source``, are dropped, and so is ``config.collection``: the collection options are
copied from profiler_info, not computed from the capture's rows, so they say nothing about the
fast paths these digests guard (tests/metrics/test_collection_options.py checks them). No capture data is stored, only digests. Regenerate only on purpose, with a reviewed reason:
``PERFGATE_REGEN_GOLDEN=1 python3 -m pytest tests/metrics/test_fingerprint_stable.py``.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.synth.scale import write_scaled
from perfgate.synth.writer import SynthSpec, write_capture

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "fingerprint_golden.json"
REGEN = os.environ.get("PERFGATE_REGEN_GOLDEN") == "1"


def canonical(fp) -> dict:
    """The fingerprint as JSON-ready data, without its creation time and absolute source."""
    d = json.loads(json.dumps(fp.to_dict(), sort_keys=True, default=str))
    d["provenance"].pop("created_at", None)
    d["provenance"].pop("source", None)
    d["config"].pop("collection", None)
    return d


def digests(fp) -> dict:
    """{part: digest} plus {"metrics:<name>": digest} for every metric name."""
    def h(x):
        return hashlib.sha256(json.dumps(x, sort_keys=True).encode()).hexdigest()[:16]
    d = canonical(fp)
    out = {part: h(v) for part, v in d.items() if part != "metrics"}
    by_name: dict = {}
    for key, m in d["metrics"].items():
        by_name.setdefault(m["name"], {})[key] = m
    out.update({f"metrics:{n}": h(v) for n, v in by_name.items()})
    return out


def _synthetic(tmp: Path) -> dict:
    """name -> (capture dir, with_trace)."""
    return {
        "synth_default": (write_capture(tmp / "sd", SynthSpec()), True),
        "synth_regressed": (write_capture(tmp / "sr", SynthSpec(extra_calls={"aclnnCast_CastAiCore_Cast": 2},
                                                                 slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.4},
                                                                 bubble_us=300.0, seed=3)), True),
        "synth_g2023_no_trace": (write_capture(tmp / "sg", SynthSpec(header="g2023", ranks=3)), False),
        "synth_g83": (write_capture(tmp / "s83", SynthSpec(header="g83")), True),
        "scaled_2x4x3000": (write_scaled(tmp / "sc", ranks=2, steps=4, kernels_per_step=3000, trace_mb=2), True),
    }


def _real(text: Path) -> dict:
    return {f"real_{lvl}": (text / lvl, True) for lvl in ("level0", "level1", "level2")} | {
        "real_level1_no_trace": (text / "level1", False)}


def _compute(cases: dict, policy) -> dict:
    return {name: digests(fingerprint_capture(load_capture(path, with_trace=wt), policy))
            for name, (path, wt) in cases.items()}


def _check(got: dict, section: str):
    if REGEN:
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[section] = got
        GOLDEN.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
        pytest.skip("golden fingerprints regenerated")
    want = json.loads(GOLDEN.read_text())[section]
    assert sorted(got) == sorted(want)
    for name in want:
        changed = sorted(p for p in set(got[name]) | set(want[name]) if got[name].get(p) != want[name].get(p))
        assert not changed, f"{name}: fingerprint changed in {changed}"


def test_digest_sees_a_changed_value(tmp_path, policy):
    """The digests are sensitive: one kernel row 1 ns longer changes the metric digests."""
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=1, steps=2))
    a = digests(fingerprint_capture(load_capture(cap, with_trace=False), policy))
    kd = next(cap.rglob("kernel_details.csv"))
    with open(kd, newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("Duration(us)")
    rows[1][col] = f"{Decimal(rows[1][col].strip()) + Decimal('0.001'):.3f}"
    with open(kd, "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    b = digests(fingerprint_capture(load_capture(cap, with_trace=False), policy))
    assert b == digests(fingerprint_capture(load_capture(cap, with_trace=False), policy))
    changed = sorted(p for p in a if a[p] != b[p])
    assert "metrics:device.time_us" in changed and "config" not in changed


def test_synthetic_fingerprints_unchanged(tmp_path, policy):
    _check(_compute(_synthetic(tmp_path), policy), "synthetic")


def test_real_fingerprints_unchanged(text_captures, policy):
    _check(_compute(_real(text_captures), policy), "real")
