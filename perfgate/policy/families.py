"""Kernel family identity: a family is a kernel name with its volatile parts removed.

Volatile parts change between builds or tuning runs of the same kernel, not with the work it
does. The policy lists them (``fingerprint.family_volatile``) and the numeric suffix
(``fingerprint.family_suffix``); one pass applies every volatile rule in order, then the suffix
strip, and passes repeat until the name stops changing, so a volatile part followed by a
numeric suffix (a hash, then the row's ``_12``) goes as well as one at the end:

* numeric suffixes — ``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``, ``trans_TransData_12``
  -> ``trans_TransData`` (``family_suffix``);
* an inductor build hash after the kernel index (``TORCHINDUCTOR_HASH_IN_KERNEL_NAMES=1``,
  pytorch PR #138645) — ``triton_poi_fused_embedding_1_cemi5yor3uh3muxgzlaoqs5wrpjk7q6xod6dgmymw2y5xd6wk3sk``
  -> ``triton_poi_fused_embedding``, and with a numeric suffix after the hash
  (``triton_poi_fused_x_0_c<51 base32 chars>_12`` -> ``triton_poi_fused_x``);
* a hex content hash (16 or more hex digits with at least one digit and one letter a-f, so
  no word and no plain number is taken for one) — ``Name_cd18fc9f...79565`` -> ``Name``;
* Triton / aiter constexpr configs appended as ``_KEY_value`` (triton PR #6164, aiter
  ``make_kernel_repr``) — ``_attn_fwd_HEAD_DIM_64_BLOCK_M_128_BLOCK_N_32_STAGE_3`` -> ``_attn_fwd``,
  ``Name_BLOCK_M_128_BLOCK_N_64_num_warps_4`` -> ``Name``,
  ``Name_GRID_MN_64_cache_modifier_CG_activation_NONE`` -> ``Name``. At least two groups; the
  first has an upper-case key (or is a known lower-case Triton / aiter key such as
  ``num_warps`` or ``cache_modifier``), because a lower-case snake_case key cannot be told from
  the end of a lower-case kernel name; lower-case keys after it are read as keys (their start
  is fixed by the value before them). ``MC2_ALLGATHER_MATMUL_4`` (one group) keeps its words.

A leaf module (imports only ``errors``), so :mod:`perfgate.policy` can load it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from perfgate.errors import PolicyError


#: the last part of :attr:`FamilyRules.pattern`: the rules run in passes with the suffix strip
#: until the name stops changing (fingerprints whose families were formed otherwise differ in
#: this facet, so their per-kernel metrics are not compared)
ITERATED = "passes with the suffix until unchanged"


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
        return ("; ".join(f"{k}: {p.pattern}" for k, p in self.volatile) + f"; suffix: {self.suffix.pattern}"
                + "; " + ITERATED)

    def sub(self, repl: str, name: str) -> str:
        """The family of ``name``: passes of (every volatile rule in order, then the suffix
        strip) until a pass changes nothing. A step that would leave an empty name is skipped,
        so the family is never empty."""
        for _ in range(64):               # names are short; each changing pass removes text
            before = name
            for _, rx in self.volatile:
                name = rx.sub(repl, name) or name
            name = self.suffix.sub(repl, name) or name
            if name == before:
                break
        return name


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
