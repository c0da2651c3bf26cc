"""Where ``perfgate check`` writes its reports, and removing an earlier run's before it starts.

Kept free of heavy imports (no pandas, no report renderers): the command line removes the
earlier reports first of all, before ~0.5 s of imports, so an interrupt that early leaves no
earlier verdict either (a fresh-user report: SIGINT at 0.3 s left the previous PASS files).
"""
from __future__ import annotations

import os
from pathlib import Path


def check_report_paths(out, *, junit=None, markdown=None, json_path=None) -> dict[str, Path]:
    """Where ``perfgate check`` writes its three reports: ``{"junit" | "markdown" | "json": path}``
    (defaults under ``out``; ``json_path`` ``"-"`` still maps to a path that is never written)."""
    out = Path(out)
    return {
        "junit": Path(junit) if junit else out / "perfgate-junit.xml",
        "markdown": Path(markdown) if markdown else out / "perfgate-report.md",
        "json": Path(json_path) if json_path and json_path != "-" else out / "perfgate-result.json",
    }


def remove_stale_check_reports(out, *, junit=None, markdown=None, json_path=None, html_path=None,
                               captures=None) -> None:
    """Delete an earlier run's report files (the three of :func:`check_report_paths` and, when
    given, the ``--html`` page) before a check starts, so that a run that ends without writing
    its own (an internal error, a killed job) never leaves a previous verdict where CI reads one
    (an ``if: always()`` JUnit upload would show a stale PASS). Each goes through
    :func:`perfgate.store.atomic.discard_stale`: a link stays a link (its target is removed);
    missing files, folders, streams and FIFOs are left alone (the write then reports them).

    First, nothing is removed where it must not be: two reports on one file
    (:func:`refuse_shared_report_paths`), or, with ``captures`` (the check's capture path or
    paths), a report among a capture's files
    (:func:`perfgate.ingest.discover.refuse_outputs_among_inputs`).

    Raises:
        UsageError (exit 2): either refusal, before any file is touched."""
    refuse_shared_report_paths(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path)
    if captures is not None:
        from perfgate.ingest.discover import refuse_outputs_among_inputs
        refuse_outputs_among_inputs(captures, {"--out": out, "--junit": junit, "--markdown": markdown,
                                               "--json": json_path, "--html": html_path})
    from perfgate.store.atomic import discard_stale
    paths = list(check_report_paths(out, junit=junit, markdown=markdown, json_path=json_path).values())
    for p in paths + ([Path(html_path)] if html_path else []):
        discard_stale(p)


def refuse_shared_report_paths(out, *, junit=None, markdown=None, json_path=None, html_path=None) -> None:
    """Refuse two of ``perfgate check``'s reports written to one file (``--junit x --json x``,
    or ``--json`` naming the default JUnit file under ``--out``): the later write would replace
    the earlier, leaving JSON where CI reads JUnit. Paths are compared as a write resolves them
    (symbolic links followed); ``--json -`` (stdout) and streams such as ``/dev/stdout``, which
    are written in place, share nothing.

    Raises:
        UsageError (exit 2, before anything is removed or read): naming both options and the file."""
    from perfgate.errors import UsageError
    named = {"--junit": junit, "--markdown": markdown, "--json": None if json_path == "-" else json_path,
             "--html": html_path}
    paths = check_report_paths(out, junit=junit, markdown=markdown, json_path=json_path)
    options = {"--junit": paths["junit"], "--markdown": paths["markdown"], "--json": paths["json"]}
    if html_path:
        options["--html"] = Path(html_path)
    seen: dict = {}
    for option, p in options.items():
        real = os.path.realpath(p)
        if real.startswith("/dev/") or real.startswith("/proc/"):
            continue
        if real in seen:
            first = seen[real]
            said = lambda o: f"{o} {named[o]}" if named.get(o) else f"{o} (default {options[o]})"
            raise UsageError(f"{said(first)} and {said(option)} are one file: each report needs its own",
                             hint="give each of --junit, --markdown, --json and --html a path of its own")
        seen[real] = option
