"""Vocabulary shared by every layer: calibers, tiers, directions, verdicts, views.

Glossary (see README): a *kernel* is one device task row of kernel_details.csv; a kernel
*family* is its name with volatile numeric suffixes removed; a *step* is a ProfilerStep;
*ΣDuration* (caliber ``sum_duration``) is the plain sum of task durations across streams, so
communication overlapped with compute is counted twice; *busy union* (caliber ``busy_union``)
is the length of the union of task intervals, counting every busy microsecond once; *elapsed*
(caliber ``elapsed``) is wall-clock time on the device timeline, busy or not: a step's time
(Computing + Communication(Not Overlapped) + Free) and its Free part (elapsed minus the busy
union of compute and communication).

Communication not hidden by compute has two figures with two names. *Exposed communication* is
msprof's "Communication(Not Overlapped)" (step_trace_time.csv, or the trace's Overlap Analysis):
the busy union of communication minus the compute busy union (metrics
``step.comm_not_overlapped_us``, ``step.exposed_comm_ratio``). *Uncovered communication* is
kernel-derived: per communication kernel row, its Duration minus the part covered by the compute
busy union, summed (ΣDuration-based: overlapping communication rows count twice). It is the step
table's ``exposed_comm_us`` / ``exposed_comm_ratio`` columns and ``comm.exposed_us{kind}``, whose
keys keep their recorded names (fingerprints and the golden digests carry them).
"""
from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    """A str-Enum whose ``str()`` / ``format()`` is its value (as ``enum.StrEnum`` of 3.11), so
    members compare, print, hash and serialise (JSON, YAML, SQLite) exactly as the plain words."""

    def __str__(self) -> str:
        return str(self.value)

    __format__ = str.__format__


# calibers: which way a time figure was aggregated
SUM_DURATION = "sum_duration"
BUSY_UNION = "busy_union"
ELAPSED = "elapsed"
CALIBERS = (SUM_DURATION, BUSY_UNION, ELAPSED)
CALIBER_LABEL = {SUM_DURATION: "ΣDuration", BUSY_UNION: "busy union", ELAPSED: "elapsed"}

#: how a capture fact its files do not record (a None) reads in a sentence, never "None"
NOT_RECORDED = "not recorded"


def shown_value(v) -> str:
    """``v`` as text in a message: :data:`NOT_RECORDED` for None."""
    return NOT_RECORDED if v is None else str(v)

# tiers: how reproducible a quantity is between two captures of the same job
TIER_EXACT = 1      # counts and sets: identical for identical work
TIER_SHARE = 2      # aggregate time shares: within a fraction of a percentage point
TIER_STEP = 3       # step aggregates (rank0 / p50): a few percent run to run
TIER_CONTEXT = 4    # single-kernel / single-collective durations, absolute comm times: never gated
                    # by default (they drift up to ~2x between devices)

# directions: what a change of the value means
class Direction(_StrEnum):
    """What a change of a metric's value means; :meth:`judge` is the one place a change becomes
    a verdict (single captures and repeated captures alike)."""
    LOWER_IS_BETTER = "lower_is_better"
    HIGHER_IS_BETTER = "higher_is_better"
    EXACT = "exact"          # any change beyond tolerance is a regression

    def judge(self, low: float, high: float | None = None, allowance: float = 0.0) -> "Verdict":
        """The verdict on a change known to lie in ``[low, high]`` (one value: ``high`` None),
        in the metric's unit, against ``allowance`` (≥ 0, same unit; see
        :meth:`perfgate.policy.Tolerance.allowance`):

        - the whole range above ``+allowance`` or below ``−allowance``: the direction decides
          (``exact``: a regression either way; ``lower_is_better``: up is a regression);
        - the whole range inside ``±allowance``: ``unchanged``;
        - otherwise (an interval straddling the allowance): ``unsure``.

        A single value is never ``unsure``. Equality with the allowance is unchanged."""
        high = low if high is None else high
        if low > allowance or high < -allowance:
            up = low > allowance
            if self is Direction.EXACT or up == (self is Direction.LOWER_IS_BETTER):
                return Verdict.REGRESSION
            return Verdict.IMPROVEMENT
        if -allowance <= low and high <= allowance:
            return Verdict.UNCHANGED
        return Verdict.UNSURE


LOWER_IS_BETTER = Direction.LOWER_IS_BETTER
HIGHER_IS_BETTER = Direction.HIGHER_IS_BETTER
EXACT = Direction.EXACT
DIRECTIONS = tuple(Direction)


# verdicts of one metric comparison (lower case) and overall gate statuses (upper case): two
# enums, so the verdict "regression" of one metric and the gate status "REGRESSION" of a
# check are never confused
class Verdict(_StrEnum):
    """The verdict on one metric comparison."""
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    NEW = "new"
    MISSING = "missing"
    INCOMPARABLE = "incomparable"
    UNSURE = "unsure"        # repeated captures: too few runs, or a change whose confidence interval
                             # straddles the tolerance; says how many more runs are needed


REGRESSION = Verdict.REGRESSION
IMPROVEMENT = Verdict.IMPROVEMENT
UNCHANGED = Verdict.UNCHANGED
NEW = Verdict.NEW
MISSING = Verdict.MISSING
INCOMPARABLE = Verdict.INCOMPARABLE
UNSURE = Verdict.UNSURE
VERDICTS = tuple(Verdict)


class Status(_StrEnum):
    """The overall result of one check (``GateResult.status``)."""
    PASS = "PASS"
    REGRESSION = "REGRESSION"
    NO_BASELINE = "NO_BASELINE"
    INCOMPATIBLE = "INCOMPATIBLE_BASELINE"   # a baseline exists but nothing gated could be compared
    INVALID = "INVALID_CAPTURE"
    DAMAGED = "DAMAGED_BASELINE"   # the baseline store (a baseline file, the history database) is damaged:
                                   # nothing judged, exit 5; never NO_BASELINE, so --no-baseline-ok cannot pass it
    STORE_ERROR = "STORE_ERROR"   # the baseline store cannot be opened (a history database path that is a
                                  # directory or lies under a regular file, a file SQLite cannot open): not
                                  # damage; exit 5, nothing judged, --no-baseline-ok cannot pass it
    UNSURE = "UNSURE"   # no gated regression, but at least one gated metric is unsure (exit 0 by default)


PASS = Status.PASS
FAIL = Status.REGRESSION     # kept for callers; the status word is "REGRESSION"
NO_BASELINE = Status.NO_BASELINE
INCOMPATIBLE = Status.INCOMPATIBLE
INVALID = Status.INVALID
DAMAGED = Status.DAMAGED
STORE_ERROR = Status.STORE_ERROR
#: statuses of a baseline store that could not be read (exit 5): each report says which, nothing judged
STORE_FAILED = (Status.DAMAGED, Status.STORE_ERROR)
UNSURE_STATUS = Status.UNSURE

# cross-rank views
VIEW_RANK0 = "rank0"
VIEW_P50 = "p50"
VIEW_MAX = "max"
VIEW_ALL = "all"   # for sets: families ranked by ΣDuration summed over ranks
VIEWS = (VIEW_RANK0, VIEW_P50, VIEW_MAX)


# views within one pipeline stage (perfgate.metrics.stages): "stage1.p50" is the median over the
# ranks of stage 1; a capture whose ranks run more than one program has these in place of the
# pooled p50 / max (rank0 stays)
_STAGE_PREFIX = "stage"


def stage_view(stage: int, view: str) -> str:
    """The view label of ``view`` (p50 / max) within pipeline stage ``stage``: ``stage1.p50``."""
    return f"{_STAGE_PREFIX}{int(stage)}.{view}"


def view_stage(view) -> int | None:
    """The stage of a stage view (``stage1.p50`` -> 1), None for any other view."""
    if isinstance(view, str) and view.startswith(_STAGE_PREFIX) and "." in view:
        num = view[len(_STAGE_PREFIX):view.index(".")]
        if num.isdigit():
            return int(num)
    return None


def base_view(view):
    """The cross-rank view a view is made like: ``p50`` for ``stage1.p50``, else ``view`` itself."""
    return view.split(".", 1)[1] if view_stage(view) is not None else view


def view_text(view) -> str:
    """A view as the reports say it: ``stage 1 p50`` for ``stage1.p50``, else the view itself."""
    s = view_stage(view)
    return f"stage {s} {base_view(view)}" if s is not None else str(view)


def view_gated(view, gate_views) -> bool:
    """Whether ``view`` is gated under a policy's ``gate_views``: it is listed, or it is a stage
    view of a listed view (``stage1.p50`` is gated when ``p50`` is)."""
    return view in gate_views or base_view(view) in gate_views

#: every finding code perfgate emits (:class:`perfgate.model.Finding` ``code``): the names a
#: policy's ``findings.fail_closed`` may list (docs/policy.md "Findings")
FINDING_CODES = frozenset({
    "DEVICE_IDLE_GAP_HEAVY", "PRELAUNCH_GAP_HEAVY", "TAIL_GAP_HEAVY", "INTERNAL_BUBBLE_HEAVY", "IDLE_GAP_UNEXPLAINED",
    "RECOMPILE_SUSPECTED", "EXPOSED_COMM_SIGNIFICANT", "COMM_WELL_HIDDEN", "SLOW_RANK", "RANK_STEP_MISMATCH",
    "COMM_JSON_MISSING", "BUBBLE_UNRELIABLE", "WARMUP_NOT_STRIPPED", "RANKS_FROM_DIFFERENT_RUNS",
    "RANKS_WITHOUT_COMMON_STEP", "DEVICE_TASKS_LOST"})

# canonical communication core-type label
COMM_CORE = "COMMUNICATION"


class TraceMode(str, Enum):
    """How a command treats the timeline (trace_view.json, msprof_*.json, or a DB export's
    OVERLAP_ANALYSIS table). One value travels from the CLI's ``--trace`` to every reader.

    * ``never``: not read; self-checks against it are skipped.
    * ``auto`` (CLI default): read, except a trace_view.json over 256 MiB when
      step_trace_time.csv carries the Overlap Analysis sums (a warning says so).
    * ``read`` (library default): read whenever present, whatever its size.
    * ``always``: read, and a rank without a timeline holding Overlap Analysis (a missing file,
      a DB export without OVERLAP_ANALYSIS) is an invalid capture (exit 3).
    """
    NEVER = "never"
    AUTO = "auto"
    READ = "read"
    ALWAYS = "always"

    @classmethod
    def of(cls, value) -> "TraceMode":
        """A TraceMode from itself, a CLI word, or the older spellings (True = read,
        False = never, ``"require"`` = always). Raises ValueError for anything else."""
        if isinstance(value, cls):
            return value
        if value is True:
            return cls.READ
        if value is False or value is None:
            return cls.NEVER
        if value == "require":
            return cls.ALWAYS
        return cls(value)

    @property
    def reads(self) -> bool:
        return self is not TraceMode.NEVER
