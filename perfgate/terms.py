"""Vocabulary shared by every layer: calibers, tiers, directions, verdicts, views.

Glossary (see README): a *kernel* is one device task row of kernel_details.csv; a kernel
*family* is its name with volatile numeric suffixes removed; a *step* is a ProfilerStep;
*ΣDuration* (caliber ``sum_duration``) is the plain sum of task durations across streams, so
communication overlapped with compute is counted twice; *busy union* (caliber ``busy_union``)
is the length of the union of task intervals, counting every busy microsecond once.

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

# calibers: which way a time figure was aggregated
SUM_DURATION = "sum_duration"
BUSY_UNION = "busy_union"
CALIBERS = (SUM_DURATION, BUSY_UNION)
CALIBER_LABEL = {SUM_DURATION: "ΣDuration", BUSY_UNION: "busy union"}

# tiers: how reproducible a quantity is between two captures of the same job
TIER_EXACT = 1      # counts and sets: identical for identical work
TIER_SHARE = 2      # aggregate time shares: within a fraction of a percentage point
TIER_STEP = 3       # step aggregates (rank0 / p50): a few percent run to run
TIER_CONTEXT = 4    # single-kernel / single-collective durations, absolute comm times: never gated
                    # by default (they drift up to ~2x between devices)

# directions: what a change of the value means
LOWER_IS_BETTER = "lower_is_better"
HIGHER_IS_BETTER = "higher_is_better"
EXACT = "exact"          # any change beyond tolerance is a regression
DIRECTIONS = (LOWER_IS_BETTER, HIGHER_IS_BETTER, EXACT)

# verdicts of one metric comparison
REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
NEW = "new"
MISSING = "missing"
INCOMPARABLE = "incomparable"
UNSURE = "unsure"        # repeated captures: too few runs, or a change whose confidence interval
                         # straddles the tolerance; says how many more runs are needed
VERDICTS = (REGRESSION, IMPROVEMENT, UNCHANGED, NEW, MISSING, INCOMPARABLE, UNSURE)

# overall gate results
PASS = "PASS"
FAIL = "REGRESSION"
NO_BASELINE = "NO_BASELINE"
INCOMPATIBLE = "INCOMPATIBLE_BASELINE"   # a baseline exists but nothing gated could be compared
INVALID = "INVALID_CAPTURE"
UNSURE_STATUS = "UNSURE"   # no gated regression, but at least one gated metric is unsure (exit 0 by default)

# cross-rank views
VIEW_RANK0 = "rank0"
VIEW_P50 = "p50"
VIEW_MAX = "max"
VIEW_ALL = "all"   # for sets: families ranked by ΣDuration summed over ranks
VIEWS = (VIEW_RANK0, VIEW_P50, VIEW_MAX)

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
