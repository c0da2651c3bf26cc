"""The pull-request comment: the verdict, its causes and what a green means, in at most
:data:`COMMENT_BYTES`; everything else stays in the full Markdown report.

The full report (:func:`perfgate.report.markdown.render_markdown`, ``--markdown`` and the job
summary) reaches 60 KB on a real capture (a Level0 capture against a Level1 baseline: every
gated change, per-rank steps, self-checks), close to GitHub's 65,536-character comment limit.
A reviewer reads the verdict, the cause of it and what a green vouches for; the comment holds
those, in the order of the full report's head, and a pointer to the full report:

1. the hidden marker (``<!-- perfgate:report key=KEY -->``) and the verdict heading;
2. the configuration changes between the two captures (profiler level, export, ranks);
3. the gated and informational counts;
4. the gated metrics the candidate lost;
5. the causes table, cause first (at most 5 causes, failing and largest first, then gated
   changes no cause explains; every cell cut to :data:`CELL_CHARS` characters, "…" in its middle);
6. the step-time waterfall;
7. what a green means (:func:`perfgate.report.summary.green_text`), also on a failing check,
   where it says what passing takes;
8. where the full report is: the run's job summary (linked when the run's URL is known) and the
   report files in the run's artifacts.

Over budget, parts go in this order until it fits: the waterfall, the configuration changes,
the lost metrics, the causes table's rows from the last one up (a line says how many are left
out), the counts. The marker, the verdict heading, the green line and the pointer always stay.
"""
from __future__ import annotations

from dataclasses import dataclass

from perfgate import terms
from perfgate.report.markdown import _causes_table, _headline, _outcome, marker
from perfgate.report.mdtext import cell as _cell, code as _code
from perfgate.report.summary import green_text, missing_lines, waterfall_text

#: the comment's size limit in UTF-8 bytes (16 KB, a quarter of GitHub's 65,536-character limit)
COMMENT_BYTES = 16_000
#: bytes kept free for the line :func:`perfgate.publish.github.baseline_note` adds after the heading
NOTE_RESERVE = 512
#: characters of one causes-table cell or one line in the comment before it is cut with "…"
CELL_CHARS = 200
LINE_CHARS = 2_000


@dataclass(frozen=True)
class ReportPointer:
    """Where the full report of this run is: ``run_url`` (the Actions run page, whose job summary
    holds the full report; None outside Actions), and the report files' names (``markdown``,
    ``json``) as the run wrote them into its ``--out`` folder."""
    run_url: str | None = None
    markdown: str = "perfgate-report.md"
    json: str = "perfgate-result.json"

    def line(self) -> str:
        summary = f"the job summary of [this run]({self.run_url})" if self.run_url else "this run's job summary"
        return (f"**Full report** (every gated change, findings, per-rank steps, self-checks, provenance): "
                f"{summary}, and {_code(self.markdown)} / {_code(self.json)} in the run's artifacts "
                f"where the workflow uploads them.")


@dataclass
class _Part:
    """One part of the comment: its lines, and ``drop`` — its place in the order parts are left
    out when the comment is over budget (1 first; 0: never left out)."""
    lines: list
    drop: int = 0
    rows_from: int | None = None   # a table: rows start here and are dropped from the last one


def render_comment(result, key: str | None = None, pointer: ReportPointer | None = None,
                   budget: int = COMMENT_BYTES - NOTE_RESERVE) -> str:
    """``GateResult`` -> the pull-request comment (Markdown, see the module docstring), at most
    ``budget`` UTF-8 bytes (default :data:`COMMENT_BYTES` less :data:`NOTE_RESERVE`). ``key``:
    the sticky-comment key (default the baseline name, as :func:`render_markdown`)."""
    key = key or (result.baseline_name or "default")
    parts = _comment_parts(result, key, pointer or ReportPointer())
    footer = f"<sub>perfgate, {result.elapsed_s:.2f} s</sub>"
    return _fit_parts(parts, budget - _size(footer) - 2) + "\n" + footer + "\n"


def _comment_parts(result, key: str, pointer: ReportPointer) -> list[_Part]:
    """The comment's parts in reading order, each with its place in the dropping order."""
    head = _headline(result)
    at = head.index("") if "" in head else len(head)
    parts = [_Part([marker(key), ""] + _clip_lines(head[:at]) + [""]),
             _Part(_clip_lines(head[at + 1:]), drop=2), _Part(_clip_lines(_outcome(result)) + [""], drop=5)]
    judged = result.status != terms.INCOMPATIBLE    # nothing was judged: no causes, no waterfall
    lost = missing_lines(result, limit=12)
    if lost:
        parts.append(_Part([_clip(f"**{_cell(lost[0].split(None, 1)[1])}** {_cell(lost[1].strip())}"), ""], drop=3))
    table = _causes_table(result, clip=CELL_CHARS) if judged else []
    if table:
        more = len(result.causes) - 5
        tail = [f"{more} more cause(s) in the full report.", ""] if more > 0 else []
        parts.append(_Part(table + [""] + tail, drop=4, rows_from=2))
    wf = waterfall_text(result) if judged else None
    if wf:
        parts.append(_Part([_clip(f"Step-time change: {_cell(wf)}"), ""], drop=1))
    green = green_text(result) if judged else None
    if green:
        parts.append(_Part([_clip(f"{_cell(green)}."), ""]))
    parts.append(_Part([pointer.line(), ""]))
    return parts


def _fit_parts(parts: list[_Part], budget: int) -> str:
    """The parts joined, with parts (and table rows) left out in their dropping order until the
    text is at most ``budget`` UTF-8 bytes; a final cut by bytes if the kept parts alone are over."""
    text = _join(parts)
    while _size(text) > budget:
        part = min((p for p in parts if p.drop and p.lines), key=lambda p: p.drop, default=None)
        if part is None:
            return _cut_bytes(text, budget)
        if part.rows_from is not None and _drop_row(part):
            text = _join(parts)
            continue
        part.lines = []
        text = _join(parts)
    return text


def _drop_row(part: _Part) -> bool:
    """Leave out the table's last row; a line after the table says how many are left out. False
    when no row is left (then the table goes as a whole)."""
    rows = [i for i, ln in enumerate(part.lines) if i >= part.rows_from and ln.startswith("| ")]
    if len(rows) <= 1:
        return False
    del part.lines[rows[-1]]
    note = next((i for i, ln in enumerate(part.lines) if ln.startswith("_… ")), None)
    n = 1 + (int(part.lines[note].split()[1]) if note is not None else 0)
    text = f"_… {n} more row(s) of this table in the full report._"
    if note is None:
        part.lines[rows[-1]:rows[-1]] = ["", text]   # after the table's last row
    else:
        part.lines[note] = text
    return True


def _join(parts: list[_Part]) -> str:
    return "\n".join(ln for p in parts for ln in p.lines)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _cut_bytes(text: str, budget: int) -> str:
    """``text`` cut at the last line that ends within ``budget`` bytes (a note says so)."""
    note = "\n\n_Comment cut to its size limit; see the full report._"
    raw = text.encode("utf-8")[: max(0, budget - _size(note))]
    kept = raw.decode("utf-8", "ignore")
    return (kept.rsplit("\n", 1)[0] if "\n" in kept else kept) + note


def _clip(line: str, width: int = LINE_CHARS) -> str:
    """A Markdown line cut at ``width`` characters with "…", never inside an entity (``&gt;``)
    or right after an escaping backslash."""
    if len(line) <= width:
        return line
    cut = line[: width - 1]
    amp = cut.rfind("&")
    if amp >= 0 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut.rstrip("\\") + "…"


def _clip_lines(lines: list[str]) -> list[str]:
    return [_clip(ln) for ln in lines]
