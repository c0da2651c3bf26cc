"""Typed shapes of the per-rank fan-out: what a worker is told (:class:`FingerprintConfig`) and
what it sends back (:class:`RankSummary`). Both are frozen, module-level dataclasses of picklable
values, so they travel through a ``spawn`` process pool and dask.distributed unchanged.

Producer: :func:`perfgate.metrics.fingerprint.summarize_rank`; consumer:
:func:`perfgate.metrics.fingerprint.fingerprint_from_summaries`; fan-out: :mod:`perfgate.app.run`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: importing this module stays free of pandas
    import pandas as pd


@dataclass(frozen=True)
class FingerprintConfig:
    """How every rank of one capture is read and fingerprinted.

    ``policy``: :class:`perfgate.policy.Policy`; ``root``: the capture folder evidence paths are
    made relative to; ``with_trace``: a :class:`perfgate.terms.TraceMode` (how the timeline is
    read, as :func:`perfgate.ingest.load_rank`)."""
    policy: Any
    root: Path
    with_trace: Any  # a perfgate.terms.TraceMode

    @property
    def read_pmu(self) -> bool:
        """Read the PMU columns (pipe utilisation): the operator spec asks for them or requires them."""
        ops = self.policy.operators
        return bool(ops.read_pmu or ops.require_pipe)

    @property
    def read_shapes(self) -> bool:
        """Read Input Shapes / Data Types: the operator spec asks for them, or MFU needs them."""
        return bool(self.policy.operators.read_shapes or self.policy.mfu is not None)


@dataclass(frozen=True, eq=False)  # eq=False: tables are DataFrames (no truth value)
class RankSummary:
    """Everything the fingerprint needs from one rank.

    Attributes:
        rank: rank id.
        metrics: ``{(name, labels_tuple): (value, evidence, context)}`` per-rank metrics
            (:func:`perfgate.metrics.fingerprint.rank_metrics`, family view and structure metrics).
        segments: layer / block class tables of the rank (``{}`` when segmentation is off).
        operators: the rank's kernel-family view detail (``rank`` included).
        anatomy: :func:`perfgate.metrics.steps.step_table` (columns ``STEP_COLUMNS``, times in us).
        checks: :class:`perfgate.model.SelfCheck` results.
        findings: :class:`perfgate.model.Finding` of this rank (step labels, bubble note).
        step_time: ``{(rank, step): us}`` gated step time (Computing + Communication(Not
            Overlapped) + Free, else the device wall).
        kinds: :func:`perfgate.metrics.comm.kind_table` with a leading ``rank`` column.
        warnings: text, each prefixed ``rank N:``.
        info: profiler_info / metadata of the rank (profiler_level, versions, ...).
        has_comm / has_trace / has_step_trace: which optional files were read.
        type_available / core_available: the kernel table's Type and Accelerator Core columns.
        variant: the kernel table's header variant; kernel_file: its path relative to the capture
            root; kernel_columns: the header names read as ``op_type`` / ``core_type`` (None where
            the header has no such column).
        steps: the rank's step ids (str, sorted).
        rank_dir / output_dir: relative to the capture root; rank_source: how the rank id was found.
        tables / meta / partial: rank coverage (a partial rank has no kernel table; its
            type_available / core_available / variant are None).
    """
    rank: int
    metrics: dict
    segments: dict
    operators: dict
    anatomy: pd.DataFrame
    checks: list
    findings: list
    step_time: dict
    kinds: pd.DataFrame
    warnings: list
    info: dict
    has_comm: bool
    has_trace: bool
    has_step_trace: bool
    type_available: bool
    core_available: bool
    variant: str
    steps: list
    rank_dir: str
    output_dir: str
    rank_source: str
    tables: list = ()          # the tables this rank holds (kernels / step_trace / comm / trace)
    meta: dict | None = None   # the job world size this rank records and where (fingerprint._job_meta)
    partial: bool = False      # no kernel table: step and communication metrics only
    kernel_file: str | None = None       # the kernel table, relative to the capture root
    kernel_columns: dict | None = None   # the header names read as op_type / core_type (None: no such column)

    def __getitem__(self, key: str):
        """``summary["rank"]``: field access by name (the shape summaries had as dicts)."""
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default=None):
        return getattr(self, key, default)
