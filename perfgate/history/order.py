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

**A wrong clock.** A commit cannot be recorded before it was made: a committer time more than
:data:`CLOCK_SLACK_S` after the first recording of that commit (a committer's clock years ahead)
is not used, or that commit would sort as the newest of every series until the clock catches up
(its "previous" run, rolling baseline and change points all wrong). Such a commit is placed
right after the commit recorded just before it (record order; before the first one recorded
after it when it was recorded first), and :func:`wrong_clocks` names it so the commands can say
so. Ancestry, when git knows every commit, does not read commit times and needs no such rule.
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


#: seconds a committer time may lie after the first recording of its commit (clocks of the
#: committer and of the recording runner differ a little) before it counts as a wrong clock
CLOCK_SLACK_S = 600.0


def wrong_clocks(commit_times: dict, record_order) -> dict:
    """``{commit: (stored commit_time, first recorded_at)}`` for every commit whose committer
    time (UTC) lies more than :data:`CLOCK_SLACK_S` after the first run of it was recorded.

    ``record_order``: ``[(commit, recorded_at ISO 8601)]`` of the runs in record order."""
    first: dict = {}
    for c, r in record_order or ():
        if c and c not in first:
            first[c] = r
    out = {}
    for c, t in commit_times.items():
        ct, rt = _utc_seconds(t), _utc_seconds(first.get(c))
        if ct is not None and rt is not None and ct > rt + CLOCK_SLACK_S:
            out[c] = (t, first[c])
    return out


def commit_keys(commit_times: dict, cwd=None, record_order=None) -> dict:
    """``{commit: sort key}`` for ``{commit: stored commit_time or None}``: ancestry positions
    when git knows every commit, else the commit times (UTC seconds) that are known.

    ``record_order`` (``[(commit, recorded_at)]`` of the runs in record order, as
    :func:`wrong_clocks` reads it): a commit whose time is a wrong clock gets the key of the
    commit with a usable time recorded just before it (1 ms later, so after every run of that
    commit), or when none was, 1 ms before the key of the first one recorded after it; none at
    all: no key (its runs keep their place in record order)."""
    return commit_order(commit_times, cwd, record_order)[0]


def commit_order(commit_times: dict, cwd=None, record_order=None) -> tuple[dict, dict]:
    """``(commit_keys(...), wrong_clocks(...))``; the second is empty when ancestry orders the
    commits (commit times are then not read)."""
    anc = ancestry_positions(commit_times, cwd)
    if anc is not None:
        return {c: float(v) for c, v in anc.items()}, {}
    keys = {c: _utc_seconds(t) for c, t in commit_times.items()}
    bad = wrong_clocks(commit_times, record_order)
    if bad:
        for c in bad:
            keys[c] = None
        prev, pending = None, []
        for c in dict.fromkeys(c for c, _ in record_order if c in keys):   # commits by first recording
            if c in bad:
                if prev is not None:
                    keys[c] = prev + 1e-3
                else:
                    pending.append(c)
            elif keys[c] is not None:
                prev = keys[c]
                for p in pending:
                    keys[p] = prev - 1e-3
                pending = []
    return {c: k for c, k in keys.items() if k is not None}, bad


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
