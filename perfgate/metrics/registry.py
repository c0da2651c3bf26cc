"""The metric registry: every quantity the fingerprint can hold, with its unit, caliber,
tier, what it needs from the capture, and where its formula comes from.

Directions, tolerances and gating are the policy's (``perfgate/policies/default.yaml``); this table
holds only what is true of the quantity itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from perfgate import terms
from perfgate.model import metric_key, parse_metric_key


@dataclass(frozen=True)
class MetricDef:
    """``absent_is_zero``: a key missing on one side means 0 (a kernel family with no calls),
    not "not measured". ``requires``: comparability facets of the fingerprint config that
    must hold on both sides (else the metric is incomparable). ``per_kernel``: demoted to
    informational when the toolchain (CANN / torch_npu) changed (case G07).
    ``recorded_for``: the metric is recorded for some label values only (``kernel.time_us``: each
    rank's Top-N + slack families): a key absent on one side is "not recorded there", never 0
    and never new / gone.
    ``caliber_note``: for a metric without a time caliber (``caliber`` None), what its figure
    is measured on: a count, a wall-clock span, a ratio of file fields, or the caliber carried
    per value (``device.time_us``, ``rank.skew_ratio``). docs/metrics.md is generated from
    these fields (:func:`perfgate.report.docs.render_metrics_reference`)."""
    name: str
    unit: str
    caliber: str | None
    tier: int
    description: str
    source: str
    absent_is_zero: bool = False
    requires: tuple = ()
    per_kernel: bool = False
    subject: str | None = None   # short text naming one labelled value, e.g. "{kind} blocks per step"
    labels: tuple = ()           # label keys a value of this metric carries, besides ``view``
    caliber_note: str | None = None
    recorded_for: str | None = None   # recorded for some label values only: which (absent = not recorded)


# caliber notes shared by several metrics without a time caliber
_COUNT = "count (not a time figure)"


_DEFS = [
    MetricDef("kernel.calls_per_step", "calls", None, terms.TIER_EXACT,
              "calls per step of one kernel family (median over steps, an observed count)",
              "count of kernel_details.csv rows per Step Id and family", absent_is_zero=True,
              per_kernel=True, labels=('family',),
              caliber_note=_COUNT,
              subject="calls per step of kernel family {family}"),
    MetricDef("kernel.total_calls_per_step", "calls", None, terms.TIER_EXACT,
              "all kernel calls per step (lower median over steps, an observed count)",
              "count of kernel_details.csv rows per Step Id",
              caliber_note=_COUNT),
    MetricDef("optype.calls_per_step", "calls", None, terms.TIER_EXACT,
              "calls per step of one operator type (Type / OP Type)",
              "count of kernel_details.csv rows per Step Id and Type", absent_is_zero=True,
              requires=("type_available",), per_kernel=True, labels=('type',),
              caliber_note=_COUNT,
              subject="calls per step of operator type {type}"),
    MetricDef("kernel.invalid_rows", "rows", None, terms.TIER_EXACT,
              "kernel rows left out of the rank: N/A or empty Duration(us) (P06; a negative one is refused)",
              "kernel_details.csv rows that could not be counted",
              caliber_note=_COUNT),
    MetricDef("kernel.unassigned_rows", "rows", None, terms.TIER_EXACT,
              "kernel rows of the rank with a blank Step Id, outside every step (P05)", "kernel_details.csv Step Id",
              caliber_note=_COUNT),
    MetricDef("kernel.topn", "set", terms.SUM_DURATION, terms.TIER_EXACT,
              "the Top-N kernel families by ΣDuration per step",
              "ΣDuration per family, ranked", per_kernel=True),
    MetricDef("share.core_type", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step on one core type (Accelerator Core)",
              "Σ Duration(us) by Accelerator Core / Σ Duration(us), as msprof op_statistic Ratio(%)",
              absent_is_zero=True, requires=("core_available",), per_kernel=True, labels=('core_type',),
              subject="ΣDuration share of core type {core_type}"),
    MetricDef("share.category", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step in one category (policy rules)",
              "Σ Duration(us) by category / Σ Duration(us)", absent_is_zero=True,
              requires=("type_available", "core_available", "categories_digest"), per_kernel=True, labels=('category',),
              subject="ΣDuration share of category {category}"),
    MetricDef("step.time_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "step time = Computing + Communication(Not Overlapped) + Free: the step's elapsed time, idle "
              "time included (the busy union of the step is Computing + Communication(Not Overlapped))",
              "step_trace_time.csv; msprof-analyze cluster_analyse step_trace_time_analysis"),
    MetricDef("step.computing_us", "us", terms.BUSY_UNION, terms.TIER_STEP,
              "Computing: merged compute intervals per step",
              "step_trace_time.csv Computing (else trace_view.json Overlap Analysis)"),
    MetricDef("step.comm_us", "us", terms.BUSY_UNION, terms.TIER_STEP,
              "Communication: communication op time per step",
              "step_trace_time.csv Communication (else trace_view.json Overlap Analysis)"),
    MetricDef("step.comm_not_overlapped_us", "us", terms.BUSY_UNION, terms.TIER_STEP,
              "exposed communication: communication not covered by compute",
              "step_trace_time.csv Communication(Not Overlapped) (else trace_view.json Overlap Analysis)"),
    MetricDef("step.overlapped_us", "us", terms.BUSY_UNION, terms.TIER_STEP,
              "communication overlapped by compute",
              "step_trace_time.csv Overlapped = Communication − Communication(Not Overlapped)"),
    MetricDef("step.free_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "Free: device neither computing nor communicating (elapsed step time minus its busy union)",
              "step_trace_time.csv Free (else trace_view.json Overlap Analysis)"),
    MetricDef("step.exposed_comm_ratio", "ratio", terms.BUSY_UNION, terms.TIER_STEP,
              "exposed-communication ratio = Comm(Not Overlapped) / Communication (only when every "
              "step has Communication > 0)",
              "step_trace_time.csv (else trace_view.json Overlap Analysis)"),
    MetricDef("step.count", "steps", None, terms.TIER_EXACT, "number of steps in the capture",
              "distinct Step Id values in kernel_details.csv",
              caliber_note=_COUNT),
    MetricDef("device.time_us", "us", None, terms.TIER_STEP,
              "device time per step of all kernel rows in one caliber (label caliber)",
              "kernel_details.csv: ΣDuration = Σ Duration(us); busy union = merged intervals", labels=('caliber',),
              caliber_note="one value per caliber: label caliber = sum_duration (ΣDuration) or busy_union (busy union)",
              subject="device time per step ({caliber})"),
    MetricDef("comm.elapse_us", "us", terms.SUM_DURATION, terms.TIER_CONTEXT,
              "Σ Elapse Time of communication ops per step (ms in the file, us here)",
              "communication.json, 'Total Op Info' skipped", requires=("has_comm_json",)),
    MetricDef("kernel.time_us", "us", terms.SUM_DURATION, terms.TIER_CONTEXT,
              "ΣDuration per step of one kernel family (context only: single-kernel time drifts "
              "up to ~2x between devices)", "kernel_details.csv Duration(us)",
              per_kernel=True, labels=('family',),
              recorded_for="the kernel families in some rank's Top-N + slack by ΣDuration",
              subject="ΣDuration per step of kernel family {family}"),
    # host-bound step anatomy (perfgate.metrics.steps), medians over steps
    MetricDef("step.wall_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "device span of the step: last task end − first task start", "kernel_details.csv"),
    MetricDef("step.bubble_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "device idle inside the span: wall − busy union", "kernel_details.csv merged intervals"),
    MetricDef("step.underfeed_ratio", "ratio", terms.ELAPSED, terms.TIER_STEP,
              "underfeed ratio = bubble / wall", "kernel_details.csv merged intervals"),
    MetricDef("step.prelaunch_gap_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "host step start -> first device task (Preparing)",
              "trace ProfilerStep#N start, kernel_details.csv first Start Time(us); step_trace_time.csv Preparing when there is no trace"),
    MetricDef("step.tail_gap_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "last device task -> host step end (needs the trace)",
              "trace ProfilerStep#N end, kernel_details.csv last task end"),
    MetricDef("step.internal_bubble_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "idle gaps inside the step longer than findings.bubble_min_us (10 us), summed",
              "kernel_details.csv merged intervals"),
    MetricDef("step.largest_bubble_us", "us", terms.ELAPSED, terms.TIER_CONTEXT,
              "the largest idle gap inside the step", "kernel_details.csv merged intervals"),
    # communication (perfgate.metrics.comm)
    MetricDef("comm.calls_per_step", "calls", None, terms.TIER_EXACT,
              "HCCL op calls per step of one kind (allreduce, allgather, ...)",
              "kernel_details.csv communication rows by name", absent_is_zero=True, labels=('kind',),
              caliber_note=_COUNT,
              subject="HCCL {kind} calls per step"),
    MetricDef("comm.time_us", "us", terms.SUM_DURATION, terms.TIER_CONTEXT,
              "ΣDuration per step of one HCCL kind", "kernel_details.csv", absent_is_zero=True, labels=('kind',),
              subject="ΣDuration per step of HCCL {kind}"),
    MetricDef("comm.exposed_us", "us", terms.SUM_DURATION, terms.TIER_STEP,
              "uncovered communication per step of one HCCL kind: Σ over its rows of Duration minus "
              "the part the compute busy union covers (ΣDuration-based, overlapping rows count twice; "
              "not the exposed communication of step.comm_not_overlapped_us; the key keeps its "
              "recorded name)",
              "kernel_details.csv: communication rows minus the compute busy union, per row", absent_is_zero=True, labels=('kind',),
              subject="uncovered communication per step of HCCL {kind}"),
    MetricDef("comm.wait_ratio", "ratio", None, terms.TIER_CONTEXT,
              "wait ratio = Σ Wait / (Σ Wait + Σ Transit) over every op of the rank",
              "communication.json Wait / Transit Time(ms) (msprof-analyze communication_analysis)",
              requires=("has_comm_json",),
              caliber_note="ratio of op times summed over communication.json ops (no interval union)"),
    MetricDef("comm.bandwidth_gbps", "GB/s", None, terms.TIER_CONTEXT,
              "bandwidth per link type = Σ Transit Size (MB) / Σ Transit Time (ms), over every op of the rank",
              "communication.json Communication Bandwidth Info", requires=("has_comm_json",), labels=('link',),
              caliber_note="bytes over summed Transit Time of communication.json (not a device-time figure)",
              subject="bandwidth of {link} links"),
    # family view (perfgate.metrics.operators, perfgate.metrics.mfu), medians over steps
    MetricDef("share.family", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step of one kernel family",
              "Σ Duration(us) of the family / Σ Duration(us), kernel_details.csv", absent_is_zero=True,
              requires=("operator_digest",), per_kernel=True, labels=('family',),
              subject="ΣDuration share of kernel family {family}"),
    MetricDef("share.phase", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step in one model phase (policy phase rules)",
              "Σ Duration(us) by phase / Σ Duration(us)", absent_is_zero=True,
              requires=("operator_digest",), per_kernel=True, labels=('phase',),
              subject="ΣDuration share of phase {phase}"),
    MetricDef("share.phase_category", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step in one (phase, category)",
              "Σ Duration(us) by phase and category / Σ Duration(us)", absent_is_zero=True,
              requires=("type_available", "core_available", "categories_digest", "operator_digest"),
              per_kernel=True, labels=('category', 'phase'),
              subject="ΣDuration share of category {category} in phase {phase}"),
    MetricDef("pipe.bound_share", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of the rank's ΣDuration (all steps) in kernel families bound by one pipe family "
              "(cube, vector, aic_mte, ...)",
              "largest summed PipeUtilization stage time per family (aic_mac_time(us), ...), kernel_details.csv",
              absent_is_zero=True, requires=("pipe_available",), per_kernel=True, labels=('bound',),
              subject="ΣDuration share of kernel families bound by {bound}"),
    MetricDef("pipe.memory_bound", "x", None, terms.TIER_CONTEXT,
              "memory_bound = mte2_ratio / max(mac_ratio, vec_ratio) of one kernel family above "
              "operators.family_min_share, over all its calls (> 1: MTE2-bound)",
              "Duration-weighted PipeUtilization ratios, kernel_details.csv", requires=("pipe_available",),
              per_kernel=True, labels=('family',),
              recorded_for="the kernel families above operators.family_min_share of a rank's ΣDuration",
              caliber_note="ratio of Duration-weighted PipeUtilization ratios (dimensionless)",
              subject="memory_bound (mte2 / max(mac, vec)) of kernel family {family}"),
    MetricDef("mfu.ratio", "ratio", None, terms.TIER_STEP,
              "MFU of one kernel family = Σ FLOPs / Σ (Duration(s) × peak FLOP/s of the call's dtype), "
              "over all its calls",
              "FLOPs spec (policy mfu.spec) over Input Shapes; peak table policy mfu.peaks",
              requires=("mfu_digest",), per_kernel=True, labels=('family',),
              caliber_note="ΣDuration denominator: FLOPs over Σ (Duration(us) × dtype peak) of the family's calls",
              subject="MFU of kernel family {family}"),
    MetricDef("rank.skew_ratio", "ratio", None, terms.TIER_STEP,
              "rank skew = (max − min) / mean over ranks of a per-rank metric (label metric)",
              "per-rank values of the named metric", labels=('metric',),
              caliber_note="the caliber of the per-rank metric it is computed over (carried on each value)",
              subject="rank skew of {metric}"),
    # model structure (perfgate.metrics.segments; rules in perfgate/policies/segments.yaml)
    MetricDef("layer.count", "layers", None, terms.TIER_EXACT,
              "model layers on this rank: layers per forward micro-batch (lower median over micro-batches)",
              "kernel_details.csv rows in time order cut at the model's layer boundaries (segments.yaml)",
              requires=("segments_digest",), subject="model layers (layer count)", caliber_note=_COUNT),
    MetricDef("microbatch.count_per_step", "micro-batches", None, terms.TIER_EXACT,
              "forward micro-batches per step: runs of touching forward layers (lower median over steps)",
              "layer runs between pipeline / embedding / loss segments", requires=("segments_digest",),
              subject="micro-batches per step", caliber_note=_COUNT),
    MetricDef("pass.count_per_step", "passes", None, terms.TIER_EXACT,
              "passes per step (forward, backward, recompute)", "anchor kinds: forward / backward kernels; "
              "forward layers inside a backward run are recompute", requires=("segments_digest",),
              subject="passes per step", caliber_note=_COUNT),
    MetricDef("layer.class_count", "layers", None, terms.TIER_EXACT,
              "layers per micro-batch pass of one recurring layer class (labels pass, class; 'unique' = "
              "layers whose class occurs once per micro-batch pass)", "ordered kernel families per layer, hashed",
              absent_is_zero=True, requires=("segments_digest",), subject="{pass} layers of class {class}",
              labels=('class', 'pass'), caliber_note=_COUNT),
    MetricDef("block.count", "blocks", None, terms.TIER_EXACT,
              "blocks per micro-batch pass of one kind (attention | ffn | moe | aicpu | other) in recurring layers",
              "layers cut at norm kernels and AI_CPU runs", absent_is_zero=True, requires=("segments_digest",),
              subject="{kind} blocks per {pass} micro-batch (recurring layers)", labels=('kind', 'pass'),
              caliber_note=_COUNT),
    MetricDef("block.share", "ratio", terms.SUM_DURATION, terms.TIER_SHARE,
              "share of ΣDuration per step in blocks of one kind ('unstructured' = head, tail and "
              "non-recurring layers)", "Σ Duration(us) of the blocks / Σ Duration(us) of the step",
              absent_is_zero=True, requires=("segments_digest",), subject="ΣDuration share of {kind} blocks", labels=('kind',)),
    MetricDef("layer.wall_p50_us", "us", terms.ELAPSED, terms.TIER_STEP,
              "median wall span (caliber: last end − first start of the layer's rows, all streams) of the "
              "layers of one pass",
              "kernel_details.csv Start Time(us) + Duration(us)", requires=("segments_digest",),
              subject="median {pass} layer wall", labels=('pass',)),
]
REGISTRY: dict[str, MetricDef] = {d.name: d for d in _DEFS}


# rank.skew_ratio{metric=M, ...} carries M's labels (no view: it is computed over all ranks)
_NO_VIEW = frozenset({"rank.skew_ratio"})


def label_keys(name: str) -> frozenset:
    """The label keys a value of metric ``name`` carries: its definition's ``labels`` plus
    ``view`` (rank0 / p50 / max, or a stage's ``stage<S>.p50`` / ``stage<S>.max``), except
    ``rank.skew_ratio``, which carries ``metric`` and the labels of that per-rank metric (and
    ``stage`` in a capture of several pipeline stages), and no view. The policy's override and suggestion labels
    are checked against this (:meth:`perfgate.policy.Policy.check_labels`); a test checks that
    every fingerprint value's labels are among them.

    Raises:
        KeyError: unknown metric name.
    """
    d = REGISTRY[name]
    keys = set(d.labels)
    if name in _NO_VIEW:
        for other in REGISTRY.values():
            if other.name not in _NO_VIEW:
                keys.update(other.labels)
        keys.add("stage")   # a skew within one pipeline stage (perfgate.metrics.stages)
    else:
        keys.add("view")
    return frozenset(keys)


def all_label_keys() -> dict:
    """{metric name: :func:`label_keys`} for every registered metric."""
    return {n: label_keys(n) for n in REGISTRY}


def subject(name: str, labels: dict) -> str:
    """Text naming one value of metric ``name`` with ``labels`` (view excluded): the
    definition's ``subject`` filled with the labels, else its description (else the name)."""
    d = REGISTRY.get(name)
    if d is None:
        return name
    if d.subject:
        shown = dict(labels)
        if "caliber" in shown:   # the caliber's name as the reports print it (ΣDuration, busy union)
            shown["caliber"] = terms.CALIBER_LABEL.get(shown["caliber"], shown["caliber"])
        try:
            return d.subject.format(**shown)
        except (KeyError, IndexError):
            pass
    return d.description


def get(name: str) -> MetricDef:
    """The definition of metric ``name`` (KeyError for an unknown name)."""
    return REGISTRY[name]


_TIERS = frozenset((terms.TIER_EXACT, terms.TIER_SHARE, terms.TIER_STEP, terms.TIER_CONTEXT))
TIME_UNITS = frozenset(("us", "ms"))
#: units of counted things: a negative count is no capture's
COUNT_UNITS = frozenset(("calls", "steps", "rows", "layers", "micro-batches", "passes", "blocks"))
#: time metrics whose value can be negative, so no sign is refused for them:
#: ``step.prelaunch_gap_us`` (host step start -> first device task) and ``step.tail_gap_us`` (last
#: device task -> host step end) compare a host clock with device tasks that run asynchronously
#: (a device task may start before the host marker or end after it); ``step.overlapped_us`` is
#: Communication − Communication(Not Overlapped), a difference of two step_trace_time.csv fields
#: each rounded as written, so just below 0 when nothing overlaps. Every other time is a
#: duration, a busy union or an idle span (``step.bubble_us``, ``step.free_us``: elapsed minus
#: busy), none below 0. Of the ratios, ``rank.skew_ratio`` ((max − min) / mean) is recorded only
#: for a positive mean, and ``mfu.ratio``, ``pipe.memory_bound`` can exceed 1: only shares are
#: bounded here.
SIGNED_TIMES = frozenset(("step.prelaunch_gap_us", "step.tail_gap_us", "step.overlapped_us"))
_SHARE_SLACK = 1e-9   # a share is a part over its whole: above 1 by rounding at most


def check_stored(key: str, m) -> None:
    """Check one stored metric value (a :class:`perfgate.model.MetricValue` read back from a
    baseline file or the history database) against its key and its kind: ``name`` and ``labels``
    those of ``key`` (:func:`perfgate.model.parse_metric_key`; labels compared as
    :func:`perfgate.model.metric_key` writes them), tier one of ``terms.TIER_*``, caliber one of
    ``terms.CALIBERS`` or None, unit a string, value a list of str for a set metric (unit
    ``set``, e.g. ``kernel.topn``) and else a finite number within 64 bits, and physically possible by the registry's unit of the name: a time (us, ms) not
    negative except :data:`SIGNED_TIMES`, a count (:data:`COUNT_UNITS`) not negative, a share
    (a ratio of tier ``TIER_SHARE``: ``share.*``, ``pipe.bound_share``, ``block.share``) within
    [0, 1]. A metric name the registry does not know is checked by its stored unit only.

    Raises:
        ValueError: the first field that is not of its kind; the message starts with
            ``metric 'KEY'`` and names the field and its value.
    """
    if not isinstance(m.labels, dict) or not isinstance(m.name, str):
        raise ValueError(f"metric {key!r} has labels {m.labels!r} and name {m.name!r}")
    if m.key != key:   # the comparison reads the dict key, the reports the inner one
        raise ValueError(f"metric {key!r} is stored with key {m.key!r}")
    name, labels = parse_metric_key(key)
    if m.name != name:   # the policy's rules and the reports read the name, the comparison the key
        raise ValueError(f"metric {key!r} has name {m.name!r} (its key names {name!r})")
    if not all(isinstance(k, str) for k in m.labels) or metric_key(name, **m.labels) != key:
        raise ValueError(f"metric {key!r} has labels {m.labels!r} (its key names {labels!r})")
    if type(m.tier) is not int or m.tier not in _TIERS:
        raise ValueError(f"metric {key!r} has tier {m.tier!r} (one of {sorted(_TIERS)})")
    if m.caliber is not None and m.caliber not in terms.CALIBERS:
        raise ValueError(f"metric {key!r} has caliber {m.caliber!r} (one of {list(terms.CALIBERS)} or null)")
    if not isinstance(m.unit, str):
        raise ValueError(f"metric {key!r} has unit {m.unit!r}")
    # the registry's unit, not the stored one, says what the value is: a stored unit may be an
    # older perfgate's (pipe.memory_bound was "ratio" before "x"), never a way around the checks
    d = REGISTRY.get(name)
    unit = d.unit if d is not None else m.unit
    v = m.value
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        if unit != "set":   # the comparison would subtract it from a number
            raise ValueError(f"metric {key!r} has the list value {str(v)[:40]} where a number belongs")
        return
    if unit == "set":   # the comparison would iterate it (Top-N set membership)
        raise ValueError(f"metric {key!r} has value {str(v)[:40]} where a list of names belongs")
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ValueError(f"metric {key!r} has value {v!r}")
    if type(v) is int and abs(v) >= 2 ** 63:   # never written by perfgate; no float holds it
        raise ValueError(f"metric {key!r} has value {str(v)[:24]}... (out of range)")
    if isinstance(v, float) and not math.isfinite(v):  # NaN / Infinity: not JSON
        raise ValueError(f"metric {key!r} has value {v!r} (not a finite number)")
    if v < 0 and unit in TIME_UNITS and name not in SIGNED_TIMES:
        raise ValueError(f"metric {key!r} has value {v!r} (a negative time in {unit})")
    if v < 0 and unit in COUNT_UNITS:
        raise ValueError(f"metric {key!r} has value {v!r} (a negative count of {unit})")
    if d is not None and d.tier == terms.TIER_SHARE and d.unit == "ratio" and not 0 <= v <= 1 + _SHARE_SLACK:
        raise ValueError(f"metric {key!r} has value {v!r} (a share, within 0..1)")


def journal_metric_problem(key: str) -> str | None:
    """Why ``key`` cannot be the tuning journal's key metric (``history.key_metric``, ``history
    journal --metric``), or None: its name must be a metric of the registry
    (:mod:`perfgate.metrics.registry`) that holds a number, not a set such as ``kernel.topn``
    (the journal divides values)."""
    import difflib
    try:
        name, _ = parse_metric_key(key)
        d = get(name)
    except (KeyError, ValueError):
        near = difflib.get_close_matches(str(key).split("{")[0], sorted(REGISTRY), n=1)
        return f"unknown metric {key!r}" + (f"; did you mean {near[0]!r}?" if near else "")
    if d.unit == "set":
        return (f"{name} is a set metric ({d.description}): the journal follows a number, e.g. "
                f"step.time_us{{view=p50}}")
    return None
