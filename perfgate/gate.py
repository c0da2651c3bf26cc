"""The two jobs of perfgate as library calls: record a baseline, check a capture.

``check`` never raises for a bad capture or a missing baseline: it returns a
:class:`~perfgate.model.GateResult` whose status (INVALID_CAPTURE / NO_BASELINE) and exit code
say so, so that reports can still be written. ``save_baseline`` raises, and writes nothing,
when the capture is not fit to be a baseline.
"""
from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from perfgate import errors, terms
from perfgate.compare import compare_fingerprints, incompatibility, summarize
from perfgate.errors import InvalidCaptureError, NoBaselineError, PerfgateError, UsageError
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture, require_valid
from perfgate.model import Fingerprint, GateResult
from perfgate.store.baselines import BaselineStore

PR_EVENTS = ("pull_request", "pull_request_target")


def load_checked_policy(path=None):
    """Load a policy and reject metric names no metric has (typos would silently un-gate)."""
    from perfgate.metrics.registry import REGISTRY
    from perfgate.policy import load_policy
    policy = load_policy(path)
    policy.check_names(set(REGISTRY))
    return policy


def gather_provenance(env=None, cwd=None) -> dict:
    """Commit, branch, runner and CI run id from the CI environment (GitHub Actions names),
    falling back to ``git`` in ``cwd`` and the host name. Values that are unknown are omitted."""
    env = os.environ if env is None else env
    out = {}
    commit = env.get("GITHUB_SHA") or env.get("CI_COMMIT_SHA")
    branch = env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME") or env.get("CI_COMMIT_REF_NAME")
    if not commit or not branch:
        for args, key in ((["rev-parse", "HEAD"], "commit"),
                          (["rev-parse", "--abbrev-ref", "HEAD"], "branch")):
            if (key == "commit" and commit) or (key == "branch" and branch):
                continue
            try:
                r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
                if r.returncode == 0 and r.stdout.strip():
                    if key == "commit":
                        commit = r.stdout.strip()
                    else:
                        branch = r.stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
    if commit:
        out["commit"] = commit
    if branch:
        out["branch"] = branch
    out["runner"] = env.get("RUNNER_NAME") or platform.node()
    if env.get("GITHUB_RUN_ID"):
        out["ci_run_id"] = env["GITHUB_RUN_ID"]
    return out


def fingerprint_path(capture_path, policy, *, with_trace=True, provenance=None) -> Fingerprint:
    """Load and fingerprint a capture directory (self-checks included, not enforced)."""
    cap = load_capture(capture_path, with_trace=with_trace)
    return fingerprint_capture(cap, policy, provenance=provenance)


def _refuse_partial(fp: Fingerprint) -> None:
    steps = fp.provenance.get("steps", {})
    empty = [r for r, s in steps.items() if not s]
    if empty:
        raise InvalidCaptureError(f"rank(s) {', '.join(empty)} have no kernel row inside any step; a "
                                  f"partial capture cannot become a baseline",
                                  path=fp.provenance.get("source"))
    counts = {r: len(s) for r, s in steps.items()}
    if len(set(counts.values())) > 1:
        raise InvalidCaptureError(f"ranks have different step counts {counts}; a partial capture "
                                  f"cannot become a baseline", path=fp.provenance.get("source"))


def save_baseline(capture_path, name, *, policy, store: BaselineStore, with_trace=True,
                  provenance=None, env=None, force=False) -> tuple[Path, Fingerprint]:
    """Fingerprint a capture and store it as baseline ``name`` (atomic write).

    Raises:
        UsageError: called from a pull-request CI event (PR runs never write baselines) or a
            bad name.
        InvalidCaptureError: unreadable capture, a failed self-check, or a partial capture
            (ranks without steps or with different step counts). Nothing is written.
        UsageError: an existing baseline of that name has another rank count (pass
            ``force=True`` to replace it on purpose).
        StoreError: the write failed (the previous baseline is kept).
    """
    env = os.environ if env is None else env
    if env.get("GITHUB_EVENT_NAME") in PR_EVENTS:
        raise UsageError(f"refusing to write baseline {name!r} from a {env['GITHUB_EVENT_NAME']} run: "
                         f"pull-request runs never write baselines (save on pushes to the main branch)")
    store.path_for(name)  # validate the name before any work
    prov = dict(gather_provenance(env))
    prov.update(provenance or {})
    fp = require_valid(fingerprint_path(capture_path, policy, with_trace=with_trace, provenance=prov),
                       fail_closed=set(policy.fail_closed) | {"WARMUP_NOT_STRIPPED"})
    _refuse_partial(fp)
    if not force and store.path_for(name).is_file():
        try:
            old, _ = store.load(name)
            if old.config.get("world_size") != fp.config.get("world_size"):
                raise UsageError(f"baseline {name!r} was recorded with {old.config.get('world_size')} rank(s); "
                                 f"this capture has {fp.config.get('world_size')}: refusing to replace it "
                                 f"(use --force if the job's topology changed on purpose)")
        except NoBaselineError:
            pass  # an unreadable old baseline is replaced
    return store.save(name, fp), fp


def load_history_baseline(baseline_name: str, cand, policy, history_path):
    """``history:BRANCH`` -> (fingerprint, noise, note) from the history database.

    Raises NoBaselineError (missing database, too few runs in the candidate's series)."""
    from perfgate.errors import StoreError
    from perfgate.store.history import HistoryStore
    branch = baseline_name.split(":", 1)[1]
    if not branch:
        raise UsageError("history baseline needs a branch: --baseline history:main")
    h = policy.history
    try:
        hs = HistoryStore(history_path, readonly=True)
    except StoreError as e:
        raise NoBaselineError(e.message, path=e.path, hint=e.hint) from None
    try:
        base, noise = hs.rolling_baseline(branch, cand.config, window=int(h["window"]),
                                          min_runs=int(h["min_runs"]), band_k=float(h["band_k"]))
    finally:
        hs.close()
    runs = base.provenance["runs"]
    note = (f"baseline history:{branch} = per-metric median of {len(runs)} run(s) (ids {runs}, commits "
            f"{[c[:12] for c in base.provenance['commits']]}); tolerance widened by {h['band_k']:g} x robust "
            f"sigma of those runs")
    return base, noise, note


def check(capture_path, baseline_name, *, policy, store: BaselineStore, with_trace=True,
          provenance=None, env=None, history_path=None) -> GateResult:
    """Compare a capture against a stored baseline.

    Returns a :class:`GateResult` with status PASS (exit 0), REGRESSION (1),
    INVALID_CAPTURE (3: unreadable capture or failed self-check; nothing compared) or
    NO_BASELINE (4).

    Raises:
        UsageError / PolicyError: bad arguments (exit 2).
    """
    t0 = time.perf_counter()
    prov = dict(gather_provenance(env))
    prov.update(provenance or {})
    try:
        cand = fingerprint_path(capture_path, policy, with_trace=with_trace, provenance=prov)
    except InvalidCaptureError as e:
        return GateResult(status=terms.INVALID, exit_code=e.exit_code, baseline_name=baseline_name,
                          error=e.to_dict(), elapsed_s=time.perf_counter() - t0)
    try:
        require_valid(cand, fail_closed=policy.fail_closed)
    except InvalidCaptureError as e:
        return GateResult(status=terms.INVALID, exit_code=e.exit_code, self_checks=cand.self_checks,
                          notes=tuple(cand.warnings), baseline_name=baseline_name,
                          candidate_provenance=cand.provenance, error=e.to_dict(),
                          elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=cand.detail)
    noise, extra = None, []
    try:
        if baseline_name.startswith("history:"):
            base, noise, hnote = load_history_baseline(baseline_name, cand, policy, history_path)
            extra.append(hnote)
        else:
            base, _meta = store.load(baseline_name)
    except NoBaselineError as e:
        return GateResult(status=terms.NO_BASELINE, exit_code=e.exit_code, self_checks=cand.self_checks,
                          notes=tuple(cand.warnings), baseline_name=baseline_name,
                          candidate_provenance=cand.provenance, error=e.to_dict(),
                          elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=cand.detail)
    comparisons, notes = compare_fingerprints(base, cand, policy, noise=noise)
    status = summarize(comparisons)
    code = errors.EXIT_REGRESSION if status == terms.FAIL else errors.EXIT_PASS
    notes = extra + list(notes) + list(cand.warnings)
    why = incompatibility(base, cand, comparisons)
    if why:
        return GateResult(status=terms.INCOMPATIBLE, exit_code=errors.EXIT_NO_BASELINE,
                          comparisons=tuple(comparisons), self_checks=cand.self_checks, notes=tuple(notes),
                          baseline_name=baseline_name, baseline_provenance=base.provenance,
                          candidate_provenance=cand.provenance,
                          error={"message": f"baseline {baseline_name!r} cannot judge this capture: {why}",
                                 "kind": "incompatible_baseline", "path": None, "row": None,
                                 "byte_offset": None, "hint": "compare like with like, or record a new "
                                                              "baseline for this configuration"},
                          elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=cand.detail)
    if base.policy_digest and base.policy_digest != cand.policy_digest:
        notes.append("the baseline was fingerprinted under other fingerprint rules (Top-N, family "
                     "suffix or categories); metrics depending on them may be incomparable")
    return GateResult(status=status, exit_code=code, comparisons=tuple(comparisons),
                      self_checks=cand.self_checks, notes=tuple(notes), baseline_name=baseline_name,
                      baseline_provenance=base.provenance, candidate_provenance=cand.provenance,
                      elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=cand.detail)


def record_history(capture_path, *, policy, history_path, branch, commit=None, note=None, status="kept",
                   with_trace=True, env=None):
    """Fingerprint a capture and record it in the history database.

    Returns ``(run_id, fingerprint)``. An invalid capture records nothing, except, when a
    tuning-journal ``note`` is given, a run with status ``invalid`` and no metric values; the
    InvalidCaptureError is raised either way.

    Raises:
        UsageError: from a pull-request CI event (PR runs never record).
        InvalidCaptureError / StoreError.
    """
    from perfgate.store.history import HistoryStore
    env = os.environ if env is None else env
    if env.get("GITHUB_EVENT_NAME") in PR_EVENTS:
        raise UsageError(f"refusing to record history from a {env['GITHUB_EVENT_NAME']} run: pull-request "
                         f"runs never write to the history")
    prov = dict(gather_provenance(env))
    if commit:
        prov["commit"] = commit
    try:
        fp = require_valid(fingerprint_path(capture_path, policy, with_trace=with_trace, provenance=prov),
                           fail_closed=set(policy.fail_closed) | {"WARMUP_NOT_STRIPPED"})
    except InvalidCaptureError as e:
        if note:
            hs = HistoryStore(history_path)
            try:
                hs.record(None, branch=branch, commit=prov.get("commit"), note=note, status="invalid",
                          error=e.message)
            finally:
                hs.close()
        raise
    hs = HistoryStore(history_path)
    try:
        run_id = hs.record(fp, branch=branch, commit=prov.get("commit"), note=note, status=status)
    finally:
        hs.close()
    return run_id, fp


__all__ = ["check", "save_baseline", "fingerprint_path", "gather_provenance", "record_history", "PerfgateError"]
