"""Repeated captures of one commit: several fingerprints -> one side of a comparison.

Samples are hierarchical: kernel calls -> steps -> ranks -> captures (runs). A single kernel
call is never a sample. Per metric view the merged fingerprint keeps

* ``samples``: the per-step values of every capture pooled (unit of the metric: us, ratio);
  the statistical comparison (:mod:`perfgate.compare.stats`) tests on these;
* ``value``: the median of the pooled per-step samples, or, for metrics without samples,
  the median over captures (counts: the lower median, an observed count; Top-N sets: the
  families re-ranked by their median ΣDuration over captures);
* ``context["runs"]``: how many captures carried the metric, and ``context["run_values"]``
  the per-capture values, so the number of runs is never lost in the pooling.

The merged fingerprint's ``config["captures"]`` is the number of captures; its provenance
lists each capture's source. Pure: no I/O.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from perfgate.errors import UsageError
from perfgate.metrics.collection import measured_difference
from perfgate.metrics.kernels import median_low
from perfgate.metrics.workload import other_workload
from perfgate.model import Fingerprint, MetricValue

# the comparability facets of perfgate.compare, and the profiler level and aic_metrics: between a
# baseline and a candidate these are notes, but repeated runs of ONE side are one job configuration
# (a Level2 run costs the job more profiling overhead than a Level1 run; another aic_metrics group
# measures other PMU columns), so pooling them would read the configuration change as noise
# (as perfgate.compare.calibrate.SAME_JOB refuses them for calibrate)
_CONFIG_MUST_MATCH = ("world_size", "ranks", "type_available", "core_available", "has_comm_json",
                      "family_suffix", "top_n", "categories_digest", "cann_version", "torch_npu_version",
                      "profiler_level", "aic_metrics")


def runs_of(fp: Fingerprint) -> int:
    """Number of captures a fingerprint stands for (1 for a single capture / old baseline)."""
    return int(fp.config.get("captures", 1) or 1)


def metric_runs(m: MetricValue) -> int:
    """Number of captures that carried this metric value (1 when it came from one capture)."""
    return int(m.context.get("runs", 1) or 1)


def _merge_topn(ms: list[MetricValue]) -> MetricValue:
    first = ms[0]
    n = int(first.context.get("n", len(first.value)))
    depth = len(first.context.get("ranked", [])) or n
    durs = defaultdict(list)
    fams = set().union(*[set(m.context.get("ranked", [])) for m in ms])
    for m in ms:
        got = dict(zip(m.context.get("ranked", []), m.context.get("sum_dur_us", [])))
        for f in fams:
            durs[f].append(float(got.get(f, 0.0)))
    ranked = sorted(((float(np.median(v)), f) for f, v in durs.items()), key=lambda x: (-x[0], x[1]))
    ctx = dict(first.context, ranked=[f for _, f in ranked[:depth]],
               sum_dur_us=[round(v, 3) for v, _ in ranked[:depth]], runs=len(ms))
    return MetricValue(key=first.key, name=first.name, labels=dict(first.labels),
                       value=sorted(f for _, f in ranked[:n]), unit=first.unit, caliber=first.caliber,
                       tier=first.tier, evidence=f"median ΣDuration over {len(ms)} capture(s); {first.evidence}",
                       context=ctx)


def require_one_job(fps: list[Fingerprint]) -> None:
    """Refuse fingerprints that cannot be repeated runs of one commit: a configuration facet
    that differs (:data:`_CONFIG_MUST_MATCH`: rank count, rank ids, Type / Accelerator Core
    availability, communication.json, fingerprint rules, toolchain versions, profiler level,
    aic_metrics), a profiler collection option that changes what is measured
    (:func:`perfgate.metrics.collection.measured_difference`: with_stack, record_shapes, ...) or
    another workload (:func:`perfgate.metrics.workload.other_workload`).

    Raises:
        UsageError: naming both captures (by their ``provenance["source"]``), the facet and both
            values, or how little their kernel families overlap."""
    ref = fps[0]
    for i, fp in enumerate(fps[1:], start=2):
        for facet in _CONFIG_MUST_MATCH:
            if fp.config.get(facet) != ref.config.get(facet):
                ranks = (f" (ranks {ref.config.get('ranks')} vs {fp.config.get('ranks')})"
                         if facet == "world_size" else "")
                raise UsageError(
                    f"capture {i} ({fp.provenance.get('source')}) differs from capture 1 "
                    f"({ref.provenance.get('source')}) in {facet}: {ref.config.get(facet)!r} vs "
                    f"{fp.config.get(facet)!r}{ranks}; repeated captures of one side must be the same job",
                    hint="pass captures of one job configuration per side")
        why = other_workload(ref, fp, names=("capture 1", f"capture {i}"))
        if why:
            raise UsageError(f"capture {i} ({fp.provenance.get('source')}) and capture 1 ({ref.provenance.get('source')}) "
                             f"are {why}; repeated captures of one side must be the same job",
                             hint="pass captures of one job configuration per side")
        option = measured_difference(ref.config, fp.config)
        if option:
            raise UsageError(
                f"capture {i} ({fp.provenance.get('source')}) differs from capture 1 "
                f"({ref.provenance.get('source')}) in the profiler collection option {option}: it changes "
                f"what is measured; repeated captures of one side must be the same job",
                hint="pass captures of one job configuration per side")


def merge_fingerprints(fps: list[Fingerprint]) -> Fingerprint:
    """Merge fingerprints of repeated captures of one commit into one side (see module doc).

    Args:
        fps: at least one :class:`Fingerprint`, all from the same job configuration.

    Returns:
        The first fingerprint unchanged when only one is given; else a merged one.

    Raises:
        UsageError: no fingerprint, or captures whose configuration differs (rank count,
            rank ids, Type / Accelerator Core availability,
            communication.json, fingerprint rules, toolchain versions, profiler level,
            aic_metrics), or captures of another workload (:func:`perfgate.metrics.workload.other_workload`):
            repeated runs of one commit must be the same job; the message names the facet and both values.
    """
    if not fps:
        raise UsageError("no capture given")
    if len(fps) == 1:
        return fps[0]
    require_one_job(fps)
    ref = fps[0]
    keys = sorted(set().union(*[set(fp.metrics) for fp in fps]))
    metrics = {}
    for key in keys:
        ms = [fp.metrics[key] for fp in fps if key in fp.metrics]
        first = ms[0]
        if first.unit == "set":
            metrics[key] = _merge_topn(ms)
            continue
        run_values = [float(m.value) for m in ms]
        samples = None
        if all(m.samples for m in ms):
            samples = [float(x) for m in ms for x in m.samples]
        if samples is not None:
            value = float(np.median(samples))
        elif first.unit in ("calls", "steps", "rows"):
            value = median_low(run_values)
        else:
            value = float(np.median(run_values))
        ctx = {k: v for k, v in first.context.items()}
        ctx.update(runs=len(ms), run_values=[round(v, 6) for v in run_values])
        if samples is not None:
            ctx["run_sizes"] = [len(m.samples) for m in ms]  # which pooled samples came from which capture
        ev = first.evidence if len(ms) == 1 else f"{len(ms)} capture(s); capture 1: {first.evidence}"
        metrics[key] = MetricValue(key=key, name=first.name, labels=dict(first.labels), value=value,
                                   unit=first.unit, caliber=first.caliber, tier=first.tier, evidence=ev,
                                   context=ctx, samples=samples)
    config = dict(ref.config, captures=len(fps))
    config["steps_per_rank"] = {r: sum(int(fp.config.get("steps_per_rank", {}).get(r, 0)) for fp in fps)
                                for r in ref.config.get("steps_per_rank", {})}
    prov = dict(ref.provenance)
    prov["captures"] = [fp.provenance.get("source") for fp in fps]
    prov["steps"] = {r: [f"c{i + 1}:{s}" for i, fp in enumerate(fps) for s in fp.provenance.get("steps", {}).get(r, [])]
                     for r in ref.provenance.get("steps", {})}
    warnings = tuple(f"capture {i + 1}: {w}" for i, fp in enumerate(fps) for w in fp.warnings)
    return Fingerprint(schema=ref.schema, perfgate_version=ref.perfgate_version, provenance=prov, config=config,
                       metrics=metrics, self_checks=tuple(c for fp in fps for c in fp.self_checks),
                       warnings=warnings, policy_digest=ref.policy_digest,
                       findings=tuple(f for fp in fps for f in fp.findings), detail=ref.detail)
