"""Profiler collection options that change what is measured (with_stack, record_shapes,
profile_memory, with_modules, with_flops, activities, l2_cache) split a history series when they
are away from torch_npu's defaults: a with_stack run's host overhead would read as noise in a pool
of runs without it. Options at their defaults, options not recorded and runs recorded before
perfgate read them (config without ``collection``) keep the series key they had, so databases
recorded before still read as one series. The schedule does not split."""
from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.history.store import HistoryStore, series_key
from perfgate.model import metric_key

from _edits import edit_profiler_info
from test_history import CONFIG, fp_of

KEY = metric_key("step.time_us", view="p50")


def _with(**options):
    opts = {"with_stack": False, "record_shapes": False, "profile_memory": False, "with_modules": False,
            "with_flops": False, "activities": "CPU,NPU", "l2_cache": False,
            "schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 5}}
    opts.update(options)
    return dict(CONFIG, profiler_level="Level1", collection={"options": opts, "ranks_differ": {}})


def test_only_options_away_from_the_defaults_change_the_series_key():
    assert series_key(_with()) == series_key(dict(CONFIG, profiler_level="Level1"))   # recorded before
    assert series_key(_with(with_stack=None)) == series_key(_with())                    # not recorded
    assert series_key(_with(schedule={"wait": 1, "active": 9})) == series_key(_with())  # which steps only
    keys = {series_key(_with(**{k: v})) for k, v in (("with_stack", True), ("record_shapes", True),
                                                      ("profile_memory", True), ("activities", "NPU"),
                                                      ("l2_cache", True))}
    assert len(keys) == 5 and series_key(_with()) not in keys


def test_a_database_recorded_before_pools_with_default_runs_not_with_stack_runs(tmp_path):
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    old = dict(CONFIG, profiler_level="Level1")              # runs recorded before the options were read
    for i, (cfg, v) in enumerate([(old, 100), (old, 101), (_with(), 99), (_with(with_stack=True), 140),
                                  (_with(with_stack=True), 141)]):
        hs.record(fp_of({"step.time_us": v * 1000}, config=cfg), branch="main", commit=f"c{i}",
                  recorded_at=f"2026-01-01T00:0{i}:00")
    hs.close()
    ro = HistoryStore(db, readonly=True)
    base, _ = ro.rolling_baseline("main", _with(), window=5, min_runs=3, band_k=3.0)
    assert sorted(base.provenance["runs"]) == [1, 2, 3] and base.metrics[KEY].value == 100_000
    base, _ = ro.rolling_baseline("main", _with(with_stack=True), window=5, min_runs=2, band_k=3.0)
    assert sorted(base.provenance["runs"]) == [4, 5] and base.metrics[KEY].value == 140_500
    ro.close()


def _defaults(doc):
    """level1 is collected with with_stack, record_shapes, profile_memory, with_modules and
    l2_cache on: all at torch_npu's defaults (off)."""
    doc["config"]["common_config"].update(with_stack=False, record_shapes=False, profile_memory=False,
                                          with_modules=False)
    doc["config"]["experimental_config"]["_l2_cache"] = False


def _defaults_but_with_stack(doc):
    _defaults(doc)
    doc["config"]["common_config"]["with_stack"] = True


def test_recorded_real_captures_with_and_without_with_stack_are_two_series(copy_capture, tmp_path):
    """The two copies hold the same kernels (recorded with --allow-duplicate): only with_stack differs."""
    plain, stack = copy_capture("level1", "plain"), copy_capture("level1", "stack")
    edit_profiler_info(plain, _defaults)
    edit_profiler_info(stack, _defaults_but_with_stack)
    db = tmp_path / "h.sqlite"
    for i, cap in enumerate((plain, stack)):
        r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--commit", f"c{i}",
                                      "--db", str(db), "--trace", "never", "--allow-duplicate"], env={}, catch_exceptions=False)
        assert r.exit_code == 0, r.output
    ro = HistoryStore(db, readonly=True)
    plain_key, stack_key = list(ro.runs("main")["series_key"])
    ro.close()
    assert plain_key != stack_key
    # the capture at torch_npu's defaults keeps the key its run had before the options were read
    con = sqlite3.connect(db)
    stored = json.loads(con.execute("select config from runs where id = 1").fetchone()[0])
    con.close()
    assert stored["collection"]["options"]["with_stack"] is False
    assert plain_key == series_key({k: v for k, v in stored.items() if k != "collection"})


def test_pooling_judges_not_recorded_as_the_series_key_does():
    """A run not recording with_stack is in the default series, so it is not pooled with a
    with_stack run either; against a run at the defaults it is the same job."""
    from perfgate.metrics.collection import measured_difference
    assert measured_difference(_with(with_stack=None), _with(with_stack=True)) == "with_stack: not recorded vs true"
    assert measured_difference(_with(with_stack=None), _with()) is None
    assert measured_difference({}, _with(with_stack=True)) == "with_stack: not recorded vs true"
