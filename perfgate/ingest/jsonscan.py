"""Fast selective reading of a large JSON array of events (trace_view.json), bounded memory.

A torch_npu trace_view.json is one JSON array of millions of Chrome-trace events, of which the
gate needs a few hundred (process names, the Overlap Analysis events, ProfilerStep windows).
Building a Python dict for every event (ijson, json) costs ~4 µs an event; this module
instead finds the array's top-level items with a vectorised structural scan (numpy over
8 MiB blocks: quotes, backslash runs, brackets and commas outside strings — the first stage
of simdjson's design) and JSON-parses (stdlib ``json``; non-integer numbers kept as their exact text)
only the items whose bytes contain one of the caller's *needles* — or, in a block where at
least a third of the items hold a needle, all of the block's items in one call (cheaper than
slicing them out one by one, and every one of them then gets a full syntax check).

What is checked on every item: the array is closed, brackets balance and pair by kind
(``{`` with ``}``, ``[`` with ``]``), strings are closed (escapes honoured), items are
separated by exactly one comma (no empty item, no trailing comma), each object item is one
value, nothing but whitespace follows the array. Items that contain a needle (and every
non-object item) are fully parsed, so their syntax is checked too; the token syntax *inside*
the other objects (e.g. a misspelt ``tru``) is not — that would mean parsing them.

Needles must be conservative: an item whose parsed form matters must contain one of them
literally. For string values made of letters, digits, space and ``#()_`` the only other JSON
spelling is a ``\\uXXXX`` escape, so ``b"\\\\u"`` is always added as a needle.
"""
from __future__ import annotations

import json
import re

import numpy as np

from perfgate import jsonout

BLOCK = 8 << 20
_WS = b" \t\r\n"


class ScanError(ValueError):
    """Invalid or truncated JSON. ``offset``: absolute byte offset; ``truncated``: the file
    ends inside an unfinished value."""

    def __init__(self, message: str, offset: int, truncated: bool = False):
        super().__init__(message)
        self.offset = offset
        self.truncated = truncated


# What a document cut inside a number or literal leaves where ``json.loads`` stops: the start of
# a literal, or a number's dangling ``.`` / exponent (``1.``, ``1e``, ``1e+``: the number before it
# is read, then the next token is expected)
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER_TAIL = re.compile(r"\.|[eE][-+]?")
_ESCAPE_TAIL = re.compile(r"\\u[0-9a-fA-F]{0,4}")


def ends_unfinished(data: bytes, err: ValueError) -> bool:
    """Whether ``err``, raised by ``json.loads(data)`` of a whole document (a
    ``json.JSONDecodeError`` or ``UnicodeDecodeError``), means the document ends inside an
    unfinished value: a file cut short (its writer did not finish), not a wrong byte. That is
    the parser stopping at the end of the text (``Expecting value`` / ``',' delimiter`` / ...
    with nothing but whitespace after it), inside a string (``Unterminated string``), a
    ``\\uXXXX`` escape, a literal or a number (``tr``, ``-Inf``, ``1.``, ``1e+``), or a UTF-8
    sequence cut at the last byte. An empty document is not truncated (callers say "empty").
    Never raises."""
    if isinstance(err, UnicodeDecodeError):
        return err.reason == "unexpected end of data" and err.end >= len(data.rstrip(_WS))
    if not isinstance(err, json.JSONDecodeError) or not data.strip(_WS):
        return False
    doc, pos = err.doc, err.pos
    if err.msg.startswith("Unterminated string"):
        return True
    if err.msg.startswith("Invalid \\uXXXX escape"):
        return bool(_ESCAPE_TAIL.fullmatch(doc[doc.rfind("\\", 0, pos + 1):].rstrip()))
    rest = doc[pos:].rstrip()
    return (not rest or bool(_NUMBER_TAIL.fullmatch(rest) and doc[pos - 1:pos].isdigit())
            or any(lit.startswith(rest) and lit != rest for lit in _LITERALS))


def load_error(path, data: bytes, err: ValueError):
    """The :class:`~perfgate.errors.InvalidCaptureError` for a whole JSON document ``data``
    (the bytes of ``path``) that ``json.loads`` / orjson refused with ``err``: "truncated JSON:
    the file ends at byte N inside an unfinished value" when :func:`ends_unfinished` (a file
    cut short), "not UTF-8 text" at the first bad byte, else "invalid JSON: <reason>" at the
    byte offset of the parser's position (its character position converted to bytes: the two
    differ after non-ASCII text). Returned, not raised."""
    from perfgate.errors import InvalidCaptureError
    if ends_unfinished(data, err):
        return InvalidCaptureError(f"truncated JSON: the file ends at byte {len(data)} inside an unfinished value",
                                   path=path, byte_offset=len(data),
                                   hint="the profiler's export did not finish writing the file; re-export the "
                                        "capture")
    if isinstance(err, UnicodeDecodeError):
        return InvalidCaptureError("not UTF-8 text", path=path, byte_offset=err.start)
    pos, doc = getattr(err, "pos", None), getattr(err, "doc", None)
    if isinstance(doc, str) and pos is not None:
        pos = len(doc[:pos].encode("utf-8", "surrogatepass"))
    return InvalidCaptureError(f"invalid JSON: {getattr(err, 'msg', err)}", path=path, byte_offset=pos)


def _real_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of ``"`` that are not escaped (preceded by an even run of backslashes)."""
    q = np.flatnonzero(b == 34)
    if len(q) == 0:
        return q
    bs = b == 92
    if not bs.any():
        return q
    idx = np.arange(len(b))
    last_other = np.maximum.accumulate(np.where(bs, -1, idx))  # last non-backslash at or before i
    prev = q - 1
    run = np.where(prev >= 0, prev - last_other[np.maximum(prev, 0)], 0)
    return q[(run & 1) == 0]


def _is_ws(x: np.ndarray) -> np.ndarray:
    return (x == 32) | (x == 10) | (x == 13) | (x == 9)


def _skip_ws(b: np.ndarray, pos: np.ndarray, stop: np.ndarray, step: int) -> np.ndarray:
    """From each ``pos``, move by ``step`` over JSON whitespace, not past ``stop``: the first
    (step +1) or last (step -1) non-whitespace byte of each item; ``stop`` when there is none."""
    pos = pos.copy()
    todo = np.flatnonzero(pos != stop)
    for _ in range(16):  # separators are usually "," / ",\n" / ", ": a few vectorised steps
        if not len(todo):
            return pos
        m = _is_ws(b[pos[todo]])
        todo = todo[m]
        pos[todo] += step
        todo = todo[pos[todo] != stop[todo]]
    for i in todo:  # long whitespace runs
        j, s = int(pos[i]), int(stop[i])
        while j != s and int(b[j]) in _WS:
            j += step
        pos[i] = j
    return pos


def _find_all(buf: bytes, needle: bytes, end: int) -> list:
    out, i = [], buf.find(needle, 0, end)
    while i >= 0:
        out.append(i)
        i = buf.find(needle, i + 1, end)
    return out


def iter_selected(f, start: int, size: int, needles: tuple, block: int = BLOCK):
    """Scan the JSON array whose ``[`` is at byte ``start`` of the binary file ``f``.

    Yields ``(count, events)`` per block: ``count`` top-level items completed in the block,
    ``events`` the parsed items that contain a needle or are not objects.

    Raises:
        ScanError: invalid JSON (with the absolute byte offset) or a truncated file.
    """
    needles = tuple(needles) + (b"\\u",)
    f.seek(start + 1)
    base = start + 1           # absolute offset of buf[0]; buf always starts at an item start
    pending = b""
    want = block
    closed = False
    seen = False               # any item before this block
    while not closed:
        data = f.read(want)
        eof = len(data) < want
        buf = pending + data
        if not buf and eof:
            raise ScanError(f"truncated JSON: the file ends at byte {size} inside an unfinished value",
                            size, truncated=True)
        b = np.frombuffer(buf, dtype=np.uint8)
        rq = _real_quotes(b)
        st = np.flatnonzero((b == 123) | (b == 125) | (b == 91) | (b == 93) | (b == 44))
        st = st[(np.searchsorted(rq, st) & 1) == 0]  # outside strings: an even number of quotes before
        ch = b[st]
        opener = (ch == 123) | (ch == 91)
        closer = (ch == 125) | (ch == 93)
        depth = 1 + np.cumsum(opener.astype(np.int64) - closer, dtype=np.int64)  # depth after each char
        neg = np.flatnonzero(depth < 0)
        if len(neg):
            raise ScanError(f"unbalanced {chr(ch[neg[0]])}", base + int(st[neg[0]]))
        zero = np.flatnonzero(depth == 0)
        if len(zero):
            z = int(zero[0])
            if ch[z] != 93:
                raise ScanError(f"{chr(ch[z])} closes the event array", base + int(st[z]))
            cut_root = int(st[z])
            st, ch, depth, opener, closer = st[:z], ch[:z], depth[:z], opener[:z], closer[:z]
            closed = True
        commas = st[(ch == 44) & (depth == 1)]
        if closed:
            ends = np.append(commas, cut_root)
        else:
            ends = commas
        if len(ends) == 0:
            if eof:
                raise ScanError(f"truncated JSON: the file ends at byte {size} inside an unfinished value",
                                size, truncated=True)
            pending, want = buf, want * 2  # one item larger than a block: read on
            continue
        starts = np.concatenate([[0], commas + 1])[: len(ends)]
        cut = int(ends[-1])
        # items: non-empty, one value each; brackets pair by kind
        first = _skip_ws(b, starts, ends, +1)
        last = _skip_ws(b, ends - 1, starts - 1, -1)
        empty = first >= ends
        if closed and len(ends) == 1 and empty[0] and not seen:
            starts, ends, first, last = starts[:0], ends[:0], first[:0], last[:0]  # "[]": no items
            empty = empty[:0]
        if empty.any():
            i = int(np.flatnonzero(empty)[0])
            raise ScanError("empty array item (a stray or trailing comma)", base + int(ends[i]))
        inside = st < cut
        _check_pairs(st[inside], ch[inside], depth[inside], opener[inside], base)
        obj = b[first] == 123
        top_close = st[inside][closer[inside] & (depth[inside] == 1)]
        if len(top_close):
            a = np.searchsorted(top_close, first)
            z = np.searchsorted(top_close, last)
            bad = obj & ((z >= len(top_close)) | (top_close[np.minimum(z, len(top_close) - 1)] != last) | (a != z))
        else:
            bad = obj
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ScanError("an array item holds more than one value (missing comma)", base + int(first[i]))
        if sum(buf.count(nd, 0, cut) for nd in needles) * 3 > len(starts):
            events = _parse_region(buf, cut, base)  # dense block: one parse of all its items
        else:
            hits = np.array(sorted({p for nd in needles for p in _find_all(buf, nd, cut)}), dtype=np.int64)
            pick = np.zeros(len(starts), dtype=bool)
            if len(hits):
                pick[np.searchsorted(starts, hits, side="right") - 1] = True
            pick |= ~obj
            events = _parse_items(buf, starts[pick], ends[pick], base)
        seen = seen or len(starts) > 0
        yield len(starts), events
        if closed:
            tail = buf[cut_root + 1:].strip(_WS)
            while not tail and not eof:
                more = f.read(1 << 20)
                eof = not more
                tail = more.strip(_WS)
            if tail:
                raise ScanError("data after the end of the event array", base + cut_root + 1)
            return
        pending = buf[cut + 1:]
        base += cut + 1
        want = block
        if eof and not pending.strip(_WS):
            raise ScanError(f"truncated JSON: the file ends at byte {size} inside an unfinished value",
                            size, truncated=True)


def _parse_region(buf: bytes, cut: int, base: int) -> list:
    """All items of ``buf[:cut]`` in one ``json.loads`` (every item's syntax checked)."""
    try:
        return jsonout.loads(b"[" + buf[:cut] + b"]", parse_float=str)
    except json.JSONDecodeError as err:
        raise ScanError(err.msg, base + max(err.pos - 1, 0)) from None
    except UnicodeDecodeError as err:
        raise ScanError("not UTF-8 text", base + max(err.start - 1, 0)) from None


def _parse_items(buf: bytes, starts: np.ndarray, ends: np.ndarray, base: int) -> list:
    """Parse the items ``buf[start:end]`` in one ``json.loads`` call (numbers that are not
    integers stay their exact text, e.g. ``"3118596.951"``); on an error, item by item to
    name the offset."""
    if not len(starts):
        return []
    parts = [buf[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    try:
        return jsonout.loads(b"[" + b",".join(parts) + b"]", parse_float=str)
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    for s, part in zip(starts.tolist(), parts):
        try:
            jsonout.loads(part, parse_float=str)
        except json.JSONDecodeError as err:
            raise ScanError(err.msg, base + s + err.pos) from None
        except UnicodeDecodeError as err:
            raise ScanError("not UTF-8 text", base + s + err.start) from None
    raise ScanError("invalid JSON", base + int(starts[0]))  # not reached: some item failed above


def _check_pairs(pos, ch, depth, opener, base):
    """Every bracket pairs with one of its kind (vectorised: per nesting level, brackets in
    position order must alternate opener, closer of the same kind)."""
    br = ch != 44
    if not br.any():
        return
    pos, ch, depth, opener = pos[br], ch[br], depth[br], opener[br]
    level = np.where(opener, depth, depth + 1)
    order = np.lexsort((pos, level))
    c, o, lv = ch[order], opener[order], level[order]
    if len(c) % 2 or not (o[0::2].all() and not o[1::2].any() and (lv[0::2] == lv[1::2]).all()):
        raise ScanError("brackets do not pair", base + int(pos[order[0]]))
    kind_ok = ((c[0::2] == 123) & (c[1::2] == 125)) | ((c[0::2] == 91) & (c[1::2] == 93))
    if not kind_ok.all():
        i = int(np.flatnonzero(~kind_ok)[0])
        raise ScanError(f"{chr(c[2 * i])} closed by {chr(c[2 * i + 1])}", base + int(pos[order[2 * i + 1]]))
