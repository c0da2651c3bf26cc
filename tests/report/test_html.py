"""The HTML report: content checks on the page text, and an end-to-end check in
headless Chromium (Debian's /usr/bin/chromium driven by the Playwright client, no browser
download) with the network disabled: no console error, no request leaves the file, the verdict
and every chart visible, a screenshot saved.

Screenshots go to the test's tmp dir and, when PERFGATE_ARTIFACTS names a folder, are copied
there (e.g. ``PERFGATE_ARTIFACTS=test-artifacts``)."""
from __future__ import annotations

import os
import re
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate import terms
from perfgate.cli import main
from perfgate.app.gate import HistoryEntry, check, record_history, save_baseline
from perfgate.report.writers import write_check_html
from perfgate.model import parse_metric_key
from perfgate.report.html import render_html, sparkline_keys
from perfgate.store.baselines import BaselineStore
from perfgate.history.store import trend_series
from perfgate.synth import SynthSpec, mutate, write_capture
from _browser import ARGS, CHROMIUM, playwright_or_skip

CHARTS = ("chart-shares", "chart-ranks", "chart-anatomy", "chart-families")
REGRESS = {"extra_calls": {"aclnnCast_CastAiCore_Cast": 2.0}, "slowdown": {"aclnnMatmul_MatMulV3Common_MatMulV3": 1.4}}


def _run(*args, env=None):
    r = CliRunner().invoke(main, list(map(str, args)), env=env or {}, catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def synth_check(tmp_path_factory):
    """A synthetic regression checked against its baseline, with 3 recorded history runs."""
    d = tmp_path_factory.mktemp("html-synth")
    from perfgate.app.gate import load_checked_policy
    policy = load_checked_policy()
    store = BaselineStore(d / "bl")
    base = write_capture(d / "base", SynthSpec(ranks=4, steps=3, seed=1))
    cand = write_capture(d / "cand", SynthSpec(ranks=4, steps=3, seed=2, **REGRESS))
    save_baseline(base, "main", policy=policy, store=store, env={})
    db = d / "history.sqlite"
    for seed in (3, 4, 5):
        record_history(write_capture(d / f"h{seed}", SynthSpec(ranks=4, steps=3, seed=seed)),
                       HistoryEntry("main", commit=f"c{seed}"), policy=policy, history_path=db, env={})
    result = check(cand, "main", policy=policy, store=store, env={})
    html = write_check_html(result, d / "synth.html", store=store, history_path=db)
    return result, html, store, db


def _external_refs(text: str) -> list:
    """src= / href= / url() pointing anywhere but inside the page."""
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text) + re.findall(r"url\(\s*['\"]?([^)'\"]*)", text)
    return [r for r in refs if not (r.startswith("#") or r.startswith("data:"))]


def test_check_page_has_verdict_tables_charts_and_nothing_external(synth_check):
    result, html, _, _ = synth_check
    text = html.read_text()
    assert result.status == terms.FAIL
    assert '<section id="verdict" class="fail">' in text and "REGRESSION" in text
    failing = [c for c in result.comparisons if c.fails]
    assert failing and all(_escaped(c.key) in text and _escaped(c.evidence) in text for c in failing)
    for cid in CHARTS + ("chart-trends",):
        block = text.split(f'id="{cid}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in block, cid
    assert "<script" not in text.lower() and not _external_refs(text)
    assert 'id="selfchecks"' in text and 'id="provenance"' in text
    assert len(text) < 1_000_000


def _escaped(s: str) -> str:
    import html
    return html.escape(s, quote=True)


def test_families_chart_names_the_injected_regressions(synth_check):
    result, html, _, _ = synth_check
    fam = html.read_text().split('id="chart-families"', 1)[1].split("</figure>", 1)[0]
    # the slowed MatMul family moves most; the doubled Cast family shows its +10 calls per step
    cast = [c for c in result.comparisons if c.key == "kernel.calls_per_step{family=aclnnCast_CastAiCore_Cast,view=p50}"][0]
    assert cast.candidate == 2 * cast.baseline
    assert "aclnnMatmul_MatMulV3Common_MatMulV3" in fam
    assert f"calls {cast.candidate - cast.baseline:+g}" in fam


def test_per_rank_step_time_is_the_gated_step_time(synth_check):
    """detail.step_time (drawn per rank) reduces to the fingerprint's step.time_us rank0 / p50 views."""
    result, _, _, _ = synth_check
    per = {}
    for r in result.detail["step_time"]:
        per.setdefault(r["rank"], []).append(r["time_us"])
    med = {r: statistics.median(v) for r, v in per.items()}
    cand = {c.key: c.candidate for c in result.comparisons}
    assert sorted(med) == [0, 1, 2, 3]
    assert med[0] == pytest.approx(cand["step.time_us{view=rank0}"], abs=1e-3)
    assert statistics.median(med.values()) == pytest.approx(cand["step.time_us{view=p50}"], abs=1e-3)
    assert max(med.values()) == pytest.approx(cand["step.time_us{view=max}"], abs=1e-3)


def test_trend_sparklines_come_from_the_recorded_series(synth_check):
    result, html, _, db = synth_check
    keys = sparkline_keys(result)
    assert keys[0] in {c.key for c in result.comparisons if c.fails}   # failing metrics first
    series = trend_series(db, keys)
    assert series and all(len(s) == 3 for s in series.values())
    trends = html.read_text().split('id="chart-trends"', 1)[1].split("</figure>", 1)[0]
    assert trends.count('<td class="spark"><svg') == len(series)
    assert trend_series(db.parent / "absent.sqlite", keys) == {}


def test_capture_report_valid_and_invalid(tmp_path, policy):
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=7))
    out = tmp_path / "c.html"
    code, text = _run("report", cap, "--html", out, "--history", tmp_path / "none.sqlite")
    assert code == 0 and "VALID_CAPTURE" in text
    page = out.read_text()
    assert 'class="pass"' in page and all(f'id="{c}"' in page for c in CHARTS) and 'id="chart-trends"' not in page
    assert "Top kernel families by ΣDuration" in page
    # break one communication row's duration: comm_equality fails, the page says so, exit 3
    bad = write_capture(tmp_path / "bad", SynthSpec(ranks=1, steps=2, seed=7))
    od = next(bad.glob("*/ASCEND_PROFILER_OUTPUT"))
    rows = (od / "kernel_details.csv").read_text().splitlines()
    comm_row = next(i for i, line in enumerate(rows[1:], start=1) if "hcom_" in line)
    mutate.set_duration(od, comm_row, 99999.0)
    code, text = _run("report", bad, "--html", tmp_path / "bad.html")
    page = (tmp_path / "bad.html").read_text()
    assert code == 3 and "INVALID_CAPTURE" in text
    assert 'class="invalid"' in page and "self-check comm_equality failed" in page


@pytest.mark.slow
def test_check_html_cli_keeps_exit_code_and_reports_write_failure(tmp_path):
    base = write_capture(tmp_path / "base", SynthSpec(seed=1))
    worse = write_capture(tmp_path / "worse", SynthSpec(seed=3, extra_calls={"aclnnAdd_AddAiCore_Add": 2}))
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "main", base, "--baseline-dir", bl)[0] == 0
    code, out = _run("check", "--baseline", "main", worse, "--baseline-dir", bl, "--out", tmp_path / "o",
                     "--html", tmp_path / "r.html", "--history", tmp_path / "none.sqlite")
    assert code == 1 and "html:" in out and (tmp_path / "r.html").stat().st_size > 10_000
    (tmp_path / "file").write_text("x")
    code, out = _run("check", "--baseline", "main", worse, "--baseline-dir", bl, "--out", tmp_path / "o2",
                     "--html", tmp_path / "file" / "r.html")
    # an HTML path under a regular file is refused before any work: a report that cannot be
    # written, exit 5 (README's exit table; was exit 2), naming the option
    assert code == 5 and "--html" in out and "is a file, not a folder" in out, out
    assert not (tmp_path / "o2").exists()


def test_no_baseline_page_says_nothing_was_judged(tmp_path, policy):
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    r = check(cap, "absent", policy=policy, store=BaselineStore(tmp_path / "bl"), env={})
    page = render_html(r)
    assert r.status == terms.NO_BASELINE and "NO_BASELINE" in page and "not a pass" in page
    assert 'id="chart-ranks"' in page and "<svg" in page.split('id="chart-ranks"', 1)[1].split("</figure>")[0]


# -- the browser ------------------------------------------------------------------------------------




def _view(html: Path, png: Path, charts) -> dict:
    """Open ``html`` offline in Chromium; assert what a reader must see; screenshot to ``png``."""
    sync_api = playwright_or_skip()
    console, failed, attempted = [], [], []
    with sync_api.sync_playwright() as p:
        # launch() gives the browser a fresh temporary profile (user-data-dir) of its own
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            ctx.set_offline(True)

            def route(r):
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    attempted.append(r.request.url)
                    r.abort()
            ctx.route("**/*", route)
            page = ctx.new_page()
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(html.resolve().as_uri(), wait_until="load")
            verdict = page.locator("#verdict")
            assert verdict.is_visible()
            out = {"verdict": verdict.inner_text()}
            for cid in charts:
                svg = page.locator(f"#{cid} svg").first
                assert page.locator(f"#{cid}").is_visible() and svg.is_visible(), cid
                box = svg.bounding_box()
                assert box and box["width"] > 100 and box["height"] > 20, (cid, box)
            assert page.locator("#selfchecks").is_visible() and page.locator("#provenance").is_visible()
            if page.locator("#causes").count():
                out["causes"] = page.locator("#causes").inner_text()
                out["causes_above_charts"] = (page.locator("#causes").bounding_box()["y"]
                                              < page.locator("#charts").bounding_box()["y"])
            if page.locator("#comparisons").count():
                out["charts_above_tables"] = (page.locator("#charts").bounding_box()["y"]
                                              < page.locator("#comparisons").bounding_box()["y"])
            if page.locator("#incomparable").count():
                out["incomparable_open"] = page.locator("#incomparable").get_attribute("open") is not None
            sc, pv = page.locator("#selfchecks").bounding_box(), page.locator("#provenance").bounding_box()
            out["side_by_side"] = abs(sc["y"] - pv["y"]) < 2 and pv["x"] > sc["x"] + 200
            page.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    assert not console, console
    assert not attempted and not failed, (attempted, failed)
    assert png.stat().st_size > 20_000
    dest = os.environ.get("PERFGATE_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy2(png, Path(dest) / png.name)
        shutil.copy2(html, Path(dest) / (png.stem + ".html"))
    return out


@pytest.mark.slow
def test_browser_synthetic_regression(synth_check, tmp_path):
    result, html, _, _ = synth_check
    seen = _view(html, tmp_path / "html-report-synthetic-regression.png", CHARTS + ("chart-trends",))
    failing = result.counts()["gated_regressions"]
    assert failing >= 2  # the injected count and share regressions at least
    assert seen["verdict"].startswith("REGRESSION") and f"{failing} failing" in seen["verdict"]
    assert seen["side_by_side"]
    # causes first (the two injected ones), charts before the long tables
    assert "aclnnMatmul_MatMulV3Common_MatMulV3" in seen["causes"] and "aclnnCast_CastAiCore_Cast" in seen["causes"]
    assert seen["causes_above_charts"] and seen["charts_above_tables"]


@pytest.mark.slow
@pytest.mark.real
def test_browser_real_level1_to_level2(text_captures, tmp_path, policy):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level2", "main", policy=policy, store=store, env={})
    html = write_check_html(r, tmp_path / "real.html", store=store)
    text = html.read_text()
    shares = text.split('id="chart-shares"', 1)[1].split("</figure>", 1)[0]
    comm = next(c for c in r.comparisons if c.key == "share.category{category=Comm,view=p50}")
    assert f"{comm.candidate * 100:.1f}% ({(comm.candidate - comm.baseline) * 100:+.2f} pp)" in shares
    seen = _view(html, tmp_path / "html-report-real-level1-level2.png", CHARTS)
    assert seen["verdict"].startswith("PASS") and "0 failing" in seen["verdict"]


@pytest.mark.real
@pytest.mark.slow
def test_browser_real_level1_vs_level0_is_partial(text_captures, tmp_path, policy):
    """Level0 against a Level1 baseline: the verdict says partial and names the profiler-level
    change at the top; the incomparable metrics are collapsed below the charts."""
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(text_captures / "level0", "main", policy=policy.allowing_partial(), store=store, env={})  # --allow-partial
    html = write_check_html(r, tmp_path / "l0.html", store=store)
    seen = _view(html, tmp_path / "html-report-real-level1-vs-level0.png", ("chart-ranks", "chart-anatomy"))
    n = r.counts()["gated_incomparable"]
    assert f"(partial: {n} gated metrics not comparable)" in seen["verdict"] and n > 50
    assert "profiler level changed: baseline Level1 -> candidate Level0" in seen["verdict"]
    assert seen["incomparable_open"] is False


def test_every_metric_key_in_sparklines_is_gated(synth_check, policy):
    result, _, _, _ = synth_check
    gated = {c.key for c in result.comparisons if c.gated}
    keys = sparkline_keys(result)
    assert keys and set(keys) <= gated
    assert all(parse_metric_key(k)[1]["view"] in ("rank0", "p50") for k in keys)


@pytest.mark.bench
def test_64_rank_check_report_under_5_mb(tmp_path, policy):
    """A 64-rank check's HTML stays far under 5 MB and opens cleanly (about 25 s: fingerprinting
    128 ranks dominates, so it runs with -m bench)."""
    from perfgate.synth.scale import write_scaled
    store = BaselineStore(tmp_path / "bl")
    base = write_scaled(tmp_path / "a", ranks=64, steps=2, kernels_per_step=100, run=1)
    cand = write_scaled(tmp_path / "b", ranks=64, steps=2, kernels_per_step=100, run=2)
    save_baseline(base, "main", policy=policy, store=store, env={}, workers=1)
    r = check(cand, "main", policy=policy, store=store, env={}, workers=1)
    html = write_check_html(r, tmp_path / "r64.html", store=store)
    size = html.stat().st_size
    print(f"64-rank HTML report: {size / 1e6:.2f} MB, {len(r.self_checks)} self-checks, {len(r.comparisons)} comparisons")
    assert size < 5_000_000 and len(r.detail["step_time"]) == 128
    _view(html, tmp_path / "html-report-64-ranks.png", CHARTS)
