"""JSON result: the full comparison, machine-readable."""
from __future__ import annotations

import math


def _clean(o):
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def render_json(result) -> str:
    """``GateResult`` -> JSON text (``verdict``, the word the action's output uses, ``exit_code``, ``counts``, ``comparisons``,
    ``self_checks``, ``notes``, provenance of both sides; NaN and ±inf rendered as null),
    UTF-8, indented by two spaces. The text of :func:`render_json_bytes`."""
    return render_json_bytes(result).decode("utf-8")


def render_json_bytes(result) -> bytes:
    """:func:`render_json` as UTF-8 bytes (what the report file holds).

    Written by orjson (a 5,236-step capture's result holds ~31k per-step self-checks: the
    standard library's indenting encoder took ~3 s of a 1M-row check, orjson ~0.1 s), which
    serialises the comparisons, self-checks and findings (flat dataclasses) from their fields,
    in field order, as their ``to_dict()`` would (no per-object dict copy first); a value orjson
    refuses (an integer beyond 64 bits) falls back to the standard library over
    ``result.to_dict()``."""
    import dataclasses
    import orjson
    d = dataclasses.replace(result, comparisons=(), self_checks=(), findings=()).to_dict()
    d["counts"] = result.counts()
    d["self_checks"], d["findings"], d["comparisons"] = (list(result.self_checks), list(result.findings),
                                                         list(result.comparisons))
    try:
        return orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    except TypeError:   # (a lone surrogate from a profiler file: \\u escapes, same strings)
        from perfgate.jsonout import std_bytes
        return std_bytes(_clean(result.to_dict()))
