"""The HTML report's p50 charts of a pipeline-parallel job, which has stage p50s and no pooled p50:
each p50 value is the job-level one (:func:`perfgate.metrics.stages.job_p50`, the largest stage
p50), the caption names the stages, and no chart is left without data."""
from __future__ import annotations

import re

import pytest

from perfgate.app.gate import check, load_checked_policy, save_baseline
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.ingest import load_capture
from perfgate.report.html import render_capture_html, render_html
from perfgate.store.baselines import BaselineStore
from perfgate.synth import pipeline_spec, write_capture

pytest.importorskip("matplotlib")

P50_CHARTS = ("chart-shares", "chart-anatomy", "chart-families")
MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"


def _figure(page: str, cid: str) -> str:
    i = page.index(f'id="{cid}"')
    return page[i:page.index("</figure>", i)]


def _p50_charts_filled(page: str) -> None:
    for cid in P50_CHARTS:
        fig = _figure(page, cid)
        assert 'class="nodata"' not in fig and "<svg" in fig, (cid, fig[:400])
        caption = re.search(r"<figcaption>(.*?)</figcaption>", fig, re.S).group(1)
        assert "Several pipeline stages: each p50 is the largest stage p50" in caption, (cid, caption)


def test_a_pipeline_capture_report_draws_its_p50_charts(tmp_path):
    policy = load_checked_policy()
    fp = fingerprint_capture(load_capture(write_capture(tmp_path / "pp", pipeline_spec(seed=1))), policy)
    assert "step.time_us{view=p50}" not in fp.metrics
    page = render_capture_html(fp)
    _p50_charts_filled(page)
    assert MATMUL in _figure(page, "chart-families")


def test_a_pipeline_check_report_draws_its_p50_charts(tmp_path):
    policy = load_checked_policy()
    store = BaselineStore(tmp_path / "bl")
    save_baseline(write_capture(tmp_path / "base", pipeline_spec(seed=1)), "main", policy=policy, store=store, env={})
    cand = write_capture(tmp_path / "cand", pipeline_spec(seed=2, slowdown={MATMUL: 1.3}, inject_ranks=[2, 3]))
    result = check(cand, "main", policy=policy, store=store, env={})
    page = render_html(result)
    _p50_charts_filled(page)
    assert MATMUL in _figure(page, "chart-families")   # the slowed family's change, from the stage p50s
