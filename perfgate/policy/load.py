"""Policy: YAML -> frozen objects. Errors name the file and the key.

The policy decides the fingerprint rules (Top-N, family suffix, category table) and, per
metric, whether it gates, its direction and its tolerance. See ``perfgate/policies/default.yaml`` (package data).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from perfgate import terms
from perfgate.policy import opspec
from perfgate.policy.families import family_rules
from perfgate.policy.builtin import builtin_file, resolve_ref
from perfgate.errors import PolicyError
from perfgate.policy.sections import (BAND_MAX, FAIL_CLOSED, FindingThresholds, HistorySettings, PartSettings,
                                      SelfCheckSettings, StatisticsSettings)
from perfgate.policy.yamlfile import read_mapping

_UNKNOWN_CATEGORY = "unknown"  # the bucket of kernels no category rule matches (perfgate.metrics.kernels.UNKNOWN)
DEFAULT_POLICY = builtin_file("default.yaml")  # package data: perfgate/policies/default.yaml

_TOP_KEYS = {"version", "gate_views", "fingerprint", "metrics", "overrides", "self_checks", "findings", "history",
             "operators", "phases", "mfu", "suggestions", "statistics", "parts"}
_TOP_KEYS |= {"segments"}  # model-structure knowledge file (perfgate.policy.knowledge)
_TOP_KEYS |= {"max_incomparable_fraction"}  # partial comparisons: fail above this fraction (null: never)
_TOP_KEYS |= {"extends"}  # a --policy file's base: default (merged over the built-in policy) or none
#: a check with more than this fraction of its gated metrics not comparable is INCOMPATIBLE_BASELINE (exit 4)
#: unless the policy sets ``max_incomparable_fraction`` (null: never) or the run passes --allow-partial
MAX_INCOMPARABLE_DEFAULT = 0.25
_EXTENDS = ("default", "none")
# the settings sections' keys and defaults: perfgate.policy.sections (each default written there once)
_STAT_KEYS = set(StatisticsSettings.allowed()) - {"tolerances"}
_HISTORY_KEYS = set(HistorySettings.allowed())
_FINDING_KEYS = set(FindingThresholds.allowed()) | {"fail_closed"}
_FP_KEYS = {"top_n", "top_n_slack", "family_suffix", "family_volatile", "categories"}
_RULE_KEYS = {"gated", "direction", "tolerance"}
_TOL_KINDS = {"abs", "rel", "pp"}
_CAT_FIELDS = {"name", "type", "core"}
_CHECK_KEYS = set(SelfCheckSettings.allowed())


@dataclass(frozen=True)
class Tolerance:
    """``kind`` abs (metric unit), rel (fraction of |baseline|) or pp (percentage points)."""
    kind: str
    value: float

    def allowance(self, base: float | None = None) -> float:
        """The tolerance as an absolute amount in the unit of the compared quantity (≥ 0):
        ``abs`` its value (metric unit), ``pp`` its value / 100 (a ratio: 5 pp -> 0.05),
        ``rel`` its value × |``base``|. ``base`` None asks for the allowance of a relative
        effect (a fraction, e.g. a ratio − 1): ``rel`` then gives its value unchanged.
        The one conversion of a policy tolerance; :meth:`perfgate.terms.Direction.judge`
        compares a change with it."""
        if self.kind == "abs":
            return float(self.value)
        if self.kind == "pp":
            return self.value / 100.0
        return float(self.value) if base is None else self.value * abs(base)

    def describe(self, unit: str) -> str:
        """The tolerance as shown in every report (CLI, Markdown, JUnit, HTML, JSON reasons):
        ``rel`` in percent, ``pp`` in percentage points, ``abs`` in ``unit`` (0 = "exact"),
        each with three significant digits and no trailing zeros (:func:`significant`), so a
        calibrated 0.015 reads "±1.5%", 0.009 "±0.9%" and 0.0025 pp "±0.25 pp"."""
        if self.kind == "rel":
            return f"±{significant(self.value * 100.0)}%"
        if self.kind == "pp":
            return f"±{significant(self.value)} pp"
        return f"±{significant(self.value)} {unit}" if self.value else "exact"


def significant(x: float, digits: int = 3) -> str:
    """``x`` with at least ``digits`` significant digits, fixed-point (never 1e+03), trailing
    zeros dropped: 1.5 -> "1.5", 0.9 -> "0.9", 0.25 -> "0.25", 10 -> "10", 1234.5 -> "1234"."""
    import math
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class Rule:
    """Per-metric policy: ``gated`` (can fail the gate), ``direction`` (lower_is_better |
    higher_is_better | exact) and ``tolerance`` (abs in the metric unit, rel fraction, or pp)."""
    gated: bool
    direction: str
    tolerance: Tolerance


@dataclass(frozen=True)
class Override:
    """One ``overrides[i]`` entry: the rule fields (``gated`` / ``direction`` / ``tolerance``, as
    :class:`Rule`; only those the entry sets) applied to ``metric`` values whose labels include
    every ``labels`` pair (str -> str)."""
    metric: str
    labels: dict
    fields: dict

    def applies(self, name: str, labels: dict) -> bool:
        """Whether this override covers metric ``name`` with ``labels``; an override of view ``p50``
        (``max``) covers the same view within each pipeline stage (``stage1.p50``) too."""
        return self.metric == name and all(
            labels.get(k) == v or (k == "view" and terms.base_view(labels.get(k)) == v)
            for k, v in self.labels.items())

    def __iter__(self):  # ``name, labels, fields = override``, the shape overrides had as tuples
        return iter((self.metric, self.labels, self.fields))


@dataclass(frozen=True)
class CategoryRule:
    """One category rule. Most specific wins: (fields constrained, ``priority``), see
    :mod:`perfgate.policy.opspec`; ``index`` is its position under ``fingerprint.categories``."""
    category: str
    name: re.Pattern | None
    type: re.Pattern | None
    core: re.Pattern | None
    priority: int = 0
    index: int = -1

    @property
    def label(self) -> str:
        return self.category

    @property
    def specificity(self) -> tuple:
        return (sum(x is not None for x in (self.name, self.type, self.core)), self.priority)

    def describe(self) -> str:
        parts = [f"{f}={getattr(self, f).pattern!r}" for f in ("name", "type", "core") if getattr(self, f) is not None]
        return (f"fingerprint.categories[{self.index}] ({self.category}: {', '.join(parts)}, "
                f"priority {self.priority})")


@dataclass(frozen=True)
class Policy:
    """A loaded policy. ``rule_for(name, labels)`` gives the effective :class:`Rule`."""
    path: str
    gate_views: tuple
    top_n: int
    top_n_slack: int
    family_suffix: re.Pattern   # or perfgate.policy.families.FamilyRules (same sub / pattern)
    categories: tuple
    rules: dict
    overrides: tuple  # of Override, in file order
    self_checks: SelfCheckSettings
    raw: dict = field(repr=False, default_factory=dict)
    findings: FindingThresholds = field(default_factory=FindingThresholds)
    fail_closed: tuple = FAIL_CLOSED
    history: HistorySettings = field(default_factory=HistorySettings)
    segments: object = None  # perfgate.policy.knowledge.SegmentRules, or None when `segments: null`
    operators: opspec.OperatorSpec = field(default_factory=opspec.OperatorSpec)
    phases: opspec.PhaseSpec = field(default_factory=opspec.PhaseSpec)
    mfu: opspec.MfuSpec | None = None
    max_incomparable_fraction: float | None = None
    suggestions: tuple = ()
    statistics: StatisticsSettings = field(default_factory=StatisticsSettings)
    parts: PartSettings = field(default_factory=PartSettings)

    def rule_for(self, name: str, labels: dict | None = None) -> Rule | None:
        """Effective rule: the metric's base settings, then every matching override applied
        from the least to the most specific (most labels last, so it wins)."""
        labels = labels or {}
        base = self.rules.get(name)
        matching = sorted(((len(ov.labels), i, ov.fields) for i, ov in enumerate(self.overrides)
                           if ov.applies(name, labels)), key=lambda x: (x[0], x[1]))
        if base is None and not matching:
            return None
        merged = {"gated": base.gated if base else False,
                  "direction": base.direction if base else terms.EXACT,
                  "tolerance": base.tolerance if base else Tolerance("abs", 0.0)}
        for _, _, ov in matching:
            merged.update(ov)
        return Rule(**merged)

    def may_gate(self, pred) -> bool:
        """Whether some value of a metric whose name satisfies ``pred`` can be gated: its base
        rule is gated, or an override of it sets ``gated: true`` (a label-specific gate counts:
        the capture must then hold what that metric is computed from)."""
        return (any(pred(n) and r.gated for n, r in self.rules.items())
                or any(pred(o.metric) and o.fields.get("gated") for o in self.overrides))

    def require_gating(self) -> None:
        """Raise PolicyError when no metric rule and no override is gated: a gate built from
        such a policy could never fail (a file with ``extends: none`` starts from nothing, so
        one holding e.g. only ``gate_views`` gates nothing)."""
        if any(r.gated for r in self.rules.values()) or any(o.fields.get("gated") for o in self.overrides):
            return
        raise _err(self.path, "metrics", "this policy gates no metric, so the gate could never fail: with "
                                         "'extends: none' the file starts from nothing; drop that line to "
                                         "extend the built-in policy, or gate some metrics (docs/policy.md)")

    def allowing_partial(self) -> "Policy":
        """This policy with no limit on the fraction of gated metrics left not comparable
        (``--allow-partial``): a partial comparison judges the comparable rest and says how many
        were left out, never INCOMPATIBLE_BASELINE for that reason."""
        import dataclasses
        return dataclasses.replace(self, max_incomparable_fraction=None)

    def check_key_metric(self, why_not) -> None:
        """Raise PolicyError naming ``history.key_metric`` when ``why_not(key)`` (a higher
        layer's test, :func:`perfgate.metrics.registry.journal_metric_problem`) says why the
        tuning journal cannot follow it (an unknown or set metric)."""
        why = why_not(self.history["key_metric"])
        if why:
            raise _err(self.path, "history.key_metric", why)

    def check_names(self, known: set) -> None:
        """Raise PolicyError for a metric name under ``metrics:`` / ``overrides:`` that no
        metric has (a typo would otherwise silently un-gate a metric)."""
        import difflib
        names = [(f"metrics.{n}", n) for n in self.rules] + [(f"overrides[{i}].metric", o.metric)
                                                            for i, o in enumerate(self.overrides)]
        names += [(f"statistics.tolerances.{n}", n) for n in (self.statistics or {}).get("tolerances", {})]
        for key, n in names:
            if n not in known:
                close = difflib.get_close_matches(n, sorted(known), n=1)
                raise _err(self.path, key, f"unknown metric {n!r}" + (f"; did you mean {close[0]!r}?" if close else ""))

    def label_values(self) -> dict:
        """The closed label-value sets a policy can be checked against: ``view`` (rank0 / p50 /
        max), ``caliber`` (sum_duration / busy_union), ``category`` (this policy's categories
        plus the ``unknown`` bucket) and ``phase`` (this policy's phases plus its default).
        Other labels (family, type, core_type, kind, link, bound, class) are open: their
        values come from the capture, so any value is accepted."""
        return {"view": set(terms.VIEWS), "caliber": {terms.SUM_DURATION, terms.BUSY_UNION},
                "category": {c.category for c in self.categories} | {_UNKNOWN_CATEGORY},
                "phase": {r.label for r in self.phases.rules} | {self.phases.default}}

    def check_labels(self, label_keys: dict) -> None:
        """Raise PolicyError for a label that no value of the metric can carry, under
        ``overrides[i].labels`` and ``suggestions[i].labels`` / ``.view`` (a typo such as
        ``categroy: Comm`` would otherwise match nothing and silently drop the override).

        ``label_keys`` is {metric name: the label keys its values carry}, from the metric
        registry (:func:`perfgate.metrics.registry.all_label_keys`). Keys are always checked;
        values only where the set is closed (:meth:`label_values`): a ``view`` must be one of
        the views, and a gated override on a view outside ``gate_views`` is refused (it would
        never gate); ``category`` / ``phase`` must be one of this policy's; ``metric`` (of
        ``rank.skew_ratio``) a known metric name. Unknown metric names are
        :meth:`check_names`' job (an override's name is skipped here; a suggestion's is
        checked). The message names the file, the key path, the label and the valid ones,
        with a "did you mean" when one is close."""
        import difflib
        closed = self.label_values()
        closed["metric"] = set(label_keys)

        def check(where, name, labels):
            valid = label_keys.get(name)
            if valid is None:
                return
            for k, v in labels.items():
                if k not in valid:
                    close = difflib.get_close_matches(k, sorted(valid), n=1)
                    raise _err(self.path, f"{where}.{k}",
                               f"metric {name} has no label {k!r} (its labels: {sorted(valid)})"
                               + (f"; did you mean {close[0]!r}?" if close else ""))
                if k in closed and v not in closed[k]:
                    close = difflib.get_close_matches(v, sorted(closed[k]), n=1)
                    raise _err(self.path, f"{where}.{k}",
                               f"unknown {k} {v!r} (known: {sorted(closed[k])})"
                               + (f"; did you mean {close[0]!r}?" if close else ""))

        for i, ov in enumerate(self.overrides):
            check(f"overrides[{i}].labels", ov.metric, ov.labels)
            view = ov.labels.get("view")
            if ov.fields.get("gated") and view is not None and view not in self.gate_views:
                raise _err(self.path, f"overrides[{i}].labels.view",
                           f"gated override for view {view!r}, which is not in gate_views "
                           f"{list(self.gate_views)}: it would never gate; add the view to gate_views")
        for i, r in enumerate(self.suggestions):
            if r.metric is None:
                continue
            if r.metric not in label_keys:
                close = difflib.get_close_matches(r.metric, sorted(label_keys), n=1)
                raise _err(self.path, f"suggestions[{i}].metric", f"unknown metric {r.metric!r}"
                           + (f"; did you mean {close[0]!r}?" if close else ""))
            check(f"suggestions[{i}].labels", r.metric, r.labels)
            if r.view not in closed["view"]:
                raise _err(self.path, f"suggestions[{i}].view", f"unknown view {r.view!r}; use {list(terms.VIEWS)}")

    def fingerprint_digest(self) -> str:
        """Digest of the rules that change fingerprint values (Top-N, family, categories)."""
        blob = json.dumps(self.raw.get("fingerprint", {}), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def digest(self) -> str:
        """Digest of the whole policy document as loaded (every section: what gates, the
        self-check tolerances, the findings that fail closed, ...): anything that can change a
        capture's fingerprint, its validity or its verdict."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def category_digest(self) -> str:
        blob = json.dumps(self.raw.get("fingerprint", {}).get("categories", []), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_err = opspec.policy_error
_kind = opspec.value_kind


def _mapping(path, key, v, what: str = "a mapping") -> dict:
    """``v`` when it is a mapping, {} when null / absent; else a PolicyError naming ``key``,
    what is expected and what the file holds (never the AttributeError of a ``.get`` on a list)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _err(path, key, f"must be {what}, got {_kind(v)}")
    return v


def _sequence(path, key, v, what: str = "a list") -> list:
    """``v`` when it is a list, [] when null / absent; else a PolicyError naming ``key`` (a
    mapping or a string would be iterated by its keys or characters, a number not at all)."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise _err(path, key, f"must be {what}, got {_kind(v)}")
    return v


def _unknown(keys) -> str:
    """The first of ``keys`` in sorted order, sorted as text (YAML keys may be numbers too)."""
    return sorted(keys, key=str)[0]


def _section(path, key, parse, *args):
    """``parse(path, *args)`` for a section read by another module (:mod:`perfgate.policy.opspec`,
    :mod:`perfgate.policy.knowledge`): a value of another type where its checks did not look
    (AttributeError, TypeError, ValueError) is a PolicyError naming the section ``key``."""
    try:
        return parse(path, *args)
    except (AttributeError, TypeError, ValueError) as e:
        raise _err(path, key, f"a value has the wrong type or shape ({type(e).__name__}: {e})") from None


_regex = opspec.regex


def _bad_number(v, lo: float = 0.0) -> bool:
    """Not a finite number >= ``lo``: a bool, text, None, or YAML's ``.nan`` / ``.inf`` (a NaN
    passes every ``v < 0`` test and then poisons every comparison: exit 70 or every self-check
    failing instead of exit 2 naming the key)."""
    return (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < lo
            or abs(v) > MAX_POLICY_NUMBER)   # 10**26 passes isfinite, then overflows numpy's int64 (exit 70)


#: the largest number a policy setting may hold (2**53: every integer up to it is exact as a float;
#: no tolerance, window or count comes near it)
MAX_POLICY_NUMBER = 2 ** 53


def _tolerance(path, key, d) -> Tolerance:
    if not isinstance(d, dict) or len(d) != 1 or not isinstance(next(iter(d)), str) or next(iter(d)) not in _TOL_KINDS:
        raise _err(path, key, "tolerance must be one of {abs: X}, {rel: X}, {pp: X}, got " + _kind(d))
    kind, val = next(iter(d.items()))
    if _bad_number(val):
        raise _err(path, f"{key}.{kind}", f"must be a finite non-negative number, got {val!r}")
    return Tolerance(kind, float(val))


def _rule_fields(path, key, d, partial=False) -> dict:
    if not isinstance(d, dict):
        raise _err(path, key, f"must be a mapping of gated / direction / tolerance, got {_kind(d)}")
    unknown = set(d) - _RULE_KEYS
    if unknown:
        raise _err(path, f"{key}.{_unknown(unknown)}", f"unknown setting (allowed: {sorted(_RULE_KEYS)})")
    out = {}
    if "gated" in d:
        if not isinstance(d["gated"], bool):
            raise _err(path, f"{key}.gated", "must be true or false")
        out["gated"] = d["gated"]
    if "direction" in d:
        if d["direction"] not in terms.DIRECTIONS:
            raise _err(path, f"{key}.direction",
                       f"unknown direction {d['direction']!r}; use one of "
                       f"{', '.join(str(x.value) for x in terms.DIRECTIONS)}")
        out["direction"] = d["direction"]
    if "tolerance" in d:
        out["tolerance"] = _tolerance(path, f"{key}.tolerance", d["tolerance"])
    if not partial:
        for need in ("direction", "tolerance"):
            if need not in out:
                raise _err(path, key, f"needs '{need}' (a metric owns its direction and tolerance)")
        out.setdefault("gated", True)
    return out


def load_policy(path=None) -> Policy:
    """Load a policy YAML file (default: ``perfgate/policies/default.yaml``).

    A file other than the built-in one extends it (:func:`policy_document`): it is merged over
    the built-in policy key by key, unless it sets ``extends: none`` (then it is the whole policy).

    Raises:
        PolicyError: unreadable file, invalid YAML, an unknown key, a bad regex, direction
            or tolerance, a value of another type than its key's (a list where a mapping is
            expected, a string for a tolerance or a regex); the message names the file, the key
            path (``overrides[3].tolerance``) and, for a wrong type, what is expected and what
            the file holds.
    """
    if path is None:
        if not DEFAULT_POLICY.is_file():
            raise PolicyError("the built-in default policy is missing from this installation (package "
                              "data perfgate/policies/default.yaml)", path=DEFAULT_POLICY,
                              hint="reinstall perfgate (pip install --force-reinstall perfgate) or pass --policy")
        path = DEFAULT_POLICY
    path = Path(path)
    try:
        return _load_policy(path)
    except (AttributeError, TypeError, ValueError, RecursionError) as e:
        # a value of another YAML type where the checks above did not look (metrics: x, a number
        # where a list is read, YAML nested a thousand levels): the file's fault, never a crash
        raise PolicyError(f"a value has the wrong type or shape ({type(e).__name__}: {e})", path=path,
                          hint="compare the keys with perfgate/policies/default.yaml and docs/policy.md") from None


def _load_policy(path: Path) -> Policy:
    """The body of :func:`load_policy`, for one existing path: each section checked in the
    file's order, so a file with several mistakes is refused at the first."""
    doc = policy_document(path)
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise _err(path, _unknown(unknown), f"unknown top-level key (allowed: {sorted(_TOP_KEYS)})")
    if doc.get("version", 1) != 1:
        raise _err(path, "version", f"unsupported policy version {doc.get('version')!r} (this perfgate reads 1)")
    views = _gate_views(path, doc)
    top_n, slack, suffix, cats = _fingerprint_rules(path, doc)
    rules = {name: Rule(**_rule_fields(path, f"metrics.{name}", d))
             for name, d in _mapping(path, "metrics", doc.get("metrics"), "a mapping of metric name -> rule").items()}
    overrides = _overrides(path, doc)
    checks = _self_checks(path, doc)
    thresholds, fail_closed = _findings(path, doc)
    hist = _history(path, doc)
    mif = doc.get("max_incomparable_fraction", MAX_INCOMPARABLE_DEFAULT)
    if mif is not None and (not isinstance(mif, (int, float)) or isinstance(mif, bool) or not 0 <= mif <= 1):
        raise _err(path, "max_incomparable_fraction", f"must be a number in [0, 1], got {mif!r}")
    return Policy(max_incomparable_fraction=None if mif is None else float(mif), path=str(path), gate_views=views, top_n=top_n, top_n_slack=slack,
                  family_suffix=suffix, categories=tuple(cats), rules=rules,
                  overrides=tuple(overrides), self_checks=checks, raw=doc,
                  findings=FindingThresholds().with_values(thresholds),
                  fail_closed=tuple(fail_closed), history=HistorySettings().with_values(hist),
                  segments=_section(path, "segments", _segments, doc),
                  operators=_section(path, "operators", opspec.parse_operators, doc.get("operators")),
                  phases=_section(path, "phases", opspec.parse_phases, doc.get("phases")),
                  mfu=_section(path, "mfu", opspec.parse_mfu, doc.get("mfu")),
                  suggestions=_section(path, "suggestions", opspec.parse_suggestions,
                                       _sequence(path, "suggestions", doc.get("suggestions"), "a list of rules")),
                  statistics=_statistics(path, doc), parts=_parts(path, doc))


def policy_document(path: Path) -> dict:
    """The policy document :func:`load_policy` checks: the built-in file as it is; another file
    merged over the built-in one (:func:`merge_policy`), unless it sets ``extends: none``, when it
    is read alone. ``extends: none`` stays in the document (a policy written from it, such as
    ``perfgate calibrate``'s, stands alone too); ``extends: default`` (the default) is dropped, the
    merged document being whole.

    Raises:
        PolicyError: unreadable file or invalid YAML (:func:`read_mapping`), or an ``extends``
            value other than ``default`` / ``none``."""
    doc = read_mapping(path, "policy")
    if Path(path).resolve() == DEFAULT_POLICY.resolve():
        return doc
    base = doc.get("extends", "default")
    if base not in _EXTENDS:
        raise _err(path, "extends", f"must be one of {list(_EXTENDS)} (default: merge this file over the built-in "
                                    f"policy; none: this file is the whole policy), got {base!r}")
    if base == "none":
        return doc
    doc.pop("extends", None)
    return merge_policy(read_mapping(DEFAULT_POLICY, "policy"), doc)


def merge_policy(base: dict, over: dict) -> dict:
    """``over`` merged over ``base``, key by key (a new dict; neither is changed): two mappings
    merge recursively; anything else in ``over`` (a number, text, null, a list, a tolerance such
    as ``{rel: 0.1}``) replaces the value in ``base`` whole. So a list (``gate_views``,
    ``overrides``, ``fingerprint.categories``, ``suggestions``, ``findings.fail_closed``) replaces
    the built-in list, and a tolerance of another kind replaces the built-in one (a rule holds one
    tolerance). Documented in docs/policy.md ("Extending the built-in policy")."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not _is_tolerance(v):
            out[k] = merge_policy(out[k], v)
        else:
            out[k] = v
    return out


def _is_tolerance(d: dict) -> bool:
    """A mapping shaped as a tolerance (its keys among abs / rel / pp): one value, never merged."""
    return bool(d) and all(k in _TOL_KINDS for k in d)


def _gate_views(path: Path, doc: dict) -> tuple:
    """``gate_views:`` (default rank0 and p50): known views, at least one."""
    views = tuple(_sequence(path, "gate_views", doc.get("gate_views", [terms.VIEW_RANK0, terms.VIEW_P50]),
                            f"a list of views ({', '.join(terms.VIEWS)})"))
    for v in views:
        if not isinstance(v, str) or v not in terms.VIEWS:
            raise _err(path, "gate_views", f"unknown view {v!r}; use {list(terms.VIEWS)}")
    if not views:   # every metric informational: a check could only end "nothing gated comparable"
        raise _err(path, "gate_views", f"is empty: no metric would gate; name at least one view of "
                                       f"{list(terms.VIEWS)} (to report a metric without gating it, "
                                       f"override it with gated: false)")
    return views


def _fingerprint_rules(path: Path, doc: dict) -> tuple:
    """``fingerprint:`` -> ``(top_n, top_n_slack, family suffix rules, category rules)``."""
    fp = _mapping(path, "fingerprint", doc.get("fingerprint"), f"a mapping of {', '.join(sorted(_FP_KEYS))}")
    unknown = set(fp) - _FP_KEYS
    if unknown:
        raise _err(path, f"fingerprint.{_unknown(unknown)}", f"unknown key (allowed: {sorted(_FP_KEYS)})")
    top_n = fp.get("top_n", 10)
    slack = fp.get("top_n_slack", 5)
    for k, v in (("top_n", top_n), ("top_n_slack", slack)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (k == "top_n" and v == 0) or v > MAX_POLICY_NUMBER:
            raise _err(path, f"fingerprint.{k}", f"must be a positive integer, got {v!r}")
    suffix = _regex(path, "fingerprint.family_suffix", fp.get("family_suffix", r"(?:_+\d+)+$"))
    suffix = family_rules(path, suffix, fp.get("family_volatile"))   # volatile name parts (hashes, configs)
    return top_n, slack, suffix, _categories(path, fp)


def _categories(path: Path, fp: dict) -> list:
    """``fingerprint.categories``: one :class:`CategoryRule` per entry (a category and name / type /
    core regexes, a priority); two entries with the same match and different categories are refused."""
    cats = []
    seen = {}
    for i, c in enumerate(_sequence(path, "fingerprint.categories", fp.get("categories"),
                                    "a list of {category, name / type / core} rules")):
        key = f"fingerprint.categories[{i}]"
        if not isinstance(c, dict) or "category" not in c:
            raise _err(path, key, "each rule needs 'category' and at least one of name/type/core")
        extra = set(c) - _CAT_FIELDS - {"category", "priority"}
        if extra:
            raise _err(path, f"{key}.{_unknown(extra)}", f"unknown field (allowed: {sorted(_CAT_FIELDS)})")
        if not (set(c) & _CAT_FIELDS):
            raise _err(path, key, "needs at least one of name/type/core")
        prio = c.get("priority", 0)
        if not isinstance(prio, int) or isinstance(prio, bool):
            raise _err(path, f"{key}.priority", f"must be an integer, got {prio!r}")
        if not isinstance(c["category"], (str, int)) or isinstance(c["category"], bool):
            raise _err(path, f"{key}.category", f"must be a category name (a string), got {_kind(c['category'])}")
        pats = {f: _regex(path, f"{key}.{f}", c[f]) for f in ("name", "type", "core") if f in c}
        sig = (tuple(sorted((k, c[k]) for k in _CAT_FIELDS if k in c)), prio)
        if sig in seen and seen[sig] != c["category"]:
            raise _err(path, key, f"same match as categories[{list(seen).index(sig)}] but a different "
                                  f"category ({seen[sig]!r} vs {c['category']!r})")
        seen[sig] = c["category"]
        cats.append(CategoryRule(
            str(c["category"]),
            *(pats.get(f) for f in ("name", "type", "core")),
            priority=prio, index=i))
    return cats


def _overrides(path: Path, doc: dict) -> list:
    """``overrides:`` -> :class:`Override` list: a metric name, one value per label, and any of
    gated / direction / tolerance."""
    overrides = []
    for i, ov in enumerate(_sequence(path, "overrides", doc.get("overrides"), "a list of {metric, labels, ...} rules")):
        key = f"overrides[{i}]"
        if not isinstance(ov, dict) or "metric" not in ov:
            raise _err(path, key, "needs 'metric'" + ("" if isinstance(ov, dict) else f" (a mapping), got {_kind(ov)}"))
        if not isinstance(ov["metric"], str):
            raise _err(path, f"{key}.metric", f"must be a metric name (a string), got {_kind(ov['metric'])}")
        labels = ov.get("labels") or {}
        if not isinstance(labels, dict):
            raise _err(path, f"{key}.labels", f"must be a mapping of label -> value, got {_kind(labels)}")
        for lk, lv in labels.items():   # a list or null would become the text "['a', 'b']" / "None": a rule that never applies
            if not isinstance(lk, str) or isinstance(lv, bool) or not isinstance(lv, (str, int, float)):
                raise _err(path, f"{key}.labels.{lk}", f"must be one label value (a string or number), got "
                                                      f"{_kind(lv)}: one override per value")
        fields = {k: v for k, v in ov.items() if k not in ("metric", "labels")}
        overrides.append(Override(ov["metric"], {str(k): str(v) for k, v in labels.items()},
                                  _rule_fields(path, key, fields, partial=True)))
    return overrides


def _self_checks(path: Path, doc: dict) -> SelfCheckSettings:
    """``self_checks:`` thresholds (finite non-negative numbers) and ``require_trace`` (true / false)."""
    sc = _mapping(path, "self_checks", doc.get("self_checks"), "a mapping of setting -> value")
    unknown = set(sc) - _CHECK_KEYS
    if unknown:
        raise _err(path, f"self_checks.{_unknown(unknown)}", f"unknown key (allowed: {sorted(_CHECK_KEYS)})")
    for k, v in sc.items():
        if k == "require_trace":
            if not isinstance(v, bool):
                raise _err(path, "self_checks.require_trace", f"must be true or false, got {v!r}")
        elif _bad_number(v):
            raise _err(path, f"self_checks.{k}", f"must be a finite non-negative number (YAML reads 1e9 as text: "
                                                  f"write 1.0e+9), got {v!r}")
    return SelfCheckSettings().with_values(sc)


def _findings(path: Path, doc: dict) -> tuple[dict, list]:
    """``findings:`` -> ``({threshold: number}, fail_closed codes)``; every code must be a known
    finding code."""
    fd = doc.get("findings") or {}
    if not isinstance(fd, dict):
        raise _err(path, "findings", f"must be a mapping of threshold -> number, got {_kind(fd)}")
    unknown = set(fd) - _FINDING_KEYS
    if unknown:
        raise _err(path, f"findings.{_unknown(unknown)}", f"unknown key (allowed: {sorted(_FINDING_KEYS)})")
    thresholds = {}
    for k, v in fd.items():
        if k == "fail_closed":
            continue
        if _bad_number(v):
            raise _err(path, f"findings.{k}", f"must be a finite non-negative number, got {v!r}")
        thresholds[k] = float(v)
    fail_closed = fd.get("fail_closed", list(FAIL_CLOSED))
    if not isinstance(fail_closed, list) or not all(isinstance(x, str) for x in fail_closed):
        raise _err(path, "findings.fail_closed", "must be a list of finding codes")
    for code in fail_closed:   # a misspelt code would silently stop failing closed
        if code not in terms.FINDING_CODES:
            import difflib
            near = difflib.get_close_matches(code, sorted(terms.FINDING_CODES), n=1)
            raise _err(path, "findings.fail_closed", f"unknown finding code {code!r}"
                       + (f"; did you mean {near[0]!r}?" if near else "")
                       + f"; codes: {', '.join(sorted(terms.FINDING_CODES))}")
    return thresholds, fail_closed


def _history(path: Path, doc: dict) -> dict:
    """``history:`` settings: ``key_metric`` a metric key, the rest finite non-negative numbers
    (window, min_runs, min_size, min_after positive integers)."""
    hist = {}
    hd = doc.get("history") or {}
    if not isinstance(hd, dict):
        raise _err(path, "history", f"must be a mapping, got {_kind(hd)}")
    for k, v in hd.items():
        if k not in _HISTORY_KEYS:
            raise _err(path, f"history.{k}", f"unknown key (allowed: {sorted(_HISTORY_KEYS)})")
        if k == "key_metric":
            if not isinstance(v, str):
                raise _err(path, "history.key_metric", "must be a metric key such as step.time_us{view=p50}")
        elif _bad_number(v):
            raise _err(path, f"history.{k}", f"must be a finite non-negative number, got {v!r}")
        elif k in ("window", "min_runs", "min_size", "min_after") and (int(v) != v or v < 1):
            raise _err(path, f"history.{k}", f"must be a positive integer, got {v!r}")
        hist[k] = v
    return hist


def _segments(path: Path, doc: dict):
    """``segments:`` = a knowledge file path (relative to the policy file), absent = the bundled
    ``perfgate/policies/segments.yaml``, null = no layer segmentation."""
    from perfgate.policy.knowledge import DEFAULT_SEGMENTS, load_segment_rules
    if "segments" not in doc:
        return load_segment_rules(DEFAULT_SEGMENTS)
    v = doc["segments"]
    if v is None or v is False:
        return None
    if not isinstance(v, str):
        raise _err(path, "segments", f"must be a file path or null, got {v!r}")
    return load_segment_rules(resolve_ref(path, v))


def _section_items(path, doc, name: str) -> list:
    """``[(dotted key, key, value)]`` of the policy section ``name`` (absent or null: none).

    Raises:
        PolicyError: the section is not a mapping (naming it)."""
    sd = doc.get(name) or {}
    if not isinstance(sd, dict):
        raise _err(path, name, f"must be a mapping, got {_kind(sd)}")
    return [(f"{name}.{k}", k, v) for k, v in sd.items()]


def _parts(path, doc) -> PartSettings:
    """The ``parts:`` section (:class:`PartSettings`): ``material_*`` fractions in (0, 1], ``band_*`` in
    (0, BAND_MAX] (a part whose own time varies by more than itself between runs needs a band above 1);
    unknown keys refused."""
    out = {}
    for key, k, v in _section_items(path, doc, "parts"):
        if k not in PartSettings.allowed():
            raise _err(path, key, f"unknown key (allowed: {PartSettings.allowed()})")
        top = 1.0 if k.startswith("material") else BAND_MAX
        if _bad_number(v, lo=-math.inf) or not 0 < v <= top:
            raise _err(path, key, f"must be a number in (0, {top:g}], got {v!r}")
        out[k] = float(v)
    return PartSettings().with_values(out)


def _statistics(path, doc) -> StatisticsSettings:
    """The ``statistics:`` section (repeated captures, :mod:`perfgate.compare.stats`): ``enabled``,
    ``alpha`` (the runs bound of the exact rank test, 0..1), ``confidence`` (interval of the
    Hodges-Lehmann shift, 0..1), ``unsure_fails`` (exit 1 on a gated ``unsure``),
    ``max_runs_hint``, ``informational`` (also re-judge ungated metrics) and ``tolerances`` ({metric name: tolerance}, the effect-size gate)."""
    out = {}
    for key, k, v in _section_items(path, doc, "statistics"):
        if k == "tolerances":
            if not isinstance(v, dict):
                raise _err(path, key, f"must be a mapping of metric name -> tolerance, got {_kind(v)}")
            out["tolerances"] = {str(n): _tolerance(path, f"{key}.{n}", t) for n, t in v.items()}
        elif k not in _STAT_KEYS:
            raise _err(path, key, f"unknown key (allowed: {sorted(_STAT_KEYS) + ['tolerances']})")
        elif k in ("enabled", "unsure_fails", "informational"):
            if not isinstance(v, bool):
                raise _err(path, key, f"must be true or false, got {v!r}")
            out[k] = v
        elif _bad_number(v, lo=-math.inf):
            raise _err(path, key, f"must be a finite number, got {v!r}")
        elif k in ("alpha", "confidence") and not 0 < v < 1:
            raise _err(path, key, f"must be between 0 and 1 (exclusive), got {v!r}")
        elif k == "max_runs_hint" and (int(v) != v or v < 1):
            raise _err(path, key, f"must be a positive integer, got {v!r}")
        else:
            out[k] = v
    return StatisticsSettings().with_values(out)

