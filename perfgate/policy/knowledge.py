"""Model-structure knowledge: YAML (``perfgate/policies/segments.yaml``) -> frozen rule objects.

The rules say how a step's kernel sequence is cut into layers (anchor patterns, never a layer
count), how a layer splits into blocks (attention | ffn | moe | aicpu | other), which
execution-order patterns are fusion candidates, and record counterexamples. Errors are
:class:`~perfgate.errors.PolicyError` naming the file and the key. A leaf module (imports only
``errors``), so :mod:`perfgate.policy` can load it.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from perfgate.errors import PolicyError
from perfgate.policy.builtin import builtin_file
from perfgate.policy.yamlfile import read_mapping

DEFAULT_SEGMENTS = builtin_file("segments.yaml")  # package data: perfgate/policies/segments.yaml
BLOCK_KINDS = ("attention", "ffn", "moe", "aicpu", "other")
_MATCH_FIELDS = ("name", "family", "type", "core")
_TOP = {"version", "anchors", "tail", "blocks", "fusion", "counterexamples", "signature", "regions"}
REGION_KINDS = ("pipeline", "grad_sync", "optimizer", "embedding", "lm_head_loss", "other")


@dataclass(frozen=True)
class Match:
    """All given regexes must find a match (``re.search``) in the row's column."""
    name: re.Pattern | None = None
    family: re.Pattern | None = None
    type: re.Pattern | None = None
    core: re.Pattern | None = None


@dataclass(frozen=True)
class Anchor:
    """A layer anchor of segments.yaml: rows matching ``match`` (with up to ``lead_max`` preceding
    ``lead`` rows, e.g. the norm before attention) start a layer; ``unless_after`` / ``within``
    suppress hits that belong to the current layer; ``min_layers``: hits needed per step.
    ``companions``: anchors whose hits start attention-less (companion) layers."""
    name: str
    match: tuple
    lead: tuple = ()
    lead_max: int = 0
    unless_after: tuple = ()
    within: int = 0
    min_layers: int = 2
    companions: tuple = ()   # names of other anchors whose hits can start companion layers
    backward: tuple = ()     # hits matching these are backward-pass layers (e.g. FlashAttentionScoreGrad)


@dataclass(frozen=True)
class BlockRules:
    """How a layer splits into blocks: cut before rows matching ``cut_before`` (norms) and at
    AI_CPU runs (``aicpu_core``); a block's kind is the first of ``kinds`` any of its rows
    matches (attention | ffn | moe ...), else ``default``."""
    cut_before: tuple
    aicpu_core: re.Pattern | None
    kinds: tuple          # ((kind, (Match, ...)), ...)
    default: str = "other"


@dataclass(frozen=True)
class FusionPattern:
    """A known fusion pattern: the ordered operator-Type regexes ``steps`` of its decomposed
    form and the ``fused`` kernel that replaces it; ``medium_min`` steps in order = grade medium."""
    name: str
    fused: str
    steps: tuple          # ordered regexes over operator Type (or the family when Type is N/A)
    medium_min: int


@dataclass(frozen=True)
class FusionRules:
    """Fusion-candidate rules: element-wise and matmul Type regexes (element-wise chains of at
    least ``low_min`` kernels between two matmuls = grade low) and the named ``patterns``."""
    elementwise: re.Pattern
    matmul: re.Pattern
    patterns: tuple
    low_min: int = 3


@dataclass(frozen=True)
class SegmentRules:
    """Loaded ``segments.yaml``. ``digest`` changes whenever a rule changes (it goes into the
    fingerprint config, so structure metrics from other rules are incomparable)."""
    path: str
    anchors: tuple
    tail: tuple
    blocks: BlockRules
    fusion: FusionRules
    counterexamples: tuple
    digest: str
    shapes: bool = False   # Input Shapes in class signatures (where the kernel table carries them)
    regions: tuple = ()    # ((kind, (Match, ...)), ...): names of non-layer segments, first match wins

    @property
    def pipeline(self) -> tuple:
        """Matches of the ``pipeline`` region (pipeline send/recv rows)."""
        return tuple(m for kind, ms in self.regions if kind == "pipeline" for m in ms)


def _err(path, key, msg):
    return PolicyError(f"key '{key}': {msg}", path=path)


def _rx(path, key, text):
    if not isinstance(text, str):
        raise _err(path, key, f"must be a regular expression string, got {text!r}")
    try:
        return re.compile(text)
    except re.error as e:
        raise _err(path, key, f"invalid regular expression {text!r}: {e}") from None


def _match(path, key, d) -> Match:
    if not isinstance(d, dict) or not d:
        raise _err(path, key, f"must be a mapping of {list(_MATCH_FIELDS)} -> regex")
    extra = set(d) - set(_MATCH_FIELDS)
    if extra:
        raise _err(path, f"{key}.{sorted(extra)[0]}", f"unknown field (allowed: {list(_MATCH_FIELDS)})")
    return Match(**{f: _rx(path, f"{key}.{f}", d[f]) for f in d})


def _matches(path, key, v) -> tuple:
    if v is None:
        return ()
    if isinstance(v, dict):
        v = [v]
    if not isinstance(v, list):
        raise _err(path, key, "must be a match or a list of matches")
    return tuple(_match(path, f"{key}[{i}]", d) for i, d in enumerate(v))


def _int(path, key, v, lo=0):
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise _err(path, key, f"must be an integer >= {lo}, got {v!r}")
    return v


def _kind_list(path, key: str, items, allowed) -> list:
    """``[{kind: K, any: [matchers]}, ...]`` (block kinds, named regions) -> ``[(K, matchers)]``.

    Raises:
        PolicyError: an item that is not a mapping or whose kind is not in ``allowed``; a bad
            matcher (names the file and ``key[i]``).
    """
    out = []
    for i, item in enumerate(items or []):
        k = f"{key}[{i}]"
        if not isinstance(item, dict) or item.get("kind") not in allowed:
            raise _err(path, f"{k}.kind", f"must be one of {list(allowed)}")
        out.append((item["kind"], _matches(path, f"{k}.any", item.get("any"))))
    return out


def load_segment_rules(path=None) -> SegmentRules:
    """Load a segments knowledge file (default ``perfgate/policies/segments.yaml``).

    Raises:
        PolicyError: unreadable file, invalid YAML, unknown key, bad regex, an anchor without
            ``match``, a block kind outside attention | ffn | moe | aicpu | other.
    """
    path = Path(path or DEFAULT_SEGMENTS)
    doc = read_mapping(path, "segment rules")
    unknown = set(doc) - _TOP
    if unknown:
        raise _err(path, sorted(unknown)[0], f"unknown top-level key (allowed: {sorted(_TOP)})")
    anchors = []
    for i, a in enumerate(doc.get("anchors") or []):
        key = f"anchors[{i}]"
        if not isinstance(a, dict) or "match" not in a or "name" not in a:
            raise _err(path, key, "each anchor needs 'name' and 'match'")
        extra = set(a) - {"name", "match", "lead", "lead_max", "unless_after", "within", "min_layers", "companions",
                          "backward"}
        if extra:
            raise _err(path, f"{key}.{sorted(extra)[0]}", "unknown field")
        anchors.append(Anchor(
            name=str(a["name"]), match=_matches(path, f"{key}.match", a["match"]),
            lead=_matches(path, f"{key}.lead", a.get("lead")),
            lead_max=_int(path, f"{key}.lead_max", a.get("lead_max", 0)),
            unless_after=_matches(path, f"{key}.unless_after", a.get("unless_after")),
            within=_int(path, f"{key}.within", a.get("within", 0)),
            min_layers=_int(path, f"{key}.min_layers", a.get("min_layers", 2), lo=1),
            companions=tuple(a.get("companions") or ()),
            backward=_matches(path, f"{key}.backward", a.get("backward"))))
    names = {a.name for a in anchors}
    for i, a in enumerate(anchors):
        bad = [c for c in a.companions if c not in names or c == a.name]
        if bad:
            raise _err(path, f"anchors[{i}].companions", f"unknown or own anchor name(s) {bad}; "
                                                        f"known: {sorted(names - {a.name})}")
    b = doc.get("blocks") or {}
    kinds = _kind_list(path, "blocks.kinds", b.get("kinds"), BLOCK_KINDS)
    default = b.get("default", "other")
    if default not in BLOCK_KINDS:
        raise _err(path, "blocks.default", f"must be one of {list(BLOCK_KINDS)}")
    blocks = BlockRules(cut_before=_matches(path, "blocks.cut_before", b.get("cut_before")),
                        aicpu_core=_rx(path, "blocks.aicpu_core", b["aicpu_core"]) if b.get("aicpu_core") else None,
                        kinds=tuple(kinds), default=default)
    f = doc.get("fusion") or {}
    pats = []
    for i, p in enumerate(f.get("patterns") or []):
        key = f"fusion.patterns[{i}]"
        if not isinstance(p, dict) or not p.get("name") or not isinstance(p.get("steps"), list) or not p["steps"]:
            raise _err(path, key, "needs 'name' and a non-empty list 'steps'")
        steps = tuple(_rx(path, f"{key}.steps[{j}]", s) for j, s in enumerate(p["steps"]))
        mm = _int(path, f"{key}.medium_min", p.get("medium_min", max(2, len(steps) - 2)), lo=1)
        if mm > len(steps):
            raise _err(path, f"{key}.medium_min", f"must be <= the number of steps ({len(steps)})")
        pats.append(FusionPattern(str(p["name"]), str(p.get("fused", "")), steps, mm))
    fusion = FusionRules(elementwise=_rx(path, "fusion.elementwise", f.get("elementwise", "^$")),
                         matmul=_rx(path, "fusion.matmul", f.get("matmul", "(?i)mat.?mul")),
                         patterns=tuple(pats), low_min=_int(path, "fusion.low_min", f.get("low_min", 3), lo=2))
    ce = doc.get("counterexamples") or []
    if not isinstance(ce, list) or not all(isinstance(x, dict) and x.get("note") for x in ce):
        raise _err(path, "counterexamples", "must be a list of mappings, each with a 'note'")
    sig = doc.get("signature") or {}
    if not isinstance(sig, dict) or set(sig) - {"shapes"} or not isinstance(sig.get("shapes", False), bool):
        raise _err(path, "signature", "must be a mapping {shapes: true|false}")
    regions = _kind_list(path, "regions", doc.get("regions"), REGION_KINDS)
    digest = hashlib.sha256(json.dumps({k: doc.get(k) for k in ("anchors", "tail", "blocks", "signature", "regions")},
                                       sort_keys=True, default=str).encode()).hexdigest()[:16]
    return SegmentRules(path=str(path), anchors=tuple(anchors), tail=_matches(path, "tail", doc.get("tail")),
                        blocks=blocks, fusion=fusion, counterexamples=tuple(ce), digest=digest,
                        shapes=bool(sig.get("shapes", False)), regions=tuple(regions))
