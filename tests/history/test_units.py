"""History trend / report blocks name the metric's unit and caliber, and a part metric's table
says its before / after are the part's normalised ΣDuration, not the share (it read
``share.category`` as 41.51% -> 53.54% where the recorded shares were 0.476-0.483, and
``block.share`` read 112.03 %)."""
import pandas as pd

from perfgate.history.changepoints import ChangePoint
from perfgate.report.history import render_trend, unit_text


def _series(n=6):
    return pd.DataFrame({"recorded_at": [f"2026-12-0{i + 1}" for i in range(n)], "value": [1.0] * n})


def _cp(key):
    return ChangePoint(key=key, index=3, run_id=4, commit="c3", before=0.4151, after=0.5354, rel_change=0.29,
                       direction="regression", p_value=0.002, n_before=3, n_after=3, confirmed=True)


def test_unit_text_names_unit_and_caliber():
    assert unit_text("step.time_us{view=p50}") == "us, elapsed"
    assert unit_text("step.computing_us{view=p50} (series abc/Level1)").startswith("us, ")
    assert unit_text("kernel.calls_per_step{family=f,view=p50}") == "calls"
    assert unit_text("no.such_metric") == "unit not known"


def test_trend_heading_carries_the_unit():
    text = render_trend("step.time_us{view=p50}", _series(), [])
    assert text.startswith("### `step.time_us{view=p50}` (us, elapsed)")


def test_part_metric_table_names_its_quantity():
    key = "share.category{category=MatMul,view=p50}"
    text = render_trend(key, _series(), [_cp(key)])
    assert "part before (us/step)" in text and "not the recorded share or ratio" in text
    assert text.startswith(f"### `{key}` (us per step: the part it stands for)")
    plain = render_trend("step.time_us{view=p50}", _series(), [_cp("step.time_us{view=p50}")])
    assert "| before | after |" in plain


def test_query_names_unit_and_caliber_and_runs_print_no_none(tmp_path, policy):
    from click.testing import CliRunner

    from perfgate.cli import main
    from perfgate.app.gate import HistoryEntry, record_history
    from perfgate.synth import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    record_history(write_capture(tmp_path / "s0", SynthSpec(seed=0)), HistoryEntry("main", commit="c0"),
                   policy=policy, history_path=db, env={})
    r = CliRunner().invoke(main, ["history", "query", "--db", str(db), "--metric", "step.time_us{view=p50}",
                                  "--format", "csv"])
    assert r.exit_code == 0 and r.output.splitlines()[0].endswith(",value,unit,caliber"), r.output
    assert r.output.splitlines()[1].endswith(",us,elapsed")
    r = CliRunner().invoke(main, ["history", "runs", "--db", str(db)])
    assert r.exit_code == 0 and "None" not in r.output and "NaN" not in r.output, r.output
