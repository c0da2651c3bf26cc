"""JSON documents written fast where that is exact: orjson for plain documents, the standard
library for everything else.

A 5,236-step (1M-row) fingerprint is a ~30 MB document (~600k floats, ~70k dicts); the standard
library's indenting encoder is pure Python and took ~2 s of ``perfgate fingerprint`` and of
``baseline save`` on it, orjson ~0.1 s (plus ~0.1 s for :func:`plain`). The two write the same
document where the document is *plain* (:func:`plain`); where it is not, the standard library
writes it exactly as before: its NaN / Infinity literals (orjson would write ``null``, a different
document), its integers beyond 64 bits, its non-str keys, its TypeError for a value JSON cannot
hold (orjson would write a dataclass, an enum or a UUID the standard library refuses).

Layer: stdlib + orjson only; used by the CLI and the baseline store.
"""
from __future__ import annotations

import json
import re
import sys

_ATOMS = frozenset((str, int, bool, type(None)))
_ATOMS_F = _ATOMS | {float}


def _finite(x: float) -> bool:
    return x - x == 0.0  # inf - inf and nan - nan are nan


def plain(o) -> bool:
    """True when ``o`` is built only of dicts, lists and tuples of str, int, bool, None and
    *finite* floats, exact types (no subclass, enum, numpy scalar, dataclass...). orjson writes
    such a document as the standard library reads it back; it raises TypeError by itself for
    the rest (a non-str key, an int beyond 64 bits), so those are not checked here. Floats are
    checked by C-level passes (a ``sum`` of finite floats is finite; an overflow to inf only sends
    the document to the standard library, never the other way)."""
    t = type(o)
    if t is dict:
        vals = o.values()
    elif t is list or t is tuple:
        vals = o
    elif t is float:
        return _finite(o)
    else:
        return t in _ATOMS
    types = set(map(type, vals))
    if types <= _ATOMS:
        return True
    if types <= _ATOMS_F:
        return _finite(sum(vals) if len(types) == 1 else sum(v for v in vals if type(v) is float))
    return all(map(plain, vals))


def dumps(obj, *, sort_keys: bool = False) -> bytes:
    """``obj`` as UTF-8 JSON bytes ending in a newline, indented by two spaces.

    orjson when :func:`plain`; otherwise, or if orjson refuses a value (a non-str key, an int
    beyond 64 bits), ``json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False)``.
    Either way ``json.loads`` of the result equals ``json.loads`` of the standard library's text.

    A string holding a lone surrogate (read from a ``"\\udc80"`` escape; not encodable as UTF-8) makes
    the whole document ASCII with ``\\u`` escapes, which reads back to the same strings.

    Raises:
        TypeError / ValueError: as ``json.dumps`` (a value JSON cannot hold).
    """
    if plain(obj):
        try:
            import orjson
        except ImportError:  # pragma: no cover - orjson is a runtime dependency
            orjson = None
        if orjson is not None:
            opt = (orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_SUBCLASS)  # (plain() already refused those: belt and braces)
            if sort_keys:
                opt |= orjson.OPT_SORT_KEYS
            try:
                return orjson.dumps(obj, option=opt) + b"\n"
            except TypeError:  # a non-str key, an int beyond 64 bits: the standard library decides
                pass
    return std_bytes(obj, sort_keys=sort_keys)


def std_bytes(obj, *, sort_keys: bool = False) -> bytes:
    """The standard library's text of ``obj`` (indented by two spaces, newline-terminated) as
    UTF-8; when a string holds a lone surrogate (read from a ``"\\udc80"`` escape, not encodable
    as UTF-8) the whole document is written ASCII with ``\\u`` escapes instead, which reads back
    to the same strings.

    Raises:
        TypeError / ValueError: as ``json.dumps``."""
    try:
        return (json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=True) + "\n").encode("ascii")


def loads(data, **kw):
    """``json.loads(data, **kw)`` where a document nested deeper than Python's recursion limit
    (``[[[[...]]]]`` a thousand levels down: never a profiler's, a baseline's or GitHub's file)
    raises ``json.JSONDecodeError("nesting too deep", ...)`` like any other invalid JSON instead
    of ``RecursionError``, so every reader's invalid-JSON error (exit 3 / 5 / 2) names the file.
    An integer longer than ``sys.get_int_max_str_digits()`` (4,300 digits) is a
    ``json.JSONDecodeError`` too (Python raises ``ValueError`` for it)."""
    try:
        return json.loads(data, **kw)
    except RecursionError:
        text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data)
        raise json.JSONDecodeError("nesting too deep", text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:   # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        if "digits" not in str(e):
            raise
        text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data)
        limit = sys.get_int_max_str_digits()
        m = re.search("[0-9]{%d,}" % (limit + 1), text)
        raise json.JSONDecodeError(f"a number has more digits than Python reads ({limit})",
                                   text, m.start() if m else 0) from None
