"""The built-in policy files, shipped inside the package as package data.

``perfgate/policies/`` holds ``default.yaml`` (the default policy), ``segments.yaml`` (the
model-structure knowledge) and ``mfu/matmul.yaml`` / ``mfu/peaks.yaml`` (the MFU FLOPs spec and
the chips' peak FLOP/s). They are the one copy: a checkout, an editable install and a wheel all
read them through :mod:`importlib.resources` (``pyproject.toml`` lists them as package data).
A policy file names a built-in file with the ``perfgate:`` prefix, e.g.
``mfu: {spec: perfgate:mfu/matmul.yaml, peaks: perfgate:mfu/peaks.yaml, chip: Ascend910}``.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

PREFIX = "perfgate:"


def builtin_file(*parts: str) -> Path:
    """Path of a built-in policy file, e.g. ``builtin_file("mfu", "peaks.yaml")``.

    The folder is found from ``perfgate.policy``, the regular package this module belongs to,
    never from the top-level name ``perfgate``: run from a folder that holds a directory named
    ``perfgate`` (a clone's parent) with perfgate installed editable (found by a meta-path
    finder after the path finder), ``perfgate`` itself is that directory as a namespace package,
    and ``resources.files("perfgate")`` is a MultiplexedPath over it (whose ``joinpath`` takes one
    part on Python 3.10 / 3.11, and which would not reach the policies anyway). The package is installed as
    files on disk (pip never installs it zipped), so the resource is an ordinary path; whether
    it exists is for the caller to check (its error names it)."""
    policies = Path(str(resources.files(__package__))).parent / "policies"
    return policies.joinpath(*parts)


def resolve_ref(base_file, ref) -> Path:
    """A file named in a policy: ``perfgate:REL`` = the built-in file REL; an absolute path as
    is; anything else relative to the folder of ``base_file`` (the policy file naming it)."""
    s = str(ref)
    if s.startswith(PREFIX):
        return builtin_file(*Path(s[len(PREFIX):]).parts)
    p = Path(s)
    return p if p.is_absolute() else Path(base_file).resolve().parent / p
