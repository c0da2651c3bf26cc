"""The package version: one source, read by ``perfgate --version``, fingerprints and sweep caches."""
__version__ = "0.1.0"
