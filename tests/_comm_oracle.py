"""Oracle: perfgate.ingest.comm._gather / _numbers as they were before the per-step and per-kind
list building became C-level passes, kept verbatim for
tests/metrics/test_columnar_selfcheck.py."""
from __future__ import annotations

from itertools import chain
from operator import itemgetter

import numpy as np
import pandas as pd
import pyarrow as pa

from perfgate.ingest.comm import LINK_COLUMNS, OP_COLUMNS, TOTAL_KEY, _STEP_RE
from perfgate.ingest.kernels import IMPLICIT_STEP


_ABSENT = float("nan")  # Start Timestamp(us) missing: NaN (this very object, told from a NaN value)
_TIME_INFO, _BANDWIDTH_INFO = "Communication Time Info", "Communication Bandwidth Info"
_OP_FIELDS = ("Start Timestamp(us)", "Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)",
              "Synchronization Time(ms)", "Idle Time(ms)")
_LINK_FIELDS = ("Transit Size(MB)", "Transit Time(ms)")


def _numbers(objs: list, fields: tuple, absent: tuple) -> np.ndarray | None:
    """``fields`` of every dict in ``objs`` as a float64 array (rows x fields; a missing key
    reads as its ``absent`` value), or None when a value is not a finite non-negative JSON
    number (a missing ``Start Timestamp(us)``, ``_ABSENT``, is allowed): the reference reader
    then names it. One C-level pass (``itemgetter``) when every key is present."""
    try:
        rows = list(map(itemgetter(*fields), objs)) if len(fields) > 1 else [(o[fields[0]],) for o in objs]
    except KeyError:
        rows = [tuple(o.get(f, d) for f, d in zip(fields, absent)) for o in objs]
    if not rows:
        return np.zeros((0, len(fields)))
    if not set(map(type, chain.from_iterable(rows))) <= {int, float}:  # bool, None, str, list, dict
        return None
    try:
        arr = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=len(rows) * len(fields))
        arr = arr.reshape(len(rows), len(fields))
    except (OverflowError, ValueError, TypeError):
        return None
    ok = np.isfinite(arr)
    if not ok.all():
        bad = np.argwhere(~ok)
        if not all(rows[i][j] is _ABSENT for i, j in bad):
            return None
    return arr if not (arr < 0).any() else None


def _gather(doc: dict):
    """``(ops, links)`` DataFrames from a parsed communication.json, gathered column by column
    (C-level passes over the parsed dicts; no row dict per op or link), or ``(None, None)``
    when anything differs from what the reference reader (:func:`read_communication_loop`)
    accepts without error."""
    steps, kinds_col, names, groups, infos = [], [], [], [], []
    for step_key, kinds in doc.items():
        m = _STEP_RE.match(step_key)
        if not m or type(kinds) is not dict:
            return None, None
        step = m.group(1).lstrip("0") or ("0" if m.group(1) else IMPLICIT_STEP)
        for kind, ops in kinds.items():
            if type(ops) is not dict:
                return None, None
            keys = [k for k in ops if k != TOTAL_KEY]
            n = len(keys)
            steps += [step] * n
            kinds_col += [kind] * n
            parts = [k.partition("@") for k in keys]
            names += [p[0] for p in parts]
            groups += [p[2] for p in parts]
            infos += [ops[k] for k in keys]
    if not steps:
        return pd.DataFrame([], columns=OP_COLUMNS), pd.DataFrame([], columns=LINK_COLUMNS)
    if set(map(type, infos)) != {dict}:
        return None, None
    times = [i.get(_TIME_INFO) for i in infos]
    if set(map(type, times)) != {dict} or not all("Elapse Time(ms)" in t for t in times):
        return None, None
    op_num = _numbers(times, _OP_FIELDS, (_ABSENT, 0.0, 0.0, 0.0, 0.0, 0.0))
    if op_num is None:
        return None, None
    bws = [i.get(_BANDWIDTH_INFO) for i in infos]
    if not set(map(type, bws)) <= {dict, type(None)} and not all(type(b) is dict or not b for b in bws):
        return None, None
    per_op = [b.values() if b else () for b in bws]
    if set(map(type, chain.from_iterable(per_op))) <= {dict}:  # the usual file: every link an object
        l_idx = np.repeat(np.arange(len(bws), dtype=np.int64), [len(v) for v in per_op])
        l_name = [link for b in bws if b for link in b]
        l_info = list(chain.from_iterable(per_op))
    else:  # a link that is not an object is skipped, as by the reference reader
        l_idx, l_name, l_info = [], [], []
        for j, b in enumerate(bws):
            for link, li in (b.items() if b else ()):
                if type(li) is dict:
                    l_idx.append(j)
                    l_name.append(link)
                    l_info.append(li)
    link_num = _numbers(l_info, _LINK_FIELDS, (0.0, 0.0))
    if link_num is None:
        return None, None
    # string columns through Arrow (pandas' own list -> str conversion checks every element)
    text = {"step": pa.array(steps, pa.string()), "kind": pa.array(kinds_col, pa.string()),
            "op": pa.array(names, pa.string()), "group": pa.array(groups, pa.string())}
    cols = {c: text[c].to_pandas() for c in text}
    cols["start_us"] = op_num[:, 0].copy()
    for j, c in enumerate(("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us"), start=1):
        cols[c] = op_num[:, j] * 1000.0
    ops = pd.DataFrame(cols, columns=OP_COLUMNS)
    if not len(l_idx):
        return ops, pd.DataFrame([], columns=LINK_COLUMNS)
    take = pa.array(l_idx, pa.int64())
    links = pd.DataFrame({"step": text["step"].take(take).to_pandas(), "kind": text["kind"].take(take).to_pandas(),
                          "op": text["op"].take(take).to_pandas(),
                          "link": pa.array(l_name, pa.string()).to_pandas(), "size_mb": link_num[:, 0].copy(),
                          "time_us": link_num[:, 1] * 1000.0}, columns=LINK_COLUMNS)
    return ops, links
