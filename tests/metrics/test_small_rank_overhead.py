"""Per-rank fixed cost: the small-rank forms equal the pandas forms they
replaced, which are kept here as oracles (``_old_*``), on every real text capture, the real
st/level2 capture, a replicated many-step capture and a synthetic many-rank capture
(perfgate.synth.scale, the shape of bench_scale.py section 4), and on random columns; and the
whole fingerprint of those captures is the same with every replaced form put back."""
from __future__ import annotations

import contextlib
import gc
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st


from perfgate.ingest import load_capture  # noqa: E402
from perfgate.ingest import kernels as ik  # noqa: E402
from perfgate.ingest import validity  # noqa: E402
from perfgate.metrics import kernels as km  # noqa: E402
from perfgate.metrics import segments as sg  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402
from perfgate.synth.scale import write_scaled  # noqa: E402

FAST = settings(max_examples=120, deadline=None)


# --- the replaced forms (oracles) -------------------------------------------------------------

def _old_present_values(col: pd.Series) -> list:
    return np.asarray(pd.unique(col.dropna()), dtype=object).tolist()


def _old_positions_in(values: list, index) -> np.ndarray:
    return pd.Index(values).get_indexer(index)


def _old_step_names(step: pd.Series, at: np.ndarray) -> list:
    return [str(x) for x in step.iloc[at]]


def _old_categorical(enc) -> pd.Series:
    return enc.to_pandas()


def _old_collection_window(info_path):
    if info_path is None:
        return None
    try:
        doc = json.loads(Path(info_path).read_bytes())
        end = doc["end_info"]["collectionTimeEnd"]
        span = doc["end_info"]["MonotonicTimeEnd"] - doc["start_info"]["start_monotonic"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (end, span)) or span <= 0:
        return None
    return end - span, end


# --- captures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def capture_paths(text_captures, tmp_path_factory):
    st2 = text_captures.parents[2] / "st" / "level2"
    tmp = tmp_path_factory.mktemp("smallrank")
    out = {f"real_{lvl}": text_captures / lvl for lvl in ("level0", "level1", "level2")}
    out["real_st_level2"] = st2
    out["rep_level1_30"] = replicate_rank(text_captures / "level1" / "rank0_ascend_pt", tmp / "r1", steps=30,
                                          ranks=2)
    out["synth_12_ranks"] = write_scaled(tmp / "s12", ranks=12, steps=4, kernels_per_step=60)
    return out


@pytest.fixture(scope="module")
def captures(capture_paths):
    return {k: load_capture(p, with_trace=False) for k, p in capture_paths.items()}


def _kernel_frames(captures):
    for name, cap in captures.items():
        for r in cap.ranks:
            if r.kernels is not None:
                yield name, r, r.kernels.df


# --- present_values / positions_in ------------------------------------------------------------

def test_present_values_equal_pd_unique_on_captures(captures, policy):
    """km.present_values of the step, name and family columns (and a blank-step subset) equals
    np.asarray(pd.unique(col.dropna()), dtype=object).tolist(), values and types."""
    seen = 0
    for name, r, k in _kernel_frames(captures):
        fam = km.family_of(k["name"], policy.family_suffix)
        for col in (k["step"], k["name"], k["op_type"], fam, k["step"].iloc[::3]):
            got, want = km.present_values(col), _old_present_values(col)
            assert got == want and [type(x) for x in got] == [type(x) for x in want], (name, col.name)
            seen += 1
    assert seen >= 30


@FAST
@given(codes=st.lists(st.integers(-1, 5), max_size=40), extra=st.integers(0, 3),
       kind=st.sampled_from(["str", "object", "int", "plain"]))
def test_present_values_equal_pd_unique_on_random_columns(codes, extra, kind):
    """Random categoricals (missing values, unused categories) and plain columns."""
    labels = [f"s{i}" for i in range(6 + extra)] if kind != "int" else list(range(10, 16 + extra))
    if kind == "plain":
        col = pd.Series([labels[c] if c >= 0 else None for c in codes], dtype=object)
    else:
        cats = pd.Index(labels, dtype=object if kind == "object" else None)
        col = pd.Series(pd.Categorical.from_codes(np.array(codes, dtype=np.int64), categories=cats))
    got, want = km.present_values(col), _old_present_values(col)
    assert got == want and [type(x) for x in got] == [type(x) for x in want]


@FAST
@given(values=st.lists(st.sampled_from([f"v{i}" for i in range(12)]), unique=True, max_size=12),
       index=st.lists(st.sampled_from([f"v{i}" for i in range(15)]), unique=True, max_size=15))
def test_positions_in_equals_get_indexer(values, index):
    idx = pd.Index(index, dtype="str") if index else pd.Index([], dtype=object)
    got, want = km.positions_in(values, idx), _old_positions_in(values, idx)
    assert got.tolist() == want.tolist() and got.dtype == np.int64


def test_positions_in_refuses_repeated_values_as_pandas_does():
    with pytest.raises(pd.errors.InvalidIndexError):
        km.positions_in(["a", "a"], pd.Index(["a"]))
    with pytest.raises(pd.errors.InvalidIndexError):
        _old_positions_in(["a", "a"], pd.Index(["a"]))
    assert km.positions_in(["b", "a"], ["a", "c", "b", "a"]).tolist() == \
        _old_positions_in(["b", "a"], pd.Index(["a", "c", "b", "a"], dtype=object)).tolist()
    labels = np.array(["3", "1"], dtype=object)
    assert km.positions_in(np.unique(np.array(["1", "2", "3"])).astype(object).tolist(), labels).tolist() == \
        pd.Index(np.unique(np.array(["1", "2", "3"])).astype(object), dtype=object).get_indexer(
            pd.Index(labels, dtype=object)).tolist() == [2, 0]


def test_rank_metrics_step_positions_equal_on_captures(captures):
    """The step positions rank_metrics derives (sorted present steps, then each category's
    place) are the same through positions_in as through Index.get_indexer."""
    for name, r, k in _kernel_frames(captures):
        kk = k[k["step"].notna().to_numpy()]
        cat = km.as_category(kk["step"])
        steps = sorted(km.present_values(cat), key=lambda s: (0, int(s)) if str(s).isdigit() else (1, s))
        assert steps == sorted(pd.unique(cat), key=lambda s: (0, int(s)) if str(s).isdigit() else (1, s))
        assert km.positions_in(steps, cat.array.categories).tolist() == \
            _old_positions_in(steps, cat.array.categories).tolist(), name


# --- segments: step names ---------------------------------------------------------------------

def test_step_names_equal_the_iloc_form(captures):
    for name, r, k in _kernel_frames(captures):
        keep = np.flatnonzero(k["step"].notna().to_numpy())
        for at in (keep, keep[::7], keep[:1]):
            assert sg._step_names(k["step"], at) == _old_step_names(k["step"], at), name
            plain = k["step"].astype(object)
            assert sg._step_names(plain, at) == _old_step_names(plain, at)
    ints = pd.Series(pd.Categorical([3, 1, 3, 2]))
    assert sg._step_names(ints, np.array([0, 1, 3])) == ["3", "1", "2"]


def test_rows_of_equals_the_iloc_form(captures):
    used = ["row", "step", "name", "op_type", "core_type", "stream_id", "start_ns", "end_ns", "dur_ns", "is_comm"]
    rng = np.random.default_rng(7)
    for name, r, k in _kernel_frames(captures):
        for df in (k, k.iloc[::2]):   # a RangeIndex and a stepped one
            pos = rng.permutation(len(df))[: max(1, len(df) - 3)]
            want = df.iloc[pos, [df.columns.get_loc(c) for c in used]]
            got = sg._rows_of(df, pos, used)
            pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
            assert list(got.dtypes) == list(want.dtypes)


# --- ingest: categoricals from the Arrow dictionary -------------------------------------------

def _assert_same_series(got: pd.Series, want: pd.Series):
    assert got.dtype == want.dtype and got.cat.categories.dtype == want.cat.categories.dtype
    assert got.cat.codes.dtype == want.cat.codes.dtype
    assert got.cat.codes.tolist() == want.cat.codes.tolist()
    pd.testing.assert_series_equal(got, want, check_exact=True)


def test_one_chunk_categorical_equals_to_pandas_on_real_columns(capture_paths):
    """Every dictionary column the fast reader gives for every kernel table of the captures."""
    from perfgate.ingest.aliases import KERNEL_ALIASES, KERNEL_REQUIRED
    from perfgate.ingest.csvread import read_header, read_typed_columns, resolve_columns
    n = 0
    for root in capture_paths.values():
        for f in sorted(Path(root).rglob("kernel_details.csv")):
            cols = resolve_columns(read_header(f), KERNEL_ALIASES, KERNEL_REQUIRED, f)
            used = {c: h for c, h in cols.items() if c in ik._VALUE_COLUMNS}
            raw, _ = read_typed_columns(f, used, ik._FAST_TYPES)
            for c, arr in raw.items():
                if not pa.types.is_dictionary(arr.type):
                    continue
                enc = pc.dictionary_encode(arr)
                got, cats = ik._one_chunk_categorical(enc)
                want = _old_categorical(enc)
                if got is None:
                    continue
                _assert_same_series(got, want)
                assert cats == [str(x) for x in want.cat.categories.tolist()]
                n += 1
    assert n >= 40


@pytest.mark.parametrize("arr", [
    pa.chunked_array([pa.array(["a", None, "b", "a"])]),
    pa.chunked_array([pa.array([" a ", "N/A", "b", None])]),
    pa.chunked_array([pa.array(["x"] * 3)]),
    pa.chunked_array([pa.array([f"n{i % 300}" for i in range(1000)])]),   # int16 codes
    pa.chunked_array([pa.array(["a", "b"]).dictionary_encode()]),
    pa.array(["p", "q", None]),
])
def test_one_chunk_categorical_equals_to_pandas(arr):
    enc = pc.dictionary_encode(arr)
    got, _ = ik._one_chunk_categorical(enc)
    _assert_same_series(got, _old_categorical(enc))


@pytest.mark.parametrize("arr", [
    pa.chunked_array([pa.array([None, None], type=pa.string())]),        # no value: object categories
    pa.chunked_array([pa.array(["a"]), pa.array(["b", "a"])]),             # several chunks
    pa.chunked_array([], type=pa.string()),
    pa.chunked_array([pa.array([1, 2, 1])]),                              # not strings
])
def test_one_chunk_categorical_leaves_other_shapes_to_to_pandas(arr):
    assert ik._one_chunk_categorical(pc.dictionary_encode(arr)) == (None, None)


# --- categorical dtypes remembered ------------------------------------------------------------

@pytest.mark.parametrize("cats", [["a", "b"], ("x",), pd.Index(["f", "g"], dtype=object),
                                  pd.Index(["f", "g"], dtype="str"), [1, 2], pd.Index([], dtype=object), []])
def test_categorical_dtype_gives_the_from_codes_categorical(cats):
    codes = np.array([0, -1] if len(cats) else [-1, -1])
    want = pd.Categorical.from_codes(codes, categories=cats if isinstance(cats, pd.Index) else list(cats))
    for _ in range(2):   # built, then remembered
        got = pd.Categorical.from_codes(codes, dtype=km.categorical_dtype(cats))
        assert got.dtype == want.dtype and hash(got.dtype) == hash(want.dtype)
        assert got.ordered == want.ordered and got.categories.dtype == want.categories.dtype
        assert got.codes.dtype == want.codes.dtype
        pd.testing.assert_series_equal(pd.Series(got), pd.Series(want), check_exact=True)


def test_categorical_dtype_keys_on_the_index_dtype():
    a = km.categorical_dtype(pd.Index(["u", "v"], dtype=object))
    b = km.categorical_dtype(pd.Index(["u", "v"], dtype="str"))
    assert a.categories.dtype == object and b.categories.dtype != object
    assert km.categorical_dtype(["u", "v"]) is km.categorical_dtype(("u", "v"))


def test_labels_columns_equal_the_list_categories_form(captures, policy):
    """op_type_class, assign_phases, categorize and canonical_core through the remembered
    dtypes equal Categorical.from_codes(codes, categories=<the same categories>)."""
    from perfgate.metrics import operators as opv
    for name, r, k in _kernel_frames(captures):
        k = k.assign(family=km.family_of(k["name"], policy.family_suffix))
        cols = [opv.op_type_class(k), opv.assign_phases(k, policy.phases), km.canonical_core(k), k["family"]]
        if r.kernels.type_available and r.kernels.core_available:
            cols.append(km.categorize(k, policy.categories))
        for s in cols:
            cats = s.cat.categories
            want = pd.Series(pd.Categorical.from_codes(s.cat.codes.to_numpy(), categories=cats), index=s.index,
                             name=s.name)
            pd.testing.assert_series_equal(s, want, check_exact=True)


# --- collection window ------------------------------------------------------------------------

def test_collection_window_equals_the_uncached_read_and_follows_edits(capture_paths, tmp_path):
    infos = sorted(Path(capture_paths["real_level1"]).rglob("profiler_info*.json"))
    infos += sorted(Path(capture_paths["rep_level1_30"]).rglob("profiler_info*.json"))
    assert infos
    for f in infos:
        assert validity.collection_window(f) == _old_collection_window(f)
        assert validity.collection_window(str(f)) == _old_collection_window(f)
    doc = json.loads(infos[0].read_text())
    f = tmp_path / "profiler_info_0.json"
    f.write_text(json.dumps(doc))
    first = validity.collection_window(f)
    assert first == _old_collection_window(f) and first is not None
    doc["end_info"]["collectionTimeEnd"] += 5_000
    f.write_text(json.dumps(doc) + " ")   # another version (size, times): read again
    assert validity.collection_window(f) == _old_collection_window(f) == (first[0] + 5_000, first[1] + 5_000)
    f.write_text("{")
    assert validity.collection_window(f) is None
    f.unlink()
    assert validity.collection_window(f) is None and validity.collection_window(None) is None


# --- GC paused over the whole small rank --------------------------------------------------------

def test_small_rank_gc_paused_by_file_size(capture_paths, monkeypatch):
    from perfgate.ingest import discover
    from perfgate.metrics import fingerprint as fpm
    loc = discover(capture_paths["synth_12_ranks"])[0]
    assert gc.isenabled()
    with fpm.small_rank_gc_paused(loc):
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with fpm.small_rank_gc_paused(loc):
            raise RuntimeError("a rank failed")
    assert gc.isenabled()
    size = (loc.output_dir / "kernel_details.csv").stat().st_size
    monkeypatch.setattr(fpm, "GC_PAUSE_BYTES", size - 1)   # above the limit: the collector runs
    with fpm.small_rank_gc_paused(loc):
        assert gc.isenabled()

    class NoTable:
        output_dir = Path("/nonexistent/perfgate")
    monkeypatch.setattr(fpm, "GC_PAUSE_BYTES", 1 << 40)
    with fpm.small_rank_gc_paused(NoTable()):   # no kernel_details.csv: not paused here
        assert gc.isenabled()


# --- the whole fingerprint with every replaced form put back ----------------------------------

def _put_back_old_forms(monkeypatch):
    from perfgate.metrics import fingerprint as fpm
    monkeypatch.setattr(km, "present_values", _old_present_values)
    monkeypatch.setattr(km, "positions_in", _old_positions_in)
    monkeypatch.setattr(km, "categorical_dtype", lambda cats: pd.CategoricalDtype(
        cats if isinstance(cats, pd.Index) else list(cats), ordered=False))
    monkeypatch.setattr(sg, "_step_names", _old_step_names)
    monkeypatch.setattr(sg, "_rows_of", lambda df, pos, used: df.iloc[pos, [df.columns.get_loc(c) for c in used]])
    monkeypatch.setattr(sg, "_empty_classes", lambda: pd.DataFrame([], columns=sg.CLASS_COLS))
    monkeypatch.setattr(ik, "_one_chunk_categorical", lambda enc: (None, None))
    monkeypatch.setattr(validity, "collection_window", _old_collection_window)
    monkeypatch.setattr(fpm, "GC_PAUSE_BYTES", -1)
    monkeypatch.setattr(fpm, "GC_PAUSE_ROWS", -1)
    monkeypatch.setattr(fpm, "finished_ranks_out_of_gc", lambda: contextlib.nullcontext(lambda: None))


def test_fingerprints_equal_with_the_replaced_forms(capture_paths, policy, monkeypatch):
    """fingerprint_path (serial, as bench_scale.py section 4 calls it) gives the same metrics
    digest, self-checks, findings and warnings with the old forms put back, on the real,
    replicated and synthetic many-rank captures."""
    from perfgate.history.store import metrics_digest
    from perfgate.app.run import fingerprint_path

    def summary(fp):
        return (metrics_digest(fp), repr(fp.self_checks), repr(fp.findings), repr(fp.warnings), repr(fp.config),
                json.dumps(fp.detail, sort_keys=True, default=repr))
    new = {k: summary(fingerprint_path(p, policy, workers=1, with_trace=False)) for k, p in capture_paths.items()}
    with monkeypatch.context() as m:
        _put_back_old_forms(m)
        old = {k: summary(fingerprint_path(p, policy, workers=1, with_trace=False)) for k, p in capture_paths.items()}
    for k in capture_paths:
        assert new[k] == old[k], k


# --- finished ranks kept out of the collector's walks -----------------------------------------

class _Node:
    pass


def test_finished_ranks_out_of_gc_freezes_and_restores():
    import weakref
    from perfgate.metrics import fingerprint as fpm
    assert gc.isenabled() and gc.get_freeze_count() == 0
    kept = []
    with fpm.finished_ranks_out_of_gc() as keep:
        for _ in range(3):
            a, b = _Node(), _Node()
            a.other, b.other = b, a          # a rank's cyclic garbage
            dead = weakref.ref(a)
            del a, b
            kept.append({"summary": [1.5, "x"]})
            keep()
            assert dead() is None            # collected before freezing, not frozen
            assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    assert kept == [{"summary": [1.5, "x"]}] * 3
    with pytest.raises(RuntimeError):
        with fpm.finished_ranks_out_of_gc() as keep:
            keep()
            raise RuntimeError("a rank failed")
    assert gc.get_freeze_count() == 0


def test_finished_ranks_out_of_gc_leaves_a_caller_freeze_and_a_stopped_collector():
    from perfgate.metrics import fingerprint as fpm
    gc.freeze()
    try:
        n = gc.get_freeze_count()
        with fpm.finished_ranks_out_of_gc() as keep:
            _ = [[i] for i in range(100)]
            keep()
            assert gc.get_freeze_count() == n
        assert gc.get_freeze_count() == n   # the caller's frozen objects stay frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with fpm.finished_ranks_out_of_gc() as keep:
            keep()
            assert gc.get_freeze_count() == 0 and not gc.isenabled()
    finally:
        gc.enable()


def test_serial_fingerprint_path_unfreezes(capture_paths, policy):
    from perfgate.app.run import fingerprint_path
    fingerprint_path(capture_paths["synth_12_ranks"], policy, workers=1, with_trace=False)
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_empty_classes_table_equals_the_built_one_and_is_a_copy():
    want = pd.DataFrame([], columns=sg.CLASS_COLS)
    a, b = sg._empty_classes(), sg._empty_classes()
    pd.testing.assert_frame_equal(a, want, check_exact=True, check_index_type=True, check_column_type=True)
    assert a is not b and list(a.dtypes) == list(want.dtypes)
    a["level"] = []   # a caller changing its copy leaves the next one as it was
    pd.testing.assert_frame_equal(sg._empty_classes(), want)


_MEDIAN_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, -5e-324, 1.7976931348623157e308]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_MEDIAN_EDGES), st.floats(allow_nan=True, allow_infinity=True)),
                max_size=40))
def test_median_nan_of_a_few_values_equals_np_median(values):
    import warnings
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # inf - inf in the middle: NaN on both sides
        want = float(np.median(v)) if len(v) else float("nan")
        got = km.median_nan(values)
    assert (got == want and np.signbit(got) == np.signbit(want)) or (got != got and want != want)


@pytest.mark.parametrize("n", [0, 1, 7, sg._STRS_MIN_ROWS - 1, sg._STRS_MIN_ROWS, sg._STRS_MIN_ROWS + 5])
def test_strs_column_equals_the_frame_s_own_conversion(n):
    rng = np.random.default_rng(n)
    texts = np.array(["layer", "block", "Ä b", "", "fwd+bwd"], dtype=object)
    values = texts[rng.integers(0, len(texts), n)]
    mixed = values.copy()
    if n:
        mixed[n // 2] = None   # a missing value: left to pandas at any size
    for v in (values, mixed):
        got, want = pd.DataFrame({"a": sg._strs(v)}), pd.DataFrame({"a": v})
        pd.testing.assert_frame_equal(got, want)
        if n and isinstance(want["a"].array, pd.arrays.ArrowStringArray):
            assert got["a"].array._pa_array.type == want["a"].array._pa_array.type
