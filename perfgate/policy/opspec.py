"""Family-view (kernel-family) sections of the policy: ``operators``, ``phases``, ``mfu``, ``suggestions``.

Parsed by :func:`perfgate.policy.load_policy` into frozen objects (errors name the policy file
and the key, exit 2). Also the matcher semantics shared by categories and phases:

**Specificity** of a match rule = (number of fields constrained among ``name`` / ``type`` /
``core``, then the explicit integer ``priority``, default 0). For each kernel row the most
specific matching rule wins; rule order does not matter. Two rules of equal specificity that
both match one row and assign different labels are a policy error naming both rules
(:func:`perfgate.metrics.kernels.categorize` raises it on the first such row; identical rules
are refused already at load time).

The FLOPs spec of the MFU section is either a YAML file (``families:`` list of
``{match: {name|type|core: regex}, flops: matmul}``; ``matmul`` = 2·M·N·K from Input Shapes,
batch dimensions multiplied) or a Python file defining ``flops(row) -> float`` where ``row`` is a
dict with ``name``, ``type``, ``core_type``, ``input_shapes``, ``input_dtypes`` (strings or None)
(return 0 or None for a row the spec does not count). The peak table is a YAML file
``chips: {CHIP: {fp16: FLOP/s, bf16: ..., fp32: ..., int8: ...}}``.
"""
from __future__ import annotations

import math

import importlib.util
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from perfgate.errors import PolicyError
from perfgate.policy.builtin import resolve_ref

MATCH_FIELDS = ("name", "type", "core")
PRIORITIES = ("P0", "P1", "P2")
FLOPS_BUILTINS = ("matmul",)
DTYPES = ("fp16", "bf16", "fp32", "int8")
PIPE_STAGES = ("aic_mac", "aic_mte1", "aic_mte2", "aic_fixpipe", "aic_scalar",
               "aiv_vec", "aiv_mte2", "aiv_mte3", "aiv_scalar")


def policy_error(path, key, msg) -> PolicyError:
    """The error for key ``key`` of policy file ``path``: ``key 'KEY': MSG``."""
    return PolicyError(f"key '{key}': {msg}", path=path)



def value_kind(v) -> str:
    """What a YAML value is, for a message: "a list ([1, 2])", "a string ('5%')", "null"."""
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number",
             float: "a number", type(None): "null"}
    name = names.get(type(v), type(v).__name__)
    return name if v is None else f"{name} ({str(v)[:40]!r})" if isinstance(v, str) else f"{name} ({str(v)[:40]})"


@dataclass(frozen=True)
class Matcher:
    """Regexes over Name / Type / Accelerator Core (``re.search``; N/A cells never match).
    ``label`` is what the rule assigns (a category or a phase); ``index`` its position in the
    policy list, ``where`` the policy key (for error messages)."""
    label: str
    name: re.Pattern | None = None
    type: re.Pattern | None = None
    core: re.Pattern | None = None
    priority: int = 0
    index: int = -1
    where: str = ""

    @property
    def specificity(self) -> tuple:
        return (sum(getattr(self, f) is not None for f in MATCH_FIELDS), self.priority)

    def describe(self) -> str:
        parts = [f"{f}={getattr(self, f).pattern!r}" for f in MATCH_FIELDS if getattr(self, f) is not None]
        return f"{self.where} ({self.label}: {', '.join(parts)}, priority {self.priority})"


def regex(path, key, text):
    """``text`` compiled, for key ``key`` of policy file ``path`` (the category, phase and
    family rules all read their patterns here).

    Raises:
        PolicyError: ``text`` is not a string (a YAML number or list: never taken as its text),
            or not a valid regular expression."""
    if not isinstance(text, str):
        raise policy_error(path, key, f"must be a regular expression (a string), got {value_kind(text)}")
    try:
        return re.compile(text)
    except re.error as e:
        raise policy_error(path, key, f"invalid regular expression {text!r}: {e}") from None



def parse_matcher(path, key, d: dict, label: str, index: int) -> Matcher:
    """A mapping with name / type / core regexes (at least one) and an optional integer priority.

    Raises:
        PolicyError: not a mapping, an unknown field, no field, a bad regex or priority.
    """
    if not isinstance(d, dict):
        raise policy_error(path, key, "must be a mapping with name / type / core regexes")
    unknown = set(d) - set(MATCH_FIELDS) - {"priority"}
    if unknown:
        raise policy_error(path, f"{key}.{sorted(unknown)[0]}", f"unknown field (allowed: {list(MATCH_FIELDS) + ['priority']})")
    if not set(d) & set(MATCH_FIELDS):
        raise policy_error(path, key, "needs at least one of name/type/core")
    prio = d.get("priority", 0)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise policy_error(path, f"{key}.priority", f"must be an integer, got {prio!r}")
    return Matcher(label=str(label), priority=prio, index=index, where=key,
                   **{f: regex(path, f"{key}.{f}", d[f]) for f in MATCH_FIELDS if f in d})


def check_duplicates(path, matchers) -> None:
    """Refuse two rules with identical regexes and priority but different labels."""
    seen = {}
    for m in matchers:
        sig = (tuple((f, getattr(m, f).pattern) for f in MATCH_FIELDS if getattr(m, f) is not None), m.priority)
        if sig in seen and seen[sig].label != m.label:
            o = seen[sig]
            raise policy_error(path, m.where, f"same match and priority as {o.where} but a different label "
                                      f"({o.label!r} vs {m.label!r}); give one a priority")
        seen.setdefault(sig, m)


@dataclass(frozen=True)
class PhaseSpec:
    """``mode``: ``family`` (each rule assigns matching kernels to its phase, most specific
    wins) or ``region`` (per step in time order, a phase starts at the first kernel matching
    its rule after the previous phase started; kernels before the first start are ``default``).
    No rules = one phase named ``default``."""
    mode: str = "family"
    default: str = "all"
    rules: tuple = ()


@dataclass(frozen=True)
class OperatorSpec:
    """``family_min_share``: the operator detail lists families above this share of ΣDuration
    (ratio); ``fold_below``: categories under this share are folded into Other in the report;
    ``mixed_within``: bound family ``mixed`` when the second largest pipe stage of another
    family is within this fraction of the largest; ``require_pipe``: fail closed when the
    capture has no PipeUtilization columns; ``read_pmu`` / ``read_shapes``: read the PMU and
    Input Shapes / Input Data Types columns (off = pipe metrics and MFU absent)."""
    family_min_share: float = 0.01
    fold_below: float = 0.01
    mixed_within: float = 0.10
    require_pipe: bool = False
    read_pmu: bool = True
    read_shapes: bool = False


@dataclass(frozen=True)
class FlopsRule:
    """One FLOPs-spec entry: kernels matching ``matcher`` get FLOPs from ``formula`` (e.g.
    ``matmul``: 2·M·N·K from Input Shapes)."""
    matcher: Matcher
    formula: str


@dataclass(frozen=True)
class MfuSpec:
    """A FLOPs spec (``rules`` from YAML, or ``python`` = path of a file with ``flops(row)``),
    the chip and its peak FLOP/s per dtype (``peaks``), and where the numbers come from."""
    spec_path: str
    chip: str
    peaks: dict
    peaks_path: str
    rules: tuple = ()
    python: str | None = None
    default_dtype: str = "fp16"


@dataclass(frozen=True)
class SuggestionRule:
    """A finding produced when a condition holds; informational, never gated.

    Either a metric condition (``metric`` + ``labels`` in ``view``, ``above`` / ``below`` a
    threshold in the metric's unit: ratios as fractions) or a ``consecutive`` condition: at
    least ``min_run`` kernels in a row (time order, per step, compute kernels only) matching
    ``consecutive`` in phase ``phase`` (any phase when None)."""
    id: str
    priority: str
    text: str
    metric: str | None = None
    labels: dict = field(default_factory=dict)
    view: str = "p50"
    above: float | None = None
    below: float | None = None
    consecutive: Matcher | None = None
    phase: str | None = None
    min_run: int = 2


def _number(path, key, v, lo=0.0, hi=None):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < lo \
            or (hi is not None and v > hi):
        raise policy_error(path, key, f"must be a number in [{lo}, {hi if hi is not None else '∞'}], got {v!r}")
    return float(v)


def parse_operators(path, d) -> OperatorSpec:
    """The ``operators:`` policy section -> :class:`OperatorSpec`.

    Raises:
        PolicyError: not a mapping, an unknown key, or a value of the wrong type / range.
    """
    d = d or {}
    if not isinstance(d, dict):
        raise policy_error(path, "operators", "must be a mapping")
    allowed = {"family_min_share", "fold_below", "mixed_within", "require_pipe", "read_pmu", "read_shapes"}
    unknown = set(d) - allowed
    if unknown:
        raise policy_error(path, f"operators.{sorted(unknown)[0]}", f"unknown key (allowed: {sorted(allowed)})")
    out = {}
    for k in ("family_min_share", "fold_below", "mixed_within"):
        if k in d:
            out[k] = _number(path, f"operators.{k}", d[k], 0.0, 1.0)
    for k in ("require_pipe", "read_pmu", "read_shapes"):
        if k in d:
            if not isinstance(d[k], bool):
                raise policy_error(path, f"operators.{k}", f"must be true or false, got {d[k]!r}")
            out[k] = d[k]
    return OperatorSpec(**out)


def parse_phases(path, d) -> PhaseSpec:
    """The ``phases:`` policy section (``mode`` family | region, ``default``, ``rules``) ->
    :class:`PhaseSpec`.

    Raises:
        PolicyError: bad mode, unknown key, bad rule (regex, missing phase name).
    """
    d = d or {}
    if not isinstance(d, dict):
        raise policy_error(path, "phases", "must be a mapping with mode / default / rules")
    unknown = set(d) - {"mode", "default", "rules"}
    if unknown:
        raise policy_error(path, f"phases.{sorted(unknown)[0]}", "unknown key (allowed: ['default', 'mode', 'rules'])")
    mode = d.get("mode", "family")
    if mode not in ("family", "region"):
        raise policy_error(path, "phases.mode", f"must be 'family' or 'region', got {mode!r}")
    rules = []
    if not isinstance(d.get("rules") or [], list):
        raise policy_error(path, "phases.rules", f"must be a list of {{phase, name / type / core}} rules, got {d['rules']!r}")
    for i, r in enumerate(d.get("rules") or []):
        key = f"phases.rules[{i}]"
        if not isinstance(r, dict) or "phase" not in r:
            raise policy_error(path, key, "each rule needs 'phase' and at least one of name/type/core")
        rules.append(parse_matcher(path, key, {k: v for k, v in r.items() if k != "phase"}, r["phase"], i))
    if mode == "family":
        check_duplicates(path, rules)
    return PhaseSpec(mode=mode, default=str(d.get("default", "all")), rules=tuple(rules))


def _resolve(path, key, rel) -> Path:
    p = resolve_ref(path, rel)  # perfgate:REL = a built-in file; else relative to the policy file
    if not p.is_file():
        raise policy_error(path, key, f"file not found: {p}")
    return p


def _load_yaml(path, key, p: Path):
    try:
        from perfgate.policy.yamlfile import load_unique
        return load_unique(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise policy_error(path, key, f"cannot read {p}: {e}") from None


def parse_mfu(path, d) -> MfuSpec | None:
    """``mfu: {spec: FILE.yaml|FILE.py, peaks: FILE.yaml, chip: NAME, default_dtype: fp16}``
    (paths relative to the policy file); None when the section or ``spec`` is absent."""
    if not d:
        return None
    if not isinstance(d, dict):
        raise policy_error(path, "mfu", "must be a mapping with spec / peaks / chip")
    unknown = set(d) - {"spec", "peaks", "chip", "default_dtype"}
    if unknown:
        raise policy_error(path, f"mfu.{sorted(unknown)[0]}", "unknown key (allowed: ['chip', 'default_dtype', 'peaks', 'spec'])")
    if not d.get("spec"):
        return None
    for k in ("peaks", "chip"):
        if not d.get(k):
            raise policy_error(path, f"mfu.{k}", "required when mfu.spec is given")
    dd = d.get("default_dtype", "fp16")
    if dd not in DTYPES:
        raise policy_error(path, "mfu.default_dtype", f"must be one of {list(DTYPES)}, got {dd!r}")
    spec_p = _resolve(path, "mfu.spec", d["spec"])
    peaks_p = _resolve(path, "mfu.peaks", d["peaks"])
    doc = _load_yaml(path, "mfu.peaks", peaks_p)
    chips = (doc or {}).get("chips") if isinstance(doc, dict) else None
    if not isinstance(chips, dict) or str(d["chip"]) not in chips:
        raise policy_error(path, "mfu.chip", f"chip {d['chip']!r} is not in {peaks_p} (chips: "
                                     f"{sorted(chips) if isinstance(chips, dict) else []})")
    raw = chips[str(d["chip"])]
    peaks = {}
    for dt in DTYPES:
        v = raw.get(dt) if isinstance(raw, dict) else None
        if v is not None:
            peaks[dt] = _number(peaks_p, f"chips.{d['chip']}.{dt}", v, 1.0)
    if not peaks:
        raise PolicyError(f"key 'chips.{d['chip']}': no peak FLOP/s for any of {list(DTYPES)}", path=peaks_p)
    if spec_p.suffix == ".py":
        return MfuSpec(spec_path=str(spec_p), chip=str(d["chip"]), peaks=peaks, peaks_path=str(peaks_p),
                       python=str(spec_p), default_dtype=dd)
    sdoc = _load_yaml(path, "mfu.spec", spec_p)
    fams = sdoc.get("families") if isinstance(sdoc, dict) else None
    if not isinstance(fams, list) or not fams:
        raise PolicyError("key 'families': a FLOPs spec needs a non-empty list of {match, flops}", path=spec_p)
    rules = []
    for i, f in enumerate(fams):
        key = f"families[{i}]"
        if not isinstance(f, dict) or "match" not in f or "flops" not in f:
            raise PolicyError(f"key '{key}': needs 'match' and 'flops'", path=spec_p)
        if f["flops"] not in FLOPS_BUILTINS:
            raise PolicyError(f"key '{key}.flops': unknown formula {f['flops']!r} (built in: {list(FLOPS_BUILTINS)}; "
                              f"use a Python spec with flops(row) for others)", path=spec_p)
        rules.append(FlopsRule(parse_matcher(spec_p, f"{key}.match", f["match"], f["flops"], i), f["flops"]))
    return MfuSpec(spec_path=str(spec_p), chip=str(d["chip"]), peaks=peaks, peaks_path=str(peaks_p),
                   rules=tuple(rules), default_dtype=dd)


@lru_cache(maxsize=8)
def load_flops_function(py_path: str):
    """Import a Python FLOPs spec and return its ``flops(row)`` (cached per path).

    Raises:
        PolicyError: the file cannot be imported or defines no callable ``flops``.
    """
    spec = importlib.util.spec_from_file_location(f"perfgate_flops_{abs(hash(py_path))}", py_path)
    if spec is None or spec.loader is None:
        raise PolicyError("cannot import the FLOPs spec", path=py_path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # a user file: any error is a spec error, SystemExit too
        raise PolicyError(f"the FLOPs spec failed to import: {type(e).__name__}: {e}", path=py_path) from None
    fn = getattr(mod, "flops", None)
    if not callable(fn):
        raise PolicyError("the FLOPs spec defines no function flops(row) -> float", path=py_path)
    return fn


def parse_suggestions(path, items) -> tuple:
    """The ``suggestions:`` rule table -> tuple of rules (id, priority P0/P1/P2, text, the metric
    and threshold or consecutive-run condition that fires it). Informational, never gated.

    Raises:
        PolicyError: unknown key, bad priority, a rule with no condition.
    """
    out = []
    allowed = {"id", "priority", "text", "metric", "labels", "view", "above", "below", "consecutive",
               "phase", "min_run"}
    for i, s in enumerate(items or []):
        key = f"suggestions[{i}]"
        if not isinstance(s, dict):
            raise policy_error(path, key, "must be a mapping")
        unknown = set(s) - allowed
        if unknown:
            raise policy_error(path, f"{key}.{sorted(unknown)[0]}", f"unknown field (allowed: {sorted(allowed)})")
        for need in ("id", "priority", "text"):
            if need not in s:
                raise policy_error(path, key, f"needs '{need}'")
        if s["priority"] not in PRIORITIES:
            raise policy_error(path, f"{key}.priority", f"must be one of {list(PRIORITIES)}, got {s['priority']!r}")
        has_metric = "metric" in s
        if has_metric == ("consecutive" in s):
            raise policy_error(path, key, "needs exactly one of 'metric' (with above/below) or 'consecutive'")
        kw = {"id": str(s["id"]), "priority": s["priority"], "text": str(s["text"])}
        if has_metric:
            if ("above" in s) == ("below" in s):
                raise policy_error(path, key, "a metric condition needs exactly one of 'above' or 'below'")
            for b in ("above", "below"):
                if b in s:
                    kw[b] = _number(path, f"{key}.{b}", s[b], float("-inf"))
            labels = s.get("labels") or {}
            if not isinstance(labels, dict):
                raise policy_error(path, f"{key}.labels", "must be a mapping of label -> value")
            kw.update(metric=str(s["metric"]), labels={str(k): str(v) for k, v in labels.items()},
                      view=str(s.get("view", "p50")))
        else:
            kw["consecutive"] = parse_matcher(path, f"{key}.consecutive", s["consecutive"], s["id"], i)
            kw["phase"] = None if s.get("phase") is None else str(s["phase"])
            mr = s.get("min_run", 2)
            if not isinstance(mr, int) or isinstance(mr, bool) or mr < 2:
                raise policy_error(path, f"{key}.min_run", f"must be an integer >= 2, got {mr!r}")
            kw["min_run"] = mr
        out.append(SuggestionRule(**kw))
    ids = [r.id for r in out]
    dup = sorted({x for x in ids if ids.count(x) > 1})
    if dup:
        raise policy_error(path, "suggestions", f"duplicate id {dup[0]!r}")
    return tuple(out)
