"""Run history: the SQLite store of fingerprints per branch (:mod:`.store`) and change-point
detection over its series (:mod:`.changepoints`)."""
