"""What every report says first: the verdict line, configuration changes, causes, and metrics
grouped with their cross-rank views as columns. Also the console text of ``perfgate check``.

Pure functions of a :class:`~perfgate.model.GateResult`; nothing prints.
"""
from __future__ import annotations

from perfgate import terms
from perfgate.compare.causes import MIN_STEP_DELTA_US

VIEW_ORDER = (terms.VIEW_RANK0, terms.VIEW_P50, terms.VIEW_MAX)
_CONFIG_WORDS = ("narrow policy:", "partial comparison:", "profiler level changed", "export type changed", "aic_metrics changed", "rank count changed",
                 "toolchain changed", "rank ids differ", "CANN version changed", "torch_npu version changed",
                 "kernel table format (export / header) changed", "collection option")


def informational_text(counts: dict) -> str:
    """The informational metrics of ``result.counts()`` in words: their total and how many moved
    beyond their tolerance either way, and those new, gone or not compared, e.g.
    ``"517 (10 worse, 8 better, 4 new; not gated)"``."""
    i = counts["informational"]
    moved = [f"{i.get(str(v), 0)} {w}" for v, w in ((terms.REGRESSION, "worse"), (terms.IMPROVEMENT, "better"),
                                                    (terms.NEW, "new"), (terms.MISSING, "gone"),
                                                    (terms.INCOMPARABLE, "not compared"))
             if i.get(str(v), 0)]   # every kind the JSON counts: the two totals must agree
    return f"{i['total']}" + (f" ({', '.join(moved)}; not gated)" if moved else "")


def gated_tail_text(counts: dict) -> str:
    """The end of the gated-metrics line of ``result.counts()``: ``"339 unchanged, 0 incomparable,
    0 missing"`` and, when some gated metrics are absent from the baseline, ``", 1 new (absent
    from the baseline: not judged)"``, so the parts add up to the gated total."""
    g = counts["gated"]
    new = g.get(str(terms.NEW), 0)
    return (f"{g['unchanged']} unchanged, {g['incomparable']} incomparable, {g['missing']} missing"
            + (f", {new} new (absent from the baseline: not judged)" if new else ""))


def error_where(err: dict | None) -> str:
    """Where an error of ``GateResult.error`` lies: ``"PATH row N byte B"`` (the parts known;
    ``row`` a 1-based data row, header excluded; ``byte_offset`` a byte offset into the file)."""
    err = err or {}
    where = err.get("path") or ""
    if err.get("row") is not None:
        where += f" row {err['row']}"
    if err.get("byte_offset") is not None:
        where += f" byte {err['byte_offset']}"
    return where


#: what every report says of a DAMAGED_BASELINE or STORE_ERROR check, after :func:`store_failure` and the error
DAMAGED_NOTE = ("Nothing was judged (this is not a pass; --no-baseline-ok does not apply) and nothing was "
                "written to baselines or history.")


def store_failure(status) -> str:
    """What the reports say of a baseline store that could not be read (``terms.STORE_FAILED``):
    "the baseline store is damaged" (DAMAGED_BASELINE) or "the baseline store cannot be opened"
    (STORE_ERROR: a history database path that is a directory or lies under a regular file, a
    file SQLite cannot open; never called damaged). Lower case, no full stop."""
    return "the baseline store cannot be opened" if status == terms.STORE_ERROR else "the baseline store is damaged"


def missing_lines(result, limit: int = 4) -> list[str]:
    """Gated metrics the baseline measured and the candidate does not (verdict MISSING, failing):
    named as their own reason for the verdict, since no slowdown explains them. Two lines (what,
    then the first ``limit`` keys); ``[]`` when none."""
    lost = [c for c in result.comparisons if c.gated and c.fails and c.verdict == terms.MISSING]
    if not lost:
        return []
    keys = ", ".join(c.key for c in lost[:limit]) + (f" and {len(lost) - limit} more" if len(lost) > limit else "")
    return [f"MISSING     {len(lost)} gated metric(s) the baseline measured are absent from the candidate "
            f"(a file or column gone, not a slowdown):", f"            {keys}"]


def incomparable_gated(result) -> int:
    """Gated metrics judged ``incomparable`` (a config facet differs)."""
    return sum(1 for c in result.comparisons if c.gated and c.verdict == terms.INCOMPARABLE)


def verdict_line(result) -> str:
    """``PASS``, ``PASS (partial: N gated metrics not comparable)``, ``REGRESSION``, ``UNSURE``
    (partial likewise), ``INCOMPATIBLE_BASELINE (partial: N of M gated metrics (P %) not
    comparable; --allow-partial to judge the rest)`` when too many gated metrics were not
    comparable (:func:`perfgate.app.gate.judge`), or the status of a check that compared nothing."""
    from perfgate.policy.load import significant
    status = str(result.status)
    err = result.error or {}
    if status == terms.INCOMPATIBLE and err.get("incomparable") and err.get("gated"):
        n, of = err["incomparable"], err["gated"]
        return (f"{status} (partial: {n} of {of} gated metrics ({significant(100 * n / of)} %) not comparable; "
                f"--allow-partial to judge the rest)")
    if status in (terms.PASS, terms.UNSURE_STATUS, terms.FAIL):
        n_inc = incomparable_gated(result)
        if n_inc:
            return f"{status} (partial: {n_inc} gated metric{'s' if n_inc != 1 else ''} not comparable)"
    return status


def verdict_detail(result) -> str:
    """What a failing verdict consists of: ``2 causes, 16 failing gated metrics``, or
    ``52 causes (13 failing), ...`` when some listed causes do not fail ("" unless the check failed)."""
    if str(result.status) != terms.FAIL:
        return ""
    failing = sum(1 for c in result.comparisons if c.fails)
    nc = sum(1 for x in result.causes if x.get("fails"))
    n_all = len(result.causes)
    un = sum(1 for k in result.unexplained if _fails(result, k))
    what = []
    if nc:   # the count is of every cause the reports list, the failing ones named
        what.append(f"{n_all} cause{'s' if n_all != 1 else ''}" + (f" ({nc} failing)" if nc != n_all else ""))
    if un:
        what.append(f"{un} unexplained")
    return (" + ".join(what) + ", " if what else "") + f"{failing} failing gated metric{'s' if failing != 1 else ''}"


def _fails(result, key) -> bool:
    return any(c.key == key and c.fails for c in result.comparisons)


def config_changes(result) -> list[str]:
    """Notes about a profiler-level / export / rank / toolchain / collection-option change: stated at the top."""
    return [n for n in result.notes if any(w in n for w in _CONFIG_WORDS)]


def group_views(comparisons) -> list[dict]:
    """Comparisons of one metric in several cross-rank views as one row: ``subject`` (the
    reason's subject without the view tag), ``key`` (the metric key without the view),
    ``name``, ``views`` ({view: Comparison}), ``fails``, ``verdict`` (the worst). Order kept."""
    from perfgate.model import parse_metric_key
    rows: dict = {}
    for c in comparisons:
        try:
            name, labels = parse_metric_key(c.key)
        except Exception:   # a hand-made key: fall back to the comparison's labels
            name, labels = c.name, dict(c.labels)
        labels.pop("view", None)
        k = (name, tuple(sorted(labels.items())))
        if k not in rows:
            subject = c.subject_text()
            view = c.labels.get("view")
            if view:
                subject = subject.replace(f" [{view}]", "").replace(f" [{terms.view_text(view)}]", "")
            key = name + ("{" + ",".join(f"{a}={b}" for a, b in sorted(labels.items())) + "}" if labels else "")
            rows[k] = {"subject": subject, "key": key, "name": c.name, "views": {}, "fails": False,
                       "verdict": c.verdict, "unit": c.unit}
        r = rows[k]
        r["views"][c.labels.get("view")] = c
        r["fails"] = r["fails"] or c.fails
        if c.verdict == terms.REGRESSION:
            r["verdict"] = terms.REGRESSION
    return list(rows.values())


def view_columns(rows) -> list:
    """The views present in ``rows``, rank0 / p50 / max first, then each pipeline stage's p50 / max
    in stage order."""
    seen = {v for r in rows for v in r["views"]}

    def order(v):
        s, b = terms.view_stage(v), terms.base_view(v)
        return (s if s is not None else -1, VIEW_ORDER.index(b) if b in VIEW_ORDER else len(VIEW_ORDER), str(v))
    return [v for v in VIEW_ORDER if v in seen] + sorted((v for v in seen if v not in VIEW_ORDER), key=order)


def short_change(c) -> str:
    """A comparison's change in a few characters: ``47.7% -> 41.3% (-6.5 pp)``, ``10 -> 20``,
    ``8,094 -> 6,902 us (-14.7%)``."""
    if c is None:
        return "—"
    if c.delta is None:
        return str(c.verdict)
    b, v = c.baseline, c.candidate
    if c.unit == "ratio":
        return f"{b * 100:.1f}% -> {v * 100:.1f}% ({c.delta * 100:+.1f} pp)"
    if c.unit in ("calls", "steps", "rows", "layers", "blocks"):
        return f"{b:g} -> {v:g}"
    rel = f" ({c.delta_rel:+.1%})" if c.delta_rel is not None else ""
    return f"{b:,.0f} -> {v:,.0f} {c.unit}{rel}"


def cause_title(x: dict) -> str:
    """A cause's heading: its kind and subject (``kernel family aclnnCast_CastAiCore_Cast``)."""
    return f"{x['kind']} {x['subject']}"


def explains_text(x: dict, limit: int = 4) -> str:
    """The gated metrics a cause explains, views folded: ``share.category{category=MatMul}
    [rank0, p50], step.time_us [rank0, p50] (+3 more)``."""
    from perfgate.model import parse_metric_key
    folded: dict = {}
    for key in x["explains"]:
        name, labels = parse_metric_key(key)
        view = labels.pop("view", None)
        k = name + ("{" + ",".join(f"{a}={b}" for a, b in sorted(labels.items())) + "}" if labels else "")
        folded.setdefault(k, []).append(view)
    items = [f"{k} [{', '.join(terms.view_text(v) for v in vs if v)}]" if any(vs) else k for k, vs in folded.items()]
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" (+{more} more)" if more > 0 else "")


def step_share_text(x: dict) -> str:
    """How much of the step-time change a cause accounts for, each figure with its caliber: the
    cause's ΣDuration change per step against the elapsed step time's change
    (``ΣDuration +258 of elapsed +300 us/step (86%)``; above 100 % it says why it can be, and
    for a cause that moved against the step time, e.g. +53 against −21 us/step, it gives no
    share: a "-249 %" share means nothing), ``elapsed step time unchanged (ΣDuration +258 us/step)``
    when the step did not move, or "elapsed step time not measured" when a side has no step time
    (no step_trace_time.csv or timeline; ``step_time_delta_us`` None). A step-anatomy cause's
    figure carries its own caliber (``step_delta_caliber``: busy union, elapsed). The text names
    both calibers because "step time: +258 us ΣDuration per step (step time unchanged)" reads as a
    contradiction: ΣDuration can grow where streams overlap while the elapsed step does not."""
    d, st = x.get("step_delta_us"), x.get("step_time_delta_us")
    if d is None:
        return "—"
    cal = x.get("step_delta_caliber") or "ΣDuration"   # a step-anatomy part: its own caliber (busy union)
    if st is None:   # no step time on a side (no step_trace_time.csv nor timeline): unknown, not unchanged
        return f"{cal} {d:+,.0f} us/step (elapsed step time not measured: no step_trace_time.csv or timeline)"
    if abs(st) < MIN_STEP_DELTA_US:   # the step time did not move: nothing to apportion
        return f"elapsed step time unchanged ({cal} {d:+,.0f} us/step)"
    if d * st < 0:   # the cause grew while the step got faster (or the reverse): a share would be negative
        return (f"{cal} {d:+,.0f} us/step while the elapsed step time moved {st:+,.0f} us/step: "
                f"opposite directions, no share of it")
    if round(d / st * 100) > 100:   # more than the whole change: other parts moved the other way, or overlap
        return (f"{cal} {d:+,.0f} of elapsed {st:+,.0f} us/step ({d / st:.0%}: more than the step's "
                f"change; other parts moved the other way or it overlaps them)")
    return f"{cal} {d:+,.0f} of elapsed {st:+,.0f} us/step ({d / st:.0%})"


def waterfall_text(result) -> str | None:
    """The step-time change as contributions that add up to it (``detail["waterfall"]``,
    :func:`perfgate.compare.causes.waterfall`), largest first, e.g. ``step time 136,581 -> 159,554
    us/step (+22,973) [rank0] = device-wide +22,960 + exposed communication +10 + ...``; None when
    the check has no waterfall (no step_trace_time.csv on a side) or the step did not move."""
    wf = (result.detail or {}).get("waterfall")
    if not wf or abs(wf.get("step_delta_us") or 0.0) < MIN_STEP_DELTA_US:
        return None
    items = sorted((i for i in wf["items"] if abs(i["us"]) >= MIN_STEP_DELTA_US), key=lambda i: -abs(i["us"]))
    parts = " ".join(f"{'+' if k else ''} {i['part']} {i['us']:+,.0f}".strip() for k, i in enumerate(items[:6]))
    rest = sum(i["us"] for i in items[6:])
    return (f"step time {wf['step_base_us']:,.0f} -> {wf['step_cand_us']:,.0f} us/step ({wf['step_delta_us']:+,.0f}) "
            f"[{terms.view_text(wf['view'])}] = {parts}" + (f" + {len(items) - 6} more {rest:+,.0f}" if len(items) > 6 else "")
            + f" (device scale ×{wf['scale']:.3f})")


def green_text(result) -> str | None:
    """What a pass of this check vouches for, from the bounds it used (``detail["sensitivity"]``):
    the smallest kernel-family excess it would have failed on, the step-time and Computing
    tolerances, and exact counts. None when nothing was judged."""
    sens = (result.detail or {}).get("sensitivity")
    if not sens or str(result.status) not in (terms.PASS, terms.UNSURE_STATUS, terms.FAIL):
        return None
    bits = []
    if sens.get("family_excess_us") is not None:
        bits.append(f"no kernel family costs ≥ {sens['family_excess_us']:,.0f} us/step more than the device's "
                    f"speed explains")
    for name, label in (("step_time", "step time"), ("computing", "Computing")):
        if sens.get(name):
            bits.append(f"{label} within {sens[name]}")
    bits.append("no kernel family called more often per step")
    view = f" [{terms.view_text(sens['view'])}]" if sens.get("view") else ""
    return "A green here means" + view + ": " + "; ".join(bits)


def _clip(text: str, width: int) -> str:
    text = str(text)
    lead = text[: len(text) - len(text.lstrip(" "))]
    text = lead + " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def console_lines(result, *, verbose: bool = False, quiet: bool = False, width: int = 160) -> list[str]:
    """The console summary of ``perfgate check``: the verdict, configuration changes, the causes
    (at most 5, one line each, plus a line of the metrics each explains), unexplained
    symptoms, the two most important notes; about 15 lines. ``verbose`` shows every line in full
    (nothing clipped at ``width``) and adds every cause, unexplained and unsure change, note,
    failed self-check and gated change; ``quiet`` keeps the verdict line only."""
    if verbose:
        width = 10 ** 9   # nothing clipped
    detail = verdict_detail(result)
    out = [f"perfgate: {verdict_line(result)} (exit {result.exit_code})"
           + (f" against baseline {result.baseline_name!r}" if result.baseline_name else "")
           + (f": {detail}" if detail else "")]
    if result.error:
        e = result.error
        where = error_where(e)
        out.append(f"  {where}: {e.get('message')}" if where else f"  {e.get('message')}")
        if e.get("hint"):
            out.append(f"  hint: {e['hint']}")
        if result.status in terms.STORE_FAILED:
            out.append(f"  {store_failure(result.status)}. {DAMAGED_NOTE}")
    if quiet:
        return out
    for n in config_changes(result):
        out.append("  ! " + _clip(n, width))
    if result.comparisons:
        n = result.counts()
        g = n["gated"]
        ref = result.status == terms.INCOMPATIBLE   # nothing failed: nothing was judged
        moved = f"{g[str(terms.REGRESSION)]} worse" if ref else f"{n['gated_regressions']} failing"
        out.append(f"  gated metrics{' (compared for reference, not judged)' if ref else ''}: {g['total']} — "
                   f"{moved}, {g['improvement']} improved, {gated_tail_text(n)}"
                   + (f", {g['unsure']} unsure" if g["unsure"] else "")
                   + f"; informational: {informational_text(n)}")
    causes = list(result.causes)
    for x in causes[: (None if verbose else 5)]:
        icon = "REGRESSION " if x["fails"] else {terms.IMPROVEMENT: "improved   ", "gone": "gone       ",
                                                  "new": "new        ", "renamed": "renamed    "}.get(
                                                      x["verdict"], "worse      ")
        out.append(_clip(f"  {icon} {cause_title(x)}: {x['what']}", width))
        out.append(_clip(f"              step time share: {step_share_text(x)}; explains {len(x['explains'])} gated "
                         f"metric(s): {explains_text(x)}", width))
    if len(causes) > 5 and not verbose:
        out.append(f"  … and {len(causes) - 5} more cause(s) (see the reports, or -v)")
    wf = waterfall_text(result)
    if wf:
        out.append(_clip("  " + wf, width))
    green = green_text(result)
    if green and str(result.status) != terms.FAIL:
        out.append(_clip("  " + green, width))
    by_key = {c.key: c for c in result.comparisons}
    if result.unexplained:
        out.append("  not explained by a cause:")
    for k in list(result.unexplained)[: (None if verbose else 3)]:
        c = by_key.get(k)
        if c is not None:
            tag = "REGRESSION " if c.fails else f"{c.verdict:<11}"
            out.append(_clip(f"  {tag} {c.reason}", width))
    if len(result.unexplained) > 3 and not verbose:
        out.append(f"  … and {len(result.unexplained) - 3} more unexplained change(s)")
    for line in missing_lines(result):
        out.append(_clip("  " + line, width))
    uns = sorted((c for c in result.comparisons if c.gated and c.verdict == terms.UNSURE), key=_unsure_weight)
    if uns and verbose:
        out.append(f"  unsure: {len(uns)} gated metric(s), largest shift first:")
        out.extend(f"  unsure      {c.reason}" for c in uns)
    elif uns:   # the example: the largest shift against its tolerance (a reviewer looks there first)
        out.append(_clip(f"  unsure: {len(uns)} gated metric(s), largest shift first, e.g. {uns[0].reason}", width))
    other = [x for x in result.notes if x not in config_changes(result)]
    for note in (other if verbose else other[:2]):
        out.append("  note: " + (note if verbose else _clip(note, width)))
    if len(other) > 2 and not verbose:
        out.append(f"  ({len(other) - 2} more note(s); -v shows everything)")
    bad = [c for c in result.self_checks if c.status == "fail"]
    for c in bad[: (None if verbose else 3)]:
        out.append(_clip(f"  self-check {c.name} FAILED (rank {c.rank}{'' if c.step is None else f', step {c.step}'}): {c.message}", width))
    if verbose:
        changed = [c for c in result.comparisons if c.gated and c.verdict in (terms.REGRESSION, terms.IMPROVEMENT)]
        out.append("  every gated change:" if changed else "  every gated change: none")
        for c in changed:
            tag = "REGRESSION " if c.fails else f"{c.verdict:<11}"
            out.append(f"  {tag} {c.reason}  [{c.evidence}]")
    return out


def _unsure_weight(c) -> float:
    """Sort key of an unsure comparison, largest first: its Hodges-Lehmann shift in units of its
    tolerance (``stats`` ``effect`` / ``allowance``; 0 when either is unknown)."""
    st = c.stats or {}
    eff, allow = st.get("effect"), st.get("allowance")
    if not isinstance(eff, (int, float)) or not isinstance(allow, (int, float)) or eff != eff:
        return 0.0
    return -abs(eff) / allow if allow > 0 else -abs(eff) * 1e12
