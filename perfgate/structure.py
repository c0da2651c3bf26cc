"""Model structure of one capture as a library call: per rank, the step / layer / block
classes (:mod:`perfgate.metrics.segments`) and the fusion candidates
(:mod:`perfgate.metrics.fusion`), as JSON-safe records."""
from __future__ import annotations

from perfgate.errors import UsageError


def structure_report(capture_path, policy, *, ranks=None) -> dict:
    """``{"capture", "rules", "counterexamples", "ranks": [{"rank", "steps", "layers", "classes",
    "fusion"}]}`` for every rank (or the ranks in ``ranks``). Row numbers are kernel table
    data rows; times are µs.

    Raises:
        UsageError: the policy has ``segments: null``.
        InvalidCaptureError: unreadable capture, or a segmentation that is not lossless
            (names the rows).
    """
    from perfgate.ingest import load_capture
    from perfgate.metrics.fingerprint import _records
    from perfgate.metrics import kernels as km
    from perfgate.metrics.fusion import fusion_candidates
    from perfgate.metrics.segments import class_table, segment_rank
    rules = getattr(policy, "segments", None)
    if rules is None:
        raise UsageError("the policy turns segmentation off (segments: null)")
    cap = load_capture(capture_path, with_trace=False)
    out = []
    for r in cap.ranks:
        if ranks is not None and r.rank not in ranks:
            continue
        k = r.kernels.df
        cats = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available else None
        seg = segment_rank(k, rules, policy.family_suffix, categories=cats, path=r.kernels.path)
        out.append({"rank": r.rank, "kernel_file": str(r.kernels.path), "steps": _records(seg.steps),
                    "layers": _records(seg.layers), "classes": _records(class_table(seg)),
                    "fusion": _records(fusion_candidates(k, rules.fusion, policy.family_suffix))})
    return {"capture": str(capture_path), "rules": rules.path, "rules_digest": rules.digest,
            "counterexamples": list(rules.counterexamples), "ranks": out}
