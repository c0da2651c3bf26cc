"""Statistics for repeated captures: the interval of a metric's change decides its verdict.

Used by :func:`perfgate.compare.compare_fingerprints` when at least one side stands for
several captures (runs) of one commit (:func:`perfgate.metrics.repeat.merge_fingerprints`).
A single capture against a single capture is judged by tolerance only.

Samples are per-step values (one per step and capture; for the p50 / max views the median /
max over ranks of that step), never single kernel calls. For every metric that has samples on
both sides and a policy rule:

1. **Enough runs.** Steps of one capture share one device allocation, so the number of
   independent runs bounds what can be concluded: with ``r_b`` baseline and ``r_c`` candidate
   runs even a perfect separation of the runs gives an exact two-sided Mann-Whitney U p of
   ``2 / C(r_b + r_c, r_b)``; when that is above ``alpha`` the verdict is ``unsure`` and says
   how many more runs are needed (:func:`runs_needed`), unless every pairing of a baseline
   run with a candidate run (their step medians) gives the same single-capture verdict: beyond
   the tolerance the direction decides, within it the metric is unchanged, as a check of any one
   pair would say (:func:`_every_run_pair`). A baseline of several runs never makes the gate
   weaker than a baseline of one, and three runs a side can pass.
2. **The interval decides.** The Hodges-Lehmann shift on log times — the median of all pairwise
   ``log cand_j − log base_i``, reported as a ratio − 1 — for a ``rel`` tolerance, on the values
   for ``pp`` / ``abs``, with its distribution-free (Moses) confidence interval (:func:`effect_ci`).
   The whole interval beyond the tolerance: the metric's direction decides regression or
   improvement; inside it: ``unchanged``; straddling it: ``unsure``, with an estimate of the runs
   needed to decide (the half-width shrinks as 1/sqrt(runs)). For a metric with a direction each
   question is one-sided and read from a one-sided ``confidence`` bound (the ends of the
   ``2·confidence − 1`` interval, as in TOST); for ``exact`` metrics from the two-sided
   ``confidence`` interval (:func:`interval_level`). Steps of one capture can move together: the
   intraclass correlation of the step samples within runs gives a Kish design effect
   (:func:`design_effect`) that widens the interval, so a capture-level drift is not mistaken for
   many independent steps. The Mann-Whitney U p (``scipy.stats.mannwhitneyu``, corrected by the
   same design effect, :func:`adjusted_p`) is reported beside it and decides nothing: a p-value
   gate with Benjamini-Hochberg over every gated metric let clear slowdowns pass as "not
   significant" at 5 v 5 runs. Counts and Top-N sets are exact comparisons and stay outside.
   Informational metrics keep the tolerance comparison of the pooled medians unless
   ``statistics.informational`` is true.

The tolerance in this mode is ``statistics.tolerances[metric]`` of the policy when given
(tighter than the single-capture tolerance: repeated runs average the run-to-run spread),
else the metric's rule tolerance. Shares and step ratios are then re-judged through their parts'
own time (:mod:`perfgate.compare.parts`). References: Mann & Whitney (1947); Hodges & Lehmann
(1963) and Hollander & Wolfe for the shift and its interval.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from perfgate import terms
from perfgate.metrics.repeat import metric_runs, runs_of
from perfgate.model import Comparison, Fingerprint
from perfgate.policy import Policy, Tolerance
from perfgate.policy.sections import StatisticsSettings


def _sps():
    """scipy.stats, imported on first use: only repeated-capture statistics need it, and it
    costs ~1 s of import (a single-capture check must not pay it; tests/metrics/test_fast_paths.py)."""
    from scipy import stats
    return stats


# the defaults are written once, in perfgate.policy.sections.StatisticsSettings
DEFAULTS = {k: v for k, v in StatisticsSettings().items() if k != "tolerances"}


def settings(policy: Policy) -> dict:
    """The policy's ``statistics:`` section merged over :data:`DEFAULTS`
    (``tolerances``: {metric name: :class:`Tolerance`})."""
    out = dict(DEFAULTS, tolerances={})
    out.update(getattr(policy, "statistics", None) or {})
    return out


def robust_sigma(values) -> float:
    """Robust standard deviation ``1.4826 × MAD`` (median absolute deviation from the median;
    1.4826 = 1/Φ⁻¹(3/4) makes it estimate σ for normal noise; Rousseeuw & Croux 1993), in the
    unit of ``values``. NaN values are not expected; an empty input gives NaN."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return float("nan")
    return float(1.4826 * np.median(np.abs(v - np.median(v))))


def min_exact_p(n_base: int, n_cand: int) -> float:
    """Smallest two-sided exact Mann-Whitney U p for sample sizes ``n_base``, ``n_cand``
    (all of one side above all of the other): ``2 / C(n_base + n_cand, n_base)``, capped at 1."""
    if n_base < 1 or n_cand < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_base + n_cand, n_base))


def runs_needed(n_base: int, n_cand: int, alpha: float) -> tuple[int, int]:
    """Fewest runs ``(base, cand)``, at least the given ones, adding as few as possible (ties:
    balanced), for which :func:`min_exact_p` ≤ ``alpha``.

    Raises:
        ValueError: ``alpha`` not in (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    for extra in range(0, 200):
        best = None
        for add_b in range(extra + 1):
            b, c = n_base + add_b, n_cand + extra - add_b
            if min_exact_p(b, c) <= alpha:
                cand = (abs(b - c), b, c)
                best = cand if best is None or cand < best else best
        if best:
            return best[1], best[2]
    raise ValueError(f"alpha {alpha} is unreachable")  # pragma: no cover


def _effect_kind(tol: Tolerance, unit: str) -> str:
    return "rel" if tol.kind == "rel" else "diff"


def _pairwise(base, cand, kind: str) -> tuple[np.ndarray, bool]:
    """All ``n_base × n_cand`` pairwise differences ``cand_j − base_i`` (on log values for
    ``rel`` when every value is positive), sorted; the flag says whether they are logs."""
    x = np.asarray(base, dtype=float)
    y = np.asarray(cand, dtype=float)
    logs = kind == "rel" and bool((x > 0).all() and (y > 0).all())
    if logs:
        x, y = np.log(x), np.log(y)
    return np.sort((y[None, :] - x[:, None]).ravel()), logs


def _to_effect(d: float, logs: bool, kind: str, base) -> float:
    if logs:
        return float(np.expm1(d))
    if kind == "rel":
        mb = float(np.median(base))
        return d / abs(mb) if mb else (0.0 if d == 0 else math.copysign(math.inf, d))
    return float(d)


def effect(base, cand, kind: str) -> float:
    """Hodges-Lehmann shift of candidate vs baseline: the median of all pairwise differences,
    on log values for ``rel`` (returned as a fraction, ``exp(shift) − 1``: the typical ratio
    minus 1), in the metric's unit for ``diff``. More efficient than a difference of medians
    (which loses two thirds of the information for flat, uniform-like noise such as drifting
    collectives). Hodges & Lehmann (1963)."""
    d, logs = _pairwise(base, cand, kind)
    return _to_effect(float(np.median(d)), logs, kind, base)


def run_sizes(m) -> list[int]:
    """How many of ``m.samples`` came from each capture (``context["run_sizes"]``, written by
    :func:`perfgate.metrics.repeat.merge_fingerprints`); one group when unknown."""
    sizes = (m.context or {}).get("run_sizes")
    if sizes and sum(int(x) for x in sizes) == len(m.samples) and all(int(x) > 0 for x in sizes):
        return [int(x) for x in sizes]
    return [len(m.samples)]


def design_effect(base, cand, base_sizes, cand_sizes, kind: str) -> tuple[float, float]:
    """Kish design effect of step samples clustered in captures: ``1 + (m̄ − 1)·ICC``, with the
    intraclass correlation from a one-way ANOVA of steps in runs nested in the two sides
    (between-run mean square about each side's own mean, so the baseline/candidate difference
    itself does not count as clustering): ``σ²_b = max(0, (MSB − MSW) / m̄)``,
    ``ICC = σ²_b / (σ²_b + MSW)``, ``m̄`` = mean steps per run. On log values for ``rel`` (as the
    effect). Steps of one capture share a device allocation; when they move together the
    pooled-step test would be overconfident by this factor (Kish 1965, Survey Sampling; for rank
    tests on clustered data see Rosner, Glynn & Lee 2003). Returns ``(deff ≥ 1, ICC)``; (1, 0)
    when fewer than 3 runs in all or no run has 2 steps."""
    groups = []
    for vals, sizes in ((base, base_sizes), (cand, cand_sizes)):
        v = np.asarray(vals, dtype=float)
        if kind == "rel" and (v > 0).all():
            v = np.log(v)
        side = [g for g in np.split(v, np.cumsum(sizes)[:-1]) if len(g)]
        groups.append(side)
    k = sum(len(side) for side in groups)
    n = sum(len(g) for side in groups for g in side)
    if k < 3 or n - k < 1:
        return 1.0, 0.0
    ssb = sum(len(g) * (g.mean() - np.concatenate(side).mean()) ** 2 for side in groups for g in side)
    ssw = sum(((g - g.mean()) ** 2).sum() for side in groups for g in side)
    df_b = k - sum(1 for side in groups if side)
    if df_b < 1:
        return 1.0, 0.0
    msb, msw = ssb / df_b, ssw / (n - k)
    mbar = n / k
    sb2 = max(0.0, (msb - msw) / mbar)
    if sb2 == 0.0 or sb2 + msw == 0.0:
        return 1.0, 0.0
    icc = sb2 / (sb2 + msw)
    return float(1.0 + (mbar - 1.0) * icc), float(icc)


def adjusted_p(p: float, deff: float) -> float:
    """A two-sided p of a rank test on clustered samples, corrected by the design effect:
    its normal score divided by ``√deff`` (the effective sample size is n / deff; Kish 1965, see
    :func:`design_effect`). ``p`` and the result are probabilities in [0, 1]."""
    if deff <= 1.0 or p >= 1.0:
        return p
    z = float(_sps().norm.isf(p / 2.0))
    return float(min(1.0, 2.0 * _sps().norm.sf(z / math.sqrt(deff))))


def effect_ci(base, cand, kind: str, *, confidence=0.95, deff: float = 1.0) -> tuple[float, float]:
    """Distribution-free confidence interval of :func:`effect` (Moses): the order statistics
    ``C`` and ``nm − C + 1`` of the pairwise differences, ``C`` from the normal approximation of
    the Mann-Whitney U null distribution, ``C = floor(nm/2 − z·sqrt(nm(n+m+1)/12))`` (Hollander
    & Wolfe, Nonparametric Statistical Methods, ch. 4). It is the set of shifts the
    Mann-Whitney U test would not reject, so it agrees with the significance gate. ``deff``
    (:func:`design_effect`) widens it for steps clustered in captures (z × √deff). Returns
    ``(low, high)`` in the effect's unit."""
    d, logs = _pairwise(base, cand, kind)
    n, m = len(base), len(cand)
    nm = n * m
    z = float(_sps().norm.ppf(0.5 + confidence / 2.0)) * math.sqrt(max(1.0, deff))
    c = int(math.floor(nm / 2.0 - z * math.sqrt(nm * (n + m + 1) / 12.0)))
    c = min(max(c, 0), nm - 1)
    lo, hi = float(d[c]), float(d[nm - 1 - c])
    return _to_effect(lo, logs, kind, base), _to_effect(hi, logs, kind, base)


def mwu_p(base, cand) -> float:
    """Two-sided Mann-Whitney U p of two 1-D samples of one metric (any unit; scipy.stats.
    mannwhitneyu, ``method="auto"``: exact for small samples without ties). Identical constant
    samples give 1.0."""
    x = np.asarray(base, dtype=float)
    y = np.asarray(cand, dtype=float)
    if np.all(x == x[0]) and np.all(y == y[0]) and x[0] == y[0]:
        return 1.0
    return float(_sps().mannwhitneyu(y, x, alternative="two-sided", method="auto").pvalue)


def _fmt_effect(v: float, kind: str, unit: str) -> str:
    if kind == "rel":
        return f"{v:+.2%}"
    if unit == "ratio":
        return f"{v * 100:+.2f} pp"
    return f"{v:+,.3f} {unit}"


def interval_level(confidence: float, direction: str) -> tuple[float, str]:
    """The two-sided coverage of the interval :func:`_verdict` reads, and its name.

    For a metric with a direction (``lower_is_better`` / ``higher_is_better``) each question
    the verdict asks is one-sided: "is the shift above +tolerance (worse)?", "is it below
    −tolerance (better)?", "is it inside ±tolerance?" (two one-sided tests, TOST). Each is
    answered at level ``confidence`` by one end of the two-sided interval of coverage
    ``2·confidence − 1`` (0.95 → the 90 % interval, whose ends are one-sided 95 % bounds;
    Schuirmann 1987 for the equivalence case). Only one of "worse" and "better" can hold, so
    the error of a regression claim stays ``1 − confidence``. For ``exact`` metrics either
    side is a regression, so the full two-sided ``confidence`` interval is used.

    Returns:
        ``(coverage of the two-sided interval, 0..1; text naming it for reasons)``.
    """
    if direction in (terms.LOWER_IS_BETTER, terms.HIGHER_IS_BETTER):
        return 2.0 * confidence - 1.0, f"one-sided {confidence:.0%} bounds"
    return confidence, f"{confidence:.0%} CI"


def _eligible(c: Comparison, base: Fingerprint, cand: Fingerprint, policy: Policy, rule) -> bool:
    from perfgate.compare.parts import PART_METRICS
    if c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT, terms.UNCHANGED):
        return False
    if c.name in PART_METRICS:   # judged through the part's own time (perfgate.compare.parts), not here
        return False
    if not c.gated and not settings(policy)["informational"]:
        return False
    b, k = base.metrics.get(c.key), cand.metrics.get(c.key)
    return bool(b and k and b.samples and k.samples and rule)


def apply_statistics(comparisons: list, base: Fingerprint, cand: Fingerprint, policy: Policy,
                     rules: dict | None = None) -> list:
    """Re-judge metrics with samples by the interval rule (see module doc) when either side
    stands for more than one capture. Other comparisons are returned unchanged. ``rules``
    ({metric key: :class:`~perfgate.policy.Rule` or None}) are the rules the caller already
    resolved (:func:`perfgate.compare.compare_fingerprints` resolves each once); missing keys
    are resolved here.

    Returns:
        A new list of :class:`Comparison`; re-judged ones carry ``stats`` (``n_base``,
        ``n_cand``, ``runs_base``, ``runs_cand``, ``p`` (Mann-Whitney U, reported only), ``effect``, ``effect_kind``
        (rel / diff), ``ci`` [low, high], ``tolerance`` (text), ``allowance`` (the tolerance in
        the effect's unit), ``runs_needed`` {base, cand}; ``run_pair_effects`` [low, high] when
        judged run pair by run pair).
    """
    st = settings(policy)
    if not st["enabled"] or (runs_of(base) <= 1 and runs_of(cand) <= 1):
        return list(comparisons)
    alpha = float(st["alpha"])
    out = list(comparisons)
    info: dict[int, dict] = {}
    rules = dict(rules or {})
    for i, c in enumerate(out):
        if c.key not in rules:
            rules[c.key] = policy.rule_for(c.name, c.labels)
        rule = rules[c.key]
        if not _eligible(c, base, cand, policy, rule):
            continue
        b, k = base.metrics[c.key], cand.metrics[c.key]
        tol = st["tolerances"].get(c.name, rule.tolerance)
        kind = _effect_kind(tol, c.unit)
        rb, rc = metric_runs(b), metric_runs(k)
        d = {"n_base": len(b.samples), "n_cand": len(k.samples), "runs_base": rb, "runs_cand": rc,
             "effect_kind": kind, "tolerance": tol.describe(c.unit), "allowance": tol.allowance(), "alpha": alpha,
             "effect": effect(b.samples, k.samples, kind)}
        info[i] = d
        if min_exact_p(rb, rc) > alpha:
            nb, nc = runs_needed(rb, rc, alpha)
            d["runs_needed"] = {"base": nb, "cand": nc}
            d["p"] = None
            continue
        deff, icc = design_effect(b.samples, k.samples, run_sizes(b), run_sizes(k), kind)
        d["design_effect"], d["icc"] = deff, icc
        d["p_steps"] = mwu_p(b.samples, k.samples)
        d["p"] = adjusted_p(d["p_steps"], deff)   # reported beside the interval; the interval decides
    for i, d in info.items():
        c = out[i]
        out[i] = _verdict(c, d, base.metrics[c.key], cand.metrics[c.key], rules[c.key], st)
    for i, c in enumerate(out):
        if i not in info and _judged_without_samples(c, base, cand):
            out[i] = replace(c, reason=f"{c.reason}; {NO_SAMPLES_NOTE.format(rb=runs_of(base), rc=runs_of(cand))}")
    return out


NO_SAMPLES_NOTE = ("no per-step samples for this metric, so the interval rule does not apply: judged on the "
                   "medians over {rb} vs {rc} capture(s) by the single-capture tolerance")
_COUNT_UNITS = ("calls", "steps", "rows", "set")


def _judged_without_samples(c: Comparison, base: Fingerprint, cand: Fingerprint) -> bool:
    """A gated, non-count metric judged by tolerance in a repeated-capture check because one
    side has no per-step samples (e.g. ``share.family``, whose per-capture value is a median
    over steps without the steps kept): its reason must say so."""
    if not c.gated or c.unit in _COUNT_UNITS or c.verdict not in (terms.REGRESSION, terms.IMPROVEMENT,
                                                                   terms.UNCHANGED):
        return False
    b, k = base.metrics.get(c.key), cand.metrics.get(c.key)
    return not (b and k and b.samples and k.samples)


def run_medians(m) -> list[float]:
    """The median of each capture's step samples of ``m`` (:func:`run_sizes` splits them)."""
    bounds = np.cumsum([0, *run_sizes(m)])
    x = np.asarray(m.samples, dtype=float)
    return [float(np.median(x[a:z])) for a, z in zip(bounds[:-1], bounds[1:])]


def _every_run_pair(c: Comparison, d: dict, b, k, rule, subject: str, sizes: str,
                               info: str) -> Comparison | None:
    """With too few runs for the exact test: the verdict a single-capture check would give when
    it gives the same one for every pairing of a baseline run with a candidate run (a regression,
    an improvement, or unchanged), else None (unsure).

    Each pairing's effect is that of the two runs' step medians (a ratio − 1 for a ``rel``
    tolerance, a difference else: :func:`effect` of one value each), judged against the rule's
    single-capture tolerance (not the tighter ``statistics.tolerances``, which assume averaged
    runs). Needs the samples' split into runs (``context["run_sizes"]``). When the whole range of
    those effects lies beyond the tolerance, the metric's direction decides; when it lies within
    it, the metric is unchanged: either as any one baseline run against any one candidate run
    would be judged. A baseline of several runs never makes the gate weaker than a baseline of one
    (three baseline runs against one candidate whose step time doubled were "unsure"), nor can
    three runs a side never pass. Straddling the tolerance it stays unsure."""
    single = rule.tolerance   # the single-capture tolerance: what a check of one pair applies
    kind = _effect_kind(single, c.unit)
    mb, mk = run_medians(b), run_medians(k)
    if len(mb) != d["runs_base"] or len(mk) != d["runs_cand"]:
        return None   # the samples' runs are not known: no pairing of runs to judge
    pairs = [effect([x], [y], kind) for x in mb for y in mk]
    if not pairs or not all(math.isfinite(p) for p in pairs):
        return None
    lo, hi = min(pairs), max(pairs)
    verdict = terms.Direction(rule.direction).judge(lo, hi, single.allowance())
    if verdict not in (terms.REGRESSION, terms.IMPROVEMENT, terms.UNCHANGED):
        return None
    d["run_pair_effects"] = [lo, hi]
    span = (f"{_fmt_effect(lo, kind, c.unit)}" if lo == hi else
            f"{_fmt_effect(lo, kind, c.unit)} to {_fmt_effect(hi, kind, c.unit)}")
    tol_text = single.describe(c.unit)
    where = "entirely within" if verdict == terms.UNCHANGED else "entirely beyond"
    reason = (f"{subject}: every baseline run against every candidate run differs by {span} (run step medians), "
              f"{where} the single-capture tolerance {tol_text}: {verdict} whichever runs are compared. Too few "
              f"runs for the Mann-Whitney test (smallest p {min_exact_p(d['runs_base'], d['runs_cand']):.3g} > "
              f"alpha {d['alpha']:g}), so this is the single-capture judgement, run by run; {sizes}{info}")
    return replace(c, verdict=verdict, fails=c.gated and verdict == terms.REGRESSION, reason=reason, stats=d,
                   tolerance=f"{tol_text} (every run pair; too few runs for the interval rule)")


def _verdict(c: Comparison, d: dict, b, k, rule, st: dict) -> Comparison:
    tol = st["tolerances"].get(c.name, rule.tolerance)
    kind, alpha = d["effect_kind"], d["alpha"]
    subject = c.subject_text()
    sizes = (f"{d['runs_base']} vs {d['runs_cand']} run(s), {d['n_base']} vs {d['n_cand']} step sample(s)")
    if d.get("design_effect", 1.0) > 1.05:
        sizes += (f"; steps of one run move together (ICC {d['icc']:.2f}): p and interval widened by the "
                  f"design effect {d['design_effect']:.1f} (effective {d['n_base'] / d['design_effect']:.0f} vs "
                  f"{d['n_cand'] / d['design_effect']:.0f} samples)")
    eff = _fmt_effect(d["effect"], kind, c.unit)
    info = "" if c.gated else "; informational"
    if d.get("runs_needed"):
        nb, nc = d["runs_needed"]["base"], d["runs_needed"]["cand"]
        clear = _every_run_pair(c, d, b, k, rule, subject, sizes, info)
        if clear is not None:
            return clear
        reason = (f"{subject}: unsure: {sizes}; Hodges-Lehmann shift {eff}. With this few runs the smallest "
                  f"p an exact Mann-Whitney U test can give is {min_exact_p(d['runs_base'], d['runs_cand']):.3g} "
                  f"> alpha {alpha:g}, so no difference can be shown or ruled out: {nb} baseline and {nc} "
                  f"candidate runs are needed ({max(0, nb - d['runs_base'])} + {max(0, nc - d['runs_cand'])} "
                  f"more){info}")
        return replace(c, verdict=terms.UNSURE, fails=False, reason=reason, stats=d,
                       tolerance=f"{d['tolerance']} (interval, too few runs for alpha {alpha:g})")
    lim = tol.allowance()   # in the effect's unit: a fraction for rel, a ratio for pp, the unit for abs
    direction = terms.Direction(rule.direction)
    # the interval decides: beyond the tolerance a regression / improvement, inside it unchanged,
    # straddling it unsure. A p-value gate on top (Mann-Whitney with Benjamini-Hochberg over every
    # gated metric of the check) let a clear slowdown pass: Computing +15.6 % at 5 v 5 runs, every
    # run pair 13-19 % apart, was "not significant, q=0.06" in 8 of 20 trials.
    level, ci_name = interval_level(float(st["confidence"]), rule.direction)
    lo, hi = effect_ci(b.samples, k.samples, kind, confidence=level, deff=d.get("design_effect", 1.0))
    d["ci"] = [lo, hi]
    d["ci_level"] = level
    ci_text = (f"{ci_name} [{_fmt_effect(lo, kind, c.unit)}, "
               f"{_fmt_effect(hi, kind, c.unit)}]")
    sig = f"Hodges-Lehmann shift {eff}, {ci_text}" + (f" (Mann-Whitney p={d['p']:.3g})" if d.get("p") is not None else "")
    verdict = direction.judge(lo, hi, lim)
    if verdict in (terms.REGRESSION, terms.IMPROVEMENT):
        why = f"{sig}, entirely beyond the tolerance {d['tolerance']}"
    elif verdict == terms.UNCHANGED:
        why = f"{sig}, entirely within the tolerance {d['tolerance']}"
    else:
        half = (hi - lo) / 2.0
        gap = abs(abs(d["effect"]) - lim)
        runs = max(d["runs_base"], d["runs_cand"])
        need = (int(math.ceil(runs * (half / gap) ** 2)) if gap > 0 else None)
        cap = int(st["max_runs_hint"])
        d["runs_needed"] = {"base": min(need, cap), "cand": min(need, cap)} if need else None
        hint = (f"about {min(need, cap)}{'+' if need > cap else ''} runs per side would decide it"
                if need else "the change sits on the tolerance; more runs cannot decide it")
        why = f"{sig}, straddling the tolerance {d['tolerance']}: {hint}"
    reason = f"{subject}: {why}; {sizes}{info}"
    return replace(c, verdict=verdict, fails=c.gated and verdict == terms.REGRESSION, reason=reason, stats=d,
                   tolerance=f"{d['tolerance']} ({ci_name} of the shift)")
