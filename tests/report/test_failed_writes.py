"""A report that cannot be written takes the run's other reports with it: no JUnit or Markdown of a
run whose JSON (or HTML) failed is left looking current."""
from __future__ import annotations

import pytest

from perfgate import errors, terms
from perfgate.app.gate import CheckReports, check_and_report
from perfgate.errors import StoreError


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
        check_and_report(cap, "l1", policy=policy, store=store, reports=CheckReports(out))
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left == []   # no PASS JUnit / Markdown of a run that exits 5
    monkeypatch.setattr(writers, "write_atomic", real)
    result, paths = check_and_report(cap, "l1", policy=policy, store=store, reports=CheckReports(out))
    assert result.status == terms.PASS and sorted(p.name for p in out.iterdir()) == [
        "perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"]


def test_failed_html_write_removes_the_three_reports(pair, tmp_path, monkeypatch):
    pytest.importorskip("jinja2")
    cap, store, policy = pair
    out = tmp_path / "out"
    from perfgate.report import writers

    def failing(result, path, **kw):
        raise StoreError("report.html: write failed: No space left on device", path=path)
    monkeypatch.setattr(writers, "write_check_html", failing)
    try:
        errors.require_extra("html", "--html")
    except errors.PerfgateError:
        pytest.skip("the html extra is not installed")
    with pytest.raises(StoreError):
        check_and_report(cap, "l1", policy=policy, store=store,
                         reports=CheckReports(out, html_path=tmp_path / "r.html"))
    assert sorted(p.name for p in out.iterdir()) == []
