"""Kernel-level tables: families, categories and per-step aggregates.

All functions take the kernel table of :mod:`perfgate.ingest.kernels` (columns ``step``,
``name``, ``op_type``, ``core_type``, ``start_ns``, ``dur_ns``, ``end_ns``, ``is_comm``) and
return new frames; inputs are never mutated.
"""
from __future__ import annotations

import re
import weakref
from itertools import repeat
from math import isfinite as _isfinite

import numpy as np
import pandas as pd

from perfgate import terms
from perfgate.errors import PolicyError

UNKNOWN = "unknown"


_DTYPES: dict = {}   # categorical_dtype's remembered dtypes


def categorical_dtype(categories) -> pd.CategoricalDtype:
    """``pd.CategoricalDtype(categories)`` (unordered), remembered per distinct categories when
    they are all str (a list / tuple, or an Index: keyed by its dtype too): building one types
    and validates its categories (~0.1-0.6 ms), and ``Categorical.from_codes(codes,
    categories=...)`` builds one per call, several times per rank for the same label lists
    (operator classes, phases, category rules, families). ``from_codes(codes, dtype=this)``
    gives the same Categorical. Other categories are not remembered."""
    vals = categories.tolist() if isinstance(categories, pd.Index) else list(categories)
    if not all(type(v) is str for v in vals):
        return pd.CategoricalDtype(categories if isinstance(categories, pd.Index) else vals, ordered=False)
    key = (str(categories.dtype) if isinstance(categories, pd.Index) else None, tuple(vals))
    got = _DTYPES.get(key)
    if got is None:
        if len(_DTYPES) >= 4096:
            _DTYPES.clear()
        got = _DTYPES[key] = pd.CategoricalDtype(categories if isinstance(categories, pd.Index) else vals,
                                                 ordered=False)
    return got


def as_category(s: pd.Series) -> pd.Series:
    """The column as a pandas categorical (unchanged when it already is one): the kernel table's
    name / family / type / step columns are grouped and matched on their integer codes."""
    return s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")


_PLAIN = {str, int, bool, type(None)}   # values :func:`records` passes through unchanged


def records(df: pd.DataFrame, limit: int | None = None) -> list[dict]:
    """A table as JSON-safe records, the first ``limit`` rows (all when None): numpy integers ->
    int, floats rounded to 6 decimals (NaN / ±inf -> None), ``pd.NA`` / None -> None; column
    names kept. Used for every table the fingerprint's ``detail`` and the structure report carry.
    Built column-wise (one ``tolist`` per column), not with ``to_dict("records")``: the same
    values at a fraction of the per-rank fixed cost."""
    d = df if limit is None else df.head(limit)
    names = list(d.columns)
    cols = [_json_column(col.to_numpy() if _numpy_kind(col.dtype) else None, col) for _, col in d.items()]
    # one Series per column above (positional: duplicate names are kept)
    return [dict(zip(names, row)) for row in zip(*cols)] if names else [{} for _ in range(len(d))]


def column_records(columns: dict, limit: int | None = None) -> list[dict]:
    """:func:`records` of ``pd.DataFrame(columns)`` (numpy arrays of equal length; object arrays
    of str / None) from the arrays themselves, without building the frame and one Series per
    column: the same records (a str column's None is None either way). Used for the family
    view's family table (~140 families x 21 columns per rank: ~2 ms through the frame)."""
    names = list(columns)
    arrays = [np.asarray(a) if limit is None else np.asarray(a)[:limit] for a in columns.values()]
    cols = [_json_column(a if a.dtype.kind in "fiub" else None, a) for a in arrays]
    n = len(arrays[0]) if arrays else 0
    return [dict(zip(names, row)) for row in zip(*cols)] if names else [{} for _ in range(n)]


def _numpy_kind(dtype) -> bool:
    return isinstance(dtype, np.dtype) and dtype.kind in "fiub"


def _json_column(arr, col) -> list:
    """The JSON-safe values of one column (see :func:`records`): ``arr`` its numpy array when
    the column is numpy float / int / bool, else None and ``col`` (a Series or object array)
    is read through ``tolist``."""
    if arr is not None:   # numpy column: its array's tolist gives Python floats / ints / bools
        values = arr.tolist()
        if arr.dtype.kind != "f":
            return values
        fin = np.isfinite(arr)
        if fin.all():
            return [round(v, 6) for v in values]
        if not fin.any():   # e.g. pipe stages without pipe data
            return [None] * len(values)
        return [round(v, 6) if _isfinite(v) else None for v in values]
    values = col.tolist()
    if set(map(type, values)) <= _PLAIN:   # str / int / bool / None only: nothing to clean
        return values
    clean = []
    for v in values:
        if isinstance(v, np.integer):
            v = int(v)
        elif isinstance(v, (float, np.floating)):
            v = None if not np.isfinite(v) else round(float(v), 6)
        elif v is pd.NA:
            v = None
        clean.append(v)
    return clean


SMALL_GROUP_ROWS = 4096   # below this many rows :func:`group_sums` sums in Python (no group-by set-up)
_SUM_MODE: list = []      # how this pandas sums a float group-by (see _pandas_sum_mode)


def _kahan(keys_ids, values, ngroups: int) -> list:
    """Per group: the Kahan-compensated sum of its non-NaN values in row order, as pandas'
    Cython ``group_sum`` computes it (an inf sum resets the compensation, GH#53606)."""
    sums = [0.0] * ngroups
    comp = [0.0] * ngroups
    for g, v in zip(keys_ids, values):
        if g < 0 or v != v:
            continue
        s = sums[g]
        y = v - comp[g]
        t = s + y
        c = t - s - y
        comp[g] = 0.0 if c != c else c
        sums[g] = t
    return sums


def _reduceat(ids: np.ndarray, values: np.ndarray, ngroups: int) -> list:
    """Per group: ``np.add.reduceat`` over the rows of each (contiguous) group, as pandas >= 3.1
    sums a float column when the group ids are sorted and no value is NaN."""
    na = int((ids < 0).sum())   # missing keys sort first
    ids, values = ids[na:], values[na:]
    out = np.zeros(ngroups)
    if len(ids):
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        out[ids[starts]] = np.add.reduceat(values, starts)
    return out.tolist()


def _pandas_sum_mode() -> str | None:
    """How the installed pandas sums float64 values in a group-by, probed once per process on
    values where the algorithms differ: ``"reduceat"`` (sorted group ids and no NaN value:
    ``np.add.reduceat``, else the compensated sum; pandas >= 3.1), ``"kahan"`` (always the
    compensated sum), None (neither: :func:`group_sums` then always calls the group-by)."""
    if not _SUM_MODE:
        # 64 values on which the compensated sum and reduceat's unrolled pairwise sum differ
        # in the last bit in both groups (checked by tests/metrics/test_rank_fixed_cost.py)
        vals = np.random.default_rng(1).random(64) / 10
        mono = np.array([0] * 32 + [1] * 32)
        mixed = np.array([0, 1] * 32)
        got_mono = pd.Series(vals).groupby(mono).sum().tolist()
        got_mixed = pd.Series(vals).groupby(mixed).sum().tolist()
        mode = None
        if got_mixed == _kahan(mixed.tolist(), vals.tolist(), 2):
            if got_mono == _kahan(mono.tolist(), vals.tolist(), 2):
                mode = "kahan"
            elif got_mono == _reduceat(mono, vals, 2):
                mode = "reduceat"
        _SUM_MODE.append(mode)
    return _SUM_MODE[0]


def group_sums(keys, values) -> dict | None:
    """``{key: sum}`` of the float ``values`` per key, keys in sorted order, bit for bit as
    ``pd.Series(values, dtype=float).groupby(keys).sum()`` (missing keys (None / NaN) left out,
    NaN values skipped, a group of NaN only sums to 0.0), for the small tables of one rank (a
    few dozen families or communication operations), where the pandas group-by's set-up costs
    ~0.5 ms per call. The algorithm is pandas' own, chosen as pandas chooses it
    (:func:`_pandas_sum_mode`): ``np.add.reduceat`` when the rows are already grouped in key
    order and no value is NaN (pandas >= 3.1), else the Kahan-compensated group sum. Returns
    None when the installed pandas sums some other way (callers then use the group-by).
    ``keys``: a list of str (or None / NaN); ``values``: a list of float."""
    mode = _pandas_sum_mode()
    if mode is None:
        return None
    uniq = sorted({k for k in keys if k is not None and k == k})
    code = {k: i for i, k in enumerate(uniq)}
    ids = [code.get(k, -1) if k is not None and k == k else -1 for k in keys]
    arr = np.asarray(values, dtype=np.float64)
    ida = np.asarray(ids, dtype=np.int64)
    if mode == "reduceat" and len(ida) and not np.isnan(arr).any() and (np.diff(ida) >= 0).all():
        sums = _reduceat(ida, arr, len(uniq))
    else:
        sums = _kahan(ids, arr.tolist(), len(uniq))
    return dict(zip(uniq, sums))


def str_values(s: pd.Series) -> np.ndarray:
    """The column as an object array of str (missing -> NaN), as ``s.astype(str).to_numpy()``
    gives it, built from the categories once instead of per row for a categorical column."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        return s.astype(str).to_numpy()
    cats = np.append(np.asarray(s.cat.categories.astype(str), dtype=object), np.nan)
    return np.take(cats, s.cat.codes.to_numpy())  # code -1 (missing) indexes the trailing NaN


def equals_value(s: pd.Series, value: str) -> np.ndarray:
    """Per row: is the column's text equal to ``value`` (missing -> False)? As
    ``str_values(s) == value``, compared on the categorical's codes instead of per-row strings."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        return str_values(s) == value
    cats = np.asarray(s.cat.categories.astype(str), dtype=object)
    return code_lookup(np.append(cats == value, False), s.cat.codes.to_numpy())


def aligned(s: pd.Series, df: pd.DataFrame) -> pd.Series:
    """``s.loc[df.index]``, or ``s`` itself when its index already equals ``df``'s (the usual
    case: both come from the same kernel table), without a label lookup per row."""
    return s if s.index is df.index or s.index.equals(df.index) else s.loc[df.index]


def present_values(col: pd.Series) -> list:
    """The distinct non-missing values of ``col`` in order of first appearance, as Python
    objects: ``np.asarray(pd.unique(col.dropna()), dtype=object).tolist()``. For a categorical
    (the kernel table's step column) from its codes and categories, without the dropped copy
    and the Categorical that ``pd.unique`` builds (~0.3 ms per call on a small rank)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.array.codes
        u, first = np.unique(codes[codes >= 0], return_index=True)
        cats = col.array.categories.tolist()
        return [cats[c] for c in u[np.argsort(first)].tolist()]
    return np.asarray(pd.unique(col.dropna()), dtype=object).tolist()


def positions_in(values: list, index) -> np.ndarray:
    """``pd.Index(values).get_indexer(index)`` for hashable ``values`` (a list) and ``index`` (an
    Index, array or list; e.g. a categorical's categories): per element of ``index``, its
    position in ``values``, else -1; by one dict (int64). Repeated ``values`` go through
    pandas, which refuses them (InvalidIndexError), as before."""
    at = dict(zip(values, range(len(values))))
    if len(at) != len(values):
        return pd.Index(values).get_indexer(index)
    items = index.tolist() if hasattr(index, "tolist") else list(index)
    # one C-level map pass (no Python call per element)
    return np.fromiter(map(at.get, items, repeat(-1)), dtype=np.int64, count=len(items))


def rows_where(df: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``df[mask]``, or ``df`` itself (no copy of its columns) when every row is kept: the
    common case of step-assigned rows, where a boolean getitem would copy every column of a
    1M-row table for nothing. Callers never mutate the result (the metric functions are pure)."""
    return df if mask.all() else df[mask]


def step_groups(df: pd.DataFrame) -> list:
    """Row positions of each step: ``[(step, idx), ...]`` in order of the step's first row,
    ``idx`` ascending (file order); rows with a blank step are left out. The same groups and
    order as ``df.groupby("step", observed=True, sort=False)``, from one stable sort of the
    step codes instead of a sub-frame (a copy of every column) per step."""
    step = as_category(df["step"])
    codes = step.cat.codes.to_numpy()
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(step.cat.categories) + 1))
    present = np.flatnonzero(np.diff(bounds) > 0)
    first = order[bounds[present]]
    return [(step.cat.categories[c], order[bounds[c]:bounds[c + 1]]) for c in present[np.argsort(first)]]


def sorted_codes(s: pd.Series) -> np.ndarray:
    """Integer codes ordered like the sorted distinct values (missing -> -1), as
    ``s.astype(object).astype("category").cat.codes`` gives them, without a per-row pass."""
    c = as_category(s)
    cats = np.asarray(c.cat.categories.astype(str), dtype=object)
    rank = np.empty(len(cats) + 1, dtype=np.int64)
    rank[np.argsort(cats, kind="stable")] = np.arange(len(cats))
    rank[-1] = -1
    return np.take(rank, c.cat.codes.to_numpy())


def family_of(names: pd.Series, suffix: re.Pattern) -> pd.Series:
    """Kernel family (categorical): the name with volatile numeric suffixes removed (policy
    regex). ``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``; ``trans_TransData_12`` ->
    ``trans_TransData``; names that would become empty keep their full text. The regex runs
    once per distinct name, not once per row."""
    arr = as_category(names).array

    def compute(texts):
        try:   # keyed on the rules' value (a compiled regex or frozen FamilyRules), never on id()
            memo = _memo_for(("family", suffix))
            whole = _memo_for(("family-all", suffix), 64)
        except TypeError:
            memo, whole = {}, {}
        tkey = tuple(texts)   # the same sorted names on every rank of a job: one answer for all
        if tkey in whole:
            return whole[tkey]
        fam = []
        for v in texts:   # each distinct name once per process (see _search_all)
            f = memo.get(v)
            if f is None:
                f = memo[v] = suffix.sub("", v) or v
            fam.append(f)
        if not fam:
            return np.array([-1], dtype=np.int64), pd.Index(np.array([], dtype=object), dtype=object)
        uniq, inv = np.unique(np.asarray(fam, dtype=object), return_inverse=True)
        table = np.append(np.asarray(inv, dtype=np.int64).ravel(), -1)
        table.flags.writeable = False
        res = whole[tkey] = (table, pd.Index(uniq, dtype=object))
        return res
    key = ("family", getattr(suffix, "pattern", None), getattr(suffix, "flags", None), id(suffix))
    table, cats = _per_category(arr.categories, key, compute)
    new = np.take(table, arr.codes)  # -1 stays -1
    return pd.Series(pd.Categorical.from_codes(new, dtype=categorical_dtype(cats)), index=names.index)


def canonical_core(df: pd.DataFrame) -> pd.Series:
    """Core type with communication rows folded to ``COMMUNICATION`` (HCCL <= 2025-01
    and COMMUNICATION later name the same thing); missing where the cell was N/A."""
    core = as_category(df["core_type"])
    cats = core.cat.categories
    if terms.COMM_CORE not in cats:
        cats = cats.append(pd.Index([terms.COMM_CORE], dtype=cats.dtype if len(cats) else object))
    codes = core.cat.codes.to_numpy().copy()
    codes[df["is_comm"].to_numpy()] = cats.get_loc(terms.COMM_CORE)
    used = np.unique(codes[codes >= 0])
    remap = np.full(len(cats) + 1, -1, dtype=np.int64)  # index -1 (missing) stays -1
    remap[used] = np.arange(len(used))
    return pd.Series(pd.Categorical.from_codes(remap[codes], dtype=categorical_dtype(cats[used])), index=df.index,
                     name=df["core_type"].name)


def code_lookup(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]`` for a per-category boolean ``table`` whose last entry (index -1) is
    the value of missing rows (code -1), without the per-row gather where it can be avoided:
    no category true -> all False; at most 4 true -> OR of code equalities (each a cheap
    vectorised compare); else ``np.take`` (which, unlike fancy indexing, does not first
    convert int8 / int16 codes to an intp copy). Same result as ``table[codes]`` in all cases."""
    if not table.any():
        return np.zeros(len(codes), dtype=bool)
    if table.all():
        return np.ones(len(codes), dtype=bool)
    hits = np.flatnonzero(table[:-1])
    if len(hits) <= 4 and not table[-1]:
        out = codes == hits[0]
        for h in hits[1:]:
            out |= codes == h
        return out
    return np.take(table, codes)


_CAT_CACHE: dict = {}  # id(categories Index) -> (weak reference to it, {key: result})


def _per_category(cats: pd.Index, key, compute):
    """``compute(category texts)`` for a categories Index, remembered per (Index object, key)
    while that Index lives: a rank's name / type / core columns are matched against many
    regexes (policy rules, segment matchers) and every call would otherwise redo the work per
    distinct value. The Index is immutable, so a remembered result never goes stale; the entry
    is dropped when the Index is garbage-collected."""
    ent = _CAT_CACHE.get(id(cats))
    if ent is None or ent[0]() is not cats:
        try:
            ref = weakref.ref(cats, lambda _r, i=id(cats): _CAT_CACHE.pop(i, None))
        except TypeError:  # not weak-referenceable: no memo
            return compute([str(v) for v in cats.tolist()])
        ent = _CAT_CACHE[id(cats)] = (ref, {})
    memo = ent[1]
    if key not in memo:
        if "texts" not in memo:
            memo["texts"] = [str(v) for v in cats.tolist()]
        memo[key] = compute(memo["texts"])
    return memo[key]


def matches(col: pd.Series, rx) -> np.ndarray:
    """Per row: does the regex find a match in this categorical column (N/A never matches)?
    The regex runs once per distinct value (remembered per categories object and regex);
    rows are mapped from the codes by :func:`code_lookup`."""
    arr = as_category(col).array
    hit = _per_category(arr.categories, ("match", rx.pattern, rx.flags), lambda texts: _search_all(rx, texts))
    return code_lookup(hit, arr.codes)  # code -1 (missing) indexes the trailing False


_TEXT_MEMO: dict = {}      # (what, pattern, flags) -> {text: result}, shared by every rank of the process
_TEXT_MEMO_MAX = 200_000   # entries remembered per regex before its memo is started afresh


def _memo_for(key, limit: int = _TEXT_MEMO_MAX) -> dict:
    memo = _TEXT_MEMO.get(key)
    if memo is None or len(memo) > limit:
        memo = _TEXT_MEMO[key] = {}
    return memo


def _search_all(rx, texts) -> np.ndarray:
    """``[bool(rx.search(v)) for v in texts] + [False]`` as a boolean array, each distinct text
    searched once per process: the ranks of a capture carry the same kernel names, types and
    core types, and each rank's categories are new objects (the per-Index memo of
    :func:`_per_category` cannot see across ranks), so without this every rank would rerun every
    policy regex over the same texts (~3 ms per rank)."""
    whole = _memo_for(("search-all", rx.pattern, rx.flags), 64)
    tkey = tuple(texts)   # ranks of one job usually share the whole sorted list of texts
    got = whole.get(tkey)
    if got is not None:
        return got
    memo = _memo_for(("search", rx.pattern, rx.flags))
    out = []
    for v in texts:
        h = memo.get(v)
        if h is None:
            h = memo[v] = bool(rx.search(v))
        out.append(h)
    out.append(False)
    res = whole[tkey] = np.array(out, dtype=bool)
    res.flags.writeable = False   # shared by every rank with these texts
    return res


def assign_labels(df: pd.DataFrame, rules, default: str, what: str = "category") -> pd.Series:
    """Label per row from match rules, the most specific matching rule winning, else ``default``.

    A rule (``perfgate.policy.CategoryRule`` or ``perfgate.policy.opspec.Matcher``) matches when
    every given regex (``name`` over Name, ``type`` over Type, ``core`` over Accelerator Core)
    finds a match (``re.search``); N/A cells never match. Specificity = (number of fields
    constrained, ``priority``); rule order does not matter. Regexes run once per distinct
    value; rows are combined with numpy.

    Raises:
        PolicyError: two rules of equal specificity with different labels both match one row
            (the message names both rules and the first such row).
    """
    n = len(df)
    labels = list(dict.fromkeys([r.label for r in rules] + [default]))
    out = np.full(n, labels.index(default), dtype=np.int32)
    best = np.full(n, -1, dtype=np.int64)
    owner = np.full(n, -1, dtype=np.int64)
    cols = {"name": df["name"], "type": df["op_type"], "core": df["core_type"]}
    ordered = sorted(range(len(rules)), key=lambda i: rules[i].specificity, reverse=True)
    for i in ordered:
        rule = rules[i]
        m = None
        for field in ("name", "type", "core"):
            rx = getattr(rule, field)
            if rx is not None:
                m = matches(cols[field], rx) if m is None else m & matches(cols[field], rx)
        m = np.ones(n, dtype=bool) if m is None else m
        nf, prio = rule.specificity
        score = nf * 1_000_000 + prio
        hit = np.flatnonzero(m)  # the rule's rows only (ascending): the rest of the table is untouched
        tie = (best[hit] == score) & (out[hit] != labels.index(rule.label))
        if tie.any():
            j = int(hit[np.argmax(tie)])
            other = rules[int(owner[j])]
            row = int(df["row"].iloc[j]) if "row" in df else j + 1
            raise PolicyError(
                f"{what} rules {other.describe()} and {rule.describe()} are equally specific and both match "
                f"kernel {str(df['name'].iloc[j])!r} (row {row}) with different {'categories' if what == 'category' else what + 's'}; give one a higher "
                f"priority or constrain more fields")
        new = hit[best[hit] < score]
        out[new] = labels.index(rule.label)
        best[new] = score
        owner[new] = i
    return pd.Series(pd.Categorical.from_codes(out, dtype=categorical_dtype(labels)), index=df.index)


def categorize(df: pd.DataFrame, rules) -> pd.Series:
    """Category per row from the policy's rules (most specific wins, see
    :func:`assign_labels`), else ``unknown``.

    Raises:
        PolicyError: equally specific rules of different categories both match a row.
    """
    return assign_labels(df, rules, UNKNOWN, "category")


def _per_step(df: pd.DataFrame, key: str, weights=None) -> pd.DataFrame:
    """(step x key) table of counts or weighted sums via one bincount over category codes
    (rows with a missing step or key are left out; no copy of the frame is made)."""
    step = as_category(df["step"])
    k = as_category(df[key])
    sc, kc = step.cat.codes.to_numpy(), k.cat.codes.to_numpy()
    keep = (sc >= 0) & (kc >= 0)
    if not keep.any():
        return pd.DataFrame()
    all_rows = keep.all()
    sc = (sc if all_rows else sc[keep]).astype(np.int64)
    kc = (kc if all_rows else kc[keep]).astype(np.int64)
    ns, nk = len(step.cat.categories), len(k.cat.categories)
    w = None
    if weights is not None:
        w = df[weights].to_numpy()
        w = (w if all_rows else w[keep]).astype(np.float64)
    flat = np.bincount(sc * nk + kc, weights=w, minlength=ns * nk).reshape(ns, nk)
    used_rows = np.bincount(sc, minlength=ns) > 0
    used_cols = np.bincount(kc, minlength=nk) > 0
    flat = flat[used_rows][:, used_cols]  # numpy selection: one DataFrame built, no .loc / astype copy
    if weights is None or df[weights].dtype.kind in "iu":
        flat = flat.astype(np.int64)
    return pd.DataFrame(flat, index=pd.Index(step.cat.categories.astype(str)[used_rows], name="step"),
                        columns=pd.Index(k.cat.categories[used_cols], name=key))


def per_step_counts(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Calls per (step, key) as a wide frame: index step, columns key values, 0 where absent."""
    return _per_step(df, key)


def per_step_sum_dur(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """ΣDuration (ns) per (step, key) as a wide frame, 0 where absent."""
    return _per_step(df, key, "dur_ns")


def median_nan(values) -> float:
    """Median skipping NaN, as ``pd.Series(values).median()`` gives it: the mean of the two middle
    values for an even count (numpy's median), NaN when no value is left.

    A few values (a rank's steps or layers; up to ``_SORTED_MEDIAN_MAX``) are sorted and the
    middle taken as numpy's median computes it, the mean by ``add.reduce``, which starts from
    0.0: ``(0.0 + lo + hi) / 2``, or ``0.0 + mid`` (so -0.0 reads 0.0); numpy's own call costs
    ~13 µs of dispatch per call and this runs ~30 times per rank. More values: ``np.median``."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    n = len(v)
    if n > _SORTED_MEDIAN_MAX:
        return float(np.median(v))
    if not n:
        return float("nan")
    v = np.sort(v)
    h = n // 2
    return float(0.0 + v[h]) if n % 2 else float((0.0 + v[h - 1] + v[h]) / 2.0)


_SORTED_MEDIAN_MAX = 256


def median_low(values) -> float:
    """Median that is always an observed value (lower middle for even counts): a count
    stays an integer that some step really had."""
    v = np.sort(np.asarray(values, dtype=float))
    return float(v[(len(v) - 1) // 2]) if len(v) else float("nan")
