"""Detection and false-alarm rates of the gate's verdicts, measured (issue 7).

Builds many re-captures of one job, with and without an injected regression, and checks
``--runs`` candidate captures against ``--runs`` baseline captures, trial after trial:

* **synthetic** re-captures from :mod:`perfgate.synth.writer` (``--ranks`` ranks, ``--steps`` steps),
  noise model: lognormal per-kernel durations (sigma ``--jitter``), outliers (probability
  ``--outlier-prob`` per kernel call, x uniform(1.5, 3)), device-to-device drift of single
  collectives (each collective on each rank x uniform(1, ``--comm-drift``)). Each capture is
  a different seed; a pool of captures per scenario is written and fingerprinted once, and
  every trial draws its baseline and candidate runs from the pools without replacement.
* **real** re-captures by resampling steps of the real captures in
  ``../shared/fixtures/ascend/msinsight/test/data/pytorch/text/level{1,2}`` (two runs of one
  job, one step each): a re-capture keeps level1's counts and sets and draws its
  ``--steps`` per-step samples of every step metric with replacement from the two real steps;
  injections are applied to the fingerprint (step metrics x 1.1; Comm share + 1 pp; a family's
  calls x 2; a new family). Only two distinct real steps exist, so this part is weak evidence.

Scenarios without a regression (every failing check is a false alarm): ``no_change``,
``family_faster`` (aclnnMatmul_MatMulV3 30 % faster: the other parts' shares grow, issue 18),
``device_drift`` (every kernel and collective x 1.05: a slower device, no part changed).

Injected regressions: ``extra_calls`` (aclnnCast calls x 2), ``comm_share`` (+1 pp
communication share: collectives made longer by the factor that adds 1 pp to the median Comm
share of the no-change pool), ``step_time`` (every kernel, collective and launch gap x 1.1:
+10 % step time on every step), ``new_family`` (one new kernel family, 2 calls per step).

Rules compared, all on the same trials:

* ``default``: the default policy on ``--runs`` vs ``--runs`` merged captures (two-gate
  statistics, Benjamini-Hochberg, ``unsure``);
* ``naive``: a regression when the mean over captures of any gated metric in a gated view
  moved more than 10 % (ratio of means) in its bad direction;
* ``single``: the default policy on one capture vs one capture (tolerance only).

Detection = the check fails (any gated regression); false alarm = the check fails on a
no-change trial. Printed per scenario and, for no-change trials, per metric class.

    python3 benchmarks/bench_verdicts.py [--trials 200] [--runs 5] [--steps 40] [--pool 20]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
#: the shared data folder, resolved as tests/conftest.py does: $PERFGATE_SHARED, else ../shared
SHARED = Path(os.environ.get("PERFGATE_SHARED") or ROOT.parent / "shared")
sys.path.insert(0, str(ROOT))

from perfgate import terms  # noqa: E402
from perfgate.compare import compare_fingerprints  # noqa: E402
from perfgate.gate import load_checked_policy  # noqa: E402
from perfgate.run import fingerprint_path  # noqa: E402
from perfgate.metrics.repeat import merge_fingerprints  # noqa: E402
from perfgate.model import Fingerprint, MetricValue, metric_key  # noqa: E402
from perfgate.synth.writer import DEFAULT_FAMILIES, SynthSpec, write_capture  # noqa: E402

SCENARIOS = ("no_change", "extra_calls", "comm_share", "step_time", "new_family", "family_faster", "device_drift")
#: scenarios where nothing got slower: any failing check is a false alarm (issue 18)
NO_REGRESSION = ("no_change", "family_faster", "device_drift")
REAL_SCENARIOS = ("no_change", "extra_calls", "comm_share", "step_time", "new_family")
MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"
TARGET = {"extra_calls": "counts", "comm_share": "shares", "step_time": "step", "new_family": "counts"}
CLASSES = ("counts", "sets", "shares", "step", "other")
CAST = "aclnnCast_CastAiCore_Cast"
NEW_FAMILY = ("aclnnGeluV2_GeluV2AiCore_GeluV2", "GeluV2", "AI_VECTOR_CORE", 2, 15.0)


def metric_class(name: str) -> str:
    if name.endswith("calls_per_step") or name in ("kernel.invalid_rows", "kernel.unassigned_rows"):
        return "counts"
    if name == "kernel.topn":
        return "sets"
    if name.startswith("share."):
        return "shares"
    if name.startswith(("step.", "device.")):
        return "step"
    return "other"


# ---------------------------------------------------------------- synthetic pools
def synth_spec(args, seed: int, scenario: str, comm_factor: float) -> SynthSpec:
    kw = dict(ranks=args.ranks, steps=args.steps, seed=seed, jitter=args.jitter, outlier_prob=args.outlier_prob,
              comm_drift=args.comm_drift)
    if args.capture_drift > 0:
        # capture-level effect: each rank of each re-capture runs every kernel x lognormal(0, sigma)
        # (a different device allocation per capture): shared by all steps of that capture
        rng = np.random.default_rng(10_000_000 + seed)
        kw["rank_slowdown"] = {r: float(rng.lognormal(0.0, args.capture_drift)) for r in range(args.ranks)}
    if scenario == "extra_calls":
        kw["extra_calls"] = {CAST: 2}
    elif scenario == "comm_share":
        kw["comm_us"] = 1500.0 * comm_factor
    elif scenario == "step_time":  # every task and launch gap 1.1x: +10 % step time on every step
        kw.update(slowdown={f[0]: 1.1 for f in DEFAULT_FAMILIES}, comm_us=1500.0 * 1.1, gap_us=3.0 * 1.1)
    elif scenario == "new_family":
        kw["families"] = DEFAULT_FAMILIES + (NEW_FAMILY,)
    elif scenario == "family_faster":   # one family 30 % faster: nothing else may fail
        kw["slowdown"] = {MATMUL: 1.0 / 1.3}
    elif scenario == "device_drift":    # every kernel and collective x 1.05 (a slower device)
        kw.update(slowdown={f[0]: 1.05 for f in DEFAULT_FAMILIES}, comm_us=1500.0 * 1.05)
    return SynthSpec(**kw)


def _pool_capture(args, policy, work: Path, scenario: str, seed: int, comm_factor: float):
    """Write and fingerprint one re-capture; with ``--pool-cache`` the fingerprint is kept as
    JSON under a name made of every parameter that shapes it (reuse it only with the same
    perfgate code and policy: the cache cannot see code changes)."""
    spec = synth_spec(args, seed, scenario, comm_factor)
    cache = None
    if args.pool_cache:
        key = (f"r{args.ranks}_s{args.steps}_j{args.jitter}_o{args.outlier_prob}_d{args.comm_drift}"
               + (f"_c{args.capture_drift}" if args.capture_drift > 0 else "") +
               f"_f{comm_factor:.10f}_{scenario}_{seed}.json")
        cache = Path(args.pool_cache) / key
        if cache.is_file():
            return Fingerprint.from_dict(json.loads(cache.read_text()))
    path = write_capture(work / f"{scenario}_{seed}", spec)
    fp = fingerprint_path(path, policy, with_trace=False, workers=1)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(fp.to_dict()))
        tmp.replace(cache)
    shutil.rmtree(path, ignore_errors=True)
    return fp


def synth_pools(args, policy, work: Path) -> dict:
    pools = {}
    seed = 1000
    comm_factor = 1.0
    for scenario in args.scenarios:
        n = args.pool * (2 if scenario == "no_change" else 1)
        fps = []
        for _ in range(n):
            seed += 1
            fps.append(_pool_capture(args, policy, work, scenario, seed, comm_factor))
        pools[scenario] = fps
        if scenario == "no_change":
            # the collective length that adds 1 pp to the median Comm share of this pool
            s = float(np.median([fp.metrics["share.category{category=Comm,view=p50}"].value for fp in fps]))
            t = s + 0.01
            comm_factor = (t / (1 - t)) / (s / (1 - s))
            pools["_comm_factor"] = comm_factor
            pools["_comm_share"] = s
        print(f"  pool {scenario}: {n} captures", file=sys.stderr, flush=True)
    return pools


# ---------------------------------------------------------------- real pools
def _with_samples(fp, pick, rng, steps: int):
    metrics = {}
    for k, m in fp.metrics.items():
        if m.samples:
            vals = [pick[k][i] for i in rng.integers(0, len(pick[k]), steps)]
            metrics[k] = replace(m, samples=vals, value=float(np.median(vals)))
        else:
            metrics[k] = m
    return replace(fp, metrics=metrics)


def _inject_real(fp, scenario: str):
    ms = dict(fp.metrics)
    if scenario == "step_time":
        for k, m in ms.items():
            if m.samples and m.name in ("step.time_us", "step.computing_us", "device.time_us"):
                ms[k] = replace(m, samples=[v * 1.1 for v in m.samples], value=m.value * 1.1)
    elif scenario == "comm_share":
        for k, m in ms.items():
            if m.samples and (m.labels.get("category") == "Comm" or m.labels.get("core_type") in
                              ("HCCL", terms.COMM_CORE)):
                ms[k] = replace(m, samples=[v + 0.01 for v in m.samples], value=m.value + 0.01)
    elif scenario == "extra_calls":
        fams = sorted({m.labels["family"] for m in ms.values() if m.name == "kernel.calls_per_step"})
        fam = fams[0]
        for k, m in ms.items():
            if m.name == "kernel.calls_per_step" and m.labels.get("family") == fam:
                ms[k] = replace(m, value=m.value * 2)
    elif scenario == "new_family":
        for view in (terms.VIEW_RANK0, terms.VIEW_P50, terms.VIEW_MAX):
            key = metric_key("kernel.calls_per_step", family="NewFamily", view=view)
            ms[key] = MetricValue(key=key, name="kernel.calls_per_step", labels={"family": "NewFamily", "view": view},
                                  value=2.0, unit="calls")
    return replace(fp, metrics=ms)


def real_pools(args, policy, rng) -> dict | None:
    text = SHARED / "fixtures" / "ascend" / "msinsight" / "test" / "data" / "pytorch" / "text"
    if not (text / "level1").is_dir():
        print(f"  real captures not found at {text}: skipped", file=sys.stderr)
        return None
    l1 = fingerprint_path(text / "level1", policy, workers=1)
    l2 = fingerprint_path(text / "level2", policy, workers=1)
    pick = {k: [float(l1.metrics[k].value), float(l2.metrics[k].value)]
            for k, m in l1.metrics.items() if m.samples and k in l2.metrics}
    pools = {}
    for scenario in [x for x in args.scenarios if x in REAL_SCENARIOS]:
        n = args.pool * (2 if scenario == "no_change" else 1)
        pools[scenario] = [_inject_real(_with_samples(l1, pick, rng, args.steps), scenario) for _ in range(n)]
    return pools


# ---------------------------------------------------------------- rules
def _gated_keys(policy, fp):
    for k, m in fp.metrics.items():
        rule = policy.rule_for(m.name, m.labels)
        view = m.labels.get("view")
        if rule and rule.gated and (view is None or view in policy.gate_views):
            yield k, m, rule


def rule_default(base, cand, policy):
    cmps, _ = compare_fingerprints(merge_fingerprints(base), merge_fingerprints(cand), policy)
    failed = {metric_class(c.name) for c in cmps if c.fails}
    unsure = any(c.gated and c.verdict == terms.UNSURE for c in cmps)
    return failed, unsure


def rule_single(base, cand, policy):
    cmps, _ = compare_fingerprints(base[0], cand[0], policy)
    return {metric_class(c.name) for c in cmps if c.fails}, False


def rule_naive(base, cand, policy):
    failed = set()
    keys = {k: (m, r) for k, m, r in _gated_keys(policy, base[0])}
    keys.update({k: (m, r) for k, m, r in _gated_keys(policy, cand[0]) if k not in keys})
    for k, (m, rule) in keys.items():
        if m.unit == "set":
            continue
        zero = 0.0 if m.name.endswith("calls_per_step") else None

        def mean(fps):
            vals = [float(fp.metrics[k].value) if k in fp.metrics else zero for fp in fps]
            return None if any(v is None for v in vals) else float(np.mean(vals))
        mb, mc = mean(base), mean(cand)
        if mb is None or mc is None:
            continue
        if mb == 0:
            ratio = np.inf if mc > 0 else 1.0
        else:
            ratio = mc / mb
        worse_up = rule.direction in (terms.LOWER_IS_BETTER, terms.EXACT)
        worse_down = rule.direction in (terms.HIGHER_IS_BETTER, terms.EXACT)
        if (worse_up and ratio > 1.10) or (worse_down and ratio < 1 / 1.10):
            failed.add(metric_class(m.name))
    return failed, False


RULES = {"default": rule_default, "naive": rule_naive, "single": rule_single}


def run_trials(pools, args, policy, rng, source: str) -> list[dict]:
    rows = []
    for scenario in [x for x in args.scenarios if x in pools]:
        t0 = time.perf_counter()
        stats = {r: {"fail": 0, "target": 0, "unsure": 0, "classes": {c: 0 for c in CLASSES}} for r in RULES}
        for _ in range(args.trials):
            nc = pools["no_change"]
            if scenario == "no_change":
                idx = rng.choice(len(nc), 2 * args.runs, replace=False)
                base = [nc[i] for i in idx[: args.runs]]
                cand = [nc[i] for i in idx[args.runs:]]
            else:
                base = [nc[i] for i in rng.choice(len(nc), args.runs, replace=False)]
                pool = pools[scenario]
                cand = [pool[i] for i in rng.choice(len(pool), args.runs, replace=False)]
            for name, fn in RULES.items():
                failed, unsure = fn(base, cand, policy)
                s = stats[name]
                s["fail"] += bool(failed)
                s["unsure"] += unsure and not failed
                s["target"] += TARGET.get(scenario) in failed
                for c in failed:
                    s["classes"][c] += 1
        rows.append({"source": source, "scenario": scenario, "trials": args.trials, "stats": stats,
                     "seconds": time.perf_counter() - t0})
        print(f"  {source} {scenario}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


REFERENCE = {"comm_share": ("share.category{category=Comm,view=p50}", "share.category", False),
             "step_time": ("step.time_us{view=p50}", "step.time_us", True)}


def reference_power(pools, args, policy) -> list[str]:
    """What an ideal test could reach on the target metric of the share / step classes: a
    one-sided z-test on the difference of pooled means with the noise's true standard
    deviation known (the most powerful test for a Gaussian shift, Neyman-Pearson), with n =
    runs x steps per-step samples per side, the per-step sd measured on the whole no-change
    pool and the injected shift as measured (median of the scenario pool minus median of the
    no-change pool). Two figures: at false-alarm level 1 % with no tolerance, and the two-gate
    question the default policy asks (one-sided 95 % bound beyond the statistics tolerance).
    A reference for the table, not a bound for non-Gaussian noise."""
    from scipy.stats import norm
    st = getattr(policy, "statistics", None) or {}
    lines = []
    for scenario, (key, name, logs) in REFERENCE.items():
        if scenario not in pools:
            continue
        tr = (lambda v: np.log(np.asarray(v, dtype=float))) if logs else (lambda v: np.asarray(v, dtype=float))
        base = np.concatenate([tr(fp.metrics[key].samples) for fp in pools["no_change"]])
        inj = np.concatenate([tr(fp.metrics[key].samples) for fp in pools[scenario]])
        sd = float(np.std(base, ddof=1))
        delta = float(np.median(inj) - np.median(base))
        n = args.runs * args.steps
        se = sd * np.sqrt(2.0 / n)
        tol = st.get("tolerances", {}).get(name)
        lim = (tol.value / 100.0 if tol.kind == "pp" else tol.value) if tol else 0.0
        p1 = float(norm.cdf(delta / se - norm.ppf(0.99)))
        p2 = float(norm.cdf((delta - lim) / se - norm.ppf(0.95)))
        unit = "log" if logs else "ratio"
        lines.append(f"| {scenario} | `{key}` | {sd:.4f} {unit} | {delta:+.4f} {unit} | {n} | {100 * p1:5.1f}% | "
                     f"{lim:g} | {100 * p2:5.1f}% |")
    if not lines:
        return []
    return ["", "Reference: an ideal test on the pooled mean with the per-step noise sd known (Gaussian "
            "shift, Neyman-Pearson), same runs x steps per side:", "",
            "| scenario | metric | per-step sd | injected shift | samples per side | ideal power at 1 % false alarms, "
            "no tolerance | statistics tolerance | ideal power of the default two-gate question |",
            "|---|---|---|---|---|---|---|---|"] + lines


def _pct(k, n):
    return f"{100.0 * k / n:5.1f}%"


def render(rows, args) -> str:
    out = [f"runs per side: {args.runs} (single: 1 vs 1); ranks: {args.ranks}; steps per capture: {args.steps}; "
           f"trials per row: {args.trials}; noise: lognormal sigma {args.jitter}, outliers p={args.outlier_prob} x U(1.5,3), "
           f"collective drift x U(1,{args.comm_drift})"
           + (f", capture drift x lognormal(0, {args.capture_drift}) per capture and rank" if args.capture_drift else ""), "",
           "| source | scenario | trials | default: fails | default: target class | default: unsure | "
           "naive mean>10%: fails | naive: target | single 1v1: fails |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n, s = r["trials"], r["stats"]
        tgt = lambda name: "—" if r["scenario"] not in TARGET else _pct(s[name]["target"], n)
        out.append(f"| {r['source']} | {r['scenario']} | {n} | {_pct(s['default']['fail'], n)} | {tgt('default')} | "
                   f"{_pct(s['default']['unsure'], n)} | {_pct(s['naive']['fail'], n)} | {tgt('naive')} | "
                   f"{_pct(s['single']['fail'], n)} |")
    out += ["", "False alarms per metric class on trials where nothing got slower (no_change, family_faster, "
            "device_drift; share of trials with a gated regression in that class):", "",
            "| source | scenario | rule | " + " | ".join(CLASSES) + " | any |",
            "|---|---|---|" + "---|" * (len(CLASSES) + 1)]
    for r in rows:
        if r["scenario"] not in NO_REGRESSION:
            continue
        for name in RULES:
            s = r["stats"][name]
            out.append(f"| {r['source']} | {r['scenario']} | {name} | "
                       + " | ".join(_pct(s["classes"][c], r["trials"]) for c in CLASSES)
                       + f" | {_pct(s['fail'], r['trials'])} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pool", type=int, default=20, help="captures per regression scenario (x2 for no-change)")
    ap.add_argument("--jitter", type=float, default=0.05)
    ap.add_argument("--outlier-prob", type=float, default=0.01)
    ap.add_argument("--comm-drift", type=float, default=2.0)
    ap.add_argument("--capture-drift", type=float, default=0.0,
                    help="sigma of a per-capture, per-rank lognormal factor on every kernel (0 = off): steps of "
                         "one capture then share an effect, the case the pooled-steps test does not model")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--policy", default=None)
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--pool-cache", default=None,
                    help="directory keeping the pool fingerprints between runs (same code and policy only)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated injected scenarios to run (no_change always runs)")
    args = ap.parse_args(argv)
    args.scenarios = ["no_change"] + [x for x in args.scenarios.split(",") if x and x != "no_change"]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if args.pool < args.runs:
        ap.error("--pool must be at least --runs")
    policy = load_checked_policy(args.policy)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfgate-bench-") as tmp:
        pools = synth_pools(args, policy, Path(tmp))
        print(f"  comm_share: median Comm share {pools['_comm_share']:.4f}, collectives x "
              f"{pools['_comm_factor']:.4f}", file=sys.stderr)
        rows += run_trials(pools, args, policy, rng, "synthetic")
        reference = reference_power(pools, args, policy)
    if not args.no_real:
        rp = real_pools(args, policy, rng)
        if rp:
            rows += run_trials(rp, args, policy, rng, "real (resampled)")
    text = render(rows, args)
    print(text)
    print("\n".join(reference))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return rows


if __name__ == "__main__":
    main()
