"""The application layer the CLI drives.

- :mod:`perfgate.app.run`: fingerprint capture paths (process pool, dask fan-out);
- :mod:`perfgate.app.gate`: the jobs: save a baseline, check, record history, calibrate;
- :mod:`perfgate.app.sweep`: fingerprint every capture under a folder into one CSV.
"""
