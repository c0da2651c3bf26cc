"""One meaning per term: "exposed communication" names only msprof's busy-union
Communication(Not Overlapped); the kernel-derived ΣDuration figure is "uncovered communication";
the kernel-family view is the "family view"."""
import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.metrics.comm import kind_table
from perfgate.metrics.registry import REGISTRY
from perfgate import terms

ROOT = Path(__file__).resolve().parents[2]


def test_exposed_communication_names_only_the_busy_union_figures():
    said = [d for d in REGISTRY.values()  # named as what it is, not where another figure says what it is not
            if re.search(r"(?<!not the )exposed[- ]communication", d.description.lower())]
    assert {d.name for d in said} == {"step.comm_not_overlapped_us", "step.exposed_comm_ratio"}
    for d in said:
        assert d.caliber == terms.BUSY_UNION and "step_trace_time.csv" in d.source
    kernel = REGISTRY["comm.exposed_us"]
    assert "uncovered communication" in kernel.description and "ΣDuration" in kernel.description
    assert "not the exposed communication" in kernel.description


def test_uncovered_communication_counts_overlapping_comm_rows_twice():
    """Two communication rows over the same 10 us, no compute: uncovered = 20 us (ΣDuration-based),
    while the busy union of communication (exposed communication) would be 10 us."""
    k = pd.DataFrame({"step": pd.Categorical(["1", "1", "1"]), "name": ["hcom_allReduce_1", "hcom_allReduce_2", "MatMul"],
                      "is_comm": [True, True, False], "start_ns": np.array([0, 0, 50_000]),
                      "end_ns": np.array([10_000, 10_000, 60_000]), "dur_ns": np.array([10_000, 10_000, 10_000])})
    t = kind_table(k)
    assert t.loc[0, "kind"] == "allreduce" and t.loc[0, "sum_us"] == 20.0 and t.loc[0, "exposed_us"] == 20.0


def test_no_operator_view_left_in_code_or_policies():
    hits = [f"{p.relative_to(ROOT)}:{i}" for base in ("perfgate", "policies") for p in (ROOT / base).rglob("*")
            if p.suffix in (".py", ".yaml") for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"(?i)operator[- ]view|rank_operator_view", line)]
    assert not hits, hits
