"""History reports: change-point summaries, the tuning journal, and series plots (PNG bytes).

Pure: inputs are series tables and change points; nothing is printed or written here.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.history.store import COMMIT_PUNCTUATION, NO_COMMIT   # as recorded and displayed


def _commit(c) -> str:
    """First 12 characters of a commit, or ``(no commit)`` for None / NaN / empty; a character
    no SHA or ref name has (a newline or ``|`` recorded by an older perfgate) shown as ``?``, so a
    table row stays one row."""
    if not (isinstance(c, str) and c.strip() and c.strip().lower() != "nan"):
        return NO_COMMIT
    return "".join(ch if (ch.isascii() and ch.isalnum()) or ch in COMMIT_PUNCTUATION else "?" for ch in c[:12])


def _is_ratio(key: str) -> bool:
    """A share / ratio metric (registry unit ``ratio``): shown in % with changes in pp."""
    from perfgate.metrics import registry
    from perfgate.model import parse_metric_key
    try:
        d = registry.REGISTRY.get(parse_metric_key(key.split(" (series ", 1)[0])[0])
    except Exception:
        return False
    return bool(d and d.unit == "ratio")


def _change_text(c, ratio: bool) -> tuple[str, str, str]:
    """(before, after, change) of a change point: a ratio in % and pp, anything else as a number
    and a relative change."""
    if ratio:
        return (f"{c.before * 100:.2f}%", f"{c.after * 100:.2f}%",
                f"{(c.after - c.before) * 100:+.2f} pp {c.direction}")
    return f"{c.before:,.4g}", f"{c.after:,.4g}", f"{c.rel_change:+.1%} {c.direction}"


#: history report order: step time first, then the other step aggregates, counts, shares, the rest
_SEVERITY = ("step.time_us", "step.computing_us", "step.", "kernel.total_calls_per_step", "kernel.calls_per_step",
             "optype.calls_per_step", "comm.calls_per_step", "share.", "")


def severity_key(key: str, cps: list) -> tuple:
    """Sort key of a trended metric for the nightly report: by metric class (:data:`_SEVERITY`:
    step time first), regressions before other changes, then the largest latest change first."""
    name = key.split("{", 1)[0]
    rank = next(i for i, p in enumerate(_SEVERITY) if name == p or (p.endswith(".") and name.startswith(p))
                or p == "")
    last = cps[-1] if cps else None
    worse = 0 if last is not None and last.direction == terms.REGRESSION else 1
    size = abs(last.rel_change) if last is not None and np.isfinite(last.rel_change) else 0.0
    return rank, worse, -size, key


def render_trend(key: str, series: pd.DataFrame, cps: list, note: str | None = None) -> str:
    """Markdown block for one metric: its runs, every change point, and ``note`` (e.g.
    :func:`perfgate.history.changepoints.describe`: why there is none, how many runs are needed).
    Shares and other ratios are shown in % with changes in percentage points (pp)."""
    from perfgate.compare.parts import PART_METRICS
    part = key.split("{", 1)[0] in PART_METRICS
    ratio = _is_ratio(key) and not part   # a part is trended as its own time (us per step)
    lines = [f"### `{key}` ({'us per step: the part it stands for' if part else unit_text(key)})", "",
             f"{len(series)} run(s), {series['recorded_at'].iloc[0] if len(series) else '-'} .. "
             f"{series['recorded_at'].iloc[-1] if len(series) else '-'}", ""]
    if part:
        lines += ["Judged as a part of the step, as a check judges it: the first run's own time per step plus the "
                  "excess beyond what the device's speed explains in each later run (us; perfgate.history.parts), "
                  "so other parts moving, and the device's speed, do not move it. Before / after below are that "
                  "time, not the recorded share or ratio; `perfgate history query` gives those.", ""]
    if not cps:
        lines.append("No change point." if not note else note[0].upper() + note[1:] + ".")
    else:
        head = ("| run | commit | part before (us/step) | part after | change | p | runs before / after "
                "| status |" if part else "| run | commit | before | after | change | p | runs before / after | status |")
        lines += [head, "|---|---|---|---|---|---|---|---|"]
        for c in cps:
            before, after, change = _change_text(c, ratio)
            lines.append(f"| {c.run_id} (#{c.index + 1}) | {_commit(c.commit)} | {before} | {after} | "
                         f"{change} | {c.p_value:.2g} | {c.n_before} / {c.n_after} | "
                         f"{'confirmed' if c.confirmed else 'unconfirmed (too few runs after it)'} |")
        if note:
            lines += ["", note[0].upper() + note[1:] + "."]
    return "\n".join(lines) + "\n"


def plot_series(key: str, series: pd.DataFrame, cps: list) -> bytes:
    """PNG of a metric's series with change points marked (matplotlib, Agg backend).

    Raises:
        UsageError: matplotlib (the ``html`` extra) is not installed."""
    from perfgate.errors import require_extra
    require_extra("html", "perfgate history report (its plots)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3), dpi=100)
    x = np.arange(1, len(series) + 1)
    ratio = _is_ratio(key)
    scale = 100.0 if ratio else 1.0
    ax.plot(x, scale * pd.to_numeric(series["value"], errors="coerce").astype(float).to_numpy(), marker="o", ms=3,
            lw=1)
    # the recorded values, in their unit and caliber (a ratio in %)
    ax.set_ylabel(("%" + unit_text(key).removeprefix("ratio")) if ratio else unit_text(key), fontsize=8)
    for c in cps:
        ax.axvline(c.index + 0.5, color="red" if c.direction == terms.REGRESSION else "green",
                   ls="--" if not c.confirmed else "-", lw=1)
        ax.annotate(_change_text(c, ratio)[2].split(" ")[0] + (" pp" if ratio else ""), (c.index + 0.6, c.after * scale),
                    fontsize=8)
    ax.set_title(key, fontsize=9)
    ax.set_xlabel("run")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def branch_journal(hs, branch: str, key: str) -> pd.DataFrame:
    """:func:`journal_table` of every run of ``branch`` in ``hs`` (a
    :class:`perfgate.history.store.HistoryStore`; read, never written) for the metric ``key``.

    Raises:
        UsageError (exit 2): ``key`` names no number metric of the registry (unknown, or a set
            such as ``kernel.topn``: :func:`perfgate.metrics.registry.journal_metric_problem`);
        PerfgateError (exit 2): the database holds runs but never recorded ``key``
            (:func:`perfgate.history.trend.require_metric`);
        StoreError (exit 5): a damaged value row of ``key``."""
    from perfgate.errors import UsageError
    from perfgate.history.trend import require_metric
    from perfgate.metrics.registry import journal_metric_problem
    why = journal_metric_problem(key)
    if why:
        raise UsageError(f"--metric / history.key_metric: {why}")
    if hs.keys():   # a database without a run yet: the journal is empty, as for an unknown branch
        require_metric(hs, key)
    series = hs.series(key, branch=branch).set_index("run_id")
    table = journal_table(hs.runs(branch=branch), series["value"], key)
    if "view" in series:   # runs of several pipeline stages: the key metric's job-level p50, and its stage
        table["view"] = table["run"].map(series["view"])
    return table


def journal_table(runs: pd.DataFrame, values: pd.Series, key: str) -> pd.DataFrame:
    """Tuning journal: one row per recorded round (kept / reverted / invalid) with the key
    metric, its delta against the previous kept round and against the first kept round.

    Rounds are compared within their series only (``series_key`` when ``runs`` has it: rank
    count, CANN / torch_npu versions, aic_metrics): a round of another series starts its own
    "first" and "previous kept" (values across a split are never compared, as in trends). A
    round of another profiler level than its previous kept round is compared, as ``check``
    judges a capture against a baseline of another level, and :func:`render_journal` says so: a
    Level2 round read "-3.7 % vs previous kept" against a Level1 one looks like a gain when it is
    a change of what the profiler measured. Columns ``series`` and ``level`` say which.

    Args:
        runs: history runs (oldest first) with ``id``, ``note``, ``status``, ``commit`` (and
            ``series_key``, ``profiler_level`` when known).
        values: key-metric value per run id (missing for invalid rounds).
    """
    rows = []
    first: dict = {}   # series -> first kept value
    prev: dict = {}    # series -> previous kept value
    for i, r in enumerate(runs.itertuples(), start=1):
        v = values.get(r.id, np.nan)
        sk, level = getattr(r, "series_key", None), getattr(r, "profiler_level", None)
        series = sk if isinstance(sk, str) else ""
        row = {"round": i, "run": r.id, "change": r.note or "", "status": r.status,
               "commit": _commit(r.commit), "series": series, "level": level if isinstance(level, str) else "",
               key: v, "vs_previous_kept": np.nan, "vs_first": np.nan}
        if r.status != "invalid" and not np.isnan(v):
            if series in prev:
                row["vs_previous_kept"] = v / prev[series] - 1
            if series in first:
                row["vs_first"] = v / first[series] - 1
            if r.status == "kept":
                first.setdefault(series, v)
                prev[series] = v
        rows.append(row)
    return pd.DataFrame(rows, columns=["round", "run", "change", "status", "commit", "series", "level", key,
                                       "vs_previous_kept", "vs_first"])   # the columns even with no run


def unit_and_caliber(key: str) -> tuple[str, str] | None:
    """``(unit, caliber text)`` of the metric of ``key`` from the registry (a `` (series ...)``
    suffix allowed; caliber ``""`` for a metric without one, e.g. a count), or None for a key
    the registry does not know."""
    from perfgate.metrics import registry
    from perfgate.model import parse_metric_key
    try:
        d = registry.get(parse_metric_key(key.split(" (series ", 1)[0])[0])
    except (KeyError, ValueError):
        return None
    return d.unit, terms.CALIBER_LABEL.get(d.caliber) or ""


def unit_text(key: str) -> str:
    """``us, elapsed`` / ``ratio, ΣDuration`` / ``calls``: :func:`unit_and_caliber` as text;
    ``unit not known`` for another key. The trend and report blocks say it, so a number is never
    read without its unit and caliber (elapsed or ΣDuration)."""
    got = unit_and_caliber(key)
    if got is None:
        return "unit not known"
    return f"{got[0]}{', ' + got[1] if got[1] else ''}"


def _with_unit(key: str) -> str:
    """``key`` with its unit and caliber, as the registry gives them: ``step.time_us{view=p50} (us,
    elapsed)``: the journal's value column header, so its numbers say what they measure."""
    return key if unit_and_caliber(key) is None else f"{key} ({unit_text(key)})"


def render_journal(table: pd.DataFrame, key: str) -> str:
    """Tuning journal (from :func:`journal_table`) as a Markdown table: round, change note,
    status, the key metric and its change vs the previous kept run and vs the first run of its
    series (a ``series`` column when the rounds fall into several, a note when kept rounds of
    one series differ in profiler level). The cumulative line covers the kept rounds of the last
    kept round's series."""
    named = table[table["series"] != ""] if "series" in table else table.iloc[0:0]
    multi = named["series"].nunique() > 1 if len(named) else False
    lines = [f"| round | change | status |{' series |' if multi else ''} {_with_unit(key)} | vs previous kept | vs first |",
             "|---|---|---|" + ("---|" if multi else "") + "---|---|---|"]
    staged = False
    for d in table.to_dict("records"):
        v = d[key]
        stage = terms.view_stage(d.get("view"))
        staged = staged or stage is not None
        pct = lambda x: "—" if pd.isna(x) else f"{x:+.1%}"
        change = " ".join(str(d["change"]).split()).replace("|", "\\|")   # one row: no line break, no column break
        lines.append(f"| {d['round']} | {change} | {d['status']} |{' ' + str(d['series']) + ' |' if multi else ''} "
                     f"{'—' if pd.isna(v) else f'{v:,.1f}'}{'' if stage is None else f' (stage {stage})'} | "
                     f"{pct(d['vs_previous_kept'])} | {pct(d['vs_first'])} |")
    kept_rows = table[(table["status"] == "kept") & table[key].notna()]
    if multi and len(kept_rows):
        kept_rows = kept_rows[kept_rows["series"] == kept_rows["series"].iloc[-1]]
    kept = kept_rows[key]
    if len(kept) >= 2:
        lines.append("")
        lines.append(f"Cumulative over kept rounds: {kept.iloc[-1] / kept.iloc[0] - 1:+.1%} "
                     f"({kept.iloc[0]:,.1f} -> {kept.iloc[-1]:,.1f})"
                     + (f", series {kept_rows['series'].iloc[-1]} (rounds of other series are not compared)"
                        if multi else "") + ".")
    if staged:
        lines.append("")
        lines.append("A round of several pipeline stages records no pooled p50: its value is the largest stage p50, "
                     "of the stage in brackets (for step time the slowest stage: a pipeline's step ends when its "
                     "slowest stage ends).")
    levels = [x for x in dict.fromkeys(table.loc[(table["status"] == "kept"), "level"]) if x] if "level" in table else []
    if len(levels) > 1:
        lines.append("")
        lines.append(f"Note: the kept rounds were profiled at different levels ({', '.join(levels)}); they are "
                     f"compared, but each level's own profiling overhead is part of the difference.")
    return "\n".join(lines) + "\n"
