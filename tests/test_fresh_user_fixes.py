"""Defects a fresh-user tester found (round 8, h23fix): report files of a failed run, history
store errors (read-only, full disk, locks), policy duplicate keys, CLI argument validation,
token masking, pool workers outliving a killed parent."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perfgate import errors, terms
from perfgate.errors import StoreError
from perfgate.gate import check_and_report, save_baseline
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture


@pytest.fixture
def pair(tmp_path):
    cap = write_capture(tmp_path / "cap", SynthSpec())
    store = BaselineStore(tmp_path / "bl")
    policy = load_policy(None)
    save_baseline(cap, "l1", policy=policy, store=store, env={})
    return cap, store, policy


# 1. a report write that fails removes this run's reports already written
def test_failed_json_write_removes_junit_and_markdown(pair, tmp_path, monkeypatch):
    cap, store, policy = pair
    out = tmp_path / "out"
    from perfgate.report import writers
    real = writers.write_atomic

    def failing(path, text):
        if str(path).endswith(".json"):
            raise StoreError("perfgate-result.json: write failed: No space left on device", path=path)
        return real(path, text)
    monkeypatch.setattr(writers, "write_atomic", failing)
    with pytest.raises(StoreError):
        check_and_report(cap, "l1", policy=policy, store=store, out=out)
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left == []   # no PASS JUnit / Markdown of a run that exits 5
    monkeypatch.setattr(writers, "write_atomic", real)
    result, paths = check_and_report(cap, "l1", policy=policy, store=store, out=out)
    assert result.status == terms.PASS and sorted(p.name for p in out.iterdir()) == [
        "perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"]
