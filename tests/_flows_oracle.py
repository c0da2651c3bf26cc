"""The per-hit flow loop that perfgate.ingest.tracebytes._flows replaced,
kept as the test oracle: every hit of ``async_npu`` / ``HostToDevice`` handed with its own
object (the raw ``{`` before it to the raw ``}`` after it) to validity.flow_event, one Python
call per hit, in file order per category."""
from __future__ import annotations

import numpy as np

from perfgate.ingest.tracebytes import _equals
from perfgate.ingest.validity import _FLOW_CATS, flow_event


def flows_loop(blk, flows) -> None:
    """Same signature as tracebytes._flows."""
    buf, start, b, w64, qo, code, cut, raw_br = blk.buf, blk.start, blk.bp, blk.w64, blk.qo, blk.code, blk.cut, blk.raw_br
    raw_open = raw_close = None
    for cat in _FLOW_CATS:
        m = np.flatnonzero(code == cat[0] * 64 + len(cat))
        m = m[_equals(w64, qo[m] + 1, cat)]
        pos = qo[m]
        pos = pos[pos < cut]
        if not len(pos):
            continue
        if raw_open is None:
            ch = b[raw_br]
            raw_open, raw_close = raw_br[ch == 123], raw_br[ch == 125]
        i = np.searchsorted(raw_open, pos) - 1
        j = np.searchsorted(raw_close, pos)
        good = (i >= 0) & (j < len(raw_close))
        starts, ended = flows
        for lo, hi in zip((raw_open[i[good]] + start).tolist(), (raw_close[j[good]] + start + 1).tolist()):
            flow_event(bytes(buf[lo:hi]), cat, starts, ended)
