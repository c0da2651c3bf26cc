"""Family view (a kernel-family view; policy section ``operators:``): kernel families with category, phase, core type, op_type class, pipeline
bound and memory-boundness; phase shares; consecutive-kernel runs for suggestions.

Pure functions over the kernel table of :mod:`perfgate.ingest.kernels` (columns ``row``,
``step``, ``name``, ``op_type``, ``core_type``, ``start_ns``, ``dur_ns``, ``is_comm``, and
with ``pmu=True`` the PipeUtilization columns ``<stage>_ratio`` / ``<stage>_time_us``).
Inputs are never mutated. Shares are of ΣDuration (caliber ``sum_duration``: overlapped
communication counted twice, as msprof's op_statistic Ratio(%)) and are ratios (0..1).

op_type class of a row (from Accelerator Core; msprof-analyze's op-type grouping):
``aic`` (AI_CORE), ``aiv`` (AI_VECTOR_CORE), ``mix_cv`` (MIX_AIC / MIX_AIV),
``mix_comm_aiv`` (a MIX kernel whose Name or Type names a collective: MC2 fused
compute+communication such as MatmulAllReduce), ``communication`` (HCCL / COMMUNICATION or
``hcom_``), ``aicpu`` (AI_CPU*), ``dsa`` (DSA*), else ``unknown`` (N/A at Level0, SDMA, ...).

Pipeline bound of a family (PipeUtilization; CANN "Pipeline utilisation" counters): the bound
stage is the largest summed pipe time over its calls among ``aic_mac, aic_mte1, aic_mte2,
aic_fixpipe, aic_scalar, aiv_vec, aiv_mte2, aiv_mte3, aiv_scalar`` (AIC MTE2 and AIV MTE2 are
separate stages, never merged; a time column missing but its ratio present -> ratio ×
Duration). Bound family: ``cube`` (aic_mac), ``vector`` (aiv_vec), ``aic_mte`` (aic_mte1 /
aic_mte2 / aic_fixpipe), ``aiv_mte`` (aiv_mte2 / aiv_mte3), ``scalar``; ``mixed`` when the
largest stage of another bound family is within ``mixed_within`` of the largest;
``communication`` / ``aicpu`` for those op_type classes; ``unknown`` when the family has no
pipe data. ``memory_bound = mte2 / max(mac, vec)`` from Duration-weighted mean ratios, where
mte2 is the MTE2 ratio of the same core as the larger of mac / vec (aic_mte2 when mac >= vec,
else aiv_mte2); NaN when both are 0.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.metrics import kernels as km
from perfgate.policy.opspec import PIPE_STAGES

OP_CLASSES = ("aic", "aiv", "mix_cv", "mix_comm_aiv", "communication", "aicpu", "dsa", "unknown")
BOUND_FAMILY = {"aic_mac": "cube", "aic_mte1": "aic_mte", "aic_mte2": "aic_mte", "aic_fixpipe": "aic_mte",
                "aic_scalar": "scalar", "aiv_vec": "vector", "aiv_mte2": "aiv_mte", "aiv_mte3": "aiv_mte",
                "aiv_scalar": "scalar"}
BOUNDS = ("cube", "vector", "aic_mte", "aiv_mte", "scalar", "mixed", "aicpu", "communication", "unknown")
PIPE_HINT = ("profile with torch_npu experimental_config aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization "
             "at profiler_level Level1 or Level2 (msprof: --aic-metrics=PipeUtilization)")
_MC2 = re.compile(r"(?i)all.?reduce|all.?gather|reduce.?scatter|all.?to.?all|mc2")


def op_type_class(df: pd.DataFrame) -> pd.Series:
    """op_type class per row (categorical over :data:`OP_CLASSES`), see the module docstring."""
    core = km.as_category(df["core_type"])
    cats = [str(c) for c in core.cat.categories]

    def cls(c: str) -> str:
        if c in ("HCCL", "COMMUNICATION"):
            return "communication"
        if c == "AI_CORE":
            return "aic"
        if c == "AI_VECTOR_CORE":
            return "aiv"
        if c in ("MIX_AIC", "MIX_AIV"):
            return "mix_cv"
        if c.startswith("AI_CPU"):
            return "aicpu"
        if c.startswith("DSA"):
            return "dsa"
        return "unknown"

    table = np.array([OP_CLASSES.index(cls(c)) for c in cats] + [OP_CLASSES.index("unknown")], dtype=np.int64)
    codes = table[core.cat.codes.to_numpy()]
    mix = codes == OP_CLASSES.index("mix_cv")
    if mix.any():
        mc2 = km.matches(df["name"], _MC2) | km.matches(df["op_type"], _MC2)
        codes = np.where(mix & mc2, OP_CLASSES.index("mix_comm_aiv"), codes)
    codes = np.where(df["is_comm"].to_numpy(), OP_CLASSES.index("communication"), codes)
    return pd.Series(pd.Categorical.from_codes(codes, dtype=km.categorical_dtype(OP_CLASSES)), index=df.index)


def _time_order(df: pd.DataFrame) -> np.ndarray:
    """Row positions sorted by (step, start time)."""
    step = km.as_category(df["step"]).cat.codes.to_numpy()
    return np.lexsort((df["start_ns"].to_numpy(), step))


def assign_phases(df: pd.DataFrame, spec) -> pd.Series:
    """Phase per row (categorical) from a :class:`perfgate.policy.opspec.PhaseSpec`.

    ``family`` mode: most specific matching rule wins (:func:`kernels.assign_labels`), else
    ``spec.default``. ``region`` mode: per step in start-time order, phase i begins at the first
    kernel matching rule i at or after the start of phase i−1 (a rule that never matches leaves
    the current phase running); kernels before the first start are ``spec.default``.

    Raises:
        PolicyError: equally specific family-mode rules of different phases both match a row.
    """
    if not spec.rules:
        return pd.Series(pd.Categorical.from_codes(np.zeros(len(df), dtype=np.int8),
                                                   dtype=km.categorical_dtype([spec.default])),
                         index=df.index)
    if spec.mode == "family":
        return km.assign_labels(df, spec.rules, spec.default, "phase")
    labels = list(dict.fromkeys([spec.default] + [r.label for r in spec.rules]))
    out = np.zeros(len(df), dtype=np.int64)
    masks = []
    for r in spec.rules:
        m = np.ones(len(df), dtype=bool)
        for f, col in (("name", "name"), ("type", "op_type"), ("core", "core_type")):
            if getattr(r, f) is not None:
                m &= km.matches(df[col], getattr(r, f))
        masks.append(m)
    order = _time_order(df)
    steps = km.as_category(df["step"]).cat.codes.to_numpy()[order]
    bounds = np.flatnonzero(np.diff(steps)) + 1
    for seg in np.split(order, bounds):
        cur = 0
        for r, m in zip(spec.rules, masks):
            hit = np.flatnonzero(m[seg][cur:])
            if len(hit):
                cur += int(hit[0])
                out[seg[cur:]] = labels.index(r.label)
    return pd.Series(pd.Categorical.from_codes(out, dtype=km.categorical_dtype(labels)), index=df.index)


def pipe_available(df: pd.DataFrame) -> bool:
    """True when some PipeUtilization stage column carries a value on a compute row."""
    comp = ~df["is_comm"].to_numpy()
    for s in PIPE_STAGES:
        for col in (f"{s}_time_us", f"{s}_ratio"):
            if col in df and np.isfinite(df[col].to_numpy(dtype=float)[comp]).any():
                return True
    return False


def require_pipe(df: pd.DataFrame, path, variant: str = "") -> None:
    """Fail closed when the policy needs pipeline-bound metrics and the capture has none.

    Raises:
        InvalidCaptureError: naming the kernel file and the profiler setting to use.
    """
    if pipe_available(df):
        return
    have = [c for c in df.columns if c.endswith("_ratio")]
    what = ("has no PipeUtilization columns (aic_mac_ratio, aiv_vec_ratio, ...)" if not have else
            f"has PMU columns of another aic_metrics group ({', '.join(have[:4])}) but no PipeUtilization ones"
            if not any(c[:-len('_ratio')] in PIPE_STAGES for c in have) else
            "has PipeUtilization columns but every value is N/A")
    raise InvalidCaptureError(
        f"the policy requires pipeline-bound metrics (operators.require_pipe or a gated pipe.* metric) but the "
        f"kernel table{f' ({variant})' if variant else ''} {what}", path=path, hint=PIPE_HINT)


def require_memory_ratios(df: pd.DataFrame, path, variant: str = "") -> None:
    """Fail closed when the policy gates ``pipe.memory_bound`` and the kernel table lacks the
    PipeUtilization ratio columns it is computed from: ``aic_mac_ratio`` + ``aic_mte2_ratio``
    (cube) or ``aiv_vec_ratio`` + ``aiv_mte2_ratio`` (vector), a finite value on some compute row
    (:func:`_memory_bound`). Without them the metric was silently absent from the baseline, then
    "MISSING ... a file the baseline had is missing?" in a check.

    Raises:
        InvalidCaptureError: naming the kernel file, the columns missing and those present."""
    comp = ~df["is_comm"].to_numpy()

    def has(col):
        return col in df and bool(np.isfinite(df[col].to_numpy(dtype=float)[comp]).any())

    if (has("aic_mac_ratio") and has("aic_mte2_ratio")) or (has("aiv_vec_ratio") and has("aiv_mte2_ratio")):
        return
    present = [f"{s}_ratio" for s in _MEMORY_STAGES if has(f"{s}_ratio")]
    raise InvalidCaptureError(
        f"the policy gates pipe.memory_bound, which is computed from the PipeUtilization ratio columns "
        f"aic_mac_ratio + aic_mte2_ratio or aiv_vec_ratio + aiv_mte2_ratio, but the kernel table"
        f"{f' ({variant})' if variant else ''} has "
        + (f"only {', '.join(present)}" if present else "none of them (with a value on a compute row)"),
        path=path, hint=PIPE_HINT)


def _stage_arrays(df: pd.DataFrame) -> dict:
    """{stage: float64 array} in :data:`PIPE_STAGES` order, as :func:`stage_times` defines them
    (the time column's own array when present: no copy)."""
    dur_us = None
    out = {}
    for s in PIPE_STAGES:
        if f"{s}_time_us" in df:
            out[s] = df[f"{s}_time_us"].to_numpy(dtype=float)
        elif f"{s}_ratio" in df:
            if dur_us is None:
                dur_us = df["dur_ns"].to_numpy(dtype=float) / 1000.0
            out[s] = df[f"{s}_ratio"].to_numpy(dtype=float) * dur_us
        else:
            out[s] = np.full(len(df), np.nan)
    return out


def stage_times(df: pd.DataFrame) -> pd.DataFrame:
    """Per-row pipe time (us) per stage: ``<stage>_time_us``, else ``<stage>_ratio`` × Duration;
    NaN where neither exists (index of ``df``, one column per stage in :data:`PIPE_STAGES`)."""
    return pd.DataFrame(_stage_arrays(df), index=df.index)


_STAGE_FAM = np.array([BOUND_FAMILY[s] for s in PIPE_STAGES], dtype=object)
_MEMORY_STAGES = ("aic_mac", "aiv_vec", "aic_mte2", "aiv_mte2")


def _bound(times: np.ndarray, cls: str, within: float) -> tuple:
    """(bound stage or None, bound family) from one family's summed stage times (in
    :data:`PIPE_STAGES` order; ties go to the earlier stage)."""
    if cls == "communication":
        return None, "communication"
    if cls == "aicpu":
        return None, "aicpu"
    t = np.nan_to_num(np.asarray(times, dtype=float), nan=0.0)
    if not (t > 0).any():
        return None, "unknown"
    i = int(np.argmax(t))
    fam = _STAGE_FAM[i]
    others = t[_STAGE_FAM != fam]
    if len(others) and others.max() >= (1.0 - within) * t[i]:
        return PIPE_STAGES[i], "mixed"
    return PIPE_STAGES[i], fam


def _memory_bound(ratios: dict) -> float:
    mac, vec = ratios.get("aic_mac", np.nan), ratios.get("aiv_vec", np.nan)
    mac = 0.0 if np.isnan(mac) else mac
    vec = 0.0 if np.isnan(vec) else vec
    if max(mac, vec) <= 0:
        return float("nan")
    mte2 = ratios.get("aic_mte2" if mac >= vec else "aiv_mte2", np.nan)
    return float(mte2 / max(mac, vec)) if not np.isnan(mte2) else float("nan")


_STAGE_FAM_ID = np.unique(_STAGE_FAM, return_inverse=True)[1].ravel()


def _bounds(sums: np.ndarray, op_class: np.ndarray, within: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bound` of every family at once: ``sums`` (families × :data:`PIPE_STAGES`) summed
    stage times, ``op_class`` per family. Returns (bound stage or None, bound family), object
    arrays."""
    nf = len(op_class)
    t = np.nan_to_num(np.asarray(sums, dtype=float).reshape(nf, len(PIPE_STAGES)), nan=0.0)
    i = np.argmax(t, axis=1) if nf else np.zeros(0, dtype=np.int64)
    top = t[np.arange(nf), i]
    other = _STAGE_FAM_ID[None, :] != _STAGE_FAM_ID[i][:, None]
    others_max = np.where(other, t, -np.inf).max(axis=1, initial=-np.inf)
    mixed = other.any(axis=1) & (others_max >= (1.0 - within) * top)
    stage = np.asarray(PIPE_STAGES, dtype=object)[i]
    bound = np.where(mixed, "mixed", _STAGE_FAM[i]).astype(object)
    none = ~(t > 0).any(axis=1)
    stage[none], bound[none] = None, "unknown"
    cls = np.asarray(op_class, dtype=object)
    for c in ("communication", "aicpu"):
        m = cls == c
        stage[m], bound[m] = None, c
    return stage, bound


def _memory_bounds(ratios: dict, bound: np.ndarray, nf: int) -> np.ndarray:
    """:func:`_memory_bound` of every family at once (NaN for communication / AI CPU bound)."""
    nan = np.full(nf, np.nan)
    mac = np.nan_to_num(ratios.get("aic_mac", nan), nan=0.0)
    vec = np.nan_to_num(ratios.get("aiv_vec", nan), nan=0.0)
    top = np.maximum(mac, vec)
    mte2 = np.where(mac >= vec, ratios.get("aic_mte2", nan), ratios.get("aiv_mte2", nan))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where((top > 0) & ~np.isnan(mte2), mte2 / np.where(top > 0, top, 1.0), np.nan)
    out[np.isin(np.asarray(bound, dtype=object), ["communication", "aicpu"])] = np.nan
    return out


def _dominant(codes: np.ndarray, nf: int, col: pd.Series, w: np.ndarray) -> np.ndarray:
    """Per family code: the value of ``col`` with the largest ΣDuration (``"n/a"`` when every
    cell is N/A); one bincount over (family, value) codes."""
    c = km.as_category(col)
    cats = np.array([str(x) for x in c.cat.categories] + ["n/a"], dtype=object)
    vc = c.cat.codes.to_numpy().astype(np.int64)
    nv = len(cats)
    vc = np.where(vc < 0, nv - 1, vc)
    flat = np.bincount(codes * nv + vc, weights=w, minlength=nf * nv).reshape(nf, nv)
    flat[:, nv - 1] = np.where(flat[:, :nv - 1].sum(axis=1) > 0, -1.0, flat[:, nv - 1])
    return cats[np.argmax(flat, axis=1)]


def family_table(k: pd.DataFrame, mixed_within: float = 0.10) -> pd.DataFrame:
    """One row per kernel family over all step-assigned rows of one rank.

    ``k`` needs columns ``family``, ``category``, ``phase``, ``op_class`` besides the kernel
    table's. Columns: ``family``, ``calls`` (rows), ``calls_per_step`` (lower median over
    steps), ``sum_dur_us`` (ΣDuration), ``share`` (of the rank's ΣDuration, ratio),
    ``category`` / ``phase`` / ``core_type`` / ``op_class`` (the value with the largest
    ΣDuration in the family), ``bound_stage``, ``bound``, ``memory_bound`` and one
    ``<stage>_us`` column per pipe stage (NaN without pipe data). Sorted by ΣDuration, then name.
    Aggregation is one bincount per column over the family codes.
    """
    cols = _family_columns(k, mixed_within)
    return pd.DataFrame(cols) if cols is not None else pd.DataFrame(columns=FAMILY_COLUMNS)


FAMILY_COLUMNS = ["family", "calls", "calls_per_step", "sum_dur_us", "share", "category", "phase", "core_type",
                  "op_class", "bound_stage", "bound", "memory_bound"] + [f"{s}_us" for s in PIPE_STAGES]


def _family_columns(k: pd.DataFrame, mixed_within: float, with_type: bool = False) -> dict | None:
    """The columns of :func:`family_table` as numpy arrays in table order (None for no rows);
    ``with_type``: also ``op_type``, the operator Type with the largest ΣDuration in the family
    (``"n/a"`` where every Type cell is N/A, as at Level0), after ``core_type``: the family
    view records it so a family renamed between two fingerprints can be told to be the same
    operator on the same core (:mod:`perfgate.compare.renames`)."""
    cols = FAMILY_COLUMNS
    if with_type:
        at = cols.index("core_type") + 1
        cols = cols[:at] + ["op_type"] + cols[at:]
    if k.empty:
        return None
    fam = km.as_category(k["family"])
    codes = fam.cat.codes.to_numpy().astype(np.int64)
    nf = len(fam.cat.categories)
    w = k["dur_ns"].to_numpy(dtype=float)
    total = float(w.sum())
    calls = np.bincount(codes, minlength=nf)
    used = calls > 0
    w_fam = np.bincount(codes, weights=w, minlength=nf)  # ΣDuration (ns) per family
    out = {"family": np.array([str(x) for x in fam.cat.categories], dtype=object), "calls": calls,
           "sum_dur_us": w_fam / 1000.0}
    out["share"] = out["sum_dur_us"] * 1000.0 / total if total else np.zeros(nf)
    # lower median over the steps of the (step x family) call counts, as
    # ``km.per_step_counts(k, "family")`` sorted per column (0 for a family without step rows)
    sc = km.as_category(k["step"]).cat.codes.to_numpy().astype(np.int64)
    keep = (sc >= 0) & (codes >= 0)
    out["calls_per_step"] = np.zeros(nf, dtype=float)
    if keep.any():
        ns = int(sc.max()) + 1
        per_step = np.bincount(sc[keep] * nf + codes[keep], minlength=ns * nf).reshape(ns, nf)
        per_step = per_step[np.bincount(sc[keep], minlength=ns) > 0]
        srt = np.sort(per_step, axis=0)
        out["calls_per_step"] = srt[(len(srt) - 1) // 2].astype(float)
    for col in ("category", "phase", "core_type", "op_class") + (("op_type",) if with_type else ()):
        out[col] = _dominant(codes, nf, k[col], w)
    # per-stage sums straight from the columns' arrays (no frame of stage times); where every
    # value is finite the masks are skipped, which gives the same sums
    sums = np.full((nf, len(PIPE_STAGES)), np.nan)
    for j, (s, v) in enumerate(_stage_arrays(k).items()):
        ok = np.isfinite(v)
        if ok.all():
            sums[:, j] = np.where(used, np.bincount(codes, weights=v, minlength=nf), np.nan)
        elif ok.any():
            has = np.bincount(codes[ok], minlength=nf) > 0
            sums[:, j] = np.where(has, np.bincount(codes, weights=np.where(ok, v, 0.0), minlength=nf), np.nan)
    ratios = {}
    for s in _MEMORY_STAGES:  # the only ratios :func:`_memory_bound` reads
        if f"{s}_ratio" in k:
            r = k[f"{s}_ratio"].to_numpy(dtype=float)
            ok = np.isfinite(r)
            if ok.all():
                num = np.bincount(codes, weights=r * w, minlength=nf)
                den = w_fam
            else:
                num = np.bincount(codes, weights=np.where(ok, r * w, 0.0), minlength=nf)
                den = np.bincount(codes, weights=np.where(ok, w, 0.0), minlength=nf)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratios[s] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    out["bound_stage"], out["bound"] = _bounds(sums, out["op_class"], mixed_within)
    out["memory_bound"] = _memory_bounds(ratios, out["bound"], nf)
    for j, s in enumerate(PIPE_STAGES):
        out[f"{s}_us"] = sums[:, j]
    # used families sorted by ΣDuration (descending), then name, in numpy; one frame built
    idx = np.flatnonzero(used)
    fam_names = out["family"][idx]
    name_rank = np.empty(len(idx), dtype=np.int64)
    name_rank[np.argsort(fam_names.astype(str), kind="stable")] = np.arange(len(idx))
    order = idx[np.lexsort((name_rank, -out["sum_dur_us"][idx]))]
    return {c: np.asarray(out[c])[order] for c in cols}


def _group_codes(k: pd.DataFrame, keys: list) -> tuple[np.ndarray, list]:
    """Per row the code of its combination of ``keys`` (categorical columns; -1 where any is
    missing) and per key its categories: combination code = Σ code_i × Π n_j (j > i), so code
    order is the keys' category order, lexicographic, as a sorted observed group-by gives."""
    comb = np.zeros(len(k), dtype=np.int64)
    miss = np.zeros(len(k), dtype=bool)
    cats = []
    for key in keys:
        c = km.as_category(k[key])
        kc = c.array.codes.astype(np.int64)
        n = len(c.array.categories)
        miss |= kc < 0
        comb = comb * n + kc
        cats.append(c.array.categories)
    comb[miss] = -1
    return comb, cats


def _share_sums(k: pd.DataFrame, keys: list):
    """``(present, sums, total, cats, sizes)``: the combination codes of ``keys`` that occur
    (ascending), their ΣDuration (ns; int64 when durations are integers) by one bincount, the
    rank's ΣDuration, and each key's categories and their counts (shared by share_table and
    share_records)."""
    dur = k["dur_ns"].to_numpy()
    total = float(dur.sum())
    comb, cats = _group_codes(k, keys)
    ok = comb >= 0
    sizes = [len(c) for c in cats]
    ncomb = int(np.prod(sizes)) if sizes else 0
    if not (ncomb and ok.any()):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), total, cats, sizes
    sums = np.bincount(comb[ok], weights=dur[ok].astype(np.float64), minlength=ncomb)
    present = np.flatnonzero(np.bincount(comb[ok], minlength=ncomb) > 0)
    sums = sums[present]
    if dur.dtype.kind in "iu":
        sums = sums.astype(np.int64)
    return present, sums, total, cats, sizes


def share_table(k: pd.DataFrame, keys: list) -> pd.DataFrame:
    """ΣDuration and share (ratio of the rank's ΣDuration) per combination of ``keys``
    (e.g. ``["phase", "category"]``) over all rows of ``k``; columns ``*keys, sum_dur_us, share``.
    One bincount over the combination codes (the rows of ``k.groupby(keys, observed=True)``,
    in its order), then one sort by ΣDuration."""
    present, sums, total, cats, sizes = _share_sums(k, keys)
    cols = {}
    rest = present
    for key, c, n in reversed(list(zip(keys, cats, sizes))):
        cols[key] = np.asarray(c, dtype=object)[rest % n] if n else np.zeros(0, dtype=object)
        rest = rest // n if n else rest
    g = pd.DataFrame({key: cols[key] for key in keys})
    for c in keys:
        g[c] = g[c].astype(str)
    g["sum_dur_us"] = sums / 1000.0
    g["share"] = sums / total if total else 0.0
    return g.sort_values("sum_dur_us", ascending=False).reset_index(drop=True)


def share_records(k: pd.DataFrame, keys: list) -> list[dict]:
    """``km.records(share_table(k, keys))`` without the intermediate frame: the same JSON-safe
    records (key values as text, ``sum_dur_us`` in us and ``share`` as a ratio, rounded to 6
    decimals) in the same order (ΣDuration descending, ties as ``sort_values`` orders them,
    pandas' own ``nargsort``). The family view's detail tables are a few dozen rows per rank;
    the frame, its str conversion and its sort cost ~1 ms per rank."""
    try:
        from pandas.core.sorting import nargsort
    except ImportError:  # pragma: no cover - another pandas layout: the frame form
        return km.records(share_table(k, keys))
    present, sums, total, cats, sizes = _share_sums(k, keys)
    if not len(present):
        return []
    cols = {}
    rest = present
    for key, c, n in reversed(list(zip(keys, cats, sizes))):
        cols[key] = [str(v) for v in np.asarray(c, dtype=object)[rest % n].tolist()]
        rest = rest // n
    sum_us = sums / 1000.0
    share = sums / total if total else np.zeros(len(sums))
    order = nargsort(sum_us, kind="quicksort", ascending=False, na_position="last").tolist()

    def r6(v):
        return round(v, 6) if math.isfinite(v) else None
    su, sh = sum_us.tolist(), share.tolist()
    return [dict({key: cols[key][i] for key in keys}, sum_dur_us=r6(su[i]), share=r6(sh[i])) for i in order]


def per_step_shares(k: pd.DataFrame, key: str, steps) -> dict:
    """{value of ``key``: median over steps of its ΣDuration share of the step} (ratio).
    One bincount over (step, value) codes into a (steps × values) matrix; medians over the
    step axis at once."""
    steps = list(steps)
    step_cat = km.as_category(k["step"])
    pos_of_code = km.positions_in(steps, [str(c) for c in step_cat.array.categories.tolist()]) if steps \
        else np.zeros(0, np.int64)   # was Index.get_indexer over the categories as str (~0.3 ms per rank)
    sc = step_cat.array.codes.astype(np.int64)
    col = km.as_category(k[key])
    kc = col.array.codes.astype(np.int64)
    keep = (sc >= 0) & (kc >= 0)
    if not len(steps) or not keep.any():
        return {}
    spos = np.where(sc >= 0, pos_of_code[np.maximum(sc, 0)], -1)
    dur = k["dur_ns"].to_numpy()
    nk, ns = len(col.array.categories), len(steps)
    keep &= spos >= 0
    w = dur[keep].astype(np.float64)
    flat = np.bincount(spos[keep] * nk + kc[keep], weights=w, minlength=ns * nk).reshape(ns, nk)
    used = np.bincount(kc[(sc >= 0) & (kc >= 0)], minlength=nk) > 0
    wide = flat[:, used]
    in_step = (sc >= 0) & (spos >= 0)
    step_sum = np.bincount(spos[in_step], weights=dur[in_step].astype(np.float64), minlength=ns)
    if dur.dtype.kind in "iu":
        wide = wide.astype(np.int64)
        step_sum = step_sum.astype(np.int64)
    den = step_sum.astype(float)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(den > 0, wide.astype(float) / np.where(den > 0, den, 1.0), 0.0)
    med = np.median(shares, axis=0)
    return {str(c): float(v) for c, v in zip(col.array.categories[used].tolist(), med.tolist())}


def longest_run(k: pd.DataFrame, matcher, phase: str | None = None) -> tuple[int, int | None]:
    """Longest run of consecutive compute kernels (per step, start-time order, communication
    rows skipped) matching ``matcher`` (and in ``phase`` when given, column ``phase``):
    ``(length, data row of its first kernel)``; ``(0, None)`` when none matches."""
    # positions of the compute rows in (step, start time) order; the columns are read through
    # these positions, the frame itself is never filtered or copied
    comp = np.flatnonzero(~k["is_comm"].to_numpy())
    if not len(comp):
        return 0, None
    step_all = km.as_category(k["step"]).cat.codes.to_numpy()
    order = comp[np.lexsort((k["start_ns"].to_numpy()[comp], step_all[comp]))]
    m = np.ones(len(k), dtype=bool)
    for f, col in (("name", "name"), ("type", "op_type"), ("core", "core_type")):
        if getattr(matcher, f) is not None:
            m &= km.matches(k[col], getattr(matcher, f))
    if phase is not None:
        m &= km.equals_value(k["phase"], phase)
    m = m[order]
    hits = np.flatnonzero(m)
    if not len(hits):
        return 0, None
    steps = step_all[order]
    # a run = consecutive positions, all hits, within one step; the first longest run wins
    new_run = np.ones(len(hits), dtype=bool)
    new_run[1:] = (np.diff(hits) != 1) | (steps[hits[1:]] != steps[hits[:-1]])
    lengths = np.bincount(np.cumsum(new_run) - 1)
    i = int(np.argmax(lengths))
    return int(lengths[i]), int(k["row"].to_numpy()[order[hits[new_run][i]]])


def rank_family_view(k: pd.DataFrame, policy, *, categories: pd.Series | None, kfile: str,
                       path=None, variant: str = "", steps=None) -> tuple[dict, dict]:
    """The family view of one rank.

    Args:
        k: step-assigned kernel rows with a ``family`` column.
        categories: category per row of ``k`` (None when Type / Accelerator Core are N/A).
        kfile: the kernel file's name relative to the capture (evidence text).

    Returns:
        ``(metrics, detail)``: metrics in the fingerprint's per-rank form
        ``{(name, labels_tuple): (value, evidence, context)}`` (``share.family``,
        ``share.phase`` / ``share.phase_category`` when the policy has phase rules,
        ``pipe.bound_share`` / ``pipe.memory_bound`` when the capture has pipe data, ``mfu.ratio``
        when the policy has an MFU spec), and a JSON-safe detail dict (families: the
        :func:`family_table` records plus ``op_type``; categories, phases, bound shares, MFU
        call classes, consecutive runs for suggestions).

    Raises:
        InvalidCaptureError: pipe data required by the policy but absent (exit 3).
        PolicyError: equally specific phase rules both match; an MFU above 1 (spec error).
    """
    from perfgate.metrics import mfu as mfu_mod
    spec = policy.operators
    steps = list(steps) if steps is not None else sorted(map(str, km.present_values(k["step"])))
    has_pipe = pipe_available(k)
    if spec.require_pipe or policy.may_gate(lambda n: n.startswith("pipe.")):   # a gated rule or override
        require_pipe(k, path or kfile, variant)
    if policy.may_gate(lambda n: n == "pipe.memory_bound"):
        require_memory_ratios(k, path or kfile, variant)
    cat = categories if categories is not None else pd.Series(
        pd.Categorical(["n/a"] * len(k)), index=k.index)
    kk = k.assign(category=km.aligned(cat, k) if categories is not None else cat,
                  phase=assign_phases(k, policy.phases), op_class=op_type_class(k))
    fam_cols = _family_columns(kk, spec.mixed_within, with_type=True)
    # the family table as its arrays; a frame only where one is needed (MFU adds columns to it)
    if fam_cols is None:
        fam = pd.DataFrame(columns=FAMILY_COLUMNS)
    else:
        fam = fam_cols if policy.mfu is None else pd.DataFrame(fam_cols)
    metrics: dict = {}
    ev_fam = {f: f"{kfile}: {c} call(s), ΣDuration {d:,.3f} us"
              for f, c, d in zip(fam["family"].tolist(), fam["calls"].tolist(), fam["sum_dur_us"].tolist())}
    for f, v in per_step_shares(kk, "family", steps).items():
        metrics[("share.family", (("family", f),))] = (v, ev_fam.get(f, kfile), {})
    if policy.phases.rules:
        for p, v in per_step_shares(kk, "phase", steps).items():
            metrics[("share.phase", (("phase", p),))] = (v, f"{kfile} (phase rules, {policy.phases.mode} mode)", {})
        if categories is not None:
            pc = kk.assign(pc=kk["phase"].astype(str) + "\x1f" + kk["category"].astype(str))
            for key, v in per_step_shares(pc, "pc", steps).items():
                p, c = key.split("\x1f")
                metrics[("share.phase_category", (("category", c), ("phase", p)))] = (
                    v, f"{kfile} (phase and category rules)", {})
    bound_shares = {}
    if has_pipe:
        bound_shares = pipe_metrics(fam, spec.family_min_share, kfile, metrics)
    mfu_classes = []
    mfu_note = None
    if policy.mfu is not None and "input_shapes" not in k:
        mfu_note = "Input Shapes were not read (load the capture with shapes=True): no MFU from shapes"
    if policy.mfu is not None:
        fam_mfu, mfu_classes = mfu_mod.mfu_tables(kk, policy.mfu, kfile)
        for r in fam_mfu:
            metrics[("mfu.ratio", (("family", r["family"]),))] = (
                r["mfu"], f"{kfile} {r['family']}: {r['flops']:.6g} FLOPs in {r['dur_us']:,.3f} us, peak "
                          f"{r['peak_text']} ({policy.mfu.chip})", {"dtype": r["dtype"], "peak_flops": r["peak"]})
        m = {r["family"]: r for r in fam_mfu}
        fam["mfu"] = [m[f]["mfu"] if f in m else np.nan for f in fam["family"]]
        fam["mfu_dtype"] = [m[f]["dtype"] if f in m else None for f in fam["family"]]
    runs = {}
    for rule in policy.suggestions:
        if rule.consecutive is not None:
            n, row = longest_run(kk, rule.consecutive, rule.phase)
            runs[rule.id] = [n, row]
    is_unknown = km.equals_value(kk["category"], km.UNKNOWN)
    unknown = kk[is_unknown] if is_unknown.any() else kk.iloc[:0]
    detail = {
        "kernel_file": kfile,
        "family_min_share": spec.family_min_share,
        "fold_below": spec.fold_below,
        "total_sum_dur_us": round(float(kk["dur_ns"].sum()) / 1000.0, 3),
        "categories_available": categories is not None,
        "pipe_available": has_pipe,
        "pipe_note": None if has_pipe else f"no PipeUtilization data in {kfile}: pipe-bound metrics absent ({PIPE_HINT})",
        # the family table's records from its arrays (the same records as through the frame),
        # unless MFU columns were added to the frame
        "families": km.column_records(fam_cols, 500) if fam_cols is not None and policy.mfu is None
        else km.records(fam, 500),
        "categories": share_records(kk, ["category"]),
        "phases": share_records(kk, ["phase", "category"]) if policy.phases.rules else [],
        "unknown": km.records(_unknown_table(unknown, float(kk["dur_ns"].sum())), 50),
        "bound_shares": bound_shares,
        "mfu_classes": mfu_classes,
        "mfu_note": mfu_note,
        "runs": runs,
    }
    return metrics, detail



def pipe_metrics(fam: pd.DataFrame, min_share: float, kfile: str, metrics: dict) -> dict:
    """Add the pipe metrics of a rank's :func:`family_table` ``fam`` (the frame, or its columns
    as a dict of numpy arrays) to ``metrics`` (``pipe.bound_share`` per bound: Σ share of its
    families; ``pipe.memory_bound`` per family above ``min_share`` with a finite memory_bound,
    in table order) and return the bound shares ({bound: ratio}, bounds sorted). Column
    arrays, not one record dict per family."""
    bound_shares = _bound_shares(fam)
    for b, v in bound_shares.items():
        metrics[("pipe.bound_share", (("bound", b),))] = (
            v, f"{kfile} PipeUtilization columns, families bound by {b}", {})
    share = np.asarray(fam["share"], dtype=float)
    mem = np.asarray(fam["memory_bound"], dtype=float)
    names = fam["family"].tolist()
    for i in np.flatnonzero((share > min_share) & np.isfinite(mem)).tolist():
        metrics[("pipe.memory_bound", (("family", names[i]),))] = (
            float(mem[i]), f"{kfile} {names[i]}: mte2 / max(mac, vec) ratios", {})
    return bound_shares


def _bound_shares(fam: pd.DataFrame) -> dict:
    """{bound: Σ share of its families} (ratio; bounds sorted), as
    ``{str(b): float(v) for b, v in fam.groupby("bound")["share"].sum().items()}`` gives it
    (:func:`perfgate.metrics.kernels.group_sums`: the same compensated sums) without the
    group-by's set-up on a table of a few dozen families."""
    sums = None
    if len(fam["share"]) <= km.SMALL_GROUP_ROWS and not isinstance(fam["bound"].dtype, pd.CategoricalDtype):
        sums = km.group_sums(fam["bound"].tolist(), np.asarray(fam["share"], dtype=float).tolist())
    if sums is None:
        frame = fam if isinstance(fam, pd.DataFrame) else pd.DataFrame(fam)
        sums = frame.groupby("bound")["share"].sum().items()
    else:
        sums = sums.items()
    return {str(b): float(v) for b, v in sums}


def _unknown_table(unknown: pd.DataFrame, total_ns: float) -> pd.DataFrame:
    """The ``unknown`` bucket by (family, core type): calls, ΣDuration and share of the rank."""
    if unknown.empty:
        return pd.DataFrame()
    u = unknown.assign(core_type=unknown["core_type"].astype(object).fillna("N/A"),
                       family=unknown["family"].astype(str))
    g = u.groupby(["family", "core_type"])["dur_ns"].agg(["size", "sum"]).reset_index()
    g = g.rename(columns={"size": "calls"})
    g["sum_dur_us"] = g["sum"] / 1000.0
    g["share"] = g["sum"] / total_ns if total_ns else 0.0
    return g.drop(columns="sum").sort_values("sum_dur_us", ascending=False)
