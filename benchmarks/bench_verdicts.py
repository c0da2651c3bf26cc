"""Does the gate's verdict meet the scenario catalogue on re-timed REAL captures?

Ground truth comes from ``../shared/tools/scenarios`` (README.md, CATALOGUE.md there): its
``scenarios.make`` re-times a real Ascend rank folder (one family x1.3, every compute task x1.15,
a family renamed, 20 device tasks lost, ...) keeping every file the gate cross-checks consistent,
and says which outcome the catalogue requires (``expected``). This bench runs the catalogue rows
(``ROWS`` below) on three real rank folders (``SOURCES``: text level1 rank 0, text level2 rank 0,
st/level2 rank 0) and judges each comparison through the library, as ``perfgate check`` would:
``fingerprint_path`` -> ``require_valid`` (fail-closed findings; InvalidCaptureError = exit 3) ->
``gate.judge(base, cand, policy)`` with the default policy.

Settings (``--setting``):

* ``single``: baseline = the source unchanged (``identity``), candidate = the scenario capture,
  one capture each, no noise: one deterministic trial per (source, row).
* ``repeated``: ``--runs`` baseline runs (identity with the scenarios noise model, one seed per
  run) against ``--runs`` candidate runs (the scenario with noise, other seeds), each side merged
  with ``perfgate.metrics.repeat.merge_fingerprints``. A pool of ``--pool`` noisy baseline captures
  per source (seeds 0..pool-1, shared by that source's rows) and of ``--pool`` candidate captures
  per (source, row) (seeds pool..2*pool-1) is written and fingerprinted once; each of the
  ``--trials`` trials draws its runs from the pools without replacement.

What "meets the catalogue" means, per expected outcome (``assess``):

* ``PASS``: status PASS (exit 0). UNSURE is not a PASS (repeated counts PASS / UNSURE /
  REGRESSION apart; a REGRESSION there is a false alarm). ``rename`` also needs the rename
  reported: a cause with verdict ``renamed`` naming the pair, or the candidate's family set equal
  to the baseline's (perfgate's family rules folded the new name into the old family); the row
  says which.
* ``never REGRESSION``: exit code != 1; ``drop_family`` also needs a cause on the family with
  verdict ``gone``.
* ``REGRESSION``: exit 1 and the cause the catalogue names: ``all_factor`` -> at least one
  failing cause and every failing cause of kind ``device`` (no kernel family, communication or
  step-anatomy cause fails); ``compute_factor`` -> first failing cause ``device`` / ``Computing``;
  ``comm_factor`` -> first failing cause of kind ``communication`` (or ``device`` /
  ``communication``); ``family_factor`` -> first failing cause ``kernel family`` / the family;
  ``calls`` -> some failing cause on the family; ``new_family`` -> some failing cause on the new
  family; ``two_opposite`` -> first failing cause on the up family, and the down family never the
  subject of a failing cause nor of one with verdict ``regression``.
* ``exit 3 (invalid capture), never a REGRESSION``: the candidate is refused (InvalidCaptureError).
* ``not defined by the catalogue`` (e.g. a family change that is not material): reported, not
  counted. A scenario the source cannot make (lose_tasks without trace_view.json, a family rank
  that does not resolve) is reported "not applicable".

Then the issue's targets with measured values: single capture 100 % on every defined row;
repeated: no-change false alarms <= 1 %, speed-ups 0 % REGRESSION, compute_factor 1.15 and a
material family x1.3 detected and named >= 99 % with UNSURE <= 5 %, two_opposite up named
>= 99 % and down never.

Run (from the repo root; needs ``../shared`` or ``$PERFGATE_SHARED``)::

    python3 benchmarks/bench_verdicts.py --setting single
    python3 benchmarks/bench_verdicts.py --setting repeated [--runs 5 --trials 20 --pool 10]
    python3 benchmarks/bench_verdicts.py --rows family_factor two_opposite --sources level1_rank0
    python3 benchmarks/bench_verdicts.py --json rows.json --keep /tmp/bench-captures

``--rows`` / ``--sources`` keep the rows / sources whose id contains any of the given substrings
(space- or comma-separated, repeatable; ``level2`` matches level2_rank0 and st_level2_rank0).
``--keep DIR`` writes the captures under DIR and leaves them there (debugging); otherwise they
live in a temp folder, each deleted once fingerprinted. ``--setting`` defaults to single;
``both`` runs single, then repeated.

Time (measured on a 2-CPU machine shared with other work; writing and fingerprinting the
captures dominates, judging is ~30 ms): ``single``, all 31 rows: 10-17 s per text source, 23-26 s
for st/level2 (its re-timing is slower), ~1 min for the three. ``repeated`` with the default pools
(5 v 5, 20 trials, pools of 10: ~1050 captures): 14 min wall (10 min CPU), of which
st/level2 7 min; ``--trials 3 --pool 6``: 8 min.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
#: the shared data folder, resolved as tests/conftest.py does: $PERFGATE_SHARED (set and not empty),
#: else the repository's sibling ../shared
SHARED = Path(os.environ.get("PERFGATE_SHARED") or ROOT.parent / "shared")
SCENARIO_TOOL = SHARED / "tools" / "scenarios"
MSINSIGHT = SHARED / "fixtures" / "ascend" / "msinsight"
sys.path.insert(0, str(ROOT))

from perfgate.app import gate  # noqa: E402
from perfgate.errors import InvalidCaptureError  # noqa: E402
from perfgate.metrics.fingerprint import fail_closed_of, require_valid  # noqa: E402
from perfgate.metrics.repeat import merge_fingerprints  # noqa: E402
from perfgate.model import parse_metric_key  # noqa: E402
from perfgate.app.run import fingerprint_path  # noqa: E402

#: source id -> real rank folder (read in place, never copied into the repo)
SOURCES = {
    "level1_rank0": MSINSIGHT / "test/data/pytorch/text/level1/rank0_ascend_pt",
    "level2_rank0": MSINSIGHT / "test/data/pytorch/text/level2/rank0_ascend_pt",
    "st_level2_rank0": MSINSIGHT / "test/st/level2/rank_0_ascend_pt",   # no trace_view.json
}

#: the catalogue rows: (row id, scenario, parameters for scenarios.make). Extend here.
ROWS = [
    ("identity", "identity", {}),
    ("all_factor 0.6", "all_factor", {"factor": 0.6}),
    ("all_factor 0.95", "all_factor", {"factor": 0.95}),
    ("all_factor 1.05", "all_factor", {"factor": 1.05}),
    ("all_factor 1.2", "all_factor", {"factor": 1.2}),
    ("all_factor 1.5", "all_factor", {"factor": 1.5}),
    ("compute_factor 0.7", "compute_factor", {"factor": 0.7}),
    ("compute_factor 1.15", "compute_factor", {"factor": 1.15}),
    ("compute_factor 1.3", "compute_factor", {"factor": 1.3}),
    ("comm_factor 0.7", "comm_factor", {"factor": 0.7}),
    ("comm_factor 1.5", "comm_factor", {"factor": 1.5}),
    ("family_factor largest x1.3", "family_factor", {"family": "auto_largest_compute", "factor": 1.3}),
    ("family_factor largest x0.7", "family_factor", {"family": "auto_largest_compute", "factor": 0.7}),
    ("family_factor second x1.5", "family_factor", {"family": "auto_second_compute", "factor": 1.5}),
    ("family_factor third x2", "family_factor", {"family": "auto_third_compute", "factor": 2.0}),
    ("family_factor share3 x1.3", "family_factor", {"family": "auto_share3_compute", "factor": 1.3}),
    ("calls mid x2", "calls", {"family": "auto_mid_compute", "times": 2}),
    ("calls largest x2", "calls", {"family": "auto_largest_compute", "times": 2}),
    ("new_family mid (default)", "new_family", {}),
    ("new_family largest", "new_family", {"family": "auto_largest_compute"}),
    ("drop_family mid (default)", "drop_family", {}),
    ("drop_family largest", "drop_family", {"family": "auto_largest_compute"}),
    ("two_opposite 1.25/0.75 (default)", "two_opposite", {}),
    ("two_opposite 1.3/0.7", "two_opposite", {"k1": 1.3, "k2": 0.7}),
    ("rename plain", "rename", {"kind": "plain"}),
    ("rename inductor_hash", "rename", {"kind": "inductor_hash"}),
    ("rename hex64", "rename", {"kind": "hex64"}),
    ("rename triton_config", "rename", {"kind": "triton_config"}),
    ("lose_tasks head", "lose_tasks", {"where": "head"}),
    ("lose_tasks middle", "lose_tasks", {"where": "middle"}),
    ("lose_tasks tail", "lose_tasks", {"where": "tail"}),
]

PASS, NEVER, REGRESSION = "PASS", "never REGRESSION", "REGRESSION"
INVALID = "exit 3 (invalid capture), never a REGRESSION"
UNDEFINED = "not defined by the catalogue"
NOT_APPLICABLE = "not applicable"
STATUSES = ("PASS", "UNSURE", "REGRESSION", "INVALID_CAPTURE", "other")


def load_scenarios():
    """The ground-truth tool (never part of perfgate), imported from the shared folder."""
    if not (SCENARIO_TOOL / "scenarios.py").is_file():
        raise SystemExit(f"bench_verdicts: scenarios tool not found at {SCENARIO_TOOL} "
                         f"(set PERFGATE_SHARED to the folder holding tools/ and fixtures/)")
    if str(SCENARIO_TOOL) not in sys.path:
        sys.path.insert(0, str(SCENARIO_TOOL))
    import scenarios  # noqa: PLC0415
    return scenarios


def _s(x) -> str:
    return "" if x is None else str(getattr(x, "value", x))


def _same(a, b) -> bool:
    """Family names equal, up to the characters a metric key replaces (``,={}`` -> ``_``)."""
    if a is None or b is None:
        return False
    clean = str.maketrans({c: "_" for c in ",={}"})
    return str(a).translate(clean) == str(b).translate(clean)


def families_of(fp) -> set:
    """The kernel families a fingerprint has calls per step for (any view)."""
    out = set()
    for key in fp.metrics:
        name, labels = parse_metric_key(key)
        if name == "kernel.calls_per_step" and "family" in labels:
            out.add(labels["family"])
    return out


# ---------------------------------------------------------------- one comparison

def fingerprint_checked(capture: Path, policy):
    """``(fingerprint, None)``, or ``(fingerprint or None, error dict)`` when the capture is refused
    (InvalidCaptureError, exit 3) as the command line would."""
    try:
        fp = fingerprint_path(capture, policy, workers=1)
    except InvalidCaptureError as e:
        return None, {"exit_code": e.exit_code, "message": str(e)}
    try:
        require_valid(fp, fail_closed=fail_closed_of(policy), path=str(capture))
    except InvalidCaptureError as e:
        return fp, {"exit_code": e.exit_code, "message": str(e)}
    return fp, None


def cause_brief(c: dict) -> dict:
    out = {k: _s(c.get(k)) if k in ("kind", "subject", "verdict", "what") else c.get(k)
           for k in ("kind", "subject", "verdict", "fails", "what")}
    if c.get("renamed_from"):
        out["renamed_from"] = _s(c["renamed_from"])
    return out


def outcome_of(result=None, invalid: dict | None = None, base_fp=None, cand_fp=None) -> dict:
    """What the gate said, reduced to what ``assess`` needs."""
    if invalid is not None:
        return {"status": "INVALID_CAPTURE", "exit_code": invalid["exit_code"], "causes": [],
                "error": invalid["message"][:300]}
    out = {"status": _s(result.status), "exit_code": result.exit_code,
           "causes": [cause_brief(c) for c in result.causes],
           "unexplained": [_s(k) for k in result.unexplained]}
    if base_fp is not None and cand_fp is not None:
        out["same_family_set"] = families_of(base_fp) == families_of(cand_fp)
    return out


def first_failing(out: dict) -> dict | None:
    return next((c for c in out["causes"] if c["fails"]), None)


def describe(c: dict | None, out: dict | None = None) -> str:
    """One cause in a few words; with ``out``, no failing cause names the unexplained failing metrics."""
    if c is None:
        left = (out or {}).get("unexplained") or []
        return "no failing cause" + (f" (unexplained: {', '.join(left[:3])}{' ...' if len(left) > 3 else ''})"
                                     if left and (out or {}).get("exit_code") == 1 else "")
    return f"{c['kind']} '{c['subject']}' ({c['verdict']})"


def _first_note(out: dict) -> str:
    """The first failing cause, for an outcome whose exit code is 1 (else empty)."""
    return f"first failing: {describe(first_failing(out), out)}" if out["exit_code"] == 1 else ""


def _join(*parts) -> str:
    return "; ".join(p for p in parts if p)


def assess(scenario: str, expected: dict, params: dict, families: list, out: dict) -> dict:
    """Does one gate outcome meet the catalogue? ``{"meets": bool | None, "why": str, ...}``;
    ``meets`` None when the catalogue does not define the case; ``why`` says what the gate named
    (the status and exit code are in ``out``). Extra flags for the targets: ``named`` (REGRESSION
    rows: exit 1 and the required cause named), ``down_named`` (two_opposite: the down family
    named as a regression), ``rename_reported`` (rename: how)."""
    want = expected.get("outcome")
    code, status, causes = out["exit_code"], out["status"], out["causes"]
    first = first_failing(out)
    failing = [c for c in causes if c["fails"]]
    if want == UNDEFINED:
        return {"meets": None, "why": expected.get("why", UNDEFINED)}
    if want == PASS and scenario != "rename":
        return {"meets": status == "PASS", "why": _first_note(out)}
    if want == PASS:  # rename: PASS and reported as renamed (or folded into the old family)
        old, new = params.get("family"), families[-1] if families else None
        named = [c for c in causes if c["verdict"] == "renamed" and _same(c.get("renamed_from"), old)
                 and (_same(c["subject"], new) or c["subject"] != old)]
        how = ("renamed cause" if named else "family set unchanged (folded)" if out.get("same_family_set")
               else "neither renamed nor folded")
        return {"meets": status == "PASS" and how != "neither renamed nor folded",
                "why": _join(how, _first_note(out)), "rename_reported": how}
    if want == NEVER:
        ok, why = code != 1, _first_note(out)
        if scenario == "drop_family":
            gone = any(_same(c["subject"], params["family"]) and c["verdict"] == "gone" for c in causes)
            ok, why = ok and gone, _join("reported as gone" if gone else "not reported as gone", why)
        return {"meets": ok, "why": why}
    if want == INVALID:
        return {"meets": code == 3, "why": _first_note(out)}
    if want != REGRESSION:
        return {"meets": None, "why": f"unknown expected outcome {want!r}"}
    if scenario == "all_factor":
        named = bool(failing) and all(c["kind"] == "device" for c in failing)
        why = f"failing causes: {', '.join(describe(c) for c in failing) or describe(None, out)}"
    elif scenario in ("compute_factor", "comm_factor", "family_factor"):
        if scenario == "compute_factor":
            named = first is not None and first["kind"] == "device" and first["subject"] == "Computing"
        elif scenario == "comm_factor":
            named = first is not None and (first["kind"] == "communication" or
                                           (first["kind"] == "device" and first["subject"] == "communication"))
        else:
            named = first is not None and first["kind"] == "kernel family" and _same(first["subject"], params["family"])
        why = f"first failing: {describe(first, out)}"
    elif scenario in ("calls", "new_family"):
        fam = params["family"] if scenario == "calls" else params["new"]
        named = any(_same(c["subject"], fam) for c in failing)
        why = f"failing cause on {fam}" if named else f"no failing cause on {fam}; first failing: {describe(first, out)}"
    elif scenario == "two_opposite":
        named = first is not None and _same(first["subject"], params["up"])
        down = any(_same(c["subject"], params["down"]) and (c["fails"] or c["verdict"] == "regression")
                   for c in causes)
        return {"meets": code == 1 and named and not down, "named": code == 1 and named, "down_named": down,
                "why": _join(f"first failing: {describe(first, out)}", "DOWN named as a regression" if down else "")}
    else:
        return {"meets": None, "why": f"no rule for a REGRESSION of {scenario}"}
    return {"meets": code == 1 and named, "named": code == 1 and named, "why": why}


# ---------------------------------------------------------------- captures

class Workspace:
    """Where captures are written: a temp folder removed at the end, or ``--keep DIR``."""

    def __init__(self, keep: str | None):
        self.keep = Path(keep) if keep else None
        if self.keep:
            self.keep.mkdir(parents=True, exist_ok=True)
        self.root = self.keep or Path(tempfile.mkdtemp(prefix="bench-verdicts-"))

    def dir(self, *parts) -> Path:
        return self.root.joinpath(*[p.replace("/", "_").replace(" ", "_") for p in parts])

    def done(self, capture: Path):
        if not self.keep:
            shutil.rmtree(capture, ignore_errors=True)

    def close(self):
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def make_capture(sc, src: Path, where: Path, scenario: str, params: dict, seed=0, noise=False):
    """``(summary, capture folder)``, or ``(None, reason)`` when the source cannot make it."""
    if where.exists():
        shutil.rmtree(where)
    try:
        return sc.make(src, where, scenario, seed=seed, noise=noise, params=dict(params)), where
    except ValueError as e:
        shutil.rmtree(where, ignore_errors=True)
        return None, str(e)


def _row_record(setting, source, row_id, scenario, params, summary=None, reason=None) -> dict:
    rec = {"setting": setting, "source": source, "row": row_id, "scenario": scenario, "params": dict(params)}
    if summary is None:
        rec.update(expected={"outcome": NOT_APPLICABLE, "why": reason}, resolved={}, meets=None,
                   applicable=False, defined=False)
    else:
        exp = summary["expected"]
        rec.update(expected=exp, resolved=summary["params"], families=summary["families"], applicable=True,
                   defined=exp["outcome"] != UNDEFINED)
    return rec


# ---------------------------------------------------------------- settings

def run_single(sc, policy, sources, rows, ws: Workspace, log) -> list:
    out = []
    for source, src in sources.items():
        t0 = time.perf_counter()
        base_dir = ws.dir("single", source, "baseline")
        summary, base_dir = make_capture(sc, src, base_dir, "identity", {})
        base_fp, bad = fingerprint_checked(base_dir, policy)
        if bad:
            raise SystemExit(f"bench_verdicts: the unchanged {source} is refused: {bad['message']}")
        for row_id, scenario, params in rows:
            summary, cap = make_capture(sc, src, ws.dir("single", source, row_id), scenario, params)
            rec = _row_record("single", source, row_id, scenario, params, summary, cap)
            if summary is not None:
                cand_fp, bad = fingerprint_checked(cap, policy)
                if bad:
                    res = outcome_of(invalid=bad)
                else:
                    res = outcome_of(gate.judge(base_fp, cand_fp, policy, baseline_name="bench"),
                                     base_fp=base_fp, cand_fp=cand_fp)
                ws.done(cap)
                verdict = assess(scenario, summary["expected"], summary["params"], summary["families"], res)
                ff = first_failing(res)
                rec.update(trials=1, status=res["status"], exit_code=res["exit_code"], causes=res["causes"],
                           first_failing=ff, meets=verdict["meets"], why=verdict["why"],
                           **{k: v for k, v in verdict.items() if k not in ("meets", "why")})
                if "error" in res:
                    rec["error"] = res["error"]
            out.append(rec)
        ws.done(base_dir)
        log(f"single {source}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s")
    return out


def _pool(sc, policy, ws, src, where: Path, scenario, params, seeds) -> tuple[list, list, str | None]:
    """Write and fingerprint one noisy capture per seed: ``([(fp, invalid)], [summaries], reason)``."""
    fps, sums = [], []
    for seed in seeds:
        summary, cap = make_capture(sc, src, where / f"seed{seed}", scenario, params, seed=seed, noise=True)
        if summary is None:
            return [], [], cap
        fps.append(fingerprint_checked(cap, policy))
        sums.append(summary)
        ws.done(cap)
    return fps, sums, None


def run_repeated(sc, policy, sources, rows, ws: Workspace, args, log) -> list:
    out = []
    runs, pool, trials = args.runs, args.pool, args.trials
    if pool < runs:
        raise SystemExit(f"bench_verdicts: --pool {pool} < --runs {runs}: runs are drawn without replacement")
    base_seeds, cand_seeds = range(pool), range(pool, 2 * pool)
    for source, src in sources.items():
        t0 = time.perf_counter()
        base_pool, _, reason = _pool(sc, policy, ws, src, ws.dir("repeated", source, "baseline"), "identity", {},
                                     base_seeds)
        refused = [bad for _, bad in base_pool if bad]
        if reason or refused:
            raise SystemExit(f"bench_verdicts: a noisy re-run of the unchanged {source} is refused: "
                             f"{reason or refused[0]['message']}")
        for row_id, scenario, params in rows:
            # the catalogue's outcome of the change itself, without the noise of one run
            truth, why = make_capture(sc, src, ws.dir("repeated", source, row_id, "truth"), scenario, params)
            rec = _row_record("repeated", source, row_id, scenario, params, truth, why)
            if truth is not None:
                ws.done(why)
                cand_pool, sums, reason = _pool(sc, policy, ws, src, ws.dir("repeated", source, row_id), scenario,
                                                params, cand_seeds)
                if reason:
                    rec.update(_row_record("repeated", source, row_id, scenario, params, None, reason))
                    out.append(rec)
                    continue
                rec.update(_repeat_trials(truth, base_pool, cand_pool, policy, runs, trials, source, row_id))
                drift = sum(1 for s in sums if s["expected"]["outcome"] != truth["expected"]["outcome"])
                if drift:
                    rec["note"] = (f"{drift} of {len(sums)} noisy candidates have another expected outcome "
                                   f"(materiality on noisy rows); judged against the noise-free one")
            out.append(rec)
            log(f"repeated {source} / {row_id}: " + (f"meets {_pct(rec['meets'])}" if rec["applicable"]
                                                     else NOT_APPLICABLE))
        log(f"repeated {source}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s")
    return out


def _repeat_trials(truth, base_pool, cand_pool, policy, runs, trials, source, row_id) -> dict:
    rng = np.random.default_rng(zlib.crc32(f"{source}|{row_id}".encode()))
    counts = {s: 0 for s in STATUSES}
    meets = named = down_named = 0
    examples = []
    for _ in range(trials):
        b = [base_pool[i] for i in rng.choice(len(base_pool), runs, replace=False)]
        c = [cand_pool[i] for i in rng.choice(len(cand_pool), runs, replace=False)]
        bad = next((x for _, x in c if x), None)
        if bad:
            res = outcome_of(invalid=bad)
        else:
            base_fp, cand_fp = merge_fingerprints([fp for fp, _ in b]), merge_fingerprints([fp for fp, _ in c])
            res = outcome_of(gate.judge(base_fp, cand_fp, policy, baseline_name="bench"),
                             base_fp=base_fp, cand_fp=cand_fp)
        v = assess(truth["scenario"], truth["expected"], truth["params"], truth["families"], res)
        counts[res["status"] if res["status"] in counts else "other"] += 1
        meets += bool(v["meets"])
        named += bool(v.get("named"))
        down_named += bool(v.get("down_named"))
        if v["meets"] is False and len(examples) < 3:
            examples.append({"status": res["status"], "first_failing": first_failing(res), "why": v["why"]})
    defined = truth["expected"]["outcome"] != UNDEFINED
    return {"trials": trials, "runs": runs, "counts": counts,
            "rates": {s: counts[s] / trials for s in STATUSES},
            "meets": (meets / trials) if defined else None, "named_rate": named / trials,
            "down_named_rate": down_named / trials, "misses": examples}


# ---------------------------------------------------------------- printing

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _cell_single(r: dict) -> str:
    if not r["applicable"]:
        return "n/a"
    if r["meets"] is None:
        return f"not defined ({r['status']})"
    if r["meets"]:
        extra = f", {r['rename_reported']}" if r.get("rename_reported") and r["rename_reported"] != "renamed cause" else ""
        return "yes" + extra
    return f"NO: {r['status']} (exit {r['exit_code']})" + (f"; {r['why']}" if r["why"] else "")


def print_single(rows: list, sources: list, p=print):
    p("\n## single: one capture v one capture (source unchanged v scenario, no noise)\n")
    p("| row | expected | " + " | ".join(sources) + " |")
    p("|---|---|" + "---|" * len(sources))
    by = {(r["source"], r["row"]): r for r in rows}
    for row_id in dict.fromkeys(r["row"] for r in rows):
        outs = {by[(s, row_id)]["expected"]["outcome"] for s in sources
                if (s, row_id) in by and by[(s, row_id)]["applicable"]}
        exp = " / ".join(sorted(outs)) or NOT_APPLICABLE
        p(f"| {row_id} | {exp} | " + " | ".join(_cell_single(by[(s, row_id)]) if (s, row_id) in by else ""
                                                for s in sources) + " |")
    na = [r for r in rows if not r["applicable"]]
    for r in na:
        p(f"- n/a {r['source']} {r['row']}: {r['expected']['why']}")


def print_repeated(rows: list, args, p=print):
    p(f"\n## repeated: {args.runs} v {args.runs} runs (noise), {args.trials} trials, pools of {args.pool} per side\n")
    p("| source | row | expected | meets | PASS | UNSURE | REGRESSION | other |")
    p("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["applicable"]:
            p(f"| {r['source']} | {r['row']} | {NOT_APPLICABLE} | - | - | - | - | - |")
            continue
        rt = r["rates"]
        other = rt["INVALID_CAPTURE"] + rt["other"]
        p(f"| {r['source']} | {r['row']} | {r['expected']['outcome']} | {_pct(r['meets'])} | {_pct(rt['PASS'])} | "
          f"{_pct(rt['UNSURE'])} | {_pct(rt['REGRESSION'])} | {_pct(other) if other else '-'} |")
    for r in rows:
        if r.get("note"):
            p(f"- note {r['source']} / {r['row']}: {r['note']}")
        for m in r.get("misses", ())[:1]:
            p(f"- e.g. miss {r['source']} / {r['row']}: {m['status']}" + (f"; {m['why']}" if m["why"] else ""))


def _is_speedup(r) -> bool:
    return float(r["params"].get("factor", 1.0)) < 1.0


def targets(rows: list) -> list:
    """``[(target, measured, met)]`` for the settings present in ``rows``."""
    out = []
    single = [r for r in rows if r["setting"] == "single" and r["applicable"] and r["meets"] is not None]
    if single:
        ok = [r for r in single if r["meets"]]
        miss = ", ".join(f"{r['source']}/{r['row']}" for r in single if not r["meets"])
        out.append(("single capture: 100 % of defined rows meet the catalogue",
                    f"{len(ok)}/{len(single)} ({100 * len(ok) / len(single):.0f} %)" + (f"; missed: {miss}" if miss else ""),
                    len(ok) == len(single)))
    rep = [r for r in rows if r["setting"] == "repeated" and r["applicable"]]
    if not rep:
        return out

    def pooled(sel, key):
        n = sum(r["trials"] for r in sel)
        return (sum(r["counts"][key] for r in sel) / n) if n else None

    def each(sel, fn):
        return "; ".join(f"{r['source']}/{r['row']} {fn(r)}" for r in sel)

    same = [r for r in rep if r["scenario"] == "identity"]
    if same:
        fa = pooled(same, "REGRESSION")
        out.append(("repeated: no-change false alarms <= 1 %",
                    f"REGRESSION {_pct1(fa)} (" + each(same, lambda r: f"REGRESSION {_pct1(r['rates']['REGRESSION'])}, "
                                                         f"PASS {_pct1(r['rates']['PASS'])}, "
                                                         f"UNSURE {_pct1(r['rates']['UNSURE'])}") + ")",
                    fa <= 0.01))
    fast = [r for r in rep if _is_speedup(r)]
    if fast:
        fa = pooled(fast, "REGRESSION")
        worst = max(fast, key=lambda r: r["rates"]["REGRESSION"])
        out.append(("repeated: speed-ups 0 % REGRESSION",
                    f"{_pct1(fa)} over {len(fast)} rows (worst {worst['source']}/{worst['row']} "
                    f"{_pct1(worst['rates']['REGRESSION'])})", fa == 0))
    det = [r for r in rep if r["expected"]["outcome"] == REGRESSION and (
        (r["scenario"] == "compute_factor" and float(r["params"].get("factor", 0)) == 1.15)
        or (r["scenario"] == "family_factor" and float(r["params"].get("factor", 0)) == 1.3))]
    if det:
        ok = all(r["named_rate"] >= 0.99 and r["rates"]["UNSURE"] <= 0.05 for r in det)
        out.append(("repeated: compute_factor 1.15 and material family x1.3 named >= 99 %, UNSURE <= 5 %",
                    each(det, lambda r: f"named {_pct1(r['named_rate'])} UNSURE {_pct1(r['rates']['UNSURE'])}"), ok))
    opp = [r for r in rep if r["scenario"] == "two_opposite" and r["expected"]["outcome"] == REGRESSION]
    if opp:
        ok = all(r["named_rate"] >= 0.99 and r["down_named_rate"] == 0 for r in opp)
        out.append(("repeated: two_opposite up named >= 99 %, down never",
                    each(opp, lambda r: f"up {_pct1(r['named_rate'])} down {_pct1(r['down_named_rate'])}"), ok))
    return out


def _pct1(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


# ---------------------------------------------------------------- main

def _pick(table, wanted, key):
    if not wanted:
        return table
    wanted = [w for arg in wanted for w in arg.split(",") if w]
    return [x for x in table if any(w in key(x) for w in wanted)]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", choices=("single", "repeated", "both"), default="single",
                    help="single (default): one capture v one, no noise; repeated: --runs v --runs noisy runs; both")
    ap.add_argument("--rows", action="append", nargs="+", default=[], metavar="SUBSTRING",
                    help="keep the rows whose id contains any of these (repeatable; also comma-separated)")
    ap.add_argument("--sources", action="append", nargs="+", default=[], metavar="SUBSTRING",
                    help=f"keep the sources whose id contains any of these: {', '.join(SOURCES)}")
    ap.add_argument("--runs", type=int, default=5, help="repeated: runs per side (default 5)")
    ap.add_argument("--trials", type=int, default=20, help="repeated: trials per (source, row) (default 20)")
    ap.add_argument("--pool", type=int, default=10, help="repeated: captures per side to draw runs from (default 10)")
    ap.add_argument("--json", metavar="FILE", help="write every row (and the targets) as JSON")
    ap.add_argument("--keep", metavar="DIR", help="write the captures under DIR and keep them")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    args.rows = [w for group in args.rows for w in group]
    args.sources = [w for group in args.sources for w in group]
    return args


def main(argv=None) -> list:
    """Run the bench; return the row dicts (one per setting x source x row)."""
    args = parse_args(argv)
    sc = load_scenarios()
    sources = dict(_pick(list(SOURCES.items()), args.sources, lambda kv: kv[0]))
    rows = _pick(ROWS, args.rows, lambda r: r[0])
    if not sources or not rows:
        raise SystemExit("bench_verdicts: --sources / --rows left nothing to run")
    missing = [str(p) for p in sources.values() if not p.is_dir()]
    if missing:
        raise SystemExit(f"bench_verdicts: real rank folder(s) not found: {', '.join(missing)}")
    policy = gate.load_checked_policy(None)
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    ws = Workspace(args.keep)
    out, took = [], {}
    try:
        if args.setting in ("single", "both"):
            t0 = time.perf_counter()
            single = run_single(sc, policy, sources, rows, ws, log)
            took["single"] = time.perf_counter() - t0
            print_single(single, list(sources))
            out += single
        if args.setting in ("repeated", "both"):
            t0 = time.perf_counter()
            rep = run_repeated(sc, policy, sources, rows, ws, args, log)
            took["repeated"] = time.perf_counter() - t0
            print_repeated(rep, args)
            out += rep
    finally:
        ws.close()
    tg = targets(out)
    print("\n## targets\n")
    for what, measured, met in tg:
        print(f"- {'MET    ' if met else 'NOT MET'} {what}: {measured}")
    print("\ntook " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
    if args.keep:
        print(f"captures kept under {ws.root}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": out, "took_s": took, "targets": [
            {"target": a, "measured": b, "met": c} for a, b, c in tg]}, indent=1, default=str) + "\n",
            encoding="utf-8")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
