"""``read_kernels(pmu=True)`` parses only the PMU columns the family view reads
(:func:`perfgate.ingest.kernels.pmu_columns`; 13 of the 20 of a PipeUtilization
kernel_details.csv), and every fingerprint is the one of ``pmu="all"`` (every PMU column, the
reader before): on every real PipeUtilization capture, on a replicated many-step capture, and
on files where only a skipped ratio holds pipe data (then the file is read again with all)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest import load_capture
from perfgate.ingest.csvread import read_header
from perfgate.ingest.kernels import MEMORY_RATIO_STAGES, pmu_columns, read_kernels
from perfgate.metrics import kernels as km
from perfgate.metrics import operators as opv
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.synth.replicate import replicate_rank

LEVEL1_KD = "level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
SKIPPED = ["aic_scalar_ratio", "aic_mte1_ratio", "aic_fixpipe_ratio", "aiv_scalar_ratio", "aiv_mte3_ratio",
           "aicore_time(us)", "aiv_time(us)"]


def _canonical(fp) -> dict:
    d = json.loads(json.dumps(fp.to_dict(), sort_keys=True, default=str))
    d["provenance"].pop("created_at", None)
    d["provenance"].pop("source", None)
    return d


def _family_view(kt, policy, path):
    """The family view of one kernel table, as the fingerprint computes it (step-assigned rows)."""
    k = kt.df.assign(family=km.family_of(kt.df["name"], policy.family_suffix))
    k = km.rows_where(k, k["step"].notna().to_numpy())
    cats = km.categorize(k, policy.categories) if kt.type_available and kt.core_available else None
    return opv.rank_family_view(k, policy, categories=cats, kfile=path.name, path=path, variant=kt.variant)


def test_memory_ratio_stages_are_the_ones_the_family_view_reads():
    assert MEMORY_RATIO_STAGES == opv._MEMORY_STAGES


def test_pmu_columns_of_a_pipeutilization_header(text_captures):
    header = read_header(text_captures / LEVEL1_KD)
    every, none = pmu_columns(header, (), "all")
    read, skipped = pmu_columns(header, (), True)
    assert len(every) == 20 and none == []
    assert sorted(skipped) == sorted(SKIPPED) and len(read) == 13
    assert sorted(read + skipped) == sorted(every)
    ratios = [h for h in header if h in read and h.endswith("_ratio")]
    assert read == ratios + [h for h in header if h in read and h not in ratios]  # the table's column order
    assert pmu_columns(header, (), False) == ([], [])
    with pytest.raises(ValueError, match="pmu must be"):
        pmu_columns(header, (), "yes")


def test_pmu_columns_keep_a_ratio_without_time_and_other_groups():
    header = ["Name", "aic_mac_ratio", "aic_mte1_ratio", "aic_mte1_time(us)", "aic_fixpipe_ratio",
              "aic_mac_fp16_ratio", "aiv_time(us)"]
    read, skipped = pmu_columns(header, ("Name",), True)
    # aic_mac: memory ratio; aic_fixpipe: no time column; aic_mac_fp16: ArithmeticUtilization group
    assert read == ["aic_mac_ratio", "aic_fixpipe_ratio", "aic_mac_fp16_ratio", "aic_mte1_time(us)"]
    assert skipped == ["aic_mte1_ratio", "aiv_time(us)"]


@pytest.mark.real
def test_every_real_pmu_file_gives_the_family_view_of_all_columns(ascend, policy):
    seen = 0
    for f in sorted([*ascend.rglob("kernel_details.csv"), *ascend.rglob("op_summary*.csv")]):
        if not pmu_columns(read_header(f), (), "all")[0]:
            continue
        try:
            full = read_kernels(f, pmu="all")
        except InvalidCaptureError:
            continue
        lean = read_kernels(f, pmu=True)
        pd.testing.assert_frame_equal(lean.df, full.df[list(lean.df.columns)], check_exact=True)
        assert opv.pipe_available(lean.df) == opv.pipe_available(full.df)
        a, b = _family_view(lean, policy, f), _family_view(full, policy, f)
        assert a[0] == b[0], f
        assert json.dumps(a[1], sort_keys=True, default=str) == json.dumps(b[1], sort_keys=True, default=str), f
        seen += 1
    assert seen >= 6


@pytest.mark.real
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_real_fingerprint_with_pmu_true_equals_all(text_captures, policy, level):
    lean = load_capture(text_captures / level, pmu=True)
    assert all(c not in r.kernels.df for r in lean.ranks for c in ("aic_mte1_ratio", "aicore_time_us"))
    assert _canonical(fingerprint_capture(lean, policy)) == _canonical(
        fingerprint_capture(load_capture(text_captures / level, pmu="all"), policy))


def test_replicated_fingerprint_with_pmu_true_equals_all(text_captures, tmp_path, policy):
    cap = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp_path / "rep", steps=300, trace=False)
    lean = load_capture(cap, pmu=True, with_trace=False)
    assert "aic_mte1_ratio" not in lean.ranks[0].kernels.df and lean.ranks[0].kernels.df["step"].nunique() == 300
    fp = fingerprint_capture(lean, policy)
    assert fp.detail["operators"]["pipe_available"]
    assert _canonical(fp) == _canonical(fingerprint_capture(load_capture(cap, pmu="all", with_trace=False), policy))


def _rewrite(src, dst, fn):
    with open(src, newline="", encoding="utf-8-sig") as f:
        head, *rows = list(csv.reader(f))
    for r in rows:
        fn(head, r)
    with open(dst, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([head, *rows])
    return dst


def _blank_pipe(keep=()):
    """Every pipe time and ratio cell N/A except the columns in ``keep``."""
    def fn(head, row):
        for i, h in enumerate(head):
            if (h.endswith("_ratio") or h.endswith("_time(us)")) and h not in keep:
                row[i] = "N/A"
    return fn


@pytest.mark.real
def test_only_a_skipped_ratio_with_pipe_data_reads_every_column(text_captures, tmp_path, policy):
    path = _rewrite(text_captures / LEVEL1_KD, tmp_path / "kernel_details.csv", _blank_pipe(keep=("aiv_mte3_ratio",)))
    lean, full = read_kernels(path, pmu=True), read_kernels(path, pmu="all")
    assert "aiv_mte3_ratio" in lean.df                                     # read again with every column
    pd.testing.assert_frame_equal(lean.df, full.df, check_exact=True)
    assert opv.pipe_available(lean.df) and np.isfinite(lean.df["aiv_mte3_ratio"]).any()
    assert _family_view(lean, policy, path)[0] == _family_view(full, policy, path)[0]


@pytest.mark.real
def test_all_na_pipe_columns_fail_closed_with_the_same_message(text_captures, tmp_path, policy):
    path = _rewrite(text_captures / LEVEL1_KD, tmp_path / "kernel_details.csv", _blank_pipe())
    errors = []
    for pmu in (True, "all"):
        kt = read_kernels(path, pmu=pmu)
        assert not opv.pipe_available(kt.df)
        with pytest.raises(InvalidCaptureError, match="every value is N/A") as e:
            opv.require_pipe(kt.df, path, kt.variant)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


@pytest.mark.real
def test_pipe_data_only_outside_steps_reads_every_column(text_captures, tmp_path):
    """Pipe values on rows without a Step Id only: the family view (step-assigned rows) sees
    none in the columns read, so the skipped ratios are read too."""
    def fn(head, row):
        _blank_pipe(keep=("aic_mte1_ratio", "aic_mte1_time(us)"))(head, row)
        if row[head.index("Name")].startswith("aclnnMm_"):
            row[head.index("Step Id")] = ""
        else:
            row[head.index("aic_mte1_time(us)")] = "N/A"
    path = _rewrite(text_captures / LEVEL1_KD, tmp_path / "kernel_details.csv", fn)
    lean, full = read_kernels(path, pmu=True), read_kernels(path, pmu="all")
    assert lean.unassigned_rows > 0
    pd.testing.assert_frame_equal(lean.df, full.df, check_exact=True)
