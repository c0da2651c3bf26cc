"""The Markdown report: ``--markdown`` (``perfgate-report.md``) and the job summary. The sticky
pull-request comment is its head alone, at most 16 KB (:mod:`perfgate.report.comment`).

Starts with a hidden marker (``<!-- perfgate:report key=<key> -->``) so a later run can find
and update its own comment; then the verdict line (``PASS (partial: …)`` when gated metrics were
not comparable), configuration changes, the causes table (at most 5 causes, failing and largest
first, plus gated changes no cause explains; :mod:`perfgate.compare.causes`), and everything
else collapsed: gated changes with views as columns, unsure, findings, family view, notes. Kept under
GitHub's 65,536-character comment limit: details are cut with a note, the verdict never.
"""
from __future__ import annotations

import re

from perfgate import terms
from perfgate.report.families import operator_section
from perfgate.report.mdtext import cell as _cell, code as _code
from perfgate.report.selfchecks import group_self_checks
from perfgate.report.summary import (DAMAGED_NOTE, store_failure, config_changes, error_where, informational_text, gated_tail_text, missing_lines, explains_text, group_views,
                                     short_change, step_share_text, verdict_detail, verdict_line, view_columns,
                                     green_text, waterfall_text)

LIMIT = 60_000
_ICON = {terms.PASS: "✅", terms.FAIL: "❌", terms.NO_BASELINE: "⚪", terms.INVALID: "⛔", terms.INCOMPATIBLE: "⚪",
         terms.UNSURE_STATUS: "❔", terms.DAMAGED: "🛑", terms.STORE_ERROR: "🛑"}


def marker(key: str) -> str:
    """Hidden HTML comment that identifies perfgate's sticky PR comment for ``key``."""
    return f"<!-- perfgate:report key={key} -->"


def _val(v, unit):
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(v[:4]) + (f" (+{len(v) - 4})" if len(v) > 4 else "")
    if unit == "ratio":
        return f"{v * 100:.2f}%"
    if unit == "us":
        return f"{v:,.1f} us"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _delta(c):
    if c.delta is None:
        return "—"
    if c.unit == "ratio":
        return f"{c.delta * 100:+.2f} pp"
    if c.unit == "us":
        return f"{c.delta:+,.1f} us" + (f" ({c.delta_rel:+.1%})" if c.delta_rel is not None else "")
    return f"{c.delta:+g}"


def _table(rows) -> list[str]:
    out = ["| | metric | baseline | candidate | delta | caliber | tolerance | evidence |",
           "|---|---|---|---|---|---|---|---|"]
    for c in rows:
        icon = "🔴" if c.fails else ("🟢" if c.verdict == terms.IMPROVEMENT else "🟡")
        cal = terms.CALIBER_LABEL.get(c.caliber, "—")
        out.append(f"| {icon} | {_code(c.key, table=True)} | {_cell(_val(c.baseline, c.unit))} | "
                   f"{_cell(_val(c.candidate, c.unit))} | {_cell(_delta(c))} | {cal} | "
                   f"{_cell(c.tolerance)} | {_cell(c.evidence)} |")
    return out


def _causes_table(result, limit: int = 5, clip: int | None = None) -> list[str]:
    """The causes (at most ``limit`` rows, failing and largest first) plus gated symptoms no cause
    explains, one row each with the views as text. ``clip``: each cell's text cut to that many
    characters, "…" in its middle (the pull-request comment, :mod:`perfgate.report.comment`); None: whole."""
    causes = list(result.causes)
    by_key = {c.key: c for c in result.comparisons}
    keys = result.unexplained if (result.unexplained or causes) else [
        c.key for c in result.comparisons if c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
    un = [by_key[k] for k in keys if k in by_key]
    if not causes and not un:
        return []

    def t(v):   # cut in the middle: a kernel name's variant suffix stays readable
        v = str(v)
        return v if clip is None or len(v) <= clip else v[: clip * 2 // 3] + "…" + v[len(v) - (clip - 1 - clip * 2 // 3):]
    out = ["| | cause | what changed (first gated view) | explains (gated metrics) | share of the step-time change |",
           "|---|---|---|---|---|"]
    for x in causes[:limit]:
        icon = "🔴" if x["fails"] else {terms.IMPROVEMENT: "🟢", "gone": "⚪", "new": "⚪", "renamed": "⚪"}.get(x["verdict"], "🟡")
        out.append(f"| {icon} | {_cell(t(x['kind']))} {_code(t(x['subject']), table=True)} | {_cell(t(x['what']))} | "
                   f"{len(x['explains'])}: {_cell(t(explains_text(x, 3)))} | {_cell(t(step_share_text(x)))} |")
    for row in group_views(un)[: max(0, limit + 2 - min(limit, len(causes)))]:
        icon = "🔴" if row["fails"] else ("🟢" if row["verdict"] == terms.IMPROVEMENT else "🟡")
        views = "; ".join(f"{v}: {short_change(c)}" for v, c in row["views"].items())
        out.append(f"| {icon} | no cause found | {_cell(t(row['subject']))}: {_cell(t(views))} | "
                   f"{_code(t(row['key']), table=True)} | — |")
    return out


_OVER_RANKS = re.compile(r"^(?:median of|max over) (\d+) rank\(s\)")


def _rank_count(c) -> int | None:
    """How many ranks a p50 / max comparison's candidate value is taken over, read from its
    evidence (``median of N rank(s)`` / ``max over N rank(s)``, perfgate.metrics.fingerprint
    ``_views``); None for another view or evidence."""
    m = _OVER_RANKS.match(getattr(c, "evidence", "") or "")
    return int(m.group(1)) if m else None


def rank_counts(comparisons) -> dict:
    """{view: the most ranks any p50 / max comparison of that view is taken over}."""
    most: dict = {}
    for c in comparisons:
        n = _rank_count(c)
        if n is not None:
            v = c.labels.get("view")
            most[v] = max(most.get(v, 0), n)
    return most


def _grouped_table(rows, with_cause: dict | None = None, most: dict | None = None) -> list[str]:
    """Metrics with their views (rank0 / p50 / max) as columns. A p50 or max cell taken over
    fewer ranks than others in its column says so (``(1 of 2 ranks)``): on a capture with a
    partial rank, kernel metrics are medians over the ranks holding a kernel table and step
    metrics over every rank, and one "p50" header covered both. ``most``: :func:`rank_counts` of
    every comparison of the check (default: of these rows)."""
    views = view_columns(rows)
    if most is None:
        most = rank_counts(c for r in rows for c in r["views"].values())

    def cell(c, v):
        text = short_change(c)
        n = _rank_count(c) if c is not None else None
        if n is not None and most.get(v) and n < most[v]:
            text += f" ({n} of {most[v]} ranks)"
        return _cell(text)
    out = ["| | metric | " + " | ".join(terms.view_text(v) for v in views) + " | caliber | tolerance | cause |",
           "|---|---|" + "---|" * len(views) + "---|---|---|"]
    for r in rows:
        icon = "🔴" if r["fails"] else ("🟢" if r["verdict"] == terms.IMPROVEMENT else "🟡")
        any_c = next(iter(r["views"].values()))
        cause = ", ".join(sorted({(with_cause or {}).get(c.key, "") for c in r["views"].values()} - {""})) or "—"
        out.append(f"| {icon} | {_cell(r['subject'])} | " + " | ".join(cell(r['views'].get(v), v) for v in views)
                   + f" | {terms.CALIBER_LABEL.get(any_c.caliber, '—')} | {_cell(any_c.tolerance)} | {_cell(cause)} |")
    return out


def render_markdown(result, key: str | None = None) -> str:
    """``GateResult`` -> Markdown text (see module docstring): the always-visible summary, then the
    collapsed details, cut to stay under GitHub's comment limit (:data:`LIMIT`)."""
    key = key or (result.baseline_name or "default")
    lines = [marker(key), ""] + _headline(result) + _outcome(result) + [""] + _findings_summary(result)
    return _fit("\n".join(lines), "\n".join(_details(result)), result.elapsed_s)


def _headline(result) -> list[str]:
    """The verdict heading (status, baseline, detail) and the configuration changes as warnings."""
    line, detail = verdict_line(result), verdict_detail(result)
    status, _, rest = line.partition(" ")
    head = f"## {_ICON.get(result.status, '')} perfgate: **{_cell(status)}**" + (f" {_cell(rest)}" if rest else "")
    if result.baseline_name:
        head += f" against baseline {_code(result.baseline_name)}"
    if detail:
        head += f": {_cell(detail)}"
    lines = [head, ""]
    for note in config_changes(result):
        lines.append(f"> ⚠️ {_cell(note)}")
    if config_changes(result):
        lines.append("")
    return lines


def _outcome(result) -> list[str]:
    """What the status means: why an invalid capture or a damaged store compared nothing (file,
    offset, hint), why no baseline judged, or the gated and informational counts."""
    lines = []
    if result.status == terms.INVALID:
        err = result.error or {}
        lines.append(f"The capture failed closed: nothing was compared, and nothing was written to baselines or history: "
                     f"**{_cell(err.get('message', ''))}**")
        if err.get("path"):
            lines.append(f"File: {_code(err['path'])}" + (f", row {err['row']}" if err.get("row") is not None else "")
                         + (f", byte {err['byte_offset']}" if err.get("byte_offset") is not None else ""))
    elif result.status in terms.STORE_FAILED:
        err = result.error or {}
        lines.append(f"{store_failure(result.status).capitalize()}: **{_cell(err.get('message', ''))}**")
        where = error_where(err)
        if where:
            lines.append(f"File: {_code(where)}")
        if err.get("hint"):
            lines.append(f"Hint: {_cell(err['hint'])}")
        lines.append(_cell(DAMAGED_NOTE))
    elif result.status in (terms.NO_BASELINE, terms.INCOMPATIBLE):
        lines.append(f"No usable baseline: {_cell((result.error or {}).get('message', ''))}. "
                     f"Nothing was judged (this is not a pass).")
    else:
        n = result.counts()
        g = n["gated"]
        lines.append(f"Gated metrics: {g['total']} — {n['gated_regressions']} failing, {g['improvement']} improved, "
                     f"{gated_tail_text(n)}. Informational metrics: {informational_text(n)}."
                     + (f" Unsure: {g['unsure']}." if g["unsure"] else ""))
    return lines


def _findings_summary(result) -> list[str]:
    """The visible findings: gated metrics the candidate lost, the unsure ones, the causes table,
    the step-time waterfall and what a pass vouches for (none of them judged when the baseline
    cannot judge the capture)."""
    lines = []
    lost = missing_lines(result, limit=12)
    if lost:
        lines += [f"**{_cell(lost[0].split(None, 1)[1])}** {_cell(lost[1].strip())}", ""]
    lines += _unsure_section(result)
    table = _causes_table(result) if result.status != terms.INCOMPATIBLE else []   # nothing was judged
    if table:
        lines += table + [""]
    wf = waterfall_text(result) if result.status != terms.INCOMPATIBLE else None
    if wf:
        lines += [f"Step-time change: {_cell(wf)}", ""]
    green = green_text(result) if result.status not in (terms.INCOMPATIBLE, terms.FAIL) else None
    if green:
        lines += [f"{_cell(green)}.", ""]
        if len(result.causes) > 5:
            lines += [f"{len(result.causes) - 5} more cause(s) below.", ""]
    return lines


def _details(result) -> list[str]:
    """The collapsed sections, in reading order: every cause, the gated changes, findings, the
    family view, per-rank steps, communication kinds, notes, informational and incomparable
    metrics, self-checks, provenance."""
    details = _all_causes(result) + _gated_changes(result) + _findings(result)
    ops = operator_section(result)
    if ops:
        details += ["<details><summary>Family view</summary>", ""] + ops + ["", "</details>", ""]
    info_f = [f for f in result.findings if f.severity == "info"]
    if info_f:
        details += [f"<details><summary>Other findings ({len(info_f)})</summary>", ""]
        details += [f"- {f.code}: {_cell(f.message)}" for f in info_f[:50]] + ["", "</details>", ""]
    details += _rank_steps(result) + _comm_kinds(result)
    if result.notes:
        details += ["<details><summary>Notes on comparability</summary>", ""]
        details += [f"- {_cell(x)}" for x in result.notes] + ["", "</details>", ""]
    info = [c for c in result.comparisons if not c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
    if info:
        details += [f"<details><summary>Informational changes ({len(info)}, not gated)</summary>", ""]
        details += _table(info) + ["", "</details>", ""]
    inc = [c for c in result.comparisons if c.verdict in (terms.INCOMPARABLE, terms.NEW, terms.MISSING)]
    if inc:
        details += [f"<details><summary>Incomparable / new / missing ({len(inc)})</summary>", ""]
        details += [f"- **{c.verdict}** {_code(c.key)}: {_cell(c.reason)}" for c in inc] + ["", "</details>", ""]
    return details + _self_checks(result) + _provenance(result)


def _all_causes(result) -> list[str]:
    """Every cause with its text per view, when there are more than the summary table shows."""
    if len(result.causes) <= 5:
        return []
    details = [f"<details><summary>All {len(result.causes)} causes</summary>", "",
               "| cause | what changed | views | explains | step time |", "|---|---|---|---|---|"]
    details += [f"| {_cell(x['kind'])} {_code(x['subject'], table=True)} | {_cell(x['what'])} | "
                f"{_cell('; '.join(f'{v}: {t}' for v, t in x['views'].items()))} | "
                f"{_cell(explains_text(x, 50))} | {_cell(step_share_text(x))} |" for x in result.causes]
    return details + ["", "</details>", ""]


def _gated_changes(result) -> list[str]:
    """The gated metrics that moved, views as columns with the cause of each, then why per metric
    (for reference only when the baseline cannot judge the capture)."""
    main = [c for c in result.comparisons if c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
    if not main:
        return []
    cause_of = {}
    for x in result.causes:
        for k in x["explains"]:
            cause_of[k] = cause_of.get(k, "") and cause_of[k] + ", " or ""
            cause_of[k] += x["subject"]
    rows = group_views(main)
    what = ("Compared for reference, not judged" if result.status == terms.INCOMPATIBLE else "Gated changes")
    details = [f"<details><summary>{what} ({len(main)} metric-views in {len(rows)} rows; views as "
               f"columns)</summary>", ""]
    details += _grouped_table(rows, cause_of, rank_counts(result.comparisons))
    details += ["", ("Nothing here fails the gate: the baseline cannot judge this capture. " if result.status ==
                     terms.INCOMPATIBLE else "") + "🔴 fails the gate · 🟢 improved · 🟡 changed beyond tolerance but not failing. A share is "
                "judged by its part's own ΣDuration relative to the device scale: a share that moved only "
                "because other parts moved is unchanged.", "", "Why, per metric:", ""]
    details += [f"- {_code(c.key)}: {_cell(c.reason)}" + (f" — evidence: {_cell(c.evidence)}" if c.evidence else "")
                for c in main]
    return details + ["", "</details>", ""]


def _findings(result) -> list[str]:
    """The candidate's failing and warning findings, failing first (stable): the list is cut at 30
    and a capture can hold one warning per step."""
    shown = sorted((f for f in result.findings if f.severity in ("warn", "fail")), key=lambda f: f.severity != "fail")
    if not shown:
        return []
    details = [f"<details><summary>Findings in the candidate capture ({len(shown)})</summary>", ""]
    details += [f"- **{f.code}**: {_cell(f.message)}" + (f" — {_code(f.evidence)}" if f.evidence else "")
                for f in shown[:30]]
    return details + ["", "</details>", ""]


def _steps_cell(v, pct=False) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.1f}%" if pct else f"{v:,.1f}"


def _rank_steps(result) -> list[str]:
    """Per-rank steps (first 200), with the rows and sources each figure comes from, so a reader
    can check them by hand."""
    steps = (result.detail or {}).get("steps") or []
    if not steps:
        return []
    f = _steps_cell
    details = [f"<details><summary>Per-rank steps, hand-checkable ({len(steps)} rank-steps)</summary>", "",
               "Device times from the kernel table (kernel_details.csv, op_summary or the DB's TASK "
               "table; rows given), host window from ProfilerStep#N (trace_view.json or STEP_TIME); us. "
               "bubble = wall − busy union; underfeed = bubble / wall; uncovered comm = communication "
               "rows' ΣDuration not covered by the compute busy union.", "",
               "| rank | step | rows | host step | wall | busy union | ΣDuration | bubble | underfeed | "
               "prelaunch | tail | comm ΣDuration | uncovered comm (ΣDuration) |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in steps[:200]:
        details.append(f"| {r['rank']} | {r['step']} | {r['first_row']}-{r['last_row']} | {f(r['step_us'])} | "
                       f"{f(r['wall_us'])} | {f(r['busy_us'])} | {f(r['kernel_sum_us'])} | {f(r['bubble_us'])} | "
                       f"{f(r['underfeed_ratio'], True)} | {f(r['prelaunch_us'])} | {f(r['tail_us'])} | "
                       f"{f(r['comm_sum_us'])} | {f(r['exposed_comm_us'])} |")
    return details + ["", "</details>", ""]


def _comm_kinds(result) -> list[str]:
    """Communication per rank, step and HCCL kind (first 200 rows)."""
    kinds = (result.detail or {}).get("comm_kinds") or []
    if not kinds:
        return []
    details = ["<details><summary>Communication by HCCL kind</summary>", "",
               "| rank | step | kind | calls | ΣDuration (us) | uncovered by compute (us) |", "|---|---|---|---|---|---|"]
    return details + [f"| {k['rank']} | {k['step']} | {k['kind']} | {k['calls']} | {k['sum_us']:,.1f} | "
                      f"{k['exposed_us']:,.1f} |" for k in kinds[:200]] + ["", "</details>", ""]


def _self_checks(result) -> list[str]:
    """The self-checks, one row per (check, rank) with the failing / warned / skipped steps named:
    a capture of thousands of steps holds tens of thousands of per-step rows, and listed one by
    one they would push a late failure past the comment limit."""
    if not result.self_checks:
        return []
    counts = {}
    for c in result.self_checks:
        counts[c.status] = counts.get(c.status, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    details = [f"<details><summary>Self-checks ({summary})</summary>", "",
               "| check | rank | steps | status | detail |", "|---|---|---|---|---|"]
    for g in group_self_checks(result.self_checks):
        bad = [s for s in ("fail", "warn", "skipped") if g.by_status.get(s)]
        detail = "<br>".join(_cell(g.headline(s)) for s in bad) or _cell(
            ("" if g.steps == 1 else f"e.g. step {g.checks[0].step}: ") + g.checks[0].message)
        details.append(f"| {g.name} | {g.rank} | {'-' if g.capture_wide else g.steps} | {g.tally()} | {detail} |")
    return details + ["", "</details>", ""]


def _provenance(result) -> list[str]:
    """Where each side's capture came from: source, ranks, commit (and how it was found), branch,
    runner, time."""
    prov = []
    for side, p in (("baseline", result.baseline_provenance), ("candidate", result.candidate_provenance)):
        if p:
            bits = [f"source {_code(p.get('source', '?'))}", f"ranks {p.get('ranks')}"]
            for k in ("commit", "branch", "runner", "created_at"):
                if p.get(k):
                    bits.append(f"{k} {_code(p[k])}" + (f" ({_cell(p['commit_source'])})"
                                                          if k == "commit" and p.get("commit_source") else ""))
            prov.append(f"- {side}: " + ", ".join(bits))
    if not prov:
        return []
    return ["<details><summary>Provenance</summary>", ""] + prov + ["", "</details>", ""]


def _fit(body: str, tail: str, elapsed_s: float) -> str:
    """The summary and the details under :data:`LIMIT`: the details are cut first, with a note;
    the summary only when it alone is over."""
    if len(body) + len(tail) > LIMIT:
        cut = max(0, LIMIT - len(body) - 200)
        tail = tail[:cut] + "\n\n_Details truncated to stay under GitHub's comment limit; see the JSON result._\n"
    if len(body) > LIMIT:
        body = body[:LIMIT] + "\n\n_Table truncated; see the JSON result for every metric._\n"
    return body + "\n" + tail + f"\n<sub>perfgate, {elapsed_s:.2f} s</sub>\n"


def _unsure_section(result) -> list[str]:
    """Gated metrics judged ``unsure`` (repeated captures, :mod:`perfgate.compare.stats`): each with
    its reason, which says how many runs are needed (collapsed)."""
    uns = [c for c in result.comparisons if c.gated and c.verdict == terms.UNSURE]
    if not uns:
        return []
    out = [f"### Unsure ({len(uns)}): not shown to regress, not shown to be unchanged", "",
           "<details><summary>Each unsure metric and the runs needed</summary>", ""]
    out += [f"- ❔ {_code(c.key)}: {_cell(c.reason)}" for c in uns[:40]]
    if len(uns) > 40:
        out.append(f"- … and {len(uns) - 40} more (see the JSON result)")
    return out + ["", "</details>", ""]
