"""The sweep's p50 columns of a pipeline-parallel capture, which has stage p50s and no pooled p50:
each is the job-level p50 (:func:`perfgate.metrics.stages.job_p50`, the largest stage p50), the
step time's stage named; a capture of one stage keeps its pooled p50 values."""
from __future__ import annotations

from perfgate.app.sweep import COLUMNS, rollup_row, sweep_one
from perfgate.policy import load_policy
from perfgate.synth import SynthSpec, pipeline_spec, write_capture

P50_COLUMNS = ("step_time_p50_us", "comm_us", "comm_share", "top_hccl_kind", "share_unstructured")


def _largest_stage_p50(fp, name, **labels):
    extra = "".join(f"{k}={v}," for k, v in sorted(labels.items()))
    vals = [fp.metrics[f"{name}{{{extra}view=stage{s}.p50}}"].value for s in (0, 1)]
    return max(vals)


def test_a_pipeline_capture_fills_every_p50_column(tmp_path):
    from perfgate.app.run import fingerprint_path
    from perfgate.terms import TraceMode
    cap = write_capture(tmp_path / "pp", pipeline_spec(seed=3))
    row = sweep_one(cap, load_policy())
    assert row["status"] == "ok" and set(COLUMNS) - {"capture", "cached"} <= set(row), row
    assert all(row[c] is not None for c in P50_COLUMNS), row
    fp = fingerprint_path(cap, load_policy(), with_trace=TraceMode.AUTO, workers=1)
    assert "step.time_us{view=p50}" not in fp.metrics
    assert row["step_time_p50_us"] == _largest_stage_p50(fp, "step.time_us")
    s = [fp.metrics[f"step.time_us{{view=stage{s}.p50}}"].value for s in (0, 1)]
    assert row["step_time_p50_stage"] == s.index(max(s))
    assert row["comm_us"] == _largest_stage_p50(fp, "step.comm_us")
    assert row["comm_share"] == _largest_stage_p50(fp, "share.category", category="Comm")


def test_a_capture_of_one_stage_keeps_its_pooled_p50_columns(tmp_path):
    from perfgate.app.run import fingerprint_path
    from perfgate.terms import TraceMode
    cap = write_capture(tmp_path / "one", SynthSpec(ranks=2, steps=2, seed=3))
    fp = fingerprint_path(cap, load_policy(), with_trace=TraceMode.AUTO, workers=1)
    row = rollup_row(fp)
    m = fp.metrics
    assert row["step_time_p50_stage"] is None
    assert row["step_time_p50_us"] == m["step.time_us{view=p50}"].value
    assert row["comm_us"] == m["step.comm_us{view=p50}"].value
    assert row["comm_share"] == m["share.category{category=Comm,view=p50}"].value
    kinds = {v.labels["kind"]: v.value for v in m.values() if v.name == "comm.time_us" and v.labels.get("view") == "p50"}
    assert row["top_hccl_kind"] == max(kinds, key=kinds.get)
