"""Kernel family identity: a family is a kernel name with its volatile parts removed.

Volatile parts change between builds or tuning runs of the same kernel, not with the work it
does. The policy lists them (``fingerprint.family_volatile``, applied in order, each until the
name stops changing) before the numeric suffix (``fingerprint.family_suffix``):

* numeric suffixes — ``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``, ``trans_TransData_12``
  -> ``trans_TransData`` (``family_suffix``);
* an inductor build hash after the kernel index (``TORCHINDUCTOR_HASH_IN_KERNEL_NAMES=1``,
  pytorch PR #138645) — ``triton_poi_fused_embedding_1_cemi5yor3uh3muxgzlaoqs5wrpjk7q6xod6dgmymw2y5xd6wk3sk``
  -> ``triton_poi_fused_embedding``;
* Triton / aiter constexpr configs appended as ``_KEY_value`` (triton PR #6164, aiter
  ``make_kernel_repr``) — ``_attn_fwd_HEAD_DIM_64_BLOCK_M_128_BLOCK_N_32_STAGE_3`` -> ``_attn_fwd``.

A leaf module (imports only ``errors``), so :mod:`perfgate.policy` can load it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from perfgate.errors import PolicyError


@dataclass(frozen=True)
class FamilyRules:
    """Volatile-part rules, used wherever a compiled ``family_suffix`` regex was: ``sub("", name)``
    gives the family, ``pattern`` is the text that identifies the rules (a fingerprint config
    facet: fingerprints under other rules are incomparable)."""
    volatile: tuple        # ((kind, re.Pattern), ...)
    suffix: re.Pattern

    @property
    def pattern(self) -> str:
        if not self.volatile:
            return self.suffix.pattern
        return "; ".join(f"{k}: {p.pattern}" for k, p in self.volatile) + f"; suffix: {self.suffix.pattern}"

    def sub(self, repl: str, name: str) -> str:
        for _, rx in self.volatile:
            for _ in range(32):           # until the name stops changing; names are short
                new = rx.sub(repl, name)
                if new == name or not new:
                    break
                name = new
        return self.suffix.sub(repl, name)


def family_rules(path, suffix: re.Pattern, volatile) -> re.Pattern | FamilyRules:
    """``suffix`` alone when the policy lists no volatile parts, else a :class:`FamilyRules`.

    Raises:
        PolicyError: ``fingerprint.family_volatile`` is not a list of ``{kind, regex}`` mappings,
            or a regex does not compile (the message names the key).
    """
    if not volatile:
        return suffix
    if not isinstance(volatile, list):
        raise PolicyError("key 'fingerprint.family_volatile': must be a list of {kind, regex}", path=path)
    rules = []
    for i, v in enumerate(volatile):
        key = f"fingerprint.family_volatile[{i}]"
        if not isinstance(v, dict) or set(v) != {"kind", "regex"} or not isinstance(v.get("regex"), str):
            raise PolicyError(f"key '{key}': must be a mapping with exactly 'kind' and 'regex'", path=path)
        try:
            rules.append((str(v["kind"]), re.compile(v["regex"])))
        except re.error as e:
            raise PolicyError(f"key '{key}.regex': invalid regular expression {v['regex']!r}: {e}", path=path) from None
    return FamilyRules(tuple(rules), suffix)
