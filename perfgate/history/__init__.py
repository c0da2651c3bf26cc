"""Run history: the SQLite store of fingerprints per branch (:mod:`.store`) and change-point
detection over its series (:mod:`.changepoints`), and the trend orchestration that picks the
metrics to watch and runs change points per job configuration (:mod:`.trend`)."""
