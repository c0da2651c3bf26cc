"""The policy: what is gated and how (``perfgate/policies/default.yaml`` and user files), the operator
spec (categories, phases, MFU, suggestions), the segment knowledge file, and the YAML reader
they share. Parsed into frozen objects; every error names the file and the key."""
from perfgate.policy.load import (  # noqa: F401
    DEFAULT_POLICY, CategoryRule, Policy, Rule, Tolerance, load_policy, significant,
)

__all__ = ["DEFAULT_POLICY", "CategoryRule", "Policy", "Rule", "Tolerance", "load_policy", "significant"]
