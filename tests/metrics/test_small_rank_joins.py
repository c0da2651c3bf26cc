"""The small-rank joins of the metrics equal the pandas forms they stand in front of: op_statistic's
pairs joined to the kernel table's (``selfcheck._pairs_joined``, pandas' sorted outer-join order),
the link sums of ``comm.bandwidth`` and the blocks joined to their layers
(``segments._blocks_in_layers``, the inner merge's order), the trace's Overlap Analysis sums per
(step, kind) as a wide table (``selfcheck._step_kind_table``, pandas' group-by and unstack), on
random tables that mix matched, unmatched and repeated keys."""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from perfgate.metrics import comm as cm
from perfgate.metrics import segments as sg
from perfgate.metrics import selfcheck as sc

PAIRS = [("MatMul", "AI_CORE"), ("Add", "AI_VECTOR_CORE"), ("Cast", "AI_CORE"), ("Add", "AI_CORE"),
         ("N/A", "N/A"), ("b", "a"), ("Ä", "x"), ("a b", "x"), ("A", "")]


def _joined_by_pandas(mine, stat):
    types, cores, nrows, sums = mine
    g = pd.DataFrame({"op_type": types, "core_type": cores, "rows": nrows, "sum_ns": sums}).groupby(
        ["op_type", "core_type"], sort=False).sum()
    both = g.join(stat.set_index(["op_type", "core_type"])[["count", "total_us", "row"]], how="outer")
    return (list(both.index), both["rows"].fillna(0).astype("int64").to_numpy(),
            both["sum_ns"].fillna(0).to_numpy(dtype=float), both["count"].fillna(0).astype("int64").to_numpy(),
            both["total_us"].fillna(0).to_numpy(dtype=float), both["row"].to_numpy(dtype=float))


def test_op_statistic_pairs_join_as_the_outer_join():
    random.seed(11)
    for _ in range(150):
        mine_pairs = random.sample(PAIRS, random.randint(1, len(PAIRS)))
        if random.random() < 0.1:
            mine_pairs.append(mine_pairs[0])     # two codes naming one text: the pandas form
        theirs = random.sample(PAIRS, random.randint(1, len(PAIRS)))
        mine = ([p[0] for p in mine_pairs], [p[1] for p in mine_pairs],
                np.array([random.randint(1, 50) for _ in mine_pairs], dtype=np.int64),
                np.array([random.random() * 1e6 for _ in mine_pairs]))
        stat = pd.DataFrame({"row": np.arange(1, len(theirs) + 1, dtype=np.int64),
                             "op_type": np.array([p[0] for p in theirs], dtype=object),
                             "core_type": np.array([p[1] for p in theirs], dtype=object),
                             "count": np.array([random.randint(0, 50) for _ in theirs], dtype=np.int64),
                             "total_us": np.array([random.random() * 1e3 for _ in theirs])})
        got, want = sc._pairs_joined(mine, stat), _joined_by_pandas(mine, stat)
        assert [tuple(k) for k in got[0]] == [tuple(k) for k in want[0]]
        for a, b in zip(got[1:], want[1:]):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype


class _Comm:
    def __init__(self, links):
        self.links = links


def test_bandwidth_equals_the_group_by():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        links = pd.DataFrame({"link": pd.array([rng.choice(["HCCS", "RDMA", "SDMA", "PCIE", "SIO"]) for _ in range(n)],
                                               dtype="str"),
                              "size_mb": rng.random(n) * 100, "time_us": np.where(rng.random(n) < 0.3, 0.0,
                                                                                 rng.random(n) * 1e4)})
        g = links.groupby("link")[["size_mb", "time_us"]].sum()
        want = {str(k): float(r["size_mb"] / (r["time_us"] / 1000.0)) for k, r in g.iterrows() if r["time_us"] > 0}
        got = cm.bandwidth(_Comm(links))
        assert list(got.items()) == list(want.items())


def test_blocks_join_their_layers_as_the_inner_merge():
    random.seed(3)
    keys = [(str(s), lay) for s in range(1, 7) for lay in range(11)]
    for _ in range(400):
        lk = random.sample(keys, random.randint(0, 30))
        if random.random() < 0.1 and lk:
            lk.append(lk[0])                     # a repeated layer key: the merge itself
        bk = [random.choice(keys) for _ in range(random.randint(0, 80))]
        blocks = pd.DataFrame({"step": pd.array([k[0] for k in bk], dtype="str"),
                               "layer": np.array([k[1] for k in bk], dtype=np.int64)})
        lay = pd.DataFrame({"step": pd.array([k[0] for k in lk], dtype="str"),
                            "layer": np.array([k[1] for k in lk], dtype=np.int64)})
        m = blocks.assign(_b=np.arange(len(blocks))).merge(lay.assign(_l=np.arange(len(lay))), on=["step", "layer"])
        bi, li = sg._blocks_in_layers(blocks, lay)
        np.testing.assert_array_equal(bi, m["_b"].to_numpy())
        np.testing.assert_array_equal(li, m["_l"].to_numpy())


def _wide_by_pandas(step, kind, sums):
    small = pd.DataFrame({"step": step, "kind": kind, "dur_ns": sums})
    return small.groupby(["step", "kind"])["dur_ns"].sum().unstack(fill_value=0)


def test_step_kind_table_equals_the_group_by_and_unstack():
    random.seed(11)
    labels = ["1", "2", "10", "é", "unassigned", "implicit", "Ω", "a b", ""]
    kinds = ["comm", "computing", "free", "comm_not_overlapped", "Zz"]
    for _ in range(400):
        n = random.randint(1, 30)   # labels repeat: two windows of one step add up
        step = np.array([random.choice(labels) for _ in range(n)], dtype=object)
        kind = np.array([random.choice(kinds) for _ in range(n)], dtype=object)
        sums = np.array([random.randint(0, 2 ** 50) for _ in range(n)], dtype=np.int64)
        pd.testing.assert_frame_equal(sc._step_kind_table(step, kind, sums), _wide_by_pandas(step, kind, sums))
    odd = np.array(["1", None, 3], dtype=object)   # not all str: the group-by itself
    k3 = np.array(["comm", "free", "comm"], dtype=object)
    s3 = np.array([1, 2, 3], dtype=np.int64)
    pd.testing.assert_frame_equal(sc._step_kind_table(odd, k3, s3), _wide_by_pandas(odd, k3, s3))


def test_step_texts_and_positions_equal_the_pandas_forms():
    random.seed(13)
    pool = ["1", "2", "10", "implicit", "é", ""]
    for _ in range(300):
        n = random.randint(0, 12)
        vals = [random.choice(pool + [None]) if random.random() < 0.2 else random.choice(pool) for _ in range(n)]
        for step in (pd.Series(vals, dtype="str"), pd.Series(vals, dtype=object)):
            want = step.astype("string").fillna("implicit").to_numpy(dtype=object)
            got = cm._step_texts(step, "implicit")
            assert got.dtype == object and got.tolist() == want.tolist()
        labels = list(dict.fromkeys(random.choice(pool) for _ in range(random.randint(1, 6))))
        values = np.array([random.choice(pool + ["x"]) for _ in range(n)], dtype=object)
        want = pd.Index(labels).get_indexer(values)
        got = cm._positions(labels, values)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    with pytest.raises(Exception):   # repeated labels: pandas' refusal stands
        cm._positions(["1", "1"], np.array(["1"], dtype=object))


def _last_window_by_pandas(window_labels, labels):
    wl = pd.Index(window_labels)
    keep = ~wl.duplicated(keep="last")
    wi = pd.Index(wl[keep]).get_indexer(pd.Index(labels))
    return np.where(wi >= 0, np.flatnonzero(keep)[np.maximum(wi, 0)], -1) if keep.any() else np.full(len(labels), -1)


def test_last_window_of_equals_the_duplicated_and_get_indexer_form():
    from perfgate.metrics import steps as ms
    random.seed(17)
    pool = ["1", "2", "3", "10", "é", ""]
    for _ in range(400):
        wl = np.array([random.choice(pool) for _ in range(random.randint(0, 8))], dtype=object)
        labels = np.array([random.choice(pool + ["9"]) for _ in range(random.randint(0, 6))], dtype=object)
        got, want = ms._last_window_of(wl, labels), _last_window_by_pandas(wl, labels)
        assert got.tolist() == want.tolist(), (wl, labels)
    wl = np.array(["1", "2", "1"], dtype=object)
    odd = np.array([1, "1", None], dtype=object)   # not all str: the pandas form
    assert ms._last_window_of(wl, odd).tolist() == _last_window_by_pandas(wl, odd).tolist() == [-1, 2, -1]
