"""perfgate: a CI performance gate and regression tracker for Ascend NPU profiling runs.

Layers (imports point one way only)::

    errors, terms <- model <- ingest <- metrics <- compare (+ policy)
                  <- report, store <- cli

Everything the CLI does is callable as a library::

    from perfgate import load_capture, load_policy, fingerprint_capture, compare_fingerprints
"""
from perfgate.version import __version__  # noqa: E402

from perfgate.errors import (  # noqa: E402
    PerfgateError, UsageError, PolicyError, InvalidCaptureError, NoBaselineError, StoreError,
)

__all__ = [
    "__version__", "PerfgateError", "UsageError", "PolicyError", "InvalidCaptureError",
    "NoBaselineError", "StoreError", "load_capture", "load_policy", "fingerprint_capture",
    "compare_fingerprints",
]


def __getattr__(name):  # lazy re-exports keep `import perfgate` cheap and cycle-free
    if name == "load_capture":
        from perfgate.ingest import load_capture
        return load_capture
    if name == "load_policy":
        from perfgate.policy import load_policy
        return load_policy
    if name == "fingerprint_capture":
        from perfgate.metrics.fingerprint import fingerprint_capture
        return fingerprint_capture
    if name == "compare_fingerprints":
        from perfgate.compare import compare_fingerprints
        return compare_fingerprints
    raise AttributeError(name)
