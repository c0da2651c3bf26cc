"""History in commit order (case Q07): runs are ordered by their commits, not by when they were
recorded, so back-filled runs (c7..c12 recorded first, then c1..c6) read c1..c12.

The order of two commits comes from, in this order of preference:

1. **ancestry** — ``git rev-list --topo-order`` in a git checkout that holds every recorded
   commit (``cwd``, default the working folder): a commit always comes after its ancestors;
2. **commit time** — the committer time stored with the run at record time (provenance
   ``commit_time``, ISO 8601, see :func:`perfgate.ci_env.commit_facts`), compared in UTC.

Runs without a commit, or whose commit has neither, keep their place in record order; the runs
with a commit are reordered among themselves in the slots they occupy (ties — one commit
recorded several times — keep record order).
"""
from __future__ import annotations

import datetime as _dt
import subprocess

import numpy as np
import pandas as pd


def _git(args, cwd, stdin=None, timeout=30):
    try:
        r = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def ancestry_positions(commits, cwd=None) -> dict | None:
    """``{commit: position}`` in topological order (0 = oldest; a descendant is always after its
    ancestors), or None unless ``cwd`` is a git checkout holding every commit of ``commits``.

    Reads ``git cat-file --batch-check`` (are they commits, their full SHAs) and ``git rev-list
    --topo-order`` from those commits, stopped as soon as every one has been seen."""
    commits = sorted({c for c in commits if c})
    if not commits:
        return None
    out = _git(["cat-file", "--batch-check=%(objectname) %(objecttype)"], cwd, stdin="\n".join(commits) + "\n")
    if out is None:
        return None
    full = {}
    for c, line in zip(commits, out.splitlines()):
        parts = line.split()
        if len(parts) != 2 or parts[1] != "commit":
            return None  # unknown here (another clone, a shallow one): fall back to commit times
        full[c] = parts[0]
    want, seen = set(full.values()), {}
    try:
        proc = subprocess.Popen(["git", "rev-list", "--topo-order", *sorted(want)], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    try:
        for i, line in enumerate(proc.stdout):  # newest first
            sha = line.strip()
            if sha in want:
                seen[sha] = i
                if len(seen) == len(want):
                    break
    finally:
        proc.kill()
        proc.wait()
    if len(seen) != len(want):
        return None
    return {c: -seen[f] for c, f in full.items()}


def _utc_seconds(text) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def commit_keys(commit_times: dict, cwd=None) -> dict:
    """``{commit: sort key}`` for ``{commit: stored commit_time or None}``: ancestry positions
    when git knows every commit, else the commit times (UTC seconds) that are known."""
    anc = ancestry_positions(commit_times, cwd)
    if anc is not None:
        return {c: float(v) for c, v in anc.items()}
    keys = {c: _utc_seconds(t) for c, t in commit_times.items()}
    return {c: k for c, k in keys.items() if k is not None}


def in_commit_order(df: pd.DataFrame, keys: dict, commit_col: str = "commit") -> pd.DataFrame:
    """``df`` (rows in record order) reordered by ``keys`` of its ``commit_col``; rows without a
    key keep their positions, ties keep record order. Index reset to 0..n-1."""
    if len(df) < 2 or not keys:
        return df.reset_index(drop=True)
    k = [keys.get(c) if isinstance(c, str) else None for c in df[commit_col]]
    slots = np.array([i for i, v in enumerate(k) if v is not None], dtype=int)
    if len(slots) < 2:
        return df.reset_index(drop=True)
    order = np.arange(len(df))
    order[slots] = sorted(slots, key=lambda i: (k[i], i))
    return df.iloc[order].reset_index(drop=True)
