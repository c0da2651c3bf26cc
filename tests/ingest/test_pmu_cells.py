"""A PMU ratio cell that is neither N/A / empty nor a number (a NUL byte, text, nan, inf) is an
invalid capture naming file, row and column, as the time columns are (a
NUL byte in aiv_mte2_ratio was read as N/A and moved the family's memory_bound silently)."""
import csv
import io

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import read_kernels

COLUMN = "aiv_mte2_ratio"


def _set_cell(kd, value) -> tuple[int, str]:
    """Put ``value`` in COLUMN of the first data row whose cell is a number > 0.05 (csv-quoted
    as the profiler writes); returns (data row, old text)."""
    text = kd.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    i = rows[0].index(COLUMN)
    k = next(k for k, r in enumerate(rows[1:], 1) if r[i] not in ("N/A", "") and float(r[i]) > 0.05)
    old, rows[k][i] = rows[k][i], value(rows[k][i]) if callable(value) else value
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n" if "\r\n" in text else "\n").writerows(rows)
    kd.write_text(out.getvalue(), encoding="utf-8", newline="")
    return k, old


@pytest.mark.parametrize("value", [lambda v: v + "\x00", "abc", "nan", "inf"])
def test_bad_pmu_ratio_cell_is_exit_3_naming_file_row_column(copy_capture, tmp_path, value):
    cap = copy_capture("level1")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    k, old = _set_cell(kd, value)
    shown = value(old) if callable(value) else value
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(kd, pmu=True)
    assert e.value.row == k and str(e.value.path) == str(kd)
    assert str(e.value).endswith(
        f"kernel_details.csv row {k}: {COLUMN} is not a finite number: {shown!r} (CSV row {k + 1} counting the header as row 1)")
    r = CliRunner().invoke(main, ["fingerprint", str(cap), "--output", str(tmp_path / "fp.json")], env={})
    assert r.exit_code == 3, r.output
    assert f"kernel_details.csv row {k}: {COLUMN} is not a finite number: {shown!r}" in r.output
    assert not (tmp_path / "fp.json").exists()


@pytest.mark.parametrize("value", ["N/A", ""])
def test_na_and_empty_pmu_cells_still_mean_not_applicable(copy_capture, value):
    cap = copy_capture("level1")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    k, old = _set_cell(kd, value)
    t = read_kernels(kd, pmu=True)
    v = t.df.loc[t.df["row"] == k, COLUMN].to_numpy()
    assert len(v) == 1 and v[0] != v[0]   # NaN: not applicable
    assert float(old) > 0.05


@pytest.fixture(scope="module")
def level1_baseline(text_captures, tmp_path_factory):
    from _refusals import saved_main
    return saved_main(text_captures / "level1", tmp_path_factory.mktemp("pmu_bl") / "bl")


@pytest.mark.parametrize("column,value,why", [
    ("aiv_mte2_time(us)", "-500", "is negative"), ("aiv_mte2_ratio", "-50", "is negative"),
    ("aic_mac_ratio", "-0.2", "is negative"), ("aic_mte2_time(us)", "-0.001", "is negative"),
    ("aiv_mte2_ratio", "1.5", "is above 1"), ("aic_mac_ratio", "50", "is above 1"),
])
def test_negative_pmu_cell_or_ratio_above_one_is_refused_everywhere(copy_capture, level1_baseline, tmp_path,
                                                                   column, value, why):
    """A negative pipe time / ratio or a ratio above 1 was accepted: aiv_mte2_time(us)=-500 gave
    PASS with pipe.memory_bound -855 shown as an improvement and stored in baselines. Exit 3
    naming file, row, column and cell (no real export holds one: every ratio is 0..0.997)."""
    import shutil

    from _refusals import assert_refused_everywhere
    cap = copy_capture("level1")
    kd = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    text = kd.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    i = rows[0].index(column)
    k = next(k for k, r in enumerate(rows[1:], 1) if r[i] not in ("N/A", ""))
    rows[k][i] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    kd.write_text(out.getvalue(), encoding="utf-8")
    bl = tmp_path / "bl"
    shutil.copytree(level1_baseline, bl)
    assert_refused_everywhere(cap, bl, tmp_path, [f"kernel_details.csv row {k}: {column} {why}", repr(value),
                                                  f"(CSV row {k + 1} counting the header as row 1)"])


def test_no_real_kernel_table_has_a_negative_pmu_cell_or_a_ratio_above_one(ascend):
    """The check refuses nothing the real exports hold: every kernel_details / op_summary file of
    the fixtures reads with every PMU column (``pmu="all"``)."""
    import re
    files = [p for p in ascend.rglob("*.csv") if re.match(r"(kernel_details|op_summary)", p.name)]
    assert len(files) >= 10
    read = 0
    for f in files:
        try:
            read_kernels(f, pmu="all")
            read += 1
        except InvalidCaptureError as e:
            assert "negative" not in str(e) and "above 1" not in str(e), str(e)
    assert read >= 10
