"""JSON result: the full comparison, machine-readable."""
from __future__ import annotations

import json
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
    """``GateResult`` -> JSON text (``status``, ``exit_code``, ``counts``, ``comparisons``,
    ``self_checks``, ``notes``, provenance of both sides; NaN rendered as null)."""
    return json.dumps(_clean(result.to_dict()), indent=1, ensure_ascii=False, sort_keys=False) + "\n"
