"""The two jobs of perfgate as library calls: record a baseline, check a capture.

``check`` never raises for a bad capture, a missing baseline or a damaged baseline store: it
returns a :class:`~perfgate.model.GateResult` whose status (INVALID_CAPTURE / NO_BASELINE /
DAMAGED_BASELINE) and exit code say so, so that reports can still be written. ``save_baseline`` raises, and writes nothing,
when the capture is not fit to be a baseline.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from dataclasses import dataclass
from typing import NamedTuple

from perfgate import errors, terms
from perfgate.ci_env import commit_facts, gather_provenance, refuse_untrusted_write
from perfgate.compare import compare_fingerprints, incompatibility, summarize
from perfgate.metrics.stages import layout_change, name_cause_stages, not_paired, with_stage_views
from perfgate.terms import TraceMode
from perfgate.errors import (CorruptBaselineError, InvalidCaptureError, NoBaselineError, PerfgateError, StoreError,
                             UsageError)
from perfgate.metrics.fingerprint import fail_closed_of, require_valid
from perfgate.model import Fingerprint, GateResult
from perfgate.app.run import fingerprint_path, fingerprint_paths, refuse_same_content, refuse_same_path
from perfgate.store.ancestry import refuse_older_commit
from perfgate.store.atomic import discard_stale
from perfgate.store.baselines import BaselineStore


def load_checked_policy(path=None):
    """Load a policy and reject metric names no metric has (typos would silently un-gate), and a
    ``history.key_metric`` the tuning journal cannot follow."""
    from perfgate.metrics.registry import REGISTRY, all_label_keys, journal_metric_problem
    from perfgate.policy import load_policy
    policy = load_policy(path)
    policy.check_names(set(REGISTRY))
    policy.check_key_metric(journal_metric_problem)   # the tuning journal's metric: a number the registry has
    policy.check_labels(all_label_keys())  # label keys of overrides / suggestions (typos would silently not match)
    return policy


def _as_given(capture_path):
    """The capture path as the user gave it (for error locations), or None for several captures."""
    return capture_path if isinstance(capture_path, (str, os.PathLike)) else None


def _refuse_partial(fp: Fingerprint, what: str = "become a baseline") -> None:
    """A capture whose ranks hold different step counts, or a rank with no kernel row inside any
    step, is partial: it cannot ``what`` (a baseline, a history run: the rolling baseline's median
    would take it in).

    Raises:
        InvalidCaptureError: naming the ranks and their step counts."""
    steps = fp.provenance.get("steps", {})
    empty = [r for r, s in steps.items() if not s]
    if empty:
        raise InvalidCaptureError(f"rank(s) {', '.join(empty)} have no kernel row inside any step; a "
                                  f"partial capture cannot {what}",
                                  path=fp.provenance.get("source"))
    counts = {r: len(s) for r, s in steps.items()}
    if len(set(counts.values())) > 1:
        raise InvalidCaptureError(f"ranks have different step counts {counts}; a partial capture "
                                  f"cannot {what}", path=fp.provenance.get("source"))


def _refuse_other_rank_ids(name, old: Fingerprint, fp: Fingerprint) -> None:
    """Replacing a baseline with a capture of other rank ids (same count) is refused like another
    rank count: a renumbered rank is a missing plus an extra one (UsageError, exit 2)."""
    bo, bn = old.config.get("ranks"), fp.config.get("ranks")
    if bo and bn and sorted(bo) != sorted(bn):
        raise UsageError(f"baseline {name!r} was recorded with ranks {bo}; this capture has ranks {bn}: "
                         f"refusing to replace it (use --force if the job's topology changed on purpose)")


def save_baseline(capture_path, name, *, policy, store: BaselineStore, with_trace=TraceMode.READ,
                  provenance=None, env=None, force=False, workers=None, progress=None) -> tuple[Path, Fingerprint]:
    """Fingerprint a capture and store it as baseline ``name`` (atomic write).

    ``capture_path`` may be a list of captures (repeated runs of one commit): they are merged
    (:func:`fingerprint_paths`) and the baseline keeps their pooled per-step samples.

    Raises:
        UsageError: called from a pull-request CI event (PR runs never write baselines), from a
            merge-queue event (``merge_group``, unless ``force``), or a bad name.
        InvalidCaptureError: unreadable capture, a failed self-check, or a partial capture
            (ranks without steps or with different step counts). Nothing is written.
        UsageError: an existing baseline of that name has another rank count or other rank ids, or
            was saved at a commit that descends from this capture's commit
            (:func:`perfgate.store.ancestry.refuse_older_commit`); pass ``force=True`` to replace
            it on purpose.
        StoreError: the write failed (the previous baseline is kept).
    """
    env = os.environ if env is None else env
    why = refuse_untrusted_write(env, f"baseline {name!r}", "baselines", force)
    if why:
        raise UsageError(why + " (save on pushes to the main branch)")
    store.path_for(name)  # validate the name before any work
    from perfgate.store.atomic import unwritable_reason
    why = unwritable_reason(store.dir, folder=True)   # and the store: before the fingerprint, not after
    if why:
        raise StoreError(f"cannot write the baseline store: {why}", path=store.dir,
                         hint="point --baseline-dir / PERFGATE_BASELINE_DIR at a writable folder")
    prov = dict(gather_provenance(env))
    prov.update(provenance or {})
    fp = require_valid(fingerprint_paths(capture_path, policy, with_trace=with_trace, provenance=prov,
                                         workers=workers, progress=progress),
                       fail_closed=fail_closed_of(policy),
                       path=_as_given(capture_path))
    _refuse_partial(fp)
    if not force and store.path_for(name).is_file():
        try:
            old, _ = store.load(name)
            if old.config.get("world_size") != fp.config.get("world_size"):
                raise UsageError(f"baseline {name!r} was recorded with {old.config.get('world_size')} rank(s); "
                                 f"this capture has {fp.config.get('world_size')}: refusing to replace it "
                                 f"(use --force if the job's topology changed on purpose)")
            _refuse_other_rank_ids(name, old, fp)
            note = refuse_older_commit(name, old.provenance.get("commit"), fp.provenance.get("commit"))
            if note:   # git could not tell: saved, and the baseline says so
                fp = dataclasses.replace(fp, warnings=(*fp.warnings, note))
        except (NoBaselineError, CorruptBaselineError):
            pass  # an unreadable or damaged old baseline is replaced
    return store.save(name, fp), fp


def load_history_baseline(baseline_name: str, cand, policy, history_path):
    """``history:BRANCH`` -> (fingerprint, noise, notes) from the history database; ``notes``
    says which runs the baseline is the median of, then one line per commit ordered by when it
    was recorded because its committer date is a wrong clock (:meth:`HistoryStore.order_warnings`).

    Raises NoBaselineError (missing database, too few runs in the candidate's series),
    StoreUnopenableError when the database cannot be opened (``history_path`` is a directory or
    lies under a regular file, SQLite cannot open the file: a misconfigured store, exit 5), or
    StoreError when the database is damaged (not SQLite, truncated): exit 5."""
    from perfgate.history.store import NO_COMMIT, HistoryStore, require_branch, require_db_path
    branch = baseline_name.split(":", 1)[1]
    if not branch:
        raise UsageError("history baseline needs a branch: --baseline history:main")
    require_branch(branch, "--baseline history:BRANCH")
    require_db_path(history_path)
    h = policy.history
    from perfgate.store.atomic import nearest_existing
    anc = nearest_existing(Path(history_path))
    if anc != Path(history_path) and not anc.is_dir():   # `file/h.sqlite`: never a database, not "none yet"
        raise errors.StoreUnopenableError(f"cannot open the history database: {anc} is a regular file, not a folder",
                                          path=history_path, hint="give the database file, e.g. "
                                                                  "--db DIR/perfgate-history.sqlite")
    if not Path(history_path).is_file():  # no database yet: no baseline (a damaged one is a StoreError)
        raise NoBaselineError("no history database here", path=history_path,
                              hint="record runs first: perfgate history record CAPTURE --branch main")
    hs = HistoryStore(history_path, readonly=True)
    try:
        base, noise = hs.rolling_baseline(branch, cand.config, window=int(h["window"]),
                                          min_runs=int(h["min_runs"]), band_k=float(h["band_k"]), cand=cand)
        clocks = hs.order_warnings()
    finally:
        hs.close()
    runs = base.provenance["runs"]
    note = (f"baseline history:{branch} = per-metric median of {len(runs)} run(s) (ids {runs}, commits "
            f"{[c[:12] if c else NO_COMMIT for c in base.provenance['commits']]}); tolerance widened by {h['band_k']:g} x robust "
            f"sigma of those runs")
    left = base.provenance.get("other_workload_runs") or []
    if left:
        note += (f"; run(s) {left} of this series left out: another workload than the candidate "
                 f"(other kernel families)")
    mine = base.provenance.get("candidate_runs") or []
    if mine:
        note += (f"; run(s) {mine} left out: the candidate itself, already recorded (the same metrics), is "
                 f"not part of its own baseline")
    ranks_left = base.provenance.get("other_rank_runs") or []
    if ranks_left:
        note += (f"; run(s) {ranks_left} of this series left out: they profiled other ranks than the "
                 f"candidate's {base.provenance.get('ranks')}")
    return base, noise, [note, *(f"history order: {w}" for w in clocks)]


def check(capture_path, baseline_name, *, policy, store: BaselineStore, with_trace=TraceMode.READ,
          provenance=None, env=None, history_path=None, workers=None, scheduler=None, progress=None) -> GateResult:
    """Compare a capture (or a list of repeated captures, merged by :func:`fingerprint_paths`)
    against a stored baseline. With several runs on either side, metrics with per-step samples
    are judged by :mod:`perfgate.compare.stats` (status UNSURE, exit 0, when a gated metric is unsure
    and nothing regressed; exit 1 if the policy sets ``statistics.unsure_fails``).

    Returns a :class:`GateResult` with status PASS (exit 0), REGRESSION (1),
    INVALID_CAPTURE (3: unreadable capture or failed self-check; nothing compared),
    NO_BASELINE (4), INCOMPATIBLE_BASELINE (4: the baseline cannot judge this capture, e.g. it
    holds another fingerprint schema; not forgiven by ``no_baseline_ok``), DAMAGED_BASELINE (5: the baseline store is damaged — a damaged
    baseline file (:class:`~perfgate.errors.CorruptBaselineError`), a damaged history database
    of ``history:BRANCH``) or STORE_ERROR (5: the history database of ``history:BRANCH`` cannot
    be opened — its path is a directory or lies under a regular file, SQLite cannot open it:
    :class:`~perfgate.errors.StoreUnopenableError`); for both nothing is compared, ``error`` names
    the file, byte offset / line where known, and the hint; the candidate's self-checks are kept).

    Raises:
        UsageError / PolicyError: bad arguments (exit 2).
    """
    policy.require_gating()  # PolicyError before any work: a gate that can never fail is no gate
    t0 = time.perf_counter()
    prov = dict(gather_provenance(env))
    prov.update(provenance or {})
    try:
        cand = fingerprint_paths(capture_path, policy, with_trace=with_trace, provenance=prov, workers=workers,
                                 scheduler=scheduler, progress=progress)
    except InvalidCaptureError as e:
        return _not_compared(terms.INVALID, e, baseline_name, t0)
    try:
        require_valid(cand, fail_closed=fail_closed_of(policy), path=_as_given(capture_path))
    except InvalidCaptureError as e:
        return _not_compared(terms.INVALID, e, baseline_name, t0, cand)
    noise, extra = None, []
    try:
        if baseline_name.startswith("history:"):
            base, noise, hnotes = load_history_baseline(baseline_name, cand, policy, history_path)
            extra.extend(hnotes)
        else:
            base, meta = store.load(baseline_name, self_checks=False)  # never compared
            odd = store.name_mismatch(baseline_name, meta)
            if odd:
                extra.append(odd)
    except (NoBaselineError, StoreError) as e:  # a damaged store is its own status: never "no baseline"
        status = (terms.INCOMPATIBLE if isinstance(e, errors.IncompatibleBaselineError)  # another schema
                  else terms.NO_BASELINE if isinstance(e, NoBaselineError)
                  else terms.STORE_ERROR if isinstance(e, errors.StoreUnopenableError)   # not damage
                  else terms.DAMAGED)
        return _not_compared(status, e, baseline_name, t0, cand)
    return judge(base, cand, policy, baseline_name=baseline_name, noise=noise, extra_notes=extra, t0=t0)


def compare(base_path, capture_path, *, policy, with_trace=TraceMode.READ, provenance=None, env=None, workers=None,
            scheduler=None, progress=None) -> GateResult:
    """``perfgate compare``: judge a capture (or repeated captures) against another capture (or
    repeated captures) read from disk, with no baseline store: both sides are fingerprinted
    (:func:`fingerprint_paths`), self-checked as :func:`check` and :func:`save_baseline` do (the
    base side, being the baseline, must not be partial: :func:`_refuse_partial`), then judged by
    :func:`judge`, the one judging path of ``check``. Nothing is written anywhere.

    ``provenance`` / ``env`` describe the candidate (CI commit and branch); the base side's
    provenance is its capture's own. The result's ``baseline_name`` is the base capture's path
    (the first, with ``+N`` more for repeated captures).

    Returns a :class:`GateResult` with the statuses and exit codes of :func:`check`:
    INVALID_CAPTURE (3) names the side that failed (its path), INCOMPATIBLE_BASELINE (4) when the
    base cannot judge the candidate; never NO_BASELINE or a store status.

    Raises:
        UsageError / PolicyError: bad arguments (exit 2)."""
    policy.require_gating()
    t0 = time.perf_counter()
    bases = _as_list(base_path)
    label = str(bases[0]) + (f" (+{len(bases) - 1} more)" if len(bases) > 1 else "")
    prov = dict(gather_provenance(env))
    prov.update(provenance or {})
    read = dict(with_trace=with_trace, workers=workers, scheduler=scheduler, progress=progress)
    cand, failed = _read_valid_side(capture_path, policy, read, provenance=prov)
    if failed is not None:
        return _not_compared(terms.INVALID, failed, label, t0, cand)
    base, failed = _read_valid_side(base_path, policy, read, provenance=None, role="be the base of a comparison")
    if failed is not None:
        return _not_compared(terms.INVALID, failed, label, t0, cand)
    return judge(base, cand, policy, baseline_name=label, t0=t0,
                 extra_notes=[f"compared with the capture(s) {', '.join(map(str, bases))} read from disk: "
                              f"nothing was written to a baseline store or a history database"])


def _read_valid_side(paths, policy, read: dict, *, provenance, role: str | None = None):
    """One side of :func:`compare`: ``(fingerprint, None)`` when it reads and passes its
    self-checks (and, with ``role``, is not partial); else ``(fingerprint or None,
    InvalidCaptureError)``."""
    fp = None
    try:
        fp = fingerprint_paths(paths, policy, provenance=provenance, **read)
        require_valid(fp, fail_closed=fail_closed_of(policy), path=_as_given(paths))
        if role:
            _refuse_partial(fp, role)
    except InvalidCaptureError as e:
        return fp, e
    return fp, None


def _not_compared(status: str, error: PerfgateError, baseline_name: str, t0: float,
                  cand: Fingerprint | None = None) -> GateResult:
    """The result of a check that compared nothing: ``status`` and the exit code of ``error``
    (named in the reports with its file, offset and hint). With the candidate's fingerprint
    (``cand``, when the capture was read) its self-checks, warnings, provenance, findings and
    detail are kept, so the reports still say what the capture held."""
    seen = {} if cand is None else dict(
        self_checks=cand.self_checks, notes=tuple(cand.warnings), candidate_provenance=cand.provenance,
        findings=cand.findings, detail=cand.detail)
    return GateResult(status=status, exit_code=error.exit_code, baseline_name=baseline_name, error=error.to_dict(),
                      elapsed_s=time.perf_counter() - t0, **seen)


def judge(base: Fingerprint, cand: Fingerprint, policy, *, baseline_name: str | None = None, noise=None,
          extra_notes=(), t0: float | None = None) -> GateResult:
    """Judge a candidate fingerprint against a baseline fingerprint (both already fingerprinted and
    the candidate's self-checks passed): the comparisons, the gate status and exit code, the causes.
    ``check`` calls it after reading the capture and the baseline; benchmarks and library callers
    holding two fingerprints call it directly. Pure apart from the clock.

    Returns a :class:`GateResult` with status PASS / REGRESSION / UNSURE, or INCOMPATIBLE_BASELINE
    (exit 4) when the baseline cannot judge the candidate (nothing judged)."""
    t0 = time.perf_counter() if t0 is None else t0
    extra = list(extra_notes)
    policy = with_stage_views(policy, base, cand)   # a pipeline job's stage views gate as their view does
    comparisons, notes = compare_fingerprints(base, cand, policy, noise=noise)
    status = summarize(comparisons)
    code = errors.EXIT_REGRESSION if status == terms.FAIL else errors.EXIT_PASS
    if status == terms.UNSURE_STATUS and policy.statistics.get("unsure_fails"):
        code = errors.EXIT_REGRESSION
    notes = extra + list(notes) + list(cand.warnings)
    why = incompatibility(base, cand, comparisons)
    if why:
        return GateResult(status=terms.INCOMPATIBLE, exit_code=errors.EXIT_NO_BASELINE,
                          comparisons=_not_judged(comparisons), self_checks=cand.self_checks, notes=tuple(notes),
                          baseline_name=baseline_name, baseline_provenance=base.provenance,
                          candidate_provenance=cand.provenance,
                          error={"message": f"baseline {baseline_name!r} cannot judge this capture: {why}",
                                 "kind": "incompatible_baseline", "path": None, "row": None,
                                 "byte_offset": None, "hint": "compare like with like, or record a new "
                                                              "baseline for this configuration"},
                          elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=cand.detail)
    detail = with_operator_compare(base, cand, policy)
    if base.policy_digest and base.policy_digest != cand.policy_digest:
        notes.append("the baseline was fingerprinted under other fingerprint rules (Top-N, family "
                     "suffix or categories); metrics depending on them may be incomparable")
    from perfgate.compare.causes import find_causes, waterfall
    views = [v for v in policy.gate_views if any(c.labels.get("view") == v for c in comparisons)]
    by_view = {v: waterfall(base, cand, v) for v in views}   # made once, for the causes and the reports
    causes, unexplained = find_causes(comparisons, base, cand, policy.gate_views, falls=by_view)
    causes = name_cause_stages(causes)
    falls = [w for w in by_view.values() if w is not None]
    # the gated view whose step time moved most (a change on rank 1 of 2 moves p50, not rank0)
    detail["waterfall"] = max(falls, key=lambda w: abs(w["step_delta_us"])) if falls else None
    detail["sensitivity"] = sensitivity(comparisons, views[0] if views else None)
    stage_change = layout_change(base, cand)
    partial, error = _partial_note(comparisons, policy, stage_change), None
    if partial:
        notes.insert(0, partial.note)
        if partial.over:
            status, code = terms.INCOMPATIBLE, errors.EXIT_NO_BASELINE
            comparisons, causes, unexplained = _not_judged(comparisons), [], []
            like = ("record a new baseline for the new stage layout" if stage_change
                    else "compare like with like (same profiler level and export)")
            error = {"message": f"baseline {baseline_name!r} cannot judge this capture: {partial.note}",
                     "kind": "incompatible_baseline", "path": None, "row": None, "byte_offset": None,
                     "hint": f"{like}, or pass --allow-partial to judge the comparable rest "
                             f"(policy: max_incomparable_fraction)",
                     "incomparable": partial.incomparable, "gated": partial.gated}
    narrow = narrow_policy_note(base, cand, policy, comparisons)
    if narrow:
        notes.insert(0, narrow)
    return GateResult(status=status, exit_code=code, comparisons=tuple(comparisons),
                      self_checks=cand.self_checks, notes=tuple(notes), baseline_name=baseline_name,
                      baseline_provenance=base.provenance, candidate_provenance=cand.provenance,
                      elapsed_s=time.perf_counter() - t0, findings=cand.findings, detail=detail,
                      causes=tuple(causes), unexplained=tuple(unexplained), error=error)


def sensitivity(comparisons, view) -> dict:
    """What a pass of this check vouches for in ``view`` (the first gated view): ``family_excess_us``,
    the smallest kernel-family excess beyond the device's speed it would have failed on (us per step,
    :func:`perfgate.compare.parts.smallest_caught`); ``step_time`` / ``computing``, the tolerances
    step time and Computing were judged by (text)."""
    from perfgate.compare.parts import smallest_caught
    in_view = [c for c in comparisons if c.labels.get("view") == view]
    by_name = {c.name: c for c in in_view if c.gated and c.verdict != terms.INCOMPARABLE}
    return {"view": view, "family_excess_us": smallest_caught(in_view),
            "step_time": by_name["step.time_us"].tolerance if "step.time_us" in by_name else None,
            "computing": by_name["step.computing_us"].tolerance if "step.computing_us" in by_name else None}


def _not_judged(comparisons) -> tuple:
    """The comparisons of a check whose baseline cannot judge the capture (INCOMPATIBLE_BASELINE):
    kept in the reports for reference, none of them failing (nothing was judged)."""
    from dataclasses import replace
    return tuple(replace(c, fails=False) if c.fails else c for c in comparisons)


class PartialComparison(NamedTuple):
    """Some gated metrics of a comparison not comparable (a config facet differs): ``incomparable``
    of ``gated``, the ``note`` every report states, and whether their fraction is ``over`` the
    policy's ``max_incomparable_fraction`` (then the check is INCOMPATIBLE_BASELINE, exit 4)."""
    incomparable: int
    gated: int
    note: str
    over: bool


def _partial_note(comparisons, policy, stage_change: str | None = None) -> PartialComparison | None:
    """The :class:`PartialComparison` of ``comparisons``, or None when every gated metric was
    comparable. The limit is the policy's ``max_incomparable_fraction`` (default 0.25,
    :data:`perfgate.policy.load.MAX_INCOMPARABLE_DEFAULT`; None after ``--allow-partial``).
    ``stage_change``: why the two sides' pipeline stages cannot be paired
    (:func:`perfgate.metrics.stages.layout_change`); when some incomparable gated metrics are
    the stage and pooled views it leaves out, the note starts with it (baseline and candidate
    stages) and says how many of them it accounts for."""
    from perfgate.policy.load import significant
    gated = [c for c in comparisons if c.gated]
    inc = sum(1 for c in gated if c.verdict == terms.INCOMPARABLE)
    if not gated or not inc:
        return None
    frac = inc / len(gated)
    limit = getattr(policy, "max_incomparable_fraction", None)
    over = limit is not None and frac > limit
    if over:
        tail = (f", above the limit of {significant(limit * 100)} % (max_incomparable_fraction): the baseline "
                f"cannot vouch for this capture; --allow-partial judges the comparable rest")
    elif limit is not None:
        tail = f" (limit {significant(limit * 100)} %, max_incomparable_fraction)"
    else:
        tail = "; the comparable rest was judged (no limit: --allow-partial or max_incomparable_fraction: null)"
    note = (f"partial comparison: {inc} of {len(gated)} gated metrics ({significant(frac * 100)} %) "
            f"are not comparable{tail}")
    by_layout = sum(1 for c in gated if c.verdict == terms.INCOMPARABLE and not_paired(c.name, c.labels, stage_change))
    if by_layout:
        note = (f"{stage_change}: {by_layout} of the {inc} not comparable are its stage and pooled views "
                f"(rank0 is compared); {note}")
    return PartialComparison(inc, len(gated), note, over)


#: a policy gating fewer than this fraction of what the built-in policy gates on the same
#: comparison is named at the top of every report (:func:`narrow_policy_note`)
NARROW_POLICY_FRACTION = 0.5


def narrow_policy_note(base: Fingerprint, cand: Fingerprint, policy, comparisons) -> str | None:
    """A note naming ``policy`` when it gates fewer than :data:`NARROW_POLICY_FRACTION` of the
    metrics the built-in policy gates on the same comparison, with the two counts: the gated
    ``comparisons`` made under ``policy``, and those :func:`compare_fingerprints` makes of the same
    two fingerprints under the built-in policy. None otherwise (and for the built-in policy
    itself). A short ``--policy`` file with ``extends: none`` gates only what it names: the
    reports say so before anything else."""
    from perfgate.policy.load import DEFAULT_POLICY
    if Path(policy.path).resolve() == DEFAULT_POLICY.resolve():
        return None
    mine = sum(1 for c in comparisons if c.gated)
    builtin = sum(1 for c in compare_fingerprints(base, cand, _builtin_policy())[0] if c.gated)
    if not builtin or mine >= NARROW_POLICY_FRACTION * builtin:
        return None
    return (f"narrow policy: {mine} gated metric{'s' if mine != 1 else ''}, the built-in policy {builtin} on this "
            f"comparison (under {NARROW_POLICY_FRACTION * 100:.0f} %), with --policy {policy.path}: what it leaves "
            f"out is not judged; a --policy file extends the built-in policy unless it sets extends: none")


@functools.lru_cache(maxsize=1)
def _builtin_policy():
    """The built-in policy, loaded once (the reference of :func:`narrow_policy_note`)."""
    from perfgate.policy import load_policy
    return load_policy(None)


def with_operator_compare(base, cand, policy) -> dict:
    """The candidate's detail plus ``operator_compare`` (:func:`perfgate.compare.families.compare_operators`)."""
    from perfgate.compare.families import compare_operators
    detail = dict(cand.detail)
    if cand.detail.get("operators"):
        detail["operator_compare"] = compare_operators(base.detail.get("operators"), cand.detail["operators"],
                                                       policy.operators.family_min_share)
    return detail


@dataclass(frozen=True)
class HistoryEntry:
    """What a run is recorded as in the history database: the ``branch`` whose series it joins
    (``--baseline history:BRANCH`` reads that series back), its ``commit`` (default: the one the CI
    environment or the git checkout names), and for the tuning journal the ``note`` (the change the
    run tried) and ``status`` (``kept`` or ``reverted``)."""
    branch: str
    commit: str | None = None
    note: str | None = None
    status: str = "kept"


def record_history(capture_path, entry: HistoryEntry, *, policy, history_path, with_trace=TraceMode.READ, env=None,
                   allow_duplicate=False, force=False, cwd=None, on_wait=None, workers=None):
    """Fingerprint a capture (``workers``: as :func:`perfgate.app.run.fingerprint_path`'s) and record it in the history database as ``entry`` (branch, commit,
    tuning-journal note and status: :class:`HistoryEntry`). ``on_wait`` gets one line per
    retry while another process holds the database's lock (:class:`perfgate.history.store.HistoryStore`;
    the wait is bounded, 60 s by default).

    Returns :class:`Recorded` ``(run_id, fingerprint, duplicate)``. Recording is idempotent: when
    the branch already holds a run with the same metric values (the same capture recorded again,
    e.g. a re-run CI step), nothing is written, ``duplicate`` is True and ``run_id`` is the
    existing run's id; ``allow_duplicate=True`` records it anyway (each copy then weighs in trends
    and rolling baselines). An invalid capture records nothing, except, when a
    tuning-journal ``note`` is given, a run with status ``invalid`` and no metric values; the
    InvalidCaptureError is raised either way.

    Inside a git checkout (``cwd``, default the working folder) the commit's committer time and
    first parent are stored with the run (provenance ``commit_time`` / ``commit_parent``), so the
    history can be read in commit order whatever the order of recording.

    Raises:
        UsageError: from a pull-request CI event (PR runs never record), or a merge-queue event
            (``merge_group``) unless ``force``.
        InvalidCaptureError / StoreError.
    """
    from perfgate.history.store import HistoryStore, require_branch, require_commit
    branch, commit, note = entry.branch, entry.commit, entry.note
    require_branch(branch)   # a blank branch could never be read back as history:BRANCH (exit 2)
    require_commit(commit)
    env = os.environ if env is None else env
    why = refuse_untrusted_write(env, f"history of branch {branch!r}", "to the history", force)
    if why:
        raise UsageError(why)
    prov = dict(gather_provenance(env, cwd=cwd))
    if commit:
        prov["commit"], prov["commit_source"] = commit, "--commit"
    if prov.get("commit"):  # for history in commit order (perfgate.history.order)
        prov.update(commit_facts(prov["commit"], cwd=cwd))
    try:
        fp = require_valid(fingerprint_path(capture_path, policy, with_trace=with_trace, provenance=prov,
                                            workers=workers),
                           fail_closed=fail_closed_of(policy),
                           path=capture_path)
        _refuse_partial(fp, "be recorded in the history")
    except InvalidCaptureError as e:
        if note:
            hs = HistoryStore(history_path, on_wait=on_wait)
            try:
                hs.record(None, branch=branch, commit=prov.get("commit"), note=note, status="invalid",
                          error=e.message)
            finally:
                hs.close()
        raise
    hs = HistoryStore(history_path, on_wait=on_wait)
    try:
        hs.require_intact()   # a damaged file is exit 5 here, never "already recorded" from an intact page
        dup = None if allow_duplicate else hs.same_capture(fp, branch)
        if dup is not None:
            return Recorded(dup, fp, True)
        run_id = hs.record(fp, branch=branch, commit=prov.get("commit"), note=note, status=entry.status)
        return Recorded(run_id, fp, False)
    finally:
        hs.close()


class Recorded(NamedTuple):
    """Outcome of :func:`record_history`."""
    run_id: int
    fingerprint: Fingerprint
    duplicate: bool


__all__ = ["check", "save_baseline", "fingerprint_path", "gather_provenance", "record_history", "HistoryEntry",
           "PerfgateError"]


def calibrate(capture_paths, out_path, *, policy, k: float = 3.0, with_trace=TraceMode.READ, workers=None):
    """``perfgate calibrate``: fingerprint repeated captures of one commit, propose per-metric
    tolerances and the parts' noise bands from their run-to-run noise
    (:func:`perfgate.compare.calibrate.propose_tolerances`, :func:`~perfgate.compare.calibrate.propose_part_bands`) and
    write a policy file with them to ``out_path`` (atomic). Returns ``(proposals, path)``.

    Raises:
        UsageError: fewer than 3 captures, bad ``k``, captures that are not one job
            (:func:`perfgate.metrics.repeat.require_one_job`).
        InvalidCaptureError: a capture fails to read or a self-check fails (nothing written).
        StoreError: the policy file could not be written.
    """
    from perfgate.compare.calibrate import calibrated_policy_text, propose_part_bands, propose_tolerances
    from perfgate.store.atomic import write_atomic
    paths = list(capture_paths)
    refuse_same_path(paths)
    fps = [require_valid(fingerprint_path(p, policy, with_trace=with_trace, workers=workers),
                         fail_closed=fail_closed_of(policy), path=p) for p in paths]
    refuse_same_content(paths, fps)
    from perfgate.metrics.repeat import require_one_job
    require_one_job(fps)   # noise is learned from repeated runs of one job, never across jobs
    proposals = propose_tolerances(fps, policy, k=k) + propose_part_bands(fps, policy, k=k)
    text = calibrated_policy_text(policy, proposals, source_note=f"{len(paths)} captures")
    out = Path(out_path)
    write_atomic(out, text)
    return proposals, out


_REPORT_OPTIONS = {"out": "--out", "junit": "--junit", "markdown": "--markdown", "json_path": "--json",
                   "html_path": "--html"}


def require_writable(option: str, path, *, folder: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written (a parent that is a regular
    file, a folder where a file is wanted, a read-only folder; ``None`` and ``-`` pass), so a long
    run never ends without its result written (:func:`perfgate.store.atomic.unwritable_reason`).

    Raises:
        StoreError (exit 5, as a report write that fails): naming ``option`` (e.g. ``--html``),
        the path and why (the read-only folder)."""
    from perfgate.store.atomic import unwritable_reason
    if path is None or str(path) == "-":
        return
    why = unwritable_reason(path, folder=folder)
    if why:
        raise StoreError(f"{option} {path}: cannot write there: {why}",
                         hint=f"point {option} at a writable {'folder' if folder else 'file'}")


def _require_report_destinations(**paths) -> None:
    """:func:`require_writable` for each of check's report destinations (``out`` a folder)."""
    for kw, path in paths.items():
        require_writable(_REPORT_OPTIONS[kw], path, folder=kw == "out")


@dataclass(frozen=True)
class CheckReports:
    """The files one check writes: the report folder ``out`` (the JUnit / Markdown / JSON reports
    go there unless ``junit`` / ``markdown`` / ``json_path`` name their own file; ``-`` for the JSON
    is stdout), the HTML report ``html_path`` (optional), the sticky PR comment's ``key`` (default
    the baseline name) and ``junit_key``, a matrix leg's key naming the JUnit suites."""
    out: object
    junit: object = None
    markdown: object = None
    json_path: object = None
    html_path: object = None
    key: str | None = None
    junit_key: str | None = None

    def destinations(self) -> dict:
        """``{keyword: path}`` of the report files and folder, as the report writers take them."""
        return {"out": self.out, "junit": self.junit, "markdown": self.markdown, "json_path": self.json_path,
                "html_path": self.html_path}


def check_and_report(capture_path, baseline_name, *, policy, store: BaselineStore, reports: CheckReports,
                     history_path=None, no_baseline_ok: bool = False, **check_kw) -> tuple[GateResult, dict]:
    """``perfgate check``: :func:`check` (``check_kw``: with_trace, workers, scheduler, progress,
    env), then its report files (:class:`CheckReports`): JUnit / Markdown / JSON
    (:func:`perfgate.report.writers.write_check_reports`, sticky-comment ``reports.key``, default the
    baseline name) and, with ``reports.html_path`` (needs the ``html`` extra, refused before any
    work), the HTML report. ``no_baseline_ok``: a NO_BASELINE result exits 0, and every report says
    so. Returns ``(result, {kind: path})``.

    A DAMAGED_BASELINE or STORE_ERROR result (exit 5) is not forgiven by ``no_baseline_ok`` (only a missing
    baseline is). Raises:
        as :func:`check`; UsageError (exit 2, before any work) when a report destination cannot
        be written (a parent is a regular file, a read-only folder), two reports name one file, or
        one lies among the capture's files (:func:`perfgate.store.reportpaths.remove_stale_check_reports`);
        StoreError when a report write fails all the same (exit 5).
    """
    import dataclasses
    _prepare_reports(reports, capture_path, {"--db": history_path, "--baseline-dir": store.dir})
    result = check(capture_path, baseline_name, policy=policy, store=store, history_path=history_path, **check_kw)
    if result.status == terms.NO_BASELINE and no_baseline_ok:  # every report says exit 0, as the process does
        result = dataclasses.replace(result, exit_code=errors.EXIT_PASS, notes=result.notes + (
            "--no-baseline-ok: a missing baseline exits 0 (nothing was compared)",))
    return result, _write_check_reports(result, reports, baseline_name, store, history_path)


def compare_and_report(base_path, capture_path, *, policy, reports: CheckReports, **compare_kw) -> tuple[GateResult, dict]:
    """``perfgate compare``: :func:`compare` (``compare_kw``: with_trace, workers, scheduler,
    progress, env), then the report files of a check (:class:`CheckReports`; the sticky-comment
    key ``reports.key``, default ``compare``). Nothing is written to a baseline store or a history
    database. Returns ``(result, {kind: path})``.

    Raises:
        as :func:`check_and_report` (report destinations refused before any work, exit 2; a
        failed report write, exit 5)."""
    sides = [*_as_list(base_path), *_as_list(capture_path)]
    _prepare_reports(reports, sides, {})
    result = compare(base_path, capture_path, policy=policy, **compare_kw)
    return result, _write_check_reports(result, reports, reports.key or "compare", None, None)


def _as_list(paths) -> list:
    """One capture path or several as a list."""
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def _prepare_reports(reports: CheckReports, captures, inputs: dict) -> None:
    """Before any work: the HTML extra when ``--html`` is asked for, every report destination
    writable (:func:`require_writable`), and an earlier run's reports removed
    (:func:`perfgate.report.writers.remove_stale_check_reports`; none among ``captures`` or on
    ``inputs``, option -> path)."""
    from perfgate.report.writers import remove_stale_check_reports
    if reports.html_path:  # an optional part: refused before any work, not after the verdict
        errors.require_extra("html", "--html")
    _require_report_destinations(**reports.destinations())
    remove_stale_check_reports(**reports.destinations(), captures=captures, inputs=inputs)


def _write_check_reports(result: GateResult, reports: CheckReports, baseline_name, store, history_path) -> dict:
    """Write a check's reports; ``{kind: path}``. A failed write raises StoreError carrying the
    verdict (``e.result``: the CLI still prints it); a failed HTML write removes the JUnit /
    Markdown / JSON just written, as the run exits 5 and none of them may look current."""
    from perfgate.report.writers import write_check_html, write_check_reports
    try:
        paths = write_check_reports(result, reports.out, junit=reports.junit, markdown=reports.markdown,
                                    json_path=reports.json_path, key=reports.key or baseline_name,
                                    junit_key=reports.junit_key)
    except StoreError as e:
        e.result = result   # the verdict the reports would have held: the CLI still prints it
        raise
    if reports.html_path:
        try:
            paths["html"] = write_check_html(result, reports.html_path, store=store, history_path=history_path)
        except BaseException as e:
            from perfgate.report.writers import discard_check_reports
            discard_check_reports(paths.values())   # the run exits 5: its JUnit/Markdown/JSON go too
            if isinstance(e, StoreError):
                e.result = result
            raise
    return paths


class CaptureReport(NamedTuple):
    """``perfgate report``: the fingerprint, the HTML file written, and what makes the capture
    invalid (failed self-checks, then findings the policy's ``findings.fail_closed`` lists)."""
    fingerprint: Fingerprint
    path: Path
    problems: list


def capture_report(capture_path, html_path, *, policy, history_path=None, with_trace=TraceMode.READ, workers=None,
                   progress=None) -> CaptureReport:
    """Fingerprint one capture and write its self-contained HTML report (atomic; trend
    sparklines from ``history_path`` when that database exists). An earlier page at
    ``html_path`` is removed before the capture is read
    (:func:`perfgate.store.atomic.discard_stale`), so a capture that cannot be read (the error page
    then replaces it only when the capture path exists), a failure or a killed job leaves no
    earlier page looking current.

    Raises:
        InvalidCaptureError: the capture cannot be read (``perfgate report`` then writes the page
            saying why, :func:`perfgate.report.writers.write_capture_error_html`).
        UsageError: ``html_path`` lies among the capture's files (exit 2, nothing removed:
            :func:`perfgate.ingest.discover.refuse_outputs_among_inputs`).
        StoreError: the write failed (exit 5).
    """
    from perfgate.metrics.fingerprint import blocking_findings, failed_checks
    from perfgate.report.writers import write_capture_html
    errors.require_extra("html", "perfgate report")  # refused before any work
    from perfgate.ingest.discover import refuse_outputs_among_inputs
    refuse_outputs_among_inputs(capture_path, {"--html": html_path})   # before the earlier page is removed
    discard_stale(html_path)
    fp = fingerprint_path(capture_path, policy, with_trace=with_trace, workers=workers, progress=progress)
    path = write_capture_html(fp, html_path, policy=policy, history_path=history_path)
    return CaptureReport(fp, path, failed_checks(fp) + blocking_findings(fp, policy.fail_closed))


def run_demo(out, *, policy) -> tuple:
    """``perfgate demo``: write the synthetic pair (a baseline and a candidate with an injected
    regression) under ``out/captures``, save the baseline as ``main`` in ``out/baselines``, check
    the candidate and write its reports to ``out/report``. The folder is the demo's own: an
    earlier demo's captures are replaced wholesale (never mixed with the new ones) and its
    ``main`` baseline is replaced whatever its rank count. Returns
    ``(baseline capture, candidate capture, baseline file, GateResult, {kind: report path})``.

    Raises:
        UsageError: ``out/captures/baseline`` or ``candidate`` holds more than rank folders.
        StoreError: a capture, the baseline or a report cannot be written."""
    from perfgate.report.writers import write_check_reports
    from perfgate.synth import write_demo_pair
    out = Path(out)
    base, cand = write_demo_pair(out / "captures")
    store = BaselineStore(out / "baselines")
    path, _ = save_baseline(base, "main", policy=policy, store=store, env={}, force=True)
    result = check(cand, "main", policy=policy, store=store)
    return base, cand, path, result, write_check_reports(result, out / "report", key="main")
