r'''CSV reading by header name with pyarrow, and exact decimal parsing.

Every cell is read as a string (pyarrow's CSV engine handles quotes, doubled quotes such as
``"""8,2048"""``, CRLF and a UTF-8 BOM), whitespace and the Excel-guard TAB are trimmed, and
``N/A`` / empty cells become nulls. Numbers are converted afterwards so that a bad cell can be
reported with its file and row instead of silently turning into NaN.
'''
from __future__ import annotations

import csv
import io
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import MISSING_TOKENS


def read_header(path: Path) -> list[str]:
    """Return the header fields of a CSV file (BOM stripped).

    Raises:
        InvalidCaptureError: the file is missing, empty (0 bytes) or has no header line.
    """
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if size == 0:
        raise InvalidCaptureError("file is empty (0 bytes)", path=path,
                                  hint="the profiler export did not finish; re-export the capture")
    with open(path, "r", encoding="utf-8-sig", newline="") as f:
        first = f.readline()
    fields = next(csv.reader([first]), [])
    fields = [h.strip() for h in fields]
    if not any(fields):
        raise InvalidCaptureError("first line is blank; expected a CSV header", path=path, row=0)
    return fields


def resolve_columns(header: list[str], aliases: dict[str, tuple[str, ...]],
                    required: tuple[str, ...], path: Path) -> dict[str, str]:
    """Map canonical column -> header name present in ``header``.

    Raises:
        InvalidCaptureError: a required column has none of its spellings (the message lists
            every missing one and the header seen), or two spellings of one column both occur.
    """
    found: dict[str, str] = {}
    for canon, names in aliases.items():
        present = [n for n in names if n in header]
        if len(present) > 1:
            raise InvalidCaptureError(
                f"ambiguous header: both {present[0]!r} and {present[1]!r} are present; they name "
                f"the same column ({canon}) in different CANN generations", path=path, row=0)
        if present:
            found[canon] = present[0]
    missing = [c for c in required if c not in found]
    if missing:
        wanted = "; ".join(" or ".join(repr(n) for n in aliases[c]) for c in missing)
        raise InvalidCaptureError(
            f"required column(s) missing: {wanted}. Header has {len(header)} columns: "
            f"{', '.join(header[:12])}{' ...' if len(header) > 12 else ''}", path=path, row=0)
    return found


def _locate_bad_row(path: Path, ncols: int) -> tuple[int | None, str]:
    """Slow path, only after pyarrow failed: find the first malformed data row."""
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, strict=True)
            next(reader, None)
            for i, rec in enumerate(reader, start=1):
                if rec and len(rec) != ncols:
                    return i, f"expected {ncols} fields, found {len(rec)} (truncated or malformed row)"
    except csv.Error as e:
        return (reader.line_num - 1 if reader.line_num else None), f"malformed CSV: {e}"
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text: {e}"
    return None, "malformed CSV"


def read_string_table(path: Path, columns: dict[str, str], ncols: int) -> pd.DataFrame:
    """Read the given header columns as trimmed strings (nulls for N/A/empty).

    Args:
        path: CSV file.
        columns: canonical name -> header name (from :func:`resolve_columns`).
        ncols: number of header fields (for error location).

    Returns:
        DataFrame with one object/string column per canonical name plus ``row``
        (1-based data row number, header = row 0).

    Raises:
        InvalidCaptureError: malformed / truncated CSV (names the row), or no data rows.
    """
    wanted = list(dict.fromkeys(columns.values()))
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=wanted,
                column_types={c: pa.string() for c in wanted},
                strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
        row, why = _locate_bad_row(path, ncols)
        raise InvalidCaptureError(f"{why} [{str(e).splitlines()[0][:160]}]", path=path, row=row) from None
    if table.num_rows == 0:
        raise InvalidCaptureError("file has a header but no data rows", path=path, row=0,
                                  hint="an empty export is not a capture; check that profiling ran")
    out = {}
    missing = pa.array(MISSING_TOKENS)
    for canon, col in columns.items():
        arr = pc.utf8_trim_whitespace(table.column(col))
        arr = pc.if_else(pc.is_in(arr, value_set=missing), pa.scalar(None, pa.string()), arr)
        out[canon] = arr.to_pandas()
    df = pd.DataFrame(out)
    df.insert(0, "row", np.arange(1, len(df) + 1, dtype=np.int64))
    return df


def _decimal_to_units(text: str, scale: int) -> int:
    return int((Decimal(text) * scale).to_integral_value(rounding="ROUND_HALF_UP"))


def exact_scaled(values: pd.Series, scale: int, *, path: Path, column: str,
                 rows: pd.Series, allow_null: bool = True) -> pd.Series:
    """Parse decimal strings to exact integers of ``value * scale`` (e.g. µs -> ns: 1000).

    ``"1736408883704643.212"`` becomes 1736408883704643212 ns exactly: float64 would keep
    only ~16 significant digits. Plain decimals are converted vectorised; anything else
    (exponent notation such as Excel's ``1.69512E+15``) goes through :class:`~decimal.Decimal`.

    Returns:
        nullable Int64 series (nulls where the cell was N/A/empty).

    Raises:
        InvalidCaptureError: a cell is not a number (names file, column and row), or a null
            where ``allow_null`` is False.
    """
    s = values.astype("string")
    null = s.isna()
    if null.any() and not allow_null:
        bad = int(rows[null].iloc[0])
        raise InvalidCaptureError(f"{column} is empty or N/A", path=path, row=bad)
    digits = len(str(scale)) - 1
    plain = s.str.fullmatch(r"-?\d+(\.\d*)?").fillna(False).astype(bool)
    result = pd.Series(pd.array([pd.NA] * len(s), dtype="Int64"), index=s.index)
    if plain.any():
        p = s[plain]
        neg = p.str.startswith("-")
        p = p.str.lstrip("-")
        parts = p.str.split(".", n=1, expand=True)
        ip = parts[0].astype("int64")
        if parts.shape[1] > 1:
            frac = parts[1].fillna("").str.ljust(digits + 1, "0")
        else:
            frac = pd.Series(["0" * (digits + 1)] * len(p), index=p.index)
        head = frac.str.slice(0, digits).replace("", "0").astype("int64") if digits else 0
        roundup = (frac.str.slice(digits, digits + 1).astype("int64") >= 5).astype("int64")
        val = ip * scale + head + roundup
        val = val.where(~neg, -val)
        result[plain] = val.astype("Int64")
    other = ~plain & ~null
    if other.any():
        for idx in s.index[other]:
            text = s[idx]
            try:
                result[idx] = _decimal_to_units(text, scale)
            except (InvalidOperation, ValueError):
                raise InvalidCaptureError(f"{column} is not a number: {text!r}", path=path,
                                          row=int(rows[idx])) from None
    return result


def to_float(values: pd.Series, *, path: Path, column: str, rows: pd.Series) -> pd.Series:
    """Parse a string column to float64 (nulls -> NaN); a non-numeric cell is an error."""
    out = pd.to_numeric(values, errors="coerce")
    bad = out.isna() & values.notna()
    if bad.any():
        idx = bad[bad].index[0]
        raise InvalidCaptureError(f"{column} is not a number: {values[idx]!r}", path=path,
                                  row=int(rows[idx]))
    return out.astype("float64")
