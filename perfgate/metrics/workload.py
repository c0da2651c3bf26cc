"""Are two fingerprints of one workload? Their kernel family sets must overlap.

Two captures of one model (the same job at another profiler level, export, commit or device)
run mostly the same kernel families; a capture of another model runs mostly others. The test
reads ``share.family`` (every kernel family's share of ΣDuration per step) of each side:

* Jaccard index of the family sets, ``|shared| / |union|``;
* the ΣDuration share the shared families hold on each side.

Another workload when the Jaccard index is below :data:`MAX_JACCARD` AND the shared families
hold less than :data:`MAX_SHARED_TIME` of one side's ΣDuration. Both conditions: a change of
one model that adds a family taking most of the step keeps a high Jaccard index (it is a
regression to report, not another workload), and two models sharing only their small
elementwise kernels (Add, Cast) are told apart by the time those hold.

Measured on the fixtures (../shared/fixtures/ascend, SOURCES.md 1a/1b/1e): one job at profiler
Level0/1/2 and text/db export: Jaccard 1.00, shared time 100 % on both sides; the resnet-like
level1 job against the transformer st/level2 job: Jaccard 0.07 (7 of 94 families), shared time
93 % / 10 %.

Used by :mod:`perfgate.compare.rules` (a baseline of another workload cannot judge: exit 4) and
:mod:`perfgate.metrics.repeat` (repeated captures of one side must be one workload: exit 2).
"""
from __future__ import annotations

from perfgate import terms
from perfgate.model import Fingerprint, parse_metric_key

MAX_JACCARD = 0.25
MAX_SHARED_TIME = 0.5
MIN_FAMILIES = 5      # below this on either side the test says nothing


def family_shares(fp: Fingerprint) -> tuple[str | None, dict]:
    """``(view, {family: ΣDuration share (ratio)})`` of ``share.family`` in the first view the
    fingerprint has of p50, rank0, max (``(None, {})`` when it has none). The p50 of a capture of
    several pipeline stages is the job-level one (:func:`perfgate.metrics.stages.job_p50`): every
    family any stage runs, at its largest stage p50, so the families of every stage are compared,
    not those of the stage holding rank0 alone; its view is then ``p50``."""
    from perfgate.metrics.stages import job_p50_values
    by_view: dict = {}
    staged: dict = {}
    for k, m in fp.metrics.items():
        if m.name == "share.family" and isinstance(m.value, (int, float)) and not isinstance(m.value, bool):
            view = m.labels.get("view")
            if terms.view_stage(view) is not None:
                staged[k] = float(m.value)
            else:
                by_view.setdefault(view, {})[m.labels.get("family")] = float(m.value)
    if staged and not by_view.get(terms.VIEW_P50):
        by_view[terms.VIEW_P50] = {parse_metric_key(k)[1].get("family"): v.value
                                   for k, v in job_p50_values(staged).items()}
    for view in ("p50", "rank0", "max", None):
        if by_view.get(view):
            return view, by_view[view]
    return None, {}


def other_workload(a: Fingerprint, b: Fingerprint, names: tuple[str, str] = ("baseline", "candidate")) -> str | None:
    """Why ``a`` and ``b`` are not one workload (see the module doc), naming them by ``names``,
    or None when they are, or when either has fewer than :data:`MIN_FAMILIES` families."""
    va, sa = family_shares(a)
    _, sb = family_shares(b)
    if min(len(sa), len(sb)) < MIN_FAMILIES:
        return None
    shared, union = set(sa) & set(sb), set(sa) | set(sb)
    jaccard = len(shared) / len(union)
    ta = sum(sa[f] for f in shared) / (sum(sa.values()) or 1.0)
    tb = sum(sb[f] for f in shared) / (sum(sb.values()) or 1.0)
    if jaccard >= MAX_JACCARD or min(ta, tb) >= MAX_SHARED_TIME:
        return None
    return (f"not the same workload: the two sides share {len(shared)} of {len(union)} kernel families, "
            f"which hold {ta:.0%} of the {names[0]}'s ΣDuration and {tb:.0%} of the {names[1]}'s "
            f"(share.family, {va} view)")
