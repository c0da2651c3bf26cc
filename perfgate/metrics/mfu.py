"""MFU (model FLOPs utilisation) per kernel family and per call class.

``MFU = FLOPs / duration_s / peak`` where FLOPs come from the user's spec
(:class:`perfgate.policy.opspec.MfuSpec`: YAML rules with the built-in ``matmul`` formula, or a
Python ``flops(row)``), duration is the kernel's Duration(us) (device time of the task) and
peak is the chip's peak FLOP/s for the call's dtype (perfgate/policies/mfu/peaks.yaml; fp16 / bf16 and
fp32 differ ~4x). A family's MFU is Σ FLOPs / Σ (duration_s × peak of each call's dtype), so
calls of different dtypes are each held to their own peak. A call class is one
(family, Input Shapes, dtype). MFU above 1 is impossible: it is reported as a spec error
(PolicyError), never as a result.

``matmul``: Input Shapes ``"A;B"`` with A = [..., M, K] and B = [..., K, N] (transposed
operands recognised by the shared dimension K) -> 2·batch·M·N·K, batch = product of A's
leading dimensions (NVIDIA / PaLM MFU convention: one multiply-add = 2 FLOPs).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfgate.errors import PolicyError
from perfgate.metrics import kernels as km
from perfgate.policy.opspec import load_flops_function

_DTYPE_WORDS = (("bf16", "bf16"), ("bfloat16", "bf16"), ("float16", "fp16"), ("fp16", "fp16"), ("half", "fp16"),
                ("int8", "int8"), ("float32", "fp32"), ("fp32", "fp32"), ("float", "fp32"))


def dtype_of(text, default: str = "fp16") -> str:
    """Compute dtype of a call from Input Data Types (first operand): ``DT_BF16`` -> bf16,
    ``FLOAT16`` / ``DT_FLOAT16`` -> fp16, ``FLOAT`` / ``DT_FLOAT`` -> fp32, ``INT8`` -> int8;
    ``default`` when empty or unrecognised."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return default
    first = str(text).strip().strip('"').split(";")[0].strip().lower()
    first = first[3:] if first.startswith("dt_") else first
    for word, dt in _DTYPE_WORDS:
        if first == word:
            return dt
    return default


def parse_shapes(text) -> list[list[int]] | None:
    """``"8,2048;2048,2048"`` -> [[8, 2048], [2048, 2048]]; None when not parseable."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    out = []
    for part in str(text).strip().strip('"').split(";"):
        part = part.strip().strip('"')
        if not part:
            out.append([])
            continue
        try:
            out.append([int(x) for x in part.split(",")])
        except ValueError:
            return None
    return out


def matmul_flops(shapes_text) -> float | None:
    """FLOPs of one MatMul call, 2·batch·M·N·K (a multiply-add counts as 2 FLOPs, the convention
    of the peak tables) from its Input Shapes text (see the module docstring); None when the
    shapes do not describe a matrix product."""
    sh = parse_shapes(shapes_text)
    if not sh or len(sh) < 2 or len(sh[0]) < 2 or len(sh[1]) < 2:
        return None
    a, b = sh[0], sh[1]
    if a[-1] == b[-2]:
        m, k, n = a[-2], a[-1], b[-1]
    elif a[-1] == b[-1]:
        m, k, n = a[-2], a[-1], b[-2]
    elif a[-2] == b[-2]:
        m, k, n = a[-1], a[-2], b[-1]
    elif a[-2] == b[-1]:
        m, k, n = a[-1], a[-2], b[-2]
    else:
        return None
    batch = int(np.prod(a[:-2])) if len(a) > 2 else (int(np.prod(b[:-2])) if len(b) > 2 else 1)
    return 2.0 * batch * m * n * k


def _flops_per_row(k: pd.DataFrame, spec) -> np.ndarray:
    """FLOPs per row (NaN where the spec does not count the row). Evaluated once per distinct
    (name, type, core, shapes, dtypes)."""
    cols = ["name", "op_type", "core_type", "input_shapes", "input_dtypes"]
    key = k[cols].astype(object).where(k[cols].notna(), None)
    out = np.full(len(k), np.nan)
    if spec.python:
        fn = load_flops_function(spec.python)
        cache = {}
        for i, row in enumerate(key.itertuples(index=False, name=None)):
            if row not in cache:
                try:
                    v = fn({"name": row[0], "type": row[1], "core_type": row[2], "input_shapes": row[3],
                            "input_dtypes": row[4]})
                except (Exception, SystemExit) as e:  # user code: any failure is a spec error, SystemExit too
                    raise PolicyError(f"flops(row) failed for kernel {row[0]!r} (shapes {row[3]!r}): "
                                      f"{type(e).__name__}: {e}", path=spec.python) from None
                cache[row] = float(v) if v else np.nan
            out[i] = cache[row]
        return out
    matched = np.zeros(len(k), dtype=bool)
    for rule in sorted(spec.rules, key=lambda r: r.matcher.specificity, reverse=True):
        m = ~matched
        for f, col in (("name", "name"), ("type", "op_type"), ("core", "core_type")):
            rx = getattr(rule.matcher, f)
            if rx is not None:
                m &= km.matches(k[col], rx)
        if not m.any():
            continue
        shapes = k["input_shapes"].astype(object).to_numpy()[m]
        vals = {s: matmul_flops(s) for s in set(shapes)}
        out[np.flatnonzero(m)] = [np.nan if vals[s] is None else vals[s] for s in shapes]
        matched |= m
    return out


def mfu_tables(k: pd.DataFrame, spec, kfile: str) -> tuple[list, list]:
    """MFU per family and per call class over the rows of ``k`` (needs ``family`` and, for
    FLOPs from shapes, ``input_shapes`` / ``input_dtypes``; read with ``shapes=True``).

    Returns:
        ``(families, classes)``: lists of dicts. Family: ``family``, ``calls``, ``flops``,
        ``dur_us``, ``mfu`` (ratio), ``dtype`` (one dtype or ``mixed``), ``peak`` (FLOP/s, None
        when mixed), ``peak_text``. Class: ``family``, ``input_shapes``, ``dtype``, ``calls``,
        ``flops_per_call``, ``mean_dur_us``, ``mfu``, ``peak``.

    Raises:
        PolicyError: no peak for a dtype in the table, or an MFU above 1 (the spec is wrong:
            FLOPs too high, or the peak too low); the message names the family and spec file.
    """
    if "input_shapes" not in k:
        k = k.assign(input_shapes=pd.Series([None] * len(k), index=k.index, dtype=object))
    if "input_dtypes" not in k:
        k = k.assign(input_dtypes=pd.Series([None] * len(k), index=k.index, dtype=object))
    flops = _flops_per_row(k, spec)
    ok = np.isfinite(flops) & (flops > 0)
    if not ok.any():
        return [], []
    d = pd.DataFrame({"family": k["family"].astype(str).to_numpy()[ok],
                      "shapes": k["input_shapes"].astype(object).where(k["input_shapes"].notna(), "").to_numpy()[ok],
                      "dtype": [dtype_of(t, spec.default_dtype) for t in k["input_dtypes"].astype(object).to_numpy()[ok]],
                      "flops": flops[ok], "dur_s": k["dur_ns"].to_numpy(dtype=float)[ok] / 1e9})
    missing = sorted(set(d["dtype"]) - set(spec.peaks))
    if missing:
        raise PolicyError(f"no peak FLOP/s for dtype {missing[0]!r} on chip {spec.chip!r} (calls of "
                          f"{d.loc[d['dtype'] == missing[0], 'family'].iloc[0]!r})", path=spec.peaks_path)
    d["peak"] = d["dtype"].map(spec.peaks)
    d["cap"] = d["dur_s"] * d["peak"]

    def check(mfu, what):
        if mfu > 1.0 + 1e-9:
            raise PolicyError(f"MFU {mfu:.3f} > 1 for {what} in {kfile}: the FLOPs spec counts more work than the "
                              f"chip's peak allows (wrong formula, or a peak too low in {spec.peaks_path})",
                              path=spec.spec_path)

    fams, classes = [], []
    for fam, g in d.groupby("family", sort=True):
        mfu = float(g["flops"].sum() / g["cap"].sum())
        check(mfu, f"kernel family {fam!r}")
        dts = sorted(set(g["dtype"]))
        peak = float(g["peak"].iloc[0]) if len(dts) == 1 else None
        fams.append({"family": fam, "calls": int(len(g)), "flops": float(g["flops"].sum()),
                     "dur_us": float(g["dur_s"].sum() * 1e6), "mfu": mfu,
                     "dtype": dts[0] if len(dts) == 1 else "mixed", "peak": peak,
                     "peak_text": (f"{peak / 1e12:g} TFLOP/s {dts[0]}" if peak else
                                   ", ".join(f"{spec.peaks[t] / 1e12:g} TFLOP/s {t}" for t in dts))})
        for (shp, dt), c in g.groupby(["shapes", "dtype"], sort=True):
            cm = float(c["flops"].sum() / c["cap"].sum())
            check(cm, f"call class {fam!r} shapes {shp!r} {dt}")
            classes.append({"family": fam, "input_shapes": shp, "dtype": dt, "calls": int(len(c)),
                            "flops_per_call": float(c["flops"].mean()), "mean_dur_us": float(c["dur_s"].mean() * 1e6),
                            "mfu": cm, "peak": float(c["peak"].iloc[0])})
    return fams, classes
