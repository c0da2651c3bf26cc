"""Fingerprints + policy -> verdicts: the per-metric rules (:mod:`.rules`), the repeated-capture
statistics (:mod:`.stats`), kernel-family attribution (:mod:`.attribution`), the kernel-family
comparison (:mod:`.families`) and tolerance calibration (:mod:`.calibrate`)."""
from perfgate.compare.rules import compare_fingerprints, config_notes, incompatibility, summarize  # noqa: F401

__all__ = ["compare_fingerprints", "config_notes", "incompatibility", "summarize"]
