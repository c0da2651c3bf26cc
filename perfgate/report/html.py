"""Self-contained HTML report with plots: one file, no script, no network.

Two entry points, both pure (they return a ``str`` and never print or write):

* :func:`render_html` — a ``perfgate check`` result (:class:`~perfgate.model.GateResult`),
  optionally with the stored baseline :class:`~perfgate.model.Fingerprint` (for its per-rank
  step times and config) and recorded history series (for trend sparklines);
* :func:`render_capture_html` — one capture's :class:`~perfgate.model.Fingerprint`
  (``perfgate report CAPTURE``).

Every chart is drawn by matplotlib (Agg backend) as SVG and inlined into the page, text kept
as text (``svg.fonttype: none``), so the file opens offline, in a CI artifact viewer or from
disk, and stays small (a 64-rank check is a few hundred kB). Sections, in order: the verdict
(``#verdict``: the verdict line, partial comparisons and configuration changes); the causes
(``#causes``, :mod:`perfgate.compare.causes`: what changed per view, what it explains, its share
of the step-time change, its evidence as a list); the charts

* ``#chart-shares`` — time share by category and by core type (Accelerator Core), baseline
  vs candidate, view p50 (median over ranks), in percent of the kernel table's ΣDuration;
* ``#chart-ranks`` — per-rank step time in us (median over steps of Computing +
  Communication(Not Overlapped) + Free from step_trace_time.csv / the trace's Overlap
  Analysis, or the device wall when neither exists); rank0, the p50 line and the max rank
  marked, the baseline's per-rank values as markers when known;
* ``#chart-anatomy`` — step anatomy per view (rank0 / p50 / max): Computing, exposed
  communication (Communication(Not Overlapped)) and Free stacked, in us, baseline vs
  candidate; each segment is that metric's own cross-rank view, so the p50 / max stacks can
  differ from ``step.time_us`` of the same view (shown as a tick);
* ``#chart-families`` — the kernel families whose ΣDuration per step (p50 view,
  ``kernel.time_us``) moved most, in us, with the change in calls per step; for a single
  capture the Top families by ΣDuration;
* ``#chart-trends`` — a sparkline per gated metric that has recorded history (only when
  ``history`` is given);

then the gated changes with the views as columns (and each row's evidence), incomparable / new /
missing collapsed (``#incomparable``), informational changes collapsed; then the findings, and
the self-check results beside the capture provenance (``#selfchecks``,
``#provenance``).
"""
from __future__ import annotations

import html as _html
import io
import re
from collections import Counter

from perfgate import terms
from perfgate.errors import require_extra
from perfgate.model import Fingerprint, GateResult, parse_metric_key
from perfgate.report.summary import (DAMAGED_NOTE, green_text, waterfall_text, store_failure, config_changes, error_where, informational_text, gated_tail_text, explains_text, group_views,
                                     short_change, step_share_text, verdict_detail, verdict_line, view_columns)

VIEWS = (terms.VIEW_RANK0, terms.VIEW_P50, terms.VIEW_MAX)
BASE_COLOR, CAND_COLOR = "#8c8c8c", "#1f77b4"
ANATOMY = (("Computing", "step.computing_us", "#4c72b0"),
           ("exposed Communication", "step.comm_not_overlapped_us", "#dd8452"),
           ("Free", "step.free_us", "#c7c7c7"))
TREND_PRIORITY = ("step.time_us", "step.computing_us", "step.exposed_comm_ratio", "step.underfeed_ratio",
                  "kernel.total_calls_per_step", "share.category", "share.core_type", "comm.calls_per_step",
                  "kernel.topn", "kernel.calls_per_step", "optype.calls_per_step")
MAX_TRENDS = 30
MAX_ROWS = 400

_STATUS_CLASS = {terms.PASS: "pass", terms.FAIL: "fail", terms.NO_BASELINE: "none",
                 terms.INCOMPATIBLE: "none", terms.INVALID: "invalid", terms.DAMAGED: "invalid", terms.STORE_ERROR: "invalid",
                 "VALID_CAPTURE": "pass"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:20px;margin:4px 0 12px} h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:14px 0 6px}
#verdict{border-radius:8px;padding:12px 16px;border:2px solid}
#verdict .status{font-size:22px;font-weight:700}
.pass{background:#e9f7ee;border-color:#2e9e5b}.fail{background:#fdecec;border-color:#d43c3c}
.none{background:#f1f1f1;border-color:#999}.invalid{background:#fff3e0;border-color:#e67e00}
table{border-collapse:collapse;width:100%;margin:6px 0;font-size:13px;background:#fff}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.key{min-width:170px}
td.key,code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all}
tr.regression td:first-child{border-left:4px solid #d43c3c} tr.improvement td:first-child{border-left:4px solid #2e9e5b}
tr.other td:first-child{border-left:4px solid #e6b800}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:14px}
figure.chart{margin:0;background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}
figure.chart svg{width:100%;height:auto;display:block}
figcaption{font-size:12px;color:#555;margin-top:4px}
.nodata{color:#777;font-style:italic;padding:20px 8px}
.side{display:grid;grid-template-columns:1fr 1fr;gap:16px}
@media (max-width:900px){.side,.charts{grid-template-columns:1fr}}
td.spark{width:190px;padding:0 4px} td.spark svg{width:180px;height:auto;display:block}
.muted{color:#666} details{margin:6px 0} summary{cursor:pointer;font-weight:600}
table.causes,table.grouped{table-layout:fixed} table.causes td,table.grouped td{overflow-wrap:anywhere}
table.grouped td.num{white-space:normal} td.num.wrap{white-space:normal}
td.ev{font-size:12px;color:#333;overflow-wrap:anywhere} td.ev ul,td ul{margin:0;padding-left:16px} td.ev li{word-break:break-word}
ul.config{margin:6px 0;padding-left:18px;color:#8a4b00} .status .detail{font-size:15px;font-weight:600;margin-left:8px}
.badge{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px;font-weight:600}
.b-pass{background:#d7f0df}.b-fail{background:#f7d4d4}.b-warn{background:#fbeec8}.b-skipped{background:#e6e6e6}
"""


# -- small helpers -------------------------------------------------------------------------------------
def _e(v) -> str:
    return _html.escape("" if v is None else str(v), quote=True)


def _fmt(v, unit) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v[:6])) + (f" (+{len(v) - 6})" if len(v) > 6 else "")
    if unit == "ratio":
        return f"{v * 100:.2f}%"
    if unit == "us":
        return f"{v:,.1f} us"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _delta(c) -> str:
    if c.delta is None:
        return "—"
    if c.unit == "ratio":
        return f"{c.delta * 100:+.2f} pp"
    rel = f" ({c.delta_rel:+.1%})" if c.delta_rel is not None else ""
    if c.unit == "us":
        return f"{c.delta:+,.1f} us{rel}"
    return f"{c.delta:+g}{rel}"


def _plt():
    require_extra("html", "the HTML report's plots")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


_SVG_OPEN = re.compile(r"<svg\b[^>]*>", re.S)


def _svg(fig, label: str) -> str:
    """A matplotlib figure -> inline ``<svg>`` (no XML prolog; scales with its container)."""
    plt = _plt()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    m = _SVG_OPEN.search(text)
    vb = re.search(r'viewBox="([^"]+)"', m.group(0))
    opened = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
              f'viewBox="{vb.group(1) if vb else ""}" role="img" aria-label="{_e(label)}">')
    return opened + text[m.end():]


def _rc():
    return {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
            "font.family": "DejaVu Sans"}


def _figure(fid: str, title: str, body: str, caption: str) -> str:
    return (f'<figure class="chart" id="{fid}"><h3>{_e(title)}</h3>{body}'
            f'<figcaption>{caption}</figcaption></figure>')


def _nodata(why: str) -> str:
    return f'<p class="nodata">{_e(why)}</p>'


# -- values from either a comparison set or one fingerprint -------------------------------------------
class _Values:
    """Metric values by key for the baseline side and the candidate side. A p50 request of a
    capture of several pipeline stages (no pooled p50) reads the job-level value
    (:func:`perfgate.metrics.stages.job_p50`: the largest stage p50) of each side."""

    def __init__(self, base: dict, cand: dict, units: dict):
        self.base, self.cand, self.units = base, cand, units
        self._job = None

    @classmethod
    def from_result(cls, result: GateResult):
        b, c, u = {}, {}, {}
        for cmp in result.comparisons:
            b[cmp.key], c[cmp.key], u[cmp.key] = cmp.baseline, cmp.candidate, cmp.unit
        return cls(b, c, u)

    @classmethod
    def from_fingerprint(cls, fp: Fingerprint):
        return cls({}, {k: m.value for k, m in fp.metrics.items()}, {k: m.unit for k, m in fp.metrics.items()})

    def job(self) -> tuple[dict, dict] | None:
        """``({pooled p50 key: JobValue}`` of the baseline, of the candidate``)`` when either side holds
        stage p50 views, else None (one stage: the p50 values are read as they are)."""
        if self._job is None:
            from perfgate.metrics.stages import job_p50_values
            staged = any(terms.view_stage(parse_metric_key(k)[1].get("view")) is not None
                         for side in (self.base, self.cand) for k in side if ".p50" in k)
            self._job = (job_p50_values(self.base), job_p50_values(self.cand)) if staged else ()
        return self._job or None

    def labelled(self, name: str, label: str, view: str) -> dict:
        """``{label value: (baseline, candidate)}`` for metric ``name`` at ``view``."""
        job = self.job() if view == terms.VIEW_P50 else None
        if job is not None:
            b, c = job
            out = {}
            for key in set(b) | set(c):
                n, labels = parse_metric_key(key)
                if n == name and label in labels:
                    out[labels[label]] = tuple(None if x is None else x.value for x in (b.get(key), c.get(key)))
            return out
        out = {}
        for key in set(self.base) | set(self.cand):
            n, labels = parse_metric_key(key)
            if n == name and labels.get("view") == view and label in labels:
                out[labels[label]] = (self.base.get(key), self.cand.get(key))
        return out

    def pair(self, name: str, view: str):
        from perfgate.model import metric_key
        k = metric_key(name, view=view)
        job = self.job() if view == terms.VIEW_P50 else None
        if job is not None:
            return tuple(None if side.get(k) is None else side[k].value for side in job)
        return self.base.get(k), self.cand.get(k)

    def p50_source(self, *names: str) -> str:
        """A caption sentence naming the stages the p50 values of metrics ``names`` came from in a
        capture of several pipeline stages; ``""`` with one stage."""
        job = self.job()
        if job is None:
            return ""
        stages = sorted({v.stage for side in job for k, v in side.items()
                         if v.stage is not None and parse_metric_key(k)[0] in names})
        if not stages:
            return ""
        return (f" Several pipeline stages: each p50 is the largest stage p50 (a pipeline's step ends when its "
                f"slowest stage ends), here from stage{'s' if len(stages) > 1 else ''} "
                f"{', '.join(map(str, stages))}.")


def _num(v):
    return v if isinstance(v, (int, float)) and v == v else None


# -- charts ---------------------------------------------------------------------------------------------
def chart_shares(vals: _Values, has_base: bool) -> str:
    """Category and core-type time shares (p50 view), baseline vs candidate, percent."""
    groups = [("category", "share.category", "category"), ("core type", "share.core_type", "core_type")]
    data = [(t, vals.labelled(n, lab, terms.VIEW_P50)) for t, n, lab in groups]
    data = [(t, d) for t, d in data if d]
    cap = ("Share of the kernel table's ΣDuration per step, median over ranks (view p50); percent. "
           + ("Bars are labelled with the candidate's share and its change in percentage points." if has_base
              else "Bars are labelled with the capture's share.")
           + _e(vals.p50_source("share.category", "share.core_type")))
    if not data:
        return _figure("chart-shares", "Time shares", _nodata("no share metrics (Type / Accelerator Core not "
                                                               "recorded in this capture, or nothing was compared)"), cap)
    plt = _plt()
    with plt.rc_context(_rc()):
        heights = [max(1.6, 0.32 * len(d) + 0.8) for _, d in data]
        fig, axes = plt.subplots(len(data), 1, figsize=(6.4, sum(heights)),
                                 gridspec_kw={"height_ratios": heights}, squeeze=False)
        for ax, (title, d) in zip(axes[:, 0], data):
            items = sorted(d.items(), key=lambda kv: -(_num(kv[1][1]) or _num(kv[1][0]) or 0))
            names = [k for k, _ in items]
            y = list(range(len(items)))
            cand = [(_num(c) or 0) * 100 for _, (b, c) in items]
            h = 0.38 if has_base else 0.7
            if has_base:
                base = [(_num(b) or 0) * 100 for _, (b, c) in items]
                ax.barh([i + h / 2 for i in y], base, height=h, color=BASE_COLOR, label="baseline")
            ax.barh([i - (h / 2 if has_base else 0) for i in y], cand, height=h, color=CAND_COLOR, label="candidate")
            for i, (_, (b, c)) in enumerate(items):
                txt = f"{(_num(c) or 0) * 100:.1f}%"
                if has_base and _num(b) is not None and _num(c) is not None:
                    txt += f" ({(c - b) * 100:+.2f} pp)"
                ax.text((_num(c) or 0) * 100 + 0.5, i - (h / 2 if has_base else 0), txt, va="center", fontsize=8)
            ax.set_yticks(y, names)
            ax.invert_yaxis()
            ax.set_xlim(0, max(100.0, max(cand, default=0) + 25))
            ax.set_xlabel("% of ΣDuration")
            ax.set_title(f"by {title}", loc="left", fontsize=10)
            if has_base:
                ax.legend(loc="lower right", fontsize=8, frameon=False)
        fig.tight_layout()
        return _figure("chart-shares", "Time shares: category and core type", _svg(fig, "time shares"), cap)


def _per_rank(detail: dict | None) -> tuple[dict, str]:
    """``{rank: median step time over steps}`` and the quantity's name, from a fingerprint detail."""
    import statistics
    detail = detail or {}
    rows, what = detail.get("step_time"), "step time (Computing + Communication(Not Overlapped) + Free)"
    if rows:
        vals = [(r["rank"], r["time_us"]) for r in rows if r.get("time_us") is not None]
    else:
        vals = [(r["rank"], r["wall_us"]) for r in detail.get("steps") or [] if r.get("wall_us") is not None]
        what = "device wall (first task start to last task end)"
    per: dict = {}
    for rank, v in vals:
        per.setdefault(int(rank), []).append(float(v))
    return {r: statistics.median(v) for r, v in sorted(per.items())}, what


def chart_ranks(detail: dict | None, base_detail: dict | None = None) -> str:
    """Per-rank step time (us), rank0 / p50 / max marked; baseline per-rank values as markers."""
    cand, what = _per_rank(detail)
    base, _ = _per_rank(base_detail) if base_detail else ({}, "")
    cap = (f"Per rank: {_e(what)}, median over the rank's steps, us. rank0 and the slowest rank (max) are "
           f"coloured; the dashed line is the median over ranks (p50)."
           + (" Grey markers: the baseline's value for the same rank." if base else ""))
    if not cand:
        return _figure("chart-ranks", "Per-rank step time", _nodata("no per-rank step table in this result"), cap)
    import statistics
    plt = _plt()
    ranks = list(cand)
    v = [cand[r] for r in ranks]
    p50 = statistics.median(v)
    rmax = ranks[max(range(len(v)), key=lambda i: v[i])]
    r0 = min(ranks)
    colors = ["#2ca02c" if r == r0 else ("#d62728" if r == rmax else "#9ecae1") for r in ranks]
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
        x = list(range(len(ranks)))
        ax.bar(x, v, color=colors, width=0.8)
        ax.axhline(p50, color="#333", ls="--", lw=1)
        ax.text(len(x) - 0.5, p50, f" p50 {p50:,.0f} us", va="bottom", ha="right", fontsize=8)
        if base:
            bx = [i for i, r in enumerate(ranks) if r in base]
            ax.scatter(bx, [base[ranks[i]] for i in bx], marker="_", s=max(30.0, min(500.0, 6000.0 / len(ranks))), linewidths=2, color="#222", zorder=3,
                       label="baseline")
        from matplotlib.patches import Patch
        handles = [Patch(color="#2ca02c", label=f"rank0 (rank {r0}) {cand[r0]:,.0f} us"),
                   Patch(color="#d62728", label=f"max (rank {rmax}) {cand[rmax]:,.0f} us")]
        if rmax == r0:
            handles = [Patch(color="#2ca02c", label=f"rank0 = max (rank {r0}) {cand[r0]:,.0f} us")]
        ax.legend(handles=handles + ([ax.collections[0]] if base else []), loc="upper left", fontsize=7,
                  framealpha=0.9, ncol=2)
        step = max(1, len(ranks) // 16)
        ax.set_xticks(x[::step], [str(r) for r in ranks[::step]])
        ax.set_xlabel("rank")
        ax.set_ylabel("us")
        ax.set_ylim(0, max(v + list(base.values())) * 1.35)
        fig.tight_layout()
        return _figure("chart-ranks", "Per-rank step time", _svg(fig, "per-rank step time"), cap)


def chart_anatomy(vals: _Values, has_base: bool) -> str:
    """Stacked Computing / exposed Communication / Free per view, baseline vs candidate (us)."""
    cap = ("Step anatomy from step_trace_time.csv (or the trace's Overlap Analysis), us: Computing, "
           "exposed communication = Communication(Not Overlapped), and Free, each reduced over steps "
           "(median) and then over ranks by the view. Black tick: step.time_us of the same view."
           + _e(vals.p50_source("step.time_us", *(n for _, n, _ in ANATOMY))))
    bars = []
    for view in VIEWS:
        for side, idx in ((("baseline", 0),) if has_base else ()) + (("candidate", 1),):
            seg = [_num(vals.pair(name, view)[idx]) for _, name, _ in ANATOMY]
            if any(s is not None for s in seg):
                bars.append((f"{view}\n{side}", seg, _num(vals.pair("step.time_us", view)[idx])))
    if not bars:
        return _figure("chart-anatomy", "Step anatomy", _nodata("no step_trace_time.csv / Overlap Analysis "
                                                                "figures in this result"), cap)
    plt = _plt()
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=(6.4, 3.2))
        x = list(range(len(bars)))
        bottom = [0.0] * len(bars)
        for j, (label, _, color) in enumerate(ANATOMY):
            h = [(b[1][j] or 0.0) for b in bars]
            ax.bar(x, h, bottom=bottom, color=color, label=label, width=0.65,
                   edgecolor=["#555" if "baseline" in b[0] else "none" for b in bars], hatch=None)
            bottom = [a + c for a, c in zip(bottom, h)]
        for i, b in enumerate(bars):
            if b[2] is not None:
                ax.plot([i - 0.36, i + 0.36], [b[2], b[2]], color="black", lw=1.5)
                ax.text(i, max(b[2], bottom[i]) * 1.01, f"{b[2]:,.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [b[0] for b in bars], fontsize=8)
        ax.set_ylabel("us per step")
        ax.set_ylim(0, max(max(bottom), max((b[2] or 0) for b in bars)) * 1.18)
        ax.legend(loc="upper center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 1.14))
        fig.tight_layout()
        return _figure("chart-anatomy", "Step anatomy", _svg(fig, "step anatomy"), cap)


def chart_families(vals: _Values, has_base: bool, top: int = 12) -> str:
    """Kernel families by ΣDuration delta (p50 view), or by ΣDuration for a single capture."""
    d = vals.labelled("kernel.time_us", "family", terms.VIEW_P50)
    calls = vals.labelled("kernel.calls_per_step", "family", terms.VIEW_P50)
    if has_base:
        items = [(f, _num(c) - _num(b)) for f, (b, c) in d.items() if _num(b) is not None and _num(c) is not None]
        items = sorted(items, key=lambda kv: (-abs(kv[1]), kv[0]))[:top]
        title = "Top kernel families by ΣDuration change"
        cap = ("Change in ΣDuration per step of a kernel family (candidate − baseline), median over steps, "
               "view p50, us; the label adds the relative change and the change in calls per step. Families "
               "are those within Top-N + slack on either side. Single-kernel time is context, not gated.")
    else:
        items = sorted(((f, _num(c)) for f, (b, c) in d.items() if _num(c) is not None),
                       key=lambda kv: (-kv[1], kv[0]))[:top]
        title = "Top kernel families by ΣDuration"
        cap = "ΣDuration per step of each kernel family, median over steps, view p50, us; label: calls per step."
    cap += _e(vals.p50_source("kernel.time_us", "kernel.calls_per_step"))
    if not items:
        return _figure("chart-families", title, _nodata("no kernel family present on both sides"), cap)
    plt = _plt()
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(items) + 1.0))
        y = list(range(len(items)))
        v = [x for _, x in items]
        if has_base:
            colors = ["#d62728" if x > 0 else "#2ca02c" for x in v]
        else:
            colors = [CAND_COLOR] * len(v)
        ax.barh(y, v, color=colors, height=0.65)
        span = max(abs(x) for x in v) or 1.0
        for i, (fam, x) in enumerate(items):
            b, c = d[fam]
            cb, cc = calls.get(fam, (None, None))
            if has_base:
                rel = f" ({x / b:+.1%})" if _num(b) else ""
                cl = f", calls {cc - cb:+g}" if _num(cb) is not None and _num(cc) is not None and cc != cb else ""
                txt = f"{x:+,.1f} us{rel}{cl}"
            else:
                txt = f"{x:,.1f} us" + (f", {cc:g} calls" if _num(cc) is not None else "")
            ax.text(max(x, 0.0) + 0.02 * span, i, txt, va="center", ha="left", fontsize=7.5)
        ax.set_yticks(y, [f if len(f) <= 42 else f[:40] + "…" for f, _ in items], fontsize=7.5)
        ax.invert_yaxis()
        ax.axvline(0, color="#333", lw=0.8)
        lo, hi = min(0.0, min(v)), max(0.0, max(v))
        ax.set_xlim(lo - 0.05 * span, hi + 0.75 * span)
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_xlabel("Δ ΣDuration per step (us)" if has_base else "ΣDuration per step (us)")
        fig.tight_layout()
        return _figure("chart-families", title, _svg(fig, title), cap)


def sparkline_keys(result: GateResult | None = None, fingerprint: Fingerprint | None = None, policy=None,
                   limit: int = MAX_TRENDS) -> list[str]:
    """Which gated metrics get a trend sparkline (at most ``limit``): failing first, then changed,
    then by :data:`TREND_PRIORITY`. For a check, the gated comparisons at views rank0 / p50 (a
    pipeline stage's p50 too); for one capture, the fingerprint's metrics the policy gates (all
    rank0 / p50 metrics without a policy)."""
    cands = []
    if result is not None:
        for c in result.comparisons:
            if c.gated and terms.base_view(c.labels.get("view")) in (terms.VIEW_RANK0, terms.VIEW_P50) and c.unit != "set":
                cands.append((c.key, c.name, 0 if c.fails else (1 if c.verdict != terms.UNCHANGED else 2)))
    elif fingerprint is not None:
        for k, m in fingerprint.metrics.items():
            if terms.base_view(m.labels.get("view")) not in (terms.VIEW_RANK0, terms.VIEW_P50) or m.unit == "set":
                continue
            rule = policy.rule_for(m.name, m.labels) if policy is not None else None
            if policy is not None and not (rule and rule.gated):
                continue
            cands.append((k, m.name, 2))
    prio = {n: i for i, n in enumerate(TREND_PRIORITY)}
    cands.sort(key=lambda t: (t[2], prio.get(t[1], len(prio)), t[0]))
    return [k for k, _, _ in cands[:limit]]


def _sparkline(series, current) -> str:
    plt = _plt()
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=(1.9, 0.42))
        y = [float(v) for v in series["value"]]
        x = list(range(len(y)))
        ax.plot(x, y, color="#555", lw=1)
        ax.plot(x[-1:], y[-1:], "o", color="#555", ms=2.5)
        if _num(current) is not None:
            ax.plot([len(y)], [current], "o", color="#d62728", ms=3.5)
        ax.axis("off")
        ax.margins(x=0.04, y=0.25)
        return _svg(fig, "trend")


def trends_section(history: dict | None, keys: list, vals: _Values) -> str:
    """The ``#chart-trends`` figure: a table of sparklines (history oldest → newest; red dot:
    this candidate)."""
    cap = ("Recorded values of each gated metric (oldest → newest, last kept runs of one series); "
           "the red dot is this capture's value.")
    rows = []
    for k in keys:
        s = (history or {}).get(k)
        if s is None or len(s) == 0:
            continue
        unit = vals.units.get(k, "")
        cur = vals.cand.get(k)
        lo, hi = float(s["value"].min()), float(s["value"].max())
        rows.append(f'<tr><td class="key">{_e(k)}</td><td class="spark">{_sparkline(s, cur)}</td>'
                    f'<td class="num">{len(s)}</td><td class="num">{_e(_fmt(lo, unit))} – {_e(_fmt(hi, unit))}</td>'
                    f'<td class="num">{_e(_fmt(cur, unit))}</td></tr>')
    if not rows:
        body = _nodata("no recorded history for these metrics")
    else:
        body = ('<table><tr><th>gated metric</th><th>trend</th><th>runs</th><th>recorded range</th>'
                '<th>this capture</th></tr>' + "".join(rows) + "</table>")
    return (f'<figure class="chart" id="chart-trends" style="grid-column:1/-1"><h3>Trends</h3>{body}'
            f'<figcaption>{cap}</figcaption></figure>')


# -- tables ---------------------------------------------------------------------------------------------
def _cmp_table(rows, cls_of) -> str:
    out = ['<table><tr><th>metric</th><th>baseline</th><th>candidate</th><th>delta</th><th>caliber</th>'
           '<th>tolerance</th><th>evidence</th><th>why</th></tr>']
    for c in rows[:MAX_ROWS]:
        out.append(f'<tr class="{cls_of(c)}"><td class="key">{_e(c.key)}</td><td class="num">{_e(_fmt(c.baseline, c.unit))}</td>'
                   f'<td class="num">{_e(_fmt(c.candidate, c.unit))}</td><td class="num">{_e(_delta(c))}</td>'
                   f'<td>{_e(terms.CALIBER_LABEL.get(c.caliber, "—"))}</td><td>{_e(c.tolerance)}</td>'
                   f'<td><code>{_e(c.evidence)}</code></td><td>{_e(c.reason)}</td></tr>')
    out.append("</table>")
    if len(rows) > MAX_ROWS:
        out.append(f'<p class="muted">{len(rows) - MAX_ROWS} more row(s) in the JSON result.</p>')
    return "".join(out)


def _grouped(rows, cause_of: dict) -> str:
    views = view_columns(rows)
    ev_w = max(14, 100 - 22 - 12 * len(views) - 7 - 7 - 14)
    cols = ('<colgroup><col style="width:22%">' + '<col style="width:12%">' * len(views)
            + f'<col style="width:7%"><col style="width:7%"><col style="width:14%"><col style="width:{ev_w}%">'
            + "</colgroup>")
    out = ['<table class="grouped">' + cols + '<tr><th>metric</th>' + "".join(f"<th>{_e(terms.view_text(v))}</th>" for v in views)
           + '<th>caliber</th><th>tolerance</th><th>cause</th><th>evidence</th></tr>']
    for r in rows[:MAX_ROWS]:
        cls = "regression" if r["fails"] else ("improvement" if r["verdict"] == terms.IMPROVEMENT else "other")
        any_c = next(iter(r["views"].values()))
        cause = ", ".join(sorted({cause_of.get(c.key, "") for c in r["views"].values()} - {""})) or "—"
        ev = "".join(f"<li><b>{_e(terms.view_text(v))}</b>: {_e(c.evidence)}</li>" for v, c in r["views"].items() if c.evidence)
        out.append(f'<tr class="{cls}"><td>{_e(r["subject"])}<div class="muted key">{_e(r["key"])}</div></td>'
                   + "".join(f'<td class="num">{_e(short_change(r["views"].get(v)))}</td>' for v in views)
                   + f'<td>{_e(terms.CALIBER_LABEL.get(any_c.caliber, "—"))}</td><td>{_e(any_c.tolerance)}</td>'
                   f'<td>{_e(cause)}</td><td class="ev"><ul>{ev}</ul></td></tr>')
    out.append("</table>")
    return "".join(out)


def _causes(result: GateResult) -> str:
    """The causes first (:mod:`perfgate.compare.causes`): what changed, per view, what it explains,
    its share of the step-time change, and its evidence as a readable list."""
    causes = list(result.causes)
    by_key = {c.key: c for c in result.comparisons}
    un = [by_key[k] for k in result.unexplained if k in by_key]
    wf, green = waterfall_text(result), green_text(result)
    lead = "".join(f"<p>{_e(t)}</p>" for t in (wf and f"Step-time change: {wf}", green) if t)
    if not causes and not un:
        return f'<section id="causes">{lead}</section>' if lead else ""
    parts = [f'<section id="causes"><h2>Causes ({len(causes)})</h2>', lead]
    if causes:
        parts.append('<table class="causes"><colgroup><col style="width:21%"><col style="width:27%">'
                     '<col style="width:24%"><col style="width:10%"><col style="width:18%"></colgroup>'
                     '<tr><th>cause</th><th>what changed, per view</th><th>explains (gated metrics)</th>'
                     '<th>share of the step-time change</th><th>evidence</th></tr>')
        for x in causes:
            cls = "regression" if x["fails"] else ("improvement" if x["verdict"] == terms.IMPROVEMENT else "other")
            views = "".join(f"<li><b>{_e(v)}</b>: {_e(t)}</li>" for v, t in x["views"].items())
            ev = "".join(f"<li>{_e(t)}</li>" for t in x["evidence"])
            parts.append(f'<tr class="{cls}"><td><b>{_e(x["kind"])}</b><div class="key">{_e(x["subject"])}</div></td>'
                         f'<td><ul>{views}</ul></td>'
                         f'<td>{len(x["explains"])}: {_e(explains_text(x, 6))}</td>'
                         f'<td class="num wrap">{_e(step_share_text(x))}</td><td class="ev"><ul>{ev}</ul></td></tr>')
        parts.append("</table>")
    if un:
        parts.append(f"<h3>Changes no cause explains ({len(un)})</h3>" + _grouped(group_views(un), {}))
    parts.append("</section>")
    return "".join(parts)


def _tables(result: GateResult) -> str:
    gated = [c for c in result.comparisons if c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
    gated.sort(key=lambda c: (not c.fails, c.verdict != terms.REGRESSION, c.key))
    inc = [c for c in result.comparisons if c.verdict in (terms.INCOMPARABLE, terms.NEW, terms.MISSING)]
    info = [c for c in result.comparisons if not c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
    cause_of: dict = {}
    for x in result.causes:
        for k in x["explains"]:
            cause_of[k] = (cause_of[k] + ", " if k in cause_of else "") + x["subject"]
    rows = group_views(gated)
    parts = [f'<section id="comparisons"><h2>Gated regressions and improvements ({len(gated)} metric-views in '
             f'{len(rows)} rows)</h2>']
    parts.append(_grouped(rows, cause_of) if gated else '<p class="muted">No gated metric moved beyond its '
                                                         'tolerance.</p>')
    if gated:
        parts.append("<details><summary>Why, per metric and view</summary><ul>"
                     + "".join(f'<li><span class="key">{_e(c.key)}</span>: {_e(c.reason)}</li>' for c in gated)
                     + "</ul></details>")
    if inc:
        n_gated = sum(1 for c in inc if c.gated)
        parts.append(f'<details id="incomparable"><summary>Incomparable / new / missing ({len(inc)}, {n_gated} '
                     f'gated)</summary>'
                     '<table><tr><th>verdict</th><th>metric</th><th>gated</th><th>why</th></tr>'
                     + "".join(f'<tr><td>{_e(c.verdict)}</td><td class="key">{_e(c.key)}</td>'
                               f'<td>{"yes" if c.gated else "no"}</td><td>{_e(c.reason)}</td></tr>'
                               for c in inc[:MAX_ROWS]) + "</table></details>")
    else:
        parts.append('<p class="muted">Incomparable / new / missing: none, every metric was comparable on both '
                     'sides.</p>')
    if info:
        parts.append(f'<details><summary>Informational changes ({len(info)}, not gated)</summary>'
                     f'{_cmp_table(info, lambda c: "other")}</details>')
    parts.append("</section>")
    return "".join(parts)


def _findings(findings, notes=()) -> str:
    if not findings and not notes:
        return ""
    parts = ['<section id="findings"><h2>Findings and notes</h2>']
    def table(fs):
        rows = ['<table><tr><th>code</th><th>severity</th><th>rank</th><th>step</th><th>message</th>'
                '<th>evidence</th></tr>']
        for f in sorted(fs, key=lambda f: (f.severity != "fail", f.code, f.rank if f.rank is not None else -1))[:200]:
            badge = {"fail": "fail", "warn": "warn"}.get(f.severity, "skipped")
            rows.append(f'<tr><td>{_e(f.code)}</td><td><span class="badge b-{badge}">{_e(f.severity)}</span></td>'
                        f'<td>{_e(f.rank)}</td><td>{_e(f.step)}</td><td>{_e(f.message)}</td>'
                        f'<td><code>{_e(f.evidence)}</code></td></tr>')
        return "".join(rows) + "</table>"
    loud = [f for f in findings if f.severity in ("fail", "warn")]
    quiet = [f for f in findings if f.severity not in ("fail", "warn")]
    if loud:
        parts.append(table(loud))
    if quiet:
        parts.append(f"<details><summary>Informational findings ({len(quiet)})</summary>{table(quiet)}</details>")
    if notes:
        parts.append("<details><summary>Notes on comparability (%d)</summary><ul>%s</ul></details>"
                     % (len(notes), "".join(f"<li>{_e(n)}</li>" for n in notes)))
    parts.append("</section>")
    return "".join(parts)


def _selfchecks(checks) -> str:
    parts = ['<div id="selfchecks"><h2>Self-checks</h2>']
    if not checks:
        parts.append('<p class="muted">No self-check ran (nothing was read from the capture).</p></div>')
        return "".join(parts)
    summary = Counter((c.name, c.status) for c in checks)
    names = sorted({c.name for c in checks})
    statuses = [s for s in ("pass", "fail", "warn", "skipped") if any(st == s for _, st in summary)]
    parts.append('<table><tr><th>check</th>' + "".join(f"<th>{s}</th>" for s in statuses) + "</tr>")
    for n in names:
        parts.append(f"<tr><td>{_e(n)}</td>" + "".join(
            f'<td class="num">{summary.get((n, s), 0) or ""}</td>' for s in statuses) + "</tr>")
    parts.append("</table>")
    order = {"fail": 0, "warn": 1, "skipped": 2, "pass": 3}
    shown = sorted(checks, key=lambda c: (order.get(c.status, 4), c.name, c.rank if c.rank is not None else -1,
                                          str(c.step)))[:MAX_ROWS]
    parts.append(f'<details {"open" if any(c.status == "fail" for c in checks) else ""}><summary>Each check '
                 f'({len(checks)})</summary><table><tr><th>check</th><th>rank</th><th>step</th><th>status</th>'
                 f'<th>detail</th></tr>')
    for c in shown:
        parts.append(f'<tr><td>{_e(c.name)}</td><td>{_e(c.rank)}</td><td>{_e(c.step)}</td>'
                     f'<td><span class="badge b-{_e(c.status)}">{_e(c.status)}</span></td><td>{_e(c.message)}'
                     + (f' <code>{_e(c.evidence)}</code>' if c.evidence else "") + "</td></tr>")
    parts.append("</table></details></div>")
    return "".join(parts)


_PROV_KEYS = ("source", "ranks", "commit", "branch", "runner", "ci_run_id", "created_at", "perfgate_version")
_CONF_KEYS = ("ranks profiled", "job world size", "coverage", "profiler_level", "aic_metrics", "export_type", "torch_npu_version", "cann_version",
              "collection options", "kernel_variants", "has_trace", "has_step_trace", "has_comm_json")


def _provenance(sides: list) -> str:
    """``sides``: [(label, provenance dict or None, config dict or None)]."""
    sides = [s for s in sides if s[1] or s[2]]
    parts = ['<div id="provenance"><h2>Capture provenance</h2>']
    if not sides:
        parts.append('<p class="muted">No provenance recorded.</p></div>')
        return "".join(parts)
    parts.append("<table><tr><th></th>" + "".join(f"<th>{_e(lab)}</th>" for lab, _, _ in sides) + "</tr>")
    for key in _PROV_KEYS:
        vals = [(p or {}).get(key) for _, p, _ in sides]
        if any(v is not None for v in vals):
            parts.append(f"<tr><td>{_e(key)}</td>" + "".join(
                f'<td class="key">{_e(_short(v))}</td>' for v in vals) + "</tr>")
    for key in _CONF_KEYS:
        vals = [_conf_value(c or {}, key) for _, _, c in sides]
        if any(v is not None for v in vals):
            parts.append(f"<tr><td>{_e(key)}</td>" + "".join(
                f'<td class="key">{_e(_short(v))}</td>' for v in vals) + "</tr>")
    parts.append("</table></div>")
    return "".join(parts)


def _conf_value(c: dict, key: str):
    """A config facet for the provenance table. Rank coverage: ``ranks profiled`` is
    the count and ids of the rank folders read (config ``world_size`` / ``ranks``), ``job world
    size`` the job's size as recorded (or "not recorded": never guessed), ``coverage`` the
    tables each rank holds, ``collection options`` the profiler's collection options
    (:func:`perfgate.metrics.collection.summary_text`; None for a fingerprint without them)."""
    if key == "ranks profiled":
        n = c.get("world_size")
        return None if n is None else f"{n} ({', '.join(map(str, c.get('ranks') or []))})"
    if key == "job world size":
        if "job_world_size" not in c:
            return None
        w = c.get("job_world_size")
        return f"{w} ({c.get('world_size_source')})" if w is not None else "not recorded"
    if key == "collection options":
        from perfgate.metrics.collection import options_text, section_of
        sec = section_of(c)
        return options_text(sec) if sec is not None else None
    if key == "coverage":
        cov = c.get("coverage")
        return None if not cov else "; ".join(f"rank {r}: {', '.join(t)}" for r, t in cov.items())
    return c.get(key)


def _short(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v[:16])) + (f" … ({len(v)} in all)" if len(v) > 16 else "")
    return str(v)


def _page(title: str, verdict: str, sections: list) -> str:
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{_e(title)}</h1>{verdict}" + "".join(sections) + "</main></body></html>\n")


def _charts(vals, has_base, detail, base_detail, history, keys) -> str:
    figs = [chart_shares(vals, has_base), chart_ranks(detail, base_detail), chart_anatomy(vals, has_base),
            chart_families(vals, has_base)]
    if history is not None:
        figs.append(trends_section(history, keys, vals))
    return '<section id="charts"><h2>Charts</h2><div class="charts">' + "".join(figs) + "</div></section>"


def structure_section(detail: dict | None) -> str:
    """The model structure of the lowest rank with one (first step): step -> micro-batch ->
    pass -> layers (model layers, classes, block kinds) and the named non-layer segments
    (pipeline, embedding, lm_head_loss, grad_sync, optimizer), in time order. Times: the
    sum of the segments' wall spans (ms)."""
    segs = [s for s in (detail or {}).get("segments") or [] if s.get("outline")]
    if not segs:
        return ""
    s = min(segs, key=lambda x: x.get("rank", 0))
    st = (s.get("steps") or [{}])[0]
    items = []
    for r in s["outline"]:
        if r["kind"] == "layer":
            cls = ", ".join(f"<code>{_e(c)}</code> ×{n}" for c, n in r["classes"].items())
            items.append(f"<li><b>micro-batch {r['microbatch']} · {_e(r['pass'])}</b>: {r['segments']} layers "
                         f"(model layers {_e(r['model_layers'])}; {cls}; blocks {_e(r['kinds'])}) — rows "
                         f"{r['first_row']}–{r['last_row']}, {r['wall_us'] / 1000:.3f} ms</li>")
        else:
            items.append(f"<li class=\"muted\">{_e(r['kind'])}: {r['rows']} rows {r['first_row']}–{r['last_row']}, "
                         f"{r['wall_us'] / 1000:.3f} ms</li>")
    head = (f"rank {s.get('rank')} step {_e(st.get('step'))}: {st.get('microbatches', 0)} micro-batch(es), passes "
            f"{_e(st.get('passes') or 'none')}, {st.get('layers', 0)} layer segments")
    return (f'<section id="structure"><h2>Model structure</h2><div>{head}</div><ol class="structure">'
            + "".join(items) + "</ol></section>")


# -- entry points ---------------------------------------------------------------------------------------
def render_html(result: GateResult, *, baseline: Fingerprint | None = None, history: dict | None = None,
                trend_keys: list | None = None, title: str | None = None) -> str:
    """``perfgate check`` result -> one self-contained HTML page (see the module docstring).

    Args:
        result: the gate result; its comparisons give both sides' values, its ``detail`` the
            candidate's per-rank tables.
        baseline: the stored baseline fingerprint, for its per-rank step times and config
            (None for ``history:`` baselines or when unavailable: those parts are omitted).
        history: ``{metric key: DataFrame(value, ...)}`` recorded series
            (:func:`perfgate.history.store.trend_series`); None = no trend section.
        trend_keys: which keys get a sparkline (default :func:`sparkline_keys`).
    """
    n = result.counts()
    g = n["gated"]
    title = title or "perfgate report" + (f" — baseline {result.baseline_name}" if result.baseline_name else "")
    detail = verdict_detail(result)
    lines = [f'<div class="status">{_e(verdict_line(result))} <span class="muted">(exit {result.exit_code})</span>'
             + (f' <span class="detail">{_e(detail)}</span>' if detail else "") + '</div>']
    changes = config_changes(result)
    if changes:
        lines.append('<ul class="config">' + "".join(f"<li>⚠ {_e(x)}</li>" for x in changes) + "</ul>")
    if result.comparisons:
        lines.append(f"<div>Gated metrics: {g['total']} — <b>{n['gated_regressions']} failing</b>, "
                     f"{g['improvement']} improved, {_e(gated_tail_text(n))}. Informational "
                     f"metrics: {_e(informational_text(n))}.</div>")
    if result.error:
        e = result.error
        where = error_where(e)
        lines.append(f"<div>{store_failure(result.status) + ': ' if result.status in terms.STORE_FAILED else ''}"
                     f"<b>{_e(e.get('message'))}</b>" + (f" <code>{_e(where)}</code>" if where else "")
                     + (f"<br>hint: {_e(e['hint'])}" if e.get("hint") else "") + "</div>")
        if result.status == terms.INVALID:
            lines.append("<div>The capture failed closed: nothing was compared, nothing was written.</div>")
        elif result.status in terms.STORE_FAILED:
            lines.append(f"<div>{_e(DAMAGED_NOTE)}</div>")
        else:
            lines.append("<div>Nothing was judged: this is not a pass.</div>")
    verdict = (f'<section id="verdict" class="{_STATUS_CLASS.get(result.status, "none")}">' + "".join(lines)
               + f'<div class="muted">baseline {_e(result.baseline_name)} · {result.elapsed_s:.2f} s</div></section>')
    vals = _Values.from_result(result)
    has_base = bool(result.comparisons)
    keys = trend_keys if trend_keys is not None else sparkline_keys(result)
    sections = [_causes(result),
                _charts(vals, has_base, result.detail, baseline.detail if baseline else None, history, keys),
                _tables(result) if result.comparisons else "",
                structure_section(result.detail),
                _findings(result.findings, result.notes),
                '<section class="side">' + _selfchecks(result.self_checks)
                + _provenance([("baseline", result.baseline_provenance, baseline.config if baseline else None),
                               ("candidate", result.candidate_provenance, None)]) + "</section>"]
    return _page(title, verdict, sections)


def render_capture_html(fp: Fingerprint, *, history: dict | None = None, trend_keys: list | None = None,
                        policy=None, fail_closed=(), title: str | None = None) -> str:
    """One capture's fingerprint -> a self-contained HTML page (``perfgate report CAPTURE``):
    validity verdict (self-checks and fail-closed findings), shares, per-rank step time, step
    anatomy, Top kernel families, trends (when ``history`` is given), findings, self-checks and
    provenance. No baseline: charts show the capture alone."""
    from perfgate.metrics.fingerprint import blocking_findings, failed_checks
    bad, block = failed_checks(fp), blocking_findings(fp, fail_closed)
    status = "INVALID_CAPTURE" if bad or block else "VALID_CAPTURE"
    cls = _STATUS_CLASS[terms.INVALID] if bad or block else "pass"
    counts = Counter(c.status for c in fp.self_checks)
    lines = [f'<div class="status">{status}</div>',
             f"<div>{len(fp.metrics)} metrics, ranks {_e(_short(fp.provenance.get('ranks')))}; self-checks: "
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "</div>"]
    for c in bad[:5]:
        lines.append(f"<div><b>self-check {_e(c.name)} failed</b> (rank {_e(c.rank)}{'' if c.step is None else ', step ' + _e(c.step)}): "
                     f"{_e(c.message)}</div>")
    for f in block[:5]:
        lines.append(f"<div><b>{_e(f.code)}</b>: {_e(f.message)}</div>")
    verdict = f'<section id="verdict" class="{cls}">' + "".join(lines) + "</section>"
    vals = _Values.from_fingerprint(fp)
    keys = trend_keys if trend_keys is not None else sparkline_keys(fingerprint=fp, policy=policy)
    title = title or f"perfgate capture report — {fp.provenance.get('source', '')}"
    sections = [_charts(vals, False, fp.detail, None, history, keys),
                structure_section(fp.detail),
                _findings(fp.findings, fp.warnings),
                '<section class="side">' + _selfchecks(fp.self_checks)
                + _provenance([("capture", fp.provenance, fp.config)]) + "</section>"]
    return _page(title, verdict, sections)


def render_capture_error_html(error: dict, *, source=None, title: str | None = None) -> str:
    """A capture that could not be READ (``perfgate report CAPTURE`` when ingest raised
    :class:`~perfgate.errors.InvalidCaptureError`) -> a self-contained HTML page saying why:
    status INVALID_CAPTURE (exit 3), the message with its file, data row (header excluded) and
    byte offset, the hint, and every further problem found (``error["problems"]``, one per rank).

    Args:
        error: ``InvalidCaptureError.to_dict()`` (keys message, path, row, byte_offset, hint,
            problems, exit_code).
        source: the capture path, for the title.
    """
    def item(p: dict) -> str:
        w = error_where(p)
        return (f"<b>{_e(p.get('message'))}</b>" + (f" <code>{_e(w)}</code>" if w else "")
                + (f"<br>hint: {_e(p['hint'])}" if p.get("hint") else ""))

    code = error.get("exit_code", 3)
    lines = [f'<div class="status">{_e(terms.INVALID)} <span class="muted">(exit {_e(code)})</span></div>',
             f"<div>{item(error)}</div>",
             "<div>The capture could not be read, so it failed closed: nothing was compared, nothing was "
             "written to baselines or history.</div>"]
    verdict = f'<section id="verdict" class="{_STATUS_CLASS[terms.INVALID]}">' + "".join(lines) + "</section>"
    problems = error.get("problems") or []
    sections = []
    if len(problems) > 1:
        sections.append('<section id="problems"><h2>Every problem found</h2><ol>'
                        + "".join(f"<li>{item(p)}</li>" for p in problems) + "</ol></section>")
    title = title or f"perfgate capture report — {source if source is not None else ''}"
    return _page(title, verdict, sections)
