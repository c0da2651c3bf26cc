"""Metrics: pure functions over ingested tables (no I/O, inputs never mutated)."""
