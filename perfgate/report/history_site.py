"""``perfgate history site DIR``: the run history as a static site that people open.

* ``index.html`` — one row per trended series (a gated metric of one job configuration, as
  ``history trend`` splits them): its runs, its latest value and its latest change point (the
  commit where the new level starts, before -> after, the change, confirmed or not), step time
  first (:func:`perfgate.report.history.severity_key`), with a sparkline;
* ``metric-<id>.html`` — one page per series: an interactive chart (recorded commits on the x
  axis oldest first, one point per kept run, each change point a vertical line where its new level
  starts and the levels before / after it drawn as flat segments; hovering or focusing a point
  shows its commit, value and unit; clicking it opens the commit), the change points and every
  run as tables. ``<id>`` is the first 12 hex digits of the SHA-1 of the key and series, so a
  page keeps its address from one nightly build to the next.

Values are the history's (``HistoryStore.series``), in the metric's registry unit; shares and
other ratios are shown in % and their changes in percentage points; a part of the step (share,
exposed-communication and underfeed ratios) is trended as its own time in us per step
(:mod:`perfgate.history.parts`), as ``history trend`` judges it. Change points are
:func:`perfgate.history.trend.trend_report`'s (ruptures PELT + Mann-Whitney U, the policy's
``history:`` settings).

A commit links to ``<repository URL>/commit/<commit>``: the URL is ``--repo-url``, else
``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY`` (set in GitHub Actions); with neither, or for a run
recorded without a commit, there is no link. Every page is one self-contained file: inline CSS,
SVG and script, a Content-Security-Policy that allows no request, nothing from the network.
The render functions are pure; :func:`write_history_site` writes the files.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.errors import StoreError, UsageError
from perfgate.history.store import COMMIT_PUNCTUATION, NO_COMMIT
from perfgate.report.history import _change_text, _commit, _is_ratio, severity_key, unit_text
from perfgate.report.html import CSS, _e

INDEX = "index.html"
_PAGE = re.compile(r"metric-[0-9a-f]{12}\.html")
_COLOR = {terms.REGRESSION: "#d43c3c", terms.IMPROVEMENT: "#2e9e5b"}   # any other change: amber
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:")
_SITE_CSS = """
.chartbox{position:relative;background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}
.chartbox svg{width:100%;height:auto;display:block}
svg .pt{fill:#1f77b4;stroke:#fff;stroke-width:1.5;cursor:pointer} svg .pt:hover,svg .pt:focus{fill:#ff7f0e;outline:none}
svg .pt.nolink{cursor:default}
#tip{position:absolute;pointer-events:none;background:#1d1d1f;color:#fff;font-size:12px;padding:5px 8px;
border-radius:4px;white-space:nowrap;display:none;z-index:2}
#tip code{color:#fff}
.legend{font-size:12px;color:#555;margin:6px 0} .legend span{margin-right:14px}
td.spark svg{width:160px} h1 code{font-size:18px}
#series td.key{min-width:260px;word-break:normal;overflow-wrap:anywhere} td.nowrap{white-space:nowrap}
"""


@dataclass(frozen=True)
class SeriesPage:
    """One trended series as the site shows it: its :class:`perfgate.history.trend.Trend`
    fields, the note ``history trend`` gives it (why there is no change point, ...) and the
    file name of its page."""
    key: str
    series_key: str
    series: pd.DataFrame
    change_points: list
    note: str | None
    file: str

    @property
    def title(self) -> str:
        return self.key + (f" (series {self.series_key})" if self.series_key else "")


@dataclass(frozen=True)
class Scale:
    """How a series' values are shown: multiplied by ``factor`` (100 for a ratio: %), in ``unit``
    (text), with changes as :func:`perfgate.report.history._change_text` gives them."""
    factor: float
    unit: str
    ratio: bool


def scale_of(key: str) -> Scale:
    """Display scale of ``key``: a part of the step in us per step (its own time), a ratio in %,
    anything else in its registry unit and caliber (:func:`perfgate.report.history.unit_text`)."""
    from perfgate.compare.parts import PART_METRICS
    if key.split("{", 1)[0] in PART_METRICS:
        return Scale(1.0, "us per step (the part's own time)", False)
    if _is_ratio(key):
        return Scale(100.0, "%" + unit_text(key).removeprefix("ratio"), True)
    return Scale(1.0, unit_text(key), False)


def repo_url_from(given: str | None, env) -> str | None:
    """The repository URL commits link into: ``given`` (``--repo-url``), else
    ``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY`` from ``env`` when both are set, else None (no
    links). A trailing ``/`` is dropped.

    Raises:
        UsageError (exit 2): ``given`` is not an http(s) URL (a ``javascript:`` or file path
            would be followed from the page)."""
    if given is not None:
        url = given.strip().rstrip("/")
        if not re.fullmatch(r"https?://[^\s\"'<>]+", url):
            raise UsageError(f"--repo-url must be an http(s) URL such as https://github.com/OWNER/REPO, "
                             f"not {given!r}")
        return url
    server, repo = (env.get("GITHUB_SERVER_URL") or "").strip(), (env.get("GITHUB_REPOSITORY") or "").strip()
    if re.fullmatch(r"https?://[^\s\"'<>]+", server) and re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        return f"{server.rstrip('/')}/{repo}"
    return None


def commit_url(repo_url: str | None, commit) -> str | None:
    """``<repo_url>/commit/<commit>``, or None without a repository URL or a recorded commit (or
    one holding a character no SHA or ref name has)."""
    if not repo_url or not isinstance(commit, str) or not re.fullmatch(r"[0-9A-Za-z._/-]+", commit):
        return None
    return f"{repo_url}/commit/{commit}"


def page_file(key: str, series_key: str) -> str:
    """``metric-<12 hex>.html``: the SHA-1 of key and series key, stable across builds."""
    digest = hashlib.sha1((key + "\n" + series_key).encode()).hexdigest()
    return f"metric-{digest[:12]}.html"


def _full_commit(c) -> str:
    """The recorded commit in full (``(no commit)`` when none), a character no SHA or ref name
    has shown as ``?`` (:func:`perfgate.report.history._commit`, untruncated)."""
    if _commit(c) == NO_COMMIT:
        return NO_COMMIT
    return "".join(ch if (ch.isascii() and ch.isalnum()) or ch in COMMIT_PUNCTUATION else "?" for ch in c)


def _short_commit(c) -> str:
    return _commit(c)[:8] if isinstance(c, str) and c.strip() else "—"


def _num(v: float) -> str:
    """A value for people: thousands grouped and no exponent from 1,000 on (``114,321``), four
    significant digits below (``0.3142``, ``12.5``)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _cp_text(c, sc: Scale) -> tuple[str, str, str]:
    """(before, after, change) of a change point: a ratio in % and pp
    (:func:`perfgate.report.history._change_text`), anything else as :func:`_num` gives it."""
    before, after, change = _change_text(c, sc.ratio)
    return (before, after, change) if sc.ratio else (_num(c.before), _num(c.after), change)


def _fmt(v: float, sc: Scale) -> str:
    return "—" if not np.isfinite(v) else _num(v * sc.factor)


def _html(title: str, body: str, script: str = "") -> str:
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">"
            f"<title>{_e(title)}</title><style>{CSS}{_SITE_CSS}</style></head><body><main>{body}</main>"
            + (f"<script>{script}</script>" if script else "") + "</body></html>\n")


def _link(url: str | None, text: str) -> str:
    return f'<a href="{_e(url)}"><code>{_e(text)}</code></a>' if url else f"<code>{_e(text)}</code>"


# -- the chart -------------------------------------------------------------------------------------------
W, H, LEFT, RIGHT, TOP, BOTTOM = 960, 380, 78, 24, 34, 86


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering lo..hi (1, 2, 2.5 or 5 times a power of ten apart)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


@dataclass(frozen=True)
class _Axes:
    """Data -> SVG coordinates: run index ``i`` of ``n`` runs on x, value on y (lo..hi)."""
    n: int
    lo: float
    hi: float

    def x(self, i: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * ((i + 0.5) / max(self.n, 1))

    def y(self, v: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - (v - self.lo) / (self.hi - self.lo))


def _axes_of(values: np.ndarray, cps: list, factor: float) -> _Axes:
    shown = np.concatenate([values[np.isfinite(values)],
                            [c.before * factor for c in cps], [c.after * factor for c in cps]])
    lo, hi = (float(shown.min()), float(shown.max())) if len(shown) else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    return _Axes(len(values), lo - pad, hi + pad)


def _grid(ax: _Axes, unit: str) -> list[str]:
    out = []
    for t in _ticks(ax.lo, ax.hi):
        y = ax.y(t)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#555">{_num(t)}</text>')
    mid = TOP + (H - TOP - BOTTOM) / 2
    out.append(f'<text transform="translate(14 {mid:.0f}) rotate(-90)" text-anchor="middle" font-size="11" '
               f'fill="#555">{_e(unit)}</text>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="#999"/>')
    return out


def _commit_labels(ax: _Axes, commits: list) -> list[str]:
    """Short commit under every k-th run (k so that at most 40 labels show), rotated."""
    k = max(1, math.ceil(ax.n / 40))
    out = []
    for i in range(0, ax.n, k):
        x, y = ax.x(i), H - BOTTOM + 10
        out.append(f'<text class="xl" transform="translate({x:.1f} {y}) rotate(-50)" text-anchor="end" '
                   f'font-size="10" fill="#555" font-family="monospace">{_e(_short_commit(commits[i]))}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2:.0f}" y="{H - 4}" text-anchor="middle" font-size="11" '
               f'fill="#555">commit (oldest first)</text>')
    return out


def _levels(ax: _Axes, cps: list, factor: float) -> list[str]:
    """Each change point as a vertical line where its new level starts (solid when confirmed,
    dashed when not) labelled with its change, and the level of each segment as a flat line."""
    out, start = [], 0
    for j, c in enumerate(cps):
        color = _COLOR.get(c.direction, "#e6b800")
        x = ax.x(c.index - 0.5)
        dash = "" if c.confirmed else ' stroke-dasharray="5 4"'
        out.append(f'<line class="cp" data-commit="{_e(c.commit or "")}" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" '
                   f'y2="{H - BOTTOM}" stroke="{color}" stroke-width="2"{dash}/>')
        label = _change_text(c, factor == 100.0)[2]   # a ratio (shown x 100) changes in pp
        out.append(f'<text x="{x + 4:.1f}" y="{TOP - 8 + 12 * (j % 2)}" font-size="11" fill="{color}">{_e(label)}</text>')
        out.append(_flat(ax, start, c.index, c.before * factor))
        start = c.index
    if cps:
        out.append(_flat(ax, start, ax.n, cps[-1].after * factor))
    return out


def _flat(ax: _Axes, i0: int, i1: int, v: float) -> str:
    y = ax.y(v)
    return (f'<line x1="{ax.x(i0 - 0.5):.1f}" x2="{ax.x(i1 - 0.5):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#888" stroke-width="1.5" stroke-dasharray="2 3"/>')


def _points(ax: _Axes, page: SeriesPage, sc: Scale, repo_url: str | None) -> list[str]:
    """The series' line and one focusable point per run; ``data-*`` holds what the tooltip
    shows; a point whose commit has a URL is a link to it."""
    s = page.series
    vals = s["value"].to_numpy(dtype=float) * sc.factor
    pts = [(ax.x(i), ax.y(v)) for i, v in enumerate(vals) if np.isfinite(v)]
    out = [f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="'
           + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>']
    for i, r in enumerate(s.itertuples(index=False)):
        if not np.isfinite(vals[i]):
            continue
        url = commit_url(repo_url, r.commit)
        dot = (f'<circle class="pt{"" if url else " nolink"}" tabindex="0" cx="{ax.x(i):.1f}" cy="{ax.y(vals[i]):.1f}" '
               f'r="4.5" data-i="{i}" data-run="{_e(r.run_id)}" data-commit="{_e(_full_commit(r.commit))}" '
               f'data-value="{_e(_fmt(r.value, sc))}" data-unit="{_e(sc.unit)}" data-at="{_e(r.recorded_at)}"/>')
        out.append(f'<a href="{_e(url)}" aria-label="commit {_e(r.commit)}">{dot}</a>' if url else dot)
    return out


def chart_svg(page: SeriesPage, repo_url: str | None) -> str:
    """The interactive SVG chart of one series (see the module docstring)."""
    sc = scale_of(page.key)
    vals = page.series["value"].to_numpy(dtype=float) * sc.factor
    ax = _axes_of(vals, page.change_points, sc.factor)
    parts = (_grid(ax, sc.unit) + _commit_labels(ax, list(page.series["commit"]))
             + _levels(ax, page.change_points, sc.factor) + _points(ax, page, sc, repo_url))
    return (f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="{_e(page.title)}">' + "".join(parts) + "</svg>")


def sparkline_svg(page: SeriesPage) -> str:
    """A 160 x 32 line of the series, change points as red / green ticks (the index table)."""
    v = page.series["value"].to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return ""
    lo, hi = float(v.min()), float(v.max())
    span = (hi - lo) or 1.0
    xs = np.linspace(2, 158, len(v))
    pts = " ".join(f"{x:.1f},{30 - 26 * (y - lo) / span:.1f}" for x, y in zip(xs, v))
    ticks = "".join(f'<line x1="{xs[min(c.index, len(v) - 1)]:.1f}" x2="{xs[min(c.index, len(v) - 1)]:.1f}" y1="0" '
                    f'y2="32" stroke="{_COLOR.get(c.direction, "#e6b800")}"/>' for c in page.change_points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 160 32" aria-hidden="true">{ticks}'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="{pts}"/></svg>')


# -- the pages -------------------------------------------------------------------------------------------
_TOOLTIP_JS = """
(function(){
  var tip=document.getElementById('tip'), box=document.querySelector('.chartbox');
  function show(e){
    var p=e.target; if(!p.classList||!p.classList.contains('pt')) return;
    tip.textContent='';
    var lines=[['commit ',p.dataset.commit],['',p.dataset.value+' '+p.dataset.unit],['run '+p.dataset.run+', ',p.dataset.at]];
    lines.forEach(function(l,i){var d=document.createElement('div');d.textContent=l[0]+l[1];
      if(i===0){d.className='c';} tip.appendChild(d);});
    tip.style.display='block';
    var b=box.getBoundingClientRect(), r=p.getBoundingClientRect();
    var x=r.left-b.left+r.width/2+10, y=r.top-b.top-tip.offsetHeight-6;
    if(r.top-b.top<b.height/2) y=r.bottom-b.top+8;   /* a high point: below it, clear of the change labels */
    if(x+tip.offsetWidth>b.width) x=r.left-b.left-tip.offsetWidth-10;
    tip.style.left=x+'px'; tip.style.top=Math.max(0,y)+'px';
  }
  function hide(e){ if(e.target.classList&&e.target.classList.contains('pt')) tip.style.display='none'; }
  box.addEventListener('mouseover',show); box.addEventListener('focusin',show);
  box.addEventListener('mouseout',hide); box.addEventListener('focusout',hide);
})();
"""


def _cp_rows(page: SeriesPage, sc: Scale, repo_url: str | None) -> str:
    if not page.change_points:
        note = page.note or "no change point"
        return f'<p id="no-change-point">{_e(note[0].upper() + note[1:])}.</p>'
    rows = []
    for c in page.change_points:
        before, after, change = _cp_text(c, sc)
        rows.append(f'<tr class="{_e(c.direction)}"><td class="num">{c.run_id} (#{c.index + 1})</td>'
                    f"<td>{_link(commit_url(repo_url, c.commit), _commit(c.commit))}</td><td class=num>{_e(before)}</td>"
                    f"<td class=num>{_e(after)}</td><td class=num>{_e(change)}</td><td class=num>{c.p_value:.2g}</td>"
                    f"<td class=num>{c.n_before} / {c.n_after}</td>"
                    f"<td>{'confirmed' if c.confirmed else 'unconfirmed (too few runs after it)'}</td></tr>")
    return ('<table id="change-points"><tr><th>run</th><th>commit (first run of the new level)</th><th>before</th>'
            "<th>after</th><th>change</th><th>p</th><th>runs before / after</th><th>status</th></tr>"
            + "".join(rows) + "</table>" + (f"<p class=muted>{_e(page.note)}.</p>" if page.note else ""))


def _run_rows(page: SeriesPage, sc: Scale, repo_url: str | None) -> str:
    starts = {c.index for c in page.change_points}
    rows = [f'<tr{" class=cpstart" if i in starts else ""}><td class=num>{i + 1}</td><td class=num>{_e(r.run_id)}</td>'
            f"<td>{_link(commit_url(repo_url, r.commit), _commit(r.commit))}</td><td>{_e(r.recorded_at)}</td>"
            f"<td class=num>{_e(_fmt(r.value, sc))}</td><td>{'change point' if i in starts else ''}</td></tr>"
            for i, r in enumerate(page.series.itertuples(index=False))]
    return ('<details id="runs"><summary>Every run (' + str(len(rows)) + ")</summary><table><tr><th>#</th><th>run</th>"
            f"<th>commit</th><th>recorded at</th><th>value ({_e(sc.unit)})</th><th></th></tr>"
            + "".join(rows) + "</table></details>")


def render_metric_page(page: SeriesPage, repo_url: str | None, heading: str) -> str:
    """The page of one series: chart, change points, every run (HTML text)."""
    sc = scale_of(page.key)
    legend = ('<div class="legend"><span>● a kept run (hover: commit, value; click: the commit)</span>'
              '<span style="color:#d43c3c">│ regression starts</span><span style="color:#2e9e5b">│ improvement starts</span>'
              "<span>dashed: unconfirmed change point</span><span>┄ grey: level of each segment</span></div>")
    body = (f'<p><a href="{INDEX}">← all series</a> · {_e(heading)}</p><h1><code>{_e(page.key)}</code></h1>'
            f"<p class=muted>series <code>{_e(page.series_key or '-')}</code> · {len(page.series)} kept run(s) · "
            f"unit: {_e(sc.unit)}" + ("" if repo_url else " · no repository URL known: commits are not linked")
            + "</p>" + legend + f'<div class="chartbox">{chart_svg(page, repo_url)}<div id="tip" role="tooltip"></div></div>'
            "<h2>Change points</h2>" + _cp_rows(page, sc, repo_url) + "<h2>Runs</h2>" + _run_rows(page, sc, repo_url))
    return _html(f"{page.key} — perfgate history", body, _TOOLTIP_JS)


def _latest_cell(page: SeriesPage, sc: Scale, repo_url: str | None) -> str:
    if not page.change_points:
        return '<td class="muted">none</td>'
    c = page.change_points[-1]
    return (f'<td class="cp">{_link(commit_url(repo_url, c.commit), _commit(c.commit))} '
            f"{_e(_change_text(c, sc.ratio)[2])}{'' if c.confirmed else ' (unconfirmed)'}</td>")


def render_index(pages: list, repo_url: str | None, heading: str, summary: list) -> str:
    """The index: one row per series (see the module docstring), then ``summary`` lines."""
    rows = []
    for p in pages:
        sc = scale_of(p.key)
        last = p.change_points[-1] if p.change_points else None
        vals = p.series["value"].to_numpy(dtype=float)
        rows.append(f'<tr class="{_e(last.direction) if last else "none"}"><td class="key"><a href="{_e(p.file)}">'
                    f"{_e(p.key)}</a></td><td class=nowrap><code>{_e(p.series_key or '-')}</code></td><td class=num>{len(p.series)}</td>"
                    f"<td class=num>{_e(_fmt(vals[-1], sc) if len(vals) else '—')} {_e(sc.unit)}</td>"
                    f"<td class=num>{len(p.change_points)}</td>{_latest_cell(p, sc, repo_url)}"
                    f'<td class="spark">{sparkline_svg(p)}</td></tr>')
    n_cp = sum(len(p.change_points) for p in pages)
    table = ('<table id="series"><tr><th>metric</th><th>series</th><th>runs</th><th>latest value</th>'
             "<th>change points</th><th>latest change point (commit where it starts, change)</th><th>trend</th></tr>"
             + "".join(rows) + "</table>") if rows else '<p class="nodata">No kept run records a gated metric.</p>'
    notes = "".join(f"<li>{_e(line)}</li>" for line in summary)
    body = (f"<h1>perfgate history — {_e(heading)}</h1><p>{len(pages)} series of gated metrics, {n_cp} change "
            "point(s). Change points: ruptures PELT + Mann-Whitney U over the kept runs of each series, as "
            "<code>perfgate history trend</code> finds them." + ("" if repo_url else " No repository URL known: "
            "commits are not linked (--repo-url).") + "</p>" + table + (f"<ul class=muted>{notes}</ul>" if notes else ""))
    return _html(f"perfgate history — {heading}", body)


# -- the files -------------------------------------------------------------------------------------------
def site_pages(hs, policy, branch: str | None = None) -> tuple[list, list]:
    """``([SeriesPage], summary lines)`` of every gated metric's series in ``hs`` (a
    HistoryStore, read only), step time first, from
    :func:`perfgate.history.trend.trend_report` (all branches when ``branch`` is None)."""
    from perfgate.history.trend import trend_report
    rep = trend_report(hs, policy, None, branch)
    pages = [SeriesPage(t.key, t.series_key, t.series, t.change_points, note, page_file(t.key, t.series_key))
             for t, note in zip(rep.trends, rep.notes["per_series"]) if len(t.series)]
    pages.sort(key=lambda p: severity_key(p.key, p.change_points))
    return pages, list(rep.notes["summary"])


def remove_stale_site(out) -> None:
    """Delete what an earlier ``history site`` left in ``out`` (``index.html`` and
    ``metric-<id>.html``, nothing else; :func:`perfgate.store.atomic.discard_stale`), before the
    history is read: a refused run leaves no earlier site, and no page of a series that is gone."""
    from perfgate.store.atomic import discard_stale
    outp = Path(out)
    discard_stale(outp / INDEX)
    try:
        stale = [p for p in outp.iterdir() if _PAGE.fullmatch(p.name)]
    except OSError:
        return
    for p in stale:
        discard_stale(p)


def write_history_site(hs, policy, out, *, branch: str | None = None, repo_url: str | None = None) -> tuple[int, Path]:
    """Write the site (see the module docstring) into ``out``; returns ``(pages written, path of
    index.html)``.

    Raises:
        StoreError (exit 5): the folder cannot be created or a page not written."""
    outp = Path(out)
    remove_stale_site(outp)
    pages, summary = site_pages(hs, policy, branch)
    try:
        outp.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the site folder: {e.strerror or e}", path=outp) from None
    from perfgate.store.atomic import write_atomic
    heading = f"branch {branch}" if branch else "every branch"
    for p in pages:
        write_atomic(outp / p.file, render_metric_page(p, repo_url, heading))
    write_atomic(outp / INDEX, render_index(pages, repo_url, heading, summary))
    return len(pages), outp / INDEX

