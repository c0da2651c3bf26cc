r'''CSV reading by header name with pyarrow, and exact decimal parsing.

Every cell is read as a string (pyarrow's CSV engine handles quotes, doubled quotes such as
``"""8,2048"""``, CRLF and a UTF-8 BOM), whitespace and the Excel-guard TAB are trimmed, and
``N/A`` / empty cells become nulls. Numbers are converted afterwards so that a bad cell can be
reported with its file and row instead of silently turning into NaN.

Numeric columns accept only the not-applicable spellings of :data:`NA_MARKERS` (``N/A``,
empty; SCHEMAS.md §1); ``nan``, ``inf``, ``None`` or text there is an
:class:`~perfgate.errors.InvalidCaptureError` from :func:`cell_error`, which names the file,
the data row (``row``; the header is row 0) and the same row counted the way a spreadsheet
does (header = row 1), the column and the cell text.
'''
from __future__ import annotations

import csv
import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import MISSING_TOKENS, NA_MARKERS


def csv_row_note(row: int) -> str:
    """``(CSV row <row + 1> counting the header as row 1)``: the line a spreadsheet or editor shows
    for 1-based data row ``row`` (the first line after the header is data row 1)."""
    return f"(CSV row {row + 1} counting the header as row 1)"


# Characters of a cell shown in a message; a longer cell is cut and the rest counted.
CELL_SHOWN = 60


def shown_cell(text) -> str:
    """A cell as a message quotes it: ``repr`` (control characters, quotes and spaces visible:
    ``' -5'``, ``'\\t-5'``) of at most :data:`CELL_SHOWN` characters, then ``… (N more
    characters)`` for a longer cell."""
    if isinstance(text, str) and len(text) > CELL_SHOWN:
        return f"{text[:CELL_SHOWN]!r}… ({len(text) - CELL_SHOWN} more characters)"
    return repr(text)


def cell_error(path: Path, row: int, column: str, text, why: str) -> InvalidCaptureError:
    """The error for one bad numeric cell: ``<file> row <data row>: <column> <why>: <text>
    (CSV row <data row + 1>, header = row 1)``. ``row`` is the 1-based data row (the first
    line after the header is row 1, as everywhere in perfgate's messages); ``text`` is shown by
    :func:`shown_cell` (repr, bounded length).

    A cell holding its own column's name, on a data row equal to the header line
    (:func:`_repeats_header`: the file is read again, for this message only), is no bad cell
    but the header repeated mid-file (two exports concatenated): the error says so instead."""
    if isinstance(text, str) and text.strip() == column.strip() and _repeats_header(path, row):
        return InvalidCaptureError(
            f"the header line is repeated at data row {row} {csv_row_note(row)}: a concatenated export "
            f"(two files joined into one; its rows would be counted twice)", path=path, row=row,
            hint="re-export the capture, or keep one export: one header line, then its rows")
    return InvalidCaptureError(f"{column} {why}: {shown_cell(text)} {csv_row_note(row)}", path=path, row=row)


def _repeats_header(path: Path, row: int) -> bool:
    """True when 1-based data row ``row`` of the CSV file holds the header line's fields
    (spaces and the Excel-guard TAB ignored, a BOM too)."""
    try:
        with open(path, "r", encoding="utf-8-sig", newline="", errors="replace") as f:
            reader = csv.reader(f)
            header = [h.strip().lstrip("\ufeff") for h in next(reader, [])]
            for i, rec in enumerate(reader, start=1):
                if i == row:
                    return bool(header) and [c.strip().lstrip("\ufeff") for c in rec] == header
    except (OSError, csv.Error):
        return False
    return False


def header_unterminated(path: Path) -> str | None:
    """The end of the file's first line (at most 40 characters, as :func:`shown_cell` quotes
    it) when that line has no line break, i.e. the file ends inside its header line (cut
    short, or a header with no data row after it); None otherwise."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return None
    if not first or first.endswith((b"\n", b"\r")):
        return None
    text = first.decode("utf-8-sig", errors="replace")
    return shown_cell(text[-40:]) if len(text) <= 40 else f"…{shown_cell(text[-40:])}"


def raw_cell(path: Path, row: int, column: str) -> str | None:
    """The cell of header ``column`` in 1-based data row ``row`` as written in the file (quotes
    removed by the CSV rules, spaces, TABs and every other character kept), or None when the file
    no longer has that row or column. Reads the file again from the start with the csv module:
    for error messages only (a parsed value such as ``-5.000`` is not what the user will find in
    the file, ``" -5"`` is)."""
    try:
        with open(path, "r", encoding="utf-8-sig", newline="", errors="replace") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if column not in header:
                return None
            j = header.index(column)
            for i, rec in enumerate(reader, start=1):
                if i == row:
                    return rec[j] if j < len(rec) else None
    except (OSError, csv.Error):
        return None
    return None


def read_header(path: Path) -> list[str]:
    """Return the header fields of a CSV file (BOM stripped).

    Raises:
        InvalidCaptureError: the file is missing, empty (0 bytes) or has no header line, its
            lines end in a bare CR, or its header line is not valid CSV.
    """
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if size == 0:
        raise InvalidCaptureError("file is empty (0 bytes)", path=path,
                                  hint="the profiler export did not finish; re-export the capture")
    try:
        with open(path, "rb") as f:  # bytes: a text reader decodes a whole buffer, so a bad byte in a
            raw = f.readline()       # later data row would be blamed on the header
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    try:
        first = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidCaptureError(f"header is not UTF-8 text (byte {e.start} of the first line)",
                                  path=path, row=0) from None
    body = raw.rstrip(b"\r\n")
    if b"\r" in body:   # the whole file read as one line: its lines end in a bare CR
        raise InvalidCaptureError(
            "lines end in a bare carriage return (CR, \\r) instead of LF or CRLF: no profiler writes "
            "that (an editor or a transfer converted the file)", path=path, row=0,
            hint="convert the line endings back (e.g. tr '\\r' '\\n'), or re-export the capture")
    try:
        fields = [h.strip() for h in next(csv.reader([first]), [])]
    except csv.Error as e:
        raise InvalidCaptureError(f"header line is not valid CSV: {e}", path=path, row=0) from None
    if not any(fields):
        raise InvalidCaptureError("first line is blank; expected a CSV header", path=path, row=0)
    seen: dict[str, int] = {}
    for i, h in enumerate(fields):
        if h and h in seen:   # which of the two would be read is a guess: refuse
            raise InvalidCaptureError(f"header names column {h!r} twice (CSV columns {seen[h] + 1} and {i + 1})",
                                      path=path, row=0, hint="a hand-edited or merged file: keep one of them")
        seen.setdefault(h, i)
    return fields


def _as_written(path: Path, names) -> dict[str, str]:
    """``{header name: header cell as written}`` for ``names`` (header names as
    :func:`read_header` gives them, spaces stripped): the CSV reader selects columns by the
    cell as written, so a hand-edited ``" Name"`` is still read as ``Name``."""
    with open(path, "rb") as f:
        cells = next(csv.reader([f.readline().decode("utf-8-sig")]), [])
    written = {c.strip(): c for c in cells}
    return {n: written.get(n, n) for n in names}


def resolve_columns(header: list[str], aliases: dict[str, tuple[str, ...]],
                    required: tuple[str, ...], path: Path) -> dict[str, str]:
    """Map canonical column -> header name present in ``header``.

    Raises:
        InvalidCaptureError: a required column has none of its spellings (the message lists
            every missing one and the header seen; a file ending inside its header line is
            named as a header cut short), or two spellings of one column both occur.
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
        tail = header_unterminated(path)
        if tail:
            raise InvalidCaptureError(
                f"the header line is cut short: the file ends inside it, after {tail} ({len(header)} "
                f"column(s), no line break, no data rows); required column(s) missing: {wanted}",
                path=path, row=0, hint=_CUT_HINT)
        raise InvalidCaptureError(
            f"required column(s) missing: {wanted}. Header has {len(header)} columns: "
            f"{', '.join(header[:12])}{' ...' if len(header) > 12 else ''}", path=path, row=0)
    return found


_ARROW_COLUMN = re.compile(r"(?:In )?CSV column #(\d+)")


def arrow_note(err, path: Path) -> str:
    """Arrow's CSV error text (first line, at most 160 characters) with its 0-based, unnamed
    ``CSV column #8`` re-worded as perfgate names columns: header name and 1-based number
    (``column 'Start Time(us)' (CSV column 9)``); the header is read again only here, after
    pyarrow failed. The rest of Arrow's text is kept as it was."""
    text = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
    try:
        header = read_header(path)
    except InvalidCaptureError:
        header = []

    def name(m: re.Match) -> str:
        i = int(m.group(1))
        lead = "in " if m.group(0).startswith("In ") else ""
        return (f"{lead}column {header[i]!r} (CSV column {i + 1})" if i < len(header)
                else f"{lead}CSV column {i + 1}")
    return _ARROW_COLUMN.sub(name, text)


_CUT_HINT = ("the file ends or breaks inside a row: the profiler export did not finish or the file was cut "
             "when copied; re-export or copy the capture again")


def _locate_bad_row(path: Path, ncols: int) -> tuple[int | None, str, str | None]:
    """Slow path, only after pyarrow failed: find the first malformed data row. Returns
    ``(data row or None, message, hint or None)``; a row with another field count than the
    header is named as the NaN-cell messages name theirs (data row, and the CSV row counting
    the header, :func:`csv_row_note`)."""
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, strict=True)
            next(reader, None)
            for i, rec in enumerate(reader, start=1):
                if rec and len(rec) < ncols:
                    return i, (f"expected {ncols} fields, found {len(rec)}: a truncated row (fewer fields than "
                               f"the header) {csv_row_note(i)}"), _CUT_HINT
                if rec and len(rec) > ncols:
                    return i, (f"expected {ncols} fields, found {len(rec)}: a malformed row (more fields than "
                               f"the header; an unquoted comma in a value?) {csv_row_note(i)}"), None
    except csv.Error as e:
        row = reader.line_num - 1 if reader.line_num else None
        return row, f"malformed CSV: {e}" + (f" {csv_row_note(row)}" if row else ""), None
    except UnicodeDecodeError as e:
        return _non_utf8_row(path, e), "not UTF-8 text (invalid byte sequence)", None
    except OSError as e:
        return None, f"cannot read file: {e.strerror}", None
    return None, "malformed CSV or invalid UTF-8", None


def _non_utf8_row(path: Path, err: UnicodeDecodeError) -> int | None:
    """Data row (1-based) holding the first invalid UTF-8 byte."""
    try:
        with open(path, "rb") as f:
            for i, line in enumerate(f):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return i  # header is line 0
    except OSError:
        return None
    return None


def read_arrow_columns(path: Path, columns: dict[str, str], ncols: int,
                       trim: set | None = None, numeric: set | frozenset = frozenset()) -> tuple[dict, int]:
    """Read the given header columns as Arrow string arrays; missing-value cells are null:
    in ``numeric`` columns only :data:`NA_MARKERS` (``N/A``, empty), in the others every
    spelling of :data:`MISSING_TOKENS` (``nan``, ``None``, ... too).

    Args:
        path: CSV file.
        columns: canonical name -> header name (from :func:`resolve_columns`).
        ncols: number of header fields (for error location).
        trim: canonical columns to strip of whitespace and the Excel-guard TAB (then checked
            for N/A again); None = all. Categorical columns can instead be trimmed per
            distinct value by the caller.
        numeric: canonical columns holding numbers (see above); their other non-numbers stay
            strings so that the converter reports them.

    Returns:
        ``({canonical: pyarrow.ChunkedArray}, rows)``. Only the requested columns are parsed
        (pyarrow's multithreaded CSV reader with column selection).

    Raises:
        InvalidCaptureError: malformed / truncated CSV (names the row), no data rows, or a
            file that ends inside its header line (no line break: no data rows, the header
            perhaps cut short).
    """
    raw = _as_written(path, columns.values())
    wanted = list(dict.fromkeys(raw[c] for c in columns.values()))
    convert = pacsv.ConvertOptions(include_columns=wanted, column_types={c: pa.string() for c in wanted},
                                   null_values=list(NA_MARKERS), strings_can_be_null=True,
                                   quoted_strings_can_be_null=True)
    table = None
    # Profiler CSVs have no line breaks inside values, which lets pyarrow split the file into
    # blocks parsed in parallel; a file that has them is read again in the slower mode.
    for newlines in (False, True):
        try:
            table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(block_size=TYPED_BLOCK_BYTES),
                                   parse_options=pacsv.ParseOptions(newlines_in_values=newlines),
                                   convert_options=convert)
            break
        except (pa.ArrowInvalid, UnicodeDecodeError) as e:
            if not newlines and "UTF8" not in str(e) and not isinstance(e, UnicodeDecodeError):
                continue
            tail = header_unterminated(path)
            if tail:   # the whole file is one line: pyarrow calls it empty
                raise InvalidCaptureError(
                    f"file has a header but no data rows: it ends inside its header line (no line break "
                    f"after {tail}), so the header may be cut short too", path=path, row=0,
                    hint=_CUT_HINT) from None
            row, why, hint = _locate_bad_row(path, ncols)
            raise InvalidCaptureError(f"{why} [{arrow_note(e, path)}]", path=path, row=row,
                                      hint=hint) from None
        except OSError as e:
            raise InvalidCaptureError(f"cannot read file: {e.strerror or e}", path=path) from None
    if table.num_rows == 0:
        raise InvalidCaptureError("file has a header but no data rows", path=path, row=0,
                                  hint="an empty export is not a capture; check that profiling ran")
    missing, markers = pa.array(MISSING_TOKENS), pa.array(NA_MARKERS)
    out = {}
    for canon, col in columns.items():
        arr = table.column(raw[col])
        if trim is None or canon in trim:
            arr = pc.utf8_trim_whitespace(arr)
        na = pc.is_in(arr, value_set=markers if canon in numeric else missing)
        if pc.any(na).as_py():  # copying the column only when a cell is a missing-value token
            arr = pc.if_else(na, pa.scalar(None, pa.string()), arr)
        out[canon] = arr
    return out, table.num_rows


# Bytes of CSV text per block of the CSV reader (blocks are parsed in parallel). 1 MiB (pyarrow's
# default): on 1M-row kernel_details.csv files (21 columns typed, 2-core machine under load,
# paired child processes) read_kernels took 0.75-0.93x the CPU time of 4 MiB blocks (medians
# of 3-4 pairs on three shapes); 4 MiB itself took 1.2-1.7x less than 16 MiB, 2 and 8 MiB
# were in between.
TYPED_BLOCK_BYTES = 1 << 20

# Arrow type of a column read by the CSV reader itself (see :func:`read_typed_columns`).
DICT_STRING = pa.dictionary(pa.int32(), pa.string())
DECIMAL_US = pa.decimal128(38, 3)


def read_typed_columns(path: Path, columns: dict[str, str], types: dict) -> tuple[dict, int] | None:
    """Fast path: let pyarrow's CSV reader parse the given header columns straight into Arrow
    types (``DICT_STRING`` for names, ``DECIMAL_US`` for µs values with up to 3 decimals,
    ``pa.float64()``), ``N/A`` / empty cells null (:data:`NA_MARKERS` only: ``nan`` or
    ``None`` in a decimal column makes the fast path give up, and stays a string in a text
    column, where the caller maps it), in one multithreaded pass. Note that pyarrow parses
    ``nan`` / ``inf`` into a float64 column: callers check those for finiteness.

    Args:
        columns: canonical name -> header name; types: canonical name -> Arrow type (string
            when absent).

    Returns:
        ``({canonical: pyarrow.ChunkedArray}, rows)``, or None whenever anything does not
        parse cleanly (a malformed row, a cell that is not a number of its type, a value with
        more than 3 decimals, no data rows, an unreadable file): the caller then takes the
        string path (:func:`read_arrow_columns` + :func:`exact_scaled_arrow`), which gives
        the same values or the error naming file and row.
    """
    try:
        raw = _as_written(path, columns.values())
    except (OSError, UnicodeDecodeError):
        return None
    wanted = list(dict.fromkeys(raw[c] for c in columns.values()))
    col_types = {raw[columns[c]]: types.get(c, pa.string()) for c in columns}
    convert = pacsv.ConvertOptions(include_columns=wanted, column_types=col_types,
                                   null_values=list(NA_MARKERS), strings_can_be_null=True,
                                   quoted_strings_can_be_null=True)
    try:
        table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(block_size=TYPED_BLOCK_BYTES),
                               parse_options=pacsv.ParseOptions(newlines_in_values=False),
                               convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, OSError):
        return None
    if table.num_rows == 0:
        return None
    return {canon: table.column(raw[col]) for canon, col in columns.items()}, table.num_rows


def chunks_to_numpy(arr: pa.ChunkedArray, dtype) -> np.ndarray:
    """``arr.to_numpy(zero_copy_only=False).astype(dtype)`` (nulls of a float column -> NaN),
    built by copying each chunk into one array numpy allocates. A CSV read yields ~400 chunks
    per million rows; ``ChunkedArray.to_numpy`` concatenates them in a fresh Arrow buffer,
    whose first touch cost 0.2-0.3 s per 24 MB column at 3M rows on a 2-core VM (~20 times
    the copy: page faults at 4 KiB), against one fault per page of numpy's own array (the cost
    that grew faster than the rows from 1M to 3M)."""
    out = np.empty(len(arr), dtype=dtype)
    i = 0
    for ch in arr.chunks:
        k = len(ch)
        if k:
            out[i:i + k] = ch.to_numpy(zero_copy_only=False)
            i += k
    return out


def decimal_to_scaled_int(arr: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``decimal128(p, s)`` column as its exact unscaled integers (``value * 10**s``: µs
    with 3 decimals -> integer ns), without any float: the buffer is viewed as
    ``decimal128(p, 0)`` (the same unscaled integers) and cast to int64 by Arrow, which refuses
    any value outside int64.

    Returns:
        ``(int64 ndarray, null mask)`` (nulls -> 0), or None when a value does not fit in int64.
    """
    if not arr.num_chunks:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    unscaled = pa.decimal128(arr.type.precision, 0)
    try:
        ints = pc.cast(pa.chunked_array([c.view(unscaled) for c in arr.chunks], unscaled), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    null = chunks_to_numpy(arr.is_null(), bool) if arr.null_count else np.zeros(len(arr), dtype=bool)
    if arr.null_count:
        ints = pc.fill_null(ints, 0)
    return chunks_to_numpy(ints, np.int64), null


def read_string_table(path: Path, columns: dict[str, str], ncols: int,
                      numeric: set | frozenset = frozenset()) -> pd.DataFrame:
    """Like :func:`read_arrow_columns` (``numeric`` as there), as a pandas DataFrame of
    strings plus ``row`` (1-based data row number, header = row 0). For small files
    (step_trace_time.csv)."""
    cols, n = read_arrow_columns(path, columns, ncols, numeric=numeric)
    df = pd.DataFrame({k: v.to_pandas() for k, v in cols.items()})
    df.insert(0, "row", np.arange(1, n + 1, dtype=np.int64))
    return df


def _decimal_to_units(text: str, scale: int) -> int:
    return int((Decimal(text) * scale).to_integral_value(rounding="ROUND_HALF_UP"))


_PLAIN = r"^(?P<neg>-?)(?P<i>\d+)(?:\.(?P<f>\d*))?$"


def _fixed_point(arr, digits: int, scale: int):
    """Fast path: every value has exactly ``digits`` decimals (profiler output does) or none.
    Dropping the point then gives the scaled integer exactly. None when not applicable."""
    valid = pc.drop_null(arr)
    if len(valid) == 0:
        return np.zeros(len(arr), dtype=np.int64)
    pos = pc.find_substring(valid, ".")
    try:
        if pc.all(pc.equal(pos, -1)).as_py():
            ints = pc.cast(pc.fill_null(arr, "0"), pa.int64())
            return pc.multiply(ints, scale).to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
        width = pc.subtract(pc.subtract(pc.utf8_length(valid), pos), 1)
        if digits and pc.all(pc.and_(pc.greater_equal(pos, 0), pc.equal(width, digits))).as_py():
            ints = pc.cast(pc.replace_substring(pc.fill_null(arr, "0." + "0" * digits), ".", ""), pa.int64())
            return ints.to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # e.g. exponent notation: take the general path
    return None



def exact_scaled_arrow(values, scale: int, *, path: Path, column: str, allow_null: bool = True):
    """Parse decimal strings to exact integers of ``value * scale`` (e.g. µs -> ns: 1000).

    ``"1736408883704643.212"`` becomes 1736408883704643212 ns exactly: float64 would keep
    only ~16 significant digits. Plain decimals are split and converted by Arrow compute
    kernels (digits beyond the scale round half up); anything else (exponent notation such
    as Excel's ``1.69512E+15``) goes through :class:`~decimal.Decimal`.

    Returns:
        ``(values int64 ndarray, null mask bool ndarray)``.

    Raises:
        InvalidCaptureError: a cell is not a finite number (``nan``, ``inf``, ``None``, text;
            :func:`cell_error` names file, row, column and cell), out of int64 range, or a
            null (``N/A`` / empty) where ``allow_null`` is False.
    """
    arr = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])
    null = arr.is_null().to_numpy(zero_copy_only=False)
    if null.any() and not allow_null:
        raise cell_error(path, int(np.argmax(null)) + 1, column, "N/A or empty", "has no value")
    digits = len(str(scale)) - 1
    fast = _fixed_point(arr, digits, scale)
    if fast is not None:
        fast[null] = 0
        return fast, null
    m = pc.extract_regex(arr, _PLAIN)
    plain = m.is_valid().to_numpy(zero_copy_only=False)
    # more than 15 integer digits at ns scale would overflow int64: use the Decimal path
    ilen = pc.utf8_length(pc.if_else(m.is_valid(), pc.struct_field(m, "i"), "")).to_numpy(zero_copy_only=False)
    plain &= ilen <= 18 - digits
    ip = pc.cast(pc.if_else(plain, pc.struct_field(m, "i"), "0"), pa.int64())
    frac = pc.utf8_rpad(pc.if_else(plain, pc.struct_field(m, "f"), ""), digits + 1, "0")
    head = pc.cast(pc.utf8_slice_codeunits(frac, 0, digits), pa.int64()) if digits else 0
    rnd = pc.cast(pc.greater_equal(pc.utf8_slice_codeunits(frac, digits, digits + 1), "5"), pa.int64())
    val = pc.add(pc.add(pc.multiply(ip, scale), head), rnd)
    neg = pc.equal(pc.if_else(plain, pc.struct_field(m, "neg"), ""), "-")
    val = pc.if_else(neg, pc.negate(val), val)
    out = val.to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
    other = ~plain & ~null
    if other.any():
        for idx in np.flatnonzero(other):
            text = arr[int(idx)].as_py()
            if not text.isascii():   # Decimal takes full-width / Arabic-Indic digits ("５３.７４１"): no profiler writes them
                raise cell_error(path, int(idx) + 1, column, text, "is not a finite number (non-ASCII characters)")
            if "_" in text:          # nor digit separators ("5_3.741"), which Decimal also takes
                raise cell_error(path, int(idx) + 1, column, text, "is not a finite number (a '_' in it)")
            try:
                v = _decimal_to_units(text, scale)
            except (InvalidOperation, ValueError, OverflowError):
                raise cell_error(path, int(idx) + 1, column, text, "is not a finite number") from None
            if not -(2 ** 63) < v < 2 ** 63:
                raise cell_error(path, int(idx) + 1, column, text, "is out of range")
            out[idx] = v
    out[null] = 0
    return out, null


def to_float_arrow(values, *, path: Path, column: str, strict: bool = True) -> np.ndarray:
    """Arrow strings -> float64 ndarray (nulls -> NaN).

    ``strict``: a cell that is not a finite number (``nan``, ``inf``, text) is an error from
    :func:`cell_error`; otherwise it becomes NaN (non-finite floats are kept as parsed).
    """
    try:
        out = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ser = values.to_pandas()
        out = pd.to_numeric(ser, errors="coerce").to_numpy(dtype=np.float64)
        bad = np.isnan(out) & ser.notna().to_numpy()
        if strict and bad.any():
            i = int(np.argmax(bad))
            raise cell_error(path, i + 1, column, ser.iloc[i], "is not a finite number") from None
    if strict:
        bad = ~np.isfinite(out) & ~values.is_null().to_numpy(zero_copy_only=False)
        if bad.any():
            i = int(np.argmax(bad))
            raise cell_error(path, i + 1, column, values[i].as_py(), "is not a finite number")
    return out


def to_float(values: pd.Series, *, path: Path, column: str, rows: pd.Series,
             allow_null: bool = True) -> pd.Series:
    """Parse a string column to float64 (nulls -> NaN).

    Raises:
        InvalidCaptureError: a cell that is not a finite number (``nan``, ``inf``, text), or
            a null (``N/A`` / empty) when ``allow_null`` is False; :func:`cell_error` names
            the file, row (``rows``), column and cell.
    """
    out = pd.to_numeric(values, errors="coerce").astype("float64")
    if not allow_null and values.isna().any():
        idx = values[values.isna()].index[0]
        raise cell_error(path, int(rows[idx]), column, "N/A or empty", "has no value")
    bad = ~np.isfinite(out) & values.notna()
    if bad.any():
        idx = bad[bad].index[0]
        raise cell_error(path, int(rows[idx]), column, values[idx], "is not a finite number")
    return out
