"""kernel_details.csv / op_summary reading: cases P03 P04 P05 P06 P10 P20 and value-set proofs."""
import pytest

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import IMPLICIT_STEP, read_kernels

H46_HEAD = "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim"


def write(tmp_path, text, name="kernel_details.csv", newline="\n"):
    p = tmp_path / name
    p.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return p


def test_trailing_tab_and_exact_ns(tmp_path):
    """P03: quoted start with a trailing TAB parses exactly to integer ns."""
    p = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\n"
                        'MatMul_1,MatMulV2,"1699529623106750.123\t",0.999\n')
    df = read_kernels(p).df
    assert df["start_ns"].iloc[0] == 1699529623106750123
    assert df["dur_ns"].iloc[0] == 999
    assert df["end_ns"].iloc[0] == 1699529623106751122


def test_float64_would_lose_ns(tmp_path):
    """P02-style: two rows 1 ns apart stay distinct (float64 cannot tell them apart)."""
    p = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\n"
                        "a,X,1736408883704643.212,1.0\nb,X,1736408883704643.213,1.0\n")
    df = read_kernels(p).df
    assert df["start_ns"].iloc[1] - df["start_ns"].iloc[0] == 1
    assert float("1736408883704643.212") == float("1736408883704643.213")  # why floats are not used


@pytest.mark.parametrize("header,variant", [
    (H46_HEAD + ",Mix Block Dim", "Block Dim"),
    ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
     "Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num", "Block Num"),
])
def test_header_generations(tmp_path, header, variant):
    """P04: Block Dim / Block Num, kernel_details vs op_summary names are read by name."""
    cols = header.split(",")
    vals = {"Step Id": "3", "Device_id": "4", "Model ID": "4294967295", "Task ID": "11", "Stream ID": "2",
            "Name": "MatMul_1", "Op Name": "MatMul_1", "Type": "MatMulV2", "OP Type": "MatMulV2",
            "OP State": "dynamic", "Accelerator Core": "AI_CORE", "Task Type": "AI_CORE",
            "Start Time(us)": "100.5", "Task Start Time(us)": "100.5", "Duration(us)": "2.25",
            "Task Duration(us)": "2.25", "Wait Time(us)": "0", "Task Wait Time(us)": "0",
            "Block Dim": "20", "Block Num": "20", "Mix Block Dim": "0", "Mix Block Num": "0"}
    p = write(tmp_path, header + "\n" + ",".join(vals[c] for c in cols) + "\n")
    kt = read_kernels(p)
    assert kt.columns["block_dim"] == variant
    assert kt.df["name"].iloc[0] == "MatMul_1" and kt.df["core_type"].iloc[0] == "AI_CORE"
    assert kt.df["dur_ns"].iloc[0] == 2250
    assert "Device_id" in kt.variant or "Device_id" not in header


def test_columns_found_by_name_not_position(tmp_path):
    p = write(tmp_path, "Duration(us),Start Time(us),Type,Name\n2.0,10.0,Cast,Cast_3\n")
    df = read_kernels(p).df
    assert (df["name"].iloc[0], df["op_type"].iloc[0], df["dur_ns"].iloc[0]) == ("Cast_3", "Cast", 2000)


def test_missing_required_lists_all(tmp_path):
    """P04: the error lists every missing required column."""
    p = write(tmp_path, "Name,Accelerator Core,Wait Time(us)\nx,AI_CORE,0\n")
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(p)
    msg = str(e.value)
    assert "'Type' or 'OP Type'" in msg and "'Start Time(us)' or 'Task Start Time(us)'" in msg
    assert "'Duration(us)' or 'Task Duration(us)'" in msg and e.value.row == 0


def test_no_step_column_is_one_implicit_step(tmp_path):
    """P05a."""
    kt = read_kernels(write(tmp_path, "Name,Type,Start Time(us),Duration(us)\na,X,1,1\nb,X,3,1\n"))
    assert set(kt.df["step"]) == {IMPLICIT_STEP}
    assert any("implicit step" in w for w in kt.warnings)


def test_blank_step_cells_are_unassigned_not_step_zero(tmp_path):
    """P05b."""
    kt = read_kernels(write(tmp_path, "Step Id,Name,Type,Start Time(us),Duration(us)\n"
                                      "1,a,X,1,1\n,b,X,3,1\n1,c,X,5,1\n"))
    assert kt.unassigned_rows == 1
    assert kt.df["step"].isna().sum() == 1
    assert "0" not in set(kt.df["step"].dropna())


def test_na_cells(tmp_path):
    """P06: N/A is missing, not 0; N/A Duration marks the row invalid and counts it."""
    p = write(tmp_path, "Step Id,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),Block Num,aicore_time(us)\n"
                        "1,hcom_allReduce__1_0_1,hcom_allReduce_,N/A,HCCL,10,5,N/A,N/A\n"
                        "1,MatMul_2,MatMulV2,dynamic,AI_CORE,20,N/A,20,1.0\n"
                        "1,Cast_3,Cast,dynamic,AI_VECTOR_CORE,30,1,20,0.5\n")
    kt = read_kernels(p, pmu=True)
    assert kt.invalid_rows == (2,)
    assert len(kt.df) == 2 and kt.df["is_comm"].tolist() == [True, False]
    assert any("N/A" in w for w in kt.warnings)


def test_csv_quoting_and_crlf(tmp_path):
    """P20: commas and quotes inside fields; CRLF line ends; shapes with doubled quotes."""
    text = ('Name,Type,Start Time(us),Duration(us),Input Shapes\n'
            '"weird ""name"", with comma",Cast,1.0,1.0,"""1,16,64;16,64"""\n'
            'b,Cast,3.0,1.0,""\n')
    kt = read_kernels(write(tmp_path, text, newline="\r\n"), shapes=True)
    assert kt.df["name"].iloc[0] == 'weird "name", with comma'
    assert kt.df["input_shapes"].iloc[0] == '"1,16,64;16,64"'
    assert len(kt.df) == 2


def test_bom(tmp_path):
    p = tmp_path / "kernel_details.csv"
    p.write_bytes(b"\xef\xbb\xbfName,Type,Start Time(us),Duration(us)\na,X,1,1\n")
    assert read_kernels(p).df["name"].tolist() == ["a"]


def test_empty_header_only_and_truncated(tmp_path):
    """P10: empty / header-only / truncated files are specific errors naming file and row."""
    empty = write(tmp_path, "", name="empty.csv")
    with pytest.raises(InvalidCaptureError, match="empty"):
        read_kernels(empty)
    head = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\n", name="head.csv")
    with pytest.raises(InvalidCaptureError, match="no data rows") as e:
        read_kernels(head)
    assert e.value.path.endswith("head.csv")
    trunc = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\na,X,1,1\nb,X,3,1\nc,X,5", name="t.csv")
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(trunc)
    assert e.value.row == 3 and "expected 4 fields, found 3" in e.value.message


def test_unterminated_quote(tmp_path):
    p = write(tmp_path, 'Name,Type,Start Time(us),Duration(us)\na,X,1,1\n"b,X,3,1\n')
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(p)
    assert e.value.path.endswith("kernel_details.csv")


def test_bad_number_names_row(tmp_path):
    p = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\na,X,1,1\nb,X,abc,1\n")
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(p)
    assert e.value.row == 2 and "'abc'" in e.value.message


def test_excel_exponent_start_goes_through_decimal(tmp_path):
    p = write(tmp_path, "Name,Type,Start Time(us),Duration(us)\na,X,1.69512E+15,1\n")
    assert read_kernels(p).df["start_ns"].iloc[0] == 1695120000000000000


def test_swapped_columns_are_rejected_by_value_set(tmp_path):
    """Ambiguous headers are proven by value sets: a 'core type' column holding op types fails."""
    p = write(tmp_path, "Name,Type,Accelerator Core,Start Time(us),Duration(us)\n"
                        "a,AI_CORE,MatMulV2,1,1\nb,AI_VECTOR_CORE,Cast,3,1\n")
    with pytest.raises(InvalidCaptureError, match="core types"):
        read_kernels(p)


def test_both_spellings_present_is_ambiguous(tmp_path):
    p = write(tmp_path, "Name,Op Name,Type,Start Time(us),Duration(us)\na,a,X,1,1\n")
    with pytest.raises(InvalidCaptureError, match="ambiguous header"):
        read_kernels(p)


def test_exact_duplicates_counted_once(tmp_path):
    p = write(tmp_path, "Name,Type,Stream ID,Start Time(us),Duration(us)\n"
                        "a,X,2,1,1\na,X,2,1,1\na,X,3,1,1\n")
    kt = read_kernels(p)
    assert kt.duplicate_rows == (2,) and len(kt.df) == 2


def test_level0_availability(tmp_path):
    """Level0: Type / Accelerator Core are N/A except on HCCL rows -> not available."""
    p = write(tmp_path, "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim\n"
                        "5,Conv2D1,N/A,N/A,1,1,0,0\n5,hcom_allReduce__868_0_1,N/A,HCCL,3,1,0,0\n")
    kt = read_kernels(p)
    assert not kt.type_available and not kt.core_available
    assert kt.df["is_comm"].tolist() == [False, True]


def test_all_real_kernel_files_read_or_fail_specifically(ascend):
    """Every header generation in the fixtures: readable, or (the hand-trimmed G2023 file with a
    missing field on row 16) a specific error naming the row."""
    files = sorted(ascend.rglob("kernel_details.csv")) + sorted(ascend.rglob("op_summary*.csv")) \
        + sorted(ascend.rglob("test.csv"))
    assert len(files) >= 12
    seen_cols = set()
    for f in files:
        try:
            kt = read_kernels(f)
        except InvalidCaptureError as e:
            assert e.row == 16 and "expected 32 fields, found 31" in e.message, f
            continue
        seen_cols.add(kt.ncols)
        assert len(kt.df) > 0 and (kt.df["dur_ns"] >= 0).all()
    assert {7, 8, 32, 33, 37, 46} <= seen_cols
