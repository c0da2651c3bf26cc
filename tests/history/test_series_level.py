"""The profiler level splits a history series: a rolling-baseline pool holds one level (as repeated
captures of one side refuse mixed levels, perfgate.metrics.repeat, and calibrate's runs), and trends
and sparklines draw one level per line. A Level2 run costs the job more profiling overhead, so a
pool of Level1 and Level2 runs read the configuration change as noise (the median of the mix and a
wide band). A candidate of a level the history lacks is still judged against the newest level
with enough runs, with a note (level2 against two level1 runs). Databases
recorded before keep working: the level is the runs table's profiler_level column, recorded since
schema 1; the stored series_key is unchanged."""
import pytest

from perfgate.compare.rules import config_notes
from perfgate.errors import NoBaselineError
from perfgate.history.store import HistoryStore, series_id, series_key, trend_series
from perfgate.history.trend import trends
from perfgate.model import metric_key

from test_history import CONFIG, fp_of

L1 = dict(CONFIG, profiler_level="Level1")
L2 = dict(CONFIG, profiler_level="Level2")
KEY = metric_key("step.time_us", view="p50")


@pytest.fixture
def mixed(tmp_path):
    """Branch main: three Level1 runs at 100 ms, then two Level2 runs at 130 ms (the overhead)."""
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    for i, (cfg, v) in enumerate([(L1, 100), (L1, 101), (L1, 99), (L2, 130), (L2, 131)]):
        hs.record(fp_of({"step.time_us": v * 1000}, config=cfg), branch="main", commit=f"c{i}",
                  recorded_at=f"2026-01-01T00:0{i}:00")
    hs.close()
    return db


def test_rolling_baseline_takes_only_runs_of_the_candidates_profiler_level(mixed):
    assert series_key(L1) == series_key(L2)          # the stored key: unchanged, the level is its own column
    assert series_id(L1) != series_id(L2) and series_id(L2) == series_key(L2) + "/Level2"
    ro = HistoryStore(mixed, readonly=True)
    base, noise = ro.rolling_baseline("main", L2, window=5, min_runs=2, band_k=3.0)
    assert base.metrics[KEY].value == 130_500 and base.provenance["runs"] == [5, 4]
    assert noise[KEY] == pytest.approx(3 * 1.4826 * 500)   # MAD of 130 / 131 ms, not of all five
    base, _ = ro.rolling_baseline("main", L1, window=5, min_runs=2, band_k=3.0)
    assert base.metrics[KEY].value == 100_000 and sorted(base.provenance["runs"]) == [1, 2, 3]
    # no Level0 run: the newest level with enough runs (Level2), and the comparison notes the change
    base, _ = ro.rolling_baseline("main", dict(CONFIG, profiler_level="Level0"), window=5, min_runs=2, band_k=3.0)
    assert base.metrics[KEY].value == 130_500 and base.config["profiler_level"] == "Level2"
    assert "profiler level changed: baseline Level2 -> candidate Level0" in config_notes(
        base, fp_of({"step.time_us": 1}, config=dict(CONFIG, profiler_level="Level0")))
    # two Level2 runs are too few for min_runs 3: the Level1 runs judge it (never a mix, never NO_BASELINE)
    base, noise = ro.rolling_baseline("main", L2, window=5, min_runs=3, band_k=3.0)
    assert base.metrics[KEY].value == 100_000 and noise[KEY] == pytest.approx(3 * 1.4826 * 1000)
    with pytest.raises(NoBaselineError, match=r"3 kept run\(s\) in this series, 4 needed .*2 other run.*profiler "
                                              r"level"):
        ro.rolling_baseline("main", L1, window=5, min_runs=4, band_k=3)
    ro.close()


def test_trends_and_sparklines_never_draw_two_levels_on_one_line(mixed, policy):
    ro = HistoryStore(mixed, readonly=True)
    got = {t.series_key: list(t.series["value"]) for t in trends(ro, policy, [(KEY, "lower_is_better")], "main")}
    ro.close()
    assert got == {series_id(L1): [100_000, 101_000, 99_000], series_id(L2): [130_000, 131_000]}
    assert list(trend_series(mixed, [KEY], config=L2)[KEY]["value"]) == [130_000, 131_000]
    assert list(trend_series(mixed, [KEY], config=L1)[KEY]["value"]) == [100_000, 101_000, 99_000]


def test_trend_names_the_series_of_a_metric_that_has_several_and_why_runs_split(mixed):
    """Plain ``history trend`` printed kernel.topn twice with different counts and no series, and
    "the longest series has 3 run(s)" for 5 runs recorded."""
    from perfgate.history.changepoints import trend_notes
    import pandas as pd
    runs = pd.DataFrame({"run_id": [1, 2], "commit": ["a", "b"], "set_value": ['["x"]', '["y"]'],
                         "value": [None, None]})
    results = [("kernel.topn{view=p50}", "abc/Level1", runs, []), ("kernel.topn{view=p50}", "abc/Level2", runs, []),
               ("step.time_us{view=p50}", "abc/Level1", pd.DataFrame({"run_id": [1, 2], "commit": ["a", "b"],
                                                                        "set_value": [None, None],
                                                                        "value": [1.0, 2.0]}), [])]
    notes = trend_notes(results, {"alpha": 0.01, "min_size": 5, "min_after": 3})["summary"]
    sets = [n for n in notes if n.startswith("kernel.topn")]
    assert sets[0].startswith("kernel.topn{view=p50} [series abc/Level1]: ")
    assert sets[1].startswith("kernel.topn{view=p50} [series abc/Level2]: ")
    short = next(n for n in notes if n.startswith("history too short"))
    assert "the runs fall into 2 series: split by rank count" in short and "never compared" in short


def test_journal_notes_rounds_of_other_levels_and_never_compares_across_series():
    """A Level2 round was "-3.7 % vs previous kept" against a Level1 one with no note: compared, as check judges across levels, with a note; across series never."""
    import pandas as pd
    from perfgate.report.history import journal_table, render_journal
    runs = pd.DataFrame({"id": [1, 2, 3, 4], "note": ["a", "b", "c", "d"], "status": ["kept"] * 4,
                         "commit": ["1", "2", "3", "4"], "series_key": ["s1", "s1", "s2", "s1"],
                         "profiler_level": ["Level1", "Level2", "Level1", "Level1"]})
    values = pd.Series({1: 100.0, 2: 110.0, 3: 50.0, 4: 90.0})
    t = journal_table(runs, values, "k")
    assert t["vs_previous_kept"].round(3).tolist()[1] == 0.1             # same series, other level: compared
    assert pd.isna(t["vs_previous_kept"].iloc[2]) and pd.isna(t["vs_first"].iloc[2])   # another series
    assert round(t["vs_previous_kept"].iloc[3], 4) == round(90 / 110 - 1, 4)   # back to s1: its own previous
    md = render_journal(t, "k")
    assert "| series |" in md and "| 3 | c | kept | s2 | 50.0 | — | — |" in md
    assert "profiled at different levels (Level1, Level2)" in md
    assert "series s1 (rounds of other series are not compared)" in md
    assert "| step.time_us{view=p50} (us, elapsed) |" in render_journal(t.rename(columns={"k": "step.time_us{view=p50}"}),
                                                                      "step.time_us{view=p50}")
