"""Reports: pure functions GateResult -> str (JUnit XML, Markdown, JSON). Nothing prints."""
from perfgate.report.json_report import render_json
from perfgate.report.junit import render_junit
from perfgate.report.markdown import render_markdown, marker

__all__ = ["render_json", "render_junit", "render_markdown", "marker"]
