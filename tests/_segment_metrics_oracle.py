"""The former :func:`perfgate.metrics.segments.segment_metrics` (pandas group-bys per pass), kept
as the oracle of the columnar one: both must give the same dict, key order, values and evidence
included (tests/test_segment_metrics_columnar.py)."""
from __future__ import annotations

import pandas as pd

from perfgate.metrics import kernels as km
from perfgate.metrics.segments import BACKWARD, FORWARD, UNIQUE, UNSTRUCTURED, RankSegments, _units


def segment_metrics(seg: RankSegments, kfile: str, step_sum_us: pd.Series) -> dict:
    """Gate metrics from one rank's segmentation, in :func:`perfgate.metrics.fingerprint.rank_metrics`
    form ``{(name, labels): (value, evidence, context)}``. Counts are lower medians over the
    micro-batch passes (one step, one pass, one micro-batch) or over steps, so changing the
    micro-batch count changes ``microbatch.count_per_step`` only.

    * ``layer.count`` — model layers on this rank: layers per forward micro-batch (per backward
      one when the capture has no forward layers) (tier 1);
    * ``microbatch.count_per_step`` — forward micro-batches per step (tier 1);
    * ``pass.count_per_step`` — passes per step: forward, backward, recompute (tier 1);
    * ``layer.class_count{pass,class}`` — layers per micro-batch pass of each recurring class
      (>= 2 per micro-batch pass); the layers of other classes under ``class=unique`` (tier 1);
    * ``block.count{pass,kind}`` — blocks per micro-batch pass of each kind, in layers of
      recurring classes (tier 1);
    * ``block.share{kind}`` — ΣDuration of those blocks / ΣDuration of the step (ratio;
      non-layer segments and non-recurring layers under ``kind=unstructured``) (tier 2);
    * ``layer.wall_p50_us{pass}`` — median layer wall (µs, wall-span caliber: last end − first
      start of the layer's rows, all streams) over all layers of the pass (tier 3).
    """
    out: dict = {}
    steps = list(seg.steps["step"])
    if not steps:
        return out
    lay = seg.layers
    anchors = sorted({str(a) for a in seg.steps["anchor"].dropna()})
    ev = f"{kfile}: anchor {', '.join(anchors) or 'none found'}"
    if len(lay):
        ev += f", step {lay['step'].iloc[0]} layer 1 rows {lay['first_row'].iloc[0]}-{lay['last_row'].iloc[0]}"
    if not len(lay):
        out[("layer.count", ())] = (0.0, ev, {})
        out[("block.share", (("kind", UNSTRUCTURED),))] = (1.0, f"{kfile}: no layer found", {})
        return out
    units = _units(lay)
    main = units[units["pass"] == FORWARD]
    if not len(main):
        main = units[units["pass"] == BACKWARD]
    if not len(main):
        main = units
    out[("layer.count", ())] = (km.median_low(main["layers"].to_numpy()), ev + f"; {len(main)} micro-batch "
                                f"pass(es) of pass {main['pass'].iloc[0]}", {})
    out[("microbatch.count_per_step", ())] = (
        km.median_low(seg.steps["microbatches"].to_numpy()),
        f"{kfile}: runs of touching forward layers per step (pipeline, embedding or loss segments between)", {})
    npass = seg.steps["passes"].map(lambda x: len([p for p in str(x).split("+") if p]))
    seen = sorted(set("+".join(seg.steps["passes"]).split("+")) - {""})
    out[("pass.count_per_step", ())] = (km.median_low(npass.to_numpy()), f"{kfile}: passes {', '.join(seen)}", {})
    # per micro-batch pass counts of each class
    key = ["step", "pass", "microbatch"]
    per = lay.groupby(key + ["class_id"], sort=False).size().rename("n").reset_index()
    recurring = set()
    firsts = lay.drop_duplicates(["pass", "class_id"]).set_index(["pass", "class_id"])
    for p, u in units.groupby("pass", sort=False):
        g = per[per["pass"] == p].sort_values(["class_id", "n"], kind="stable")
        nunits = len(u)
        present = g.groupby("class_id", sort=False)["n"].transform("size")
        want = (nunits - 1) // 2 - (nunits - present)          # lower median with absent units = 0
        pick = g[g.groupby("class_id", sort=False).cumcount() == want]
        med = pick.set_index("class_id")["n"].reindex(g["class_id"].unique(), fill_value=0)
        rec = med[med >= 2]
        recurring.update(rec.index)
        for c, v in rec.items():
            f = firsts.loc[(p, c)]
            e = (f"{kfile} rows {f['first_row']}-{f['last_row']} (step {f['step']}, {p} micro-batch "
                 f"{f['microbatch']}, model layer {f['model_layer']}: {f['kinds']})")
            out[("layer.class_count", (("class", c), ("pass", p)))] = (float(v), e, {})
        rest = g[~g["class_id"].isin(rec.index)]
        if len(rest):
            tot = rest.groupby(key)["n"].sum().reindex(pd.MultiIndex.from_frame(u[key]), fill_value=0)
            out[("layer.class_count", (("class", UNIQUE), ("pass", p)))] = (
                km.median_low(tot.to_numpy()), f"{kfile}: {p} layers whose class occurs once per micro-batch pass", {})
        w = lay.loc[lay["pass"] == p, "wall_us"]
        out[("layer.wall_p50_us", (("pass", p),))] = (float(w.median()), ev, {"members": int(len(w))})
    b = seg.blocks.merge(lay[["step", "layer", "class_id", "pass", "microbatch"]].rename(
        columns={"class_id": "layer_class"}), on=["step", "layer"])
    b = b[b["layer_class"].isin(recurring)]
    for (p, kind), g in b.groupby(["pass", "kind"], sort=False):
        u = units[units["pass"] == p]
        cnt = g.groupby(key).size().reindex(pd.MultiIndex.from_frame(u[key]), fill_value=0)
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]})"
        out[("block.count", (("kind", kind), ("pass", p)))] = (km.median_low(cnt.to_numpy()), e, {})
    total = step_sum_us.reindex(steps).astype(float)
    shares = {}
    for kind, g in b.groupby("kind"):
        sh = (g.groupby("step")["sum_dur_us"].sum().reindex(steps, fill_value=0.0) / total).fillna(0.0)
        shares[kind] = sh
        e = f"{kfile} rows {g['first_row'].iloc[0]}-{g['last_row'].iloc[0]} (step {g['step'].iloc[0]}, layer {g['layer'].iloc[0]})"
        out[("block.share", (("kind", kind),))] = (float(sh.median()), e, {})
    rest = (1.0 - sum(shares.values(), pd.Series(0.0, index=steps))).clip(lower=0.0)
    out[("block.share", (("kind", UNSTRUCTURED),))] = (float(rest.median()),
                                                       f"{kfile}: non-layer segments and non-recurring layers", {})
    return out


def class_aggregates(t, codes):
    """The former class-table group-by of perfgate.metrics.segments._classes: members, median and
    90th percentile wall, ΣDuration and communication sums per class code."""
    import numpy as np
    g = t.groupby(pd.Series(codes, index=t.index), sort=True)   # (an array key would be str()-ed)
    agg = g.agg(members=("rows", "size"), wall_p50_us=("wall_us", "median"),
                wall_p90_us=("wall_us", lambda w: float(np.percentile(w, 90))),
                sum_dur_us=("sum_dur_us", "sum"), comm_us=("comm_us", "sum"))
    return tuple(agg[c].to_numpy() for c in ("members", "wall_p50_us", "wall_p90_us", "sum_dur_us", "comm_us"))
