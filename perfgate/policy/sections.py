"""The policy's settings sections as frozen dataclasses, each default written once here.

``self_checks:``, ``findings:``, ``history:``, ``statistics:`` and ``parts:`` of a policy YAML become
:class:`SelfCheckSettings`, :class:`FindingThresholds`, :class:`HistorySettings`,
:class:`StatisticsSettings` and :class:`PartSettings`. A key absent from the YAML takes the field default below; the
allowed keys of a section are its field names. Each section also reads as a read-only mapping
(``section["alpha"]``, ``section.get("alpha")``, ``dict(section)``), the shape callers used
before the sections were typed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace


class _Section(Mapping):
    """Read-only mapping view of a frozen dataclass: its field names are the keys."""

    def __getitem__(self, key):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(fields(self))

    def keys(self):
        return [f.name for f in fields(self)]

    @classmethod
    def allowed(cls) -> list[str]:
        """The keys a policy file may set under this section, sorted."""
        return sorted(f.name for f in fields(cls))

    def with_values(self, values: dict):
        """A copy with ``values`` (already validated) replacing the defaults."""
        return replace(self, **values)


@dataclass(frozen=True, eq=True)
class SelfCheckSettings(_Section):
    """``self_checks:`` tolerances of :mod:`perfgate.metrics.selfcheck` (us), and
    ``require_trace`` (a rank without trace_view.json fails instead of skipping its checks: those against the
    trace, and ``trace_vs_step_trace`` where step_trace_time.csv is there).
    ``time_base_abs_us``: the largest offset (us) between the kernel table's task starts and the
    trace's Overlap Analysis events accepted as one time base (:func:`perfgate.metrics.selfcheck.time_base`)."""
    abs_us_per_row: float = 0.001
    abs_us_floor: float = 0.01
    step_trace_abs_us: float = 1.0
    require_trace: bool = False
    comm_op_identity_abs_us: float = 1.0
    time_base_abs_us: float = 1.0


#: findings.fail_closed when the policy does not say: the findings that make a capture invalid
FAIL_CLOSED = ("WARMUP_NOT_STRIPPED", "RANKS_FROM_DIFFERENT_RUNS", "RANKS_WITHOUT_COMMON_STEP")


@dataclass(frozen=True, eq=True)
class FindingThresholds(_Section):
    """``findings:`` thresholds of :mod:`perfgate.metrics.steps` (ratios are fractions, times us
    or s as named; see that module for each label). ``exposed_significant`` / ``exposed_hidden``
    bound the step table's ``exposed_comm_ratio`` (communication rows' ΣDuration not covered by
    the compute busy union, over their ΣDuration). ``fail_closed`` is kept on the policy
    (:attr:`perfgate.policy.Policy.fail_closed`), default :data:`FAIL_CLOSED`."""
    underfeed_ratio: float = 0.30
    gap_min_us: float = 1000.0
    gap_step_ratio: float = 0.10
    bubble_min_us: float = 10.0
    recompile_wall_ratio: float = 10.0
    recompile_gap_ratio: float = 0.5
    recompile_wait_ratio: float = 0.5
    exposed_significant: float = 0.30
    exposed_hidden: float = 0.10
    warmup_ratio: float = 1.5
    slow_rank_ratio: float = 0.05
    max_collection_spread_s: float = 300.0


@dataclass(frozen=True, eq=True)
class HistorySettings(_Section):
    """``history:``: the ``history:BRANCH`` baseline (median of the last ``window`` kept runs,
    at least ``min_runs``, noise band ``band_k`` x robust sigma) and change points (ruptures
    ``penalty``, ``min_size`` runs per segment, Mann-Whitney ``alpha``, ``min_rel`` relative
    change, ``min_after`` runs after a change to confirm it); ``key_metric`` of the journal."""
    window: int = 5
    min_runs: int = 2
    band_k: float = 3.0
    penalty: float = 3.0
    min_size: int = 3
    min_after: int = 3
    alpha: float = 0.01
    min_rel: float = 0.02
    key_metric: str = "step.time_us{view=p50}"


@dataclass(frozen=True, eq=False)  # eq=False: ``tolerances`` is a dict
class StatisticsSettings(_Section):
    """``statistics:`` (repeated captures, :mod:`perfgate.compare.stats`): ``enabled``,
    ``alpha`` (the runs bound of the exact rank test, 0..1), ``confidence`` (interval of the Hodges-Lehmann
    shift, 0..1), ``unsure_fails`` (exit 1 on a gated ``unsure``), ``max_runs_hint``,
    ``informational`` (also re-judge ungated metrics) and ``tolerances`` ({metric name:
    :class:`perfgate.policy.Tolerance`}, the effect-size gate)."""
    enabled: bool = True
    alpha: float = 0.05
    confidence: float = 0.95
    unsure_fails: bool = False
    max_runs_hint: int = 50
    informational: bool = False
    tolerances: dict = field(default_factory=dict)


#: the largest noise band a policy may set (10 x a part's own time per step)
BAND_MAX = 10.0


@dataclass(frozen=True, eq=True)
class PartSettings(_Section):
    """``parts:`` (:mod:`perfgate.compare.parts`): when a part of the step (a kernel family, a
    category, exposed communication, idle time) changed by more than the device's speed explains.
    Materiality is a fraction in (0, 1]; a band a number in (0, :data:`BAND_MAX`].

    * ``material_computing`` / ``material_step``: an excess is *material* when it is at least this
      fraction of the baseline's Computing (busy union of the compute tasks per step) or of the
      baseline's step time; the smaller of the two is the bound;
    * ``band_compute`` / ``band_communication`` / ``band_idle``: the noise band of a single capture,
      a fraction of the part's own baseline time per step. Compute families repeat within a few
      percent between runs (two runs of the real level1 / level2 job: 187 paired compute rows, robust
      sigma of the log ratio 0.045); collectives and idle gaps are set by other ranks and the host
      (the same job's collectives differ x0.40..x1.09 between runs).
    """
    material_computing: float = 0.02
    material_step: float = 0.01
    band_compute: float = 0.10
    band_communication: float = 0.25
    band_idle: float = 0.25
