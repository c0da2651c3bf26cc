"""Report files as library calls: the HTML reports (gather what :mod:`perfgate.report.html`
draws — the stored baseline's fingerprint, recorded history series — and write one
self-contained file atomically), the JUnit / Markdown / JSON files of ``check`` and the nightly
history report (Markdown + PNG plots).

Sits at the gate's level: it reads the baseline store and the history database (store layer)
and renders with the report layer, which itself does no I/O.
"""
from __future__ import annotations

import re
from pathlib import Path

from perfgate import terms
from perfgate.errors import CorruptBaselineError, NoBaselineError, StoreError
from perfgate.model import Fingerprint, GateResult
from perfgate.store.reportpaths import check_report_paths, remove_stale_check_reports  # noqa: F401 - re-exported
from perfgate.store.atomic import write_atomic
from perfgate.store.baselines import BaselineStore


def _history(history_path, keys, config=None):
    """Recorded series for ``keys``, or None when there is no history database (no trend section)."""
    if history_path is None or not Path(history_path).is_file():
        return None
    from perfgate.history.store import trend_series
    return trend_series(history_path, keys, config=config)


def write_check_html(result: GateResult, path, *, store: BaselineStore | None = None, history_path=None) -> Path:
    """Render a ``check`` result as HTML and write it to ``path`` (atomic).

    The stored baseline (``result.baseline_name`` in ``store``; not for ``history:`` baselines)
    adds its per-rank step times and config; an unreadable one is left out, not an error.
    Trend sparklines are drawn when ``history_path`` is an existing history database.

    An unreadable history database draws no trends and the page says why in its notes.

    Raises:
        StoreError: the write failed (exit 5).
    """
    from perfgate.report.html import render_html, sparkline_keys   # HTML only: not imported by check's files
    base = None
    name = result.baseline_name
    if store is not None and name and not name.startswith("history:") and result.baseline_provenance:
        try:
            base, _ = store.load(name)
        except (NoBaselineError, CorruptBaselineError):
            base = None
    keys = sparkline_keys(result)
    try:
        history = _history(history_path, keys, base.config if base else None)
    except StoreError as e:
        # the history database only draws trend sparklines here (a history:BRANCH baseline that
        # cannot be read is already the result's STORE_ERROR): a damaged one costs the trends, with
        # a note on the page, never the verdict or the other reports
        history = None
        if result.status not in terms.STORE_FAILED:
            import dataclasses
            result = dataclasses.replace(result, notes=tuple(result.notes) + (
                f"trend sparklines not drawn: the history database {history_path} cannot be read ({e})",))
    text = render_html(result, baseline=base, history=history, trend_keys=keys)
    path = Path(path)
    write_atomic(path, text)
    return path


def write_capture_html(fp: Fingerprint, path, *, policy=None, history_path=None) -> Path:
    """Render one capture's fingerprint as HTML (``perfgate report CAPTURE``) and write it to
    ``path`` (atomic). Raises StoreError as :func:`write_check_html`."""
    from perfgate.report.html import render_capture_html, sparkline_keys
    keys = sparkline_keys(fingerprint=fp, policy=policy)
    text = render_capture_html(fp, history=_history(history_path, keys, fp.config), trend_keys=keys, policy=policy,
                               fail_closed=tuple(policy.fail_closed) if policy is not None else ())
    path = Path(path)
    write_atomic(path, text)
    return path


def write_capture_error_html(error, path, *, source=None) -> Path:
    """Write the page of a capture that could not be read (``perfgate report`` on an
    InvalidCaptureError; :func:`perfgate.report.html.render_capture_error_html`) to ``path``
    (atomic: temp file + os.replace, the old file is kept on failure).

    Args:
        error: the InvalidCaptureError (or its ``to_dict()``).

    Raises:
        StoreError: the write failed (exit 5 elsewhere; ``perfgate report`` keeps exit 3).
    """
    from perfgate.report.html import render_capture_error_html
    doc = error.to_dict() if hasattr(error, "to_dict") else dict(error)
    path = Path(path)
    write_atomic(path, render_capture_error_html(doc, source=source))
    return path


def write_history_report(hs, policy, out, *, branch: str | None = None, last_n: int = 10) -> tuple[int, Path]:
    """``perfgate history report``: the gated metrics of ``hs`` (a HistoryStore) whose change
    point is among the last ``last_n`` kept runs, as ``out/report.md`` (one
    :func:`perfgate.report.history.render_trend` block each, atomic) with one PNG plot per metric
    (``out/metric-NNN.png``). Returns ``(metrics reported, path of report.md)``.

    Raises:
        UsageError: matplotlib (the ``html`` extra) is not installed: refused before any work,
            whether or not a metric changed (exit 2).
        StoreError: a write failed (exit 5).
    """
    from perfgate.errors import require_extra
    from perfgate.history.trend import gated_keys, trends
    from perfgate.report.history import plot_series, render_trend
    outp = Path(out)
    remove_stale_history_report(outp)
    require_extra("html", "perfgate history report (its plots)")
    try:
        outp.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the report folder: {e.strerror or e}", path=outp) from None
    parts = [f"# perfgate history report{' — branch ' + branch if branch else ''}", ""]
    n = 0
    from perfgate.report.history import severity_key
    for t in sorted(trends(hs, policy, gated_keys(hs, policy), branch),
                    key=lambda t: severity_key(t.key, t.change_points)):  # step time first
        recent = [c for c in t.change_points if c.index >= len(t.series) - last_n]
        if not recent:
            continue
        n += 1
        png = outp / f"metric-{n:03d}.png"
        write_atomic(png, plot_series(t.key, t.series, t.change_points))
        # the series tag, as `history trend` prints it: runs of several series are trended apart
        title = t.key + (f" (series {t.series_key})" if getattr(t, "series_key", None) else "")
        parts += [render_trend(title, t.series, t.change_points), f"![{t.key}]({png.name})", ""]
    if n == 0:
        parts.append(f"No gated metric changed in the last {last_n} run(s).")
    write_atomic(outp / "report.md", "\n".join(parts) + "\n")
    return n, outp / "report.md"


_HISTORY_PNG = re.compile(r"metric-\d{3,}\.png")


def remove_stale_history_report(out) -> None:
    """Delete what an earlier ``perfgate history report`` left in ``out`` (``report.md`` and its
    ``metric-NNN.png`` plots, nothing else), before the history is read: a run that is refused
    (exit 5: no or unreadable database) or fails mid-way then leaves no earlier report where CI
    would take it for this run's, and no plot of a metric this run does not report. Each file
    goes through :func:`perfgate.store.atomic.discard_stale` (links stay links; folders,
    streams, FIFOs and a missing ``out`` are left alone)."""
    from perfgate.store.atomic import discard_stale
    outp = Path(out)
    discard_stale(outp / "report.md")
    try:
        plots = [p for p in outp.iterdir() if _HISTORY_PNG.fullmatch(p.name)]
    except OSError:  # no folder yet (or not a folder: the write reports it)
        return
    for p in plots:
        discard_stale(p)


def write_check_reports(result: GateResult, out, *, junit=None, markdown=None, json_path=None,
                        key: str | None = None, junit_key: str | None = None) -> dict[str, Path]:
    """The three files of ``perfgate check`` (each atomic): JUnit XML (``junit``, default
    ``out/perfgate-junit.xml``), the Markdown PR comment (``markdown``, default
    ``out/perfgate-report.md``; sticky-comment ``key``) and the JSON result (``json_path``,
    default ``out/perfgate-result.json``; ``"-"``: not written here, the caller prints it to
    stdout, and the path reads ``<stdout>``). ``junit_key`` (a matrix leg's key) names the JUnit
    suites so that legs' files merge without a collision. Returns
    ``{"junit" | "markdown" | "json": path}``.

    Raises:
        StoreError: a write failed (exit 5).
    """
    from perfgate.report import render_junit, render_markdown
    from perfgate.report.json_report import render_json_bytes
    paths = check_report_paths(out, junit=junit, markdown=markdown, json_path=json_path)
    written: list[Path] = []
    try:
        write_atomic(paths["junit"], render_junit(result, key=junit_key))
        written.append(paths["junit"])
        write_atomic(paths["markdown"], render_markdown(result, key=key))
        written.append(paths["markdown"])
        if json_path == "-":   # JSON to stdout (by the caller), the human summary to stderr
            paths["json"] = "<stdout>"
        else:
            write_atomic(paths["json"], render_json_bytes(result))
    except BaseException:
        discard_check_reports(written)   # no report of a run that exits 5 keeps its verdict (a PASS)
        raise
    return paths


def discard_check_reports(paths) -> None:
    """Remove the report files this run already wrote (``paths``: files of
    :func:`write_check_reports` / the ``--html`` page) when a later report write fails: the run
    exits 5, and no report of it may stay behind saying PASS (an ``if: always()`` JUnit upload).
    Goes through :func:`perfgate.store.atomic.discard_stale` (streams and special files are left)."""
    from perfgate.store.atomic import discard_stale
    for p in paths:
        if isinstance(p, (str, Path)) and str(p) != "<stdout>":
            discard_stale(p)


__all__ = ["write_check_html", "write_capture_html", "write_capture_error_html", "write_history_report",
           "write_check_reports", "discard_check_reports", "check_report_paths", "remove_stale_check_reports", "StoreError"]
