"""HTML reports as library calls: gather what :mod:`perfgate.report.html` draws (the stored
baseline's fingerprint, recorded history series) and write one self-contained file atomically.

Sits at the gate's level: it reads the baseline store and the history database (store layer)
and renders with the report layer, which itself does no I/O.
"""
from __future__ import annotations

from pathlib import Path

from perfgate.errors import NoBaselineError, StoreError
from perfgate.model import Fingerprint, GateResult
from perfgate.report.html import render_capture_error_html, render_capture_html, render_html, sparkline_keys
from perfgate.store.atomic import write_atomic
from perfgate.store.baselines import BaselineStore
from perfgate.history.store import trend_series


def _history(history_path, keys, config=None):
    """Recorded series for ``keys``, or None when there is no history database (no trend section)."""
    if history_path is None or not Path(history_path).is_file():
        return None
    return trend_series(history_path, keys, config=config)


def write_check_html(result: GateResult, path, *, store: BaselineStore | None = None, history_path=None) -> Path:
    """Render a ``check`` result as HTML and write it to ``path`` (atomic).

    The stored baseline (``result.baseline_name`` in ``store``; not for ``history:`` baselines)
    adds its per-rank step times and config; an unreadable one is left out, not an error.
    Trend sparklines are drawn when ``history_path`` is an existing history database.

    Raises:
        StoreError: the history database is unreadable, or the write failed (exit 5).
    """
    base = None
    name = result.baseline_name
    if store is not None and name and not name.startswith("history:") and result.baseline_provenance:
        try:
            base, _ = store.load(name)
        except NoBaselineError:
            base = None
    keys = sparkline_keys(result)
    text = render_html(result, baseline=base, history=_history(history_path, keys, base.config if base else None),
                       trend_keys=keys)
    path = Path(path)
    write_atomic(path, text)
    return path


def write_capture_html(fp: Fingerprint, path, *, policy=None, history_path=None) -> Path:
    """Render one capture's fingerprint as HTML (``perfgate report CAPTURE``) and write it to
    ``path`` (atomic). Raises StoreError as :func:`write_check_html`."""
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
    doc = error.to_dict() if hasattr(error, "to_dict") else dict(error)
    path = Path(path)
    write_atomic(path, render_capture_error_html(doc, source=source))
    return path


__all__ = ["write_check_html", "write_capture_html", "write_capture_error_html", "StoreError"]
