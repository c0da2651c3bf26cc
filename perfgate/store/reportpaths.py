"""Where ``perfgate check`` writes its reports, and removing an earlier run's before it starts.

Kept free of heavy imports (no pandas, no report renderers): the command line removes the
earlier reports first of all, before ~0.5 s of imports, so an interrupt that early leaves no
earlier verdict either (a SIGINT at 0.3 s must not leave the previous run's PASS files).
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


def refuse_outputs_on_inputs(outputs: dict, inputs: dict) -> None:
    """Refuse, before anything is removed or written, an output (``outputs``: option -> path;
    None and ``-`` skipped) that is one of the command's own inputs (``inputs``: option -> path
    of the policy file, the history database, the baseline store folder; None skipped): an
    earlier report is removed before the inputs are read, so ``--markdown baselines/main.json``
    deleted the baseline it was about to compare against (and with ``--no-baseline-ok`` passed),
    and ``--json h.sqlite`` replaced the history. Paths are compared as a write resolves them
    (symbolic links followed); an input folder (the baseline store) refuses every output inside it.

    Raises:
        UsageError (exit 2): naming the option, the path and the input it would replace."""
    from perfgate.errors import UsageError
    resolved = []
    for option, path in inputs.items():
        if path is None or str(path) == "-":
            continue
        try:
            resolved.append((option, path, os.path.realpath(path), os.path.isdir(path)))
        except (OSError, ValueError):
            continue
    for out_option, out_path in outputs.items():
        if out_path is None or str(out_path) == "-":
            continue
        try:
            real = os.path.realpath(out_path)
        except (OSError, ValueError):
            continue
        for option, path, target, is_dir in resolved:
            if real == target or (is_dir and real.startswith(target.rstrip(os.sep) + os.sep)):
                what = f"inside the {option} folder {path}" if is_dir and real != target else f"the {option} {path}"
                raise UsageError(f"{out_option} {out_path} is {what}, which this command reads: writing there "
                                 f"would replace an input (perfgate removes an earlier report before it reads)",
                                 hint=f"point {out_option} elsewhere, e.g. at its default")


def remove_stale_check_reports(out, *, junit=None, markdown=None, json_path=None, html_path=None,
                               captures=None, inputs: dict | None = None) -> None:
    """Delete an earlier run's report files (the three of :func:`check_report_paths` and, when
    given, the ``--html`` page) before a check starts, so that a run that ends without writing
    its own (an internal error, a killed job) never leaves a previous verdict where CI reads one
    (an ``if: always()`` JUnit upload would show a stale PASS). Each goes through
    :func:`perfgate.store.atomic.discard_stale`: a link stays a link (its target is removed);
    missing files, folders, streams and FIFOs are left alone (the write then reports them).

    First, nothing is removed where it must not be: two reports on one file
    (:func:`refuse_shared_report_paths`), a report on one of ``inputs`` (option -> policy file,
    history database, baseline store folder: :func:`refuse_outputs_on_inputs`), or, with
    ``captures`` (the check's capture path or paths), a report among a capture's files
    (:func:`perfgate.ingest.discover.refuse_outputs_among_inputs`).

    Raises:
        UsageError (exit 2): either refusal, before any file is touched."""
    refuse_shared_report_paths(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path)
    if inputs:
        reports = check_report_paths(out, junit=junit, markdown=markdown, json_path=json_path)
        refuse_outputs_on_inputs({"--out": out, "--junit": reports["junit"], "--markdown": reports["markdown"],
                                  "--json": reports["json"], "--html": html_path}, inputs)
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
