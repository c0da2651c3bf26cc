"""Small frozen records that travel between layers, with JSON round-trips.

Tables themselves stay pandas DataFrames with documented columns (see
:mod:`perfgate.ingest.kernels` and :mod:`perfgate.ingest.steps`); these records carry
what is computed from them.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from perfgate import terms

FINGERPRINT_SCHEMA = 1

_KEY_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)(?:\{(?P<labels>.*)\})?$")


def metric_key(name: str, **labels: Any) -> str:
    """Stable metric id, e.g. ``kernel.calls_per_step{family=MatMulV2,view=rank0}``.

    Labels are sorted by name; values must not contain ``,`` ``=`` ``{`` ``}`` (they are
    replaced by ``_`` so a kernel name can never break the id).
    """
    if not labels:
        return name
    parts = []
    for k in sorted(labels):
        v = str(labels[k])
        for ch in ",={}":
            v = v.replace(ch, "_")
        parts.append(f"{k}={v}")
    return f"{name}{{{','.join(parts)}}}"


def parse_metric_key(key: str) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`metric_key`: ``(name, labels)``."""
    m = _KEY_RE.match(key)
    if not m:
        return key, {}
    labels = {}
    if m.group("labels"):
        for part in m.group("labels").split(","):
            k, _, v = part.partition("=")
            labels[k] = v
    return m.group("name"), labels


@dataclass(frozen=True)
class MetricValue:
    """One fingerprint quantity.

    ``value`` is a float (or a sorted list of str for set metrics such as the Top-N kernel
    families). ``unit`` is the registry's (:mod:`perfgate.metrics.registry`: ``us``, ``calls``,
    ``ratio`` (0..1; rendered as percent), ``set``, ``steps``, ``GB/s``, ...). ``caliber`` is
    one of :data:`perfgate.terms.CALIBERS` (``sum_duration`` / ``busy_union`` / ``elapsed``)
    for time figures, else None; ``tier`` one of ``terms.TIER_*`` (1-4).
    ``evidence`` names the file(s) and rows the value was computed from.
    ``samples`` (optional, same unit as ``value``) are the per-step values the median
    ``value`` was reduced from, pooled over the captures of one side (see
    :mod:`perfgate.metrics.repeat`); None for counts, sets and fingerprints written before
    samples existed (such metrics are compared by tolerance only).
    """
    key: str
    name: str
    labels: dict
    value: Any
    unit: str
    caliber: str | None = None
    tier: int = terms.TIER_EXACT
    evidence: str = ""
    context: dict = field(default_factory=dict)
    samples: list | None = None

    def to_dict(self) -> dict:
        """The fields as a dict (``samples`` left out when None), nested dicts and lists copied:
        equal to ``dataclasses.asdict`` (its recursive deep copy is the fallback), without its
        per-value Python calls where every value is a plain JSON value (:func:`_copy_plain`; a
        5,236-step fingerprint's metrics hold ~3M per-step samples)."""
        d = dict(self.__dict__)
        try:
            d["labels"], d["value"], d["context"], d["samples"] = (
                _copy_plain(self.labels), _copy_plain(self.value), _copy_plain(self.context), _copy_plain(self.samples))
        except _NotPlain:
            d = asdict(self)
        if self.samples is None:
            d.pop("samples")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MetricValue":
        return cls(**d)


class _NotPlain(Exception):
    """A value :func:`_copy_plain` leaves to ``dataclasses.asdict``."""


_PLAIN_ATOMS = frozenset((str, int, float, bool, type(None)))


def _copy_plain(o):
    """A copy of ``o`` as ``dataclasses.asdict`` makes it (dicts and lists rebuilt, immutable
    atoms shared) when ``o`` holds only dicts, lists, str, int, float, bool and None; raises
    :class:`_NotPlain` on anything else (tuples, numpy scalars, dataclasses...)."""
    t = type(o)
    if t in _PLAIN_ATOMS:
        return o
    if t is list:
        if set(map(type, o)) <= _PLAIN_ATOMS:
            return list(o)
        return [_copy_plain(v) for v in o]
    if t is dict:
        return {k: _copy_plain(v) for k, v in o.items()}
    raise _NotPlain(t)


def _fast_from_dict(cls, d: dict):
    """``cls(**d)`` for a frozen dataclass whose fields are plain values: when ``d`` holds
    exactly the field names the instance's ``__dict__`` is filled directly (a 5,236-step baseline
    holds ~31k self-checks and ~16k findings: half the time of the generated ``__init__``); any
    other key set goes through ``cls(**d)`` (a missing or unknown key raises its TypeError)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    if d.keys() == names:
        obj = object.__new__(cls)
        obj.__dict__.update(d)
        return obj
    return cls(**d)


_FIELD_NAMES: dict = {}


@dataclass(frozen=True)
class SelfCheck:
    """Result of one capture self-check: status is ``pass``, ``fail``, ``warn`` or ``skipped``."""
    name: str
    rank: int | None
    step: str | None
    status: str
    message: str
    expected: float | None = None
    observed: float | None = None
    tolerance: float | None = None
    evidence: str = ""

    def to_dict(self) -> dict:
        # every field is a str / int / float / None: a field-order copy equals asdict(self),
        # without its recursive deep copy (a 5,236-step capture holds ~31k self-checks)
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> "SelfCheck":
        return _fast_from_dict(cls, d)


@dataclass(frozen=True)
class Finding:
    """A labelled observation about a capture (e.g. SLOW_RANK, WARMUP_NOT_STRIPPED).

    ``severity``: ``info`` (reported), ``warn`` (reported prominently) or ``fail`` (the
    policy makes it fail closed). ``code`` is a stable UPPER_SNAKE label.
    """
    code: str
    severity: str
    rank: int | None
    step: str | None
    message: str
    evidence: str = ""
    value: float | None = None
    threshold: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)  # flat fields, as SelfCheck.to_dict

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        return _fast_from_dict(cls, d)


def from_columns(cls, *columns) -> list:
    """Instances of the frozen dataclass ``cls`` (e.g. :class:`SelfCheck`, :class:`Finding`), one
    per position of ``columns``: one iterable per field, every field in declaration order
    (``itertools.repeat(x)`` for a constant; at least one column finite). Equal to
    ``[cls(*row) for row in zip(*columns)]`` (same fields, values and ``to_dict``), but built by
    C-level passes (``object.__new__`` and one ``__dict__`` per instance, as ``__init__`` would
    fill it), so a table of N checks or findings costs no Python-level call per row."""
    import dataclasses
    import gc
    from collections import deque
    from itertools import repeat
    names = tuple(f.name for f in dataclasses.fields(cls))
    if len(columns) != len(names):
        raise TypeError(f"{cls.__name__} has {len(names)} fields, got {len(columns)} columns")
    enabled = gc.isenabled()
    gc.disable()   # two new containers per row: the cyclic collector's passes would cost more than the build
    try:
        rows = list(zip(*columns))
        objs = list(map(object.__new__, repeat(cls, len(rows))))
        deque(map(object.__setattr__, objs, repeat("__dict__"), map(dict, map(zip, repeat(names), rows))), maxlen=0)
    finally:
        if enabled:
            gc.enable()
    return objs


@dataclass(frozen=True)
class Fingerprint:
    """Everything the gate trusts about one capture.

    ``config`` holds the comparability facets (profiler level, aic metrics, toolchain
    versions, world size, which kernel_details columns carry values); ``provenance`` says
    where it came from; ``metrics`` maps metric key -> MetricValue (sorted by key on output).
    """
    schema: int
    perfgate_version: str
    provenance: dict
    config: dict
    metrics: dict
    self_checks: tuple = ()
    warnings: tuple = ()
    policy_digest: str = ""
    findings: tuple = ()
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "detail": self.detail,
            "schema": self.schema,
            "perfgate_version": self.perfgate_version,
            "provenance": self.provenance,
            "config": self.config,
            "policy_digest": self.policy_digest,
            "warnings": list(self.warnings),
            "self_checks": [c.to_dict() for c in self.self_checks],
            "metrics": {k: self.metrics[k].to_dict() for k in sorted(self.metrics)},
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Fingerprint":
        return cls(
            schema=d["schema"], perfgate_version=d.get("perfgate_version", "?"),
            provenance=d.get("provenance", {}), config=d.get("config", {}),
            metrics={k: MetricValue.from_dict(v) for k, v in d.get("metrics", {}).items()},
            self_checks=tuple(SelfCheck.from_dict(c) for c in d.get("self_checks", [])),
            warnings=tuple(d.get("warnings", [])), policy_digest=d.get("policy_digest", ""),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", [])),
            detail=d.get("detail", {}),
        )


@dataclass(frozen=True)
class Comparison:
    """The verdict on one metric: baseline vs candidate under one rule.

    ``delta`` is candidate − baseline in the metric's unit (percentage points for ratios
    are ``delta * 100``); ``delta_rel`` is delta / |baseline| (None when baseline is 0).
    ``fails`` is True only for a gated regression. ``reason`` is a full sentence.
    ``stats`` (repeated captures only, :mod:`perfgate.compare.stats`): sample sizes, runs, Mann-Whitney
    U p (reported only), the Hodges-Lehmann effect and its distribution-free
    interval (``ci``, coverage ``ci_level``), runs needed; for a share or step ratio, ``part``
    (:class:`perfgate.compare.parts.Part`: own times, device scale, explained range, excess and its
    bound, us per step). ``attribution``: for a regressed aggregate, the kernel families
    whose calls / ΣDuration per step changed most (dicts with ``family``, ``calls_base``,
    ``calls_cand``, ``sum_dur_base_us``, ``sum_dur_cand_us``, ``delta_us``). ``subject``: the
    text naming the measured value, view tag included ("HCCL allgather calls per step [p50]"),
    the start of ``reason``; reports take it from here, never by cutting ``reason`` at a colon
    (a reason's own text, "(new: absent from the baseline)", holds one).
    """
    key: str
    name: str
    labels: dict
    verdict: str
    gated: bool
    fails: bool
    baseline: Any
    candidate: Any
    unit: str
    caliber: str | None
    tier: int
    delta: float | None
    delta_rel: float | None
    tolerance: str
    reason: str
    evidence: str = ""
    stats: dict = field(default_factory=dict)
    attribution: list = field(default_factory=list)
    subject: str = ""

    def subject_text(self) -> str:
        """``subject``; for a Comparison built without one, the start of its reason: through the
        view tag (`` [p50]``) when the reason holds it (a description may hold a colon itself),
        else up to the first ": "."""
        if self.subject:
            return self.subject
        view = self.labels.get("view")
        tag = f" [{view}]"
        if view and tag in self.reason:
            return self.reason[: self.reason.index(tag) + len(tag)]
        return self.reason.split(": ", 1)[0]

    def reason_tail(self) -> str:
        """``reason`` after its subject and the ": " that follows it (the change and the rule)."""
        head = self.subject_text()
        if self.reason.startswith(head + ": "):
            return self.reason[len(head) + 2:]
        return self.reason.split(": ", 1)[-1]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    """Outcome of ``perfgate check``: status is PASS / REGRESSION / UNSURE / NO_BASELINE /
    INVALID_CAPTURE / INCOMPATIBLE_BASELINE / DAMAGED_BASELINE (the baseline store is damaged) /
    STORE_ERROR (the baseline store cannot be opened)."""
    status: str
    exit_code: int
    comparisons: tuple = ()
    self_checks: tuple = ()
    notes: tuple = ()
    baseline_name: str | None = None
    baseline_provenance: dict | None = None
    candidate_provenance: dict | None = None
    error: dict | None = None
    elapsed_s: float = 0.0
    findings: tuple = ()
    detail: dict = field(default_factory=dict)
    causes: tuple = ()        # dicts of perfgate.compare.causes.find_causes
    unexplained: tuple = ()   # gated moved metric keys no cause explains

    def counts(self) -> dict:
        """Verdict counts, split unambiguously: ``gated`` and ``informational`` ({verdict: n,
        ``total``: n}), ``gated_regressions`` (failing metrics), ``gated_incomparable``, and
        ``all`` ({verdict: n} over every metric, gated or not)."""
        c = {"gated": {str(v): 0 for v in terms.VERDICTS}, "informational": {str(v): 0 for v in terms.VERDICTS},
             "all": {str(v): 0 for v in terms.VERDICTS}}
        for cmp in self.comparisons:
            c["gated" if cmp.gated else "informational"][str(cmp.verdict)] += 1
            c["all"][str(cmp.verdict)] += 1
        c["gated"]["total"] = sum(1 for cmp in self.comparisons if cmp.gated)
        c["informational"]["total"] = len(self.comparisons) - c["gated"]["total"]
        c["gated_regressions"] = sum(1 for cmp in self.comparisons if cmp.fails)
        c["gated_incomparable"] = c["gated"][str(terms.INCOMPARABLE)]
        return c

    def to_dict(self) -> dict:
        return {
            "verdict": self.status, "exit_code": self.exit_code, "counts": self.counts(),
            "causes": [dict(x) for x in self.causes], "unexplained": list(self.unexplained),
            "baseline_name": self.baseline_name,
            "baseline_provenance": self.baseline_provenance,
            "candidate_provenance": self.candidate_provenance,
            "notes": list(self.notes), "error": self.error, "elapsed_s": self.elapsed_s,
            "self_checks": [c.to_dict() for c in self.self_checks],
            "findings": [f.to_dict() for f in self.findings],
            "detail": self.detail,
            "comparisons": [c.to_dict() for c in self.comparisons],
        }
